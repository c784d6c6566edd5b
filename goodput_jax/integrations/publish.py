"""The scheduler hints of a training job: what :meth:`GoodputHooks.hints` publishes.

:func:`make_hints` assembles :class:`goodput_jax.model.hints.Hints` (AdaptDL's JSON keys)
from the job's limits, its running configuration, the fit, the gradient statistics and
the current suggestion; unknown or non-finite values become None.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from goodput_jax.integrations.search import Suggestion
from goodput_jax.model.formulas import efficiency_np
from goodput_jax.model.hints import Hints
from goodput_jax.model.types import GradParams  # noqa: F401 - the example's

__all__ = ["finite_or_none", "make_hints"]


def finite_or_none(x: Any) -> float | None:
    """``float(x)`` when it is a finite number, else None (JSON-safe).

    Example:
        >>> finite_or_none(2), finite_or_none(float("nan")), finite_or_none("x")
        (2.0, None, None)
    """
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def make_hints(config: Hints, suggestion: Suggestion | None = None) -> dict:
    """The hints as JSON (see :meth:`GoodputHooks.hints` for the keys).

    Args:
        config: what the job knows: its fit and gradient statistics (``perf_params``,
            ``grad_params``), its limits and running configuration, and why it has no
            statistics (``grad_stats_note``), as a :class:`~goodput_jax.model.hints.Hints`.
        suggestion: the suggested configuration (the ``suggested*`` keys and
            ``predictedSpeedup``), or None.

    ``gradientNoiseScale`` is derived from the statistics; ``efficiency`` (of the running
    total batch) once both a fit and statistics exist.

    Example:
        >>> from goodput_jax.model.hints import Hints
        >>> h = make_hints(Hints(grad_params=GradParams(1.0, 3.0), init_batch_size=8,
        ...                      max_batch_size=64, num_nodes=1, num_replicas=1, atomic_bsz=8,
        ...                      accum_steps=0, max_profiled_replicas=1))
        >>> h["gradientNoiseScale"], h["efficiency"]
        (24.0, None)
    """
    gp, perf = config.grad_params, config.perf_params
    kw: dict[str, Any] = {}
    if gp is not None and gp.sqr > 0 and config.init_batch_size is not None:
        kw["gradient_noise_scale"] = finite_or_none(config.init_batch_size * gp.var / gp.sqr)
    if perf is not None and gp is not None and config.init_batch_size is not None:
        total = ((config.num_replicas or 1) * (config.atomic_bsz or 0)
                 * ((config.accum_steps or 0) + 1))
        kw["efficiency"] = finite_or_none(efficiency_np(gp, config.init_batch_size, total))
        if suggestion is not None:
            kw["suggested_batch_size"] = suggestion.batch_size
            kw["suggested_atomic_bsz"] = suggestion.atomic_bsz
            kw["suggested_accum_steps"] = suggestion.accum_steps
            kw["predicted_speedup"] = finite_or_none(suggestion.predicted_speedup)
    return dataclasses.replace(config, **kw).to_json()
