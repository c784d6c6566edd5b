"""The Pollux formulas, written once, and their float64 numpy twins.

Each formula of the goodput model is written here ONCE, as a function of an array
namespace ``xp`` (``numpy`` or ``jax.numpy``): the jitted kernels of
:mod:`goodput_jax.model.perf`, :mod:`goodput_jax.model.goodput` and
:mod:`goodput_jax.model.scaling` call them with ``jax.numpy``; the public numpy twins
below call them with ``numpy`` in float64. The twins serve callers that evaluate the
model on the host, a few configurations at a time, where a jitted call's dispatch (and
a compile per new input length) would cost more than the arithmetic: the hooks'
profile and search, the adaptive controller, the simulator.

The formulas (Pollux, OSDI'21; AdaptDL 0.2.11), for ``b`` the atomic batch size,
``s`` the extra accumulation steps, ``R`` replicas on ``N`` nodes:

* ``T_acc = alpha_c + beta_c * b``;
* ``T_net = alpha_n + beta_n * max(R - 2, 1e-8)`` when ``N > 1``,
  ``alpha_r + beta_r * max(R - 2, 1e-8)`` when ``N == 1 < R``, ``1e-8 + 1e-8 * 1e-8``
  for one replica;
* ``T_opt = (T_acc**gamma + T_net**gamma) ** (1 / gamma)`` (evaluated as
  ``hi * exp(log1p((lo / hi)**gamma) / gamma)``: no overflow in float32);
* ``throughput = R * b * (s + 1) / (s * T_acc + T_opt)`` (samples/s);
* ``gain = (var + sqr) / (var / scale + sqr)``, 1 where that denominator is not > 0,
  ``scale = M / M0``; ``efficiency = gain / scale``; ``goodput = throughput * efficiency``.

Twins: Python scalars (or 0-d arrays) in -> Python ``float`` out; arrays in -> float64
numpy arrays of the broadcast shape. Parameters may be ``PerfParams`` / ``GradParams``
of numbers or of arrays (they broadcast like the configuration arguments). This module
imports no JAX.

Example:
    >>> from goodput_jax.model.types import GradParams, PerfParams
    >>> p = PerfParams(0.1, 0.01, 0.0, 0.0, 0.0, 0.0, 1.0)
    >>> round(throughput_np(p, 1, 1, 10, 0), 3)
    50.0
    >>> round(efficiency_np(GradParams(sqr=1.0, var=1.0), 10, 20), 4)
    0.6667
"""

from __future__ import annotations

import numbers
import types
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from goodput_jax.model.types import GradParams, PerfParams

__all__ = [
    "TINY",
    "efficiency_np",
    "gain_np",
    "goodput_np",
    "predict_accum_time_np",
    "predict_network_time_np",
    "predict_optim_time_np",
    "throughput_np",
]

#: Lower bound of every alpha/beta, and the value used for "absent" network links.
TINY = 1e-8


# --------------------------------------------------------------------------- the formulas
# Generic over the array namespace ``xp``; the arguments are already arrays of the
# working float dtype (the callers convert). Used by the jitted kernels of this room.


def accum_time(xp: Any, perf: PerfParams, b: Any) -> Any:
    """``alpha_c + beta_c * b``."""
    del xp
    return perf.alpha_c + perf.beta_c * b


def network_time(xp: Any, perf: PerfParams, n: Any, r: Any) -> Any:
    """The most significant link's time: inter-node, intra-node, or ~0 for one replica."""
    multi_node = n > 1
    multi_replica = r > 1
    alpha = xp.where(multi_node, perf.alpha_n, xp.where(multi_replica, perf.alpha_r, TINY))
    beta = xp.where(multi_node, perf.beta_n, xp.where(multi_replica, perf.beta_r, TINY))
    return alpha + beta * xp.maximum(r - 2, TINY)


def optim_parts(xp: Any, gamma: Any, accum: Any, network: Any) -> tuple[Any, Any]:
    """``(hi, log((1 + (lo/hi)**gamma)) / gamma)``: ``T_opt = hi * exp(second)``.

    ``(a^g + n^g)^(1/g) = hi * (1 + (lo/hi)^g)^(1/g)`` with ``hi = max(a, n)``,
    ``lo = min(a, n)``: no overflow (gamma up to 10 and times of 1e3 s overflow float32
    powers) and only three transcendentals per element.
    """
    hi = xp.maximum(accum, network)
    lo = xp.minimum(accum, network)
    return hi, xp.log1p(xp.exp(gamma * xp.log(lo / hi))) / gamma


