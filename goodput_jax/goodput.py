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

Events go to the local SQLite store (``./goodput.db`` or ``$GOODPUT_JAX_STORE``)
unless a ``store=`` is given (the Cloud Logging store is
``store="gcl://PROJECT/LOGGER"``). ``gcp_options`` (MaxText's Cloud Monitoring
options) works as in Google's library: with monitoring enabled, empty fields are
filled from the GCE metadata server and goodput, badput, step-time, rolling-window,
slice-efficiency and hang metrics go to Cloud Monitoring (``docs/maxtext.md``).

Example:
    >>> from goodput_jax import goodput
    >>> goodput.BadputType.TPU_INITIALIZATION is goodput.BadputType.ACCELERATOR_INITIALIZATION
    True
    >>> rec = goodput.GoodputRecorder("j", "goodput_j", True, enable_goodput_recording=False)
    >>> rec.logging_enabled
    False
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import enum
import logging
import numbers
import os
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

from goodput_jax.measure.calculator import BadputType, StepDeviation, breakdown, check_ideal
from goodput_jax.measure.calculator import GoodputCalculator as _BaseCalculator
from goodput_jax.measure.monitor import GoodputMonitor as _BaseMonitor
from goodput_jax.measure.recorder import GoodputRecorder as _BaseRecorder

__all__ = [
    "BadputType",
    "GCPOptions",
    "GoodputCalculator",
    "GoodputEvent",
    "GoodputMonitor",
    "GoodputRecorder",
    "GoodputType",
    "IntervalMetricType",
    "MaxTextGoodput",
    "MetricType",
    "StepDeviation",
    "create_goodput_monitor",
    "create_goodput_recorder",
    "from_maxtext_config",
    "get_goodput_job_name",
    "maybe_instrument_checkpoint_manager",
    "maybe_monitor_goodput",
    "maybe_record_goodput",
    "record_goodput",
]

_log = logging.getLogger(__name__)
_MISSING = object()
#: drop-in recorders alive in this process: a monitor flushes its job's ones before
#: its final upload (MaxText records the job end right before stopping the monitor,
#: and this recorder writes in the background).
_LIVE_RECORDERS: weakref.WeakSet = weakref.WeakSet()


def _opt_bool(name: str, value: Any) -> bool | None:
    if value is None:
        return None
    if not isinstance(value, (bool, numbers.Integral)):
        raise TypeError(f"{name} ({value!r}) must be a bool")
    return bool(value)


# Google's entry keys (its tests import them from the module).
_JOB_NAME = "job_name"
_STEP_COUNT = "step_count"
_STEP_START_TIME = "step_start_time"
_JOB_START_TIME = "job_start_time"
_JOB_END_TIME = "job_end_time"
_TPU_INIT_START_TIME = "tpu_init_start_time"
_TPU_INIT_END_TIME = "tpu_init_end_time"
_TRAINING_PREPARATION_START_TIME = "training_prep_start_time"
_TRAINING_PREPARATION_END_TIME = "training_prep_end_time"
_DATA_LOADING_START_TIME = "data_loading_start_time"
_DATA_LOADING_END_TIME = "data_loading_end_time"
_CUSTOM_BADPUT_EVENT_TYPE = "custom_badput_event_type"
_CUSTOM_BADPUT_EVENT_START_TIME = "custom_badput_event_start_time"
_CUSTOM_BADPUT_EVENT_END_TIME = "custom_badput_event_end_time"


class GoodputType(enum.Enum):
    """The type of goodput (Google's enum)."""

    TOTAL = 1


class MetricType(enum.Enum):
    """Keys of :meth:`GoodputCalculator.get_job_goodput_details` (Google's enum)."""

    GOODPUT_TIME = "goodput_time"
    BADPUT_TIME = "badput_time"
    MAX_PRODUCTIVE_STEP = "max_productive_step"
    TOTAL_ELAPSED_TIME = "total_elapsed_time"
    DISRUPTION_COUNT = "disruption_count"
    STEP_TIME_DEVIATION = "step_time_deviation"
    IDEAL_STEP_TIME = "ideal_step_time"
    TOTAL_EXCLUDED_TIME = "total_excluded_time"


class IntervalMetricType(enum.Enum):
    """Keys of :meth:`GoodputCalculator.get_interval_metric_details` (Google's enum)."""

    INTERVAL_GOODPUT = "interval_goodput"
    INTERVAL_BADPUT = "interval_badput"
    INTERVAL_SIZE = "interval_size"


def _positive_number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
        raise ValueError(f"{name} ({value!r}) must be a positive number")
    return float(value)


def _cloud_logger_store(cloud_logger: Any, store: Any) -> Any:
    if cloud_logger is None:
        return store
    if store is not None:
        raise ValueError(
            f"give cloud_logger ({cloud_logger!r}) or store ({store!r}), not both"
        )
    from goodput_jax.measure.stores.cloud_logger import CloudLoggerStore

    return CloudLoggerStore(cloud_logger)


