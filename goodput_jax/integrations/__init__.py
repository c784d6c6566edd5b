"""goodput_jax.integrations: drop-in hooks for Flax / MaxText-style training loops.

:class:`GoodputHooks` (``hooks``, its options in ``options``, its model side in
``hooks_model``) composes rooms of one job each: ``profile`` (the
step-time profile), ``stats`` (gradient statistics), ``fit`` (the step-time fit and its
worker), ``search`` (feasible configurations and the suggestion), ``publish`` (hints),
``state`` (checkpoint state), ``checks`` (argument checks); ``orbax`` instruments
checkpoint managers; ``nnx`` adapts Flax NNX modules and ``nnx.Optimizer`` state (it
imports flax, so it is not imported here).

Example:
    >>> from goodput_jax.integrations import GoodputHooks  # doctest: +SKIP
"""

from goodput_jax.integrations.hooks import GoodputHooks, ProfileEntry, Suggestion
from goodput_jax.integrations.options import (
    BatchLimits,
    Placement,
    ProfileOptions,
    RecordingOptions,
    RefitOptions,
)
from goodput_jax.integrations.profile import StepProfile
from goodput_jax.integrations.search import feasible_configs

__all__ = ["BatchLimits", "GoodputHooks", "Placement", "ProfileEntry", "ProfileOptions",
           "RecordingOptions", "RefitOptions", "StepProfile", "Suggestion", "feasible_configs"]