def log_optim_time(xp: Any, gamma: Any, accum: Any, network: Any) -> Any:
    """``log T_opt`` from ``T_acc`` and ``T_net``."""
    hi, log_ratio = optim_parts(xp, gamma, accum, network)
    return xp.log(hi) + log_ratio


def optim_time(xp: Any, gamma: Any, accum: Any, network: Any) -> Any:
    """``T_opt = (T_acc**gamma + T_net**gamma) ** (1 / gamma)``."""
    hi, log_ratio = optim_parts(xp, gamma, accum, network)
    return hi * xp.exp(log_ratio)


def throughput(xp: Any, perf: PerfParams, n: Any, r: Any, b: Any, s: Any) -> Any:
    """``R * b * (s + 1) / (s * T_acc + T_opt)``."""
    return throughput_at(xp, perf, network_time(xp, perf, n, r), r, b, s)


def throughput_at(xp: Any, perf: PerfParams, network: Any, r: Any, b: Any, s: Any) -> Any:
    """:func:`throughput` given the network time (a host caller computes it once per
    placement, on scalars)."""
    accum = accum_time(xp, perf, b)
    optim = optim_time(xp, perf.gamma, accum, network)
    return r * b * (s + 1.0) / (s * accum + optim)


def gain(xp: Any, sqr: Any, var: Any, scale: Any) -> Any:
    """The AdaScale gain ``(var + sqr) / (var / scale + sqr)``, 1 where the denominator is not > 0."""
    denom = var / scale + sqr
    ok = denom > 0
    return xp.where(ok, (var + sqr) / xp.where(ok, denom, 1.0), 1.0)


def efficiency(xp: Any, grad: GradParams, m0: Any, batch: Any) -> Any:
    """``gain / scale`` with ``scale = batch / m0``."""
    scale = batch / m0
    return gain(xp, grad.sqr, grad.var, scale) / scale


#: ``log(1 + u) = 2 atanh(z)``, ``z = u / (2 + u)`` in ``[0, 1/3]`` for ``u`` in ``[0, 1]``:
#: the odd series' coefficients to ``z**15`` (the next term < 3e-10, below float32's
#: rounding), for :func:`log1p_unit`.
_ATANH_SERIES = tuple(2.0 / (2 * k + 1) for k in range(8))


def log1p_unit(xp: Any, u: Any) -> Any:
    """``log(1 + u)`` for ``u`` in ``[0, 1]``: in float32 a series of 8 multiply-adds and
    one division (XLA's CPU ``log`` costs several times more: ~20% of the optimizer's
    time), else ``xp.log(1 + u)``."""
    if xp.result_type(u) != np.float32:  # the array's own dtype (a Python float: float64)
        return xp.log(1.0 + u)
    z = u / (2.0 + u)
    z2 = z * z
    acc = _ATANH_SERIES[-1] * z2
    for c in reversed(_ATANH_SERIES[1:-1]):
        acc = (acc + c) * z2
    return z * (acc + _ATANH_SERIES[0])


def goodput_at(xp: Any, perf: PerfParams, grad: GradParams, m0: Any, network: Any, r: Any,
               b: Any, s: Any) -> Any:
    """``throughput_at * efficiency`` at ``M = R * b * (s + 1)``, with one division.

    ``throughput = M / (s * T_acc + T_opt)`` and, for ``M, M0 > 0``,
    ``efficiency = M0 (var + sqr) / (M0 var + M sqr)`` (the gain over the scale, the
    gain's denominator cleared by ``M / M0``; ``M0 / M`` where that denominator is not
    > 0, the gain being 1). The optimizer's per-candidate form: a search evaluates it
    50 times per configuration. ``T_opt`` as :func:`optim_time`, written
    ``base * (1 + u)**(1/gamma)`` with ``u = (lo/hi)**|gamma|`` in ``[0, 1]`` (``base = hi``
    for ``gamma > 0``, ``lo`` otherwise: the same value), and :func:`log1p_unit` for
    ``log(1 + u)`` (the absolute error of the log, so the relative error of ``T_opt``,
    stays ~1 ulp; ``log1p`` costs ~3x ``log`` on CPU).
    """
    accum = accum_time(xp, perf, b)
    hi = xp.maximum(accum, network)
    lo = xp.minimum(accum, network)
    g = perf.gamma
    u = xp.exp(xp.abs(g) * xp.log(lo / hi))
    step = s * accum + xp.where(g > 0, hi, lo) * xp.exp(log1p_unit(xp, u) / g)
    batch = r * b * (s + 1.0)
    denom = m0 * grad.var + batch * grad.sqr
    ok = denom > 0
    return xp.where(ok, batch * (m0 * (grad.var + grad.sqr)), m0) / (step * xp.where(ok, denom, 1.0))


