"""The step recorder's watcher thread and its claims of device ends: the watcher waits on
each tracked step's outputs in order; the training thread's polls (at a start, at a badput
span's start) claim the steps seen ready first. One claim per step, under one lock."""

from __future__ import annotations

import collections
import logging
import queue
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from goodput_jax.runtime.step_items import (
    _DEVICE_END,
    _INF,
    _OVERDUE,
    _STOP,
    _WAITS_KEPT,
    _WATCHING,
    StepState,
    _getprofile,
    _Item,
    _ready,
    _restore_switch,
    _set_switch,
    _setprofile,
    _time,
    _wait_ready,
)

if TYPE_CHECKING:
    from goodput_jax.runtime.steps import StepRecorder

logger = logging.getLogger("goodput_jax.runtime.steps")


def _watch_loop(ref: Callable[[], StepRecorder | None], wait_for_work: Callable[[], Any]) -> None:
    """The watcher thread: :meth:`StepRecorder._watch` while its StepRecorder lives, holding it
    only while there are steps to watch."""
    waits: collections.deque = collections.deque(maxlen=_WAITS_KEPT)  # kept across idles
    while True:
        steps = ref()
        if steps is None or not steps._watch(waits):
            return
        del steps
        wait_for_work()


def _finalize(pending: collections.deque, sem: queue.SimpleQueue, att: Any,
              callback: Callable[[], None] | None, own_att: list,
              switches: tuple[list, list]) -> None:
    """A StepRecorder collected without :meth:`StepRecorder.close`: stop its watcher, leave
    its attachment, detach the attachment it made and put back the switch intervals it set
    (holds none of the StepRecorder)."""
    for switch in switches:
        _restore_switch(switch)
    pending.append(_STOP)
    sem.put(None)
    if att is not None:
        if callback is not None:
            att.remove_compile_callback(callback)
        if own_att[0]:
            att.detach()


