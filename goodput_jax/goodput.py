"""Drop-in replacement for ``ml_goodput_measurement.goodput``, with MaxText's config flags.

Change one import and keep the rest of a MaxText-style training script::

    # from ml_goodput_measurement import goodput
    from goodput_jax import goodput

    recorder = goodput.GoodputRecorder(job_name=run_name, logger_name=f"goodput_{run_name}",
                                       logging_enabled=(jax.process_index() == 0))
    calculator = goodput.GoodputCalculator(job_name=run_name, logger_name=f"goodput_{run_name}")
    monitor = goodput.GoodputMonitor(job_name=run_name, logger_name=f"goodput_{run_name}",
                                     tensorboard_dir=tb_dir, upload_interval=30,
                                     monitoring_enabled=True)

Constructor arguments are the seed's (Google's library), plus MaxText's
config flags as keyword arguments:

==================================  ===========================================================
MaxText flag                        where it goes
==================================  ===========================================================
``enable_goodput_recording``        ``GoodputRecorder(enable_goodput_recording=...)``: False
                                    turns recording off (it is ANDed with ``logging_enabled``)
``monitor_goodput``                 ``GoodputMonitor(monitor_goodput=...)``: overrides
                                    ``monitoring_enabled``
``goodput_upload_interval_seconds`` ``GoodputMonitor(goodput_upload_interval_seconds=...)``:
                                    the ``upload_interval`` (give one of the two, or equal values)
``monitor_step_time_deviation``     ``GoodputMonitor(monitor_step_time_deviation=...)``:
                                    ``include_step_deviation``; :meth:`GoodputMonitor.start`
                                    then also starts the step-deviation uploader
``step_deviation_interval_seconds`` ``GoodputMonitor(step_deviation_interval_seconds=...)``
                                    (already a seed argument)
==================================  ===========================================================

Or hand the whole MaxText config (an object with attributes, or a mapping)
to :func:`from_maxtext_config`, which applies the same mapping, names the job
``config.goodput_job_name or config.run_name`` (as MaxText) and the logger
``goodput_<job>``, records on process 0
and monitors on process 0 only. MaxText's own wrapper helpers are here too
(:func:`create_goodput_recorder`, :func:`maybe_record_goodput`,
:func:`maybe_monitor_goodput`, :class:`GoodputEvent`), so a MaxText
``goodput_utils``-style module can switch by changing its import.

This module re-exports: the classes and helpers live in ``goodput_jax.compat``
(``recorder``, ``calculator``, ``monitor``, ``maxtext``, ``enums``, ``options``).

Events go to the local SQLite store (``./goodput.db`` or ``$GOODPUT_JAX_STORE``)
unless a ``store=`` is given (the Cloud Logging store is
``store="gcl://PROJECT/LOGGER"``). ``gcp_options`` (MaxText's Cloud Monitoring
options) works as in Google's library: with monitoring enabled, empty fields are
filled from the GCE metadata server and goodput, badput, step-time, rolling-window,
slice-efficiency and hang metrics go to Cloud Monitoring (``docs/maxtext.md``).

Example:
    >>> from goodput_jax import goodput
    >>> goodput.BadputType.TPU_INITIALIZATION.name  # Google's names, as in its library
    'TPU_INITIALIZATION'
    >>> rec = goodput.GoodputRecorder("j", "goodput_j", True, enable_goodput_recording=False)
    >>> rec.logging_enabled
    False
"""

from __future__ import annotations

from goodput_jax.compat.calculator import GoodputCalculator
from goodput_jax.compat.enums import (  # noqa: F401  (Google's entry keys, as in its module)
    _CUSTOM_BADPUT_EVENT_END_TIME,
    _CUSTOM_BADPUT_EVENT_START_TIME,
    _CUSTOM_BADPUT_EVENT_TYPE,
    _DATA_LOADING_END_TIME,
    _DATA_LOADING_START_TIME,
    _JOB_END_TIME,
    _JOB_NAME,
    _JOB_START_TIME,
    _STEP_COUNT,
    _STEP_START_TIME,
    _TPU_INIT_END_TIME,
    _TPU_INIT_START_TIME,
    _TRAINING_PREPARATION_END_TIME,
    _TRAINING_PREPARATION_START_TIME,
    BadputType,
    GoodputType,
    IntervalMetricType,
    MetricType,
)
from goodput_jax.compat.info import (
    GoodputInfo,
    IntervalWorkloadMetricDetails,
    StepInfo,
    WorkloadMetricDetails,
)
from goodput_jax.compat.maxtext import (
    GoodputEvent,
    MaxTextGoodput,
    create_goodput_monitor,
    create_goodput_recorder,
    from_maxtext_config,
    get_goodput_job_name,
    maybe_instrument_checkpoint_manager,
    maybe_monitor_goodput,
    maybe_record_goodput,
    record_goodput,
)
from goodput_jax.compat.monitor import GoodputMonitor
from goodput_jax.compat.options import GCPOptions
from goodput_jax.compat.recorder import GoodputRecorder
from goodput_jax.compat.utils import (
    compute_ideal_step_time,
    get_extra_time_from_anomalous_steps,
    get_timestamp_from_log_entry,
)
from goodput_jax.measure.calculator import StepDeviation

__all__ = [
    "BadputType",
    "GCPOptions",
    "GoodputCalculator",
    "GoodputEvent",
    "GoodputInfo",
    "GoodputMonitor",
    "GoodputRecorder",
    "GoodputType",
    "IntervalMetricType",
    "IntervalWorkloadMetricDetails",
    "MaxTextGoodput",
    "MetricType",
    "StepDeviation",
    "StepInfo",
    "WorkloadMetricDetails",
    "compute_ideal_step_time",
    "create_goodput_monitor",
    "create_goodput_recorder",
    "from_maxtext_config",
    "get_extra_time_from_anomalous_steps",
    "get_goodput_job_name",
    "get_timestamp_from_log_entry",
    "maybe_instrument_checkpoint_manager",
    "maybe_monitor_goodput",
    "maybe_record_goodput",
    "record_goodput",
]