# --------------------------------------------------------------------------- numpy twins


def _f64(x: Any) -> Any:
    # a float64 scalar for a number (numpy's arithmetic without 0-d array overhead: the
    # simulator calls gain_np once per job and step), a float64 array otherwise
    if isinstance(x, numbers.Real):
        return np.float64(x)
    return np.asarray(x, np.float64)


def _perf64(perf: Any) -> PerfParams:
    return PerfParams(*(_f64(v) for v in perf))


def _grad64(grad: Any) -> GradParams:
    return GradParams(*(_f64(v) for v in grad))


def _where_scalar(cond: Any, a: Any, b: Any) -> Any:
    return a if cond else b


#: The namespace for the formulas on float64 scalars: numpy's functions keep scalars
#: scalar, except ``where``, which makes 0-d arrays (several times slower to compute
#: with); this one picks instead.
SCALAR_NP = types.SimpleNamespace(where=_where_scalar, maximum=np.maximum,
                                    minimum=np.minimum, log=np.log, log1p=np.log1p, exp=np.exp)


def _xp(*args: Any) -> Any:
    """The namespace for these float64 arguments: scalar numpy when all are scalars."""
    return SCALAR_NP if all(isinstance(a, np.float64) for a in args) else np


def _out(x: Any) -> float | np.ndarray:
    x = np.asarray(x)
    return float(x) if x.ndim == 0 else x


def predict_accum_time_np(perf: PerfParams, atomic_bsz: ArrayLike) -> float | np.ndarray:
    """float64 numpy twin of :func:`goodput_jax.model.perf.predict_accum_time`.

    Example:
        >>> round(predict_accum_time_np(PerfParams(0.1, 0.01, 0, 0, 0, 0, 1.0), 10), 6)
        0.2
    """
    return _out(accum_time(np, _perf64(perf), _f64(atomic_bsz)))


def predict_network_time_np(perf: PerfParams, num_nodes: ArrayLike, num_replicas: ArrayLike,
                            ) -> float | np.ndarray:
    """float64 numpy twin of :func:`goodput_jax.model.perf.predict_network_time`.

    Example:
        >>> round(predict_network_time_np(PerfParams(0.1, 0.01, 0.5, 0.1, 0.2, 0.05, 1.0), 2, 4), 6)
        0.7
    """
    p, n, r = _perf64(perf), _f64(num_nodes), _f64(num_replicas)
    return _out(network_time(_xp(*p, n, r), p, n, r))


def predict_optim_time_np(perf: PerfParams, num_nodes: ArrayLike, num_replicas: ArrayLike,
                          atomic_bsz: ArrayLike,
                          ) -> float | np.ndarray:
    """float64 numpy twin of :func:`goodput_jax.model.perf.predict_optim_time`.

    Example:
        >>> round(predict_optim_time_np(PerfParams(0.3, 0.0, 0.4, 0.0, 0.0, 0.0, 1.0), 2, 2, 1), 5)
        0.7
        >>> predict_optim_time_np(PerfParams(0.3, 0.0, 0.4, 0.0, 0.0, 0.0, 1.0), 2, 2, [1, 2]).shape
        (2,)
    """
    p, n, r, b = _perf64(perf), _f64(num_nodes), _f64(num_replicas), _f64(atomic_bsz)
    with np.errstate(divide="ignore", invalid="ignore"):
        net = network_time(_xp(*p, n, r), p, n, r)
        xp = _xp(*p, net, b)
        return _out(optim_time(xp, p.gamma, accum_time(xp, p, b), net))


