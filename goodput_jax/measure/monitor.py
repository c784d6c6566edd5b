"""GoodputMonitor: uploads a job's goodput to TensorBoard from background threads.

Same constructor as Google's ml-goodput-measurement ``GoodputMonitor``
(``job_name, logger_name, tensorboard_dir, upload_interval,
monitoring_enabled``), but:

- every uploader is a **thread**, and all of them share **one** incremental,
  thread-safe :class:`~goodput_jax.measure.calculator.GoodputCalculator` (no
  processes, no shared cache file);
- ``stop_*`` is bounded by a timeout, ends with a final upload, and is
  idempotent; an exception in one poll is logged and counted, and the uploader
  keeps going;
- the store and the clock are injectable (``store=``, ``clock=``);
- it writes real TensorBoard event files (``EventFileWriter``, ``simple_value``
  scalars), only under ``tensorboard_dir``.

Tags (stable; see ``docs/tensorboard_tags.md``). ``step`` is the job's last
productive step unless noted:

=====================================  ==============================================
``goodput/total``                      goodput of the whole job so far (%)
``badput/<type>``                      badput of each cause (%), ``<type>`` is the
                                       lower-case :class:`BadputType` name, e.g.
                                       ``badput/data_loading``
``badput/custom/<label>``              custom badput per user label (%)
``goodput/productive_time``            productive seconds
``goodput/total_time``                 job seconds
``goodput/interval_<W>s``              goodput of the last ``W`` seconds (%)
``step_time/deviation``                step time minus ideal (s); step = step number
``step_time/median`` ``step_time/p90`` ``step_time/mean``
``step_time/ideal``                    configured or estimated ideal step time (s)
``step_time/max_abs_deviation``        largest ``|deviation|`` (s)
``model/gradient_noise_scale``         from the training hooks' hints (see below)
``model/efficiency`` ``model/suggested_batch_size`` ``model/predicted_speedup``
``model/init_batch_size`` ``model/grad_norm_sqr`` ``model/grad_variance``
``model/suggested_accumulation_steps`` ``model/suggested_atomic_batch_size``
``model/atomic_batch_size`` ``model/accumulation_steps`` ``model/num_replicas``
``model/num_nodes`` ``model/max_batch_size``
``hang/seconds_since_last_step``       seconds since the last step started or ended
                                       (or since the latest run started)
``hang/hung``                          1 once past ``hang_threshold_seconds``, else 0
``stragglers/*``                       only when several hosts record the job: the
                                       slowest hosts over the last
                                       ``straggler_window_seconds`` (see
                                       :func:`straggler_scalars`)
``productivity/scheduling_goodput``    ML Productivity Goodput's factors (%), each when
``productivity/runtime_goodput``       its figure exists (no program cost recorded: no
``productivity/program_goodput``       program goodput, MFU or product); see
``productivity/ml_productivity_goodput``  :func:`productivity_scalars`
``productivity/ettr`` ``productivity/mfu``
=====================================  ==============================================

Example:
    >>> monitor = GoodputMonitor("my-run", "goodput_my-run", "/tmp/tb", upload_interval=30,
    ...                          monitoring_enabled=True)          # doctest: +SKIP
    >>> monitor.start_goodput_uploader()                           # doctest: +SKIP
    >>> ...                                                        # doctest: +SKIP
    >>> monitor.stop_goodput_uploader()                            # doctest: +SKIP
"""

from __future__ import annotations

import logging
import math
import numbers
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Self

from goodput_jax.measure.badput import GOOGLE_NAMES
from goodput_jax.measure.events import to_timestamp
from goodput_jax.measure.monitor_calculator import (
    MonitorCalculator,
    MonitoredCalculator,
    check_calculator,
)
from goodput_jax.measure.tags import (  # noqa: F401 - HINT_TAGS, hint_scalars: public here too
    HINT_TAGS,
    PRODUCTIVITY_TAGS,
    finite_number,
    hint_scalars,
    productivity_scalars,
    straggler_scalars,
    tag_part,
    window_tag,
)
from goodput_jax.measure.tensorboard import ScalarEventWriter, check_tensorboard_dir

