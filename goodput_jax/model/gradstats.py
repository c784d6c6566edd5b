"""Gradient noise statistics computed inside the jitted train step.

Pollux's statistical efficiency needs two numbers about the gradient: the
squared norm of the true gradient ``sqr = |G|^2`` and the trace of the
per-example gradient covariance expressed at the initial batch size
``var = tr(Sigma) / M0``. Both follow from two cheap scalars that a data
parallel or accumulating train step can produce almost for free:

* ``S``: the mean of the squared norms of the *parts* of the gradient (one part
  per device, per microbatch, or per device x microbatch);
* ``T``: the squared norm of the mean gradient (the one the optimizer uses).

With ``count`` equal-sized parts and ``scale = total batch / M0``::

    sqr = (count * T - S) / (count - 1)
    var = (S - T) * scale / (count - 1)

(Unbiased: ``E[S] = |G|^2 + tr(Sigma)/b`` and ``E[T] = |G|^2 + tr(Sigma)/B``
with part size ``b = B / count``.) When there is only one part, the previous
step's gradient serves as the second part (the *differenced* estimator, flagged
as biased because consecutive gradients are taken at different parameters);
once unbiased samples arrive the averages restart from them.

The per-step estimates are noisy, so they are smoothed with bias-corrected
exponential moving averages whose decay ``theta = smoothing ** scale`` makes
the averaging window a fixed number of *samples* whatever the batch size.
Non-finite steps are skipped. Reported values are clamped to ``sqr >= 0`` and
``var >= 1e-6``.

For Adam-type optimizers the statistics are taken of the preconditioned
gradient ``g / (sqrt(nu_hat) + eps)``, with ``nu_hat`` the bias-corrected
second moment found in the optimizer state (:func:`auto_preconditioner` finds
it in any optax state tree, so the same train step serves SGD and Adam).

Layers, from the bottom:

* pure functions: :func:`estimate_grad_params`, :func:`init_grad_stats`,
  :func:`update_grad_stats`, :func:`grad_params_from_stats`, :func:`noise_scale`,
  :func:`sqnorm`;
* collection helpers, called inside the user's train step:
  (a) :func:`data_parallel_grads` under ``jax.shard_map``,
  (b) :func:`microbatch_grads` (``lax.scan`` accumulation in one step),
  (c) :func:`multi_steps` (accumulation across calls, like ``optax.MultiSteps``),
  (d) :func:`grouped_grads` (plain ``jit`` with an explicit group axis);
* the optax transformation :func:`gradient_noise_scale` (first in a chain,
  identity on the updates, statistics in its state) and the readers
  :func:`get_grad_stats` / :func:`get_grad_params` / :func:`sample_now`.

Cost. The statistics add reductions, never a gradient-sized buffer: each
device reads its own gradient once more for ``S`` (plus Adam's ``nu`` when
preconditioned) and a 1/devices slice of the mean gradient for ``T``. In mode
(a) the loss and ``S`` ride in the gradients' own all-reduce and ``T`` needs one
scalar collective. These passes are memory-bound; on an accelerator they are
small next to the step, on a CPU they are not (see ``docs/concepts.md`` for
measured numbers). To pay them on one step in ``k`` only, build the
transformation with ``gradient_noise_scale(M0, every=k)`` and pass
``sample=sample_now(opt_state)`` to the collection helper: the other steps
skip the norms inside a ``lax.cond``, and each sample counts for ``k`` steps
in the moving averages (same window in training examples, ``k`` times fewer
samples in it).

Example:
    >>> import jax.numpy as jnp
    >>> state = init_grad_stats()
    >>> state = update_grad_stats(state, GradSqNorms(jnp.float32(5.0), jnp.float32(2.0), 4, 64), 16)
    >>> [round(float(v), 3) for v in grad_params_from_stats(state)]
    [1.0, 4.0]
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from goodput_jax.model.types import GradParams

__all__ = [
    "DEFAULT_SMOOTHING",
    "MIN_VAR",
    "GradSqNorms",
    "GradStatsState",
    "GradientNoiseScaleState",
    "MultiStepsGNSState",
    "Preconditioner",
    "adam_preconditioner",
    "auto_preconditioner",
    "data_parallel_grads",
    "differenced_sqnorms",
    "estimate_grad_params",
    "find_adam_state",
    "get_grad_params",
    "get_grad_stats",
    "grad_params_from_stats",
    "gradient_noise_scale",
    "grouped_grads",
    "has_grad_stats",
    "init_grad_stats",
    "microbatch_grads",
    "multi_steps",
    "noise_scale",
    "sample_now",
    "sqnorm",
    "update_grad_stats",
]

#: Per-sample EMA decay; the per-step decay is ``DEFAULT_SMOOTHING ** scale``.
DEFAULT_SMOOTHING = 0.999
#: Floor of the reported ``var`` (keeps the efficiency formula finite).
MIN_VAR = 1e-6


# --------------------------------------------------------------------------- types


class GradSqNorms(NamedTuple):
    """The two scalars a collection helper produces for one optimizer step.

    Attributes:
        local_sqr: ``S``, mean over the ``count`` parts of each part's squared
            gradient norm (preconditioned where a preconditioner was given).
        total_sqr: ``T``, squared norm of the mean gradient.
        count: number of equal-sized parts (replicas x microbatches); a Python
            int in every helper here.
        batch_size: total number of samples behind the mean gradient.
        valid: False when the statistics must be ignored (e.g. the Adam second
            moment is not initialised yet).
    """

    local_sqr: Any
    total_sqr: Any
    count: Any
    batch_size: Any
    valid: Any = True


class GradStatsState(NamedTuple):
    """Smoothed gradient statistics (a pytree of scalars; counters are int32).

    Attributes:
        count: samples folded into the averages since the last reset.
        skipped: steps skipped because a statistic was not finite.
        biased: whether the averages come from the differenced estimator.
        sqr_ema: biased EMA accumulator of ``sqr``.
        var_ema: biased EMA accumulator of ``var``.
        ema_norm: ``1 - prod(theta)``, the bias correction of both accumulators.
    """

    count: jax.Array
    skipped: jax.Array
    biased: jax.Array
    sqr_ema: jax.Array
    var_ema: jax.Array
    ema_norm: jax.Array


class Preconditioner(NamedTuple):
    """Adam-type preconditioning ``g -> g / (sqrt(nu / bias_correction) + eps)``.

    It holds the optimizer's own second-moment buffers and two scalars; the
    per-parameter multipliers are computed inside each norm's fused reduction,
    so no gradient-sized buffer is materialised for them.

    Attributes:
        nu: second-moment pytree with the gradients' structure.
        bias_correction: scalar ``1 - b2 ** count`` (1 while invalid).
        eps: Adam's epsilon.
        valid: scalar bool; False while the second moment is still empty.
    """

    nu: Any
    bias_correction: Any
    eps: Any
    valid: Any

    def scales(self) -> Any:
        """The multipliers ``1 / (sqrt(nu_hat) + eps)`` as a pytree (materialised)."""
        return jax.tree.map(self._scale_leaf, self.nu)

    def _scale_leaf(self, nu: Any) -> jax.Array:
        nu_hat = nu.astype(jnp.float32) / self.bias_correction
        return jnp.where(self.valid, 1.0 / (jnp.sqrt(nu_hat) + self.eps), 1.0)

    def _norm_scalars(self) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``(valid, c, e)`` with ``(g / (sqrt(nu / bc) + eps))^2 == c * (g / (sqrt(nu) + e))^2``.

        ``c = bc`` and ``e = eps * sqrt(bc)``: the bias correction leaves the
        per-element work, which is then one sqrt and ONE divide (instead of a
        divide by ``bc``, a sqrt and a reciprocal). ``c`` is 1 while invalid.
        """
        valid = jnp.asarray(self.valid, jnp.bool_)
        bc = jnp.asarray(self.bias_correction, jnp.float32)
        c = jnp.where(valid, bc, 1.0)
        e = jnp.asarray(self.eps, jnp.float32) * jnp.sqrt(jnp.where(valid, bc, 1.0))
        return valid, c, e


