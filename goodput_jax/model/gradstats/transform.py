"""The optax transformations that keep the statistics in the optimizer state.

* :func:`gradient_noise_scale`: first in a chain, identity on the updates;
  folds each step's :class:`GradSqNorms` into the moving averages. An update with one
  part (no collection helper) takes none and flags the state (``biased``: no number is
  shown, :func:`~goodput_jax.model.gradstats.stats_note` names the helper), unless
  ``differenced=True`` opts in to AdaptDL's differenced estimate against the previous
  gradient;
* :func:`multi_steps`: mode (c), accumulation across calls like
  ``optax.MultiSteps``, with the statistics taken on the way.

Example:
    >>> tx = optax.chain(gradient_noise_scale(32), optax.sgd(0.1))
    >>> type(tx.init({"w": jnp.ones(2)})[0]).__name__
    'GradientNoiseScaleState'
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from goodput_jax.model.gradstats.estimate import (
    DEFAULT_AVERAGING,
    DEFAULT_SMOOTHING,
    GradSqNorms,
    GradStatsState,
    _check_averaging,
    _check_init_batch_size,
    _check_positive_int,
    _check_smoothing,
    init_grad_stats,
    mark_one_part,
    static_count,
    update_grad_stats,
)
from goodput_jax.model.gradstats.parts import (
    _ordered_after,
    _pre_valid,
    _when,
    differenced_sqnorms,
)
from goodput_jax.model.gradstats.precondition import (
    DEFAULT_MIN_COUNT,
    Preconditioner,
    auto_preconditioner,
    sqnorm,
)

__all__ = [
    "GradientNoiseScaleState",
    "MultiStepsGNSState",
    "gradient_noise_scale",
    "multi_steps",
]


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


def _all_finite(tree: Any) -> jax.Array:
    leaves = jax.tree.leaves(tree)
    ok = jnp.array(True)
    for x in leaves:
        ok = ok & jnp.all(jnp.isfinite(x))
    return ok


def _after_norms(updates: Any, state: GradientNoiseScaleState, preconditioner: Any) -> Any:
    """``updates`` ordered after the differenced norms when they read Adam's ``nu``.

    The preconditioned differenced norms read the optimizer's ``nu``, which the next
    transformation (Adam) overwrites in place in a donated state; without a data path
    from the norms to the updates XLA copies every ``nu`` leaf first (see
    :func:`goodput_jax.model.gradstats.parts._ordered_after`).
    """
    if preconditioner is None:
        return updates
    return _ordered_after(updates, state.stats.var_ema)


def gradient_noise_scale(
    init_batch_size: float,
    *,
    smoothing: float = DEFAULT_SMOOTHING,
    differenced: bool = False,
    every: int = 1,
    averaging: str = DEFAULT_AVERAGING,
) -> optax.GradientTransformationExtraArgs:
    """optax transformation that keeps the gradient noise statistics; identity on updates.

    Place it first in a chain. Each update folds one step into the statistics:

    * with ``grad_sqnorms=`` (from :func:`microbatch_grads`, :func:`split_grads`,
      :func:`data_parallel_grads` or :func:`grouped_grads`) and ``count > 1``:
      the unbiased estimator;
    * otherwise (``count == 1``, or no helper: a plain ``jax.value_and_grad`` step) no
      statistics: one gradient per update holds no measure of its own noise. The state
      is flagged (``biased`` while it holds no sample), :func:`stats_summary` shows no
      number and :func:`~goodput_jax.model.gradstats.stats_note` says why and names the
      fix: on one device ``microbatch_grads(loss_fn, params, batch, 2,
      preconditioner=auto_preconditioner(opt_state))``.
    * ``differenced=True`` (an explicit opt-in, for comparison) takes AdaptDL's
      one-replica estimate instead: ``updates`` and the previous step's gradient as two
      parts (kept in the state, one gradient-sized buffer). It reads the parameters'
      movement between the two steps as noise, and with Adam preconditions both with
      ``nu`` from before the step: 2.4-2.8x the per-example truth with SGD on a CNN,
      1e4-1e6x with AdamW (``tests/model/test_gradstats_default.py``). Its averages are
      flagged ``biased``: :func:`get_grad_params` returns them, the summary the package
      shows does not.

    Extra arguments of ``update``: ``grad_sqnorms`` (:class:`GradSqNorms`),
    ``preconditioner`` (for the differenced path; from
    :func:`auto_preconditioner`), ``batch_size`` (total batch of this step for
    the differenced path; default ``init_batch_size``).

    Args:
        init_batch_size: ``M0``, the batch size ``var`` refers to.
        smoothing: per-sample EMA decay (step decay ``smoothing ** scale``).
        differenced: take the differenced estimate on ``count == 1`` updates (default
            False: none, the state flagged; see above).
        every: take the statistics on one step in ``every`` (steps 0, every,
            2 * every, ...). Pass ``sample=sample_now(opt_state)`` to the
            collection helper so the other steps skip the norms (a
            ``lax.cond``); each sample then counts for ``every`` steps in the
            moving averages (decay ``smoothing ** (scale * every)``), so the
            averaging window keeps its length in training examples with
            ``every`` times fewer samples in it. Default 1: every step.
        averaging: ``"growing"`` (default: a window that grows with the run, so
            the first samples are forgotten) or ``"ema"`` (AdaptDL's EMA of fixed
            decay); see :func:`update_grad_stats`.

    Returns:
        An ``optax.GradientTransformationExtraArgs``; read the statistics with
        :func:`get_grad_params` on the optimizer state.

    Example:
        >>> from goodput_jax.model.gradstats import get_grad_params
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
    averaging = _check_averaging(averaging)

    def init_fn(params: optax.Params) -> GradientNoiseScaleState:
        prev = (
            jax.tree.map(lambda p: jnp.zeros(p.shape, p.dtype), params) if differenced else ()
        )
        return GradientNoiseScaleState(init_grad_stats(), prev, jnp.zeros([], jnp.bool_),
                                       jnp.zeros([], jnp.int32), jnp.full([], every, jnp.int32))

    def unbiased(state: GradientNoiseScaleState, sq: GradSqNorms, on: Any, step: jax.Array,
                 traced: bool = False) -> GradientNoiseScaleState:
        if every > 1:
            sq = sq._replace(valid=jnp.logical_and(jnp.asarray(sq.valid, jnp.bool_), on))
        stats = update_grad_stats(state.stats, sq, m0, smoothing=smoothing, steps=every,
                                  averaging=averaging)
        # a part count of 1 (traced) takes no sample: flag the state; a helper's update
        # clears the flag of one that holds none yet
        stats = mark_one_part(stats, jnp.asarray(sq.count) <= 1 if traced else False)
        # Unbiased samples: the differenced chain restarts from scratch.
        return state._replace(stats=stats, has_prev=jnp.zeros([], jnp.bool_), step=step)

    def differenced_step(updates: optax.Updates, state: GradientNoiseScaleState,
                         batch_size: Any, preconditioner: Preconditioner | None, on: Any,
                         step: jax.Array) -> GradientNoiseScaleState:
        sq = differenced_sqnorms(updates, state.prev_grads, batch_size, preconditioner)
        sq = sq._replace(valid=jnp.logical_and(jnp.asarray(sq.valid, jnp.bool_),
                                               jnp.logical_and(state.has_prev, on)))
        stats = update_grad_stats(state.stats, sq, m0, smoothing=smoothing, biased=True,
                                  steps=every, averaging=averaging)
        stats = mark_one_part(stats)
        finite = _all_finite(updates)
        prev = jax.tree.map(
            lambda g, p: jnp.where(finite, g.astype(p.dtype), p), updates, state.prev_grads
        )
        # A non-finite gradient is not kept; the previous one stays usable.
        return GradientNoiseScaleState(stats, prev, finite | state.has_prev, step, state.every)

    def update_fn(updates: optax.Updates, state: GradientNoiseScaleState,
                  params: optax.Params | None = None, *,
                  grad_sqnorms: GradSqNorms | None = None,
                  preconditioner: Preconditioner | None = None, batch_size: Any = None,
                  **extra_args: Any) -> tuple[optax.Updates, GradientNoiseScaleState]:
        del params, extra_args
        on = True if every == 1 else (state.step % every) == 0
        step = (state.step + 1).astype(jnp.int32)
        bs = batch_size
        if bs is None:
            bs = grad_sqnorms.batch_size if grad_sqnorms is not None else m0
        if grad_sqnorms is not None:
            count = static_count(grad_sqnorms.count)
            if count is not None and count > 1:
                return updates, unbiased(state, grad_sqnorms, on, step)
            if count is None:  # a traced part count: pick the estimator at run time
                if not differenced:
                    return updates, unbiased(state, grad_sqnorms, on, step, traced=True)
                new_state = jax.lax.cond(
                    jnp.asarray(grad_sqnorms.count) > 1,
                    lambda: unbiased(state, grad_sqnorms, on, step),
                    lambda: differenced_step(updates, state, bs, preconditioner, on, step),
                )
                return _after_norms(updates, new_state, preconditioner), new_state
        if not differenced:
            # One gradient per update (no helper, or count 1): no statistics, the state
            # flagged so that no number is shown and stats_note names the helper.
            return updates, state._replace(stats=mark_one_part(state.stats), step=step)
        new_state = differenced_step(updates, state, bs, preconditioner, on, step)
        return _after_norms(updates, new_state, preconditioner), new_state

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)


