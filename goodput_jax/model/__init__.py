"""goodput_jax.model: the Pollux goodput model, pure JAX (jit / vmap), no I/O.

The curated API, importable from here (each name is loaded on first use, so
``import goodput_jax.model`` or ``goodput_jax.model.types`` starts no JAX)::

    from goodput_jax.model import PerfParams, GradParams, Hints
    from goodput_jax.model import fit_perf_params, GoodputFunction
    from goodput_jax.model import gradient_noise_scale, data_parallel_grads, get_grad_params

Rooms, one job each:

* :mod:`.types`: ``PerfParams`` and ``GradParams`` (NamedTuples of arrays);
* :mod:`.formulas`: each Pollux formula written once (for numpy and jax.numpy) and
  the float64 numpy twins of the kernels (``throughput_np``, ``efficiency_np``, ...);
* :mod:`.perf`: the step-time model and its fit;
* :mod:`.gradstats`: gradient-noise statistics inside the jitted step
  (a package: estimate, precondition, collect, transform, readers);
* :mod:`.goodput`: ``GoodputFunction``: throughput x statistical efficiency;
* :mod:`.scaling`: learning-rate scaling rules (AdaScale, Adam, linear, ...);
* :mod:`.hints`: the typed hints a job publishes (strict JSON);
* :mod:`.buckets`: the one padded-size rule.

Nothing here imports ``goodput_jax.measure``, ``sched``, ``integrations`` or ``cli``.

Example:
    >>> from goodput_jax.model import GradParams
    >>> GradParams(sqr=1.0, var=2.0).var
    2.0
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from goodput_jax._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    # parameters and records
    "PerfParams": "goodput_jax.model.types",
    "GradParams": "goodput_jax.model.types",
    "Hints": "goodput_jax.model.hints",
    # step-time model
    "fit_perf_params": "goodput_jax.model.perf",
    "fit_perf_params_batched": "goodput_jax.model.perf",
    # goodput
    "GoodputFunction": "goodput_jax.model.goodput",
    "efficiency_fn": "goodput_jax.model.goodput",
    "goodput_fn": "goodput_jax.model.goodput",
    "optimize_fn": "goodput_jax.model.goodput",
    "throughput_fn": "goodput_jax.model.goodput",
    # numpy twins (host-side, float64)
    "efficiency_np": "goodput_jax.model.formulas",
    "gain_np": "goodput_jax.model.formulas",
    "goodput_np": "goodput_jax.model.formulas",
    "predict_optim_time_np": "goodput_jax.model.formulas",
    "throughput_np": "goodput_jax.model.formulas",
    # gradient statistics
    "GradSqNorms": "goodput_jax.model.gradstats",
    "GradStatsState": "goodput_jax.model.gradstats",
    "GradientNoiseScaleState": "goodput_jax.model.gradstats",
    "StatsSummary": "goodput_jax.model.gradstats",
    "auto_preconditioner": "goodput_jax.model.gradstats",
    "data_parallel_grads": "goodput_jax.model.gradstats",
    "get_grad_params": "goodput_jax.model.gradstats",
    "get_grad_stats": "goodput_jax.model.gradstats",
    "gradient_noise_scale": "goodput_jax.model.gradstats",
    "grouped_grads": "goodput_jax.model.gradstats",
    "microbatch_grads": "goodput_jax.model.gradstats",
    "multi_steps": "goodput_jax.model.gradstats",
    "noise_scale": "goodput_jax.model.gradstats",
    "sample_now": "goodput_jax.model.gradstats",
    # learning-rate scaling
    "adascale_gain": "goodput_jax.model.scaling",
    "scale_by_rule": "goodput_jax.model.scaling",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports("goodput_jax.model", _EXPORTS, globals())


if TYPE_CHECKING:  # pragma: no cover
    from goodput_jax.model.formulas import (  # noqa: F401
        efficiency_np,
        gain_np,
        goodput_np,
        predict_optim_time_np,
        throughput_np,
    )
    from goodput_jax.model.goodput import (  # noqa: F401
        GoodputFunction,
        efficiency_fn,
        goodput_fn,
        optimize_fn,
        throughput_fn,
    )
    from goodput_jax.model.gradstats import (  # noqa: F401
        GradientNoiseScaleState,
        GradSqNorms,
        GradStatsState,
        auto_preconditioner,
        data_parallel_grads,
        get_grad_params,
        get_grad_stats,
        gradient_noise_scale,
        grouped_grads,
        microbatch_grads,
        multi_steps,
        noise_scale,
        sample_now,
    )
    from goodput_jax.model.hints import Hints  # noqa: F401
    from goodput_jax.model.perf import fit_perf_params, fit_perf_params_batched  # noqa: F401
    from goodput_jax.model.scaling import adascale_gain, scale_by_rule  # noqa: F401
    from goodput_jax.model.types import GradParams, PerfParams  # noqa: F401
