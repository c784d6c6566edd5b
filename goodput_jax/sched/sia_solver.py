"""Sia's assignment solver: a multiple-choice knapsack with per-type capacities, in JAX.

Maximises ``sum_j gain[j, c_j]`` with at most one configuration per job, subject to the
GPUs of each type, in one jitted XLA computation (see :mod:`goodput_jax.sched.sia` for
the round it solves and the method: Lagrangian prices, a vectorised repair, greedy
local search from several starts, a 2-exchange search on small problems).

Example:
    >>> g = np.array([[1.0, 3.0], [1.0, 2.5]])
    >>> solve_assignment(g, np.array([0, 0]), np.array([1, 2]), np.array([3.0]))
    array([1, 0])
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, NamedTuple, TypedDict, overload

import jax
import jax.numpy as jnp
import numpy as np

from goodput_jax.model.buckets import bucket

__all__ = ["SolverInfo", "SolverOptions", "solve_assignment"]

_NEG = -1e30

# (choice, usage, round, moved): the carry of the local searches' while loops.
_LoopState = tuple[jax.Array, jax.Array, int | jax.Array, jax.Array]


class _Moves(NamedTuple):
    """Every move ``j -> k`` of :func:`_moves`, as dense ``[J, K1]`` arrays."""

    delta: jax.Array  # gain change
    per_gpu: jax.Array  # gain change per extra (weighted) GPU
    ok: jax.Array  # feasible and improving
    need: jax.Array  # GPUs needed on the type of k
    kt: jax.Array  # [K1] each configuration's type


class SolverInfo(TypedDict):
    """What :func:`solve_assignment` reports with ``return_info=True`` (a plain dict).

    Keys:
        start_gains: total gain reached from each search start.
        prices: the final Lagrangian price per GPU type.
    """

    start_gains: tuple[float, ...]
    prices: tuple[float, ...]


# --------------------------------------------------------------------------- #
# The solver: a multiple-choice knapsack with per-type capacities, in JAX.
# --------------------------------------------------------------------------- #


def _usage(choice: jax.Array, use: jax.Array) -> jax.Array:
    return use[choice].sum(0)


def _repair(choice: jax.Array, gain: jax.Array, use: jax.Array, cap: jax.Array,
            fixed: jax.Array) -> jax.Array:
    """Per type, keep the jobs with the highest gain per GPU that fit; drop the rest."""
    J = choice.shape[0]
    none = use.shape[0] - 1
    u = use[choice]  # [J, T]
    g_tot = u.sum(-1)
    ty = jnp.argmax(u, -1)
    g_chosen = jnp.take_along_axis(gain, choice[:, None], 1)[:, 0]
    eff = jnp.where(fixed, jnp.inf, g_chosen / jnp.maximum(g_tot, 1.0))

    def keep_type(t: jax.Array, c: jax.Array) -> jax.Array:
        on = (ty == t) & (g_tot > 0)
        order = jnp.argsort(jnp.where(on, -eff, jnp.inf))
        cum = jnp.cumsum(jnp.where(on, u[:, t], 0.0)[order])
        ok_sorted = cum <= c + 1e-3
        ok = jnp.zeros(J, bool).at[order].set(ok_sorted)
        return ok | ~on

    keep = jax.vmap(keep_type)(jnp.arange(use.shape[1]), cap).all(0)
    return jnp.where(keep | fixed, choice, none)


def _moves(choice: jax.Array, usage: jax.Array, gain: jax.Array, use: jax.Array,
           cap: jax.Array, movable: jax.Array, weight: jax.Array) -> _Moves:
    """Every move ``j -> k`` as dense [J, K1] arrays: gain change, gain per extra (weighted)
    GPU, feasibility, GPUs needed, and each configuration's type. A configuration uses one
    type, so a move only adds GPUs on the type of ``k`` (net of what ``j`` frees there) and
    only frees them elsewhere."""
    kg = use.sum(-1)  # [K1] GPUs of each configuration
    kt = jnp.argmax(use, -1)  # [K1] its type (the "none" column: type 0, 0 GPUs)
    cur = jnp.take_along_axis(gain, choice[:, None], 1)[:, 0]
    same = kt[None, :] == kt[choice][:, None]
    need = kg[None, :] - jnp.where(same, kg[choice][:, None], 0.0)  # [J, K1]
    free = cap - usage
    feas = need <= free[kt][None, :] + 1e-3
    delta = gain - cur[:, None]
    extra = jnp.maximum(need, 0.0) * weight[kt][None, :]
    ok = feas & (delta > 1e-7) & movable[:, None] & (gain > _NEG / 2)
    per_gpu = jnp.where(extra > 1e-6, delta / jnp.maximum(extra, 1e-6), delta * 1e6)
    return _Moves(delta, per_gpu, ok, need, kt)


def _until_still(body: Callable[[_LoopState], _LoopState], choice: jax.Array,
                 usage: jax.Array, limit: int | jax.Array) -> jax.Array:
    """Apply ``body((choice, usage, it, moved)) -> same`` while it moves and fewer than
    ``limit`` rounds ran (a ``lax.while_loop``); the final choice."""
    def cond(state: _LoopState) -> jax.Array:
        _, _, it, moved = state
        return moved & (it < limit)

    init: _LoopState = (choice, usage, 0, jnp.array(True))
    return jax.lax.while_loop(cond, body, init)[0]


def _fill(choice: jax.Array, gain: jax.Array, use: jax.Array, cap: jax.Array,
          movable: jax.Array, weight: jax.Array, mode: jax.Array,
          max_moves: int | jax.Array) -> jax.Array:
    """Greedy local search: apply the best feasible improving move until none is left.

    mode 0 ranks moves by gain per extra (weighted) GPU, mode 1 by gain.
    """
    def body(state: _LoopState) -> _LoopState:
        choice, usage, it, _ = state
        delta, ratio, ok, _, _ = _moves(choice, usage, gain, use, cap, movable, weight)
        score = jnp.where(mode == 0, ratio, delta)
        score = jnp.where(ok, score, -jnp.inf)
        flat = jnp.argmax(score)
        j, k = flat // gain.shape[1], flat % gain.shape[1]
        moved = ok.reshape(-1)[flat]
        new_choice = jnp.where(moved, choice.at[j].set(k), choice)
        new_usage = jnp.where(moved, usage - use[choice[j]] + use[k], usage)
        return new_choice, new_usage, it + 1, moved

    return _until_still(body, choice, _usage(choice, use), max_moves)


def _pair_search(choice: jax.Array, gain: jax.Array, use: jax.Array, cap: jax.Array,
                 movable: jax.Array, max_rounds: int) -> jax.Array:
    """2-exchange local search: the best pair of moves (j -> k, i -> l) that improves the
    total and fits; single moves are the pairs whose second move keeps its job in place.
    Dense over ``[J, K1, J, K1]``: only used on small problems."""
    J, K1 = gain.shape
    ok_cell = (gain > _NEG / 2) & movable[:, None]

    def body(state: _LoopState) -> _LoopState:
        choice, usage, it, _ = state
        cur = jnp.take_along_axis(gain, choice[:, None], 1)[:, 0]
        cur_use = use[choice]  # [J, T]
        d1 = use[None, :, :] - cur_use[:, None, :]  # [J, K1, T]
        g1 = jnp.where(ok_cell, gain - cur[:, None], -jnp.inf)  # [J, K1]
        total_use = usage[None, None, None, None, :] + d1[:, :, None, None, :] \
            + d1[None, None, :, :, :]
        feas = jnp.all(total_use <= cap + 1e-3, -1)
        distinct = (jnp.arange(J)[:, None] != jnp.arange(J)[None, :])[:, None, :, None]
        keep_i = (jnp.arange(K1)[None, :] == choice[:, None])[None, None]  # i stays
        score = g1[:, :, None, None] + jnp.where(keep_i, 0.0, g1[None, None])
        ok = feas & (distinct | keep_i) & (score > 1e-7)
        score = jnp.where(ok, score, -jnp.inf).reshape(-1)
        flat = jnp.argmax(score)
        moved = jnp.isfinite(score[flat])
        j, rest = flat // (K1 * J * K1), flat % (K1 * J * K1)
        k, rest = rest // (J * K1), rest % (J * K1)
        i, m = rest // K1, rest % K1
        new = choice.at[j].set(k)
        new = jnp.where(i != j, new.at[i].set(m), new)
        new = jnp.where(moved, new, choice)
        return new, _usage(new, use), it + 1, moved

    return _until_still(body, choice, _usage(choice, use), max_rounds)


def _parallel_fill(choice: jax.Array, gain: jax.Array, use: jax.Array, cap: jax.Array,
                   movable: jax.Array, weight: jax.Array, max_rounds: int) -> jax.Array:
    """Greedy in parallel: every job proposes its best move (by gain per extra weighted
    GPU); moves are taken best first while the per-type cumulative extra GPUs fit (the
    best one always). Few rounds instead of one round per move on large problems."""
    J, _K1 = gain.shape

    def body(state: _LoopState) -> _LoopState:
        choice, usage, it, _ = state
        _, ratio, ok, need, kt = _moves(choice, usage, gain, use, cap, movable, weight)
        score = jnp.where(ok, ratio, -jnp.inf)
        best_k = jnp.argmax(score, -1)  # [J]
        best_s = jnp.take_along_axis(score, best_k[:, None], 1)[:, 0]
        has = jnp.isfinite(best_s)
        order = jnp.argsort(-jnp.where(has, best_s, -jnp.inf))
        add_g = jnp.maximum(jnp.take_along_axis(need, best_k[:, None], 1)[:, 0], 0.0)
        add = jnp.where(has[:, None] & (kt[best_k][:, None] == jnp.arange(cap.shape[0])),
                        add_g[:, None], 0.0)  # [J, T]
        cum = jnp.cumsum(add[order], 0)  # [J, T] in order
        fits_sorted = jnp.all(cum <= (cap - usage) + 1e-3, -1) & has[order]
        take = jnp.zeros(J, bool).at[order].set(fits_sorted)
        take = take | ((jnp.arange(J) == order[0]) & has[order[0]])  # the best always fits
        new_choice = jnp.where(take, best_k, choice)
        moved = jnp.any(take)
        return new_choice, _usage(new_choice, use), it + 1, moved

    return _until_still(body, choice, _usage(choice, use), max_rounds)


def _total(choice: jax.Array, gain: jax.Array) -> jax.Array:
    return jnp.take_along_axis(gain, choice[:, None], 1)[:, 0].sum()


@functools.partial(jax.jit, static_argnames=("dual_steps", "pair_rounds",
                                             "parallel_rounds", "few_starts"))
def _solve(gain: jax.Array, use: jax.Array, cap: jax.Array, fixed_choice: jax.Array,
           prev_choice: jax.Array, dual_steps: int = 24, max_moves: int | jax.Array = 256,
           pair_rounds: int = 0, parallel_rounds: int = 0,
           few_starts: bool = False) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Best choice per job (index into configs; the last column is "none")."""
    _J, K1 = gain.shape
    none = K1 - 1
    fixed = fixed_choice >= 0
    movable = ~fixed
    base = jnp.where(fixed, fixed_choice, none)
    # Capacity left for the movable jobs.
    cap_left = cap - _usage(base, use)
    gain_m = jnp.where(movable[:, None], gain, jnp.where(
        jnp.arange(K1)[None, :] == none, 0.0, _NEG))
    gpus = use.sum(-1)  # [K1]
    valid = gain_m > _NEG / 2
    per_gpu = jnp.where(valid & (gpus[None, :] > 0) & (gain_m > 0),
                        gain_m / jnp.maximum(gpus[None, :], 1.0), 0.0)
    scale = jnp.maximum(per_gpu.sum() / jnp.maximum((per_gpu > 0).sum(), 1), 1e-6)

    # 1. Lagrangian relaxation of the per-type capacities (projected subgradient).
    def dual_step(mu: jax.Array, i: jax.Array) -> tuple[jax.Array, jax.Array]:
        price = use @ mu  # [K1]
        adj = jnp.where(valid, gain_m - price[None, :], -jnp.inf)
        pick = jnp.argmax(adj, -1)
        usage = _usage(pick, use)
        step = scale / jnp.sqrt(i + 1.0)
        mu = jnp.maximum(mu + step * (usage - cap_left) / jnp.maximum(cap_left, 1.0), 0.0)
        return mu, pick

    mu, picks = jax.lax.scan(dual_step, jnp.zeros(use.shape[1], gain.dtype),
                             jnp.arange(dual_steps, dtype=gain.dtype))
    dual_pick = jnp.where(fixed, fixed_choice, picks[-1])
    mu_w = mu / jnp.maximum(mu.mean(), 1e-12)
    mu_w = jnp.where(mu.max() > 0, 0.5 + mu_w, jnp.ones_like(mu))

    # 2. Starts: empty (two rankings), repaired dual solution, repaired previous allocation.
    prev_ok = (prev_choice >= 0) & (jnp.take_along_axis(
        gain_m, jnp.maximum(prev_choice, 0)[:, None], 1)[:, 0] > _NEG / 2)
    prev = jnp.where(fixed, fixed_choice, jnp.where(prev_ok, prev_choice, none))
    mid_pick = jnp.where(fixed, fixed_choice, picks[dual_steps // 2])
    ones = jnp.ones_like(mu)
    dual_start = _repair(dual_pick, gain_m, use, cap, fixed)
    prev_start = _repair(prev, gain_m, use, cap, fixed)
    if few_starts:  # large problems: empty, dual, previous (ranked by gain per GPU)
        starts = jnp.stack([base, dual_start, prev_start])
        modes = jnp.array([0, 0, 0])
        weights = jnp.stack([ones, mu_w, ones])
    else:
        starts = jnp.stack([base, base, dual_start, dual_start,
                            _repair(mid_pick, gain_m, use, cap, fixed), prev_start])
        modes = jnp.array([0, 1, 0, 1, 0, 0])
        weights = jnp.stack([ones, ones, mu_w, ones, mu_w, ones])

    # 3. Greedy local search from every start, vmapped; keep the best. Large problems
    #    first take moves in parallel batches, then finish one move at a time.
    def fill_one(c: jax.Array, w: jax.Array, m: jax.Array) -> jax.Array:
        if parallel_rounds:
            c = _parallel_fill(c, gain_m, use, cap, movable, w, parallel_rounds)
        return _fill(c, gain_m, use, cap, movable, w, m, max_moves)

    finals = jax.vmap(fill_one)(starts, weights, modes)
    totals = jax.vmap(lambda c: _total(c, gain_m))(finals)
    best = finals[jnp.argmax(totals)]
    if pair_rounds:
        best = _pair_search(best, gain_m, use, cap, movable, pair_rounds)
    return best, totals, mu


@dataclass(frozen=True, kw_only=True)
class SolverOptions:
    """How hard :func:`solve_assignment` searches.

    Attributes:
        dual_steps: subgradient steps of the Lagrangian relaxation (>= 1).
        pair_cells: problems with at most this many padded (job, configuration)
            cells finish with a 2-exchange local search (pairs of moves).
        pair_rounds: most pair moves applied (>= 0).
        sequential_cells: problems up to this size take greedy moves one at a time
            (up to ``4 * jobs + 16``); larger ones take them in parallel batches
            (at most 64 rounds), then at most 64 single moves, from 3 starts instead of 6.

    Example:
        >>> SolverOptions(dual_steps=0)
        Traceback (most recent call last):
        ...
        ValueError: dual_steps (0) must be >= 1
    """

    dual_steps: int = 24
    pair_cells: int = 256
    pair_rounds: int = 8
    sequential_cells: int = 1024

    def __post_init__(self) -> None:
        for name, least in (("dual_steps", 1), ("pair_cells", 0), ("pair_rounds", 0),
                            ("sequential_cells", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError(f"{name} ({value!r}) must be an int")
            if value < least:
                raise ValueError(f"{name} ({value!r}) must be >= {least}")


@overload
def solve_assignment(gain: np.ndarray, config_type: np.ndarray, config_gpus: np.ndarray,
                     capacity: np.ndarray, fixed: np.ndarray | None = None,
                     previous: np.ndarray | None = None, *,
                     options: SolverOptions | None = None,
                     return_info: Literal[False] = False) -> np.ndarray: ...


@overload
def solve_assignment(gain: np.ndarray, config_type: np.ndarray, config_gpus: np.ndarray,
                     capacity: np.ndarray, fixed: np.ndarray | None = None,
                     previous: np.ndarray | None = None, *,
                     options: SolverOptions | None = None,
                     return_info: Literal[True]) -> tuple[np.ndarray, SolverInfo]: ...


@overload
def solve_assignment(gain: np.ndarray, config_type: np.ndarray, config_gpus: np.ndarray,
                     capacity: np.ndarray, fixed: np.ndarray | None = None,
                     previous: np.ndarray | None = None, *,
                     options: SolverOptions | None = None,
                     return_info: bool) -> np.ndarray | tuple[np.ndarray, SolverInfo]: ...


def solve_assignment(gain: np.ndarray, config_type: np.ndarray, config_gpus: np.ndarray,
                     capacity: np.ndarray, fixed: np.ndarray | None = None,
                     previous: np.ndarray | None = None, *,
                     options: SolverOptions | None = None,
                     return_info: bool = False) -> np.ndarray | tuple[np.ndarray, SolverInfo]:
    """Maximises ``sum_j gain[j, c_j]`` with at most one configuration per job.

    Subject to ``sum_j gpus[c_j] <= capacity[type]`` for every type; a job may
    get no configuration (gain 0). The dense problem is padded to bucketed
    shapes and solved by :func:`_solve` (one jitted call).

    Args:
        gain: ``[jobs, configs]``; ``-inf`` (or NaN) marks a configuration a job cannot use.
        config_type, config_gpus: int arrays ``[configs]``.
        capacity: GPUs per type ``[types]``.
        fixed: per job, a configuration it must keep (-1: free).
        previous: per job, its current configuration (-1: none), a warm start.
        options: the search effort (:class:`SolverOptions`; ``None``: the defaults).
        return_info: also return a :class:`SolverInfo` dict ``{"start_gains": total gain
            per search start, "prices": final Lagrangian price per type}``.

    Returns:
        int array ``[jobs]``: configuration per job, -1 for none (and the info dict
        with ``return_info``).

    Example:
        >>> g = np.array([[1.0, 3.0], [1.0, 2.5]])
        >>> solve_assignment(g, np.array([0, 0]), np.array([1, 2]), np.array([3.0]))
        array([1, 0])
    """
    opts = options if options is not None else SolverOptions()
    gain = np.asarray(gain, np.float64)
    J, K = gain.shape
    T = int(np.max(config_type)) + 1 if K else 1
    if len(capacity) < T:
        raise ValueError(f"capacity has {len(capacity)} types, configurations use {T}")
    Jb = bucket(J, 8)
    K1 = bucket(K + 1, 16)  # padded configurations are never allowed; the last is "none"
    g = np.full((Jb, K1), _NEG, np.float32)
    g[:, K1 - 1] = 0.0
    ok = np.isfinite(gain)
    g[:J, :K] = np.where(ok, gain, _NEG)
    use = np.zeros((K1, len(capacity)), np.float32)
    use[np.arange(K), np.asarray(config_type)] = np.asarray(config_gpus, np.float32)
    fx = np.full(Jb, -1, np.int32)
    pv = np.full(Jb, -1, np.int32)
    if fixed is not None:
        fx[:J] = np.asarray(fixed)
    if previous is not None:
        pv[:J] = np.asarray(previous)
    small = Jb * K1 <= opts.sequential_cells
    max_moves = bucket(4 * J + 16, 64) if small else 64
    choice, totals, mu = _solve(g, use, np.asarray(capacity, np.float32), fx, pv,
                          dual_steps=opts.dual_steps, max_moves=np.int32(max_moves),
                          pair_rounds=opts.pair_rounds if Jb * K1 <= opts.pair_cells else 0,
                          parallel_rounds=0 if small else 64, few_starts=not small)
    choice = np.asarray(choice)[:J].astype(np.int64)
    choice = np.where(choice >= K, -1, choice)
    if return_info:
        info: SolverInfo = {"start_gains": tuple(float(x) for x in np.asarray(totals)),
                            "prices": tuple(float(x) for x in np.asarray(mu))}
        return choice, info
    return choice