class GoodputRecorder(_BaseRecorder):
    """:class:`goodput_jax.measure.recorder.GoodputRecorder` with Google's constructor.

    Args:
        job_name, logger_name, logging_enabled: as in Google's library.
        cloud_logger: Google's test seam: an object with
            ``write_cloud_logging_entry`` / ``read_cloud_logging_entries``; events
            are written to it as Google's entry dicts, synchronously (a read right
            after a ``record_*`` sees it), like Google's own recorder.
        background_grace_period_s: seconds the recorder may spend flushing at
            close / interpreter exit.
        background_batch_size: events per store write.
        background_max_latency_s: seconds an event may wait before it is written.
        enable_goodput_recording: MaxText's flag; when False nothing is
            recorded whatever ``logging_enabled`` says. None = not given.
        **kwargs: the base recorder's extras (``store``, ``clock``, ...).

    Example:
        >>> GoodputRecorder("j", "goodput_j", logging_enabled=False).logging_enabled
        False
    """

    def __init__(self, job_name: str, logger_name: str | None = None,
                 logging_enabled: bool = False, cloud_logger: Any = None, *,
                 background_grace_period_s: float = 5.0, background_batch_size: int = 100,
                 background_max_latency_s: float = 2.0,
                 enable_goodput_recording: bool | None = None, **kwargs: Any):
        flag = _opt_bool("enable_goodput_recording", enable_goodput_recording)
        self.enable_goodput_recording = True if flag is None else flag
        self.background_grace_period_s = _positive_number(
            "background_grace_period_s", background_grace_period_s)
        if isinstance(background_batch_size, bool) or not isinstance(background_batch_size, int) \
                or background_batch_size <= 0:
            raise ValueError(
                f"background_batch_size ({background_batch_size!r}) must be a positive int")
        kwargs.setdefault("flush_interval", _positive_number(
            "background_max_latency_s", background_max_latency_s))
        enabled = bool(logging_enabled) and (flag is not False)
        if cloud_logger is not None and enabled:
            kwargs["store"] = _cloud_logger_store(cloud_logger, kwargs.get("store"))
            kwargs.setdefault("synchronous", True)
        super().__init__(job_name, logger_name, enabled, **kwargs)
        self.cloud_logger = cloud_logger
        if self.logging_enabled:
            _LIVE_RECORDERS.add(self)

    def close(self, timeout: float | None = None) -> None:
        """Flush (at most ``background_grace_period_s`` by default) and stop writing."""
        super().close(self.background_grace_period_s if timeout is None else timeout)


@dataclasses.dataclass
class GCPOptions:
    """Google Cloud Monitoring options (Google's ``GCPOptions``, every field).

    With ``enable_gcp_goodput_metrics`` / ``enable_gcp_step_deviation_metrics``
    and a ``project_id``, :class:`GoodputMonitor` sends goodput, badput and step
    deviation as Cloud Monitoring time series (``goodput_jax.measure.cloud_monitoring``,
    needs the ``gcp`` extra).
    """

    project_id: str | None = None
    location: str | None = None
    replica_id: str = "0"
    acc_type: str | None = None
    cluster_name: str | None = None
    enable_gcp_goodput_metrics: bool = True
    enable_gcp_step_deviation_metrics: bool = True


#: Google's breakdown keys (their order), ours mapped onto them
_GOOGLE_KEYS = (
    BadputType.TPU_INITIALIZATION,
    BadputType.TRAINING_PREP,
    BadputType.DATA_LOADING_SYNC,
    BadputType.DATA_LOADING_ASYNC,
    BadputType.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME,
    BadputType.UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME,
    BadputType.PROGRAM_STARTUP,
    BadputType.WASTED_PROGRESS_FROM_DISRUPTION,
    BadputType.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION,
    BadputType.CUSTOM_BADPUT_EVENTS,
    BadputType.OTHER,
)


def _google_breakdown(flat: dict, custom: dict[str, float], scale: float) -> dict:
    """Google's breakdown shape: custom badput as ``{TYPE: value}``; recompilation only if any."""
    out: dict[BadputType, Any] = {}
    for k in _GOOGLE_KEYS:
        if k is BadputType.CUSTOM_BADPUT_EVENTS:
            by_type: dict[str, float] = {}
            for label, secs in custom.items():
                key = str(label).upper()
                by_type[key] = by_type.get(key, 0.0) + scale * secs
            out[k] = by_type
        else:
            out[k] = float(flat.get(k, 0.0))
    rec = float(flat.get(BadputType.RECOMPILATION, 0.0))
    if rec:
        out[BadputType.RECOMPILATION] = rec
    return out


def _to_ts(value: Any, name: str) -> float:
    from goodput_jax.measure.events import to_timestamp

    return to_timestamp(value, name=name)


