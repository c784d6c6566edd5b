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
``config.run_name`` and the logger ``goodput_<run_name>``, records on process 0
and monitors on process 0 only. MaxText's own wrapper helpers are here too
(:func:`create_goodput_recorder`, :func:`maybe_record_goodput`,
:func:`maybe_monitor_goodput`, :class:`GoodputEvent`), so a MaxText
``goodput_utils``-style module can switch by changing its import.

Events go to the local SQLite store (``./goodput.db`` or ``$GOODPUT_JAX_STORE``)
unless a ``store=`` is given. ``gcp_options`` (MaxText's Cloud Monitoring
options) is accepted and ignored: pick the Cloud Logging store with
``store="gcl://PROJECT/LOGGER"`` instead.

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
import numbers
import os
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

from goodput_jax.measure.calculator import BadputType, GoodputCalculator, StepDeviation
from goodput_jax.measure.monitor import GoodputMonitor as _BaseMonitor
from goodput_jax.measure.recorder import GoodputRecorder as _BaseRecorder

__all__ = [
    "BadputType",
    "GCPOptions",
    "GoodputCalculator",
    "GoodputEvent",
    "GoodputMonitor",
    "GoodputRecorder",
    "MaxTextGoodput",
    "StepDeviation",
    "create_goodput_monitor",
    "create_goodput_recorder",
    "from_maxtext_config",
    "maybe_monitor_goodput",
    "maybe_record_goodput",
]

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


class GoodputRecorder(_BaseRecorder):
    """:class:`goodput_jax.measure.recorder.GoodputRecorder` plus MaxText's recording flag.

    Args:
        job_name, logger_name, logging_enabled: as in Google's library.
        enable_goodput_recording: MaxText's flag; when False nothing is
            recorded whatever ``logging_enabled`` says. None = not given.
        **kwargs: the base recorder's extras (``store``, ``clock``, ...).

    Example:
        >>> GoodputRecorder("j", "goodput_j", logging_enabled=False).logging_enabled
        False
    """

    def __init__(self, job_name: str, logger_name: str | None = None,
                 logging_enabled: bool = False, *, enable_goodput_recording: bool | None = None,
                 **kwargs: Any):
        flag = _opt_bool("enable_goodput_recording", enable_goodput_recording)
        self.enable_goodput_recording = True if flag is None else flag
        super().__init__(job_name, logger_name, bool(logging_enabled) and (flag is not False),
                         **kwargs)
        if self.logging_enabled:
            _LIVE_RECORDERS.add(self)


@dataclasses.dataclass
class GCPOptions:
    """MaxText's Cloud Monitoring options; accepted for compatibility, not used.

    Use ``store="gcl://PROJECT/LOGGER"`` to keep events in Cloud Logging.
    """

    project_id: str | None = None
    location: str | None = None
    replica_id: str = "0"
    acc_type: str | None = None
    enable_gcp_goodput_metrics: bool = True
    enable_gcp_step_deviation_metrics: bool = True


