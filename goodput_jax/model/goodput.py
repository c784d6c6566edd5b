"""Pollux goodput = throughput x statistical efficiency, and its optimizer.

Two layers:

* Pure, jittable, vmappable functions of array pytrees
  (:func:`throughput_fn`, :func:`efficiency_fn`, :func:`goodput_fn`,
  :func:`optimize_fn`). Every argument broadcasts against every other one,
  including the leaves of ``PerfParams`` / ``GradParams``, so a scheduler can
  evaluate many jobs at once either by ``jax.vmap`` or by plain broadcasting
  (e.g. params of shape [J, 1, 1] against replicas of shape [1, 1, R]).
* :class:`GoodputFunction`, the AdaptDL-compatible object holding one job's
  parameters: Python scalars in -> Python scalars out, arrays in -> numpy
  arrays out. Its methods call cached jitted kernels (one compile per input
  shape/dtype and ``accumulation`` flag). An ``optimize`` call over a few
  configurations (one, or up to ``optimize_np.HOST_MAX_CONFIGS``) instead runs
  the float64 numpy twin of the kernel (:mod:`goodput_jax.model.optimize_np`:
  same search, parity-tested), because a jitted call's fixed dispatch cost
  would dominate it.

Model (Pollux, OSDI'21; AdaptDL 0.2.11):

* ``throughput = R * b * (s + 1) / (s * T_acc + T_opt)`` (see
  :mod:`goodput_jax.model.perf` for ``T_acc`` and ``T_opt``);
* with ``M = R * b * (s + 1)``, ``scale = M / M0``,
  ``efficiency = gain / scale`` where ``gain = (var + sqr) / (var / scale + sqr)``,
  and ``gain = 1`` where that denominator is 0 (as AdaptDL does);
* ``goodput = throughput * efficiency``.

``optimize`` semantics (AdaptDL): for each configuration, 50 total batch sizes
geometrically spaced from ``max(M0, min_atomic_bsz * R)`` to ``max_batch_size``
(endpoints included, also when the first exceeds the second) are turned into
``(atomic_bsz, accum_steps)``:

* ``accumulation=True``: ``s = ceil(local / max_atomic_bsz) - 1``, at least 1
  when ``R == 1`` and ``local > M0``; ``b = ceil(local / (s + 1))``;
* ``accumulation=False``: ``s = 0``; ``b = M0`` when ``R == 1`` else ``ceil(local)``;

where ``local = M / R`` and ``ceil`` tolerates a relative rounding error
(1e-8 in float64, 2e-6 in float32). **Candidates whose ``b`` falls outside
``[min_atomic_bsz, max_atomic_bsz]`` get goodput 0** (AdaptDL 0.2.11; AdaptDL
master clips ``b`` instead). The best candidate wins (the first on ties); if
no candidate is valid the result has goodput 0 and the first candidate's
``(b, s)``.

Bounds encoding for :func:`optimize_fn` (all traced arrays, so jobs with
different bounds share one compilation):

* no maximum batch size: ``max_batch_size = init_batch_size``;
* no lower atomic bound: ``min_atomic_bsz = 1`` (values below 1 count as 1);
* no upper atomic bound: ``max_atomic_bsz = inf`` (any non-finite value means
  "``max_batch_size``", AdaptDL's default).

Example:
    >>> fn = GoodputFunction(PerfParams(0.121, 0.00568, 0.0236, 0.00634, 0.0118, 0.00317, 1.14),
    ...                      GradParams(sqr=0.00136, var=0.000502), 128)
    >>> goodput, bsz, steps = fn.optimize(1, 3)
    >>> (bsz, steps)
    (43, 0)
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from typing import Any, SupportsFloat, TypeGuard, overload

import jax
import numpy as np
from numpy.typing import ArrayLike, NDArray

from goodput_jax.model.kernels import (
    _efficiency_packed,
    _evaluate_packed,
    _fdt,
    _optimize_packed,
    _throughput_packed,
    efficiency_fn,
    goodput_fn,
    optimize_fn,
    throughput_fn,
)
from goodput_jax.model.optimize_np import (
    HOST_MAX_CONFIGS,
    NUM_CANDIDATES,
    batch_plan,
    optimize_np,
)
from goodput_jax.model.perf import predict_accum_time, predict_network_time
from goodput_jax.model.types import GradParams, PerfParams

__all__ = [
    "NUM_CANDIDATES",
    "GoodputFunction",
    "GradParams",
    "PerfParams",
    "batch_plan",
    "efficiency_fn",
    "goodput_fn",
    "optimize_fn",
    "throughput_fn",
]

#: Bounds kept as device arrays per GoodputFunction (cleared when full).
_SEARCH_CACHE_SIZE = 16


#: What a method returns for array input: one float (a 0-d input) or a numpy array.
Values = float | NDArray[Any]
#: ``optimize``'s result for array input: Python scalars for scalar input, else arrays.
Best = tuple[float, int, int] | tuple[NDArray[Any], NDArray[Any], NDArray[Any]]


def _is_scalar(x: object) -> TypeGuard[float]:
    # a Python number or a 0-d numpy value (numpy's real scalars compare and convert as
    # floats do, which is all the callers ask of them)
    return isinstance(x, numbers.Number) or (
        isinstance(x, np.ndarray | np.generic) and np.ndim(x) == 0
    )


def _check_numeric(name: str, x: ArrayLike) -> NDArray[Any]:
    a = np.asarray(x)
    if a.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be numeric, got {x!r}")
    return a


def _check_config(num_nodes: ArrayLike, num_replicas: ArrayLike, atomic_bsz: ArrayLike,
                  accum_steps: ArrayLike) -> list[NDArray[Any]]:
    """The four configuration arguments as numeric numpy arrays (TypeError names the bad one)."""
    return [
        _check_numeric("num_nodes", num_nodes),
        _check_numeric("num_replicas", num_replicas),
        _check_numeric("atomic_bsz", atomic_bsz),
        _check_numeric("accum_steps", accum_steps),
    ]


def _check_nodes(num_nodes: ArrayLike, num_replicas: ArrayLike) -> None:
    n = _check_numeric("num_nodes", num_nodes)
    r = _check_numeric("num_replicas", num_replicas)
    try:
        if n.shape != r.shape:
            n, r = np.broadcast_arrays(n, r)
    except ValueError:
        raise ValueError(
            f"num_nodes (shape {np.shape(num_nodes)}) and num_replicas (shape {np.shape(num_replicas)}) do not broadcast"
        ) from None
    if (n >= 1).all() and (n <= r).all():
        return
    bad = ~(n >= 1)
    if bad.any():
        i = np.argwhere(bad)[0] if n.ndim else ()
        raise ValueError(f"num_nodes must be >= 1, got {n[tuple(i)]}")
    bad = n > r
    if bad.any():
        i = tuple(np.argwhere(bad)[0]) if n.ndim else ()
        raise ValueError(f"num_nodes ({n[i]}) > num_replicas ({r[i]})")


class GoodputFunction:
    """Goodput model of one job (AdaptDL ``GoodputFunction`` API).

    Args:
        perf_params: ``PerfParams`` (or 7 numbers) of the step-time model.
        grad_params: ``GradParams`` (or 2 numbers): ``sqr`` = |G|^2, ``var`` = tr(Sigma) at M0.
        init_batch_size: the initial (reference) total batch size ``M0`` > 0.

    Example:
        >>> fn = GoodputFunction(PerfParams(0.121, 0.00568, 0.0236, 0.00634, 0.0118, 0.00317, 1.14),
        ...                      GradParams(0.00136, 0.000502), 128)
        >>> g = fn(1, 2, 64, 0)
        >>> isinstance(g, float) and g > 0
        True
    """

    def __init__(self, perf_params: Iterable[SupportsFloat],
                 grad_params: Iterable[SupportsFloat], init_batch_size: float) -> None:
        try:
            perf = PerfParams(*(float(x) for x in perf_params))
        except (TypeError, ValueError) as e:
            raise TypeError(f"perf_params must be 7 scalars, got {perf_params!r} ({e})") from None
        try:
            grad = GradParams(*(float(x) for x in grad_params))
        except (TypeError, ValueError) as e:
            raise TypeError(f"grad_params must be 2 scalars, got {grad_params!r} ({e})") from None
        for name, v in zip(PerfParams._fields + GradParams._fields, perf + grad):
            if not math.isfinite(v):
                raise ValueError(f"{name} must be finite, got {v}")
        if (
            not _is_scalar(init_batch_size)
            or not (init_batch_size > 0)
            or not math.isfinite(init_batch_size)
        ):
            raise ValueError(f"init_batch_size must be a positive number, got {init_batch_size!r}")
        self._perf = perf
        self._grad = grad
        self._m0 = init_batch_size
        self._packed_cache: dict[np.dtype[Any], NDArray[Any]] = {}
        self._search_cache: dict[tuple[np.dtype[Any], float, float, float], jax.Array] = {}

    @property
    def perf_params(self) -> PerfParams:
        return self._perf

    @property
    def grad_params(self) -> GradParams:
        return self._grad

    @property
    def init_batch_size(self) -> float:
        return self._m0

    def __repr__(self) -> str:
        return f"GoodputFunction({self._perf}, {self._grad}, {self._m0})"

    def _packed(self) -> NDArray[Any]:
        dt = _fdt()
        p = self._packed_cache.get(dt)
        if p is None:
            p = np.array([*self._perf, *self._grad, self._m0], dtype=dt)
            self._packed_cache[dt] = p
        return p

    @staticmethod
    def _out(x: jax.Array, scalar: bool) -> Values:
        a = np.asarray(x)
        return float(a.item()) if scalar else np.array(a)

    @overload
    def __call__(self, num_nodes: float, num_replicas: float, atomic_bsz: float,
                 accum_steps: float) -> float: ...
    @overload
    def __call__(self, num_nodes: ArrayLike, num_replicas: ArrayLike, atomic_bsz: ArrayLike,
                 accum_steps: ArrayLike) -> Values: ...
    def __call__(self, num_nodes: ArrayLike, num_replicas: ArrayLike, atomic_bsz: ArrayLike,
                 accum_steps: ArrayLike) -> Values:
        """Alias of :meth:`evaluate`."""
        return self.evaluate(num_nodes, num_replicas, atomic_bsz, accum_steps)

    @overload
    def evaluate(self, num_nodes: float, num_replicas: float, atomic_bsz: float,
                 accum_steps: float) -> float: ...
    @overload
    def evaluate(self, num_nodes: ArrayLike, num_replicas: ArrayLike, atomic_bsz: ArrayLike,
                 accum_steps: ArrayLike) -> Values: ...
    def evaluate(self, num_nodes: ArrayLike, num_replicas: ArrayLike, atomic_bsz: ArrayLike,
                 accum_steps: ArrayLike) -> Values:
        """Goodput of the given configurations.

        Raises:
            ValueError: ``num_nodes < 1``, ``num_nodes > num_replicas`` or a total
                batch size ``R * b * (s + 1)`` below ``init_batch_size``.

        Example:
            >>> fn = GoodputFunction(PerfParams(0.1, 0.01, 0.1, 0.0, 0.1, 0.0, 1.0), GradParams(0.0, 1.0), 16)
            >>> round(fn.evaluate(1, 1, 16, 0), 3)
            61.538
        """
        args = _check_config(num_nodes, num_replicas, atomic_bsz, accum_steps)
        try:
            good, ok = _evaluate_packed(self._packed(), *args)
        except (TypeError, ValueError) as e:
            if "broadcast" in str(e) or "Incompatible shapes" in str(e):
                raise ValueError(
                    f"arguments do not broadcast: shapes {[a.shape for a in args]}"
                ) from None
            raise
        if not bool(ok):
            _check_nodes(num_nodes, num_replicas)
            batch = args[1] * args[2] * (args[3] + 1)
            bad = batch < self._m0
            i = tuple(np.argwhere(bad)[0]) if np.ndim(bad) else ()
            raise ValueError(
                f"batch size num_replicas * atomic_bsz * (accum_steps + 1) = {np.broadcast_to(batch, bad.shape)[i]}"
                f" is below init_batch_size ({self._m0})"
            )
        return self._out(good, good.ndim == 0)

    @overload
    def throughput(self, num_nodes: float, num_replicas: float, atomic_bsz: float,
                   accum_steps: float) -> float: ...
    @overload
    def throughput(self, num_nodes: ArrayLike, num_replicas: ArrayLike, atomic_bsz: ArrayLike,
                   accum_steps: ArrayLike) -> Values: ...
    def throughput(self, num_nodes: ArrayLike, num_replicas: ArrayLike, atomic_bsz: ArrayLike,
                   accum_steps: ArrayLike) -> Values:
        """Samples per second (see :func:`throughput_fn`).

        Example:
            >>> fn = GoodputFunction(PerfParams(0.1, 0.01, 0.1, 0.0, 0.1, 0.0, 1.0), GradParams(0.0, 1.0), 16)
            >>> round(fn.throughput(1, 1, 16, 0), 3)
            61.538
        """
        _check_nodes(num_nodes, num_replicas)
        args = _check_config(num_nodes, num_replicas, atomic_bsz, accum_steps)
        out = _throughput_packed(self._packed(), *args)
        return self._out(out, out.ndim == 0)

    @overload
    def efficiency(self, batch_size: float) -> float: ...
    @overload
    def efficiency(self, batch_size: ArrayLike) -> Values: ...
    def efficiency(self, batch_size: ArrayLike) -> Values:
        """Statistical efficiency of total batch size ``batch_size`` (see :func:`efficiency_fn`).

        Example:
            >>> fn = GoodputFunction(PerfParams(0.1, 0.01, 0.1, 0.0, 0.1, 0.0, 1.0), GradParams(1.0, 1.0), 16)
            >>> round(fn.efficiency(32), 4)
            0.6667
        """
        b = _check_numeric("batch_size", batch_size)
        out = _efficiency_packed(self._packed(), b)
        return self._out(out, out.ndim == 0)

    @overload
    def optimize(self, num_nodes: float, num_replicas: float,
                 max_batch_size: float | None = None,
                 atomic_bsz_range: tuple[float | None, float | None] | None = None,
                 accumulation: bool = False, *,
                 adaptdl_single_replica: bool = True) -> tuple[float, int, int]: ...
    @overload
    def optimize(self, num_nodes: ArrayLike, num_replicas: ArrayLike,
                 max_batch_size: float | None = None,
                 atomic_bsz_range: tuple[float | None, float | None] | None = None,
                 accumulation: bool = False, *, adaptdl_single_replica: bool = True) -> Best: ...
    def optimize(
        self,
        num_nodes: ArrayLike,
        num_replicas: ArrayLike,
        max_batch_size: float | None = None,
        atomic_bsz_range: tuple[float | None, float | None] | None = None,
        accumulation: bool = False,
        *,
        adaptdl_single_replica: bool = True,
    ) -> Best:
        """Best ``(goodput, atomic_bsz, accum_steps)`` for each ``(num_nodes, num_replicas)``.

        Args:
            num_nodes, num_replicas: scalars or broadcastable arrays.
            max_batch_size: largest total batch size; ``None`` means ``init_batch_size``.
            atomic_bsz_range: ``(min, max)`` per-replica batch size, either may be
                ``None``/0 (no bound).
            accumulation: allow gradient accumulation.
            adaptdl_single_replica: AdaptDL's rule (default): one replica keeps its
                per-replica batch at ``init_batch_size`` and grows the batch only by
                accumulation. False: one replica follows the rule of many (see
                :func:`batch_plan`), as the job's own search does.

        Returns:
            ``(goodput, atomic_bsz, accum_steps)``: Python ``float, int, int`` when
            both inputs are scalars, else numpy arrays of the broadcast shape.

        Raises:
            ValueError: ``num_nodes < 1``, ``num_nodes > num_replicas``,
                ``max_batch_size < init_batch_size`` or an empty atomic range.

        Example:
            >>> fn = GoodputFunction(PerfParams(0.121, 0.00568, 0.0236, 0.00634, 0.0118, 0.00317, 1.14),
            ...                      GradParams(0.00136, 0.000502), 128)
            >>> fn.optimize(1, 1, max_batch_size=1280)[1:]
            (128, 0)
        """
        m0 = self._m0
        if max_batch_size is None:
            max_batch_size = m0
        elif not _is_scalar(max_batch_size) or not (max_batch_size >= m0):
            raise ValueError(f"max_batch_size ({max_batch_size!r}) < init_batch_size ({m0})")
        lo, hi = (None, None) if atomic_bsz_range is None else atomic_bsz_range
        lo = lo or 1
        hi = hi or math.inf
        if not (_is_scalar(lo) and _is_scalar(hi) and lo <= hi):
            raise ValueError(
                f"atomic_bsz_range must be (min, max) with min <= max, got {atomic_bsz_range!r}"
            )
        if _is_scalar(num_nodes) and _is_scalar(num_replicas):
            n0, r0 = float(num_nodes), float(num_replicas)
            if not (n0 >= 1):
                raise ValueError(f"num_nodes must be >= 1, got {num_nodes}")
            if n0 > r0:
                raise ValueError(f"num_nodes ({num_nodes}) > num_replicas ({num_replicas})")
            return optimize_np(self._perf, self._grad, float(m0), n0, r0, float(max_batch_size),
                               float(lo), float(hi), bool(accumulation),
                               bool(adaptdl_single_replica))
        _check_nodes(num_nodes, num_replicas)
        nodes, replicas = np.asarray(num_nodes), np.asarray(num_replicas)
        shape = np.broadcast_shapes(nodes.shape, replicas.shape)
        if math.prod(shape) <= HOST_MAX_CONFIGS:  # a few: the float64 numpy twin, no dispatch
            return optimize_np(self._perf, self._grad, float(m0),
                               np.broadcast_to(nodes, shape).astype(np.float64),
                               np.broadcast_to(replicas, shape).astype(np.float64),
                               float(max_batch_size), float(lo), float(hi), bool(accumulation),
                               bool(adaptdl_single_replica))
        dt = _fdt()
        config = np.empty((2, *shape), dt)  # one transfer for both arrays
        config[0] = nodes
        config[1] = replicas
        out = np.asarray(
            _optimize_packed(self._search_params(dt, max_batch_size, lo, hi), config,
                             bool(accumulation), bool(adaptdl_single_replica))
        )
        return np.array(out[0]), out[1].astype(np.int64), out[2].astype(np.int64)

    def _search_params(self, dt: np.dtype[Any], max_batch_size: float, lo: float,
                       hi: float) -> jax.Array:
        """The kernel's parameters and bounds as a device array, kept per bounds (a
        repeated search transfers only its configurations)."""
        key = (dt, float(max_batch_size), float(lo), float(hi))
        p = self._search_cache.get(key)
        if p is None:
            if len(self._search_cache) >= _SEARCH_CACHE_SIZE:
                self._search_cache.clear()
            p = jax.device_put(np.array([*self._perf, *self._grad, self._m0, *key[1:]], dt))
            self._search_cache[key] = p
        return p


# --------------------------------------------------------------------------- #
# AdaptDL module-level names, so `import adaptdl.goodput as goodput` becomes
# `import goodput_jax.model.goodput as goodput` with nothing else changed
# (AdaptDL's own fit tests use these private helpers).
# --------------------------------------------------------------------------- #


def fit_perf_params(num_nodes: ArrayLike, num_replicas: ArrayLike, atomic_bsz: ArrayLike,
                    accum_step_time: ArrayLike, optim_step_time: ArrayLike) -> PerfParams:
    """AdaptDL's ``adaptdl.goodput.fit_perf_params`` (see :func:`goodput_jax.model.perf.fit_perf_params`).

    Example:
        >>> p = fit_perf_params([1, 1, 1], [1, 1, 1], [16, 32, 64], [0.26, 0.42, 0.74], [0.26, 0.42, 0.74])
        >>> 0.005 < p.beta_c < 0.02
        True
    """
    from goodput_jax.model.perf import fit_perf_params as _fit

    return _fit(num_nodes, num_replicas, atomic_bsz, accum_step_time, optim_step_time)


def _predict_accum_time(params: Iterable[float], atomic_bsz: ArrayLike) -> NDArray[Any]:
    """AdaptDL's private ``_predict_accum_time(params, atomic_bsz)`` (numpy out)."""
    return np.asarray(predict_accum_time(PerfParams(*params), np.asarray(atomic_bsz)))


def _predict_network_time(params: Iterable[float], num_nodes: ArrayLike,
                          num_replicas: ArrayLike) -> NDArray[Any]:
    """AdaptDL's private ``_predict_network_time(params, num_nodes, num_replicas)`` (numpy out)."""
    return np.asarray(
        predict_network_time(PerfParams(*params), np.asarray(num_nodes), np.asarray(num_replicas))
    )


def _obj_fn(params: Iterable[SupportsFloat], num_nodes: ArrayLike, num_replicas: ArrayLike,
            atomic_bsz: ArrayLike, accum_step_time: ArrayLike,
            optim_step_time: ArrayLike) -> float:
    """AdaptDL's private fit objective ``_obj_fn`` (the loss :func:`fit_perf_params` minimises)."""
    from goodput_jax.model.perf import fit_loss

    return float(
        fit_loss(PerfParams(*(float(x) for x in params)), num_nodes, num_replicas, atomic_bsz,
                 accum_step_time, optim_step_time)
    )
