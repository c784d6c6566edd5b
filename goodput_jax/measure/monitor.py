"""GoodputMonitor: uploads a job's goodput to TensorBoard from background threads.

The first five parameters are Google's ml-goodput-measurement ``GoodputMonitor``'s
(``job_name, logger_name, tensorboard_dir, upload_interval, monitoring_enabled``); the
rest are :class:`~goodput_jax.measure.monitor_options.MonitorOptions` (``options=``). And:

- every uploader is a **thread**, and all of them share **one** incremental, thread-safe
  :class:`~goodput_jax.measure.calculator.GoodputCalculator` (no processes, no cache file);
- ``stop_*`` is bounded by a timeout, ends with a final upload, and is idempotent; an
  exception in one poll is logged and counted, and the uploader keeps going;
- the store and the clock are injectable (``store=``, ``clock=``);
- it writes real TensorBoard event files (``simple_value`` scalars), only under
  ``tensorboard_dir``.

Its modules, one seam each: :mod:`~goodput_jax.measure.monitor_options` (the options,
validated once), :mod:`~goodput_jax.measure.monitor_calculator` (what it reads of the
calculator), :mod:`~goodput_jax.measure.monitor_uploaders` (the background threads),
:mod:`~goodput_jax.measure.monitor_hang` (hang detection), ``monitor_stragglers`` (the
slowest-host log), :mod:`~goodput_jax.measure.tags` (which tag a value becomes) and
:mod:`~goodput_jax.measure.tensorboard` (the event files); tags: ``docs/tensorboard_tags.md``.

Example:
    >>> monitor = GoodputMonitor("my-run", "goodput_my-run", "/tmp/tb",
    ...     options=MonitorOptions(upload_interval=30, monitoring_enabled=True))  # doctest: +SKIP
    >>> monitor.start_goodput_uploader()                           # doctest: +SKIP
    >>> ...                                                        # doctest: +SKIP
    >>> monitor.stop_goodput_uploader()                            # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Self

from goodput_jax.measure.calculator import GoodputCalculator
from goodput_jax.measure.events import to_timestamp
from goodput_jax.measure.monitor_calculator import MonitoredCalculator, check_calculator
from goodput_jax.measure.monitor_hang import HangCheck, StepClock
from goodput_jax.measure.monitor_options import (
    MonitorKeywords,
    MonitorOptions,
    OptionField,
    check_windows,
    monitor_options,
    nonnegative_seconds,
)
from goodput_jax.measure.monitor_stragglers import SlowestHostLog
from goodput_jax.measure.monitor_uploaders import Uploaders
from goodput_jax.measure.tags import (  # noqa: F401 - HINT_TAGS ...: public here too
    HINT_TAGS,
    PRODUCTIVITY_TAGS,
    badput_scalars,
    finite_number,
    hint_scalars,
    productivity_scalars,
    straggler_scalars,
    window_tag,
)
from goodput_jax.measure.tensorboard import ScalarEventWriter, check_tensorboard_dir

if TYPE_CHECKING:
    from typing import Unpack

    from goodput_jax.measure.calculator import StepDeviation
    from goodput_jax.measure.cloud_monitoring import CloudMonitoringExporter
    from goodput_jax.measure.stores import EventStore

_log = logging.getLogger(__name__)


class GoodputMonitor:
    """Background uploader of a job's goodput to TensorBoard.

    Args:
        job_name: the job to monitor.
        logger_name: kept for drop-in compatibility (the store decides where
            events live); passed to the calculator.
        tensorboard_dir: directory for the TensorBoard event file (created);
            nothing is written outside it. May be a ``gs://`` URL (needs ``gcsfs``, the
            ``gcp`` extra): event files are written through fsspec, no TensorFlow.
        upload_interval, monitoring_enabled: :class:`MonitorOptions` fields, here
            positional as in Google's constructor (None: ``options``' value).
        options: every setting (:class:`MonitorOptions`: what to upload, how often, the
            hang check, the straggler tags); default ``MonitorOptions()``.
        store: an EventStore, a store URL, or None (``$GOODPUT_JAX_STORE`` or
            ``./goodput.db``); a store opened here from a URL is closed by :meth:`close`.
        clock: "now" as float UTC seconds (or aware datetime); default
            ``time.time``. Used by the calculator and as TensorBoard wall time.
        calculator: an existing calculator to share (advanced): any
            :class:`~goodput_jax.measure.monitor_calculator.MonitoredCalculator`.
        **keywords: :class:`MonitorOptions` fields as keywords (the earlier
            constructor's, kept working; typed by :class:`MonitorKeywords`); each
            replaces the field of ``options`` (which must leave it at its default).

    Raises:
        TypeError, ValueError: one line naming the argument and its value (an option,
            an unwritable ``tensorboard_dir``, a calculator lacking a member).

    Example:
        >>> m = GoodputMonitor("job", "goodput_job", "/tmp/tb", 30, True,
        ...                    store="sqlite:///goodput.db")   # doctest: +SKIP
        >>> m.upload_goodput()                                # one poll, now  # doctest: +SKIP
        {'goodput/total': 93.1, ...}
    """

    #: In the ``"reference"`` tag layout, also write the ``ELASTIC_*`` badput buckets
    #: (``badput/elastic_slice_down`` ...), as ml-goodput-measurement's elastic monitor
    #: does; its drop-in (``goodput_jax.monitoring_elastic``) sets it. The
    #: ``"goodput_jax"`` layout writes every bucket whatever it says.
    elastic_tags: bool = False

    upload_interval = OptionField[float]()
    monitoring_enabled = OptionField[bool]()
    badput_tags = OptionField[bool]()
    include_step_deviation = OptionField[bool]()
    configured_ideal_step_time = OptionField["float | None"]()
    stop_timeout = OptionField[float]()
    max_deviation_points = OptionField[int]()
    tag_layout = OptionField[str]()
    hang_threshold_seconds = OptionField["float | None"]()
    straggler_window_seconds = OptionField["float | None"]()
    straggler_top = OptionField[int]()
    straggler_log_every = OptionField[int]()
    include_productivity = OptionField[bool]()
    send_productivity_metrics = OptionField[bool]()

    def __init__(
        self,
        job_name: str,
        logger_name: str | None,
        tensorboard_dir: str | os.PathLike[str],
        upload_interval: float | None = None,
        monitoring_enabled: bool | None = None,
        *,
        options: MonitorOptions | None = None,
        store: EventStore | str | None = None,
        clock: Callable[[], Any] | None = None,
        calculator: MonitoredCalculator | None = None,
        **keywords: Unpack[MonitorKeywords],
    ) -> None:
        #: the monitor's settings (frozen; validated once)
        """``Any``: ``store`` is a URL, a path or a store object, ``clock`` returns a time in any
        form :func:`~goodput_jax.measure.events.to_timestamp` accepts, and ``keywords`` are the
        old keyword arguments, each checked as it becomes a field of the options.
        """
        self.options = monitor_options(options, upload_interval=upload_interval,
                                       monitoring_enabled=monitoring_enabled, **keywords)
        if not isinstance(job_name, str) or not job_name:
            raise ValueError(f"job_name ({job_name!r}) must be a non-empty string")
        if not isinstance(tensorboard_dir, (str, os.PathLike)) or not os.fspath(tensorboard_dir):
            raise ValueError(f"tensorboard_dir ({tensorboard_dir!r}) must be a non-empty path")
        check_tensorboard_dir(os.fspath(tensorboard_dir))
        if clock is not None and not callable(clock):
            raise TypeError(f"clock ({clock!r}) must be a callable returning UTC seconds")
        self.job_name = job_name
        self.logger_name = logger_name
        self.tensorboard_dir = os.fspath(tensorboard_dir)
        self._clock = clock or time.time
        self._owns_store = False
        if calculator is None:
            from goodput_jax.measure.stores import resolve_store

            self._owns_store = store is None or isinstance(store, str)
            calculator = GoodputCalculator(
                job_name, logger_name, store=resolve_store(store), clock=self._clock,
                configured_ideal_step_time=self.options.configured_ideal_step_time)
        #: the calculator every uploader reads (one, shared, thread-safe)
        self.calculator: MonitoredCalculator = check_calculator(calculator)
        self._writer = ScalarEventWriter(
            os.path.join(self.tensorboard_dir, "goodput") if self.tag_layout == "reference"
            else self.tensorboard_dir
        )
        self._uploaders = Uploaders()
        self._rolling_windows: tuple[float, ...] = ()
        self._dev_token: tuple[int, int] | None = None
        self._dev_lock = threading.Lock()
        self._step_clock = StepClock(self.calculator.store, job_name)
        self._hang = HangCheck(job_name, self.hang_threshold_seconds)
        #: Set while the goodput uploader makes its final upload at stop: the process is
        #: finishing, so the hang check reports the job not hung (MaxText stops the
        #: monitor before it records the job end).
        self._stopping = False
        self._slowest = SlowestHostLog(job_name, self.straggler_window_seconds,
                                       self.straggler_log_every)

    @property
    def step_deviation_interval_seconds(self) -> float:
        """Seconds between step-deviation uploads (:attr:`MonitorOptions.step_interval`)."""
        return self.options.step_interval

    @property
    def slowest_host(self) -> int | None:
        """The slowest host of the last straggler upload (None: none yet, or one host)."""
        return self._slowest.slowest_host

    @property
    def hung(self) -> bool:
        """Whether the last hang check found the job hung (:meth:`upload_hang_status`)."""
        return self._hang.hung

    @property
    def poll_errors(self) -> int:
        """Polls that raised (each is logged)."""
        return self._uploaders.poll_errors

    @property
    def last_error(self) -> str | None:
        """The last poll's exception, as ``"Type: message"`` (None: none yet)."""
        return self._uploaders.last_error

    # ----------------------------------------------------------------- one poll each
    def _now(self) -> float:
        return to_timestamp(self._clock(), name="clock()")

    def upload_goodput(self) -> dict[str, float]:
        """Query the calculator once and write ``goodput/*``, ``badput/*``, ``model/*``
        (and ``step_time/*`` summaries with ``include_step_deviation``).

        Returns:
            The scalars written, by tag (empty if the job has no events yet).

        Example:
            >>> monitor.upload_goodput()["goodput/total"]  # doctest: +SKIP
            91.7
        """
        from goodput_jax.measure.calculator import NoEventsError

        calc = self.calculator
        try:
            goodput, badput, last_step = calc.get_job_goodput(
                include_badput_breakdown=self.badput_tags
            )
        except NoEventsError as e:
            _log.info("goodput monitor: nothing to upload yet (%s)", e)
            return {}
        ref = self.tag_layout == "reference"
        values: dict[str, float] = {("goodput/goodput" if ref else "goodput/total"): float(goodput)}
        if self.badput_tags:
            values.update(badput_scalars(badput, calc.get_job_goodput_details(),
                                         reference=ref, elastic=self.elastic_tags))
        if self.include_step_deviation:
            values.update(self._step_summary())
        values.update(hint_scalars(calc.get_latest_hints()))
        self._writer.write(int(last_step), values, self._now())
        values.update(self.upload_hang_status(last_step=int(last_step), flush=False))
        try:
            values.update(self.upload_stragglers(last_step=int(last_step), flush=False))
        except Exception as e:  # noqa: BLE001 - logged and counted; goodput was written
            self._uploaders.on_error("stragglers", e)
        if self.include_productivity:
            try:
                values.update(self.upload_productivity(last_step=int(last_step), flush=False))
            except Exception as e:  # noqa: BLE001 - logged and counted; goodput was written
                self._uploaders.on_error("productivity", e)
        self._writer.flush()
        return values

    # ----------------------------------------------------------------- productivity
    def upload_productivity(self, last_step: int | None = None, *, flush: bool = True
                            ) -> dict[str, float]:
        """Write the ``productivity/*`` tags (:func:`productivity_scalars`): scheduling,
        runtime and program goodput, ML Productivity Goodput, ETTR and MFU in %, each only
        when its figure exists; with Cloud Monitoring on and ``send_productivity_metrics``,
        send them (:meth:`CloudMonitoringExporter.productivity_metrics`) within the write
        rules.

        Runs in every goodput upload (with ``include_productivity``). The calculator's
        query is incremental (running totals; the program costs over the productive steps'
        times); scheduling goodput comes from the job's own events (elastic waits, the
        downtime between a crashed run and the next).

        Returns:
            The scalars written (empty when the job has no events).

        Example:
            >>> monitor.upload_productivity()  # doctest: +SKIP
            {'productivity/scheduling_goodput': 100.0, 'productivity/runtime_goodput': 91.6, ...}
        """
        from goodput_jax.measure.calculator import NoEventsError

        now = self._now()
        try:
            result = self.calculator.get_productivity_goodput(now=now)
        except NoEventsError:
            return {}
        values = productivity_scalars(result)
        if not values:
            return {}
        step = last_step if last_step is not None else self.last_step
        self._writer.write(int(step), values, now)
        if flush:
            self._writer.flush()
        gcm = self.goodput_exporter()
        if gcm is not None and self.send_productivity_metrics:
            gcm.send_productivity(result, now)
        return values

    # ----------------------------------------------------------------- stragglers
    @property
    def cloud_monitoring(self) -> CloudMonitoringExporter | None:
        """The Cloud Monitoring exporter this monitor sends with (None here; the
        drop-in ``goodput_jax.monitoring.GoodputMonitor`` returns its exporter)."""
        return None

    def goodput_exporter(self) -> CloudMonitoringExporter | None:
        """The exporter the goodput upload's own metrics (stragglers, productivity) go
        to: :attr:`cloud_monitoring` when it sends goodput metrics, else None (here
        always None; the drop-in's follows ``gcp_options.enable_gcp_goodput_metrics``)."""
        return None

    def upload_stragglers(self, last_step: int | None = None, *, flush: bool = True
                          ) -> dict[str, float]:
        """Write the ``stragglers/*`` tags (:func:`straggler_scalars`) over the last
        ``straggler_window_seconds``; log the slowest host when it changes (else at most
        every ``straggler_log_every`` uploads); with Cloud Monitoring on, send each slowest
        host's lost time and share labelled by host
        (:meth:`CloudMonitoringExporter.straggler_metrics`).

        Runs in every goodput upload. A job that one host records writes nothing.

        Returns:
            The scalars written (empty for one host, or a calculator without stragglers).

        Example:
            >>> monitor.upload_stragglers()["stragglers/slowest_host"]  # doctest: +SKIP
            1.0
        """
        now = self._now()
        w = self.straggler_window_seconds
        st = self.calculator.get_step_stragglers(since=None if w is None else now - w)
        values = straggler_scalars(st, self.straggler_top)
        if not values:
            return {}
        step = last_step if last_step is not None else self.last_step
        self._writer.write(int(step), values, now)
        if flush:
            self._writer.flush()
        self._slowest.update(st)
        gcm = self.goodput_exporter()
        if gcm is not None:
            gcm.send(gcm.straggler_metrics(st, top=self.straggler_top, window_seconds=w), now)
        return values

    # ----------------------------------------------------------------- hangs
    def seconds_since_last_step(self, now: float | None = None) -> tuple[float | None, bool]:
        """Seconds since the job's last step started or ended (or since its latest run
        started, before that run's first step), and whether the job has ended.

        Returns:
            ``(seconds or None when the job has no events, ended)``.

        Example:
            >>> monitor.seconds_since_last_step()  # doctest: +SKIP
            (0.8, False)
        """
        now = self._now() if now is None else float(now)
        last, ended = self._step_clock.poll()
        return (None if last is None else max(0.0, now - last)), ended

    def upload_hang_status(self, last_step: int | None = None, *, flush: bool = True
                           ) -> dict[str, float]:
        """Check for a hang now: write ``hang/seconds_since_last_step`` (and with a
        ``hang_threshold_seconds``, ``hang/hung`` 0/1); log when the job becomes hung
        and when it steps again. A job that has ended, or whose monitor is making the
        goodput uploader's final upload at stop, is not hung.

        Runs in every goodput upload; call it directly for one check.

        Returns:
            The scalars written (empty when the job has no events).

        Example:
            >>> monitor.upload_hang_status()  # doctest: +SKIP
            {'hang/seconds_since_last_step': 0.8, 'hang/hung': 0.0}
        """
        now = self._now()
        secs, ended = self.seconds_since_last_step(now)
        if secs is None:
            return {}
        values = self._hang.update(secs, ended=ended, stopping=self._stopping)
        step = last_step if last_step is not None else self._step_clock.last_step
        self._writer.write(int(step), values, now)
        if flush:
            self._writer.flush()
        return values

    # ----------------------------------------------------------------- writing
    def write_scalars(self, step: int, values: Mapping[str, float]) -> int:
        """Write scalars at ``step`` (wall time = the clock) into the monitor's event
        file and flush; for subclasses and callers adding their own tags.

        Returns:
            How many were written (0 once the monitor is closed).
        """
        n = self._writer.write(int(step), values, self._now())
        self._writer.flush()
        return n

    @staticmethod
    def window_tag(window: float) -> str:
        """The TensorBoard tag of a rolling window: ``goodput/interval_<W>s``.

        Example:
            >>> GoodputMonitor.window_tag(3600)
            'goodput/interval_3600s'
        """
        return window_tag(window)

    @property
    def clock(self) -> Callable[[], Any]:
        """The monitor's clock ("now" as UTC seconds or an aware datetime).

        ``Any``: the clock returns a time in any form
        :func:`~goodput_jax.measure.events.to_timestamp` accepts.
        """
        return self._clock

    @property
    def last_step(self) -> int:
        """The job's latest step number seen in the store (0 before any)."""
        self._step_clock.poll()
        return self._step_clock.last_step

    @property
    def rolling_windows(self) -> tuple[float, ...]:
        """The windows (s) of the running rolling-window uploader (empty if none)."""
        return self._rolling_windows

    def _step_stats(self) -> StepDeviation:
        return self.calculator.get_step_statistics()

    def _step_summary(self, dev: Any = None) -> dict[str, float]:
        """The ``step_time/*`` summary tags of ``dev`` (default: the calculator's now)."""
        dev = self._step_stats() if dev is None else dev
        if not dev.num_steps:
            return {}
        summary = dev.as_dict()
        out = {
            "step_time/median": summary["median"],
            "step_time/p90": summary["p90"],
            "step_time/mean": summary["mean"],
            "step_time/ideal": summary["ideal_step_time"],
            "step_time/max_abs_deviation": summary["max_abs_deviation"],
        }
        return {k: float(v) for k, v in out.items() if finite_number(v) is not None}

    def upload_step_deviation(self) -> dict[str, float]:
        """Write ``step_time/deviation`` for every step completed since the last
        upload (step = the step number), plus the ``step_time/*`` summaries.

        Returns:
            The summary scalars written, plus ``"points"``: new per-step values.
        """
        from goodput_jax.measure.calculator import NoEventsError

        try:
            dev = self._step_stats()
        except NoEventsError as e:
            _log.info("goodput monitor: no step times yet (%s)", e)
            return {}
        now = self._now()
        tag = "step_deviation" if self.tag_layout == "reference" else "step_time/deviation"
        with self._dev_lock:
            new = self.step_deviation_points(dev)
            if self.max_deviation_points and len(new) > self.max_deviation_points:
                new = new[-self.max_deviation_points:]
            elif not self.max_deviation_points:
                new = []
            points = self._writer.write_series(tag, new, now) if dev.num_steps else 0
        steps = [int(dev.steps[-1])] if dev.num_steps else []
        values = self._step_summary(dev)
        if dev.num_steps:
            self._writer.write(int(max(steps)), values, now)
        self._writer.flush()
        values["points"] = float(points)
        return values

    def step_deviation_points(self, dev: StepDeviation) -> list[tuple[int, float]]:
        """The ``(step, value)`` points an upload writes under the deviation tag (called under
        the uploader's lock): each step completed (or redone) since the last upload, its step
        time minus ``dev.ideal_step_time``. The drop-in overrides it with Google's rule."""
        steps_a, secs_a, self._dev_token = self.calculator.new_step_times(self._dev_token)
        return list(zip(steps_a.tolist(), (secs_a - dev.ideal_step_time).tolist()))

    def upload_rolling_window_goodput(
        self, window_seconds: float | Iterable[float] | None = None
    ) -> dict[str, float]:
        """Write ``goodput/interval_<W>s`` for each window ``W`` ending now.

        Args:
            window_seconds: one window or several (s); default: the windows of
                the running rolling-window uploader.
        """
        from goodput_jax.measure.calculator import NoEventsError

        windows = self._rolling_windows if window_seconds is None else check_windows(window_seconds)
        now = self._now()
        values: dict[str, float] = {}
        last_step = 0
        for w in windows:
            try:
                res = self.calculator.get_job_goodput_interval(now - w, now)
                pct, last_step = res[0], res[2]
            except NoEventsError as e:
                _log.info("goodput monitor: nothing to upload yet (%s)", e)
                return {}
            except ValueError as e:  # e.g. no job time inside the window
                _log.debug("goodput monitor: window %gs skipped: %s", w, e)
                continue
            values[window_tag(w)] = float(pct)
        self._writer.write(int(last_step), values, now)
        self._writer.flush()
        return values

    # ----------------------------------------------------------------- threads
    def _start(self, name: str, interval: float, poll: Callable[[], object]) -> bool:
        if not self.monitoring_enabled:
            _log.info("goodput monitor: monitoring is disabled; %s uploader not started", name)
            return False
        if name == "goodput":
            self._stopping = False
        return self._uploaders.start(name, interval, poll)

    def _stop(self, name: str, timeout: float | None, final: bool = True) -> bool:
        timeout = self.stop_timeout if timeout is None else nonnegative_seconds("timeout",
                                                                               timeout)
        if name == "goodput" and final and name in self._uploaders.names():
            self._stopping = True  # its final upload: the job is not hung, it is finishing
        done = self._uploaders.stop(name, timeout, final)
        self._writer.flush()
        return done

    def start_goodput_uploader(self) -> bool:
        """Start uploading ``goodput/*`` and ``badput/*`` every ``upload_interval``.

        Returns True if a thread was started (False if disabled or running).
        """
        return self._start("goodput", self.upload_interval, self.upload_goodput)

    def stop_goodput_uploader(self, timeout: float | None = None) -> bool:
        """Stop the goodput uploader after a final upload; bounded by ``timeout``.

        Returns True if the thread finished in time. Idempotent.
        """
        return self._stop("goodput", timeout)

    def start_step_deviation_uploader(self) -> bool:
        """Start uploading ``step_time/*`` every ``step_deviation_interval_seconds``."""
        return self._start(
            "step_deviation", self.step_deviation_interval_seconds, self.upload_step_deviation
        )

    def stop_step_deviation_uploader(self, timeout: float | None = None) -> bool:
        """Stop the step-deviation uploader (final upload, bounded, idempotent)."""
        return self._stop("step_deviation", timeout)

    def start_rolling_window_goodput_uploader(
        self, window_seconds: float | Iterable[float]
    ) -> bool:
        """Start uploading ``goodput/interval_<W>s`` for one or several windows.

        Args:
            window_seconds: a window length in seconds, or a list of them.
        """
        windows = check_windows(window_seconds)
        if self.monitoring_enabled:
            self._rolling_windows = windows
        return self._start("rolling_window", self.upload_interval,
                           self.upload_rolling_window_goodput)

    def stop_rolling_window_goodput_uploader(self, timeout: float | None = None) -> bool:
        """Stop the rolling-window uploader (final upload, bounded, idempotent)."""
        return self._stop("rolling_window", timeout)

    def close(self, timeout: float | None = None) -> bool:
        """Stop every uploader (sharing ``timeout``) and close the event file. Idempotent."""
        timeout = self.stop_timeout if timeout is None else nonnegative_seconds("timeout",
                                                                               timeout)
        ok = self._uploaders.stop_all(timeout, self._stop)
        if not self._uploaders.close():
            return ok
        self._writer.close()
        if self._owns_store and ok:
            self.calculator.store.close()
        return ok

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def event_file(self) -> str | None:
        """Path of the TensorBoard event file (None until the first upload)."""
        return self._writer.file_name
