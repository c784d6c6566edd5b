"""Estimators and moving averages: ``(S, T)`` -> ``GradParams``, pure and jittable.

The state types (:class:`GradSqNorms`, :class:`GradStatsState`), the one-step
unbiased estimator, the bias-corrected EMAs and the read-outs. No optimizer,
no collectives: everything here is a pure function of scalars.

Units: ``sqr = |G|^2`` and ``var = tr(Sigma) / M0`` (the gradient variance of a
batch of ``M0`` samples, ``M0`` = the initial batch size); the noise scale in
samples is ``var / sqr * M0`` (:func:`noise_scale`).

Example:
    >>> s = update_grad_stats(init_grad_stats(), GradSqNorms(5.0, 2.0, 4, 64), 16)
    >>> [round(float(v), 3) for v in grad_params_from_stats(s)]
    [1.0, 4.0]
"""

from __future__ import annotations

import math
import numbers
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from goodput_jax.model.scaling import _MIN_VAR
from goodput_jax.model.types import GradParams

__all__ = [
    "DEFAULT_AVERAGING",
    "DEFAULT_SMOOTHING",
    "GROWTH_POWER",
    "MIN_VAR",
    "NO_HELPER_NOTE",
    "GradSqNorms",
    "GradStatsState",
    "StatsSummary",
    "as_stats_summary",
    "estimate_grad_params",
    "grad_params_from_stats",
    "has_grad_stats",
    "init_grad_stats",
    "is_stats_summary",
    "mark_one_part",
    "noise_scale",
    "static_count",
    "stats_summary",
    "update_grad_stats",
]

#: Per-sample EMA decay; the per-step decay is ``DEFAULT_SMOOTHING ** scale``.
DEFAULT_SMOOTHING = 0.999
#: The averaging the statistics use by default: ``"growing"`` (a window that grows with
#: the run, so the first samples are forgotten) or ``"ema"`` (AdaptDL's bias-corrected
#: EMA of fixed decay, the reference).
DEFAULT_AVERAGING = "growing"
#: The growing window's power ``q``: a sample taken at age ``a`` weighs ``~ a ** (q - 1)``
#: at any later time, until the fixed window (``smoothing``) takes over.
GROWTH_POWER = 3.0
_AVERAGING = ("growing", "ema")
#: Floor of the reported ``var`` (keeps the efficiency formula finite); the same
#: constant as the AdaScale gain's floor in :mod:`goodput_jax.model.scaling`.
MIN_VAR = _MIN_VAR
#: Why no noise statistics are shown where the steps brought one gradient per update (no
#: collection helper; ``GradStatsState.biased``): one line, naming the helper that fixes it.
#: :func:`goodput_jax.model.gradstats.stats_note` returns it; the hooks, ``suggest()`` and
#: the report show it once.
NO_HELPER_NOTE = (
    "no gradient noise statistics: gradient_noise_scale received one gradient per update "
    "(no collection helper), and consecutive steps' gradients read the parameters' own "
    "movement as noise (up to 2e6x the per-example truth in training), so none are taken; "
    "on one device take the gradient with gradstats.microbatch_grads(loss_fn, params, batch, "
    "2, preconditioner=gradstats.auto_preconditioner(opt_state)) and pass grad_sqnorms= to "
    "tx.update (several devices: gradstats.data_parallel_grads)"
)


# --------------------------------------------------------------------------- types


class GradSqNorms(NamedTuple):
    """The two scalars a collection helper produces for one optimizer step.

    Attributes:
        local_sqr: ``S``, mean over the ``count`` parts of each part's squared
            gradient norm (preconditioned where a preconditioner was given).
        total_sqr: ``T``, squared norm of the mean gradient.
        count: number of equal-sized parts (replicas x microbatches); a Python
            int in every helper here. A Python int is static pytree metadata:
            it survives ``jit`` boundaries as an int (a traced count still
            works, at the price of a ``lax.cond`` between the estimators).
        batch_size: total number of samples behind the mean gradient.
        valid: False when the statistics must be ignored (e.g. the Adam second
            moment is not initialised yet).
    """

    local_sqr: Any
    total_sqr: Any
    count: Any
    batch_size: Any
    valid: Any = True