# --------------------------------------------------------------------------- mode (c)


class _ProbeState(NamedTuple):
    inner: Any
    total_sqr: jax.Array


def _total_sqr_probe(optimizer: optax.GradientTransformation, precondition: bool,
                     b2: Any, eps: Any,
                     min_count: int = DEFAULT_MIN_COUNT) -> optax.GradientTransformationExtraArgs:
    """``optimizer`` that also keeps the squared norm of the updates it receives.

    Inside ``optax.MultiSteps`` it runs on the emitting call only, with the
    window's mean gradient: that norm is ``T``. Preconditioned by the wrapped
    optimizer's own Adam state (before its update) when ``precondition``.
    """
    optimizer = optax.with_extra_args_support(optimizer)

    def init_fn(params: optax.Params) -> _ProbeState:
        return _ProbeState(optimizer.init(params), jnp.zeros([], jnp.float32))

    def update_fn(updates: optax.Updates, state: _ProbeState,
                  params: optax.Params | None = None,
                  **extra_args: Any) -> tuple[optax.Updates, _ProbeState]:
        pre = (auto_preconditioner(state.inner, b2=b2, eps=eps, min_count=min_count)
               if precondition else None)
        total = sqnorm(updates, pre)
        if pre is not None:
            updates = _ordered_after(updates, total)
        new_updates, inner = optimizer.update(updates, state.inner, params, **extra_args)
        return new_updates, _ProbeState(inner, total)

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)


