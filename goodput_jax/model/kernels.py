"""The goodput model's pure, jitted kernels (the first layer of :mod:`.goodput`).

:func:`throughput_fn`, :func:`efficiency_fn`, :func:`goodput_fn` and :func:`optimize_fn`
are functions of array pytrees: every argument broadcasts against every other one,
including the leaves of ``PerfParams`` / ``GradParams``, under ``jax.jit`` and
``jax.vmap``. :mod:`goodput_jax.model.goodput` documents the model and the search, and
re-exports them; the ``_*_packed`` kernels (few arguments, cheap dispatch) serve its
:class:`~goodput_jax.model.goodput.GoodputFunction`.

Example:
    >>> p = PerfParams(0.1, 0.01, 0.0, 0.0, 0.0, 0.0, 1.0)
    >>> round(float(throughput_fn(p, 1, 1, 10, 0)), 3)
    50.0
"""

from __future__ import annotations

import functools
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from goodput_jax.model import formulas
from goodput_jax.model.optimize_np import NUM_CANDIDATES
from goodput_jax.model.types import GradParams, PerfParams

__all__ = ["efficiency_fn", "goodput_fn", "optimize_fn", "throughput_fn"]

_Params = TypeVar("_Params", PerfParams, GradParams)


def _fdt() -> np.dtype[Any]:
    # the default float dtype (float64 under x64); canonicalize_dtype is ~30x cheaper than
    # jnp.result_type(float), which matters on the host side of small calls
    return jax.dtypes.canonicalize_dtype(np.float64)


def _ceil_tol(x: jax.Array) -> jax.Array:
    eps = 1e-8 if x.dtype == jnp.float64 else 2e-6
    return jnp.ceil(x - eps * jnp.maximum(1.0, jnp.abs(x)))


def _tree_f(tree: _Params) -> _Params:
    dt = _fdt()
    return type(tree)(*(jnp.asarray(x, dt) for x in tree))


@jax.jit
def throughput_fn(
    perf: PerfParams, num_nodes: Any, num_replicas: Any, atomic_bsz: Any, accum_steps: Any
) -> jax.Array:
    """Samples per second: ``R * b * (s + 1) / (s * T_acc + T_opt)`` (pure, jitted).

    Args:
        perf: ``PerfParams`` of scalars or arrays (broadcast with the rest).
        num_nodes, num_replicas, atomic_bsz, accum_steps: configurations.

    Returns:
        Float array of the broadcast shape.

    Example:
        >>> p = PerfParams(0.1, 0.01, 0.0, 0.0, 0.0, 0.0, 1.0)
        >>> round(float(throughput_fn(p, 1, 1, 10, 0)), 3)
        50.0
    """
    perf = _tree_f(perf)
    dt = _fdt()
    r = jnp.asarray(num_replicas, dt)
    b = jnp.asarray(atomic_bsz, dt)
    s = jnp.asarray(accum_steps, dt)
    n = jnp.asarray(num_nodes, dt)
    return formulas.throughput(jnp, perf, n, r, b, s)


@jax.jit
def efficiency_fn(grad: GradParams, init_batch_size: Any, batch_size: Any) -> jax.Array:
    """Statistical efficiency of total batch size ``M`` relative to ``M0`` (pure, jitted).

    ``gain / scale`` with ``scale = M / M0`` and
    ``gain = (var + sqr) / (var / scale + sqr)`` (1 where that denominator is 0).

    Example:
        >>> round(float(efficiency_fn(GradParams(1.0, 1.0), 10, 20)), 4)
        0.6667
    """
    grad = _tree_f(grad)
    dt = _fdt()
    return formulas.efficiency(jnp, grad, jnp.asarray(init_batch_size, dt),
                               jnp.asarray(batch_size, dt))


@jax.jit
def goodput_fn(
    perf: PerfParams,
    grad: GradParams,
    init_batch_size: Any,
    num_nodes: Any,
    num_replicas: Any,
    atomic_bsz: Any,
    accum_steps: Any,
) -> jax.Array:
    """``throughput_fn * efficiency_fn`` at ``M = R * b * (s + 1)`` (pure, jitted).

    No validation (traced code cannot raise); see :meth:`GoodputFunction.evaluate`.

    Example:
        >>> p = PerfParams(0.1, 0.01, 0.0, 0.0, 0.0, 0.0, 1.0)
        >>> round(float(goodput_fn(p, GradParams(0.0, 1.0), 10, 1, 1, 10, 0)), 3)
        50.0
    """
    dt = _fdt()
    r = jnp.asarray(num_replicas, dt)
    b = jnp.asarray(atomic_bsz, dt)
    s = jnp.asarray(accum_steps, dt)
    thr = throughput_fn(perf, num_nodes, r, b, s)
    return thr * efficiency_fn(grad, init_batch_size, r * b * (s + 1.0))