if TYPE_CHECKING:
    from goodput_jax.measure.calculator import StepDeviation
    from goodput_jax.measure.cloud_monitoring import CloudMonitoringExporter

_log = logging.getLogger(__name__)

class _StepClock:
    """The job's latest step time, read incrementally from the store (its own cursor)."""

    _STEP_KINDS = ("STEP_START", "STEP_END", "STEP_DEVICE_END")

    def __init__(self, store: Any, job_name: str):
        from goodput_jax.measure.events import KIND_CODES, EventKind

        self._store = store
        self._job = job_name
        self._cursor: Any = None
        self._step_codes = [KIND_CODES[EventKind[k]] for k in self._STEP_KINDS]
        self._start = KIND_CODES[EventKind.JOB_START]
        self._end = KIND_CODES[EventKind.JOB_END]
        self._lock = threading.Lock()
        self.last_step_t: float | None = None
        self.last_start_t: float | None = None
        self.last_end_t: float | None = None
        self.last_step = 0

    def poll(self) -> tuple[float | None, bool]:
        """``(time of the last step event or of the latest job start, ended)``."""
        import numpy as np

        with self._lock:
            while True:
                cols, self._cursor, done = self._store.read_columns(self._job, self._cursor,
                                                                    100_000)
                if cols is not None and cols["kind"].size:
                    kind, ts = cols["kind"], cols["ts"]
                    steps = np.isin(kind, self._step_codes)
                    if steps.any():
                        i = int(np.argmax(np.where(steps, ts, -np.inf)))
                        if self.last_step_t is None or ts[i] >= self.last_step_t:
                            self.last_step_t = float(ts[i])
                            self.last_step = max(int(cols["step"][i]), 0)
                    for code, attr in ((self._start, "last_start_t"), (self._end, "last_end_t")):
                        sel = ts[kind == code]
                        if sel.size:
                            old = getattr(self, attr)
                            setattr(self, attr, float(sel.max()) if old is None
                                    else max(old, float(sel.max())))
                if done:
                    break
            marks = [t for t in (self.last_step_t, self.last_start_t) if t is not None]
            last = max(marks) if marks else None
            ended = (self.last_end_t is not None
                     and (self.last_start_t is None or self.last_end_t >= self.last_start_t))
            return last, ended


class _Uploader:
    """One background thread: poll, wait ``interval``, repeat; a final poll on stop."""

    def __init__(self, name: str, interval: float, poll: Callable[[], Any], on_error):
        self.name = name
        self.interval = interval
        self._poll = poll
        self._on_error = on_error
        self._stop = threading.Event()
        self.final = True
        self.thread = threading.Thread(target=self._run, name=f"goodput-monitor-{name}", daemon=True)
        self.polls = 0

    def _safe_poll(self) -> None:
        try:
            self._poll()
        except Exception as e:  # noqa: BLE001 - logged and counted; the uploader keeps going
            self._on_error(self.name, e)
        finally:
            self.polls += 1

    def _run(self) -> None:
        while True:
            self._safe_poll()
            if self._stop.wait(self.interval):
                break
        if self.final:
            self._safe_poll()  # the final upload

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float, final: bool = True) -> bool:
        self.final = final
        self._stop.set()
        self.thread.join(timeout)
        return not self.thread.is_alive()