def _pre_leaf_sqsum(x: Any, nu: Any, valid: Any, e: Any) -> jax.Array:
    """``sum((x / (sqrt(nu) + e))^2)`` (``sum(x^2)`` while invalid), one fused reduction."""
    y = x.astype(jnp.float32)
    y = jnp.where(valid, y / (jnp.sqrt(nu.astype(jnp.float32)) + e), y)
    return jnp.sum(jnp.square(y))


# --------------------------------------------------------------------------- pure estimators


def _check_init_batch_size(init_batch_size: Any) -> float:
    if isinstance(init_batch_size, bool) or not isinstance(init_batch_size, numbers.Real):
        raise TypeError(f"init_batch_size ({init_batch_size!r}) must be a positive number")
    if not math.isfinite(init_batch_size) or init_batch_size <= 0:
        raise ValueError(f"init_batch_size ({init_batch_size!r}) must be a positive number")
    return float(init_batch_size)


def _check_smoothing(smoothing: Any) -> float:
    if isinstance(smoothing, bool) or not isinstance(smoothing, numbers.Real):
        raise TypeError(f"smoothing ({smoothing!r}) must be a number in (0, 1)")
    if not 0.0 < smoothing < 1.0:
        raise ValueError(f"smoothing ({smoothing!r}) must be in (0, 1)")
    return float(smoothing)


def _check_positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} ({value!r}) must be a positive integer")
    if value < 1:
        raise ValueError(f"{name} ({value!r}) must be a positive integer")
    return int(value)


def estimate_grad_params(local_sqr: Any, total_sqr: Any, count: Any, scale: Any) -> GradParams:
    """One-step unbiased estimates of ``|G|^2`` and ``tr(Sigma)`` at the initial batch size.

    Args:
        local_sqr: ``S``, mean of the per-part squared norms.
        total_sqr: ``T``, squared norm of the mean gradient.
        count: number of equal parts (> 1 for a meaningful estimate).
        scale: total batch size divided by the initial batch size.

    Returns:
        Raw (unclamped, unsmoothed) :class:`GradParams`; NaN/inf where ``count <= 1``.

    Example:
        >>> [float(v) for v in estimate_grad_params(5.0, 2.0, 4, 4.0)]
        [1.0, 4.0]
    """
    s = jnp.asarray(local_sqr, jnp.float32)
    t = jnp.asarray(total_sqr, jnp.float32)
    n = jnp.asarray(count, jnp.float32)
    scale = jnp.asarray(scale, jnp.float32)
    sqr = (n * t - s) / (n - 1.0)
    var = (s - t) * scale / (n - 1.0)
    return GradParams(sqr=sqr, var=var)


def init_grad_stats() -> GradStatsState:
    """Empty statistics (no samples yet).

    Example:
        >>> int(init_grad_stats().count)
        0
    """
    # Distinct buffers for every leaf, so that a donated optimizer state never
    # donates one buffer twice.
    return GradStatsState(
        count=jnp.zeros([], jnp.int32),
        skipped=jnp.zeros([], jnp.int32),
        biased=jnp.zeros([], jnp.bool_),
        sqr_ema=jnp.zeros([], jnp.float32),
        var_ema=jnp.zeros([], jnp.float32),
        ema_norm=jnp.zeros([], jnp.float32),
    )


def update_grad_stats(
    state: GradStatsState,
    sqnorms: GradSqNorms,
    init_batch_size: float,
    *,
    smoothing: float = DEFAULT_SMOOTHING,
    biased: Any = False,
    steps: int = 1,
) -> GradStatsState:
    """Fold one step's ``(S, T)`` into the bias-corrected moving averages.

    Pure and jittable. A sample is ignored (state unchanged) when ``count <= 1``
    or ``sqnorms.valid`` is False; it is counted in ``skipped`` when any of
    ``S``, ``T`` or the derived estimates is not finite. An unbiased sample
    arriving while the averages are biased restarts them.

    Args:
        state: current statistics.
        sqnorms: the step's squared norms (see :class:`GradSqNorms`).
        init_batch_size: ``M0``; ``scale = sqnorms.batch_size / M0``.
        smoothing: per-sample decay; the step decay is ``smoothing ** scale``.
        biased: whether the sample comes from the differenced estimator.
        steps: optimizer steps this sample stands for (``every`` when the
            statistics are sampled every ``every`` steps); the decay is
            ``smoothing ** (scale * steps)``, so the averaging window covers
            the same number of training examples whatever the sampling.

    Returns:
        The new :class:`GradStatsState`.

    Example:
        >>> s = update_grad_stats(init_grad_stats(), GradSqNorms(5.0, 2.0, 4, 64), 16)
        >>> int(s.count), bool(s.biased)
        (1, False)
    """
    m0 = _check_init_batch_size(init_batch_size)
    smoothing = _check_smoothing(smoothing)
    steps = _check_positive_int(steps, "steps")
    scale = jnp.asarray(sqnorms.batch_size, jnp.float32) / m0
    est = estimate_grad_params(sqnorms.local_sqr, sqnorms.total_sqr, sqnorms.count, scale)
    count_ok = jnp.asarray(sqnorms.count) > 1
    usable = jnp.logical_and(count_ok, jnp.asarray(sqnorms.valid, jnp.bool_))
    finite = jnp.isfinite(est.sqr) & jnp.isfinite(est.var) & jnp.isfinite(scale) & (scale > 0)
    accept = usable & finite
    biased = jnp.asarray(biased, jnp.bool_)
    reset = state.biased & ~biased
    theta = jnp.asarray(smoothing, jnp.float32) ** (scale * steps)
    sqr_base = jnp.where(reset, 0.0, state.sqr_ema)
    var_base = jnp.where(reset, 0.0, state.var_ema)
    norm_base = jnp.where(reset, 0.0, state.ema_norm)
    sqr_new = theta * sqr_base + (1.0 - theta) * est.sqr
    var_new = theta * var_base + (1.0 - theta) * est.var
    norm_new = theta * norm_base + (1.0 - theta)
    count_new = jnp.where(reset, 1, state.count + 1).astype(jnp.int32)
    return GradStatsState(
        count=jnp.where(accept, count_new, state.count).astype(jnp.int32),
        skipped=(state.skipped + (usable & ~finite).astype(jnp.int32)).astype(jnp.int32),
        biased=jnp.where(accept, biased, state.biased),
        sqr_ema=jnp.where(accept, sqr_new, state.sqr_ema),
        var_ema=jnp.where(accept, var_new, state.var_ema),
        ema_norm=jnp.where(accept, norm_new, state.ema_norm),
    )


