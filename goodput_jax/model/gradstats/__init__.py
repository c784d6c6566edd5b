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
with part size ``b = B / count``.) On one device with no accumulation,
:func:`split_grads` splits the batch in two on sampled steps (unbiased; so does
:func:`data_parallel_grads` on a 1-device mesh; :func:`microbatch_grads` with two
microbatches is the quickstart's). When an update brings only one part (a plain
``jax.value_and_grad`` step: no helper), :func:`gradient_noise_scale` takes no statistics:
the state is flagged (``GradStatsState.biased``), :func:`stats_summary` shows no number
(``nan``) and :func:`stats_note` returns :data:`NO_HELPER_NOTE`, one line naming the
helper that fixes it, for the hooks, ``suggest()`` and the report to show. The
*differenced* estimator (the previous step's gradient as the second part, AdaptDL's) reads
the parameters' movement between the steps as noise (up to 2e6x the per-example truth in
training, ``tests/model/test_gradstats_default.py``); it remains an explicit opt-in,
``gradient_noise_scale(M0, differenced=True)``, flagged the same way. Once unbiased
samples arrive the averages restart from them.

The per-step estimates are noisy, so they are averaged over a window measured in
training examples (``scale = batch / M0`` per step) whatever the batch size. By
default (``averaging="growing"``) the window grows with the run, about its last
half, so the first samples are forgotten, up to the fixed window of AdaptDL's
bias-corrected EMA (``theta = smoothing ** scale``, ``averaging="ema"``).
Non-finite steps are skipped. Reported values are clamped to ``sqr >= 0`` and
``var >= MIN_VAR`` (1e-6, the floor the AdaScale gain uses too).

For Adam-type optimizers the statistics are taken of the preconditioned
gradient ``g / (sqrt(nu_hat) + eps)``, with ``nu_hat`` the bias-corrected
second moment found in the optimizer state (:func:`auto_preconditioner` finds
it in any optax state tree, so the same train step serves SGD and Adam). No
preconditioned sample is taken before ``nu_hat`` rests on ``DEFAULT_MIN_COUNT`` (20)
Adam updates: over the first ones it is the square of one to a few gradients and
the preconditioned norms are heavy-tailed. ``docs/concepts.md`` says when each
estimator is biased; ``tests/model/test_gradstats_truth.py`` checks them against
per-example gradients during training.

The package, one job per module, from the bottom (each imports only the ones
above it):

* :mod:`.estimate`: the state types and pure functions
  (:func:`estimate_grad_params`, :func:`init_grad_stats`,
  :func:`update_grad_stats`, :func:`grad_params_from_stats`, :func:`noise_scale`) and
  the :class:`StatsSummary` NamedTuple ``(count, sqr, var)`` a step hands over
  (:func:`stats_summary` in the step, :func:`as_stats_summary` on the host);
