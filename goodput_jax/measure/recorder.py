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
import contextlib
import json
import logging
import math
import numbers
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Self

__all__ = ["GoodputRecorder", "JobEndedError", "JobState", "RecorderOptions", "Rerun",
           "StepSink"]

from goodput_jax.measure import live
from goodput_jax.measure.badput import RECORDABLE, BadputType
from goodput_jax.measure.events import KIND_CODES as _K
from goodput_jax.measure.events import (
    KINDS_BY_CODE,
    Event,
    EventKind,
    check_job_name,
    check_step,
    new_run_id,
    to_timestamp,
)
from goodput_jax.measure.lifecycle import JobEndedError, JobLifecycle, JobState, Rerun
from goodput_jax.measure.options import RecorderOptions
from goodput_jax.measure.productivity import ProgramCost
from goodput_jax.measure.stores import EventStore, RawEventStore, resolve_store

logger = logging.getLogger(__name__)

_JOB_START, _JOB_END = _K[EventKind.JOB_START], _K[EventKind.JOB_END]
_STEP_START, _STEP_END = _K[EventKind.STEP_START], _K[EventKind.STEP_END]
_STEP_DEVICE_END = _K[EventKind.STEP_DEVICE_END]
_time = time.time

class StepSink:
    """The recorder's fast path: append events to its queue without a validated call.

    Returned by :meth:`GoodputRecorder.step_sink`. Events go to the recorder's one queue,
    in order with every other event, under the recorder's ONE enqueue rule
    (:meth:`put`): a full queue drops the event and counts it in
    :attr:`GoodputRecorder.dropped_count`; the writer is woken once the queue holds a
    batch. :meth:`start` and :meth:`device_end` take a valid step (a non-negative
    ``int``); anything else raises the recorder's ``ValueError``.

    A hot loop that cannot afford a Python call per event takes a grant instead
    (:meth:`reserve`): room for ``k`` events it appends to :attr:`queue` itself, each the
    tuple ``(code, t, step, None, None)`` (``put``'s arguments), with one C-level
    ``append``; the rule is applied at the grant (room left under ``max_queue``, the
    writer woken when a batch is queued), so the queue may exceed ``max_queue`` by at most
    the grants outstanding (one per caller: a ``StepRecorder`` asks for 64 at a time) and
    the writer may be woken up to one grant late (it also wakes at every flush interval).

    Example:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "g.db")
        >>> rec = GoodputRecorder("job", "l", logging_enabled=True, store="sqlite:///" + path)
        >>> sink = rec.step_sink()
        >>> sink.start(0); sink.device_end(0, 1.7e9)
        >>> rec.flush(), rec.written_count, rec.dropped_count
        (True, 2, 0)
        >>> rec.close()
    """

    __slots__ = ("_batch", "_limit", "_on_drop", "_q", "_wake", "_wake_at")

    #: Event codes for :meth:`put` (a hot loop that validates its steps itself calls
    #: ``put(StepSink.START, time.time(), step)``: one call per event).
    START = _STEP_START
    DEVICE_END = _STEP_DEVICE_END

    def __init__(self, queue: collections.deque, max_queue: int, batch_size: int,
                 wake: Callable[[], Any], on_drop: Callable[[], None]):
        self._q, self._limit, self._wake_at = queue, max_queue, batch_size - 1
        self._batch = batch_size
        self._wake, self._on_drop = wake, on_drop

    @property
    def queue(self) -> collections.deque:
        """The recorder's queue: append ``(code, t, step, None, None)`` to it only under a
        grant of :meth:`reserve` (the same tuples :meth:`put` enqueues)."""
        return self._q

    def reserve(self, n: int) -> int:
        """Grant room for up to ``n`` events appended directly to :attr:`queue`; returns how
        many (0: the queue is full, or this recorder writes each event at once, so every
        event must go through :meth:`put`). At most one writer batch is granted at a time;
        the writer is woken here when the queue holds a batch.

        Example:
            >>> import tempfile, os
            >>> path = os.path.join(tempfile.mkdtemp(), "g.db")
            >>> rec = GoodputRecorder("job", "l", logging_enabled=True, store="sqlite:///" + path)
            >>> sink = rec.step_sink()
            >>> k = sink.reserve(2)
            >>> sink.queue.append((StepSink.START, 1.7e9, 0, None, None)); k
            2
            >>> rec.flush(), rec.written_count
            (True, 1)
            >>> rec.close()
        """
        if type(n) is not int or n < 0:
            raise ValueError(f"n ({n!r}) must be a non-negative int")
        if self._batch <= 1:  # synchronous: put() writes each event at once
            return 0
        q = self._q
        queued = len(q)
        if queued >= self._wake_at:
            self._wake()
        return max(0, min(n, self._batch, self._limit - queued))

    def put(self, code: int, t: float, step: int | None, label: str | None = None,
            payload: Any = None) -> None:
        """Enqueue one event ``(code, t, step, label, payload)``: THE enqueue rule.

        No check of its arguments: ``t`` is a float of UTC seconds, ``step`` a non-negative
        int (or None), ``code`` one of the event codes (:attr:`START`, :attr:`DEVICE_END`).
        """
        q = self._q
        n = len(q)
        if n < self._limit:
            q.append((code, t, step, label, payload))
            if n >= self._wake_at:  # the queue now holds a writer batch
                self._wake()
        else:
            self._on_drop()

    def start(self, step: int, t: float | None = None) -> None:
        """Record that step ``step`` starts at ``t`` (UTC seconds; default ``time.time()``)."""
        if type(step) is not int or step < 0:
            step = check_step(step)
        self.put(_STEP_START, _time() if t is None else t, step)

    def device_end(self, step: int, t: float) -> None:
        """Record that the device finished step ``step`` at ``t`` (UTC seconds, a float)."""
        if type(step) is not int or step < 0:
            step = check_step(step)
        self.put(_STEP_DEVICE_END, t, step)


