"""GoodputRecorder: non-blocking goodput hooks for a training loop.

Drop-in for ml-goodput-measurement's ``GoodputRecorder``: every ``record_*``
method has the same name and arguments, plus context managers for each
start/end pair. The training thread only validates its arguments and appends a
tuple to a bounded in-memory queue; a background thread writes batches to the
store, retrying a failing store with exponential backoff (warned once, counted
in :attr:`GoodputRecorder.dropped_count`). The queue is flushed at interpreter
exit. This queue is the only asynchronous buffer: stores write synchronously
inside ``append`` (Cloud Logging included), so the writer thread is the one that
waits on the network. A store that gives up on a batch without raising (Cloud
Logging after its ``retry_deadline``, or on a permanent error) counts it in its
own ``stats()``; :attr:`dropped_count` counts what never reached the store.

Example:
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "goodput.db")
    >>> rec = GoodputRecorder("job", "goodput_job", logging_enabled=True,
    ...                       store="sqlite:///" + path)
    >>> with rec.job():
    ...     for step in range(3):
    ...         with rec.step(step):
    ...             pass
    >>> rec.flush()
    True
    >>> rec.close()
"""

from __future__ import annotations

import atexit
import collections
import json
import logging
import math
import numbers
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, Self

__all__ = ["GoodputRecorder", "JobEndedError", "JobState", "RecorderOptions", "Rerun",
           "StepSink"]

from goodput_jax.measure import live
from goodput_jax.measure.events import KIND_CODES as _K
from goodput_jax.measure.events import (
    KINDS_BY_CODE,
    EventKind,
    TimeLike,
    check_job_name,
    check_step,
    new_run_id,
    to_timestamp,
)
from goodput_jax.measure.lifecycle import JobEndedError, JobLifecycle, JobState, Rerun
from goodput_jax.measure.options import RecorderOptions
from goodput_jax.measure.productivity import ProgramCost
from goodput_jax.measure.recorder_spans import SpanContexts, check_label
from goodput_jax.measure.sink import StepSink
from goodput_jax.measure.stores import EventStore, resolve_store
from goodput_jax.measure.writer import EventWriter

logger = logging.getLogger(__name__)

_JOB_START, _JOB_END = _K[EventKind.JOB_START], _K[EventKind.JOB_END]
_STEP_START, _STEP_END = _K[EventKind.STEP_START], _K[EventKind.STEP_END]
_STEP_DEVICE_END = _K[EventKind.STEP_DEVICE_END]