def grad_params_from_stats(state: GradStatsState) -> GradParams:
    """Bias-corrected, clamped statistics: ``sqr >= 0``, ``var >= 1e-6``.

    Before the first sample this returns ``GradParams(0.0, 1e-6)`` (which makes
    the AdaScale gain equal to the scale, i.e. assumes perfect scaling); check
    :func:`has_grad_stats` to tell the two apart.

    Example:
        >>> bool(grad_params_from_stats(init_grad_stats()).var == jnp.float32(MIN_VAR))
        True
    """
    has = state.ema_norm > 0
    denom = jnp.where(has, state.ema_norm, 1.0)
    sqr = jnp.where(has, state.sqr_ema / denom, 0.0)
    var = jnp.where(has, state.var_ema / denom, 0.0)
    return GradParams(sqr=jnp.maximum(sqr, 0.0), var=jnp.maximum(var, MIN_VAR))


def has_grad_stats(state: GradStatsState) -> jax.Array:
    """Whether at least one sample has been folded in (scalar bool array)."""
    return state.count > 0


def noise_scale(grad_params: GradParams, init_batch_size: float = 1.0) -> jax.Array:
    """Gradient noise scale ``B_noise = var / sqr``, in units of ``init_batch_size``.

    ``var`` is ``tr(Sigma)`` at the initial batch size, so ``var / sqr`` is the
    noise scale measured in initial batches; pass ``init_batch_size`` to get it
    in samples (McCandlish et al.'s ``B_simple = tr(Sigma) / |G|^2``). Pollux's
    efficiency at batch ``M`` is ``(B_noise + M0) / (B_noise + M)`` in samples.

    Example:
        >>> float(noise_scale(GradParams(sqr=2.0, var=6.0), init_batch_size=32))
        96.0
    """
    sqr = jnp.asarray(grad_params.sqr, jnp.float32)
    var = jnp.asarray(grad_params.var, jnp.float32)
    return var / sqr * jnp.asarray(init_batch_size, jnp.float32)


# --------------------------------------------------------------------------- norms, preconditioning


def sqnorm(tree: Any, preconditioner: Preconditioner | None = None) -> jax.Array:
    """Squared L2 norm of a pytree in float32, optionally preconditioned elementwise.

    Example:
        >>> float(sqnorm({"a": jnp.array([3.0]), "b": jnp.array([4.0])}))
        25.0
    """
    leaves = jax.tree.leaves(tree)
    if preconditioner is None:
        terms = [jnp.sum(jnp.square(x.astype(jnp.float32))) for x in leaves]
    else:
        pleaves = jax.tree.leaves(preconditioner.nu)
        if len(pleaves) != len(leaves):
            raise ValueError(
                f"preconditioner has {len(pleaves)} leaves but the gradient has {len(leaves)}; "
                "it must have the gradient's structure"
            )
        valid, c, e = preconditioner._norm_scalars()
        terms = [_pre_leaf_sqsum(x, nu, valid, e) for x, nu in zip(leaves, pleaves)]
        if terms:
            return c * functools.reduce(jnp.add, terms)
    if not terms:
        return jnp.zeros([], jnp.float32)
    return functools.reduce(jnp.add, terms)


_ADAM_LIKE = (optax.ScaleByAdamState, optax.ScaleByAmsgradState)


def find_adam_state(opt_state: Any) -> Any | None:
    """The first Adam-like state (``ScaleByAdamState`` / ``ScaleByAmsgradState``) in a tree.

    Searches any optax state tree: chains, ``inject_hyperparams``, ``MultiSteps``,
    ``multi_transform`` and wrappers built here.

    Example:
        >>> tx = optax.chain(optax.clip(1.0), optax.adam(1e-3))
        >>> type(find_adam_state(tx.init({"w": jnp.zeros(2)}))).__name__
        'ScaleByAdamState'
        >>> find_adam_state(optax.sgd(0.1).init({"w": jnp.zeros(2)})) is None
        True
    """
    found = [
        x
        for x in jax.tree.leaves(opt_state, is_leaf=lambda x: isinstance(x, _ADAM_LIKE))
        if isinstance(x, _ADAM_LIKE)
    ]
    return found[0] if found else None


def _inject_hyperparam(opt_state: Any, name: str) -> Any | None:
    states = [
        x
        for x in jax.tree.leaves(
            opt_state, is_leaf=lambda x: isinstance(x, optax.InjectHyperparamsState)
        )
        if isinstance(x, optax.InjectHyperparamsState)
    ]
    for st in states:
        if name in st.hyperparams:
            return st.hyperparams[name]
    return None


def adam_preconditioner(adam_state: Any, *, b2: Any = 0.999, eps: Any = 1e-8) -> Preconditioner:
    """``1 / (sqrt(nu_hat) + eps)`` from an Adam state, ``nu_hat = nu / (1 - b2**count)``.

    Invalid (``valid`` False, scale 1) while the state has seen no update.

    Example:
        >>> st = optax.ScaleByAdamState(jnp.int32(1), {"w": jnp.zeros(1)}, {"w": jnp.array([0.004])})
        >>> round(float(adam_preconditioner(st).scales()["w"][0]), 3)
        0.5
    """
    count = jnp.asarray(adam_state.count)
    valid = count > 0
    b2 = jnp.asarray(b2, jnp.float32)
    corr = jnp.where(valid, 1.0 - b2 ** jnp.maximum(count, 1).astype(jnp.float32), 1.0)
    return Preconditioner(nu=adam_state.nu, bias_correction=corr,
                          eps=jnp.asarray(eps, jnp.float32), valid=valid)


def auto_preconditioner(
    opt_state: Any, *, b2: Any | None = None, eps: Any | None = None
) -> Preconditioner | None:
    """The Adam preconditioner when ``opt_state`` holds an Adam-like state, else None.

    Call it on the optimizer state at the start of the train step and pass the
    result to the collection helpers (and to :func:`gradient_noise_scale`'s
    update as ``preconditioner=``): the same step then does the right thing for
    SGD and Adam. ``b2``/``eps`` default to values found in an
    ``optax.inject_hyperparams`` state, else to optax.adam's defaults
    (0.999, 1e-8); pass them when your Adam uses others.

    Example:
        >>> params = {"w": jnp.zeros(2)}
        >>> auto_preconditioner(optax.sgd(0.1).init(params)) is None
        True
        >>> auto_preconditioner(optax.adamw(1e-3).init(params)) is not None
        True
    """
    adam_state = find_adam_state(opt_state)
    if adam_state is None:
        return None
    if b2 is None:
        b2 = _inject_hyperparam(opt_state, "b2")
        b2 = 0.999 if b2 is None else b2
    if eps is None:
        eps = _inject_hyperparam(opt_state, "eps")
        eps = 1e-8 if eps is None else eps
    return adam_preconditioner(adam_state, b2=b2, eps=eps)