@dataclasses.dataclass(frozen=True)
class AutoPrecondition:
    """:func:`multi_steps`' Adam preconditioner, found in the inner optimizer's state
    (:func:`auto_preconditioner`), with Adam's ``b2`` / ``eps`` when they are not optax's
    defaults and the Adam updates before the preconditioned statistics are taken.

    Example:
        >>> AutoPrecondition(min_count=-1)
        Traceback (most recent call last):
        ValueError: min_count (-1) must be >= 0
    """

    b2: float | None = None
    eps: float | None = None
    min_count: int = DEFAULT_MIN_COUNT

    def __post_init__(self) -> None:
        if isinstance(self.min_count, bool) or not isinstance(self.min_count, int) \
                or self.min_count < 0:
            raise ValueError(f"min_count ({self.min_count!r}) must be >= 0")


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
    precondition: str | AutoPrecondition = "auto",
    every: int = 1,
    averaging: str = DEFAULT_AVERAGING,
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
        precondition: ``"auto"`` (Adam's, found in the inner state), an
            :class:`AutoPrecondition` (the same with Adam's ``b2`` / ``eps`` and
            ``min_count``), or ``"none"``.
        every: take the statistics in one accumulation window out of
            ``every`` (as in :func:`gradient_noise_scale`); the other windows
            skip the norms (``lax.cond``).
        averaging: ``"growing"`` or ``"ema"``, as in :func:`gradient_noise_scale`.

    Returns:
        ``optax.GradientTransformationExtraArgs``; its updates are zero except on
        every k-th call, like ``optax.MultiSteps``.

    Example:
        >>> from goodput_jax.model.gradstats import get_grad_stats
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
    if precondition == "auto":
        precondition = AutoPrecondition()
    elif not (precondition == "none" or isinstance(precondition, AutoPrecondition)):
        raise ValueError(f"precondition ({precondition!r}) must be 'auto', 'none' or an "
                         "AutoPrecondition")
    auto = precondition if isinstance(precondition, AutoPrecondition) else None
    b2, eps = (auto.b2, auto.eps) if auto else (None, None)
    min_count = auto.min_count if auto else DEFAULT_MIN_COUNT
    averaging = _check_averaging(averaging)
    probe = _total_sqr_probe(optimizer, auto is not None, b2, eps, min_count)
    inner = optax.MultiSteps(probe, every_k_schedule=k, use_grad_mean=True)

    def init_fn(params: optax.Params) -> MultiStepsGNSState:
        return MultiStepsGNSState(inner.init(params), jnp.zeros([], jnp.float32), init_grad_stats())

    def update_fn(updates: optax.Updates, state: MultiStepsGNSState,
                  params: optax.Params | None = None, *, batch_size: Any = None,
                  **extra_args: Any) -> tuple[optax.Updates, MultiStepsGNSState]:
        ms = state.inner
        pre = (
            auto_preconditioner(ms.inner_opt_state, b2=b2, eps=eps, min_count=min_count)
            if auto is not None
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
        stats = update_grad_stats(state.stats, sq, m0, smoothing=smoothing, steps=every,
                                  averaging=averaging)
        if k == 1:  # one micro-step per window: one part, no statistics (flagged)
            stats = mark_one_part(stats)
        new_sum = jnp.where(emit, 0.0, local_sum).astype(jnp.float32)
        return new_updates, MultiStepsGNSState(new_ms, new_sum, stats)

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)


# --------------------------------------------------------------------------- readers