class GoodputMonitor:
    """Background uploader of a job's goodput to TensorBoard.

    Args:
        job_name: the job to monitor.
        logger_name: kept for drop-in compatibility (the store decides where
            events live); passed to the calculator.
        tensorboard_dir: directory for the TensorBoard event file (created);
            nothing is written outside it.
        upload_interval: seconds between uploads (> 0).
        monitoring_enabled: if False every ``start_*`` is a no-op (only one
            worker of a multi-host job should monitor, e.g. process 0).
        pathway_enabled: accepted for drop-in compatibility; ignored.
        include_badput_breakdown: write ``badput/<type>`` tags.
        include_step_deviation: also write the ``step_time/*`` summary tags
            from the goodput uploader.
        configured_ideal_step_time: ideal step time (s) for the step deviation;
            None = robust estimate.
        step_deviation_interval_seconds: interval of the step-deviation
            uploader (default ``upload_interval``).
        store: an EventStore, a store URL, or None (``$GOODPUT_JAX_STORE`` or
            ``./goodput.db``).
        clock: "now" as float UTC seconds (or aware datetime); default
            ``time.time``. Used by the calculator and as TensorBoard wall time.
        stop_timeout: default seconds a ``stop_*`` waits for its thread.
        calculator: an existing GoodputCalculator to share (advanced).
        max_deviation_points: at most this many new per-step deviations are
            written per upload (the newest).
        tag_layout: ``"goodput_jax"`` (tags below, in ``tensorboard_dir``) or
            ``"reference"``: ml-goodput-measurement's layout, in
            ``<tensorboard_dir>/goodput/`` with its tags (``goodput/goodput``,
            ``badput/tpu_initialization``, ``badput/data_loading_sync``,
            ``badput/custom_badput_events/<type>``, ``step_deviation``); our extra
            tags (``goodput/total_time``, ``step_time/*``, ``model/*``) sit beside them.
        hang_threshold_seconds: with it, each goodput upload also checks for a hang:
            once no step has started or ended for this long (and the job has not
            ended) the job is reported hung (a warning, ``hang/hung`` = 1, and in
            the drop-in the Cloud Monitoring ``hung`` metric) until a step comes;
            so a hang is reported within the threshold plus one ``upload_interval``.
            None = ``hang/seconds_since_last_step`` only.
        straggler_window_seconds: when several hosts record the job, each goodput upload
            also writes the ``stragglers/*`` tags over the steps of the last this many
            seconds (the comparison is O(steps), so the window bounds each upload's cost);
            None = the whole job.
        straggler_top: how many of the slowest hosts get their own ``stragglers/host_<h>/*``
            tags (and Cloud Monitoring series).
        straggler_log_every: the slowest host is logged when it changes, else at most once
            every this many goodput uploads (0: only when it changes).
        include_productivity: each goodput upload also writes the ``productivity/*`` tags
            (ML Productivity Goodput: scheduling, runtime and program goodput, their
            product, ETTR, MFU; :meth:`upload_productivity`).
        send_productivity_metrics: with Cloud Monitoring on (the drop-in monitor), also
            send them as ``custom.googleapis.com/goodput_jax/*`` metrics. Off by default:
            custom metrics are created in the project only when asked for.

    ``tensorboard_dir`` may be a ``gs://`` URL (needs ``gcsfs``, the ``gcp`` extra):
    event files are written through fsspec, no TensorFlow.

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

    def __init__(
        self,
        job_name: str,
        logger_name: str | None,
        tensorboard_dir: str | os.PathLike,
        upload_interval: float,
        monitoring_enabled: bool = False,
        pathway_enabled: bool = False,
        include_badput_breakdown: bool = True,
        include_step_deviation: bool = True,
        configured_ideal_step_time: float | None = None,
        step_deviation_interval_seconds: float | None = None,
        *,
        store: Any = None,
        clock: Callable[[], Any] | None = None,
        stop_timeout: float = 10.0,
        calculator: MonitoredCalculator | None = None,
        max_deviation_points: int = 10_000,
        tag_layout: str = "goodput_jax",
        hang_threshold_seconds: float | None = None,
        straggler_window_seconds: float | None = 3600.0,
        straggler_top: int = 3,
        straggler_log_every: int = 20,
        include_productivity: bool = True,
        send_productivity_metrics: bool = False,
    ) -> None:
        if tag_layout not in ("goodput_jax", "reference"):
            raise ValueError(
                f"tag_layout ({tag_layout!r}) must be 'goodput_jax' or 'reference'"
            )
        self.tag_layout = tag_layout
        if not isinstance(job_name, str) or not job_name:
            raise ValueError(f"job_name ({job_name!r}) must be a non-empty string")
        if not isinstance(tensorboard_dir, (str, os.PathLike)) or not os.fspath(tensorboard_dir):
            raise ValueError(f"tensorboard_dir ({tensorboard_dir!r}) must be a non-empty path")
        self.upload_interval = _positive("upload_interval", upload_interval)
        self.step_deviation_interval_seconds = (
            self.upload_interval
            if step_deviation_interval_seconds is None
            else _positive("step_deviation_interval_seconds", step_deviation_interval_seconds)
        )
        self.stop_timeout = _nonneg("stop_timeout", stop_timeout)
        self.hang_threshold_seconds = (None if hang_threshold_seconds is None else
                                       _positive("hang_threshold_seconds", hang_threshold_seconds))
        self.straggler_window_seconds = (
            None if straggler_window_seconds is None
            else _positive("straggler_window_seconds", straggler_window_seconds))
        for name, v in (("straggler_top", straggler_top),
                        ("straggler_log_every", straggler_log_every)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{name} ({v!r}) must be a non-negative int")
        self.straggler_top = straggler_top
        self.straggler_log_every = straggler_log_every
        for name, v in (("include_productivity", include_productivity),
                        ("send_productivity_metrics", send_productivity_metrics)):
            if not isinstance(v, bool):
                raise ValueError(f"{name} ({v!r}) must be True or False")
        self.include_productivity = include_productivity
        self.send_productivity_metrics = send_productivity_metrics
        check_tensorboard_dir(os.fspath(tensorboard_dir))
        if isinstance(max_deviation_points, bool) or not isinstance(max_deviation_points, int) \
                or max_deviation_points < 0:
            raise ValueError(
                f"max_deviation_points ({max_deviation_points!r}) must be a non-negative int"
            )
        if clock is not None and not callable(clock):
            raise TypeError(f"clock ({clock!r}) must be a callable returning UTC seconds")
        self.job_name = job_name
        self.logger_name = logger_name
        self.tensorboard_dir = os.fspath(tensorboard_dir)
        self.monitoring_enabled = bool(monitoring_enabled)
        self.pathway_enabled = bool(pathway_enabled)
        self.include_badput_breakdown = bool(include_badput_breakdown)
        self.include_step_deviation = bool(include_step_deviation)
        self.max_deviation_points = max_deviation_points
        self._clock = clock or time.time
        self._owns_store = False
        if calculator is None:
            from goodput_jax.measure.stores import resolve_store

            self._owns_store = store is None or isinstance(store, str)
            calculator = MonitorCalculator(
                job_name,
                logger_name,
                store=resolve_store(store),
                clock=self._clock,
                configured_ideal_step_time=configured_ideal_step_time,
            )
        self.calculator: MonitoredCalculator = check_calculator(calculator)
        self.configured_ideal_step_time = configured_ideal_step_time
        self._writer = ScalarEventWriter(
            os.path.join(self.tensorboard_dir, "goodput") if tag_layout == "reference"
            else self.tensorboard_dir
        )
        self._lock = threading.Lock()
        self._uploaders: dict[str, _Uploader] = {}
        self._rolling_windows: tuple[float, ...] = ()
        self._dev_token: Any = None
        self._dev_lock = threading.Lock()
        self._step_clock = _StepClock(self.calculator.store, job_name)
        #: Whether the last hang check found the job hung (see :meth:`upload_hang_status`).
        self.hung = False
        #: Set while the goodput uploader makes its final upload at stop: the process is
        #: finishing, so the hang check reports the job not hung (MaxText stops the
        #: monitor before it records the job end).
        self._stopping = False
        #: The slowest host of the last straggler upload (None: none yet, or one host).
        self.slowest_host: int | None = None
        self._straggler_uploads = 0
        #: Polls that raised (each is logged).
        self.poll_errors = 0
        self.last_error: str | None = None
        self._closed = False

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
                include_badput_breakdown=self.include_badput_breakdown
            )
        except NoEventsError as e:
            _log.info("goodput monitor: nothing to upload yet (%s)", e)
            return {}
        ref = self.tag_layout == "reference"
        values: dict[str, float] = {("goodput/goodput" if ref else "goodput/total"): float(goodput)}
        if self.include_badput_breakdown:
            for kind, pct in badput.items():
                if ref:
                    name = GOOGLE_NAMES.get(kind.name, kind.name)
                    if kind.name == "CUSTOM_BADPUT_EVENTS" or isinstance(pct, dict):
                        continue
                    if name.startswith("ELASTIC_") and not self.elastic_tags:
                        continue
                    if kind.name == "RECOMPILATION" and not pct:
                        continue
                    values[f"badput/{name.lower()}"] = float(pct)
                elif not isinstance(pct, dict):
                    values[f"badput/{kind.name.lower()}"] = float(pct)
            details = calc.get_job_goodput_details()
            total = float(details["total_time"])
            values["goodput/productive_time"] = float(details["productive_time"])
            values["goodput/total_time"] = total
            if total > 0:
                prefix = "badput/custom_badput_events/" if ref else "badput/custom/"
                for label, secs in sorted(details.get("custom_badput_time", {}).items()):
                    values[prefix + tag_part(label.lower() if ref else label)] = \
                        100.0 * float(secs) / total
        if self.include_step_deviation:
            values.update(self._step_summary())
        values.update(hint_scalars(calc.get_latest_hints()))
        self._writer.write(int(last_step), values, self._now())
        values.update(self.upload_hang_status(last_step=int(last_step), flush=False))
        try:
            values.update(self.upload_stragglers(last_step=int(last_step), flush=False))
        except Exception as e:  # noqa: BLE001 - logged and counted; goodput was written
            self._on_error("stragglers", e)
        if self.include_productivity:
            try:
                values.update(self.upload_productivity(last_step=int(last_step), flush=False))
            except Exception as e:  # noqa: BLE001 - logged and counted; goodput was written
                self._on_error("productivity", e)
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
        self._log_slowest(st)
        gcm = self.goodput_exporter()
        if gcm is not None:
            gcm.send(gcm.straggler_metrics(st, top=self.straggler_top, window_seconds=w), now)
        return values

    def _log_slowest(self, st: Any) -> None:
        self._straggler_uploads += 1
        top = st.slowest(1)
        slowest = top[0].host if top else None
        changed = slowest != self.slowest_host
        self.slowest_host = slowest
        every = self.straggler_log_every
        if not (changed or (every and self._straggler_uploads >= every)):
            return
        self._straggler_uploads = 0
        span = ("the whole job" if self.straggler_window_seconds is None
                else f"the last {self.straggler_window_seconds:g}s")
        if not top:
            _log.info("goodput monitor: job %r: no host held a step back (%d hosts, %d steps "
                      "compared, %s)", self.job_name, st.num_hosts, st.steps.size, span)
            return
        h = top[0]
        # (the job share is against the whole job's time: shown for a whole-job query only)
        job = (f", {100 * h.job_share:.1f}% of job time"
               if self.straggler_window_seconds is None and math.isfinite(h.job_share) else "")
        _log.info("goodput monitor: job %r: slowest host %d held back %d of %d steps, "
                  "%.3fs lost (%.1f%% of straggler time%s; %d hosts, %s)", self.job_name,
                  h.host, h.steps_last, st.steps.size, h.lost_time, 100 * h.share, job,
                  st.num_hosts, span)

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
        values = {"hang/seconds_since_last_step": secs}
        thr = self.hang_threshold_seconds
        if thr is not None:
            hung = not ended and not self._stopping and secs >= thr
            if hung and not self.hung:
                _log.warning("goodput monitor: job %r is hung: no step for %.1fs "
                             "(hang_threshold_seconds=%g)", self.job_name, secs, thr)
            elif self.hung and not hung:
                _log.info("goodput monitor: job %r %s", self.job_name,
                          "ended" if ended else "is finishing (monitor stopped)"
                          if self._stopping else "is stepping again")
            self.hung = hung
            values["hang/hung"] = 1.0 if hung else 0.0
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
        """The monitor's clock ("now" as UTC seconds or an aware datetime)."""
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
            # only the steps completed (or redone after a rollback) since the last poll
            steps_a, secs_a, self._dev_token = self.calculator.new_step_times(self._dev_token)
            new = list(zip(steps_a.tolist(), (secs_a - dev.ideal_step_time).tolist()))
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

    def upload_rolling_window_goodput(
        self, window_seconds: float | Iterable[float] | None = None
    ) -> dict[str, float]:
        """Write ``goodput/interval_<W>s`` for each window ``W`` ending now.

        Args:
            window_seconds: one window or several (s); default: the windows of
                the running rolling-window uploader.
        """
        from goodput_jax.measure.calculator import NoEventsError

        windows = self._rolling_windows if window_seconds is None else _windows(window_seconds)
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
    def _on_error(self, name: str, exc: BaseException) -> None:
        with self._lock:
            self.poll_errors += 1
            first = self.poll_errors == 1
        self.last_error = f"{type(exc).__name__}: {exc}"
        if first:
            _log.warning("goodput monitor: %s upload failed; will retry", name, exc_info=exc)
        else:
            _log.warning("goodput monitor: %s upload failed (%s); will retry",
                         name, self.last_error)

    def _start(self, name: str, interval: float, poll: Callable[[], Any]) -> bool:
        if not self.monitoring_enabled:
            _log.info("goodput monitor: monitoring is disabled; %s uploader not started", name)
            return False
        with self._lock:
            if self._closed:
                raise RuntimeError("GoodputMonitor is closed")
            running = self._uploaders.get(name)
            if running is not None and running.thread.is_alive():
                _log.info("goodput monitor: %s uploader already running", name)
                return False
            up = _Uploader(name, interval, poll, self._on_error)
            self._uploaders[name] = up
            if name == "goodput":
                self._stopping = False
            up.start()
        return True

    def _stop(self, name: str, timeout: float | None, final: bool = True) -> bool:
        timeout = self.stop_timeout if timeout is None else _nonneg("timeout", timeout)
        with self._lock:
            up = self._uploaders.pop(name, None)
        if up is None:
            return True
        if name == "goodput" and final:
            self._stopping = True  # its final upload: the job is not hung, it is finishing
        done = up.stop(timeout, final)
        if not done:
            _log.warning(
                "goodput monitor: %s uploader did not finish within %.3gs "
                "(the store may be hanging); left it behind as a daemon thread",
                name, timeout,
            )
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
        windows = _windows(window_seconds)
        if self.monitoring_enabled:
            self._rolling_windows = windows
        return self._start("rolling_window", self.upload_interval, self.upload_rolling_window_goodput)

    def stop_rolling_window_goodput_uploader(self, timeout: float | None = None) -> bool:
        """Stop the rolling-window uploader (final upload, bounded, idempotent)."""
        return self._stop("rolling_window", timeout)

    def close(self, timeout: float | None = None) -> bool:
        """Stop every uploader (sharing ``timeout``) and close the event file. Idempotent."""
        timeout = self.stop_timeout if timeout is None else _nonneg("timeout", timeout)
        deadline = time.monotonic() + timeout
        ok = True
        for name in list(self._uploaders):
            ok &= self._stop(name, max(0.0, deadline - time.monotonic()))
        with self._lock:
            if self._closed:
                return ok
            self._closed = True
        self._writer.close()
        if self._owns_store and ok:
            self.calculator.store.close()
        return ok

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def event_file(self) -> str | None:
        """Path of the TensorBoard event file (None until the first upload)."""
        return self._writer.file_name