def static_count(count: Any) -> int | None:
    """``count`` as a Python int when it is one (a static part count), else None.

    Typed ``Any``: ``count`` is a Python value or a traced JAX array.

    Example:
        >>> static_count(4), static_count(jnp.int32(4))
        (4, None)
    """
    if isinstance(count, numbers.Integral) and not isinstance(count, bool):
        return int(count)
    return None


def _flatten_sqnorms(sq: GradSqNorms) -> tuple[tuple, Any]:
    # A Python-int count is static pytree metadata, so it stays a Python int
    # through jit / vmap / scan boundaries (as a leaf it would become a tracer
    # and the transformation could no longer pick its estimator statically).
    count = static_count(sq.count)
    if count is None:
        return (sq.local_sqr, sq.total_sqr, sq.count, sq.batch_size, sq.valid), None
    return (sq.local_sqr, sq.total_sqr, sq.batch_size, sq.valid), count


def _unflatten_sqnorms(count: int | None, children: tuple) -> GradSqNorms:
    if count is None:
        return GradSqNorms(*children)
    local_sqr, total_sqr, batch_size, valid = children
    return GradSqNorms(local_sqr, total_sqr, count, batch_size, valid)


jax.tree_util.register_pytree_node(GradSqNorms, _flatten_sqnorms, _unflatten_sqnorms)


# The functional form (not the class form ruff's UP014 asks for): a field named ``count``
# shadows ``tuple.count`` (a method), which the class form declares as an incompatible
# override (mypy); the functional form types the same fields.
GradStatsState = NamedTuple("GradStatsState", [  # noqa: UP014 (see above)
    ("count", jax.Array),
    ("skipped", jax.Array),
    ("biased", jax.Array),
    ("sqr_ema", jax.Array),
    ("var_ema", jax.Array),
    ("ema_norm", jax.Array),
    ("age", Any),
])
GradStatsState.__doc__ = """Smoothed gradient statistics (a pytree of scalars; counters are int32).

    Attributes:
        count: samples folded into the averages since the last reset.
        skipped: steps skipped because a statistic was not finite.
        biased: whether the updates brought one gradient each (no collection helper:
            ``count == 1``) and no unbiased sample came since. The averages are then empty
            (``count == 0``: what :func:`gradient_noise_scale` does by default) or the
            differenced estimator's (``gradient_noise_scale(differenced=True)``, an
            explicit opt-in); either way :func:`stats_summary` shows no number and
            :func:`goodput_jax.model.gradstats.stats_note` says why
            (:data:`NO_HELPER_NOTE`).
        sqr_ema: biased EMA accumulator of ``sqr``.
        var_ema: biased EMA accumulator of ``var``.
        ema_norm: ``1 - prod(theta)``, the bias correction of both accumulators.
        age: the samples' total weight since the last reset, in steps of ``M0``
            examples (``sum(scale * steps)``); the growing window's clock. A state
            built without it (six fields, as before) starts at 0.
    """
GradStatsState.__new__.__defaults__ = (0.0,)


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
    value = float(smoothing)
    if not 0.0 < value < 1.0:
        raise ValueError(f"smoothing ({smoothing!r}) must be in (0, 1)")
    return value


def _check_averaging(averaging: Any) -> str:
    if averaging not in _AVERAGING:
        raise ValueError(f"averaging ({averaging!r}) must be 'growing' or 'ema'")
    return averaging


def _check_positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} ({value!r}) must be a positive integer")
    if value < 1:
        raise ValueError(f"{name} ({value!r}) must be a positive integer")
    return int(value)