def _pre_valid(preconditioner: Preconditioner | None, sample: Any = True) -> Any:
    valid = True if preconditioner is None else preconditioner.valid
    if sample is True:
        return valid
    return jnp.logical_and(jnp.asarray(valid, jnp.bool_), sample)


def _check_sample(sample: Any) -> Any:
    """``sample`` as a Python bool or a scalar bool array (a clear error otherwise)."""
    if isinstance(sample, bool):
        return sample
    try:
        arr = jnp.asarray(sample)
    except TypeError:
        arr = None
    if arr is None or arr.shape != () or arr.dtype != jnp.bool_:
        raise TypeError(
            f"sample ({sample!r}) must be a bool or a scalar bool array, e.g. "
            "gradstats.sample_now(opt_state)"
        )
    return arr


def _when(sample: Any, fn: Callable[[], jax.Array], axes: frozenset = frozenset()) -> jax.Array:
    """``fn()`` (a float32 scalar) on sampled steps, else 0.0 without doing the work.

    ``sample`` is True (always: no conditional at all), False (never) or a
    traced bool (a ``lax.cond``: skipped steps pay nothing for the norms).
    ``axes``: mesh axes ``fn()``'s result varies over inside ``shard_map``.
    """
    if sample is True:
        return fn()
    zero = jnp.zeros([], jnp.float32)
    if axes:
        zero = jax.lax.pcast(zero, tuple(sorted(axes)), to="varying")
    if sample is False:
        return zero
    return jax.lax.cond(sample, lambda: jnp.asarray(fn(), jnp.float32), lambda: zero)


def _axes_of(tree: Any) -> frozenset:
    return frozenset().union(*(_varying_axes(x) for x in jax.tree.leaves(tree)))


def differenced_sqnorms(
    grads: Any,
    prev_grads: Any,
    batch_size: Any,
    preconditioner: Preconditioner | None = None,
) -> GradSqNorms:
    """``(S, T)`` of the differenced estimator: this and the previous step's gradient as two parts.

    Example:
        >>> g, p = {"w": jnp.array([1.0, 0.0])}, {"w": jnp.array([0.0, 1.0])}
        >>> [float(v) for v in differenced_sqnorms(g, p, 8)[:2]]
        [1.0, 0.5]
    """
    s = 0.5 * (sqnorm(grads, preconditioner) + sqnorm(prev_grads, preconditioner))
    mean = jax.tree.map(
        lambda a, b: 0.5 * (a.astype(jnp.float32) + b.astype(jnp.float32)), grads, prev_grads
    )
    t = sqnorm(mean, preconditioner)
    return GradSqNorms(s, t, 2, 2 * jnp.asarray(batch_size), _pre_valid(preconditioner))


# --------------------------------------------------------------------------- collection helpers


def _leading_size(batch: Any, name: str = "batch") -> int:
    leaves = jax.tree.leaves(batch)
    if not leaves:
        raise ValueError(f"{name} is empty; it must be a pytree of arrays with a batch axis")
    sizes = {int(x.shape[0]) if getattr(x, "ndim", 0) else -1 for x in leaves}
    if len(sizes) != 1 or -1 in sizes:
        raise ValueError(
            f"{name} leaves must share one leading batch axis; got leading sizes {sorted(sizes)}"
        )
    return sizes.pop()