class GoodputMonitor(_BaseMonitor):
    """:class:`goodput_jax.measure.monitor.GoodputMonitor` plus MaxText's monitoring flags.

    Args:
        job_name, logger_name, tensorboard_dir, upload_interval, monitoring_enabled,
        pathway_enabled, include_badput_breakdown, include_step_deviation,
        configured_ideal_step_time, step_deviation_interval_seconds: as in
            Google's library. ``upload_interval`` may be omitted when
            ``goodput_upload_interval_seconds`` is given (default 30 s when
            neither is).
        gcp_options: accepted and ignored (see :class:`GCPOptions`).
        monitor_goodput: MaxText's flag; when given it decides ``monitoring_enabled``.
        goodput_upload_interval_seconds: MaxText's name for ``upload_interval``.
        monitor_step_time_deviation: MaxText's name for ``include_step_deviation``;
            with it, :meth:`start` also starts the step-deviation uploader.
        **kwargs: the base monitor's extras (``store``, ``clock``, ...).

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
        include_badput_breakdown: bool = True,
        include_step_deviation: bool | None = None,
        configured_ideal_step_time: float | None = None,
        step_deviation_interval_seconds: float | None = None,
        gcp_options: Any = None,
        *,
        monitor_goodput: bool | None = None,
        goodput_upload_interval_seconds: float | None = None,
        monitor_step_time_deviation: bool | None = None,
        **kwargs: Any,
    ):
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
            include_step_deviation = True if dev is None else dev
        elif dev is not None and dev != bool(include_step_deviation):
            raise ValueError(
                f"include_step_deviation ({include_step_deviation!r}) and "
                f"monitor_step_time_deviation ({monitor_step_time_deviation!r}) disagree"
            )
        self.monitor_step_time_deviation = bool(dev) if dev is not None else False
        self.gcp_options = gcp_options
        super().__init__(
            job_name, logger_name, tensorboard_dir, upload_interval, monitoring_enabled,
            pathway_enabled, include_badput_breakdown, bool(include_step_deviation),
            configured_ideal_step_time, step_deviation_interval_seconds, **kwargs,
        )

    def _stop(self, name: str, timeout: float | None) -> bool:
        # Every stop_* / close() ends with a final upload: first make this process's
        # recorders of the same job write what they hold (e.g. the job end just recorded).
        for rec in list(_LIVE_RECORDERS):
            if rec.job_name == self.job_name and not getattr(rec, "_closed", False):
                rec.flush(self.stop_timeout if timeout is None else timeout)
        return super()._stop(name, timeout)

    def start(self) -> bool:
        """Start the goodput uploader (and the step-deviation one when MaxText asked for it).

        Returns:
            Whether the goodput uploader runs (False when monitoring is disabled).
        """
        started = self.start_goodput_uploader()
        if started and self.monitor_step_time_deviation:
            self.start_step_deviation_uploader()
        return started

    def stop(self, timeout: float | None = None) -> None:
        """Stop every uploader, each after a final upload (idempotent)."""
        self.stop_goodput_uploader(timeout)
        if self.monitor_step_time_deviation:
            self.stop_step_deviation_uploader(timeout)


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


def create_goodput_recorder(config: Any, *, process_index: int | None = None,
                            **kwargs: Any) -> GoodputRecorder | None:
    """MaxText's ``create_goodput_recorder``: a recorder when ``enable_goodput_recording``.

    Records on process 0 only. ``kwargs`` go to :class:`GoodputRecorder`
    (e.g. ``store=``).

    Example:
        >>> create_goodput_recorder({"run_name": "r", "enable_goodput_recording": False}) is None
        True
    """
    if not _get(config, "enable_goodput_recording", False):
        return None
    run = _get(config, "run_name")
    return GoodputRecorder(run, f"goodput_{run}", _process_index(process_index) == 0,
                           enable_goodput_recording=True, **kwargs)


def create_goodput_monitor(config: Any, *, process_index: int | None = None,
                           **kwargs: Any) -> GoodputMonitor | None:
    """A :class:`GoodputMonitor` on process 0 when ``config.monitor_goodput``, else None.

    Reads ``run_name``, ``tensorboard_dir``, ``goodput_upload_interval_seconds``,
    ``monitor_step_time_deviation``, ``step_deviation_interval_seconds`` and
    (optionally) ``enable_pathways_goodput``.

    Example:
        >>> create_goodput_monitor({"run_name": "r", "monitor_goodput": False}) is None
        True
    """
    if not _get(config, "monitor_goodput", False) or _process_index(process_index) != 0:
        return None
    run = _get(config, "run_name")
    return GoodputMonitor(
        run, f"goodput_{run}", _get(config, "tensorboard_dir"),
        pathway_enabled=bool(_get(config, "enable_pathways_goodput", False)),
        step_deviation_interval_seconds=_get(config, "step_deviation_interval_seconds", None),
        monitor_goodput=True,
        goodput_upload_interval_seconds=_get(config, "goodput_upload_interval_seconds", 30),
        monitor_step_time_deviation=bool(_get(config, "monitor_step_time_deviation", False)),
        **kwargs,
    )


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
    return MaxTextGoodput(rec, mon, _get(config, "run_name"))


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

    A no-op when ``recorder`` is None. The end is recorded even if the block
    raises (as in MaxText); for the job, prefer recording the end on a clean
    exit only (``recorder.record_job_end_time()`` after the loop).

    Example:
        >>> with maybe_record_goodput(None, GoodputEvent.STEP, 3):
        ...     pass
    """
    if not isinstance(event, GoodputEvent):
        raise TypeError(f"event ({event!r}) must be a GoodputEvent")
    if recorder is not None:
        getattr(recorder, f"record_{event.value}_start_time")(
            *args, datetime.datetime.now(datetime.UTC))
    try:
        yield
    finally:
        if recorder is not None:
            getattr(recorder, f"record_{event.value}_end_time")(
                *args, datetime.datetime.now(datetime.UTC))


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