def estimate_grad_params(local_sqr: Any, total_sqr: Any, count: Any, scale: Any) -> GradParams:
    """One-step unbiased estimates of ``|G|^2`` and ``tr(Sigma)`` at the initial batch size.

    Typed ``Any``: each argument is a Python value or a traced JAX array.

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
        age=jnp.zeros([], jnp.float32),
    )


def update_grad_stats(
    state: GradStatsState,
    sqnorms: GradSqNorms,
    init_batch_size: float,
    *,
    smoothing: float = DEFAULT_SMOOTHING,
    biased: Any = False,
    steps: int = 1,
    averaging: str = DEFAULT_AVERAGING,
) -> GradStatsState:
    """Fold one step's ``(S, T)`` into the moving averages.

    Typed ``Any``: ``biased`` is a Python value or a traced JAX array.

    Pure and jittable. A sample is ignored (state unchanged) when ``count <= 1``
    or ``sqnorms.valid`` is False; it is counted in ``skipped`` when any of
    ``S``, ``T`` or the derived estimates is not finite. An unbiased sample
    arriving while the averages are biased restarts them.

    Averaging. Each sample weighs ``w = scale * steps`` (steps of ``M0`` examples) and
    decays the averages by ``theta``:

    * ``"ema"`` (AdaptDL's): ``theta = smoothing ** w``, bias-corrected. The window is
      ``1 / (1 - smoothing)`` steps of ``M0`` examples (1000 by default) from the first
      sample on, so for the first ~1000 steps the average is close to a plain mean
      of every sample since the start: the first samples, taken while the model (and
      Adam's second moment) changed fastest, weigh as much as the last ones.
    * ``"growing"`` (default): ``theta = min(smoothing ** w, (a / (a + w)) ** q)``
      with ``a`` the age (total weight so far) and ``q = GROWTH_POWER`` (3). A sample
      taken at age ``s`` then weighs ``~ (s / a) ** (q - 1)`` at age ``a``: the window
      grows with the run (about the last half of it) and the warm-up is forgotten;
      once it reaches the fixed window the two coincide.

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
        averaging: ``"growing"`` or ``"ema"`` (above).

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
    averaging = _check_averaging(averaging)
    scale = jnp.asarray(sqnorms.batch_size, jnp.float32) / m0
    est = estimate_grad_params(sqnorms.local_sqr, sqnorms.total_sqr, sqnorms.count, scale)
    count_ok = jnp.asarray(sqnorms.count) > 1
    usable = jnp.logical_and(count_ok, jnp.asarray(sqnorms.valid, jnp.bool_))
    finite = jnp.isfinite(est.sqr) & jnp.isfinite(est.var) & jnp.isfinite(scale) & (scale > 0)
    accept = usable & finite
    biased = jnp.asarray(biased, jnp.bool_)
    reset = state.biased & ~biased
    weight = scale * steps
    theta = jnp.asarray(smoothing, jnp.float32) ** weight
    age_base = jnp.where(reset, 0.0, jnp.asarray(state.age, jnp.float32))
    if averaging == "growing":
        grow = (age_base / jnp.where(accept, age_base + weight, 1.0)) ** GROWTH_POWER
        theta = jnp.minimum(theta, grow)
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
        age=jnp.where(accept, age_base + weight, jnp.asarray(state.age, jnp.float32)),
    )


def mark_one_part(state: GradStatsState, one_part: Any = True) -> GradStatsState:
    """``state`` after an update that brought one gradient (``one_part``: no collection
    helper) or several (``one_part=False``). While it holds no sample the ``biased`` flag
    follows the last update: set, no number is shown and
    :func:`goodput_jax.model.gradstats.stats_note` says why; cleared by a helper's update
    even before its first sample is taken (Adam's first updates). A state that holds
    samples keeps its flag (and its numbers).

    Typed ``Any``: ``one_part`` is a Python value or a traced JAX array.

    Example:
        >>> st = mark_one_part(init_grad_stats())
        >>> bool(st.biased), bool(mark_one_part(st, False).biased)
        (True, False)
    """
    flag = jnp.asarray(one_part, jnp.bool_)
    return state._replace(biased=jnp.where(state.count == 0, flag,
                                           jnp.asarray(state.biased, jnp.bool_)))


def grad_params_from_stats(state: GradStatsState) -> GradParams:
    """Bias-corrected, clamped statistics: ``sqr >= 0``, ``var >= 1e-6``.

    Before the first sample this returns ``GradParams(0.0, 1e-6)`` (which makes
    the AdaScale gain equal to the scale, i.e. assumes perfect scaling); check
    :func:`has_grad_stats` to tell the two apart. A state whose updates brought one
    gradient each and no sample (``biased`` with ``count == 0``, the default one-device
    path with no helper) gives ``GradParams(nan, nan)``: no number
    (:func:`goodput_jax.model.gradstats.stats_note` says why; the AdaScale gain falls back
    to the scale on a non-finite one). The differenced estimator's averages
    (``gradient_noise_scale(differenced=True)``) are returned as they are, flagged
    ``biased``.

    Example:
        >>> bool(grad_params_from_stats(init_grad_stats()).var == jnp.float32(MIN_VAR))
        True
    """
    has = state.ema_norm > 0
    denom = jnp.where(has, state.ema_norm, 1.0)
    sqr = jnp.where(has, state.sqr_ema / denom, 0.0)
    var = jnp.where(has, state.var_ema / denom, 0.0)
    none = jnp.logical_and(jnp.asarray(state.biased, jnp.bool_), state.count == 0)
    return GradParams(sqr=jnp.where(none, jnp.nan, jnp.maximum(sqr, 0.0)),
                      var=jnp.where(none, jnp.nan, jnp.maximum(var, MIN_VAR)))


class StatsSummary(NamedTuple):
    """The smoothed gradient statistics as three float32 scalars: what a step hands over.

    :func:`stats_summary` builds one inside a step (traceable: a jitted step returns it
    as three scalar outputs that are never donated, and
    :func:`goodput_jax.adaptive.make_train_step`'s ``stats_summary()`` is the last
    step's); :func:`as_stats_summary` turns one, or the ``[count, sqr, var]`` vector of
    earlier versions, into host floats.

    Attributes:
        count: samples folded into the moving averages (0 before the first).
        sqr: ``|G|^2``, bias-corrected, ``>= 0`` (0 before the first sample).
        var: ``tr(Sigma) / M0``, bias-corrected, ``>= MIN_VAR``.

    A state flagged ``biased`` (the updates brought one gradient each: no collection
    helper) gives ``(0, nan, nan)``: no number; :func:`goodput_jax.model.gradstats.stats_note`
    of the summary says why (:data:`NO_HELPER_NOTE`).

    Example:
        >>> s = StatsSummary(3.0, 2.0, 6.0)
        >>> s.var / s.sqr
        3.0
    """

    count: Any
    sqr: Any
    var: Any


def stats_summary(state: GradStatsState) -> StatsSummary:
    """The :class:`StatsSummary` (float32 scalars) of a :class:`GradStatsState`: the few
    scalars to read back (traceable; :func:`goodput_jax.adaptive.make_train_step` returns
    it from the step).

    Example:
        >>> import jax.numpy as jnp
        >>> st = GradStatsState(jnp.int32(0), jnp.int32(0), jnp.bool_(False), jnp.float32(0.0),
        ...                     jnp.float32(0.0), jnp.float32(0.0))
        >>> s = stats_summary(st)
        >>> float(s.count), float(s.sqr), s.var.dtype
        (0.0, 0.0, dtype('float32'))
    """
    gp = grad_params_from_stats(state)
    f32 = jnp.float32
    # one gradient per update (no helper): no number, whatever the differenced opt-in holds
    hide = jnp.asarray(state.biased, jnp.bool_)
    return StatsSummary(jnp.where(hide, 0.0, jnp.asarray(state.count, f32)).astype(f32),
                        jnp.where(hide, jnp.nan, jnp.asarray(gp.sqr, f32)).astype(f32),
                        jnp.where(hide, jnp.nan, jnp.asarray(gp.var, f32)).astype(f32))


def is_stats_summary(value: Any) -> bool:
    """Whether ``value`` is a summary :func:`as_stats_summary` reads: a
    :class:`StatsSummary`, or a ``[count, sqr, var]`` vector (shape ``(3,)``). Looks at
    the type and shape only: never waits for a device value.

    Typed ``Any``: ``value`` is anything a caller holds (checked here).

    Example:
        >>> is_stats_summary(StatsSummary(1, 2, 3)), is_stats_summary([1.0, 2.0, 3.0])
        (True, True)
        >>> is_stats_summary(jnp.zeros(4))
        False
    """
    if isinstance(value, StatsSummary):
        return True
    shape = getattr(value, "shape", None)
    if shape is None and isinstance(value, (list, tuple)):
        shape = (len(value),)
    return shape is not None and tuple(shape) == (3,)


def as_stats_summary(value: Any, name: str = "summary") -> StatsSummary:
    """``value`` as a :class:`StatsSummary` of Python floats (reads device values back).

    Typed ``Any``: ``value`` is anything a caller holds (checked here).

    Args:
        value: a :class:`StatsSummary` (device or host scalars), or the ``[count, sqr,
            var]`` vector earlier versions' ``stats_summary`` returned (still accepted).
        name: the argument's name, for the error.

    Raises:
        TypeError: ``value`` is neither (the message names ``name`` and the value).

    Example:
        >>> as_stats_summary(jnp.array([2.0, 1.0, 4.0]))
        StatsSummary(count=2.0, sqr=1.0, var=4.0)
    """
    if not is_stats_summary(value):
        raise TypeError(f"{name} ({value!r:.200}) must be a StatsSummary(count, sqr, var) or "
                        "a [count, sqr, var] vector of shape (3,)")
    # float() per field: a third of jax.device_get's cost on three device scalars
    host = value if isinstance(value, StatsSummary) else np.asarray(value)
    return StatsSummary(*(float(x) for x in host))


def has_grad_stats(state: GradStatsState) -> jax.Array:
    """Whether at least one sample has been folded in (scalar bool array)."""
    return state.count > 0


def noise_scale(grad_params: GradParams, init_batch_size: float | None = None) -> jax.Array:
    """Gradient noise scale ``B_noise = tr(Sigma) / |G|^2`` in samples.

    ``GradParams.var`` is ``tr(Sigma) / M0`` (the variance of an ``M0``-sample
    batch gradient), so ``var / sqr`` alone is the noise scale in units of
    *initial batches*; multiplying by ``M0`` gives it in samples (McCandlish
    et al.'s ``B_simple``). ``init_batch_size`` is therefore required: pass
    ``M0`` for samples, or ``1`` explicitly for units of initial batches.
    Pollux's efficiency at batch ``M`` is ``(B_noise + M0) / (B_noise + M)``
    with ``B_noise`` in samples.

    Args:
        grad_params: :class:`GradParams` (``var = tr(Sigma) / M0``).
        init_batch_size: ``M0``, the batch size ``var`` refers to (or 1).

    Raises:
        TypeError: ``init_batch_size`` is missing (it used to default to 1 and
            silently return the noise scale divided by ``M0``).

    Example:
        >>> float(noise_scale(GradParams(sqr=2.0, var=6.0), init_batch_size=32))
        96.0
    """
    if init_batch_size is None:
        raise TypeError(
            "noise_scale(grad_params, init_batch_size) needs init_batch_size: var is "
            "tr(Sigma)/M0, so pass init_batch_size=M0 for the noise scale in samples "
            "(or init_batch_size=1 for units of initial batches)"
        )
    m0 = (_check_init_batch_size(init_batch_size)
          if isinstance(init_batch_size, numbers.Real) else init_batch_size)  # arrays: as is
    sqr = jnp.asarray(grad_params.sqr, jnp.float32)
    var = jnp.asarray(grad_params.var, jnp.float32)
    return var / sqr * jnp.asarray(m0, jnp.float32)
