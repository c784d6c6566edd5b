"""goodput_jax: measure, model and schedule ML training goodput, JAX-native.

The public API (every name is imported lazily, so ``import goodput_jax`` stays
cheap and starts no JAX until a model-side name is used)::

    # measured goodput: productive step time / job time, badput by cause
    from goodput_jax import GoodputRecorder, GoodputCalculator, GoodputMonitor, BadputType
    from goodput_jax import goodput          # drop-in for ml_goodput_measurement.goodput
    # modelled goodput: throughput x statistical efficiency (Pollux)
    from goodput_jax import PerfParams, GradParams, Hints, GoodputFunction, fit_perf_params
    from goodput_jax import gradient_noise_scale, get_grad_params, GoodputHooks
    # scheduling
    from goodput_jax import SpeedupFunction, PolluxPolicy, JobInfo, NodeInfo

The rooms behind it: ``goodput_jax.measure`` (recorder -> store -> calculator ->
monitor), ``goodput_jax.model`` (its own curated API), ``goodput_jax.sched``,
``goodput_jax.integrations``; the ``goodput-jax`` command lives in
``goodput_jax.cli``, which nothing in the library imports. See
``docs/architecture.md``.

Example:
    >>> import goodput_jax
    >>> "GoodputRecorder" in goodput_jax.__all__
    True
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from goodput_jax._lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    "GoodputRecorder": "goodput_jax.measure.recorder",
    "GoodputCalculator": "goodput_jax.measure.calculator",
    "GoodputMonitor": "goodput_jax.measure.monitor",
    "BadputType": "goodput_jax.measure.badput",
    "PerfParams": "goodput_jax.model.types",
    "GradParams": "goodput_jax.model.types",
    "Hints": "goodput_jax.model.hints",
    "GoodputFunction": "goodput_jax.model.goodput",
    "fit_perf_params": "goodput_jax.model.perf",
    "gradient_noise_scale": "goodput_jax.model.gradstats",
    "get_grad_params": "goodput_jax.model.gradstats",
    "SpeedupFunction": "goodput_jax.sched.speedup",
    "PolluxPolicy": "goodput_jax.sched.pollux",
    "JobInfo": "goodput_jax.sched.types",
    "NodeInfo": "goodput_jax.sched.types",
    "GoodputHooks": "goodput_jax.integrations.hooks",
}

__all__ = sorted(_EXPORTS) + ["goodput", "__version__"]


__getattr__, _ = lazy_exports("goodput_jax", _EXPORTS, globals(),
                               modules={"goodput": "goodput_jax.goodput"})


def __dir__():
    return __all__


if TYPE_CHECKING:  # pragma: no cover
    from goodput_jax.integrations.hooks import GoodputHooks  # noqa: F401
    from goodput_jax.measure.badput import BadputType  # noqa: F401
    from goodput_jax.measure.calculator import GoodputCalculator  # noqa: F401
    from goodput_jax.measure.monitor import GoodputMonitor  # noqa: F401
    from goodput_jax.measure.recorder import GoodputRecorder  # noqa: F401
    from goodput_jax.model.goodput import GoodputFunction  # noqa: F401
    from goodput_jax.model.gradstats import get_grad_params, gradient_noise_scale  # noqa: F401
    from goodput_jax.model.hints import Hints  # noqa: F401
    from goodput_jax.model.perf import fit_perf_params  # noqa: F401
    from goodput_jax.model.types import GradParams, PerfParams  # noqa: F401
    from goodput_jax.sched.pollux import PolluxPolicy  # noqa: F401
    from goodput_jax.sched.speedup import SpeedupFunction  # noqa: F401
    from goodput_jax.sched.types import JobInfo, NodeInfo  # noqa: F401
