"""Pollux's search kernels: the pure, jitted functions over one padded problem.

The genetic search of :class:`goodput_jax.sched.pollux.PolluxPolicy` (fitness, repair,
mutation, greedy growth, the generations loop), written over a dict of padded arrays
(``_Arrays``, a pytree) that :mod:`goodput_jax.sched.pollux` builds on the host. See
that module for the objective.

Example:
    >>> import numpy as np
    >>> replicas_that_fit(np.array([[[8.0, 3.0]]]), np.array([[2.0, 0.0]]), np).tolist()
    [[4]]
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Generic, NotRequired, TypedDict, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["replicas_that_fit"]

_BIG = 1 << 20
_TOL = 1e-4  # relative slack when dividing float resources
_EPS = 1e-2  # zero-speedup offset in the power mean for p <= 0


# --------------------------------------------------------------------------- #
# Problem arrays (host side) and the pure functions that use them.
# --------------------------------------------------------------------------- #


_A = TypeVar("_A")  # numpy arrays on the host, jax arrays (tracers) in the kernels
_ArrT = TypeVar("_ArrT", np.ndarray, jax.Array)


class _Arrays(TypedDict, Generic[_A]):
    """The padded arrays of one problem (a plain dict, so a pytree): ``J`` jobs, ``N``
    nodes, ``K`` resources. Built on the host as numpy arrays (``_Arrays[np.ndarray]``),
    seen as jax arrays inside the jitted kernels (``_Arrays[jax.Array]``)."""

    free: _A  # [N, K] capacity left by the pinned jobs
    pinned_dist_node: _A  # [N] bool: the node holds a pinned distributed job
    res: _A  # [J, K] request per replica
    cap: _A  # [N, K] capacity
    fit: _A  # [J, N] int32 replicas that fit alone
    min_r: _A  # [J] int32
    max_r: _A  # [J] int32
    table: _A  # [J, nodes + 1, replicas + 1] speedup table
    fair: _A  # [J] speedup at the fair share
    factor: _A  # [J] restart penalty factor
    base: _A  # [J, N] int32 previous allocation
    running: _A  # [J] bool
    pinned: _A  # [J] bool
    valid_job: _A  # [J] bool: not padding
    valid_node: _A  # [N] bool: not padding
    num_nodes: _A  # int32 scalar: real (+ template) nodes
    steps: NotRequired[_A]  # int32 scalar: the greedy's step bound (set before a search)


class _GreedyCarry(TypedDict):
    """The carry of :func:`_greedy`'s while loop."""

    state: jax.Array
    fit_free: jax.Array
    used: jax.Array
    speed: jax.Array
    util: jax.Array
    diff: jax.Array
    prefix: jax.Array
    it: jax.Array
    go: jax.Array
    hist: tuple[jax.Array, jax.Array, jax.Array]  # per step: (prefix, total speedup, fitness)


_Stats = tuple[jax.Array, jax.Array, jax.Array]  # (prefix, total speedup, fitness)


def replicas_that_fit(room: _ArrT, res: _ArrT, xp: ModuleType = jnp) -> _ArrT:
    """Replicas of each job that fit in the given room: ``[..., J, N]`` int32.

    The one rule (numpy or JAX, ``xp``): ``min`` over the resources a job requests
    of ``floor(room / request + tol)``; resources it does not request do not
    constrain it. ``room`` is ``[..., J, N, K]`` (broadcastable), ``res`` ``[J, K]``;
    ``xp`` is the module of both arrays (``np`` or ``jnp``), and of the result.

    Example:
        >>> import numpy as np
        >>> replicas_that_fit(np.array([[[8.0, 3.0]]], np.float32),
        ...                   np.array([[2.0, 0.0]], np.float32), np).tolist()
        [[4]]
    """
    ratio = room / xp.where(res > 0, res, 1.0)[:, None, :]
    ratio = xp.where(res[:, None, :] > 0, xp.floor(ratio + _TOL), _BIG)
    return xp.clip(xp.min(ratio, axis=-1), 0, _BIG).astype(xp.int32)


def _fit(free: jax.Array, res: jax.Array) -> jax.Array:
    """Replicas of each job that fit in each node's free resources: [J, N] int32.

    ``free`` is [..., N, K] (or [N, K]), ``res`` is [J, K].
    """
    return replicas_that_fit(free[..., None, :, :], res)