def throughput_np(perf: PerfParams, num_nodes: ArrayLike, num_replicas: ArrayLike,
                  atomic_bsz: ArrayLike, accum_steps: ArrayLike) -> float | np.ndarray:
    """float64 numpy twin of :func:`goodput_jax.model.goodput.throughput_fn` (samples/s).

    ``R * b * (s + 1) / (s * T_acc + T_opt)``, without a device program (no compile per
    input length).

    Example:
        >>> p = PerfParams(0.1, 0.01, 0.0, 0.0, 0.0, 0.0, 1.0)
        >>> round(throughput_np(p, 1, 1, 10, 0), 3)
        50.0
        >>> throughput_np(p, 1, 1, np.array([10, 20]), 0).round(3).tolist()
        [50.0, 66.667]
    """
    p, n, r = _perf64(perf), _f64(num_nodes), _f64(num_replicas)
    b, s = _f64(atomic_bsz), _f64(accum_steps)
    with np.errstate(divide="ignore", invalid="ignore"):
        net = network_time(_xp(*p, n, r), p, n, r)
        return _out(throughput_at(_xp(*p, net, r, b, s), p, net, r, b, s))


def gain_np(grad: GradParams, scale: ArrayLike) -> float | np.ndarray:
    """The AdaScale gain ``(var + sqr) / (var / scale + sqr)`` (1 where that denominator is
    not > 0): how many ``M0``-batch steps one step at ``scale * M0`` is worth.

    The unclamped gain of the efficiency (:func:`efficiency_np` is ``gain / scale``);
    :func:`goodput_jax.model.scaling.adascale_gain` applies it to clamped statistics.

    Example:
        >>> round(gain_np(GradParams(sqr=1.0, var=3.0), 4.0), 4)
        2.2857
        >>> gain_np(GradParams(sqr=0.0, var=0.0), 4.0)
        1.0
    """
    g, scale = _grad64(grad), _f64(scale)
    with np.errstate(divide="ignore", invalid="ignore"):
        return _out(gain(_xp(*g, scale), g.sqr, g.var, scale))


def efficiency_np(grad: GradParams, init_batch_size: ArrayLike,
                  batch_size: ArrayLike) -> float | np.ndarray:
    """float64 numpy twin of :func:`goodput_jax.model.goodput.efficiency_fn`.

    ``gain / scale`` with ``scale = batch_size / init_batch_size``.

    Example:
        >>> round(efficiency_np(GradParams(sqr=1.0, var=1.0), 10, 20), 4)
        0.6667
        >>> efficiency_np(GradParams(0.0, 1.0), 10, [10, 20]).tolist()
        [1.0, 1.0]
    """
    g, m0, batch = _grad64(grad), _f64(init_batch_size), _f64(batch_size)
    with np.errstate(divide="ignore", invalid="ignore"):
        return _out(efficiency(_xp(*g, m0, batch), g, m0, batch))


def goodput_np(perf: PerfParams, grad: GradParams, init_batch_size: ArrayLike,
               num_nodes: ArrayLike, num_replicas: ArrayLike, atomic_bsz: ArrayLike,
               accum_steps: ArrayLike) -> float | np.ndarray:
    """float64 numpy twin of :func:`goodput_jax.model.goodput.goodput_fn`.

    ``throughput * efficiency`` at ``M = R * b * (s + 1)``; no validation (see
    :meth:`goodput_jax.model.goodput.GoodputFunction.evaluate` for the checked form).

    Example:
        >>> p = PerfParams(0.1, 0.01, 0.0, 0.0, 0.0, 0.0, 1.0)
        >>> round(goodput_np(p, GradParams(0.0, 1.0), 10, 1, 1, 10, 0), 3)
        50.0
    """
    p, g, m0 = _perf64(perf), _grad64(grad), _f64(init_batch_size)
    n, r, b, s = _f64(num_nodes), _f64(num_replicas), _f64(atomic_bsz), _f64(accum_steps)
    with np.errstate(divide="ignore", invalid="ignore"):
        net = network_time(_xp(*p, n, r), p, n, r)
        xp = _xp(*p, *g, m0, net, r, b, s)
        return _out(throughput_at(xp, p, net, r, b, s) * efficiency(xp, g, m0, r * b * (s + 1.0)))