@functools.partial(jax.jit, static_argnames=("accumulation", "adaptdl_single_replica"))
def optimize_fn(
    perf: PerfParams,
    grad: GradParams,
    init_batch_size: Any,
    num_nodes: Any,
    num_replicas: Any,
    max_batch_size: Any,
    min_atomic_bsz: Any,
    max_atomic_bsz: Any,
    *,
    accumulation: bool = False,
    adaptdl_single_replica: bool = True,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Best ``(goodput, atomic_bsz, accum_steps)`` per configuration (pure, jitted).

    All arguments broadcast together (params included); ``accumulation`` and
    ``adaptdl_single_replica`` are static (the latter: AdaptDL's one-replica rule,
    see :func:`~goodput_jax.model.optimize_np.batch_plan`). See
    :mod:`goodput_jax.model.goodput` for the search and the bounds encoding (no max batch size: ``max_batch_size = init_batch_size``; no atomic range:
    ``min_atomic_bsz = 1``, ``max_atomic_bsz = inf``).

    Returns:
        ``goodput`` (float), ``atomic_bsz`` and ``accum_steps`` (int32), each of
        the broadcast shape.

    Example:
        >>> p = PerfParams(0.121, 0.00568, 0.0236, 0.00634, 0.0118, 0.00317, 1.14)
        >>> g, b, s = optimize_fn(p, GradParams(0.00136, 0.000502), 128, 1, jnp.arange(1, 5),
        ...                       1280, 64, 256, accumulation=True)
        >>> b.shape
        (4,)
    """
    dt = _fdt()
    perf = _tree_f(perf)
    grad = _tree_f(grad)
    m0 = jnp.asarray(init_batch_size, dt)
    n = jnp.asarray(num_nodes, dt)
    r = jnp.asarray(num_replicas, dt)
    max_bs = jnp.asarray(max_batch_size, dt)
    min_atomic = jnp.maximum(jnp.asarray(min_atomic_bsz, dt), 1.0)
    max_atomic = jnp.asarray(max_atomic_bsz, dt)
    max_atomic = jnp.where(jnp.isfinite(max_atomic), max_atomic, max_bs)

    shape = jnp.broadcast_shapes(
        *(jnp.shape(x) for x in (*perf, *grad, m0, n, r, max_bs, min_atomic, max_atomic))
    )
    min_bs = jnp.maximum(m0, min_atomic * r)
    log_span = jnp.log(max_bs / min_bs)
    net = formulas.network_time(jnp, perf, n, r)  # once per configuration
    tol = 1e-8 if dt == jnp.float64 else 2e-6

    def plan(t: jax.Array) -> tuple[jax.Array, jax.Array]:
        # atomic_bsz and accum_steps of the candidate at position t in [0, 1]
        # (broadcasting: t of shape [C, 1, ...] gives the whole grid)
        batch = jnp.where(t == 1.0, max_bs, min_bs * jnp.exp(t * log_span))  # exact endpoint
        local = batch / r
        if accumulation:
            steps = jnp.maximum(_ceil_tol(local / max_atomic) - 1.0, 0.0)
            if adaptdl_single_replica:
                force = (r == 1.0) & (local > m0 * (1.0 + tol))
                steps = jnp.where(force, jnp.maximum(steps, 1.0), steps)
            atomic = _ceil_tol(local / (steps + 1.0))
        else:
            steps = jnp.zeros_like(local)
            atomic = (jnp.where(r == 1.0, m0, _ceil_tol(local)) if adaptdl_single_replica
                      else _ceil_tol(local))
        return atomic, steps

    # The candidates live on a new LEADING axis: the two reductions below are then
    # elementwise maxima/minima across rows (vectorised), and only the winner's batch
    # plan is recomputed, per configuration, instead of being gathered from the grid
    # (its goodput is the maximum; no goodput is recomputed).
    t = jnp.linspace(0.0, 1.0, NUM_CANDIDATES, dtype=dt)
    atomic, steps = plan(jnp.reshape(t, (NUM_CANDIDATES,) + (1,) * len(shape)))
    good = formulas.goodput_at(jnp, perf, grad, m0, net, r, atomic, steps)
    good = jnp.where((min_atomic <= atomic) & (atomic <= max_atomic), good, 0.0)
    good = jnp.broadcast_to(good, (NUM_CANDIDATES,) + shape)
    best = jnp.max(good, axis=0)
    iota = jnp.reshape(jnp.arange(NUM_CANDIDATES, dtype=dt),
                       (NUM_CANDIDATES,) + (1,) * len(shape))
    first = jnp.min(jnp.where(good == best, iota, float(NUM_CANDIDATES)), axis=0)  # first maximum
    idx = jnp.where(first == NUM_CANDIDATES, 0, first.astype(jnp.int32))  # a NaN: the first
    atomic, steps = (jnp.broadcast_to(x, shape) for x in plan(t[idx]))
    # best is good[idx] exactly; where it is NaN, the first candidate's value
    good = jnp.where(jnp.isnan(best), good[0], best)
    return good, atomic.astype(jnp.int32), steps.astype(jnp.int32)


# --------------------------------------------------------------------------- #
# Packed kernels behind GoodputFunction (few arguments -> cheap dispatch).
# packed = [alpha_c, beta_c, alpha_n, beta_n, alpha_r, beta_r, gamma, sqr, var, M0]
# --------------------------------------------------------------------------- #


def _unpack(packed: jax.Array) -> tuple[PerfParams, GradParams, jax.Array]:
    return PerfParams(*(packed[i] for i in range(7))), GradParams(packed[7], packed[8]), packed[9]


#: XLA options of the GoodputFunction kernels: on CPU, vectorise for 512-bit registers where
#: the CPU has them (XLA prefers 256; the optimizer's grid of 50 candidates per configuration
#: measured ~25% faster, bit-identical results). A preference: CPUs without AVX-512 keep
#: their widest registers; other backends ignore it.
_KERNEL_OPTIONS = {"xla_cpu_prefer_vector_width": 512}


@functools.partial(jax.jit, static_argnames=("accumulation", "adaptdl_single_replica"),
                   compiler_options=_KERNEL_OPTIONS)
def _optimize_packed(packed: jax.Array, config: jax.Array, accumulation: bool,
                     adaptdl_single_replica: bool = True) -> jax.Array:
    """``optimize_fn`` on two arguments: ``packed`` = the 10 parameters, then
    ``[max_batch_size, min_atomic_bsz, max_atomic_bsz]`` (a device array the caller keeps),
    ``config`` = ``[num_nodes, num_replicas]`` stacked on a leading axis (one transfer).
    Returns ``[goodput, atomic_bsz, accum_steps]`` stacked, as floats."""
    perf, grad, m0 = _unpack(packed)
    g, b, s = optimize_fn(
        perf,
        grad,
        m0,
        config[0],
        config[1],
        packed[10],
        packed[11],
        packed[12],
        accumulation=accumulation,
        adaptdl_single_replica=adaptdl_single_replica,
    )
    return jnp.stack([g, b.astype(g.dtype), s.astype(g.dtype)])


@functools.partial(jax.jit, compiler_options=_KERNEL_OPTIONS)
def _evaluate_packed(packed: jax.Array, num_nodes: ArrayLike, num_replicas: ArrayLike,
                     atomic_bsz: ArrayLike, accum_steps: ArrayLike,
                     ) -> tuple[jax.Array, jax.Array]:
    perf, grad, m0 = _unpack(packed)
    dt = _fdt()
    r = jnp.asarray(num_replicas, dt)
    b = jnp.asarray(atomic_bsz, dt)
    s = jnp.asarray(accum_steps, dt)
    n = jnp.asarray(num_nodes, dt)
    good = goodput_fn(perf, grad, m0, n, r, b, s)
    ok = jnp.all(r * b * (s + 1.0) >= m0) & jnp.all(n >= 1.0) & jnp.all(n <= r)
    return good, ok


@jax.jit
def _throughput_packed(packed: jax.Array, num_nodes: ArrayLike, num_replicas: ArrayLike,
                       atomic_bsz: ArrayLike, accum_steps: ArrayLike) -> jax.Array:
    perf, _, _ = _unpack(packed)
    return throughput_fn(perf, num_nodes, num_replicas, atomic_bsz, accum_steps)


@jax.jit
def _efficiency_packed(packed: jax.Array, batch_size: ArrayLike) -> jax.Array:
    _, grad, m0 = _unpack(packed)
    return efficiency_fn(grad, m0, batch_size)
