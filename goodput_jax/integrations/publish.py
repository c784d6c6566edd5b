"""The scheduler hints of a training job: what :meth:`GoodputHooks.hints` publishes.

:func:`make_hints` assembles :class:`goodput_jax.model.hints.Hints` (AdaptDL's JSON keys)
from the job's limits, its running configuration, the fit, the gradient statistics and
the current suggestion; unknown or non-finite values become None.
"""

from __future__ import annotations

import math
from typing import Any

from goodput_jax.integrations.search import Suggestion
from goodput_jax.model.formulas import efficiency_np
from goodput_jax.model.types import GradParams, PerfParams

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


def make_hints(*, perf_params: PerfParams | None, grad_params: GradParams | None,
               init_batch_size: int, max_batch_size: int,
               local_bsz_bounds: tuple[int | None, int | None], gradient_accumulation: bool,
               max_profiled_replicas: int, num_nodes: int, num_replicas: int, atomic_bsz: int,
               accum_steps: int, suggestion: Suggestion | None = None) -> dict:
    """The hints as JSON (see :meth:`GoodputHooks.hints` for the keys).

    ``efficiency`` (of the running total batch) is set once both a fit and gradient
    statistics exist; the ``suggested*`` keys and ``predictedSpeedup`` come from
    ``suggestion``.

    Example:
        >>> h = make_hints(perf_params=None, grad_params=GradParams(1.0, 3.0), init_batch_size=8,
        ...                max_batch_size=64, local_bsz_bounds=(None, None),
        ...                gradient_accumulation=False, max_profiled_replicas=1, num_nodes=1,
        ...                num_replicas=1, atomic_bsz=8, accum_steps=0)
        >>> h["gradientNoiseScale"], h["efficiency"]
        (24.0, None)
    """
    from goodput_jax.model.hints import Hints

    gp = grad_params
    kw: dict[str, Any] = {
        "perf_params": perf_params, "grad_params": gp,
        "init_batch_size": init_batch_size, "max_batch_size": max_batch_size,
        "local_bsz_bounds": local_bsz_bounds, "gradient_accumulation": gradient_accumulation,
        "max_profiled_replicas": max_profiled_replicas, "num_nodes": num_nodes,
        "num_replicas": num_replicas, "atomic_bsz": atomic_bsz, "accum_steps": accum_steps,
    }
    if gp is not None and gp.sqr > 0:
        kw["gradient_noise_scale"] = finite_or_none(init_batch_size * gp.var / gp.sqr)
    if perf_params is not None and gp is not None:
        total = num_replicas * atomic_bsz * (accum_steps + 1)
        kw["efficiency"] = finite_or_none(efficiency_np(gp, init_batch_size, total))
        if suggestion is not None:
            kw["suggested_batch_size"] = suggestion.batch_size
            kw["suggested_atomic_bsz"] = suggestion.atomic_bsz
            kw["suggested_accum_steps"] = suggestion.accum_steps
            kw["predicted_speedup"] = finite_or_none(suggestion.predicted_speedup)
    return Hints(**kw).to_json()
