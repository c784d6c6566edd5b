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

from __future__ import annotations

from typing import TYPE_CHECKING

from goodput_jax._lazy import lazy_exports

#: public name -> the module that defines it (imported on first use)
_EXPORTS: dict[str, str] = {
    "BatchLimits": "goodput_jax.integrations.options",
    "feasible_configs": "goodput_jax.integrations.search",
    "GoodputHooks": "goodput_jax.integrations.hooks",
    "Placement": "goodput_jax.integrations.options",
    "ProfileEntry": "goodput_jax.integrations.hooks",
    "ProfileOptions": "goodput_jax.integrations.options",
    "RecordingOptions": "goodput_jax.integrations.options",
    "RefitOptions": "goodput_jax.integrations.options",
    "SearchLimits": "goodput_jax.integrations.search",
    "StepProfile": "goodput_jax.integrations.profile",
    "Suggestion": "goodput_jax.integrations.hooks",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports("goodput_jax.integrations", _EXPORTS, globals())

if TYPE_CHECKING:  # pragma: no cover
    from goodput_jax.integrations.hooks import (  # noqa: F401
        GoodputHooks,
        ProfileEntry,
        Suggestion,
    )
    from goodput_jax.integrations.options import (  # noqa: F401
        BatchLimits,
        Placement,
        ProfileOptions,
        RecordingOptions,
        RefitOptions,
    )
    from goodput_jax.integrations.profile import (  # noqa: F401
        StepProfile,
    )
    from goodput_jax.integrations.search import (  # noqa: F401
        SearchLimits,
        feasible_configs,
    )
