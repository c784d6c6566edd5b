"""Pollux step-time model: predictions (pure ``jnp``) and parameter fitting.

The model (Pollux, OSDI'21; AdaptDL) predicts, for ``b`` = atomic (per-replica)
batch size, ``R`` replicas on ``N`` nodes:

* compute time of one micro-step: ``T_acc = alpha_c + beta_c * b``;
* network time of one gradient synchronisation: the most significant link
  decides, ``alpha_n + beta_n * max(R - 2, 1e-8)`` when ``N > 1``,
  ``alpha_r + beta_r * max(R - 2, 1e-8)`` when ``N == 1 and R > 1``, and
  ``1e-8 + 1e-8 * 1e-8`` (practically zero) for a single replica (as AdaptDL);
* optimizer step time (compute overlapped with communication):
  ``T_opt = (T_acc**gamma + T_net**gamma) ** (1 / gamma)``, ``gamma >= 1``.

All prediction functions are pure, broadcast over their arguments and work
under ``jax.jit`` / ``jax.vmap`` (params may be pytrees of arrays).

Example:
    >>> from goodput_jax.model.perf import PerfParams, predict_optim_time
    >>> p = PerfParams(0.121, 0.00568, 0.0236, 0.00634, 0.0118, 0.00317, 1.14)
    >>> float(predict_optim_time(p, 1, 1, 128)) > 0.121
    True
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike, NDArray

from goodput_jax.model import formulas
from goodput_jax.model.buckets import bucket
from goodput_jax.model.perf_solver import (
    FIT_MAX_ITERS,
    _data_start,
    _from_unconstrained,
    _solve_plbfgs,
    _to_unconstrained,
)
from goodput_jax.model.types import GradParams, PerfParams

__all__ = [
    "FIT_INIT",
    "FIT_MAX_ITERS",
    "GradParams",
    "PerfParams",
    "ProfileWarning",
    "fit_loss",
    "fit_perf_params",
    "fit_perf_params_batched",
    "precompile_fit",
    "predict_accum_time",
    "predict_log_optim_time",
    "predict_network_time",
    "predict_optim_time",
]


class ProfileWarning(UserWarning):
    """A profile row the fit accepts but that looks physically odd (e.g. nodes > replicas)."""


# Lower bound of every alpha/beta, value used for "absent" network links.
_TINY = formulas.TINY


def _float_dtype() -> np.dtype[Any]:
    return jax.dtypes.canonicalize_dtype(np.float64)  # float64 under x64, else float32


@jax.jit
def predict_accum_time(perf: PerfParams, atomic_bsz: Any) -> jax.Array:
    """Predicted time of one accumulation (compute-only) micro-step.

    Args:
        perf: step-time parameters (scalars or arrays broadcasting with the rest).
        atomic_bsz: per-replica batch size ``b``.

    Returns:
        ``alpha_c + beta_c * b``.

    Example:
        >>> p = PerfParams(0.1, 0.01, 0.0, 0.0, 0.0, 0.0, 1.0)
        >>> round(float(predict_accum_time(p, 10)), 6)
        0.2
    """
    return formulas.accum_time(jnp, perf, jnp.asarray(atomic_bsz, _float_dtype()))


@jax.jit
def predict_network_time(perf: PerfParams, num_nodes: Any, num_replicas: Any) -> jax.Array:
    """Predicted gradient-synchronisation time (see the module docstring).

    Args:
        perf: step-time parameters.
        num_nodes: number of nodes ``N``.
        num_replicas: number of replicas ``R``.

    Returns:
        The network time, ``~1e-8`` for a single replica.

    Example:
        >>> p = PerfParams(0.1, 0.01, 0.5, 0.1, 0.2, 0.05, 1.0)
        >>> round(float(predict_network_time(p, 2, 4)), 6)
        0.7
    """
    dt = _float_dtype()
    n = jnp.asarray(num_nodes, dt)
    r = jnp.asarray(num_replicas, dt)
    return formulas.network_time(jnp, perf, n, r)


@jax.jit
def predict_log_optim_time(
    perf: PerfParams, num_nodes: Any, num_replicas: Any, atomic_bsz: Any
) -> jax.Array:
    """Natural log of the predicted optimizer-step time (numerically stable).

    Example:
        >>> p = PerfParams(0.1, 0.01, 0.0, 0.0, 0.0, 0.0, 1.0)
        >>> round(float(jnp.exp(predict_log_optim_time(p, 1, 1, 10))), 6)
        0.2
    """
    accum = predict_accum_time(perf, atomic_bsz)
    network = predict_network_time(perf, num_nodes, num_replicas)
    return formulas.log_optim_time(jnp, perf.gamma, accum, network)


@jax.jit
def predict_optim_time(
    perf: PerfParams, num_nodes: Any, num_replicas: Any, atomic_bsz: Any
) -> jax.Array:
    """Predicted optimizer-step time ``(T_acc**gamma + T_net**gamma) ** (1/gamma)``.

    Example:
        >>> p = PerfParams(0.3, 0.0, 0.4, 0.0, 0.0, 0.0, 1.0)
        >>> round(float(predict_optim_time(p, 2, 2, 1)), 5)
        0.7
    """
    return jnp.exp(predict_log_optim_time(perf, num_nodes, num_replicas, atomic_bsz))


# --------------------------------------------------------------------------- #
# Fitting
# --------------------------------------------------------------------------- #

#: Placeholder values of parameters the data cannot identify (frozen by the fit's mask;
#: the network terms are then set to 1e-8). The solve itself starts from the data's scale
#: (``_data_start``): a least-squares line of the accumulation time over the batch size,
#: every network term at ``alpha_c`` (``beta/alpha = 1``: starting with a large
#: retrogression keeps the solve out of a local minimum with a tiny beta, which AdaptDL's
#: start fell into on 3 of the first 60 of AdaptDL's own random fit-test profiles; this
#: start passes all 600 tried, seeds 0-299 at both noise levels), ``gamma = 1.001``.
FIT_INIT = PerfParams(0.1, 0.01, 0.1, 0.1, 0.1, 0.1, 1.001)


@jax.jit
def fit_loss(
    perf: PerfParams,
    num_nodes: ArrayLike,
    num_replicas: ArrayLike,
    atomic_bsz: ArrayLike,
    accum_step_time: ArrayLike,
    optim_step_time: ArrayLike,
    mask: ArrayLike | None = None,
) -> jax.Array:
    """Objective minimised by :func:`fit_perf_params` (pure, differentiable).

    ``RMSE(log T_acc_pred, log T_acc) + RMSE(log T_opt_pred, log T_opt)
    + 1e-3 * (gamma - 1)**2 + 1e-2 * ((beta_n/alpha_n)**2 + (beta_r/alpha_r)**2)``.

    Unlike AdaptDL, whose ``_rmse`` divides each log-error by the log of the
    measured time (singular for a 1 s step), this is the plain RMSE of the logs.

    Args:
        perf: parameters to score.
        num_nodes, num_replicas, atomic_bsz: profiled configurations, shape [P].
        accum_step_time, optim_step_time: measured times, shape [P].
        mask: optional boolean [P]; points where it is False are ignored.

    Returns:
        A scalar loss.

    Example:
        >>> p = PerfParams(0.1, 0.01, 0.5, 1.0, 1e-6, 1e-6, 1.0)
        >>> t = predict_accum_time(p, jnp.array([16.0, 32.0]))
        >>> float(fit_loss(p, [1, 1], [1, 1], [16, 32], t, t)) < 1e-1
        True
    """
    dt = _float_dtype()
    acc = jnp.asarray(accum_step_time, dt)
    opt = jnp.asarray(optim_step_time, dt)
    if mask is None:
        w = jnp.ones(acc.shape, dt)
    else:
        w = jnp.asarray(mask, dt)
    # Padded points may hold arbitrary values: make their logs harmless.
    log_acc = jnp.log(jnp.where(w > 0, acc, 1.0))
    log_opt = jnp.log(jnp.where(w > 0, opt, 1.0))
    dt_ = _float_dtype()
    b = jnp.where(w > 0, jnp.asarray(atomic_bsz, dt_), 1.0)
    n = jnp.where(w > 0, jnp.asarray(num_nodes, dt_), 1.0)
    r = jnp.where(w > 0, jnp.asarray(num_replicas, dt_), 1.0)
    return _loss_from_logs(perf, n, r, b, log_acc, log_opt, w)


#: A poor fit is retried with RMSEs ``sqrt(mean square + _SMOOTH)``: smooth at an exact
#: fit. A plain RMSE has a kink at zero (its gradient keeps magnitude ~1 however small the error), so
#: a profile that the accumulation line fits exactly up to float32 rounding (two
#: batch sizes without accumulation: one log error of ~5e-7) gave the solver a
#: gradient pointing across the kink, every line-search trial failed and the fit
#: stayed at its starting point (network terms at ``alpha_c``: 2.5-3x the measured
#: step; seen as "model error 2.68" in ``benchmarks/adaptive_bench.py``). 1e-8 is a
#: log error of 1e-4, far below any measured noise: the minimiser does not move.
_SMOOTH = 1e-8
#: ... retried when the plain solve ends above this loss (an RMS log error of ~0.1 or worse:
#: a kink-stuck fit was 2.5-3x off; near-exact fits, e.g. simulated profiles, keep theirs)
_RETRY_ABOVE = 0.1


def _loss_from_logs(perf: PerfParams, n: jax.Array, r: jax.Array, b: jax.Array,
                    log_acc: jax.Array, log_opt: jax.Array, w: jax.Array,
                    smooth: float = 0.0) -> jax.Array:
    """fit_loss on precomputed log targets; every entry must be finite (w weights).

    ``smooth > 0``: RMSEs as ``sqrt(mean square + smooth)`` (the retry's objective);
    0: ``sqrt(max(mean square, 1e-30))`` (:func:`fit_loss`, AdaptDL's value, the solve's).
    """
    count = jnp.maximum(jnp.sum(w), 1.0)
    pred_acc = perf.alpha_c + perf.beta_c * b
    pred_net = predict_network_time(perf, n, r)
    pred_log_opt = formulas.log_optim_time(jnp, perf.gamma, pred_acc, pred_net)
    e1 = w * (jnp.log(pred_acc) - log_acc) ** 2
    e2 = w * (pred_log_opt - log_opt) ** 2
    # sqrt'(0) is infinite: floor the mean square (irrelevant at any real noise).
    if smooth:
        err1 = jnp.sqrt(jnp.sum(e1) / count + smooth)
        err2 = jnp.sqrt(jnp.sum(e2) / count + smooth)
    else:
        err1 = jnp.sqrt(jnp.maximum(jnp.sum(e1) / count, 1e-30))
        err2 = jnp.sqrt(jnp.maximum(jnp.sum(e2) / count, 1e-30))
    reg1 = 1e-3 * (perf.gamma - 1.0) ** 2
    reg2 = 1e-2 * ((perf.beta_n / perf.alpha_n) ** 2 + (perf.beta_r / perf.alpha_r) ** 2)
    return err1 + err2 + reg1 + reg2


def _fit_single(
    num_nodes: jax.Array,
    num_replicas: jax.Array,
    atomic_bsz: jax.Array,
    accum_step_time: jax.Array,
    optim_step_time: jax.Array,
    mask: jax.Array,
) -> jax.Array:
    """Fit one profile (pure; vmapped for the batched form). Returns params [7]."""
    dt = _float_dtype()
    n = num_nodes.astype(dt)
    r = num_replicas.astype(dt)
    b = atomic_bsz.astype(dt)
    acc = accum_step_time.astype(dt)
    opt = optim_step_time.astype(dt)
    w = mask.astype(dt)
    valid = mask.astype(bool)
    count = jnp.maximum(jnp.sum(w), 1.0)

    # Identifiability (only over valid points).
    big = jnp.asarray(jnp.finfo(dt).max, dt)
    b_min = jnp.min(jnp.where(valid, b, big))
    b_max = jnp.max(jnp.where(valid, b, -big))
    single_bsz = b_min == b_max
    any_multi_node = jnp.any(valid & (n > 1))
    any_single_node_multi = jnp.any(valid & (n == 1) & (r > 1))
    any_r_gt_2 = jnp.any(valid & (r > 2))

    init = jnp.asarray(FIT_INIT, dt)
    fixed = init.at[0].set(jnp.where(single_bsz, jnp.sum(w * acc) / count / 2.0, init[0]))
    fixed = fixed.at[jnp.array([2, 3, 4, 5])].set(_TINY)
    # free[i] == False -> parameter i stays at fixed[i].
    free = jnp.stack(
        [
            ~single_bsz,
            jnp.asarray(True),
            any_multi_node,
            any_multi_node & any_r_gt_2,
            any_single_node_multi,
            any_single_node_multi & any_r_gt_2,
            jnp.asarray(True),
        ]
    )
    is_gamma = jnp.arange(7) == 6

    def params_of(u: jax.Array) -> jax.Array:
        return jnp.where(free, _from_unconstrained(u, is_gamma), fixed)

    log_acc = jnp.log(acc)  # padding holds 1.0 -> 0.0
    log_opt = jnp.log(opt)

    def loss(u: jax.Array) -> jax.Array:
        return _loss_from_logs(PerfParams(*params_of(u)), n, r, b, log_acc, log_opt, w)

    def smooth_loss(u: jax.Array) -> jax.Array:
        return _loss_from_logs(PerfParams(*params_of(u)), n, r, b, log_acc, log_opt, w,
                               smooth=_SMOOTH)

    u0 = jnp.where(free, _to_unconstrained(_data_start(b, acc, w, count), is_gamma), 0.0)
    u = _solve_plbfgs(loss, u0, free)
    # A poor fit may have stuck on the RMSE's kink (see _SMOOTH): solve that profile again
    # on the smooth objective and keep whichever fit has the lower loss. A good fit is
    # kept as it is; its retry has no free parameter, so it stops at once (vmapped, the
    # loop runs only as long as the retried profiles need).
    lu = loss(u)
    retry = lu > _RETRY_ABOVE
    u_retry = _solve_plbfgs(smooth_loss, u0, free & retry)
    u = jnp.where(retry & (loss(u_retry) < lu), u_retry, u)
    p = params_of(u)
    # Prior without multi-node data: the inter-node link is no faster than
    # the intra-node one.
    p = p.at[2].set(jnp.where(any_multi_node, p[2], jnp.maximum(p[2], 1.1 * p[4])))
    p = p.at[3].set(jnp.where(any_multi_node, p[3], jnp.maximum(p[3], 1.1 * p[5])))
    return p


_fit_single_jit = jax.jit(_fit_single)
_fit_batched_jit = jax.jit(jax.vmap(_fit_single))


def precompile_fit(lengths: Sequence[int] = (16,)) -> threading.Thread:
    """Compile :func:`fit_perf_params` for profiles of these lengths, on a daemon thread.

    Ahead-of-time (``lower().compile()``): nothing runs on a device, so it is safe
    next to a training step that uses collectives, and the first real fit of a
    profile of that (bucketed) length then finds the program compiled instead of
    paying the compile (seconds) on its caller's thread. Errors are logged, never
    raised. Returns the thread (``join()`` it to wait).

    Example:
        >>> precompile_fit((16,)).join()
    """
    sizes = sorted({_bucket(int(k)) for k in lengths})

    def work() -> None:
        try:
            dt = np.dtype(_float_dtype())
            for size in sizes:
                _fit_single_jit.lower(*[np.ones(size, dt)] * 6).compile()  # as fit_perf_params
        except Exception:  # an optimisation only: never raise
            logging.getLogger(__name__).exception("goodput: precompiling the fit failed")

    t = threading.Thread(target=work, name="goodput-fit-compile", daemon=True)
    t.start()
    return t


def _validate_profile(names: Sequence[str], profile: Sequence[ArrayLike], batched: bool,
                      mask: NDArray[np.bool_] | None = None) -> list[NDArray[Any]]:
    arrays = [np.asarray(a) for a in profile]
    shape0 = arrays[0].shape
    for name, a in zip(names, arrays):
        if a.shape != shape0:
            raise ValueError(
                f"mismatched array lengths: {names[0]} has shape {shape0} but {name} has shape {a.shape}"
            )
        if a.dtype.kind not in "biuf":
            raise TypeError(f"{name} must be numeric, got dtype {a.dtype}")
    want_ndim = 2 if batched else 1
    if len(shape0) != want_ndim:
        raise ValueError(f"{names[0]} must have {want_ndim} dimension(s), got shape {shape0}")
    valid = np.ones(shape0, bool) if mask is None else mask
    if not np.any(valid, axis=-1).all():
        raise ValueError("every profile needs at least one (unmasked) point")
    num_nodes, num_replicas, atomic_bsz, acc, opt = arrays
    v = valid

    def _bad(cond: NDArray[np.bool_], what: Callable[[tuple[int, ...]], str]) -> None:
        if np.any(cond & v):
            idx = np.argwhere(cond & v)[0]
            raise ValueError(what(tuple(int(i) for i in idx)))

    _bad(
        ~(num_nodes >= 1), lambda i: f"num_nodes must be >= 1, got num_nodes[{i}] = {num_nodes[i]}"
    )
    odd = (num_nodes > num_replicas) & v
    if np.any(odd):
        # AdaptDL's fit accepts these rows (its own fit tests generate them):
        # warn, and fit them with the model's formulas unchanged.
        i = tuple(int(k) for k in np.argwhere(odd)[0])
        warnings.warn(
            f"profile has {int(np.sum(odd))} row(s) with num_nodes > num_replicas (first: "
            f"num_nodes ({num_nodes[i]}) > num_replicas ({num_replicas[i]}) at index {i}); "
            "they are physically odd but fitted as given, as AdaptDL does",
            ProfileWarning,
            stacklevel=3,
        )
    _bad(
        ~(atomic_bsz >= 1),
        lambda i: f"atomic_bsz must be >= 1, got atomic_bsz[{i}] = {atomic_bsz[i]}",
    )
    for name, t in (("accum_step_time", acc), ("optim_step_time", opt)):
        def finite(i: tuple[int, ...], t: NDArray[Any] = t, name: str = name) -> str:
            return f"{name} must be finite, got {name}[{i}] = {t[i]}"

        def positive(i: tuple[int, ...], t: NDArray[Any] = t, name: str = name) -> str:
            return f"{name} must be positive, got {name}[{i}] = {t[i]}"

        _bad(~np.isfinite(t), finite)
        _bad(~(t > 0), positive)
    return arrays


_PROFILE_NAMES = ("num_nodes", "num_replicas", "atomic_bsz", "accum_step_time", "optim_step_time")


def fit_perf_params(
    num_nodes: ArrayLike,
    num_replicas: ArrayLike,
    atomic_bsz: ArrayLike,
    accum_step_time: ArrayLike,
    optim_step_time: ArrayLike,
    weights: ArrayLike | None = None,
) -> PerfParams:
    """Fit the step-time model to profiled step times.

    Minimises :func:`fit_loss` (gradients by ``jax.value_and_grad``) with
    L-BFGS and a vectorised line search (:func:`_solve_plbfgs`) inside one
    jitted ``lax.while_loop`` over reparametrised parameters: ``alpha/beta = 1e-8 + exp(u)`` (bound ``>= 1e-8``) and
    ``gamma = 1 + 9 sin(u)^2`` (bounds ``[1, 10]``). Starts from
    the data's scale (a least-squares line of ``accum_step_time`` over
    ``atomic_bsz``, network terms at ``alpha_c``: see :data:`FIT_INIT`). Parameters the data cannot identify are frozen with a
    mask (shapes stay static):

    * one distinct ``atomic_bsz``: ``alpha_c = mean(accum_step_time) / 2``;
    * no ``num_nodes > 1``: ``alpha_n = beta_n = 1e-8`` during the fit;
    * no ``num_nodes == 1 and num_replicas > 1``: ``alpha_r = beta_r = 1e-8``;
    * no ``num_replicas > 2``: ``beta_n = beta_r = 1e-8``.

    Afterwards, without multi-node data, ``alpha_n = max(alpha_n, 1.1 alpha_r)``
    and ``beta_n = max(beta_n, 1.1 beta_r)``.

    Profiles are padded (masked) to a length >= 16 of the form {4,5,6,7} * 2^k
    (at most 25% padding), so growing profiles compile only O(log P) times
    (a compile takes seconds).

    Args:
        num_nodes, num_replicas, atomic_bsz: profiled configurations, 1-D, same length.
        accum_step_time: measured accumulation-step times (s), positive.
        optim_step_time: measured optimizer-step times (s), positive.
        weights: optional non-negative weight per row (e.g. the number of
            steps behind each profiled mean); the RMSEs become weighted means.
            Rows of weight 0 are ignored. Default: all 1 (AdaptDL).

    Returns:
        ``PerfParams`` of Python floats.

    Raises:
        ValueError: mismatched lengths, empty profile, ``num_nodes < 1``,
            ``atomic_bsz < 1``, or non-positive / NaN / infinite times.

    Warns:
        ProfileWarning: rows with ``num_nodes > num_replicas`` (AdaptDL accepts
            them, so this fit does too; the model's formulas apply unchanged).

    Example:
        >>> p = fit_perf_params([1, 1, 1], [1, 1, 1], [16, 32, 64],
        ...                     [0.26, 0.42, 0.74], [0.26, 0.42, 0.74])
        >>> 0.005 < p.beta_c < 0.02
        True
    """
    arrays = _validate_profile(
        _PROFILE_NAMES,
        (num_nodes, num_replicas, atomic_bsz, accum_step_time, optim_step_time),
        False,
    )
    count = arrays[0].shape[0]
    size = _bucket(count)
    if weights is None:
        w = np.ones(count)
    else:
        w = np.asarray(weights, dtype=float)
        if w.shape != (count,):
            raise ValueError(
                f"weights has shape {w.shape} but the profile has {count} rows"
            )
        if not np.all(np.isfinite(w) & (w >= 0)) or not np.any(w > 0):
            raise ValueError(f"weights ({w!r}) must be finite, >= 0 and not all 0")
        w = w / np.max(w)
    mask = np.zeros(size, np.dtype(_float_dtype()))
    mask[:count] = w
    out = np.asarray(_fit_single_jit(*_pad(arrays, (size,)), mask))
    return PerfParams(*(float(x) for x in out))


def fit_perf_params_batched(
    num_nodes: ArrayLike,
    num_replicas: ArrayLike,
    atomic_bsz: ArrayLike,
    accum_step_time: ArrayLike,
    optim_step_time: ArrayLike,
    mask: ArrayLike | None = None,
) -> PerfParams:
    """Fit many jobs' profiles at once (``vmap`` of the same jitted fit).

    Profiles are padded to a common length ``P``; ``mask[j, p]`` marks real
    points. Padded entries may hold any value (they are ignored, also by
    validation). Each job's freezing rules are evaluated on its own points.
    J and P are padded to sizes of the form {4,5,6,7} * 2^k (J >= 8, P >= 16)
    so that changing job counts and profile lengths rarely recompile.

    Args:
        num_nodes, num_replicas, atomic_bsz, accum_step_time, optim_step_time:
            arrays of shape [J, P].
        mask: boolean [J, P]; ``None`` means all points are real.

    Returns:
        ``PerfParams`` whose fields are numpy arrays of shape [J].

    Example:
        >>> import numpy as np
        >>> b = np.array([[16, 32, 64], [16, 32, 1]])
        >>> t = 0.1 + 0.01 * b
        >>> m = np.array([[True, True, True], [True, True, False]])
        >>> p = fit_perf_params_batched(np.ones_like(b), np.ones_like(b), b, t, t, m)
        >>> p.beta_c.shape
        (2,)
    """
    shape = np.shape(num_nodes)
    mask = np.ones(shape, bool) if mask is None else np.asarray(mask)
    if mask.shape != shape:
        raise ValueError(
            f"mismatched array lengths: num_nodes has shape {shape} but mask has shape {mask.shape}"
        )
    if mask.dtype != bool:
        raise TypeError(f"mask must be boolean, got dtype {mask.dtype}")
    arrays = _validate_profile(
        _PROFILE_NAMES,
        (num_nodes, num_replicas, atomic_bsz, accum_step_time, optim_step_time),
        True,
        mask,
    )
    # Neutralise padding so it cannot produce NaNs anywhere.
    arrays = [np.where(mask, a, 1) for a in arrays]
    jobs, count = shape
    size = (_bucket(jobs, 8), _bucket(count))
    full_mask = np.zeros(size, bool)
    full_mask[:jobs, :count] = mask
    full_mask[jobs:, 0] = True  # padding jobs: one dummy point each
    out = np.asarray(_fit_batched_jit(*_pad(arrays, size), full_mask))[:jobs]
    return PerfParams(*(out[:, i] for i in range(7)))


def _bucket(n: int, minimum: int = 16) -> int:
    """Smallest size >= n of the form {4, 5, 6, 7} * 2^k (:func:`goodput_jax.model.buckets.bucket`)."""
    return bucket(int(n), minimum, fine=True)


def _pad(arrays: Sequence[NDArray[Any]], size: int | tuple[int, ...]) -> list[NDArray[Any]]:
    """Copy into ones of the (bucketed) size, in the canonical float dtype."""
    dt = np.dtype(_float_dtype())
    out = []
    for a in arrays:
        buf = np.ones(size, dt)
        buf[tuple(slice(0, k) for k in a.shape)] = a
        out.append(buf)
    return out