def _split(batch: Any, parts: int, name: str) -> Any:
    size = _leading_size(batch)
    if size % parts:
        raise ValueError(f"batch size ({size}) is not divisible by {name} ({parts})")
    return jax.tree.map(lambda x: x.reshape((parts, size // parts) + x.shape[1:]), batch)


def _value_and_grad(loss_fn: Callable, has_aux: bool) -> Callable:
    return jax.value_and_grad(loss_fn, has_aux=has_aux)


def _accumulate(
    loss_fn: Callable,
    params: Any,
    batch: Any,
    num_microbatches: int,
    preconditioner: Preconditioner | None,
    has_aux: bool,
    sample: Any = True,
) -> tuple[Any, Any, Any, jax.Array, Callable | None]:
    """Mean loss, aux (stacked), mean gradient, mean per-microbatch squared norm, norm used.

    The last item is the norm function the scan used (``norm(tree)``) or None
    when no scan ran.
    """
    vg = _value_and_grad(loss_fn, has_aux)
    # Inside shard_map the gradients (and the scan carry) vary over the union
    # of the inputs' varying mesh axes.
    axes = _axes_of((params, batch))
    if num_microbatches == 1:
        value, grads = vg(params, batch)
        loss, aux = value if has_aux else (value, None)
        if has_aux:
            aux = jax.tree.map(lambda x: jnp.expand_dims(x, 0), aux)
        return loss, aux, grads, _when(sample, lambda: sqnorm(grads, preconditioner), axes), None
    micro = _split(batch, num_microbatches, "num_microbatches")
    # Adam: the multipliers 1/(sqrt(nu)+e) are loop-invariant, and XLA would
    # hoist them out of the scan into a gradient-sized buffer that lives through
    # the loop. The barrier ties nu to this microbatch's gradient, so each norm
    # stays one fused reduction over (g, nu): no buffer, and measured faster
    # than the materialised multipliers (one pass less over memory).
    if preconditioner is None:
        norm = sqnorm
    else:
        def norm(tree):
            tree, nu = jax.lax.optimization_barrier((tree, preconditioner.nu))
            return sqnorm(tree, preconditioner._replace(nu=nu))

    def body(carry, mb):
        acc, sq, loss_sum = carry
        value, g = vg(params, mb)
        loss, aux = value if has_aux else (value, None)
        acc = jax.tree.map(lambda a, x: a + x.astype(a.dtype), acc, g)
        part = _when(sample, lambda: norm(g), axes)
        return (acc, sq + part, loss_sum + loss.astype(jnp.float32)), aux

    def zeros(shape, dtype):
        z = jnp.zeros(shape, dtype)
        return jax.lax.pcast(z, tuple(sorted(axes)), to="varying") if axes else z

    acc0 = jax.tree.map(lambda p: zeros(p.shape, jnp.promote_types(p.dtype, jnp.float32)), params)
    zero = zeros([], jnp.float32)
    (acc, sq, loss_sum), aux = jax.lax.scan(body, (acc0, zero, zero), micro)
    inv = 1.0 / num_microbatches
    grads = jax.tree.map(lambda a, p: (a * inv).astype(p.dtype), acc, params)
    return loss_sum * inv, (aux if has_aux else None), grads, sq * inv, norm


def microbatch_grads(
    loss_fn: Callable,
    params: Any,
    batch: Any,
    num_microbatches: int,
    *,
    preconditioner: Preconditioner | None = None,
    has_aux: bool = False,
    sample: Any = True,
) -> tuple[Any, Any, GradSqNorms]:
    """Mode (b): gradient accumulation over microbatches in a ``lax.scan``, with ``(S, T)``.

    Splits every leaf of ``batch`` along its leading axis into
    ``num_microbatches`` equal microbatches, accumulates ``grad(loss_fn)`` over
    them in a scan (one gradient-sized accumulator, as any accumulation needs)
    and adds each microbatch's squared norm to a scalar on the way. ``loss_fn``
    must return the *mean* loss over its microbatch.

    Args:
        loss_fn: ``loss_fn(params, microbatch) -> loss`` (or ``(loss, aux)``).
        params: parameters pytree.
        batch: pytree of arrays with a shared leading batch axis.
        num_microbatches: number of microbatches (>= 1; 1 gives ``count = 1``,
            for which :func:`gradient_noise_scale` uses the differenced estimator).
        preconditioner: from :func:`auto_preconditioner`, or None.
        has_aux: as in ``jax.value_and_grad``; aux comes back stacked over microbatches.
        sample: whether this step takes the statistics: True (every step),
            or a scalar bool array such as :func:`sample_now` ``(opt_state)``
            for ``gradient_noise_scale(..., every=k)``; on other steps the
            norms are skipped inside a ``lax.cond`` and cost nothing.

    Returns:
        ``(loss, grads, sqnorms)`` with ``loss`` the mean loss (``(loss, aux)``
        when ``has_aux``), ``grads`` the mean gradient and ``sqnorms`` a
        :class:`GradSqNorms` to pass to ``tx.update(..., grad_sqnorms=sqnorms)``.

    Example:
        >>> loss = lambda w, b: jnp.mean((b["x"] * w - b["y"]) ** 2)
        >>> b = {"x": jnp.arange(8.0), "y": jnp.ones(8)}
        >>> l, g, sq = microbatch_grads(loss, jnp.float32(0.5), b, 4)
        >>> sq.count, sq.batch_size
        (4, 8)
    """
    n = _check_positive_int(num_microbatches, "num_microbatches")
    size = _leading_size(batch)
    sample = _check_sample(sample)
    loss, aux, grads, local, norm = _accumulate(loss_fn, params, batch, n, preconditioner,
                                                has_aux, sample)
    if norm is None:
        norm = functools.partial(sqnorm, preconditioner=preconditioner)
    total = _when(sample, lambda: norm(grads), _axes_of(grads))
    if preconditioner is not None:
        grads = _ordered_after(grads, total)
    out = (loss, aux) if has_aux else loss
    return out, grads, GradSqNorms(local, total, n, size, _pre_valid(preconditioner, sample))


def _axis_names(axis_name: Any) -> tuple:
    return tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)


def _varying_axes(x: Any) -> frozenset:
    aval = jax.typeof(x)
    mat = getattr(aval, "manual_axis_type", None)
    if mat is not None:
        return frozenset(getattr(mat, "varying", ()))
    return frozenset(getattr(aval, "vma", ()))


def _to_varying(tree: Any, axis_name: Any) -> Any:
    """``pcast`` every leaf to varying over ``axis_name`` unless it already is."""
    names = _axis_names(axis_name)

    def leaf(x):
        missing = tuple(a for a in names if a not in _varying_axes(x))
        if not missing:
            return x
        return jax.lax.pcast(x, missing if len(missing) > 1 else missing[0], to="varying")

    return jax.tree.map(leaf, tree)


def data_parallel_grads(
    loss_fn: Callable,
    params: Any,
    batch: Any,
    axis_name: Any,
    *,
    num_microbatches: int = 1,
    preconditioner: Preconditioner | None = None,
    has_aux: bool = False,
    sample: Any = True,
) -> tuple[Any, Any, GradSqNorms]:
    """Mode (a): data-parallel gradient inside ``jax.shard_map`` with ``(S, T)``.

    Call it inside the shard_map'ed train step with the *local* batch shard.
    It takes each device's gradient (of its own microbatches when
    ``num_microbatches > 1``), adds up its squared norm *before* the
    cross-device mean, then does the usual ``pmean`` of the gradients plus ONE
    scalar collective (``psum`` of ``[loss, local S, partial T]``). ``T``, the
    squared norm of the averaged gradient, is split: each device reduces a
    1/devices slice of it, so the statistics cost each device about one pass
    over its gradient plus 1/devices of one.

    ``check_vma`` pitfall: with ``check_vma=True`` (the default) the gradient
    with respect to *replicated* parameters comes back already summed over
    the devices, so a per-device norm of it is the norm of the total. The
    helper therefore ``pcast``s the parameters to ``varying`` first (leaves
    that already vary are left alone), which yields true per-device gradients.

    Args:
        loss_fn: ``loss_fn(params, local_batch) -> mean loss`` (or ``(loss, aux)``).
        params: parameters (replicated over ``axis_name``).
        batch: this device's batch shard.
        axis_name: the data-parallel mesh axis name (or a tuple of names).
        num_microbatches: microbatches per device (accumulated with ``lax.scan``).
        preconditioner: from :func:`auto_preconditioner`, or None.
        has_aux: as in ``jax.value_and_grad``; aux stays per device (stacked
            over microbatches), it is not reduced.
        sample: whether this step takes the statistics: True (every step),
            or a scalar bool array such as :func:`sample_now` ``(opt_state)``
            for ``gradient_noise_scale(..., every=k)``; on other steps the
            norms are skipped inside a ``lax.cond`` and cost nothing.

    Returns:
        ``(loss, grads, sqnorms)``: mean loss over all devices, the gradient
        averaged over devices (replicated), and :class:`GradSqNorms` with
        ``count = devices * num_microbatches`` and the global batch size.

    Example:
        >>> # inside jax.shard_map(step, mesh=mesh, in_specs=(P(), P("data")), out_specs=...)
        >>> # loss, grads, sq = data_parallel_grads(loss_fn, params, batch, "data")
    """
    n = _check_positive_int(num_microbatches, "num_microbatches")
    names = _axis_names(axis_name)
    devices = 1
    for a in names:
        devices *= int(jax.lax.axis_size(a))
    local_size = _leading_size(batch)
    sample = _check_sample(sample)
    pv = _to_varying(params, axis_name)
    loss, aux, grads, local, _ = _accumulate(loss_fn, pv, batch, n, preconditioner, has_aux,
                                             sample)
    inv = 1.0 / devices
    # The loss and the local S ride in the gradients' own all-reduce (one tuple
    # collective, as the plain step's pmean of the gradients).
    summed, head = jax.lax.psum(
        (grads, jnp.stack([jnp.asarray(loss, jnp.float32) * inv, local * inv])), axis_name
    )
    # T: each device reduces only its 1/devices slice of the summed gradient
    # (scaled to the mean afterwards, a scalar); one scalar collective sums it.
    total = _when(sample, lambda: jax.lax.psum(
        _sliced_sqnorm(summed, preconditioner, axis_name, devices), axis_name) * (inv * inv))
    grads = jax.tree.map(lambda x: x * jnp.asarray(inv, x.dtype), summed)
    if preconditioner is not None:
        grads = _ordered_after(grads, total)
    out = (head[0], aux) if has_aux else head[0]
    sq = GradSqNorms(head[1], total, devices * n, local_size * devices,
                     _pre_valid(preconditioner, sample))
    return out, grads, sq


def _ordered_after(grads: Any, scalar: jax.Array) -> Any:
    """``grads`` unchanged in value, but data-dependent on ``scalar``.

    The preconditioned ``T`` reads the optimizer's ``nu``, and so does the
    optimizer's update, which then overwrites ``nu`` in place (a donated
    state). With no data path between the two, XLA cannot prove the read
    comes first and copies every ``nu`` leaf at the start of the step
    (measured: +5 % step time for the MLP on CPU). Adding an exact zero
    derived from ``T`` to the returned gradients orders the read before the
    update; the add fuses into the optimizer's elementwise loop. The zero is
    finite even when ``T`` is not (no NaN leaks into the gradients).
    """
    zero = jnp.clip(jnp.nan_to_num(scalar, nan=0.0, posinf=0.0, neginf=0.0), -1.0, 1.0) * 0.0
    return jax.tree.map(lambda x: x + zero.astype(x.dtype), grads)


def _sliced_sqnorm(
    grads: Any, preconditioner: Preconditioner | None, axis_name: Any, devices: int
) -> jax.Array:
    """This device's share of ``sqnorm(grads)``: a 1/devices slice of every leaf.

    A leaf with an axis divisible by ``devices`` contributes its slice (no copy:
    the slice fuses into the reduction); any other leaf contributes its full
    squared norm divided by ``devices``. Summed over devices this is exact.
    """
    idx = jax.lax.axis_index(axis_name)
    leaves = jax.tree.leaves(grads)
    nus = jax.tree.leaves(preconditioner.nu) if preconditioner is not None else [None] * len(leaves)
    if len(nus) != len(leaves):
        raise ValueError(
            f"preconditioner has {len(nus)} leaves but the gradient has {len(leaves)}; "
            "it must have the gradient's structure"
        )
    if preconditioner is not None:
        valid, c, e = preconditioner._norm_scalars()
    total = jnp.zeros([], jnp.float32)
    for x, nu in zip(leaves, nus):
        axis = next((a for a, d in enumerate(x.shape) if d % devices == 0 and d >= devices), None)
        if axis is not None and devices > 1:
            k = x.shape[axis] // devices
            x = jax.lax.dynamic_slice_in_dim(x, idx * k, k, axis=axis)
            nu = None if nu is None else jax.lax.dynamic_slice_in_dim(nu, idx * k, k, axis=axis)
            weight = 1.0
        else:
            weight = 1.0 / devices
        if nu is None:
            total = total + weight * jnp.sum(jnp.square(x.astype(jnp.float32)))
        else:
            total = total + weight * _pre_leaf_sqsum(x, nu, valid, e)
    return total if preconditioner is None else c * total


def _constrain(x: Any, sharding: Any) -> Any:
    """``with_sharding_constraint`` on Auto mesh axes, ``reshard`` on Explicit ones."""
    try:
        return jax.lax.with_sharding_constraint(x, sharding)
    except ValueError:
        return jax.sharding.reshard(x, sharding)


def grouped_grads(
    loss_fn: Callable,
    params: Any,
    batch: Any,
    num_groups: int,
    *,
    preconditioner: Preconditioner | None = None,
    has_aux: bool = False,
    group_sharding: Any = None,
    sample: Any = True,
) -> tuple[Any, Any, GradSqNorms]:
    """Mode (d): plain ``jit`` with automatic sharding, via an explicit group axis.

    Reshapes the batch to ``[num_groups, B / num_groups, ...]`` and takes one
    gradient per group with ``jax.vmap``; ``S`` is the mean of the per-group
    squared norms and the gradient is their mean.

    Cost: unlike modes (a) and (b) this *materialises* ``num_groups``
    gradients (the vmap output, ``num_groups x |params|``). When the batch is
    sharded over the data axis and ``num_groups`` equals that axis size, pass
    ``group_sharding`` (e.g. ``NamedSharding(mesh, P("data"))``) so each device
    holds only its own group's gradient: the memory then matches plain data
    parallelism plus nothing, and the group mean lowers to the same all-reduce.
    Without it, XLA may replicate the stacked gradients (``num_groups`` times
    the gradient memory per device). The FLOPs equal the ungrouped step's.

    Args:
        loss_fn: ``loss_fn(params, group_batch) -> mean loss`` (or ``(loss, aux)``).
        params: parameters.
        batch: pytree with leading batch axis divisible by ``num_groups``.
        num_groups: number of groups (>= 2 for an unbiased estimate).
        preconditioner: from :func:`auto_preconditioner`, or None.
        has_aux: as in ``jax.value_and_grad``; aux comes back stacked over groups.
        group_sharding: optional sharding for the leading (group) axis of the
            stacked per-group gradients.
        sample: whether this step takes the statistics: True (every step),
            or a scalar bool array such as :func:`sample_now` ``(opt_state)``
            for ``gradient_noise_scale(..., every=k)``; on other steps the
            norms are skipped inside a ``lax.cond`` and cost nothing.

    Returns:
        ``(loss, grads, sqnorms)`` like :func:`microbatch_grads`.

    Example:
        >>> loss = lambda w, b: jnp.mean((b["x"] * w - b["y"]) ** 2)
        >>> b = {"x": jnp.arange(8.0), "y": jnp.ones(8)}
        >>> grouped_grads(loss, jnp.float32(0.5), b, 2)[2].count
        2
    """
    n = _check_positive_int(num_groups, "num_groups")
    sample = _check_sample(sample)
    size = _leading_size(batch)
    groups = _split(batch, n, "num_groups")
    vg = _value_and_grad(loss_fn, has_aux)
    value, g = jax.vmap(vg, in_axes=(None, 0))(params, groups)
    if group_sharding is not None:
        g = jax.tree.map(lambda x: _constrain(x, group_sharding), g)
    loss, aux = value if has_aux else (value, None)
    local = _when(sample, lambda: jnp.mean(jax.vmap(lambda t: sqnorm(t, preconditioner))(g)),
                  _axes_of(g))
    grads = jax.tree.map(lambda x: jnp.mean(x.astype(jnp.float32), axis=0).astype(x.dtype), g)
    total = _when(sample, lambda: sqnorm(grads, preconditioner), _axes_of(grads))
    if preconditioner is not None:  # both norms read nu: order both before the update
        grads = _ordered_after(grads, total + local)
    mean_loss = jnp.mean(loss.astype(jnp.float32))
    out = (mean_loss, aux) if has_aux else mean_loss
    return out, grads, GradSqNorms(local, total, n, size, _pre_valid(preconditioner, sample))


# --------------------------------------------------------------------------- optax transformation


class GradientNoiseScaleState(NamedTuple):
    """State of :func:`gradient_noise_scale`.

    Attributes:
        stats: the smoothed :class:`GradStatsState`.
        prev_grads: previous gradient for the differenced estimator (``()``
            when ``differenced=False``).
        has_prev: whether ``prev_grads`` holds a usable gradient.
        step: updates seen (int32).
        every: the sampling interval (int32; statistics on steps with
            ``step % every == 0``, see :func:`sample_now`).
    """

    stats: GradStatsState
    prev_grads: Any
    has_prev: jax.Array
    step: jax.Array
    every: jax.Array


def _static_int(x: Any) -> int | None:
    if isinstance(x, numbers.Integral) and not isinstance(x, bool):
        return int(x)
    if isinstance(x, jax.core.Tracer):
        return None
    try:
        return int(x)
    except (TypeError, ValueError):
        return None


def _all_finite(tree: Any) -> jax.Array:
    leaves = jax.tree.leaves(tree)
    ok = jnp.array(True)
    for x in leaves:
        ok = ok & jnp.all(jnp.isfinite(x))
    return ok


def gradient_noise_scale(
    init_batch_size: float,
    *,
    smoothing: float = DEFAULT_SMOOTHING,
    differenced: bool = True,
    every: int = 1,
) -> optax.GradientTransformationExtraArgs:
    """optax transformation that keeps the gradient noise statistics; identity on updates.

    Place it first in a chain. Each update folds one step into the statistics:

    * with ``grad_sqnorms=`` (from :func:`data_parallel_grads`,
      :func:`microbatch_grads` or :func:`grouped_grads`) and ``count > 1``:
      the unbiased estimator;
    * otherwise (``count == 1`` or no helper): the differenced estimator on
      ``updates`` and the previous step's gradient (kept in the state, one
      gradient-sized buffer; pass ``differenced=False`` to drop it when every
      step brings ``count > 1``).

    Extra arguments of ``update``: ``grad_sqnorms`` (:class:`GradSqNorms`),
    ``preconditioner`` (for the differenced path; from
    :func:`auto_preconditioner`), ``batch_size`` (total batch of this step for
    the differenced path; default ``init_batch_size``).

    Args:
        init_batch_size: ``M0``, the batch size ``var`` refers to.
        smoothing: per-sample EMA decay (step decay ``smoothing ** scale``).
        differenced: keep the previous gradient for the ``count == 1`` fallback.
        every: take the statistics on one step in ``every`` (steps 0, every,
            2 * every, ...). Pass ``sample=sample_now(opt_state)`` to the
            collection helper so the other steps skip the norms (a
            ``lax.cond``); each sample then counts for ``every`` steps in the
            moving averages (decay ``smoothing ** (scale * every)``), so the
            averaging window keeps its length in training examples with
            ``every`` times fewer samples in it. Default 1: every step.

    Returns:
        An ``optax.GradientTransformationExtraArgs``; read the statistics with
        :func:`get_grad_params` on the optimizer state.

    Example:
        >>> params = {"w": jnp.ones(3)}
        >>> tx = optax.chain(gradient_noise_scale(32), optax.sgd(0.1))
        >>> st = tx.init(params)
        >>> sq = GradSqNorms(jnp.float32(5.0), jnp.float32(2.0), 4, 128)
        >>> upd, st = tx.update({"w": jnp.ones(3)}, st, params, grad_sqnorms=sq)
        >>> [round(float(v), 3) for v in get_grad_params(st)]
        [1.0, 4.0]
    """
    m0 = _check_init_batch_size(init_batch_size)
    smoothing = _check_smoothing(smoothing)
    if not isinstance(differenced, bool):
        raise TypeError(f"differenced ({differenced!r}) must be a bool")
    every = _check_positive_int(every, "every")

    def init_fn(params):
        prev = (
            jax.tree.map(lambda p: jnp.zeros(p.shape, p.dtype), params) if differenced else ()
        )
        return GradientNoiseScaleState(init_grad_stats(), prev, jnp.zeros([], jnp.bool_),
                                       jnp.zeros([], jnp.int32), jnp.full([], every, jnp.int32))

    def update_fn(updates, state, params=None, *, grad_sqnorms=None, preconditioner=None,
                  batch_size=None, **extra_args):
        del params, extra_args
        count = None if grad_sqnorms is None else _static_int(grad_sqnorms.count)
        on = True if every == 1 else (state.step % every) == 0
        step = (state.step + 1).astype(jnp.int32)
        if grad_sqnorms is not None and (count is None or count > 1):
            sq = grad_sqnorms
            if every > 1:
                sq = sq._replace(valid=jnp.logical_and(jnp.asarray(sq.valid, jnp.bool_), on))
            stats = update_grad_stats(state.stats, sq, m0, smoothing=smoothing, steps=every)
            # Unbiased samples: the differenced chain restarts from scratch.
            return updates, state._replace(stats=stats, has_prev=jnp.zeros([], jnp.bool_),
                                           step=step)
        if not differenced:
            if grad_sqnorms is None:
                raise ValueError(
                    "gradient_noise_scale(differenced=False) needs grad_sqnorms= from a "
                    "collection helper with count > 1 at every update"
                )
            return updates, state._replace(step=step)
        bs = batch_size
        if bs is None:
            bs = grad_sqnorms.batch_size if grad_sqnorms is not None else m0
        pre = preconditioner
        sq = differenced_sqnorms(updates, state.prev_grads, bs, pre)
        sq = sq._replace(valid=jnp.logical_and(jnp.asarray(sq.valid, jnp.bool_),
                                               jnp.logical_and(state.has_prev, on)))
        stats = update_grad_stats(state.stats, sq, m0, smoothing=smoothing, biased=True,
                                  steps=every)
        finite = _all_finite(updates)
        prev = jax.tree.map(
            lambda g, p: jnp.where(finite, g.astype(p.dtype), p), updates, state.prev_grads
        )
        # A non-finite gradient is not kept; the previous one stays usable.
        return updates, GradientNoiseScaleState(stats, prev, finite | state.has_prev, step,
                                                state.every)

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)


# --------------------------------------------------------------------------- mode (c)


class _ProbeState(NamedTuple):
    inner: Any
    total_sqr: jax.Array


def _total_sqr_probe(optimizer: optax.GradientTransformation, precondition: bool,
                     b2: Any, eps: Any) -> optax.GradientTransformationExtraArgs:
    """``optimizer`` that also keeps the squared norm of the updates it receives.

    Inside ``optax.MultiSteps`` it runs on the emitting call only, with the
    window's mean gradient: that norm is ``T``. Preconditioned by the wrapped
    optimizer's own Adam state (before its update) when ``precondition``.
    """
    optimizer = optax.with_extra_args_support(optimizer)

    def init_fn(params):
        return _ProbeState(optimizer.init(params), jnp.zeros([], jnp.float32))

    def update_fn(updates, state, params=None, **extra_args):
        pre = auto_preconditioner(state.inner, b2=b2, eps=eps) if precondition else None
        total = sqnorm(updates, pre)
        if pre is not None:
            updates = _ordered_after(updates, total)
        new_updates, inner = optimizer.update(updates, state.inner, params, **extra_args)
        return new_updates, _ProbeState(inner, total)

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)