class GoodputCalculator(_BaseCalculator):
    """:class:`goodput_jax.measure.calculator.GoodputCalculator` with Google's API.

    Args:
        job_name, logger_name: as in Google's library.
        cloud_logger: Google's seam (see :class:`GoodputRecorder`): entries are
            read from it.
        using_pathways: accepted (Google stores it; it changes nothing in 0.2.3's
            calculation).
        max_logs_retention_period: ``datetime.timedelta``; how far back a
            ``gcl://`` store reads (None = Google's 7 days); not used by SQLite.
        gcs_path, cache_dir: accepted and unused: the calculator is incremental
            in memory, so Google's on-disk cache (and its GCS sync) is moot.
        store, clock, configured_ideal_step_time: goodput_jax's extras.

    Example:
        >>> calc = GoodputCalculator("job", "goodput_job", store=":memory:")
        >>> calc.using_pathways
        False
    """

    def __init__(self, job_name: str, logger_name: str | None = None, cloud_logger: Any = None,
                 using_pathways: bool = False,
                 max_logs_retention_period: datetime.timedelta | None = None,
                 gcs_path: str | None = None, cache_dir: str | os.PathLike = "/tmp", *,
                 store: Any = None, clock: Any = None,
                 configured_ideal_step_time: float | None = None):
        if max_logs_retention_period is not None and not isinstance(
                max_logs_retention_period, datetime.timedelta):
            raise TypeError(f"max_logs_retention_period ({max_logs_retention_period!r}) "
                            "must be a datetime.timedelta or None")
        if gcs_path is not None and not isinstance(gcs_path, str):
            raise TypeError(f"gcs_path ({gcs_path!r}) must be a string or None")
        if not isinstance(cache_dir, (str, os.PathLike)):
            raise TypeError(f"cache_dir ({cache_dir!r}) must be a path")
        self.using_pathways = bool(_opt_bool("using_pathways", using_pathways))
        self.max_logs_retention_period = max_logs_retention_period
        self.gcs_path = gcs_path
        self.cache_dir = os.fspath(cache_dir)
        self.cloud_logger = cloud_logger
        super().__init__(job_name, logger_name, store=_cloud_logger_store(cloud_logger, store),
                         clock=clock, configured_ideal_step_time=configured_ideal_step_time)

    def sync_to_gcs(self) -> None:
        """Google syncs its on-disk cache to GCS; there is no such cache here (no-op)."""

    def get_job_goodput(self, include_badput_breakdown: bool = False,
                        configured_ideal_step_time: float | None = None):
        """Goodput of the job so far, in Google's shape.

        Returns:
            ``(goodput %, {BadputType: %} (custom badput as {TYPE: %}), last productive step)``.

        Example:
            >>> goodput, badput, step = calc.get_job_goodput(True)  # doctest: +SKIP
        """
        with self._lock:
            if configured_ideal_step_time is not None:
                self.configured_ideal_step_time = check_ideal(configured_ideal_step_time)
            g, flat, last = super().get_job_goodput(include_badput_breakdown)
            if not include_badput_breakdown:
                return g, {}, last
            d = super().get_job_goodput_details()
        total = d["total_time"]
        return g, _google_breakdown(flat, d["custom_badput_time"], 100.0 / total), last

    def get_job_goodput_interval(self, interval_start: Any, interval_end: Any):
        """Goodput within ``(interval_start, interval_end]`` (Google's 5 values and rule).

        As in ml-goodput-measurement, only the events recorded inside the window
        count, and the window's job time runs from its first to its last event: a
        step whose next step starts after the window is not productive in it
        (the base calculator's ``get_job_goodput_interval`` instead clips the whole
        job's attribution to the window; ``docs/semantics.md`` row 11).

        Returns:
            ``(goodput %, {BadputType: %}, last productive step, job seconds inside
            the interval, disruptions inside the interval)``.

        Raises:
            ValueError: the window holds no events, or no job time.
        """
        ws, we = _to_ts(interval_start, "interval_start"), _to_ts(interval_end, "interval_end")
        if not we > ws:
            raise ValueError(f"interval_end ({interval_end!r}) must be after interval_start "
                             f"({interval_start!r})")
        eng = self._replay(only=(ws, we))
        if eng.runs == 0:
            raise ValueError(f"no log entries of job {self.job_name!r} within the interval "
                             f"window ({interval_start}, {interval_end}]")
        now = eng.last_t
        g, flat, last = self._result(eng, now, True, f"the interval ({ws}, {we}]")
        self._last_interval_engine = eng
        productive, acc, custom = eng.totals(now)
        total = productive + sum(acc)
        return (g, _google_breakdown(flat, custom, 100.0 / total), last, total,
                eng.disruptions)

    def get_interval_metric_details(self, interval_start: Any, interval_end: Any) -> dict:
        """Google's interval details: goodput, badput and the interval's size (s)."""
        size = int(_to_ts(interval_end, "interval_end") - _to_ts(interval_start, "interval_start"))
        try:
            g, badput, _, _, _ = self.get_job_goodput_interval(interval_start, interval_end)
        except ValueError as e:
            _log.warning("Failed to get interval metric details: %s", e)
            return {IntervalMetricType.INTERVAL_GOODPUT.value: {},
                    IntervalMetricType.INTERVAL_BADPUT.value: {},
                    IntervalMetricType.INTERVAL_SIZE.value: size}
        return {IntervalMetricType.INTERVAL_GOODPUT.value: {GoodputType.TOTAL: g},
                IntervalMetricType.INTERVAL_BADPUT.value: badput,
                IntervalMetricType.INTERVAL_SIZE.value: size}

    def get_job_goodput_details(self) -> dict[str, Any]:
        """Google's ``WorkloadMetricDetails`` keys plus goodput_jax's (seconds).

        ``goodput_time`` ({GoodputType.TOTAL: s}), ``badput_time`` ({BadputType: s},
        custom as {TYPE: s}), ``max_productive_step``, ``total_elapsed_time``,
        ``disruption_count``, ``step_time_deviation``, ``ideal_step_time``,
        ``total_excluded_time``; and ``productive_time``, ``custom_badput_time``,
        ``total_time``, ``num_runs``, ... as in the base calculator.
        """
        from goodput_jax.measure.calculator import NoEventsError

        try:
            d = super().get_job_goodput_details()
        except NoEventsError as e:
            _log.warning("Goodput information unavailable: %s", e)
            return {m.value: ({} if m in (MetricType.GOODPUT_TIME, MetricType.BADPUT_TIME,
                                          MetricType.STEP_TIME_DEVIATION)
                              else 0 if m in (MetricType.MAX_PRODUCTIVE_STEP,
                                              MetricType.DISRUPTION_COUNT) else 0.0)
                    for m in MetricType}
        dev = super().get_step_deviation()
        out = dict(d)
        out.update({
            MetricType.GOODPUT_TIME.value: {GoodputType.TOTAL: d["productive_time"]},
            MetricType.BADPUT_TIME.value: _google_breakdown(d["badput_time"],
                                                            d["custom_badput_time"], 1.0),
            MetricType.MAX_PRODUCTIVE_STEP.value: d["last_productive_step"],
            MetricType.TOTAL_ELAPSED_TIME.value: d["total_time"],
            MetricType.DISRUPTION_COUNT.value: d["num_disruptions"],
            MetricType.STEP_TIME_DEVIATION.value: dev.step_deviation,
            MetricType.IDEAL_STEP_TIME.value: dev.ideal_step_time if dev.num_steps else 0.0,
            MetricType.TOTAL_EXCLUDED_TIME.value: 0.0,
        })
        return out

    def get_step_deviation(self, configured_ideal_step_time: float | None = None) -> dict[int, float]:
        """``{step: step time - ideal step time}`` like Google's (the full
        :class:`StepDeviation` is :meth:`get_step_statistics`)."""
        return self.get_step_statistics(configured_ideal_step_time).step_deviation

    def get_step_statistics(self, configured_ideal_step_time: float | None = None) -> StepDeviation:
        """The base calculator's :class:`StepDeviation` (median, p90, ideal, per-step arrays)."""
        return super().get_step_deviation(configured_ideal_step_time)

    def get_job_goodput_with_exclusions(self, exclusion_intervals: Any,
                                        include_badput_breakdown: bool = False,
                                        configured_ideal_step_time: float | None = None):
        """Goodput with the time inside ``exclusion_intervals`` removed from every bucket.

        Args:
            exclusion_intervals: list of ``(start, end)`` aware datetimes (or UTC
                seconds); overlapping ones are merged, empty ones ignored.
            include_badput_breakdown: return the breakdown too.
            configured_ideal_step_time: accepted for compatibility.

        Returns:
            ``(goodput %, breakdown, last productive step, excluded seconds)``; the
            job time minus the excluded time is the denominator.

        Example:
            >>> calc.get_job_goodput_with_exclusions([(t0, t1)])  # doctest: +SKIP
        """
        from goodput_jax.measure.engine import merge_intervals

        if not isinstance(exclusion_intervals, (list, tuple)):
            raise TypeError(f"exclusion_intervals ({exclusion_intervals!r}) must be a list of "
                            "(start, end) pairs")
        pairs = []
        for i, pair in enumerate(exclusion_intervals):
            try:
                a, b = pair
            except (TypeError, ValueError):
                raise TypeError(f"exclusion_intervals[{i}] ({pair!r}) must be a (start, end) "
                                "pair") from None
            pairs.append((_to_ts(a, f"exclusion_intervals[{i}][0]"),
                          _to_ts(b, f"exclusion_intervals[{i}][1]")))
        excl = merge_intervals(pairs)
        with self._lock:
            self.refresh()
            self._require_events(self._engine)
            now = self._now()
            p_raw, acc_raw, _ = self._engine.totals(now)
            raw_total = p_raw + sum(acc_raw)
        eng = self._replay(exclusions=excl)
        productive, acc, custom = eng.totals(now)
        total = productive + sum(acc)
        last = eng.live_steps[-1] if eng.live_steps else 0
        excluded = max(raw_total - total, 0.0)
        if total <= 0:
            return 0.0, {}, last, excluded
        g = 100.0 * productive / total
        if not include_badput_breakdown:
            return g, {}, last, excluded
        flat = breakdown(acc, total, eng.async_data_loading())
        return g, _google_breakdown(flat, custom, 100.0 / total), last, excluded


