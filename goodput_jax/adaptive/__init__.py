"""Adaptive training: the job acts on its goodput model.

* :class:`AdaptiveBatchSize`: owns ``(atomic_bsz, accum_steps)``, cuts batches of
  that size from the data, switches when the model predicts a gain (threshold,
  hysteresis, step-by-step exploration), bounded recompiles.
* :func:`adaptive_optimizer` / :func:`make_train_step`: the jitted data-parallel
  step with a traced microbatch count and in-step learning-rate scaling
  (AdaScale, Adam's sqrt rule, linear, sqrt, LEGW).
* :mod:`goodput_jax.adaptive.checkpoint`: Orbax save / restore onto another
  device count (elastic replicas).
* :class:`StopRequest` (:mod:`goodput_jax.adaptive.stop`): a cooperative
  "checkpoint and stop at the next step boundary" request a scheduler sends.

See ``docs/adaptive.md``.

Example:
    >>> from goodput_jax.adaptive import AdaptiveBatchSize, adaptive_optimizer, make_train_step
"""

from goodput_jax.adaptive.controller import AdaptiveBatchSize, default_atomic_sizes
from goodput_jax.adaptive.data import ArraySource, IterableSource, as_source
from goodput_jax.adaptive.step import (
    adaptive_optimizer,
    data_mesh,
    make_train_step,
    progress_of,
    slots_for,
)
from goodput_jax.adaptive.stop import StopRequest

__all__ = [
    "AdaptiveBatchSize",
    "ArraySource",
    "IterableSource",
    "StopRequest",
    "adaptive_optimizer",
    "as_source",
    "data_mesh",
    "default_atomic_sizes",
    "make_train_step",
    "progress_of",
    "slots_for",
]