def _positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} ({value!r}) must be a positive number of seconds")
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} ({value!r}) must be a positive finite number of seconds")
    return v


def _nonneg(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} ({value!r}) must be a number of seconds")
    v = float(value)
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"{name} ({value!r}) must be a finite number of seconds >= 0")
    return v


def check_windows(window_seconds: Any) -> tuple[float, ...]:
    """Rolling windows as sorted unique positive seconds (one number or a list).

    Raises:
        TypeError, ValueError: naming ``window_seconds`` and the value.

    Example:
        >>> check_windows([900, 60, 60])
        (60.0, 900.0)
    """
    return _windows(window_seconds)


def _windows(window_seconds: Any) -> tuple[float, ...]:
    if isinstance(window_seconds, (str, bytes)):
        raise TypeError(f"window_seconds ({window_seconds!r}) must be a number or a list of numbers")
    if isinstance(window_seconds, numbers.Real):
        items = [window_seconds]
    else:
        try:
            items = list(window_seconds)
        except TypeError:
            raise TypeError(
                f"window_seconds ({window_seconds!r}) must be a number or a list of numbers"
            ) from None
    if not items:
        raise ValueError("window_seconds ([]) must name at least one window")
    return tuple(sorted({_positive("window_seconds", w) for w in items}))