def _lookup(a: _Arrays[jax.Array], num_nodes: jax.Array, num_replicas: jax.Array) -> jax.Array:
    table = a["table"]
    tn, tr = table.shape[1] - 1, table.shape[2] - 1
    n = jnp.clip(num_nodes, 0, tn)
    r = jnp.clip(num_replicas, 0, tr)
    flat = table.reshape(-1)
    idx = (jnp.arange(table.shape[0]) * (tn + 1) + n) * (tr + 1) + r
    return flat[idx]


def _utility(x: jax.Array, p: float) -> jax.Array:
    """Additive per-job utility whose sum orders states like the power mean."""
    if p > 0:
        return x ** p / p
    if p == 0:
        return jnp.log(x + _EPS)
    return (x + _EPS) ** p / p


def _job_terms(a: _Arrays[jax.Array], state: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Per-job (absolute speedup, penalised relative speedup) of one state [J, N]."""
    replicas = state.sum(axis=1)
    nodes = (state > 0).sum(axis=1)
    speedup = _lookup(a, nodes, replicas)
    changed = jnp.any(state != a["base"], axis=1)
    penalised = jnp.where(changed & a["running"], speedup * a["factor"], speedup)
    return speedup, penalised / a["fair"]


def _fitness(a: _Arrays[jax.Array], state: jax.Array, p: float) -> jax.Array:
    _, x = _job_terms(a, state)
    return jnp.sum(jnp.where(a["valid_job"], _utility(x, p), 0.0))


def _cumsum0(x: jax.Array) -> jax.Array:
    """Inclusive cumulative sum over axis 0 as a log-depth scan (XLA's CPU cumsum is
    a reduce_window, O(n * n))."""
    return jax.lax.associative_scan(jnp.add, x, axis=0)


def _full_repair(a: _Arrays[jax.Array], state: jax.Array) -> jax.Array:
    """Repairs an arbitrary state (the previous allocation): per-node fit and max_replicas
    first, then :func:`_repair`."""
    state = jnp.where(a["pinned"][:, None], a["base"], state)
    state = jnp.clip(state, 0, a["fit"])  # unusable nodes, padding
    before = jnp.cumsum(state, axis=1) - state
    state = jnp.clip(a["max_r"][:, None] - before, 0, state)  # max_replicas, in node order
    return _repair(a, state, jnp.float32(0.0))


def _repair(a: _Arrays[jax.Array], state: jax.Array, shift: jax.Array) -> jax.Array:
    """Feasible state by removal only (idempotent on feasible states).

    Assumes pinned rows equal the base and rows respect ``max_replicas`` (the
    mutations keep both). Enforces, in this order: at most one distributed job
    per node (the first in priority order keeps it; nodes holding a pinned
    distributed job admit no other), node capacity for every resource (jobs
    earlier in priority order keep their replicas; pinned jobs come first) and
    ``min_replicas`` (below it a job gets nothing).  ``shift`` in [0, 1)
    rotates the priority order of the non-pinned jobs, so different
    candidates resolve conflicts differently.
    """
    num_jobs = state.shape[0]
    idx = (jnp.arange(num_jobs) + jnp.floor(shift * num_jobs).astype(jnp.int32)) % num_jobs
    s = jnp.where(a["pinned"][:, None], 0, state)[idx]
    res = a["res"][idx]
    occ = s > 0
    dist = occ & (occ.sum(axis=1) > 1)[:, None]
    first = jnp.min(jnp.where(dist, jnp.arange(num_jobs)[:, None], num_jobs), axis=0)
    keep = (jnp.arange(num_jobs)[:, None] == first[None, :]) & ~a["pinned_dist_node"][None, :]
    s = jnp.where(dist & ~keep, 0, s)
    use = s[:, :, None].astype(res.dtype) * res[:, None, :]
    room = a["free"][None] - (_cumsum0(use) - use)  # capacity left by pinned + earlier jobs
    s = jnp.minimum(s, replicas_that_fit(room, res))
    s = jnp.where((s.sum(axis=1) < a["min_r"][idx])[:, None], 0, s)
    back = (jnp.arange(num_jobs) - jnp.floor(shift * num_jobs).astype(jnp.int32)) % num_jobs
    return s[back] + jnp.where(a["pinned"][:, None], a["base"], 0)


def _mutate(a: _Arrays[jax.Array], state: jax.Array, u: jax.Array, rate: jax.Array) -> jax.Array:
    """Per-job random moves: add a replica, remove one, stop the job, move it to one node.

    ``u`` is [J, 6] uniform noise (one random call per generation keeps compiles
    small). Pinned jobs are never touched and ``max_replicas`` is never exceeded.
    """
    num_nodes = state.shape[1]
    replicas = state.sum(axis=1)
    occ = state > 0
    nnz = occ.sum(axis=1)
    do = (u[:, 0] < rate) & ~a["pinned"]
    kind = jnp.floor(u[:, 1] * 4).astype(jnp.int32)
    rand_node = jnp.floor(u[:, 2] * jnp.maximum(a["num_nodes"], 1)).astype(jnp.int32)
    # A random occupied node: the occupied node with the largest key under a
    # random affine bijection of node indices (num_nodes is a power of two).
    mult = 2 * jnp.floor(u[:, 3] * num_nodes).astype(jnp.int32) + 1
    offs = jnp.floor(u[:, 4] * num_nodes).astype(jnp.int32)
    hashed = (jnp.arange(num_nodes)[None, :] * mult[:, None] + offs[:, None]) & (num_nodes - 1)
    top = jnp.max(jnp.where(occ, hashed, -1), axis=1)
    occ_node = jnp.min(jnp.where(occ & (hashed == top[:, None]), jnp.arange(num_nodes)[None, :],
                                 num_nodes - 1), axis=1)
    add_node = jnp.where((u[:, 5] < 0.5) & (nnz > 0), occ_node, rand_node)
    start = jnp.maximum(a["min_r"], 1)
    kind = jnp.where(do, kind, -1)
    add = jnp.where(replicas == 0, start, 1)
    add = jnp.where(replicas + add <= a["max_r"], add, 0)
    # Every move changes one cell, except "stop" and "move", which first clear the row.
    node = jnp.where(kind == 1, occ_node, jnp.where(kind == 3, rand_node, add_node))
    amount = jnp.select(
        [kind == 0, kind == 1, kind == 3],
        [add, -(nnz > 0).astype(jnp.int32),
         jnp.minimum(jnp.maximum(replicas, start), a["max_r"])], 0)
    clear = (kind == 2) | (kind == 3)
    cell = jnp.arange(num_nodes)[None, :] == node[:, None]
    return jnp.where(clear[:, None], 0, state) + jnp.where(cell, amount[:, None], 0)


def _greedy(a: _Arrays[jax.Array], state: jax.Array, node_mask: jax.Array, p: float,
            max_steps: int, worst_fit: bool = False
            ) -> tuple[jax.Array, jax.Array, _Stats, _Stats]:
    """Marginal-gain greedy: repeatedly give the best job one more replica (a started
    job gets ``max(min_replicas, 1)``), preferring nodes it already uses, else the
    first node (``worst_fit``: the emptiest node) that fits and keeps at most one
    distributed job per node; a waiting job whose ``min_replicas`` fit on no single
    node may start spread over nodes without distributed jobs.

    Returns the final state and per-step history ``(prefix, total_speedup, fitness)``
    where ``prefix`` is one past the highest node index in use (adds only ever grow it).
    """
    num_jobs, num_nodes = state.shape
    res, cap = a["res"], a["cap"]
    used0 = jnp.einsum("jn,jk->nk", state.astype(res.dtype), res)
    fit_free0 = _fit(cap - used0, res)
    speedup0, x0 = _job_terms(a, state)
    util0 = jnp.where(a["valid_job"], _utility(x0, p), 0.0)
    diff0 = (state != a["base"]).sum(axis=1)
    cols = jnp.arange(num_nodes)
    rows = jnp.arange(num_jobs)
    start = jnp.maximum(a["min_r"], 1)
    prefix0 = jnp.max(jnp.where(jnp.any(state > 0, axis=0), cols + 1, 0))
    hist = (jnp.zeros(max_steps, jnp.int32), jnp.zeros(max_steps), jnp.zeros(max_steps))

    def cond(c: _GreedyCarry) -> jax.Array:
        return c["go"] & (c["it"] < jnp.minimum(max_steps, a["steps"]))

    def body(c: _GreedyCarry) -> _GreedyCarry:
        s, fit_free, used = c["state"], c["fit_free"], c["used"]
        occ = s > 0
        replicas = s.sum(axis=1)
        nnz = occ.sum(axis=1)
        dist = occ & (nnz > 1)[:, None]
        other = dist.sum(axis=0)[None, :] - dist  # other distributed jobs on each node
        conflict = jnp.any(occ & (other > 0), axis=1)
        delta = jnp.where(replicas == 0, start, 1)
        same_ok = occ & (fit_free >= 1)
        same_any = jnp.any(same_ok, axis=1)
        new_ok = (~occ) & (fit_free >= delta[:, None]) & node_mask[None, :]
        new_ok &= jnp.where((replicas > 0)[:, None], (other == 0) & ~conflict[:, None], True)
        if worst_fit:  # new placements go to the emptiest node: room to grow later
            new_node = jnp.argmax(jnp.where(new_ok, fit_free, -1), axis=1)
        else:  # first fit: fills nodes in order (the autoscaler relies on this)
            new_node = jnp.argmax(new_ok, axis=1)
        target = jnp.where(same_any, jnp.argmax(same_ok, axis=1), new_node)
        single = same_any | jnp.any(new_ok, axis=1)
        # A waiting job whose min_replicas fit on no single node may start spread
        # over nodes that hold no distributed job (first fit).
        spread_ok = (fit_free >= 1) & (dist.sum(axis=0) == 0)[None, :] & node_mask[None, :]
        spread_free = jnp.where(spread_ok, fit_free, 0)
        spread = (replicas == 0) & ~single & (start > 1) & (spread_free.sum(axis=1) >= start)
        ok = (single | spread) & ~a["pinned"] & a["valid_job"]
        ok &= replicas + delta <= a["max_r"]
        r2 = replicas + delta
        per_node = jnp.maximum(spread_free.max(axis=1), 1)
        n2 = jnp.where(spread, (start + per_node - 1) // per_node, nnz + jnp.where(same_any, 0, 1))
        s_new = _lookup(a, n2, r2)
        cur_t = s[rows, target]
        base_t = a["base"][rows, target]
        diff2 = c["diff"] - (cur_t != base_t) + (cur_t + delta != base_t)
        diff2 = jnp.where(spread, 1, diff2)
        pen = jnp.where((diff2 > 0) & a["running"], s_new * a["factor"], s_new)
        util_new = _utility(pen / a["fair"], p)
        gain = jnp.where(ok, (util_new - c["util"]) / delta, -jnp.inf)
        j = jnp.argmax(gain)
        go = gain[j] > 1e-7
        fill = spread_free[j]
        fill = jnp.clip(start[j] - (jnp.cumsum(fill) - fill), 0, fill)
        amount = jnp.where(spread[j], fill, jnp.where(cols == target[j], delta[j], 0))
        amount = jnp.where(go, amount, 0)
        s = s.at[j].add(amount)
        used = used + amount[:, None].astype(res.dtype) * res[j][None, :]
        t = jnp.max(jnp.where(amount > 0, cols, -1))
        fit_free = jax.lax.cond(
            spread[j], lambda: _fit(cap - used, res),
            lambda: fit_free.at[:, t].set(_fit(cap[t][None] - used[t][None], res)[:, 0]))
        s_new = s_new.at[j].set(jnp.where(spread[j], _lookup(a, (s > 0).sum(axis=1),
                                                              s.sum(axis=1))[j], s_new[j]))
        row_diff = (s[j] != a["base"][j]).sum()
        util_new = util_new.at[j].set(_utility(jnp.where(
            (row_diff > 0) & a["running"][j], s_new[j] * a["factor"][j], s_new[j]) / a["fair"][j],
            p))
        diff2 = diff2.at[j].set(row_diff)
        speed = c["speed"].at[j].set(jnp.where(go, s_new[j], c["speed"][j]))
        util = c["util"].at[j].set(jnp.where(go, util_new[j], c["util"][j]))
        diff = c["diff"].at[j].set(jnp.where(go, diff2[j], c["diff"][j]))
        prefix = jnp.where(go, jnp.maximum(c["prefix"], t + 1), c["prefix"])
        it = c["it"]
        hp, hs, hf = c["hist"]
        hist = (hp.at[it].set(prefix),
                hs.at[it].set(jnp.sum(jnp.where(a["valid_job"], speed, 0.0))),
                hf.at[it].set(jnp.sum(util)))
        return {"state": s, "fit_free": fit_free, "used": used, "speed": speed, "util": util,
                "diff": diff, "prefix": prefix, "it": it + go.astype(jnp.int32), "go": go,
                "hist": hist}

    init: _GreedyCarry = {"state": state, "fit_free": fit_free0, "used": used0,
                          "speed": speedup0, "util": util0, "diff": diff0, "prefix": prefix0,
                          "it": jnp.int32(0), "go": jnp.bool_(True), "hist": hist}
    out = jax.lax.while_loop(cond, body, init)
    start_stats = (prefix0, jnp.sum(jnp.where(a["valid_job"], speedup0, 0.0)), jnp.sum(util0))
    return out["state"], out["it"], out["hist"], start_stats


@functools.partial(jax.jit, static_argnames=("p", "population", "generations", "greedy_steps"))
def _search(a: _Arrays[jax.Array], seeds: jax.Array, num_seeds: jax.Array, key: jax.Array,
            rate: jax.Array, *, p: float, population: int, generations: int, greedy_steps: int
            ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
    """Greedy seeds + genetic search.

    Returns (best, best_fitness, population, fitness, seed fitness).
    """
    num_jobs = seeds.shape[1]
    all_nodes = a["valid_node"]
    # Seed 0 is the previous allocation; repair it, then grow it greedily and
    # also build a greedy allocation from the pinned jobs alone (one vmapped loop).
    base = _full_repair(a, seeds[0])
    pinned_only = jnp.where(a["pinned"][:, None], base, 0)
    greedy_new, _, _, _ = _greedy(a, pinned_only, all_nodes, p, greedy_steps, worst_fit=True)
    greedy_base, _, _, _ = _greedy(a, base, all_nodes, p, greedy_steps)
    greedy = jnp.stack([greedy_new, greedy_base])
    seeds = seeds.at[0].set(base)
    seeds = jnp.concatenate([greedy, seeds], axis=0)
    count = num_seeds + 2
    # Seeds and carried-over states fill the population cyclically; the copies
    # share a fitness value, so selection discards them as soon as children
    # (which are mutated) are better than the worst distinct member.
    pop = seeds[jnp.arange(population) % count]
    pop = jax.vmap(lambda s: _full_repair(a, s))(pop)  # carried-over states may be stale
    fit = jax.vmap(lambda s: _fitness(a, s, p))(pop)
    fit = jnp.where(jnp.arange(population) < count, fit, -jnp.inf)
    seed_fit = fit[:3]  # greedy from scratch, greedy from previous, previous

    def generation(g: jax.Array, carry: tuple[jax.Array, jax.Array]
                   ) -> tuple[jax.Array, jax.Array]:
        pop, fit = carry
        u = jax.random.uniform(jax.random.fold_in(key, g), (population, num_jobs, 9))
        t = jnp.floor(u[:, :4, 7] * population).astype(jnp.int32)
        pa = jnp.where(fit[t[:, 0]] >= fit[t[:, 1]], t[:, 0], t[:, 1])
        pb = jnp.where(fit[t[:, 2]] >= fit[t[:, 3]], t[:, 2], t[:, 3])
        mask = u[:, :, 6] < 0.5
        child = jnp.where(mask[:, :, None], pop[pa], pop[pb])
        child = jax.vmap(lambda s, uu: _repair(a, _mutate(a, s, uu[:, :6], rate), uu[0, 8]))(
            child, u)
        cfit = jax.vmap(lambda s: _fitness(a, s, p))(child)
        # Drop children identical (by fitness) to a parent or an earlier child: keeps diversity.
        dup = jnp.any(cfit[:, None] == fit[None, :], axis=1)
        tri = jnp.tril(jnp.ones((population, population), bool), -1)
        dup |= jnp.any((cfit[:, None] == cfit[None, :]) & tri, axis=1)
        cfit = jnp.where(dup, -jnp.inf, cfit)
        allpop = jnp.concatenate([pop, child])
        allfit = jnp.concatenate([fit, cfit])
        _, top = jax.lax.top_k(allfit, population)
        return allpop[top], allfit[top]

    pop, fit = jax.lax.fori_loop(0, generations, generation, (pop, fit))
    best = jnp.argmax(fit)
    return pop[best], fit[best], pop, fit, seed_fit


@functools.partial(jax.jit, static_argnames=("p", "greedy_steps"))
def _autoscale_curve(a: _Arrays[jax.Array], start: jax.Array, p: float, greedy_steps: int
                     ) -> tuple[jax.Array, _Stats, _Stats]:
    _, steps, hist, start_stats = _greedy(a, start, a["valid_node"], p, greedy_steps)
    return steps, hist, start_stats


@functools.partial(jax.jit, static_argnames=("p",))
def _evaluate_states(a: _Arrays[jax.Array], states: jax.Array, p: float
                     ) -> tuple[jax.Array, jax.Array, jax.Array]:
    def one(s: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        speedup, x = _job_terms(a, s)
        return (jnp.sum(jnp.where(a["valid_job"], _utility(x, p), 0.0)),
                jnp.where(a["valid_job"], speedup, 0.0), jnp.where(a["valid_job"], x, 0.0))
    return jax.vmap(one)(states)