class GoodputMonitor(_BaseMonitor):
    """:class:`goodput_jax.measure.monitor.GoodputMonitor` with Google's constructor and layout.

    Writes ml-goodput-measurement's TensorBoard layout: event files in
    ``<tensorboard_dir>/goodput/``, tags ``goodput/goodput``,
    ``badput/<google name>`` (``badput/tpu_initialization``,
    ``badput/data_loading_sync``, ...), ``badput/custom_badput_events/<type>``
    and ``step_deviation``; goodput_jax's extra tags sit beside them
    (``docs/tensorboard_tags.md``).

    Args:
        job_name, logger_name, tensorboard_dir, upload_interval, monitoring_enabled,
        pathway_enabled, include_badput_breakdown, include_step_deviation,
        configured_ideal_step_time, step_deviation_interval_seconds: as in
            Google's library (same defaults). ``upload_interval`` may be omitted when
            ``goodput_upload_interval_seconds`` is given (default 30 s when neither is).
        gcp_options: :class:`GCPOptions`. With ``monitoring_enabled`` and either
            ``enable_gcp_*`` flag, an empty ``project_id``, ``location`` or
            ``acc_type`` is filled from the GCE metadata server (as Google's
            library; ``$GCE_METADATA_HOST`` names the server); with a project and a
            location, goodput, badput, step deviation, rolling-window and hang metrics
            also go to Cloud Monitoring (needs the ``gcp`` extra), else a warning
            says why not.
        skip_final_flush: ``stop_*`` skips the final upload.
        final_flush_timeout_seconds: bound of each ``stop_*`` (s).
        gcs_sync_interval_seconds, cache_dir: accepted; no on-disk cache to sync.
        max_logs_retention_period: passed to the calculator.
        monitor_goodput: MaxText's flag; when given it decides ``monitoring_enabled``.
        goodput_upload_interval_seconds: MaxText's name for ``upload_interval``.
        monitor_step_time_deviation: MaxText's name for ``include_step_deviation``;
            with it, :meth:`start` also starts the step-deviation uploader.
        rolling_windows_seconds: MaxText's windows (s): :meth:`start` also starts the
            rolling-window uploader, :meth:`stop` stops it first.
        **kwargs: the base monitor's extras (``store``, ``clock``, ``tag_layout``,
            ``hang_threshold_seconds`` ...) and ``gcm_client``: a
            ``monitoring_v3.MetricServiceClient`` to send with.

    Raises:
        ValueError: ``upload_interval`` and ``goodput_upload_interval_seconds``
            disagree, or an interval is not positive.

    Example:
        >>> m = GoodputMonitor("j", "goodput_j", "/tmp/tb-doc", monitor_goodput=False,
        ...                    goodput_upload_interval_seconds=60, store=":memory:")  # doctest: +SKIP
        >>> m.upload_interval, m.monitoring_enabled                                   # doctest: +SKIP
        (60.0, False)
    """

    def __init__(
        self,
        job_name: str,
        logger_name: str | None,
        tensorboard_dir: str | os.PathLike,
        upload_interval: float | None = None,
        monitoring_enabled: bool = False,
        pathway_enabled: bool = False,
        include_badput_breakdown: bool = False,
        include_step_deviation: bool | None = None,
        configured_ideal_step_time: float | None = None,
        step_deviation_interval_seconds: float | None = 10,
        gcp_options: GCPOptions | None = None,
        skip_final_flush: bool = False,
        final_flush_timeout_seconds: float | None = 30.0,
        gcs_sync_interval_seconds: int = 3600,
        cache_dir: str | os.PathLike = "/tmp",
        max_logs_retention_period: datetime.timedelta | None = None,
        *,
        monitor_goodput: bool | None = None,
        goodput_upload_interval_seconds: float | None = None,
        monitor_step_time_deviation: bool | None = None,
        rolling_windows_seconds: Any = None,
        **kwargs: Any,
    ):
        gcm_client = kwargs.pop("gcm_client", None)
        from goodput_jax.measure.monitor import check_windows

        self.rolling_windows_seconds = (None if rolling_windows_seconds is None
                                        else check_windows(rolling_windows_seconds))
        if upload_interval is None:
            upload_interval = 30.0 if goodput_upload_interval_seconds is None \
                else goodput_upload_interval_seconds
        elif goodput_upload_interval_seconds is not None and \
                float(goodput_upload_interval_seconds) != float(upload_interval):
            raise ValueError(
                f"upload_interval ({upload_interval!r}) and goodput_upload_interval_seconds "
                f"({goodput_upload_interval_seconds!r}) disagree; give one of them"
            )
        mg = _opt_bool("monitor_goodput", monitor_goodput)
        if mg is not None:
            monitoring_enabled = mg
        dev = _opt_bool("monitor_step_time_deviation", monitor_step_time_deviation)
        if include_step_deviation is None:
            include_step_deviation = bool(dev)
        elif dev is not None and dev != bool(include_step_deviation):
            raise ValueError(
                f"include_step_deviation ({include_step_deviation!r}) and "
                f"monitor_step_time_deviation ({monitor_step_time_deviation!r}) disagree"
            )
        if gcp_options is not None and not isinstance(gcp_options, GCPOptions) and not all(
                hasattr(gcp_options, f.name) for f in dataclasses.fields(GCPOptions)):
            raise TypeError(f"gcp_options ({gcp_options!r}) must be a GCPOptions")
        self.monitor_step_time_deviation = bool(dev) if dev is not None else False
        self.gcp_options = gcp_options if gcp_options is not None else GCPOptions()
        self.skip_final_flush = bool(skip_final_flush)
        self.gcs_sync_interval_seconds = gcs_sync_interval_seconds
        self.cache_dir = os.fspath(cache_dir)
        self.max_logs_retention_period = max_logs_retention_period
        if final_flush_timeout_seconds is not None:
            kwargs.setdefault("stop_timeout", _positive_number(
                "final_flush_timeout_seconds", final_flush_timeout_seconds))
        kwargs.setdefault("tag_layout", "reference")
        super().__init__(
            job_name, logger_name, tensorboard_dir, upload_interval, monitoring_enabled,
            pathway_enabled, include_badput_breakdown, bool(include_step_deviation),
            configured_ideal_step_time, step_deviation_interval_seconds, **kwargs,
        )
        self._gcm = None
        self._google_calc = None
        #: what the GCE metadata server said (None when it was not asked)
        self.gce_metadata = None
        opts = self.gcp_options
        if self.monitoring_enabled and (
                opts.enable_gcp_goodput_metrics or opts.enable_gcp_step_deviation_metrics):
            from goodput_jax.measure.cloud_monitoring import (
                CloudMonitoringExporter,
                fill_gcp_options,
            )

            opts, self.gce_metadata = fill_gcp_options(opts)
            self.gcp_options = opts
            if opts.project_id and opts.location:
                self._gcm = CloudMonitoringExporter(opts, job_name, client=gcm_client)
                _log.info("goodput monitor: sending Cloud Monitoring metrics to project %r, "
                          "location %r", opts.project_id, opts.location)
            else:
                missing = [n for n in ("project_id", "location") if not getattr(opts, n)]
                _log.warning(
                    "goodput monitor: Cloud Monitoring disabled: gcp_options.%s not given and "
                    "not found on the GCE metadata server (%s)", " and ".join(missing),
                    self.gce_metadata.error or "it had no such entry")

    @property
    def cloud_monitoring(self) -> Any:
        """The :class:`~goodput_jax.measure.cloud_monitoring.CloudMonitoringExporter`
        sending this monitor's metrics (None when Cloud Monitoring is off)."""
        return self._gcm

    def upload_goodput(self) -> dict[str, float]:
        values = super().upload_goodput()
        if self._gcm is not None and values and self.gcp_options.enable_gcp_goodput_metrics:
            self._gcm.send_goodput(
                self.calculator, self._now(),
                include_slice_efficiency=bool(getattr(self, "include_slice_efficiency", False)))
        return values

    def upload_hang_status(self, last_step: int | None = None, *, flush: bool = True
                           ) -> dict[str, float]:
        values = super().upload_hang_status(last_step, flush=flush)
        if self._gcm is not None and values and self.gcp_options.enable_gcp_goodput_metrics:
            md = self.gce_metadata
            self._gcm.send(self._gcm.hang_metrics(
                values["hang/seconds_since_last_step"], bool(values.get("hang/hung", 0.0)),
                instance_id=md.instance_id if md is not None else None), self._now())
        return values

    def _interval_calculator(self) -> Any:
        calc = self.calculator
        if hasattr(calc, "get_interval_metric_details"):
            return calc
        if self._google_calc is None:  # Google's interval rule on the same store
            self._google_calc = GoodputCalculator(self.job_name, self.logger_name,
                                                  store=calc.store, clock=self.clock)
        return self._google_calc

    def upload_rolling_window_goodput(self, window_seconds: Any = None) -> dict[str, float]:
        """Write ``goodput/interval_<W>s`` for each window ending now (Google's interval
        rule, :meth:`GoodputCalculator.get_interval_metric_details`) and, with Cloud
        Monitoring on, send each window's ``interval_goodput`` / ``interval_badput``
        (and slice efficiency for elastic monitors) as Google's rolling-window uploader."""
        from goodput_jax.measure.monitor import check_windows

        windows = self.rolling_windows if window_seconds is None else check_windows(
            window_seconds)
        now = self._now()
        values: dict[str, float] = {}
        slice_eff = bool(getattr(self, "include_slice_efficiency", False))
        calc = self._interval_calculator()
        send = self._gcm is not None and self.gcp_options.enable_gcp_goodput_metrics
        for w in windows:
            details = calc.get_interval_metric_details(now - w, now)
            g = details.get(IntervalMetricType.INTERVAL_GOODPUT.value) or {}
            if GoodputType.TOTAL in g:
                values[self.window_tag(w)] = float(g[GoodputType.TOTAL])
            if send:
                self._gcm.send_interval(details, now, include_slice_efficiency=slice_eff)
        if values:
            self.write_scalars(self.last_step, values)
        return values

    def upload_step_deviation(self) -> dict[str, float]:
        values = super().upload_step_deviation()
        if self._gcm is not None and values and self.gcp_options.enable_gcp_step_deviation_metrics:
            self._gcm.send_step_deviation(self.calculator, self._now())
        return values

    def _stop(self, name: str, timeout: float | None, final: bool = True) -> bool:
        # Every stop_* / close() ends with a final upload: first make this process's
        # recorders of the same job write what they hold (e.g. the job end just recorded).
        if final:
            for rec in list(_LIVE_RECORDERS):
                if rec.job_name == self.job_name and not rec.closed:
                    rec.flush(self.stop_timeout if timeout is None else timeout)
        return super()._stop(name, timeout, final)

    def _final(self, skip_final_flush: bool | None) -> bool:
        skip = self.skip_final_flush if skip_final_flush is None else bool(skip_final_flush)
        return not skip

    def stop_goodput_uploader(self, skip_final_flush: bool | None = None, *,
                              timeout: float | None = None) -> bool:
        """Stop the goodput uploader, after a final upload unless ``skip_final_flush``."""
        return self._stop("goodput", timeout, self._final(skip_final_flush))

    def stop_step_deviation_uploader(self, skip_final_flush: bool | None = None, *,
                                     timeout: float | None = None) -> bool:
        """Stop the step-deviation uploader, after a final upload unless ``skip_final_flush``."""
        return self._stop("step_deviation", timeout, self._final(skip_final_flush))

    def start_rolling_window_goodput_uploader(self, rolling_windows_seconds: Any) -> bool:
        """Start uploading the goodput of the last ``W`` seconds for each window ``W``.

        Args:
            rolling_windows_seconds: a window length (s) or a list of them (Google's name).
        """
        return super().start_rolling_window_goodput_uploader(rolling_windows_seconds)

    def stop_rolling_window_goodput_uploader(self, skip_final_flush: bool | None = None, *,
                                             timeout: float | None = None) -> bool:
        """Stop the rolling-window uploader, after a final upload unless ``skip_final_flush``."""
        return self._stop("rolling_window", timeout, self._final(skip_final_flush))

    def start(self) -> bool:
        """Start the goodput uploader (and the step-deviation one when MaxText asked for it,
        and the rolling-window one when ``rolling_windows_seconds`` was given).

        Returns:
            Whether the goodput uploader runs (False when monitoring is disabled).
        """
        started = self.start_goodput_uploader()
        if started and self.monitor_step_time_deviation:
            self.start_step_deviation_uploader()
        if started and self.rolling_windows_seconds:
            self.start_rolling_window_goodput_uploader(self.rolling_windows_seconds)
        return started

    def stop(self, timeout: float | None = None) -> None:
        """Stop every uploader, each after a final upload (idempotent); the rolling-window
        one first, as MaxText does."""
        if self.rolling_windows_seconds:
            self.stop_rolling_window_goodput_uploader(timeout=timeout)
        self.stop_goodput_uploader(timeout=timeout)
        if self.monitor_step_time_deviation:
            self.stop_step_deviation_uploader(timeout=timeout)