class GoodputRecorder(SpanContexts):
    """Records goodput events from the training loop without blocking it.

    Args:
        job_name: the job's name (all runs of one job share it).
        logger_name: kept for drop-in compatibility (the store decides where events go).
        logging_enabled: record only when True (e.g. ``jax.process_index() == 0``);
            when False every call is a cheap no-op.
        store: EventStore, store URL, or None (``$GOODPUT_JAX_STORE`` or ``./goodput.db``).
            Keyword-only (Google's drop-in takes ``cloud_logger`` fourth).
        options: :class:`RecorderOptions` (clock, host, run id, queue and writer, rerun
            policy); validated once.
        **keywords: the fields of :class:`RecorderOptions` as keywords
            (``clock=..., synchronous=True``), translated into ``options`` in one place
            (:meth:`RecorderOptions.merged`); not both.

    Raises:
        ValueError / TypeError: bad arguments (named in the message).

    Example:
        >>> rec = GoodputRecorder("job", "log")  # disabled: no store is opened
        >>> rec.record_step_start_time(0)
    """

    def __init__(
        self,
        job_name: str,
        logger_name: str | None = None,
        logging_enabled: bool = False,
        *,
        store: EventStore | str | None = None,
        options: RecorderOptions | None = None,
        **keywords: Any,
    ):
        """``Any``: the old keyword arguments, each checked as it becomes a field of the options
        (an unknown one is a one-line TypeError).
        """
        check_job_name(job_name)
        opts = RecorderOptions.merged(options, keywords)
        self.options = opts
        self.job_name = job_name
        self.logger_name = logger_name
        self._enabled = bool(logging_enabled)
        self._clock = opts.clock or time.time
        self._host = 0 if opts.host is None else opts.host
        self._run_id = opts.run_id or new_run_id()
        self._q: collections.deque = collections.deque()
        self._closed = False
        self._sync = opts.synchronous
        self._open: dict[tuple[int, str | None], int] = {}
        self._open_lock = threading.Lock()
        self._store: EventStore | None = None
        self._owns_store = False
        self._writer: EventWriter | None = None
        self._sink: StepSink | None = None
        #: called (no arguments) before a badput span's start is stamped; see
        #: add_span_start_listener (a tuple: read without a lock, replaced on change)
        self._span_listeners: tuple[Callable[[], object], ...] = ()
        self._lifecycle = JobLifecycle(job_name)
        self._ended = False  # mirror of the lifecycle's ENDED, read on the hot path
        if not self._enabled:
            return
        self._owns_store = store is None or isinstance(store, str)
        self._store = resolve_store(store)
        live.register(self, self._store)  # a calculator in this process reads our writes
        self._writer = EventWriter(self._q, self._store, (job_name, self._run_id, self._host),
                                   opts, self._lifecycle)
        self._sink = self._writer.sink
        ref = weakref.ref(self)

        def _at_exit() -> None:
            rec = ref()
            if rec is not None:
                rec.close(timeout=10.0)

        self._atexit = _at_exit
        atexit.register(_at_exit)

    # ------------------------------------------------------------- properties
    @property
    def run_id(self) -> str:
        """Id of this process launch, stored with every event."""
        return self._run_id

    @property
    def dropped_count(self) -> int:
        """Events lost: queue full, or store writes that failed after all retries."""
        return 0 if self._writer is None else self._writer.dropped

    @property
    def written_count(self) -> int:
        """Events durably written to the store."""
        return 0 if self._writer is None else self._writer.written

    @property
    def writer_cpu_seconds(self) -> float:
        """CPU seconds the background writer thread has spent writing events so far
        (``time.thread_time`` around each drain; 0.0 when synchronous or disabled).

        The recorder's cost off the training thread: on a host whose cores the
        device's work also uses, it is time taken from the step.
        """
        return 0.0 if self._writer is None or self._sync else self._writer.cpu_seconds

    @property
    def store(self) -> EventStore | None:
        """The store written to (None when logging is disabled)."""
        return self._store

    @property
    def logging_enabled(self) -> bool:
        return self._enabled

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (read-only; nothing is recorded after it).

        Example:
            >>> rec = GoodputRecorder("job", "goodput_job", logging_enabled=False)
            >>> rec.closed, (rec.close(), rec.closed)[1]
            (False, True)
        """
        return self._closed

    # ------------------------------------------------------------ listeners
    def add_span_start_listener(self, listener: Callable[[], object]) -> None:
        """Call ``listener()`` on the recording thread right before each badput span's
        start is stamped (data loading, checkpoint save / restore, custom badput, init,
        preparation, startup, and the elastic spans), before its timestamp is taken.

        The seam for observers of device work: ``runtime.StepRecorder`` uses it to record a
        step that is already ready when the loop starts loading the next batch, so the
        step's device end lies before the span (engine rule 25 lets a span give way to
        recorded device work only). A listener must be cheap and must not record events;
        one that raises is logged once and removed. Adding one twice is a no-op; nothing
        is called on a disabled recorder.

        Raises:
            TypeError: ``listener`` is not callable.

        Example:
            >>> rec = GoodputRecorder("job", "l")
            >>> rec.add_span_start_listener(print); rec.remove_span_start_listener(print)
        """
        if not callable(listener):
            raise TypeError(f"listener ({listener!r}) must be callable with no arguments")
        with self._open_lock:
            if listener not in self._span_listeners:
                self._span_listeners = (*self._span_listeners, listener)

    def remove_span_start_listener(self, listener: Callable[[], object]) -> None:
        """Stop calling ``listener`` (one added with :meth:`add_span_start_listener`;
        removing one that is not there is a no-op)."""
        with self._open_lock:
            self._span_listeners = tuple(f for f in self._span_listeners if f != listener)

    def _span_starting(self) -> None:
        for listener in self._span_listeners:
            try:
                listener()
            except Exception:
                logger.exception("goodput recorder: span-start listener %r failed; removed",
                                 listener)
                self.remove_span_start_listener(listener)

    # ----------------------------------------------------------- hot path
    def _now(self) -> float:
        t = self._clock()
        return t if type(t) is float else to_timestamp(t, name="clock()")

    def _put(self, code: int, t: float, step: int | None, label: str | None, payload: Any) -> None:
        if self._ended:
            self._lifecycle.refuse(f"a {KINDS_BY_CODE[code].value} event")
            return
        sink = self._sink
        if sink is not None:  # (None only while disabled: the callers returned already)
            sink.put(code, t, step, label, payload)

    def step_sink(self) -> StepSink | None:
        """The fast path for a per-step hot loop: a :class:`StepSink` on this recorder's queue.

        Its ``start(step)`` / ``device_end(step, t)`` enqueue as
        :meth:`record_step_start_time` / :meth:`record_step_device_end_time` do (same
        queue, order, drop rule and counters) without their argument checks beyond the
        step. None when the plain calls must be used: logging disabled, ``synchronous``
        (each event is written inline), or a custom ``clock`` (the sink stamps with
        ``time.time()``).

        Example:
            >>> GoodputRecorder("j", "l").step_sink() is None   # disabled
            True
        """
        if self._sync or self._clock is not time.time:
            return None
        return self._sink

    def record_step_start_time(self, step: int, start_time: TimeLike | None = None) -> None:
        """Record the start of training step ``step`` (non-negative int).

        Args:
            step: the step number; a step lower than an earlier one is a restart.
            start_time: optional backfill time (aware datetime or UTC seconds).

        Example:
            >>> GoodputRecorder("j", "l").record_step_start_time(5)
        """
        if not self._enabled:
            return
        if type(step) is not int or step < 0:
            step = check_step(step)
        if start_time is None:
            t = self._clock()
            if type(t) is not float:
                t = to_timestamp(t, name="clock()")
        else:
            t = to_timestamp(start_time, name="start_time")
        if self._ended:
            self._lifecycle.refuse(f"step {step}'s start")
            return
        sink = self._sink
        if sink is not None:  # (None only while disabled, which returned above)
            sink.put(_STEP_START, t, step)

    def record_step_end_time(self, step: int, end_time: TimeLike | None = None) -> None:
        """Record the end of step ``step`` (optional; the next step start also ends it)."""
        if not self._enabled:
            return
        step = check_step(step)
        t = self._now() if end_time is None else to_timestamp(end_time, name="end_time")
        self._put(_STEP_END, t, step, None, None)

    def _record(self, kind: EventKind, when: Any, argname: str,
                step: int | None = None, label: str | None = None) -> None:
        if not self._enabled:
            return
        if self._ended and kind is not EventKind.JOB_START:
            self._lifecycle.refuse(f"a {kind.value} event")
            return
        span_start = kind.value.endswith("_start") and kind not in (EventKind.JOB_START,
                                                                     EventKind.STEP_START)
        if span_start and self._span_listeners:
            self._span_starting()
        t = self._now() if when is None else to_timestamp(when, name=argname)
        if step is not None:
            step = check_step(step)
        code = _K[kind]
        if span_start:
            with self._open_lock:
                key = (code, label)
                self._open[key] = self._open.get(key, 0) + 1
        elif kind.value.endswith("_end") and kind not in (EventKind.JOB_END, EventKind.STEP_END):
            start = _K[EventKind(kind.value[: -len("_end")] + "_start")]
            with self._open_lock:
                key = (start, label)
                n = self._open.get(key, 0)
                if n <= 0:
                    what = f" with custom_badput_event_type={label!r}" if label is not None else ""
                    raise ValueError(
                        f"{kind.value} recorded{what} without a matching "
                        f"{KINDS_BY_CODE[start].value}; nothing was recorded"
                    )
                self._open[key] = n - 1
        self._put(code, t, step, label, None)

    def record_job_start_time(self, start_time: TimeLike | None = None) -> None:
        """Record the job's (this run's) start: NOT_STARTED (or ENDED) -> RUNNING.

        The recorder's first start applies its ``rerun`` option when the job's last run
        in the store ended cleanly (:class:`~goodput_jax.measure.lifecycle.Rerun`).

        Raises:
            JobEndedError: that run ended and ``rerun`` is ``"refuse"``.
        """
        if self._enabled:
            self._lifecycle.check_rerun(self.options.rerun, self._store, self._run_id)
        self._record(EventKind.JOB_START, start_time, "start_time")
        self._lifecycle.start()
        self._ended = False

    def record_job_end_time(self, end_time: TimeLike | None = None) -> None:
        """Record the job's (this run's) clean end: -> ENDED. A run without it counts as
        crashed. Later events are refused (warned once) until a new job start; span-start
        listeners are called first, so a step recorder books the device ends it sees."""
        if self._ended:
            if self._enabled:
                self._lifecycle.refuse("a second job end")
            return
        if self._enabled and self._span_listeners and end_time is None:
            self._span_starting()
        self._record(EventKind.JOB_END, end_time, "end_time")
        self._lifecycle.end()
        self._ended = True

    @property
    def job_state(self) -> JobState:
        """Where this recorder's job is (also when disabled).

        Example:
            >>> rec = GoodputRecorder("job", "goodput_job")
            >>> rec.job_state, (rec.record_job_start_time(), rec.job_state)[1]
            (<JobState.NOT_STARTED: 'not_started'>, <JobState.RUNNING: 'running'>)
        """
        return self._lifecycle.state

    @property
    def lifecycle(self) -> JobLifecycle:
        """The job's :class:`~goodput_jax.measure.lifecycle.JobLifecycle` (its transitions
        are methods: the elastic recorder opens and closes waits on it)."""
        return self._lifecycle

    @property
    def refused_count(self) -> int:
        """Events refused because they came after the job end (see :attr:`job_state`)."""
        return self._lifecycle.refused

    @property
    def job_started(self) -> bool:
        """Whether this recorder recorded a job start and no job end since (also when
        disabled): ``runtime.start_job`` or ``record_job_start_time`` was called. Code that
        composes with a loop's own recorder (``GoodputHooks.job()``) joins that job instead
        of recording a second start.

        Example:
            >>> rec = GoodputRecorder("job", "goodput_job")
            >>> rec.job_started, (rec.record_job_start_time(), rec.job_started)[1]
            (False, True)
        """
        return self._lifecycle.started

    def record_tpu_init_start_time(self, start_time: TimeLike | None = None) -> None:
        """Record the start of accelerator (TPU/GPU) initialization."""
        self._record(EventKind.ACCELERATOR_INIT_START, start_time, "start_time")

    def record_tpu_init_end_time(self, end_time: TimeLike | None = None) -> None:
        """Record the end of accelerator initialization."""
        self._record(EventKind.ACCELERATOR_INIT_END, end_time, "end_time")

    def record_training_preparation_start_time(self, start_time: TimeLike | None = None) -> None:
        """Record the start of training preparation (model, optimizer, checkpoint manager)."""
        self._record(EventKind.TRAINING_PREP_START, start_time, "start_time")

    def record_training_preparation_end_time(self, end_time: TimeLike | None = None) -> None:
        """Record the end of training preparation."""
        self._record(EventKind.TRAINING_PREP_END, end_time, "end_time")

    def record_program_startup_start_time(self, start_time: TimeLike | None = None) -> None:
        """Record the start of program startup (tracing / compilation)."""
        self._record(EventKind.PROGRAM_STARTUP_START, start_time, "start_time")

    def record_program_startup_end_time(self, end_time: TimeLike | None = None) -> None:
        """Record the end of program startup."""
        self._record(EventKind.PROGRAM_STARTUP_END, end_time, "end_time")

    def record_data_loading_start_time(self, start_time: TimeLike | None = None) -> None:
        """Record the start of synchronous (blocking) data loading."""
        self._record(EventKind.DATA_LOADING_START, start_time, "start_time")

    def record_data_loading_end_time(self, end_time: TimeLike | None = None) -> None:
        """Record the end of synchronous data loading."""
        self._record(EventKind.DATA_LOADING_END, end_time, "end_time")

    def record_checkpoint_save_start_time(self, step: int | None = None,
            start_time: TimeLike | None = None) -> None:
        """Record the start of a blocking checkpoint save (of ``step``)."""
        self._record(EventKind.CHECKPOINT_SAVE_START, start_time, "start_time", step=step)

    def record_checkpoint_save_end_time(self, step: int | None = None,
            end_time: TimeLike | None = None) -> None:
        """Record the end of a blocking checkpoint save."""
        self._record(EventKind.CHECKPOINT_SAVE_END, end_time, "end_time", step=step)

    def record_checkpoint_restore_start_time(self, step: int | None = None,
            start_time: TimeLike | None = None) -> None:
        """Record the start of a checkpoint restore (of ``step``)."""
        self._record(EventKind.CHECKPOINT_RESTORE_START, start_time, "start_time", step=step)

    def record_checkpoint_restore_end_time(self, step: int | None = None,
            end_time: TimeLike | None = None) -> None:
        """Record the end of a checkpoint restore."""
        self._record(EventKind.CHECKPOINT_RESTORE_END, end_time, "end_time", step=step)

    def record_custom_badput_event_start_time(
        self, start_time: TimeLike | None = None, custom_badput_event_type: str = "unknown"
    ) -> None:
        """Record the start of a custom badput event (evaluation, SDC check, ...)."""
        self._record(EventKind.CUSTOM_BADPUT_START, start_time, "start_time",
                     label=check_label(custom_badput_event_type))

    def record_custom_badput_event_end_time(
        self, end_time: TimeLike | None = None, custom_badput_event_type: str = "unknown"
    ) -> None:
        """Record the end of a custom badput event of the same type."""
        self._record(EventKind.CUSTOM_BADPUT_END, end_time, "end_time",
                     label=check_label(custom_badput_event_type))

    def record_checkpoint_progress(self, step: int, checkpoint_start_time: TimeLike) -> None:
        """Record that a checkpoint containing progress up to ``step`` started at the given time."""
        if not self._enabled:
            return
        t = to_timestamp(checkpoint_start_time, name="checkpoint_start_time")
        self._put(_K[EventKind.CHECKPOINT_PROGRESS], t, check_step(step), None, None)

    def record_hints(self, hints: dict, timestamp: TimeLike | None = None) -> None:
        """Publish model-side hints (a JSON-serialisable dict) for the monitor / scheduler.

        Example:
            >>> GoodputRecorder("j", "l").record_hints({"gradient_noise_scale": 3.0})
        """
        if not self._enabled:
            return
        if not isinstance(hints, dict):
            raise TypeError(f"hints ({hints!r}) must be a dict")
        try:
            json.dumps(hints)
        except (TypeError, ValueError) as e:
            raise ValueError(f"hints ({hints!r}) must be JSON-serialisable: {e}") from None
        t = self._now() if timestamp is None else to_timestamp(timestamp, name="timestamp")
        self._put(_K[EventKind.HINTS], t, None, None, dict(hints))

    def record_program_cost(self, cost: ProgramCost, step: int | None = None,
                            timestamp: TimeLike | None = None) -> None:
        """Record a compiled step program's cost (XLA's cost analysis, per device).

        Fed by the JAX runtime capture (``goodput_jax.runtime.StepRecorder``) when a step
        program is first seen; ``step`` is the first step run with it. The calculator's
        :meth:`~goodput_jax.measure.calculator.GoodputCalculator.get_program_goodput`
        reads it (MFU, roofline, program goodput).

        Example:
            >>> from goodput_jax.measure.productivity import ProgramCost
            >>> GoodputRecorder("j", "l").record_program_cost(
            ...     ProgramCost("jit(step)", 2e9, 0.0, 1e7, "cpu"), step=0)
        """
        if not self._enabled:
            return
        if not isinstance(cost, ProgramCost):
            raise TypeError(
                f"cost ({cost!r}) must be a goodput_jax.measure.productivity.ProgramCost")
        t = self._now() if timestamp is None else to_timestamp(timestamp, name="timestamp")
        self._put(_K[EventKind.PROGRAM_COST], t, None if step is None else check_step(step),
                  None, cost.to_payload())

    def record_compilation(self, duration_s: float, end_time: TimeLike | None = None, *,
                           recompile: bool = False, name: str = "") -> None:
        """Record one JAX compilation of ``duration_s`` seconds that ended at ``end_time``.

        Fed automatically by the JAX runtime capture (``jax.monitoring`` listeners);
        the calculator counts measured compilations as program startup (the first
        compile of a run) or recompilation badput (``recompile=True``), and measured
        time replaces the first-step guess.

        Example:
            >>> GoodputRecorder("j", "l").record_compilation(0.25, recompile=False, name="step")
        """
        if not self._enabled:
            return
        if isinstance(duration_s, bool) or not isinstance(duration_s, numbers.Real) \
                or not math.isfinite(duration_s) or duration_s < 0:
            raise ValueError(f"duration_s ({duration_s!r}) must be a finite number >= 0")
        if not isinstance(name, str):
            raise TypeError(f"name ({name!r}) must be a str")
        t = self._now() if end_time is None else to_timestamp(end_time, name="end_time")
        self._put(_K[EventKind.COMPILATION], t, None, None,
                  {"duration_s": float(duration_s), "recompile": bool(recompile), "name": name})

    def record_step_device_end_time(self, step: int, end_time: TimeLike | None = None) -> None:
        """Record that the device finished step ``step`` (its outputs are ready).

        The non-stalling step recorder calls this one step late, when it observes
        readiness, with the time readiness was first seen.

        Example:
            >>> GoodputRecorder("j", "l").record_step_device_end_time(3)
        """
        if not self._enabled:
            return
        if type(step) is not int or step < 0:
            step = check_step(step)
        t = self._now() if end_time is None else to_timestamp(end_time, name="end_time")
        self._put(_STEP_DEVICE_END, t, step, None, None)

    # ------------------------------------------------------------- writer
    def flush(self, timeout: float | None = None) -> bool:
        """Write everything recorded so far; True when all of it reached the store.

        Args:
            timeout: seconds to wait (None: until written or dropped after retries).

        Example:
            >>> GoodputRecorder("j", "l").flush()
            True
        """
        return True if self._writer is None else self._writer.flush(timeout)

    def close(self, timeout: float | None = 30.0) -> None:
        """Flush, stop the writer thread and close the store if this recorder opened it."""
        if self._closed:
            return
        self._closed = True
        if self._writer is None:
            return
        self._writer.close(timeout, close_store=self._owns_store)
        atexit.unregister(self._atexit)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
