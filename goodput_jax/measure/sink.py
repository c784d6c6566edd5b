"""The recorder's queue discipline: :class:`StepSink`, its one enqueue rule and the hot
loop's fast path, and :class:`FlushMarker`, the writer's rendezvous in the queue."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Any

from goodput_jax.measure.events import KIND_CODES as _K
from goodput_jax.measure.events import EventKind, check_step

__all__ = ["FlushMarker", "StepSink"]

_STEP_START = _K[EventKind.STEP_START]
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
        >>> from goodput_jax.measure.recorder import GoodputRecorder
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
                 wake: Callable[[], object], on_drop: Callable[[], None]):
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
            >>> from goodput_jax.measure.recorder import GoodputRecorder
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

        ``Any``: the values are JSON-like (numbers, strings, lists, nested dicts), as stored or
        uploaded.
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


class FlushMarker:
    """A point in the queue: the writer sets ``done`` (and ``ok``) when it gets there."""

    __slots__ = ("done", "ok")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.ok = True