# ---------------------------------------------------------------------- MaxText config
def _get(config: Any, name: str, default: Any = _MISSING) -> Any:
    if isinstance(config, Mapping):
        value = config.get(name, default)
    else:
        value = getattr(config, name, default)
    if value is _MISSING:
        raise ValueError(f"config.{name} is required (MaxText config {type(config).__name__})")
    return value


def _process_index(process_index: int | None) -> int:
    if process_index is not None:
        if isinstance(process_index, bool) or not isinstance(process_index, numbers.Integral) \
                or process_index < 0:
            raise ValueError(f"process_index ({process_index!r}) must be a non-negative int")
        return int(process_index)
    import jax

    return jax.process_index()


def get_goodput_job_name(config: Any) -> str:
    """MaxText's job name for goodput: ``config.goodput_job_name or config.run_name``.

    Example:
        >>> get_goodput_job_name({"run_name": "r", "goodput_job_name": ""})
        'r'
        >>> get_goodput_job_name({"run_name": "r", "goodput_job_name": "llama-pre-r"})
        'llama-pre-r'
    """
    name = _get(config, "goodput_job_name", None)
    if name is not None and not isinstance(name, str):
        raise ValueError(f"config.goodput_job_name ({name!r}) must be a string")
    return name or _get(config, "run_name")