class MultiStepsGNSState(NamedTuple):
    """State of :func:`multi_steps`.

    Attributes:
        inner: the wrapped ``optax.MultiStepsState``; its ``inner_opt_state``
            holds the inner optimizer's state as ``.inner`` beside the last
            window's ``T`` (``.total_sqr``), taken on the emitting call.
        local_sqr_sum: sum of this window's per-call squared norms.
        stats: the smoothed :class:`GradStatsState`.
    """

    inner: Any
    local_sqr_sum: jax.Array
    stats: GradStatsState


def multi_steps(
    optimizer: optax.GradientTransformation,
    every_k_schedule: int,
    init_batch_size: float,
    micro_batch_size: int,
    *,
    smoothing: float = DEFAULT_SMOOTHING,
    precondition: str = "auto",
    b2: float | None = None,
    eps: float | None = None,
    every: int = 1,
) -> optax.GradientTransformationExtraArgs:
    """Mode (c): accumulation across calls like ``optax.MultiSteps``, with the statistics.

    Wraps ``optax.MultiSteps(optimizer, every_k_schedule)`` and reuses its
    running-mean accumulator: each call adds the squared norm of the incoming
    micro-step gradient to a scalar; on the emitting call the norm of the
    accumulated mean gives ``T`` and the window's ``count = k`` samples give
    ``S``. No gradient-sized buffer beyond MultiSteps' own. Because the wrapper
    sees the inner optimizer's state, the Adam preconditioner is selected
    automatically (``precondition="auto"``; ``"none"`` disables it).

    Args:
        optimizer: the inner optimizer.
        every_k_schedule: micro-steps per optimizer step (int >= 1).
        init_batch_size: ``M0``.
        micro_batch_size: samples per call (the total batch is ``k`` times it);
            the update's extra argument ``batch_size=`` overrides it per call.
        smoothing: per-sample EMA decay.
        precondition: ``"auto"`` or ``"none"``.
        b2, eps: Adam's, when not optax.adam's defaults.
        every: take the statistics in one accumulation window out of
            ``every`` (as in :func:`gradient_noise_scale`); the other windows
            skip the norms (``lax.cond``).

    Returns:
        ``optax.GradientTransformationExtraArgs``; its updates are zero except on
        every k-th call, like ``optax.MultiSteps``.

    Example:
        >>> tx = multi_steps(optax.sgd(0.1), 2, init_batch_size=8, micro_batch_size=8)
        >>> st = tx.init({"w": jnp.zeros(2)})
        >>> _, st = tx.update({"w": jnp.array([1.0, 0.0])}, st)
        >>> _, st = tx.update({"w": jnp.array([0.0, 1.0])}, st)
        >>> int(get_grad_stats(st).count)
        1
    """
    k = _check_positive_int(every_k_schedule, "every_k_schedule")
    every = _check_positive_int(every, "every")
    m0 = _check_init_batch_size(init_batch_size)
    mb = _check_positive_int(micro_batch_size, "micro_batch_size")
    smoothing = _check_smoothing(smoothing)
    if precondition not in ("auto", "none"):
        raise ValueError(f"precondition ({precondition!r}) must be 'auto' or 'none'")
    probe = _total_sqr_probe(optimizer, precondition == "auto", b2, eps)
    inner = optax.MultiSteps(probe, every_k_schedule=k, use_grad_mean=True)

    def init_fn(params):
        return MultiStepsGNSState(inner.init(params), jnp.zeros([], jnp.float32), init_grad_stats())

    def update_fn(updates, state, params=None, *, batch_size=None, **extra_args):
        ms = state.inner
        pre = (
            auto_preconditioner(ms.inner_opt_state, b2=b2, eps=eps)
            if precondition == "auto"
            else None
        )
        sampling = True if every == 1 else (ms.gradient_step % every) == 0
        local_sum = state.local_sqr_sum + _when(sampling, lambda: sqnorm(updates, pre))
        emit = ms.mini_step == (k - 1)
        take = emit if sampling is True else jnp.logical_and(emit, sampling)
        # (Ordering S's read of nu before the update, as the other modes do,
        # measured worse here: MultiSteps' conditional then keeps more alive.)
        new_updates, new_ms = inner.update(updates, ms, params, **extra_args)
        # T was taken by the probe inside MultiSteps' own emitting branch, on the
        # window's mean gradient: no extra pass, no conditional of ours.
        bs = mb if batch_size is None else batch_size
        sq = GradSqNorms(local_sum / k, new_ms.inner_opt_state.total_sqr, k, bs * k,
                         jnp.logical_and(take, jnp.asarray(_pre_valid(pre), jnp.bool_)))
        stats = update_grad_stats(state.stats, sq, m0, smoothing=smoothing, steps=every)
        new_sum = jnp.where(emit, 0.0, local_sum).astype(jnp.float32)
        return new_updates, MultiStepsGNSState(new_ms, new_sum, stats)

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)


