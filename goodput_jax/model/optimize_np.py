"""The optimizer's float64 numpy twin, for small calls (no device program, no dispatch).

:meth:`goodput_jax.model.goodput.GoodputFunction.optimize` runs a jitted kernel
(:func:`goodput_jax.model.goodput.optimize_fn`) for many configurations; for one
configuration, or a few (up to :data:`HOST_MAX_CONFIGS`), a jitted call's fixed cost
(argument transfer, dispatch, a compile per new input length) is larger than the
arithmetic, so it runs :func:`optimize_np` here instead: the same search (50 geometric
total batch sizes, the batch plan of :func:`batch_plan`, bounds, first best candidate),
in float64 numpy, with as few numpy calls as the formulas allow. Equal results to the
kernel (the atomic batch size and accumulation steps exactly, the goodput to float64
rounding) are tested against the kernel run with ``jax.enable_x64``. One configuration of
ordinary values takes a shortcut (:func:`_optimize_one`: the same search in ~12-25 numpy
calls instead of ~45, equal to the general path, tested).

The formulas are those of :mod:`goodput_jax.model.formulas`, two in their float64 host
form: ``T_opt = (T_acc**gamma + T_net**gamma) ** (1 / gamma)`` as three powers (no
overflow below ~1e30 s in float64; the kernel's ``hi * exp(log1p(...))`` form guards
float32), and ``goodput = M * M0 (var + sqr) / ((s T_acc + T_opt)(M0 var + M sqr))``
(:func:`goodput_jax.model.formulas.goodput_at`). This module imports no JAX.

Example:
    >>> from goodput_jax.model.types import GradParams, PerfParams
    >>> p = PerfParams(0.121, 0.00568, 0.0236, 0.00634, 0.0118, 0.00317, 1.14)
    >>> optimize_np(p, GradParams(0.00136, 0.000502), 128.0, 1.0, 3.0, 128.0, 1.0,
    ...             math.inf, False)[1:]
    (43, 0)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from goodput_jax.model import formulas
from goodput_jax.model.types import GradParams, PerfParams

__all__ = ["HOST_MAX_CONFIGS", "NUM_CANDIDATES", "batch_plan", "optimize_np"]

#: Number of geometric total-batch-size candidates searched by ``optimize``.
NUM_CANDIDATES = 50

#: ``GoodputFunction.optimize`` searches at most this many configurations on the host
#: (:func:`optimize_np`); more go to the jitted kernel. Near the crossover of the two
#: (measured: a jitted call costs ~30-60 us before any arithmetic, the host path ~20 us
#: plus ~1.5 us per configuration).
HOST_MAX_CONFIGS = 16

_T64 = np.linspace(0.0, 1.0, NUM_CANDIDATES)
_TOL = 1e-8  # float64 rounding tolerance of the ceilings (the kernel's, in float64)


def _ceil_tol(x: np.ndarray) -> np.ndarray:
    """``ceil(x - 1e-8 * max(1, x))`` (the kernel's float64 tolerance), reusing buffers."""
    tol = np.maximum(x, 1.0)
    tol *= -_TOL
    tol += x
    return np.ceil(tol, out=tol)


def batch_plan(init_batch_size: float, num_replicas: float | NDArray[np.float64],
               batch_size: ArrayLike,
               max_atomic_bsz: float = math.inf, accumulation: bool = False,
               adaptdl_single_replica: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """How ``optimize`` runs a total batch: ``(atomic_bsz, accum_steps)`` as float64 arrays.

    The rule of :func:`goodput_jax.model.goodput.optimize_fn` (AdaptDL's), in float64
    numpy, for anything that draws or lists the configurations the optimizer considers
    (the report's curves):

    * ``accumulation=True``: ``s = ceil(local / max_atomic_bsz) - 1``, at least 1 on
      one replica when ``local > M0``; ``b = ceil(local / (s + 1))``;
    * ``accumulation=False``: ``s = 0``; ``b = M0`` on one replica (its batch cannot
      grow: the per-replica batch stays the one the job was set up with), else
      ``ceil(local)``;

    with ``local = batch_size / num_replicas``. The total batch that runs is
    ``num_replicas * b * (s + 1)``: on one replica without accumulation, ``M0`` for
    every ``batch_size``. Bounds on ``b`` are the caller's to check.

    ``adaptdl_single_replica=False`` drops the one-replica special case (one replica
    follows the rule of many: its per-replica batch grows within ``max_atomic_bsz``,
    accumulation only beyond it), which is how a job's own search
    (:func:`goodput_jax.integrations.search.search`) and the
    :class:`~goodput_jax.adaptive.AdaptiveBatchSize` buckets treat one replica.

    ``num_replicas`` may also be an array broadcasting with ``batch_size`` (one plan per
    configuration).

    Example:
        >>> batch_plan(64, 1, [64, 256], accumulation=False)
        (array([64., 64.]), array([0., 0.]))
        >>> batch_plan(64, 1, [64, 256], accumulation=True)
        (array([ 64., 128.]), array([0., 1.]))
        >>> batch_plan(64, 2, [256], max_atomic_bsz=64, accumulation=True)
        (array([64.]), array([1.]))
        >>> batch_plan(64, 1, [64, 256], accumulation=False, adaptdl_single_replica=False)
        (array([ 64., 256.]), array([0., 0.]))
    """
    m0 = float(init_batch_size)
    r = num_replicas if isinstance(num_replicas, np.ndarray) else float(num_replicas)
    local = np.asarray(batch_size, dtype=np.float64) / r
    hi = float(max_atomic_bsz)
    if not math.isfinite(hi):
        hi = math.inf
    one = r == 1  # a bool, or an array of them
    single = adaptdl_single_replica and (one if isinstance(one, bool) else bool(one.any()))
    if accumulation:
        steps = _ceil_tol(local / hi)
        steps -= 1.0
        np.maximum(steps, 0.0, out=steps)
        if single:
            steps = np.where(one & (local > m0 * (1.0 + _TOL)), np.maximum(steps, 1.0), steps)
        x = steps + 1.0
        np.divide(local, x, out=x)
        atomic = _ceil_tol(x)
    else:
        steps = np.zeros_like(local)
        atomic = _ceil_tol(local)
        if single:
            atomic = np.where(one, m0, atomic)
    return atomic, steps


_KEEP = 1.0 - _TOL  # ceil(x * _KEEP): the tolerant ceiling for x > 2 * _TOL (see _optimize_one)


def _optimize_one(perf: PerfParams, grad: GradParams, m0: float, n: float, r: float,
                  max_bs: float, lo: float, hi: float, accumulation: bool,
                  single: bool) -> tuple[float, int, int] | None:
    """:func:`optimize_np` for one configuration of ordinary values in ~12-25 numpy calls
    (each costs ~0.5 us on 50 elements, so their count is the cost), or ``None`` where
    the general path must run (a non-positive or non-finite time, a negative gradient
    statistic, a possible overflow, or a per-replica batch below ``4e-8``).

    The same search in float64, rearranged (equal to rounding; the tolerant ceilings
    absorb the difference, as they absorb the kernel's): ``ceil(x - 1e-8 * max(1, x))``
    is ``ceil(x * (1 - 1e-8))`` for every ``x > 2e-8``, which folds the tolerance and the
    division by ``r`` (and by ``max_atomic_bsz``) into one scaling of the geometric grid;
    ``goodput = K / (step * (M0 var / M + sqr))`` (``K = M0 (var + sqr)``); and where no
    per-replica batch exceeds ``max_atomic_bsz`` nothing accumulates (``s = 0``: the plan
    is that of no accumulation) and no candidate can fall outside the atomic bounds (the
    grid ascends from ``lo * r``, ``lo`` an integer): no mask.
    """
    min_bs = max(m0, lo * r)
    lo_local = min(min_bs, max_bs) / r
    hi_local = max(min_bs, max_bs) / r
    if n > 1:
        net = perf.alpha_n + perf.beta_n * max(r - 2.0, formulas.TINY)
    elif r > 1:
        net = perf.alpha_r + perf.beta_r * max(r - 2.0, formulas.TINY)
    else:
        net = formulas.TINY + formulas.TINY * formulas.TINY
    a_c, b_c, g = perf.alpha_c, perf.beta_c, perf.gamma
    var, sqr = grad.var, grad.sqr
    if not (a_c > 0 and b_c >= 0 and net > 0 and g > 0 and var >= 0 and sqr >= 0
            and var + sqr > 0 and min(lo_local, hi) > 4e-8
            and -700.0 < g * math.log(min(a_c, net))
            and g * math.log(max(a_c + b_c * (hi_local + 1.0), net)) < 700.0):
        return None
    grid = np.power(max_bs / min_bs, _T64)
    one = single and r == 1
    fits = hi_local <= hi and not (one and accumulation)  # s = 0 everywhere
    if one and not accumulation:
        atomic = np.full(NUM_CANDIDATES, m0)
        fits = False
    else:
        atomic = grid * (min_bs * _KEEP / r)
        atomic[-1] = max_bs * _KEEP / r  # exact endpoint
    s1 = None  # accum_steps + 1, where some candidate accumulates
    if accumulation and not fits:
        s1 = grid * (min_bs * _KEEP / (r * hi))
        s1[-1] = max_bs * _KEEP / (r * hi)
        np.ceil(s1, out=s1)
        np.maximum(s1, 1.0, out=s1)
        if one:
            local = grid * (min_bs / r)
            local[-1] = max_bs / r
            s1 = np.where(local > m0 * (1.0 + _TOL), np.maximum(s1, 2.0), s1)
        atomic /= s1
    if not (one and not accumulation):
        np.ceil(atomic, out=atomic)
    accum = atomic * b_c
    accum += a_c
    step = accum**g
    step += net**g
    step **= 1.0 / g
    total = atomic
    if s1 is not None:
        accum *= s1 - 1.0
        step += accum
        total = atomic * s1
    good = (m0 * var / r) / total
    good += sqr
    good *= step
    np.divide(m0 * (var + sqr), good, out=good)
    if not (fits and lo_local >= lo and lo == int(lo) and math.ceil(hi_local) <= hi):
        bad = atomic < lo
        bad |= atomic > hi
        good[bad] = 0.0
    k = int(good.argmax())
    return float(good[k]), int(atomic[k]), 0 if s1 is None else int(s1[k]) - 1


def optimize_np(perf: PerfParams, grad: GradParams, m0: float,
                num_nodes: float | NDArray[np.float64], num_replicas: float | NDArray[np.float64],
                max_batch_size: float, min_atomic_bsz: float,
                max_atomic_bsz: float, accumulation: bool,
                adaptdl_single_replica: bool = True,
                ) -> tuple[float, int, int] | tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.int64]]:
    """Best ``(goodput, atomic_bsz, accum_steps)`` per configuration, in float64 numpy.

    Args:
        perf, grad: the job's parameters (Python floats).
        m0: ``init_batch_size``.
        num_nodes, num_replicas: Python floats (one configuration) or float64 arrays of
            one shape (validated by the caller: ``1 <= num_nodes <= num_replicas``).
        max_batch_size, min_atomic_bsz, max_atomic_bsz: the bounds as floats, encoded as
            :func:`goodput_jax.model.goodput.optimize_fn` documents (``inf``: none).
        accumulation, adaptdl_single_replica: as ``optimize_fn``.

    Returns:
        ``(float, int, int)`` for one configuration; else ``(goodput float64 array,
        atomic_bsz int64 array, accum_steps int64 array)`` of the input shape.
    """
    scalar = not isinstance(num_replicas, np.ndarray)
    lo = max(min_atomic_bsz, 1.0)
    hi = max_atomic_bsz if math.isfinite(max_atomic_bsz) else max_batch_size
    if not isinstance(num_replicas, np.ndarray):
        best = _optimize_one(perf, grad, m0, float(num_nodes), float(num_replicas),
                             max_batch_size, lo, hi, accumulation, adaptdl_single_replica)
        if best is not None:
            return best
        r: Any = float(num_replicas)
        min_bs: Any = max(m0, lo * r)
        net: Any = float(formulas.network_time(formulas.SCALAR_NP, perf, np.float64(num_nodes),
                                               np.float64(r)))
        batch = min_bs * (max_batch_size / min_bs) ** _T64
    else:
        shape = num_replicas.shape
        r = num_replicas.reshape(-1, 1)
        n = np.broadcast_to(num_nodes, shape).reshape(-1, 1)
        min_bs = np.maximum(m0, lo * r)
        with np.errstate(divide="ignore"):  # log(0) of a zero network time: -inf, fine
            net = formulas.network_time(np, perf, n, r)
        batch = min_bs * (max_batch_size / min_bs) ** _T64
    batch[..., -1] = max_batch_size  # exact endpoint
    atomic, steps = batch_plan(m0, r, batch, hi, accumulation, adaptdl_single_replica)
    g = float(perf.gamma)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        accum = perf.beta_c * atomic
        accum += perf.alpha_c
        step = accum ** g
        step += net ** g
        step **= 1.0 / g
        step += steps * accum
        total = r * atomic
        total *= steps + 1.0
        denom = total * grad.sqr
        denom += m0 * grad.var
        good = total * (m0 * (grad.var + grad.sqr))
        good /= step
        if grad.var > 0 and grad.sqr >= 0 or grad.sqr > 0 and grad.var >= 0:
            good /= denom  # denom > 0 everywhere (total, m0 > 0)
        else:
            good = np.where(denom > 0, good / np.where(denom > 0, denom, 1.0), m0 / step)
    good = np.where((lo <= atomic) & (atomic <= hi), good, 0.0)
    i = np.argmax(good, axis=-1)  # the first maximum, or the first NaN
    if scalar:
        k = int(i)
        if math.isnan(good[k]):
            k = 0
        return float(good[k]), int(atomic[k]), int(steps[k])
    rows = np.arange(len(i))
    i = np.where(np.isnan(good[rows, i]), 0, i)  # a NaN in the row: the first candidate
    return (good[rows, i].reshape(shape), atomic[rows, i].astype(np.int64).reshape(shape),
            steps[rows, i].astype(np.int64).reshape(shape))