def create_goodput_recorder(config: Any, *, process_index: int | None = None,
                            **kwargs: Any) -> GoodputRecorder | None:
    """MaxText's ``create_goodput_recorder``: a recorder when ``enable_goodput_recording``.

    Records on process 0 only, for the job :func:`get_goodput_job_name` names.
    ``kwargs`` go to :class:`GoodputRecorder` (e.g. ``store=``).

    Example:
        >>> create_goodput_recorder({"run_name": "r", "enable_goodput_recording": False}) is None
        True
    """
    if not _get(config, "enable_goodput_recording", False):
        return None
    run = get_goodput_job_name(config)
    return GoodputRecorder(run, f"goodput_{run}", _process_index(process_index) == 0,
                           enable_goodput_recording=True, **kwargs)


def create_goodput_monitor(config: Any, *, process_index: int | None = None,
                           **kwargs: Any) -> GoodputMonitor | None:
    """A :class:`GoodputMonitor` on process 0 when ``config.monitor_goodput``, else None.

    As MaxText's ``maybe_monitor_goodput``: the job is :func:`get_goodput_job_name`;
    reads ``tensorboard_dir``, ``goodput_upload_interval_seconds``,
    ``monitor_step_time_deviation``, ``step_deviation_interval_seconds`` and
    (optionally) ``enable_pathways_goodput``; ``GCPOptions`` carry only
    ``enable_gcp_goodput_metrics`` / ``enable_gcp_step_deviation_metrics`` (default
    True; the latter off with ``report_performance_metric_for_gcp_monitoring``), so
    the project, zone and accelerator come from the metadata server; with
    ``enable_rolling_window_goodput`` the monitor also runs the rolling windows
    ``rolling_windows_seconds``. goodput_jax's own key ``goodput_hang_threshold_seconds``
    sets the hang threshold. ``kwargs`` go to :class:`GoodputMonitor` and win.

    Example:
        >>> create_goodput_monitor({"run_name": "r", "monitor_goodput": False}) is None
        True
    """
    if not _get(config, "monitor_goodput", False) or _process_index(process_index) != 0:
        return None
    run = get_goodput_job_name(config)
    step_dev_gcp = bool(_get(config, "enable_gcp_step_deviation_metrics", True))
    if _get(config, "report_performance_metric_for_gcp_monitoring", False):
        step_dev_gcp = False  # MaxText sends its own performance metric then
    kwargs.setdefault("gcp_options", GCPOptions(
        enable_gcp_goodput_metrics=bool(_get(config, "enable_gcp_goodput_metrics", True)),
        enable_gcp_step_deviation_metrics=step_dev_gcp))
    if _get(config, "enable_rolling_window_goodput", False):
        windows = _get(config, "rolling_windows_seconds", None)
        if windows is None:
            raise ValueError("config.rolling_windows_seconds is required with "
                             "enable_rolling_window_goodput")
        kwargs.setdefault("rolling_windows_seconds", windows)
    hang = _get(config, "goodput_hang_threshold_seconds", None)
    if hang is not None:
        kwargs.setdefault("hang_threshold_seconds", hang)
    return GoodputMonitor(
        run, f"goodput_{run}", _get(config, "tensorboard_dir"),
        pathway_enabled=bool(_get(config, "enable_pathways_goodput", False)),
        include_badput_breakdown=True,  # as MaxText's wrapper
        step_deviation_interval_seconds=_get(config, "step_deviation_interval_seconds", None),
        monitor_goodput=True,
        goodput_upload_interval_seconds=_get(config, "goodput_upload_interval_seconds", 30),
        monitor_step_time_deviation=bool(_get(config, "monitor_step_time_deviation", False)),
        **kwargs,
    )


