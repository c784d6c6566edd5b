"""Adaptive training: the job acts on its goodput model.

* :class:`AdaptiveBatchSize`: owns ``(atomic_bsz, accum_steps)``, cuts batches of
  that size from the data, switches when the model predicts a gain (threshold,
  hysteresis, step-by-step exploration: :mod:`.decisions`), bounded recompiles;
  configured by :class:`AdaptiveOptions` (:class:`SearchSpace`, :class:`SwitchPolicy`,
  :class:`CheckSchedule`: :mod:`.options`).
* :func:`adaptive_optimizer` / :func:`make_train_step`: the jitted data-parallel
  step with a traced microbatch count and in-step learning-rate scaling
  (AdaScale, Adam's sqrt rule, linear, sqrt, LEGW).
* :mod:`goodput_jax.adaptive.checkpoint`: Orbax save / restore onto another
  device count (elastic replicas).
* :class:`StopRequest` (:mod:`goodput_jax.adaptive.stop`): a cooperative
  "checkpoint and stop at the next step boundary" request a scheduler sends.

See ``docs/adaptive.md``.

Each name is loaded on first use (``import goodput_jax.adaptive`` starts no JAX).

Example:
    >>> from goodput_jax.adaptive import AdaptiveBatchSize, adaptive_optimizer, make_train_step
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from goodput_jax._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "AdaptiveBatchSize": "goodput_jax.adaptive.controller",
    "default_atomic_sizes": "goodput_jax.adaptive.controller",
    "AdaptiveOptions": "goodput_jax.adaptive.options",
    "CheckSchedule": "goodput_jax.adaptive.options",
    "SearchSpace": "goodput_jax.adaptive.options",
    "SwitchPolicy": "goodput_jax.adaptive.options",
    "ArraySource": "goodput_jax.adaptive.data",
    "IterableSource": "goodput_jax.adaptive.data",
    "as_source": "goodput_jax.adaptive.data",
    "adaptive_optimizer": "goodput_jax.adaptive.step",
    "data_mesh": "goodput_jax.adaptive.step",
    "make_train_step": "goodput_jax.adaptive.step",
    "progress_of": "goodput_jax.adaptive.step",
    "slots_for": "goodput_jax.adaptive.step",
    "StopRequest": "goodput_jax.adaptive.stop",
}

__all__ = [
    "AdaptiveBatchSize",
    "AdaptiveOptions",
    "ArraySource",
    "CheckSchedule",
    "IterableSource",
    "SearchSpace",
    "StopRequest",
    "SwitchPolicy",
    "adaptive_optimizer",
    "as_source",
    "data_mesh",
    "default_atomic_sizes",
    "make_train_step",
    "progress_of",
    "slots_for",
]

__getattr__, __dir__ = lazy_exports("goodput_jax.adaptive", _EXPORTS, globals())

if TYPE_CHECKING:  # pragma: no cover
    from goodput_jax.adaptive.controller import (
        AdaptiveBatchSize,
        default_atomic_sizes,
    )
    from goodput_jax.adaptive.data import ArraySource, IterableSource, as_source
    from goodput_jax.adaptive.options import (
        AdaptiveOptions,
        CheckSchedule,
        SearchSpace,
        SwitchPolicy,
    )
    from goodput_jax.adaptive.step import (
        adaptive_optimizer,
        data_mesh,
        make_train_step,
        progress_of,
        slots_for,
    )
    from goodput_jax.adaptive.stop import StopRequest