# --------------------------------------------------------------------------- readers


def get_grad_stats(opt_state: Any) -> GradStatsState:
    """The first :class:`GradStatsState` in an optimizer state tree.

    Raises:
        ValueError: when ``opt_state`` holds none (no :func:`gradient_noise_scale`
            or :func:`multi_steps` in the optimizer).
    """
    found = [
        x
        for x in jax.tree.leaves(opt_state, is_leaf=lambda x: isinstance(x, GradStatsState))
        if isinstance(x, GradStatsState)
    ]
    if not found:
        raise ValueError(
            "opt_state holds no gradient statistics: put goodput_jax.gradient_noise_scale(...) "
            "first in the optax chain (or use gradstats.multi_steps)"
        )
    return found[0]


def sample_now(opt_state: Any) -> jax.Array:
    """Whether this step takes the statistics (scalar bool), for the helpers' ``sample=``.

    True on steps ``0, every, 2 * every, ...`` of the :func:`gradient_noise_scale`
    found in ``opt_state`` (always True with ``every=1``). Call it on the
    optimizer state at the start of the train step, before the update. Under
    ``jit`` it is a traced bool, so the helpers then use a ``lax.cond`` even
    with ``every=1``; leave ``sample`` at its default (True) there instead.

    Raises:
        ValueError: when ``opt_state`` holds no :func:`gradient_noise_scale` state.

    Example:
        >>> tx = optax.chain(gradient_noise_scale(32, every=4), optax.sgd(0.1))
        >>> bool(sample_now(tx.init({"w": jnp.ones(2)})))
        True
    """
    found = [
        x
        for x in jax.tree.leaves(opt_state,
                                 is_leaf=lambda x: isinstance(x, GradientNoiseScaleState))
        if isinstance(x, GradientNoiseScaleState)
    ]
    if not found:
        raise ValueError(
            "opt_state holds no gradient_noise_scale state: put "
            "goodput_jax.gradient_noise_scale(...) first in the optax chain"
        )
    return (found[0].step % found[0].every) == 0


def get_grad_params(opt_state: Any) -> GradParams:
    """Current smoothed :class:`GradParams` (arrays) read from an optimizer state.

    Example:
        >>> tx = optax.chain(gradient_noise_scale(32), optax.sgd(0.1))
        >>> float(get_grad_params(tx.init({"w": jnp.ones(2)})).sqr)
        0.0
    """
    return grad_params_from_stats(get_grad_stats(opt_state))