def maybe_instrument_checkpoint_manager(checkpoint_manager: Any, recorder: Any) -> Any:
    """Record a MaxText checkpoint manager's saves and restores as checkpoint badput.

    MaxText no longer sets up Orbax's checkpoint cloud logger, so this is where its
    checkpoint badput comes from: wrap the manager right where MaxText's
    ``setup_train_loop`` creates it (it has the recorder at hand)::

        checkpoint_manager = create_checkpoint_manager(config, mesh, init_state_fn)
        checkpoint_manager = goodput.maybe_instrument_checkpoint_manager(
            checkpoint_manager, recorder)

    MaxText's ``save_checkpoint`` / ``maybe_save_checkpoint`` /
    ``load_state_if_possible`` / ``wait_until_finished`` then go through
    :func:`goodput_jax.integrations.orbax.instrument`: the blocking part of each
    save, every wait for a background commit and each restore are recorded.

    Returns:
        The manager unchanged when it or the recorder is None or recording is off
        (MaxText's "checkpointing disabled" and "recording disabled"); else a
        :class:`~goodput_jax.integrations.orbax.RecordedCheckpointManager`.

    Example:
        >>> maybe_instrument_checkpoint_manager(None, None) is None
        True
    """
    if checkpoint_manager is None or not recorder or not getattr(recorder, "logging_enabled",
                                                                  False):
        return checkpoint_manager
    from goodput_jax.integrations.orbax import instrument

    return instrument(checkpoint_manager, recorder)


