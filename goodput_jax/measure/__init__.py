"""The light core (stdlib + numpy + tensorboard, no JAX): record a job's events, turn them
into goodput and badput, upload them.

The room's public names, imported on first use (``import goodput_jax.measure`` loads
nothing heavy): the recorder and its options and job lifecycle, the calculator and its
results, the monitors, the event and badput vocabulary, ML Productivity Goodput's types,
the checkpoint advice, the stores. A module path not listed here is the room's own.

Example:
    >>> from goodput_jax import measure
    >>> measure.BadputType.DATA_LOADING.name
    'DATA_LOADING'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from goodput_jax._lazy import lazy_exports

#: public name -> the module that defines it (imported on first use)
_EXPORTS: dict[str, str] = {
    "AdviceInputs": "goodput_jax.measure.advice_inputs",
    "BadputType": "goodput_jax.measure.badput",
    "checkpoint_advice": "goodput_jax.measure.advice",
    "CheckpointAdvice": "goodput_jax.measure.advice",
    "CloudMonitoringExporter": "goodput_jax.measure.cloud_monitoring",
    "daly_interval": "goodput_jax.measure.advice",
    "DevicePeak": "goodput_jax.measure.roofline",
    "Event": "goodput_jax.measure.events",
    "EventKind": "goodput_jax.measure.events",
    "EventStore": "goodput_jax.measure.stores",
    "expected_goodput": "goodput_jax.measure.advice",
    "FinishForecast": "goodput_jax.measure.advice",
    "GoodputCalculator": "goodput_jax.measure.calculator",
    "GoodputMonitor": "goodput_jax.measure.monitor",
    "GoodputRecorder": "goodput_jax.measure.recorder",
    "HostLag": "goodput_jax.measure.stragglers",
    "JobEndedError": "goodput_jax.measure.lifecycle",
    "JobState": "goodput_jax.measure.lifecycle",
    "MonitoredCalculator": "goodput_jax.measure.monitor_calculator",
    "MonitorOptions": "goodput_jax.measure.monitor_options",
    "NoEventsError": "goodput_jax.measure.results",
    "open_store": "goodput_jax.measure.stores",
    "ProductivityGoodput": "goodput_jax.measure.productivity",
    "ProgramCost": "goodput_jax.measure.roofline",
    "ProgramGoodput": "goodput_jax.measure.roofline",
    "ProgramStats": "goodput_jax.measure.roofline",
    "RecorderOptions": "goodput_jax.measure.options",
    "Rerun": "goodput_jax.measure.lifecycle",
    "SchedulingSpan": "goodput_jax.measure.productivity",
    "SchedulingTimeline": "goodput_jax.measure.productivity",
    "SQLiteStore": "goodput_jax.measure.stores.sqlite",
    "StepDeviation": "goodput_jax.measure.results",
    "StepSink": "goodput_jax.measure.sink",
    "Stragglers": "goodput_jax.measure.stragglers",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports("goodput_jax.measure", _EXPORTS, globals())

if TYPE_CHECKING:  # pragma: no cover
    from goodput_jax.measure.advice import (  # noqa: F401
        CheckpointAdvice,
        FinishForecast,
        checkpoint_advice,
        daly_interval,
        expected_goodput,
    )
    from goodput_jax.measure.advice_inputs import (  # noqa: F401
        AdviceInputs,
    )
    from goodput_jax.measure.badput import (  # noqa: F401
        BadputType,
    )
    from goodput_jax.measure.calculator import (  # noqa: F401
        GoodputCalculator,
    )
    from goodput_jax.measure.cloud_monitoring import (  # noqa: F401
        CloudMonitoringExporter,
    )
    from goodput_jax.measure.events import (  # noqa: F401
        Event,
        EventKind,
    )
    from goodput_jax.measure.lifecycle import (  # noqa: F401
        JobEndedError,
        JobState,
        Rerun,
    )
    from goodput_jax.measure.monitor import (  # noqa: F401
        GoodputMonitor,
    )
    from goodput_jax.measure.monitor_calculator import (  # noqa: F401
        MonitoredCalculator,
    )
    from goodput_jax.measure.monitor_options import (  # noqa: F401
        MonitorOptions,
    )
    from goodput_jax.measure.options import (  # noqa: F401
        RecorderOptions,
    )
    from goodput_jax.measure.productivity import (  # noqa: F401
        ProductivityGoodput,
        SchedulingSpan,
        SchedulingTimeline,
    )
    from goodput_jax.measure.recorder import (  # noqa: F401
        GoodputRecorder,
    )
    from goodput_jax.measure.results import (  # noqa: F401
        NoEventsError,
        StepDeviation,
    )
    from goodput_jax.measure.roofline import (  # noqa: F401
        DevicePeak,
        ProgramCost,
        ProgramGoodput,
        ProgramStats,
    )
    from goodput_jax.measure.sink import (  # noqa: F401
        StepSink,
    )
    from goodput_jax.measure.stores import (  # noqa: F401
        EventStore,
        open_store,
    )
    from goodput_jax.measure.stores.sqlite import (  # noqa: F401
        SQLiteStore,
    )
    from goodput_jax.measure.stragglers import (  # noqa: F401
        HostLag,
        Stragglers,
    )