class _FlushMarker:
    __slots__ = ("done", "ok")

    def __init__(self):
        self.done = threading.Event()
        self.ok = True


class GoodputRecorder:
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
        check_job_name(job_name)
        opts = RecorderOptions.merged(options, keywords)
        self.options = opts
        self.job_name = job_name
        self.logger_name = logger_name
        self._enabled = bool(logging_enabled)
        self._clock = opts.clock or time.time
        self._host = 0 if opts.host is None else opts.host
        self._run_id = opts.run_id or new_run_id()
        self._max_queue = max_queue = opts.max_queue
        self._batch = batch_size = opts.batch_size
        self._flush_interval = float(opts.flush_interval)
        self._max_retries = opts.max_retries
        self._q: collections.deque = collections.deque()
        self._dropped = 0
        self._written = 0
        self._writer_cpu = 0.0
        self._warned_drop = False
        self._warned_store = False
        self._open: dict[tuple[int, str | None], int] = {}
        self._open_lock = threading.Lock()
        self._closed = False
        self._sync = opts.synchronous
        self._drop_lock = threading.Lock()
        self._store: EventStore | None = None
        self._owns_store = False
        self._sink: StepSink | None = None
        #: called (no arguments) before a badput span's start is stamped; see
        #: add_span_start_listener (a tuple: read without a lock, replaced on change)
        self._span_listeners: tuple[Callable[[], Any], ...] = ()
        self._lifecycle = JobLifecycle(job_name)
        self._ended = False  # mirror of the lifecycle's ENDED, read on the hot path
        self._drain_ended = False  # the writer's view: a job end was the last job event
        if not self._enabled:
            return
        self._owns_store = store is None or isinstance(store, str)
        self._store = resolve_store(store)
        self._raw = isinstance(self._store, RawEventStore)
        live.register(self, self._store)  # a calculator in this process reads our writes
        self._wake = threading.Event()
        # synchronous: every event is written at once (a "batch" of one, drained inline)
        self._sink = (StepSink(self._q, max_queue, 1, self._drain, self._count_drop)
                      if self._sync else
                      StepSink(self._q, max_queue, batch_size, self._wake.set, self._count_drop))
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._writer, name=f"goodput-recorder-{job_name}", daemon=True
        )
        if not self._sync:
            self._thread.start()
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
        return self._dropped

    @property
    def written_count(self) -> int:
        """Events durably written to the store."""
        return self._written

    @property
    def writer_cpu_seconds(self) -> float:
        """CPU seconds the background writer thread has spent writing events so far
        (``time.thread_time`` around each drain; 0.0 when synchronous or disabled).

        The recorder's cost off the training thread: on a host whose cores the
        device's work also uses, it is time taken from the step.
        """
        return self._writer_cpu

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
    def add_span_start_listener(self, listener: Callable[[], Any]) -> None:
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

    def remove_span_start_listener(self, listener: Callable[[], Any]) -> None:
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

    def _count_drop(self) -> None:
        """One event dropped at a full queue: counted, warned about once."""
        with self._drop_lock:  # the writer thread updates it too
            self._dropped += 1
        if not self._warned_drop:
            self._warned_drop = True
            logger.warning(
                "goodput recorder queue is full (%d events); dropping new events "
                "(see dropped_count)", self._max_queue)

    def _put(self, code: int, t: float, step: int | None, label: str | None, payload: Any) -> None:
        if self._ended:
            self._lifecycle.refuse(f"a {KINDS_BY_CODE[code].value} event")
            return
        self._sink.put(code, t, step, label, payload)

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

    def record_step_start_time(self, step: int, start_time: Any = None) -> None:
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
        self._sink.put(_STEP_START, t, step)

    def record_step_end_time(self, step: int, end_time: Any = None) -> None:
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

    def record_job_start_time(self, start_time: Any = None) -> None:
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

    def record_job_end_time(self, end_time: Any = None) -> None:
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

    def record_tpu_init_start_time(self, start_time: Any = None) -> None:
        """Record the start of accelerator (TPU/GPU) initialization."""
        self._record(EventKind.ACCELERATOR_INIT_START, start_time, "start_time")

    def record_tpu_init_end_time(self, end_time: Any = None) -> None:
        """Record the end of accelerator initialization."""
        self._record(EventKind.ACCELERATOR_INIT_END, end_time, "end_time")

    def record_training_preparation_start_time(self, start_time: Any = None) -> None:
        """Record the start of training preparation (model, optimizer, checkpoint manager)."""
        self._record(EventKind.TRAINING_PREP_START, start_time, "start_time")

    def record_training_preparation_end_time(self, end_time: Any = None) -> None:
        """Record the end of training preparation."""
        self._record(EventKind.TRAINING_PREP_END, end_time, "end_time")

    def record_program_startup_start_time(self, start_time: Any = None) -> None:
        """Record the start of program startup (tracing / compilation)."""
        self._record(EventKind.PROGRAM_STARTUP_START, start_time, "start_time")

    def record_program_startup_end_time(self, end_time: Any = None) -> None:
        """Record the end of program startup."""
        self._record(EventKind.PROGRAM_STARTUP_END, end_time, "end_time")

    def record_data_loading_start_time(self, start_time: Any = None) -> None:
        """Record the start of synchronous (blocking) data loading."""
        self._record(EventKind.DATA_LOADING_START, start_time, "start_time")

    def record_data_loading_end_time(self, end_time: Any = None) -> None:
        """Record the end of synchronous data loading."""
        self._record(EventKind.DATA_LOADING_END, end_time, "end_time")

    def record_checkpoint_save_start_time(self, step: int | None = None, start_time: Any = None) -> None:
        """Record the start of a blocking checkpoint save (of ``step``)."""
        self._record(EventKind.CHECKPOINT_SAVE_START, start_time, "start_time", step=step)

    def record_checkpoint_save_end_time(self, step: int | None = None, end_time: Any = None) -> None:
        """Record the end of a blocking checkpoint save."""
        self._record(EventKind.CHECKPOINT_SAVE_END, end_time, "end_time", step=step)

    def record_checkpoint_restore_start_time(self, step: int | None = None, start_time: Any = None) -> None:
        """Record the start of a checkpoint restore (of ``step``)."""
        self._record(EventKind.CHECKPOINT_RESTORE_START, start_time, "start_time", step=step)

    def record_checkpoint_restore_end_time(self, step: int | None = None, end_time: Any = None) -> None:
        """Record the end of a checkpoint restore."""
        self._record(EventKind.CHECKPOINT_RESTORE_END, end_time, "end_time", step=step)

    def record_custom_badput_event_start_time(
        self, start_time: Any = None, custom_badput_event_type: str = "unknown"
    ) -> None:
        """Record the start of a custom badput event (evaluation, SDC check, ...)."""
        self._record(EventKind.CUSTOM_BADPUT_START, start_time, "start_time",
                     label=_check_label(custom_badput_event_type))

    def record_custom_badput_event_end_time(
        self, end_time: Any = None, custom_badput_event_type: str = "unknown"
    ) -> None:
        """Record the end of a custom badput event of the same type."""
        self._record(EventKind.CUSTOM_BADPUT_END, end_time, "end_time",
                     label=_check_label(custom_badput_event_type))

    def record_checkpoint_progress(self, step: int, checkpoint_start_time: Any) -> None:
        """Record that a checkpoint containing progress up to ``step`` started at the given time."""
        if not self._enabled:
            return
        t = to_timestamp(checkpoint_start_time, name="checkpoint_start_time")
        self._put(_K[EventKind.CHECKPOINT_PROGRESS], t, check_step(step), None, None)

    def record_hints(self, hints: dict, timestamp: Any = None) -> None:
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
                            timestamp: Any = None) -> None:
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
            raise TypeError(f"cost ({cost!r}) must be a goodput_jax.measure.productivity.ProgramCost")
        t = self._now() if timestamp is None else to_timestamp(timestamp, name="timestamp")
        self._put(_K[EventKind.PROGRAM_COST], t, None if step is None else check_step(step),
                  None, cost.to_payload())

    def record_compilation(self, duration_s: float, end_time: Any = None, *,
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

    def record_step_device_end_time(self, step: int, end_time: Any = None) -> None:
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

    # ------------------------------------------------------ context managers
    @contextlib.contextmanager
    def job(self) -> Iterator[GoodputRecorder]:
        """Job start on enter, job end on a normal exit (an exception = crashed run)."""
        self.record_job_start_time()
        yield self
        self.record_job_end_time()

    @contextlib.contextmanager
    def step(self, step: int) -> Iterator[None]:
        """Step start on enter, step end on a normal exit."""
        self.record_step_start_time(step)
        yield
        self.record_step_end_time(step)

    @contextlib.contextmanager
    def _span(self, start: Callable[[], None], end: Callable[[], None]) -> Iterator[None]:
        start()
        try:
            yield
        finally:
            end()

    def accelerator_init(self):
        """``with rec.accelerator_init():`` around device discovery / ``jax.devices()``."""
        return self._span(self.record_tpu_init_start_time, self.record_tpu_init_end_time)

    def training_prep(self):
        """``with rec.training_prep():`` around model / optimizer / checkpoint-manager setup."""
        return self._span(self.record_training_preparation_start_time,
                          self.record_training_preparation_end_time)

    def program_startup(self):
        """``with rec.program_startup():`` around tracing and compilation."""
        return self._span(self.record_program_startup_start_time,
                          self.record_program_startup_end_time)

    def data_loading(self):
        """``with rec.data_loading():`` around a blocking fetch of the next batch."""
        return self._span(self.record_data_loading_start_time, self.record_data_loading_end_time)

    def checkpoint_save(self, step: int | None = None):
        """``with rec.checkpoint_save(step):`` around a blocking checkpoint save."""
        return self._span(lambda: self.record_checkpoint_save_start_time(step),
                          lambda: self.record_checkpoint_save_end_time(step))

    def checkpoint_restore(self, step: int | None = None):
        """``with rec.checkpoint_restore(step):`` around a checkpoint restore."""
        return self._span(lambda: self.record_checkpoint_restore_start_time(step),
                          lambda: self.record_checkpoint_restore_end_time(step))

    def badput(self, kind: Any):
        """``with rec.badput(BadputType.DATA_LOADING):`` or ``with rec.badput("eval"):``.

        Args:
            kind: a recordable BadputType (accelerator init, training prep, program
                startup, data loading, checkpoint save/restore, custom), or a string
                label for a custom badput event.
        """
        if isinstance(kind, str):
            label = _check_label(kind)
            return self._span(
                lambda: self.record_custom_badput_event_start_time(custom_badput_event_type=label),
                lambda: self.record_custom_badput_event_end_time(custom_badput_event_type=label),
            )
        if not isinstance(kind, BadputType) or kind not in RECORDABLE:
            raise ValueError(
                f"badput kind ({kind!r}) must be a string label or one of BadputType."
                f"{{{', '.join(k.name for k in RECORDABLE)}}}; wasted progress, recovery, "
                "other, recompilation and the elastic buckets are derived"
            )
        if kind is BadputType.CUSTOM_BADPUT_EVENTS:
            return self.badput("unknown")
        start, end = RECORDABLE[kind]
        return self._span(lambda: self._record(start, None, "start_time"),
                          lambda: self._record(end, None, "end_time"))

    # ------------------------------------------------------------- writer
    def _writer(self) -> None:
        while True:
            self._wake.wait(self._flush_interval)
            self._wake.clear()
            c0 = time.thread_time()
            self._drain()
            stop = self._stop.is_set()
            if stop:
                self._drain()
            self._writer_cpu += time.thread_time() - c0
            if stop:
                return

    def _drain(self) -> None:
        q = self._q
        batch: list = []
        ok_since_marker = True
        # a RawEventStore (SQLite) takes the queued tuples as they are; any other gets
        # Event objects
        raw = self._raw
        mk = Event
        # the lifecycle's last word, for what the fast path (StepSink) queued without a
        # state check: after a job end only a new job start is written
        ended = self._drain_ended
        refused = 0
        job, run, host = self.job_name, self._run_id, self._host
        kinds = KINDS_BY_CODE
        while q:
            item = q.popleft()
            if isinstance(item, _FlushMarker):
                if batch:
                    ok_since_marker &= self._write(batch)
                    batch = []
                item.ok = ok_since_marker
                item.done.set()
                ok_since_marker = True
                continue
            code = item[0]
            if ended:
                if code != _JOB_START:
                    refused += 1
                    continue
                ended = False
            elif code == _JOB_END:
                ended = True
            if raw:
                batch.append(item)
            else:
                code, t, step, label, payload = item
                batch.append(mk(kinds[code], job, run, host, t, step, label, payload))
            if len(batch) >= self._batch:
                ok_since_marker &= self._write(batch)
                batch = []
        if batch:
            self._write(batch)
        self._drain_ended = ended
        if refused:
            self._lifecycle.refuse("an event queued through the step sink", refused)

    def _write(self, batch: list) -> bool:
        delay = 0.05
        for attempt in range(self._max_retries + 1):
            try:
                if self._raw:
                    self._store.append_raw(self.job_name, self._run_id, self._host, batch)
                else:
                    self._store.append(batch)
                self._written += len(batch)
                return True
            except Exception as e:  # noqa: BLE001 - the training loop must never see it
                if not self._warned_store:
                    self._warned_store = True
                    logger.warning(
                        "goodput recorder: writing to store %r failed (%s: %s); retrying with "
                        "backoff, events that still fail are dropped and counted",
                        self._store.url, type(e).__name__, e)
                if attempt == self._max_retries:
                    break
                if self._stop.wait(delay) and attempt >= 1:
                    break  # closing: do not hold up interpreter exit
                delay = min(delay * 2, 2.0)
        with self._drop_lock:
            self._dropped += len(batch)
        return False

    def flush(self, timeout: float | None = None) -> bool:
        """Write everything recorded so far; True when all of it reached the store.

        Args:
            timeout: seconds to wait (None: until written or dropped after retries).

        Example:
            >>> GoodputRecorder("j", "l").flush()
            True
        """
        if not self._enabled:
            return True
        marker = _FlushMarker()
        self._q.append(marker)
        if self._thread.is_alive():
            self._wake.set()
            if not marker.done.wait(timeout):
                return False
        else:
            self._drain()
        if not marker.ok:
            return False
        # Stores write synchronously; their flush() only waits for writes that
        # other threads (another recorder on the same store) have in progress.
        return bool(self._store.flush(timeout))

    def close(self, timeout: float | None = 30.0) -> None:
        """Flush, stop the writer thread and close the store if this recorder opened it."""
        if self._closed:
            return
        self._closed = True
        if not self._enabled:
            return
        self.flush(timeout)
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        atexit.unregister(self._atexit)
        if self._owns_store:
            self._store.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _check_label(label: Any) -> str:
    if not isinstance(label, str) or not label:
        raise ValueError(f"custom_badput_event_type ({label!r}) must be a non-empty string")
    return label
