"""The recorder's background writer: drain the queue to the store in batches, with retries.

:class:`EventWriter` owns the writer thread and the counters (written, dropped, its CPU
time); the recorder owns the queue and hands it over. Events that the fast path
(:class:`~goodput_jax.measure.sink.StepSink`) queued after a job end are refused here (the
recorder's front door refuses the others), so a finished job stays finished whichever door
an event came through.
"""

from __future__ import annotations

import collections
import logging
import threading
import time

from goodput_jax.measure.events import KIND_CODES as _K
from goodput_jax.measure.events import KINDS_BY_CODE, Event, EventKind
from goodput_jax.measure.lifecycle import JobLifecycle
from goodput_jax.measure.options import RecorderOptions
from goodput_jax.measure.sink import FlushMarker, StepSink
from goodput_jax.measure.stores import EventStore, RawEventStore

__all__ = ["EventWriter"]

logger = logging.getLogger("goodput_jax.measure.recorder")

_JOB_START, _JOB_END = _K[EventKind.JOB_START], _K[EventKind.JOB_END]


class EventWriter:
    """Writes one recorder's queue to its store (a thread, or inline when synchronous).

    Args:
        queue: the recorder's queue of ``(code, t, step, label, payload)`` tuples and
            :class:`FlushMarker` s.
        store: where to write; a :class:`RawEventStore` takes the tuples as they are.
        stream: ``(job_name, run_id, host)`` of every event.
        options: the recorder's options (batch size, retries, flush interval, synchronous).
        lifecycle: the job's lifecycle (events after the end are refused and counted there).
    """

    def __init__(self, queue: collections.deque, store: EventStore,
                 stream: tuple[str, str, int], options: RecorderOptions,
                 lifecycle: JobLifecycle):
        self._q = queue
        self._store = store
        self._raw = isinstance(store, RawEventStore)
        self._job, self._run, self._host = stream
        self._batch = options.batch_size
        self._max_queue = options.max_queue
        self._max_retries = options.max_retries
        self._interval = float(options.flush_interval)
        self._lifecycle = lifecycle
        self._sync = options.synchronous
        self._ended = False  # the writer's view: a job end was the last job event
        self.dropped = 0
        self.written = 0
        self.cpu_seconds = 0.0
        self._c0 = 0.0  # the writer thread's CPU clock at its last count
        self._warned_drop = False
        self._warned_store = False
        self._drop_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        # synchronous: every event is written at once (a "batch" of one, drained inline)
        self.sink = (StepSink(queue, self._max_queue, 1, self.drain, self.count_drop)
                     if self._sync else
                     StepSink(queue, self._max_queue, self._batch, self._wake.set,
                              self.count_drop))
        self._thread = threading.Thread(target=self._loop, name=f"goodput-recorder-{self._job}",
                                        daemon=True)
        if not self._sync:
            self._thread.start()

    def count_drop(self) -> None:
        """One event dropped at a full queue: counted, warned about once."""
        with self._drop_lock:  # the writer thread updates it too
            self.dropped += 1
        if not self._warned_drop:
            self._warned_drop = True
            logger.warning(
                "goodput recorder queue is full (%d events); dropping new events "
                "(see dropped_count)", self._max_queue)

    def _loop(self) -> None:
        while True:
            self._wake.wait(self._interval)
            self._wake.clear()
            self._c0 = time.thread_time()
            self.drain()
            stop = self._stop.is_set()
            if stop:
                self.drain()
            self._count_cpu()
            if stop:
                return

    def _count_cpu(self) -> None:
        """Add the writer thread's CPU since the last count (on the writer thread only)."""
        now = time.thread_time()
        self.cpu_seconds += now - self._c0
        self._c0 = now

    def drain(self) -> None:
        """Write everything queued now (the writer thread, or inline when synchronous)."""
        q = self._q
        batch: list = []
        ok_since_marker = True
        # a RawEventStore (SQLite) takes the queued tuples as they are; any other gets
        # Event objects
        raw = self._raw
        mk = Event
        # the lifecycle's last word, for what the fast path (StepSink) queued without a
        # state check: after a job end only a new job start is written
        ended = self._ended
        refused = 0
        job, run, host = self._job, self._run, self._host
        kinds = KINDS_BY_CODE
        while q:
            item = q.popleft()
            if isinstance(item, FlushMarker):
                if batch:
                    ok_since_marker &= self._write(batch)
                    batch = []
                item.ok = ok_since_marker
                if threading.current_thread() is self._thread:
                    self._count_cpu()  # a flush's caller reads what the flush cost
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
        self._ended = ended
        if refused:
            self._lifecycle.refuse("an event queued through the step sink", refused)

    def _write(self, batch: list) -> bool:
        delay = 0.05
        store = self._store
        for attempt in range(self._max_retries + 1):
            try:
                if self._raw:
                    store.append_raw(self._job, self._run, self._host, batch)  # type: ignore[attr-defined]
                else:
                    store.append(batch)
                self.written += len(batch)
                return True
            except Exception as e:  # noqa: BLE001 - the training loop must never see it
                if not self._warned_store:
                    self._warned_store = True
                    logger.warning(
                        "goodput recorder: writing to store %r failed (%s: %s); retrying with "
                        "backoff, events that still fail are dropped and counted",
                        store.url, type(e).__name__, e)
                if attempt == self._max_retries:
                    break
                if self._stop.wait(delay) and attempt >= 1:
                    break  # closing: do not hold up interpreter exit
                delay = min(delay * 2, 2.0)
        with self._drop_lock:
            self.dropped += len(batch)
        return False

    def flush(self, timeout: float | None = None) -> bool:
        """Write everything queued so far; True when all of it reached the store."""
        marker = FlushMarker()
        self._q.append(marker)
        if self._thread.is_alive():
            self._wake.set()
            if not marker.done.wait(timeout):
                return False
        else:
            self.drain()
        if not marker.ok:
            return False
        # Stores write synchronously; their flush() only waits for writes that
        # other threads (another recorder on the same store) have in progress.
        return bool(self._store.flush(timeout))

    def close(self, timeout: float | None, *, close_store: bool) -> None:
        """Flush, stop the thread, and close the store when ``close_store``."""
        self.flush(timeout)
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if close_store:
            self._store.close()