@dataclasses.dataclass
class MaxTextGoodput:
    """What :func:`from_maxtext_config` builds: the recorder and monitor (either may be None)."""

    recorder: GoodputRecorder | None
    monitor: GoodputMonitor | None
    job_name: str

    def close(self) -> None:
        """Stop the monitor (final upload) and flush/close the recorder."""
        if self.monitor is not None:
            self.monitor.stop()
            self.monitor.close()
        if self.recorder is not None:
            self.recorder.close()


def from_maxtext_config(config: Any, *, process_index: int | None = None, store: Any = None,
                        **monitor_kwargs: Any) -> MaxTextGoodput:
    """Recorder and monitor from a MaxText config, with MaxText's flags mapped.

    Args:
        config: object (``config.run_name``) or mapping with MaxText's keys:
            ``run_name``, ``enable_goodput_recording``, ``monitor_goodput``,
            ``tensorboard_dir`` (when monitoring), ``goodput_upload_interval_seconds``,
            ``monitor_step_time_deviation``, ``step_deviation_interval_seconds``.
        process_index: this process (default ``jax.process_index()``); records
            and monitors on 0 only.
        store: store (or URL) shared by the recorder and the monitor.
        **monitor_kwargs: extra :class:`GoodputMonitor` arguments (``clock`` ...).

    Returns:
        :class:`MaxTextGoodput`; call ``.monitor.start()`` on process 0.

    Example:
        >>> gp = from_maxtext_config({"run_name": "r", "enable_goodput_recording": False,
        ...                           "monitor_goodput": False}, process_index=0)
        >>> gp.recorder is None and gp.monitor is None
        True
    """
    kw = {} if store is None else {"store": store}
    rec = create_goodput_recorder(config, process_index=process_index, **kw)
    mon = create_goodput_monitor(config, process_index=process_index, **kw, **monitor_kwargs)
    return MaxTextGoodput(rec, mon, get_goodput_job_name(config))


class GoodputEvent(enum.Enum):
    """MaxText's goodput event names (``record_<value>_start_time`` / ``_end_time``)."""

    JOB = "job"
    TPU_INIT = "tpu_init"
    TRAINING_PREPARATION = "training_preparation"
    DATA_LOADING = "data_loading"
    STEP = "step"


@contextlib.contextmanager
def maybe_record_goodput(recorder: Any, event: GoodputEvent, *args: Any) -> Iterator[None]:
    """MaxText's ``maybe_record_goodput``: start/end of ``event`` around the block.

    As MaxText's wrapper: a no-op when ``recorder`` is None; each call goes through
    :func:`record_goodput` (a recorder without the method is skipped); the end is
    recorded only when the block completes (an exception, e.g. a preemption, leaves
    the event open, and the run's missing job end marks it crashed).

    Example:
        >>> with maybe_record_goodput(None, GoodputEvent.STEP, 3):
        ...     pass
    """
    if not isinstance(event, GoodputEvent):
        raise TypeError(f"event ({event!r}) must be a GoodputEvent")
    record_goodput(recorder, f"record_{event.value}_start_time", *args)
    completed = False
    try:
        yield
        completed = True
    finally:
        if completed:
            record_goodput(recorder, f"record_{event.value}_end_time", *args)


def record_goodput(recorder: Any, event_name: str, *args: Any) -> None:
    """MaxText's ``record_goodput``: call ``recorder.<event_name>(*args)`` if it has one.

    Example:
        >>> record_goodput(None, "record_job_start_time")
    """
    if recorder:
        fn = getattr(recorder, event_name, None)
        if fn:
            fn(*args)


@contextlib.contextmanager
def maybe_monitor_goodput(config: Any, *, process_index: int | None = None,
                          **kwargs: Any) -> Iterator[GoodputMonitor | None]:
    """MaxText's ``maybe_monitor_goodput``: monitor uploads for the block, on process 0.

    Yields the monitor (or None when ``monitor_goodput`` is off or this is not
    process 0); on exit stops the uploaders (each with a final upload).

    Example:
        >>> with maybe_monitor_goodput({"monitor_goodput": False}) as m:
        ...     m is None
        True
    """
    mon = create_goodput_monitor(config, process_index=process_index, **kwargs)
    if mon is None:
        yield None
        return
    try:
        mon.start()
        yield mon
    finally:
        mon.stop()
        mon.close()