class StepWatching(StepState):
    """Mixin of :class:`~goodput_jax.runtime.StepRecorder`: the watcher and the claims."""

    __slots__ = ()

    def _poll(self) -> bool:
        """Record the device end of the step the watcher waits on, if it is ready (training
        thread): the watcher may be waiting for the GIL while this thread runs Python. True
        when this call recorded it."""
        item = self._head
        if item is None or item.t is not None:
            return False
        if _ready(item.probe):
            return self._claim(item)
        # The device is still on it (a queue of steps ahead of it, a slower step: not a
        # watcher kept from the GIL): ask again after the usual wait, doubled at each miss,
        # not at every start (a readiness query costs 5-30 us with cold caches; in the
        # benchmark's loop, which runs steps ahead, 4-7 of 60-120 polls a 500 steps found
        # the step ready). The watcher resets both for its next step.
        gap = self._due_gap
        self._due = _time() + gap
        self._due_gap = 2 * gap or 1e-3
        return False

    def _claim(self, item: _Item, t: float | None = None) -> bool:
        """Record ``item``'s device end at ``t`` (default: now), unless already recorded;
        True when this call recorded it."""
        with self._lock:
            return self._claim_locked(item, None, t)

    def _claim_locked(self, item: _Item, hooked: _Item | None = None,
                      t: float | None = None) -> bool:
        if item.t is not None:
            return False
        item.t = t = _time() if t is None else t
        if item is hooked:
            item.hook = 2
        step = item.step
        try:
            sink = self._sink_ready
            if sink is None:  # a custom clock (or a synchronous recorder): its own time
                self._record_end(step)
            elif type(step) is int and step >= 0:
                # the time the step was seen ready (not the moment the recorder is reached,
                # later by this call's Python), through the recorder's enqueue rule
                sink.put(_DEVICE_END, t, step)
            else:
                self._record_end(step, t)  # the recorder validates the step
            self.observed += 1
        except Exception:
            logger.exception("goodput StepRecorder: recording step %r failed", item.step)
        return True

    def _span_poll(self) -> int:
        """Record the device end of every step not yet recorded that is ready (runs on the
        thread that starts a badput span: the recorder's span-start listener); returns how
        many it recorded. This thread's readiness hook is suspended meanwhile: it would fire
        on a function return inside the claim, which holds the (non-reentrant) lock."""
        head = self._head  # the oldest step handed over: none later is ready before it
        if head is not None and head.t is None and not _ready(head.probe):
            return 0  # the usual case while the device runs: no lock
        nxt = self._next  # the oldest step not recorded at the last call
        if nxt is not None and nxt.t is None and not _ready(nxt.probe):
            return 0  # the head was recorded, the watcher has not taken up the next yet
        if head is None or head.t is not None:
            try:
                last = self._pending[-1]  # the newest step handed over
            except IndexError:  # none waits for the watcher
                return 0
            if type(last) is _Item and last.t is not None:
                return 0  # recorded, and every older one before it
        hook = self._hooked
        mine = hook is not None and _getprofile() is hook
        if mine:
            _setprofile(None)
        try:
            return self._claim_ready()
        finally:
            if mine and self._hooked is hook:
                _setprofile(hook)

    def _claim_ready(self, hooked: _Item | None = None, t: float | None = None) -> int:
        """Record the device end of each step not yet recorded that is ready, oldest first:
        the one the watcher waits on, then those still in the handover deque (a watcher
        thread the OS has not run yet, on a loaded machine, has not taken them up); stops at
        the first that is not ready (a device runs its steps in order). A waiting step that
        is recorded is turned into an ``_Item`` in place, so the watcher sees it recorded;
        ``hooked`` (the readiness hook's step), if recorded here, is marked as the hook's;
        ``t``: the time to record (default: now, each as it is recorded).
        Returns how many it recorded. Never on a thread whose profile function is the hook."""
        n = 0
        with self._lock:
            pending = self._pending
            # The claims go oldest first, so the recorded steps in the deque are its front:
            # find the first unrecorded one from the back (a watcher that lags by thousands
            # of steps costs no scan of them). Only the watcher pops, under this lock.
            first = len(pending)
            while first:
                x = pending[first - 1]
                if type(x) is _Item and x.t is not None:
                    break
                first -= 1
            head = self._head
            if not first and head is not None and head.t is None:
                if not _ready(head.probe):
                    return 0
                n += self._claim_locked(head, hooked, t)
            for i in range(first, len(pending)):
                x = pending[i]
                kind = type(x)
                if kind is tuple:  # an item from now on: its probe is found once
                    pending[i] = x = _Item(*x)
                elif kind is not _Item or x.t is not None:  # a marker, the stop, recorded
                    continue
                if not _ready(x.probe):
                    self._next = x
                    break
                n += self._claim_locked(x, hooked, t)
        return n

    def _wait_first(self) -> None:
        """The first tracked step is waited for when the second starts: from then on the
        store shows device ends, so every later step is read as device time (one wait per
        StepRecorder, usually hidden behind the next batch's loading)."""
        import jax

        item, self._first = self._first, None
        if item is not None and item.t is None and _wait_ready(item.outputs, jax.tree_util.tree_leaves, jax.Array):
            self._claim(item)


    def _start_thread(self) -> None:
        _set_switch(self._switch)  # StepRecorder(switch_interval=...): while the watcher runs
        # the thread holds this StepRecorder weakly (between steps): one the loop dropped
        # without close() is collected, and its finalizer stops the thread
        self._thread = threading.Thread(target=_watch_loop, name="goodput-step-watcher",
                                        args=(weakref.ref(self), self._sem.get), daemon=True)
        self._thread.start()
        _WATCHING.add(self)
        self.recorder.add_span_start_listener(self._span_listener)

    def _span_poll_listener(self) -> Callable[[], None]:
        """The recorder's span-start listener: :meth:`_span_poll` (holds this StepRecorder
        weakly, and leaves the recorder once it is gone)."""
        ref = weakref.ref(self)
        recorder = self.recorder

        def poll_steps_at_span_start() -> None:
            steps = ref()
            if steps is None:
                recorder.remove_span_start_listener(poll_steps_at_span_start)
            elif steps._live:
                steps.span_claims += steps._span_poll()
                auto = steps._switch
                if auto[2]:  # the loop marks spans: the hold for a loop without them ends
                    auto[0] = auto[2] = None
                    _restore_switch(auto)
                span = steps._span_switch
                if span[0] is not None and span[1] is None and (
                        steps._pending or (steps._head is not None and steps._head.t is None)):
                    # a step in flight while this thread may run Python (a loader): the
                    # watcher gets the GIL within the short interval; put back at the next
                    # step call (``_after``)
                    _set_switch(span)
                    steps._after = True

        return poll_steps_at_span_start

    def _watch(self, waits: collections.deque) -> bool:
        """The watcher's work until it runs out of steps (watcher thread): True when it goes
        idle (the caller waits for the next hand-over), False at the stop. ``waits``: the
        last waits the watcher saw end (the usual wait), kept by the caller."""
        import jax

        pending = self._pending
        popleft = pending.popleft
        is_array = jax.Array
        leaves_of = jax.tree_util.tree_leaves
        lock = self._lock
        while True:
            # under the lock: the span poll turns waiting steps into items in place, and a
            # step is always in the deque or the head, where the span poll looks for it
            with lock:
                item = popleft() if pending else None
                if type(item) is tuple:
                    item = _Item(*item)
                if type(item) is _Item:
                    self._seen += 1
                    if item.t is None:
                        self._head = item
            if item is None:
                self._idle = True
                self._after = True  # the next hand-over wakes the watcher
                if pending:  # handed over between the pop and the flag: no wake-up was sent
                    self._idle = False
                    continue
                return True  # wait for a wake-up (a stale one only costs one more turn)
            if type(item) is not _Item:
                self._head = None
                self._due = _INF
                if item is _STOP:
                    return False
                item.done.set()  # a finish() marker
                continue
            if item.t is None:
                t0 = _time()
                # start() polls this step only once it is overdue: later than the usual wait
                # (a readiness query costs ~10 us on a training thread that waits on data)
                gap = _OVERDUE * sorted(waits)[len(waits) // 2] if waits else 0.0
                self._due_gap = gap
                self._due = t0 + gap if waits else 0.0
                if self._wait(item, leaves_of, is_array):  # a wait the watcher saw end
                    waits.append(item.t - t0)  # type: ignore[operator]  # recorded: a time
                self._due = _INF  # recorded: nothing for ``start`` to poll
            elif item.hook == 2:
                # the hook recorded it before the watcher even got to it: the watcher would
                # have seen it no earlier than now
                self._hook_verdict(item, False)
            # The watcher drops the step's arrays, never the training thread: freeing a
            # device buffer costs microseconds (more with cold caches), and the last
            # reference would otherwise often die there (a claim at ``start``, ``_head``).
            item.outputs = item.probe = None

    def _wait(self, item: _Item, leaves_of: Callable, is_array: type) -> bool:
        """Wait for ``item``'s outputs and record its device end (watcher thread); True when
        the watcher recorded it (not the training thread's poll, which claims overdue steps:
        their waits would inflate the usual wait, and with it the next deadline)."""
        p = item.probe
        if p is not None:
            try:  # one output of the step's program: all its outputs are ready together
                p.block_until_ready()
            except Exception:  # noqa: BLE001, S110 - deleted (donated): watch the other leaves
                pass
            else:
                recorded = self._claim(item, _time())  # seen now, before taking the lock
                if item.hook:
                    self._hook_verdict(item, recorded)
                return recorded
        if _wait_ready(item.outputs, leaves_of, is_array):
            return self._claim(item)
        with self._lock:
            if item.t is not None:
                return False
            item.t = -1.0
            self.unobserved += 1
        if not self._warned:
            self._warned = True
            logger.warning(
                "goodput StepRecorder: step %r's outputs had no live JAX array to watch "
                "(donated to the next step?); track the loss or metrics instead", item.step)
        return False