* :mod:`.precondition`: :class:`Preconditioner`, :func:`sqnorm`,
  :func:`auto_preconditioner` (Adam's ``nu`` found in any optax state),
  :func:`rescale_nu` / :func:`nu_switch_factor` (``nu`` rescaled at a batch-size switch;
  an ``nnx.Optimizer`` in place);
* :mod:`.parts`: the one-device collection helpers called inside the user's train step
  (one device's batch in parts):
  (b) :func:`microbatch_grads` (``lax.scan`` accumulation in one step),
  (e) :func:`split_grads` (one device: the batch in two on sampled steps);
* :mod:`.collect`: the helpers across devices and groups (and the re-exports of
  :mod:`.parts`):
  (a) :func:`data_parallel_grads` under ``jax.shard_map``,
  (d) :func:`grouped_grads` (plain ``jit`` with an explicit group axis);
* :mod:`.transform`: the optax transformation :func:`gradient_noise_scale`
  (first in a chain, identity on the updates, statistics in its state) and
  (c) :func:`multi_steps` (accumulation across calls, like ``optax.MultiSteps``);
* :mod:`.readers`: :func:`get_grad_stats` / :func:`get_grad_params` /
  :func:`sample_now` / :func:`stats_note` (why no number is shown).

Every name is re-exported here: ``from goodput_jax.model.gradstats import X``.

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
    >>> from goodput_jax.model.gradstats import (GradSqNorms, grad_params_from_stats,
    ...     init_grad_stats, update_grad_stats)
    >>> state = init_grad_stats()
    >>> state = update_grad_stats(state, GradSqNorms(jnp.float32(5.0), jnp.float32(2.0), 4, 64), 16)
    >>> [round(float(v), 3) for v in grad_params_from_stats(state)]
    [1.0, 4.0]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from goodput_jax._lazy import lazy_exports

#: public name -> the module that defines it (imported on first use)
_EXPORTS: dict[str, str] = {
    "adam_preconditioner": "goodput_jax.model.gradstats.precondition",
    "as_stats_summary": "goodput_jax.model.gradstats.estimate",
    "auto_preconditioner": "goodput_jax.model.gradstats.precondition",
    "AutoPrecondition": "goodput_jax.model.gradstats.transform",
    "data_parallel_grads": "goodput_jax.model.gradstats.collect",
    "DEFAULT_AVERAGING": "goodput_jax.model.gradstats.estimate",
    "DEFAULT_MIN_COUNT": "goodput_jax.model.gradstats.precondition",
    "DEFAULT_SMOOTHING": "goodput_jax.model.gradstats.estimate",
    "differenced_sqnorms": "goodput_jax.model.gradstats.collect",
    "estimate_grad_params": "goodput_jax.model.gradstats.estimate",
    "find_adam_state": "goodput_jax.model.gradstats.precondition",
    "get_grad_params": "goodput_jax.model.gradstats.readers",
    "get_grad_stats": "goodput_jax.model.gradstats.readers",
    "grad_params_from_stats": "goodput_jax.model.gradstats.estimate",
    "gradient_noise_scale": "goodput_jax.model.gradstats.transform",
    "GradientNoiseScaleState": "goodput_jax.model.gradstats.transform",
    "GradSqNorms": "goodput_jax.model.gradstats.estimate",
    "GradStatsState": "goodput_jax.model.gradstats.estimate",
    "grouped_grads": "goodput_jax.model.gradstats.collect",
    "GROWTH_POWER": "goodput_jax.model.gradstats.estimate",
    "has_grad_stats": "goodput_jax.model.gradstats.estimate",
    "init_grad_stats": "goodput_jax.model.gradstats.estimate",
    "is_stats_summary": "goodput_jax.model.gradstats.estimate",
    "mark_one_part": "goodput_jax.model.gradstats.estimate",
    "microbatch_grads": "goodput_jax.model.gradstats.collect",
    "MIN_VAR": "goodput_jax.model.gradstats.estimate",
    "multi_steps": "goodput_jax.model.gradstats.transform",
    "MultiStepsGNSState": "goodput_jax.model.gradstats.transform",
    "NO_HELPER_NOTE": "goodput_jax.model.gradstats.estimate",
    "noise_scale": "goodput_jax.model.gradstats.estimate",
    "nu_switch_factor": "goodput_jax.model.gradstats.precondition",
    "Parts": "goodput_jax.model.gradstats.collect",
    "Preconditioner": "goodput_jax.model.gradstats.precondition",
    "rescale_nu": "goodput_jax.model.gradstats.precondition",
    "sample_every": "goodput_jax.model.gradstats.readers",
    "sample_now": "goodput_jax.model.gradstats.readers",
    "split_grads": "goodput_jax.model.gradstats.collect",
    "sqnorm": "goodput_jax.model.gradstats.precondition",
    "stats_note": "goodput_jax.model.gradstats.readers",
    "stats_summary": "goodput_jax.model.gradstats.estimate",
    "StatsSummary": "goodput_jax.model.gradstats.estimate",
    "update_grad_stats": "goodput_jax.model.gradstats.estimate",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports("goodput_jax.model.gradstats", _EXPORTS, globals())

if TYPE_CHECKING:  # pragma: no cover
    from goodput_jax.model.gradstats.collect import (  # noqa: F401
        Parts,
        data_parallel_grads,
        differenced_sqnorms,
        grouped_grads,
        microbatch_grads,
        split_grads,
    )
    from goodput_jax.model.gradstats.estimate import (  # noqa: F401
        DEFAULT_AVERAGING,
        DEFAULT_SMOOTHING,
        GROWTH_POWER,
        MIN_VAR,
        NO_HELPER_NOTE,
        GradSqNorms,
        GradStatsState,
        StatsSummary,
        as_stats_summary,
        estimate_grad_params,
        grad_params_from_stats,
        has_grad_stats,
        init_grad_stats,
        is_stats_summary,
        mark_one_part,
        noise_scale,
        stats_summary,
        update_grad_stats,
    )
    from goodput_jax.model.gradstats.precondition import (  # noqa: F401
        DEFAULT_MIN_COUNT,
        Preconditioner,
        adam_preconditioner,
        auto_preconditioner,
        find_adam_state,
        nu_switch_factor,
        rescale_nu,
        sqnorm,
    )
    from goodput_jax.model.gradstats.readers import (  # noqa: F401
        get_grad_params,
        get_grad_stats,
        sample_every,
        sample_now,
        stats_note,
    )
    from goodput_jax.model.gradstats.transform import (  # noqa: F401
        AutoPrecondition,
        GradientNoiseScaleState,
        MultiStepsGNSState,
        gradient_noise_scale,
        multi_steps,
    )
