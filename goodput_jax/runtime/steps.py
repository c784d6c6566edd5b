"""StepRecorder: device step times under asynchronous dispatch, without stalling.

A jitted step returns as soon as it is *dispatched*; the device works on it
later. A recorder that timestamps the host's loop therefore measures dispatch
(microseconds), and the host's data loading looks like a stall even when the
device is busy with earlier steps. ``StepRecorder`` records, for each step,
the start on the host (``record_step_start_time``) and the moment the device
finished it (``record_step_device_end_time``): a watcher thread blocks on the
step's outputs off the training thread and timestamps their readiness, so the
host keeps dispatching ahead. The calculator then counts step N's productive
time as the device's busy interval ``[max(start_N, device_end_{N-1}),
device_end_N]``, and a data-loading span as lost only while the device sat idle.

In a loop that runs ahead of the device the training thread pays, per step, for one clock
read, two deque appends (the step start into the recorder's queue, the outputs for the
watcher) and, only when the watcher sits idle or the watched step is overdue, a wake-up or a
readiness poll (a few microseconds; ``benchmarks/step_recorder_bench.py``); everything else
(finding the array to watch, waiting, recording the device end, dropping the step's arrays)
happens on the watcher thread. In a loop that waits for its steps, where the watcher comes
late (the training thread holds the GIL, or the watcher waits for a CPU), the training
thread records the device end itself: a readiness hook (a profile function) runs on its
calls and returns from the dispatch until the step is seen ready, mostly while the device is
still computing the step (about 20-40 us of training-thread CPU a step on a loaded 2-core
machine, ``float(loss)``'s own Python included), then one record.

Example:
    >>> import jax, jax.numpy as jnp  # doctest: +SKIP
    >>> from goodput_jax import goodput, runtime  # doctest: +SKIP
    >>> rec = goodput.GoodputRecorder("run1", "goodput_run1", logging_enabled=True)  # doctest: +SKIP
    >>> steps = runtime.StepRecorder(rec)  # doctest: +SKIP
    >>> for step in range(100):  # doctest: +SKIP
    ...     state, loss = steps(step, train_step, state, batch)
    >>> steps.finish()  # doctest: +SKIP
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
import queue
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, Self

from goodput_jax.measure.productivity import DevicePeak, lookup_peak
from goodput_jax.measure.recorder import StepSink
from goodput_jax.runtime.compile import attach, attached
from goodput_jax.runtime.contracts import StepRecording, require
from goodput_jax.runtime.program import _devices_of, measured_peak, program_cost

logger = logging.getLogger(__name__)

__all__ = ["StepRecorder", "finish_steps"]

_STOP = object()
_START = StepSink.START
_DEVICE_END = StepSink.DEVICE_END
_time = time.time
#: the training thread polls the watched step once it has waited this many times its
#: usual wait (the median of the last ``_WAITS_KEPT``)
_OVERDUE = 1.5
_WAITS_KEPT = 15
#: step starts granted at a time for direct appends to the recorder's queue (the short
#: path's full way, through the sink's put and a new grant, once in this many steps)
_GRANT = 64
_INF = float("inf")
#: the readiness hook (see ``StepRecorder``) gives up after this many profile events of the
#: training thread without seeing its step ready (a loop that runs ahead of the device)
_HOOK_EVENTS = 2048
#: after a step the hook did not see ready before the next start, it skips 1, 2, 4, ... up to
#: this many steps before it tries again (an asynchronous loop pays for one try in this many)
_HOOK_BACKOFF_MAX = 512
#: the hook pays for itself where the watcher, waking on the same step, comes this much
#: later than the hook's record (the training thread held the GIL, or the watcher waited for
#: a CPU); after _HOOK_NEEDLESS steps in a row where the watcher was prompter, the hook backs
#: off as after a miss (a loader that sleeps or waits on I/O leaves the GIL to the watcher)
_HOOK_USEFUL_S = 2e-4
#: the hook asks whether its step is ready at most once in this many seconds (a readiness
#: query costs about a microsecond, a return event a fraction of it): the device end it
#: records is late by at most this much where Python runs between returns
_HOOK_QUERY_S = 2e-5
_HOOK_NEEDLESS = 8
_getprofile, _setprofile = sys.getprofile, sys.setprofile
#: StepRecorders whose watcher runs (started at the first tracked step, dropped at close)
_WATCHING: weakref.WeakSet = weakref.WeakSet()
#: finish() checks this often whether the watcher it waits on is still alive
_FINISH_POLL_S = 0.5


class _Marker:
    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = threading.Event()


class _Item:
    """One tracked step: its outputs, a cheap probe leaf, when it was seen ready, and whether
    the training thread's readiness hook watched it (1) or recorded it (2)."""

    __slots__ = ("hook", "outputs", "probe", "step", "t")

    def __init__(self, step: int, outputs: Any):
        self.step = step
        self.outputs = outputs
        self.probe = _probe(outputs)
        self.t: float | None = None  # claimed: 1.0 recorded, -1.0 unobservable
        self.hook = 0


def _ready(probe: Any) -> bool:
    """Whether ``probe`` (an ``_Item``'s probe leaf) is ready; False for no probe or a
    deleted (donated) array: the watcher decides those."""
    if probe is None:
        return False
    try:
        return bool(probe.is_ready())
    except Exception:  # noqa: BLE001 - deleted (donated)
        return False


def _wait_ready(outputs: Any, leaves_of: Callable, is_array: type) -> bool:
    """Block until every live array of ``outputs`` is ready; False when none could be watched."""
    watched = False
    for leaf in leaves_of(outputs):
        if not isinstance(leaf, is_array) or leaf.is_deleted():
            continue
        try:
            leaf.block_until_ready()
            watched = True
        except Exception:  # noqa: BLE001, S112 - deleted (donated) meanwhile: try the next
            continue
    return watched


def _probe(out: Any) -> Any:
    """A leaf to poll on the training thread: the array itself, else the last element of a
    tuple / list / dict, a few levels deep (``(state, {"loss": loss})`` -> ``loss``), else None."""
    depth = 0
    while depth < 6:
        t = type(out)
        if t is tuple or t is list:
            if not out:
                return None
            out = out[-1]
        elif t is dict:
            if not out:
                return None
            out = next(reversed(out.values()))
        else:
            return out if hasattr(out, "is_ready") else None
        depth += 1
    return None


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
              callback: Callable[[], None] | None, own_att: list) -> None:
    """A StepRecorder collected without :meth:`StepRecorder.close`: stop its watcher, leave
    its attachment, and detach the attachment it made (holds none of the StepRecorder)."""
    pending.append(_STOP)
    sem.put(None)
    if att is not None:
        if callback is not None:
            att.remove_compile_callback(callback)
        if own_att[0]:
            att.detach()


class StepRecorder:
    """Records step starts on the host and step ends on the device, without blocking.

    A step's device end is the first moment its outputs are seen ready, by
    whichever comes first:

    * the training thread, as the step's call returns (``steps(...)``, ``wrap``,
      ``track``, unless the readiness hook below is backing off): a runtime that
      ran the program before returning (the CPU client does so for some steps)
      hands back outputs that are ready: the step ends at the return, recorded
      before this thread runs on or wakes the watcher (a woken thread can take
      its CPU on a loaded machine);
    * the training thread, right after its own blocking call returns: when the
      loop waits for its steps (``float(loss)`` each step, a loader slower than
      the device), a readiness hook (``sys.setprofile`` on the training thread,
      installed at the step's dispatch) polls the step's probe at the first
      Python function return after each blocking call (and at most once per
      20 us while Python runs between returns), records the end and removes
      itself. This is the observation that does not depend on which
      thread holds the GIL or gets a CPU: the thread that waited for the device
      is the one running when the wait ends. A loop that runs ahead of the
      device (the step is not ready at the next ``start``, or within 2048 profile
      events), or one where the watcher was the prompter observer for 8 steps in
      a row (a loader that sleeps or waits on I/O leaves it the GIL; the hook is
      worth it where the watcher comes 0.2 ms or more after it), skips the hook
      for 1, 2, 4, ... up to 512 steps, so it pays for one try in that many; a
      thread that already has a profile function (cProfile) is left alone;
    * the watcher thread, which waits on the step's probe array (the last leaf
      of the outputs, e.g. the loss: one program's outputs are ready together;
      every live array when there is no such leaf), prompt while the training
      thread waits (loading, blocking, a full dispatch queue);
    * or the training thread's poll: at each badput span's start on the
      recorder (``with rec.data_loading():``, a checkpoint save, a custom span;
      through the recorder's public ``add_span_start_listener``) it records
      every step not yet recorded that is ready (the one the watcher waits on,
      and those the watcher has not taken up yet: a watcher thread the OS has
      not run, on a loaded machine), so a step that was ready when the loop
      began loading the next batch ends before that span, whoever holds the
      GIL or a CPU; and at a ``start``, the step the watcher waits on, once it
      is overdue (waited on for more than 1.5x the median of the last 15
      waits: a loop that runs Python while the watcher waits for the GIL, and
      no readiness query on the usual step).

    The first tracked step is waited for at the second ``start`` (once, usually
    hidden behind loading the next batch), so the store shows device ends before
    the host runs ahead.

    Where no thread observes readiness promptly (a loader that holds the GIL
    while the device finishes, and a loop that never waits for its steps), a
    device end is recorded when the watcher next gets the GIL, or at the next
    ``start``: late by up to the Python work in between.

    Args:
        recorder: the :class:`~goodput_jax.measure.recorder.GoodputRecorder`
            written to (a disabled one makes every call a plain function call).
        compile_times: also attach the recorder for compile times (the
            attachment then knows when training started: compiles before and
            within the first step are program startup, later repeats are
            recompiles).
        program_costs: record each step program's cost (XLA's cost analysis, per
            device) with its device's peak when a step call compiles it, and at the
            first call (needs ``compile_times``): the input of program goodput and MFU
            (``GoodputCalculator.get_program_goodput``). The read hits JAX's caches (no
            compilation is added; well under 1 ms per program); on a device the peak
            table does not know (a CPU) a measured peak is probed once per process.
        peak: the device's peak to record instead of the table's or a measured one.
        peak_table: entries that extend or override the published peak table.

    Attributes:
        tracked: steps handed over (counted by the watcher as it takes them; exact once
            :meth:`finish` returned).
        observed: steps whose device end was recorded.
        unobserved: steps whose outputs could not be watched (every array was
            donated to a later step before it was seen ready, or none was a
            JAX array).
        hook_claims: device ends recorded by the training thread's readiness hook.
        ready_claims: device ends recorded by the training thread as the step's call
            returned (the runtime ran the step before returning).
        span_claims: device ends recorded by the training thread's poll at a badput span's
            start.

    Example:
        >>> from goodput_jax import goodput, runtime
        >>> steps = runtime.StepRecorder(goodput.GoodputRecorder("j", "l"))  # disabled
        >>> steps(0, lambda x: x + 1, 1)
        2
        >>> steps.finish()
        True
    """

    # Slots: the per-step path reads its fields from the object itself (fewer cache lines
    # on a training thread whose caches the device's compute or the input pipeline evicted).
    __slots__ = (
        "__weakref__",
        "_after",
        "_att",
        "_compile_cb",
        "_compiled",
        "_cost_first",
        "_cost_last",
        "_cost_peak",
        "_cost_table",
        "_credit",
        "_due",
        "_due_gap",
        "_enabled",
        "_enq",
        "_first",
        "_handed",
        "_head",
        "_hook_at",
        "_hook_backoff",
        "_hook_need",
        "_hooked",
        "_idle",
        "_live",
        "_lock",
        "_next",
        "_own_att",
        "_pending",
        "_put",
        "_record_end",
        "_seen",
        "_sem",
        "_sink",
        "_sink_ready",
        "_slow_starts",
        "_span_listener",
        "_start_step",
        "_thread",
        "_warned",
        "_warned_program",
        "hook_claims",
        "observed",
        "ready_claims",
        "recorder",
        "span_claims",
        "unobserved",
    )

    def __init__(self, recorder: StepRecording, *, compile_times: bool = True,
                 program_costs: bool = True, peak: DevicePeak | None = None,
                 peak_table: dict[str, DevicePeak] | None = None):
        self.recorder: StepRecording = require(recorder, StepRecording)
        self._enabled = bool(recorder.logging_enabled)
        #: whether this StepRecorder attached the recorder for compile times (then
        #: :meth:`close` detaches it: a compile after the loop is not the job's)
        self._own_att = [bool(compile_times and self._enabled) and attached(recorder) is None]
        self._att = attach(recorder) if compile_times and self._enabled else None
        if peak is not None and not isinstance(peak, DevicePeak):
            raise TypeError(f"peak ({peak!r}) must be a goodput_jax.measure.productivity.DevicePeak")
        # program costs: read at the first call and after a call during which (or before
        # which, since the last step) the training thread compiled: the attachment's
        # callback sets ``_compiled`` and ``_after``, so a step that compiles nothing reads
        # nothing for it
        costs = program_costs and self._att is not None
        self._compiled = False
        self._cost_first = costs
        self._cost_peak = peak
        self._cost_table = peak_table
        self._cost_last: Any = None  # the last cost recorded (an equal one is not repeated)
        self._compile_cb: Callable[[], None] | None = None
        if costs:
            self._compile_cb = self._compile_callback()
            self._att.add_compile_callback(self._compile_cb)
        #: the training thread has work after a step's hand-over: the watcher went idle (wake
        #: it), or a compile (read the program's cost); one read per step
        self._after = True
        # handover to the watcher: a deque, plus a wake-up only when the watcher sits idle
        self._pending: collections.deque = collections.deque()
        self._sem: queue.SimpleQueue = queue.SimpleQueue()
        self._idle = True
        self._live = False  # the watcher runs and the first step was handed over
        self._head: _Item | None = None  # the step the watcher is waiting on
        #: the oldest step not recorded when _claim_ready last looked (the watcher had not
        #: taken it up), so the next call asks it first, without the lock
        self._next: _Item | None = None
        # time.time() after which ``start`` polls the head (the watcher sets it; inf while
        # it has no unrecorded head)
        self._due = _INF
        #: the usual wait's share of ``_due`` (1.5x the median wait): a poll that finds the
        #: head not ready moves ``_due`` this much past now
        self._due_gap = 0.0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._start_step = recorder.record_step_start_time
        self._record_end = recorder.record_step_device_end_time
        # the recorder's public fast path (a StepSink; None: the validated calls)
        self._sink_ready = recorder.step_sink() if self._enabled else None
        #: the sink's ``put``, set once the first steps went the full way (the short path)
        self._put: Callable[..., None] | None = None
        #: ``_put`` while no readiness hook is installed (None: the calls take their full
        #: paths; the training thread alone sets it)
        self._sink: Callable[..., None] | None = None
        #: step starts the short path may still append to the recorder's queue directly
        #: (``_enq``, the queue's own append: no Python call) under the sink's grant
        #: (``StepSink.reserve``: its enqueue rule, applied once per grant); 0: the next
        #: start takes the full path (which asks for the next grant). Zero while a readiness
        #: hook is installed.
        self._credit = 0
        self._enq: Callable[[tuple], None] | None = None
        self._slow_starts = 0
        self._first: _Item | None = None
        self._handed = 0  # steps handed over through track()'s full path
        self._seen = 0  # steps the watcher took from the handover deque
        self.observed = 0
        self.unobserved = 0
        self._warned = False
        self._warned_program = False
        # the readiness hook: the installed profile function (None: none), the first step
        # number it tries again at (the steps before it skip it: a grant of short-path
        # starts ends before it, so the short path neither counts nor compares), and the
        # next skip after a miss
        self._hooked: Callable | None = None
        self._hook_at = 0
        self._hook_backoff = 1
        # the watcher's verdict on the hook: -k after k steps where it was prompter itself
        self._hook_need = 0
        self.hook_claims = 0
        self.ready_claims = 0
        self.span_claims = 0
        self._span_listener = self._span_poll_listener()
        fin = weakref.finalize(self, _finalize, self._pending, self._sem, self._att,
                               self._compile_cb, self._own_att)
        fin.atexit = False  # at exit the daemon watcher simply ends, as the recorder flushes

    # ------------------------------------------------------------ hot path
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
        if item.t is None and _wait_ready(item.outputs, jax.tree_util.tree_leaves, jax.Array):
            self._claim(item)

    def start(self, step: int) -> None:
        """Record the host-side start of ``step`` (right before its dispatch).

        After the first two steps, a valid step on a recorder with the default clock takes
        the short path: one clock read, one append to the recorder's queue, and a readiness
        poll only when the step the watcher waits on is overdue (see the class docstring).

        Example:
            >>> from goodput_jax import goodput, runtime
            >>> runtime.StepRecorder(goodput.GoodputRecorder("j", "l")).start(0)
        """
        n = self._credit
        if n and type(step) is int and step >= 0:
            self._credit = n - 1
            t = _time()
            if t >= self._due:
                self._poll()
                t = _time()
            self._enq((_START, t, step, None, None))  # StepSink's event, under its grant
            return
        self._start_full(step)

    def _start_full(self, step: int) -> None:
        """``start`` past its shortest path: a readiness hook to remove, a grant used up, the
        first steps, or a step the recorder validates."""
        if self._hooked is not None:
            self._hook_missed(step)
        if self._put is not None and type(step) is int and step >= 0:
            self._start_put(step)
            return
        if not self._enabled:
            return
        if self._first is not None:
            self._wait_first()
        if _time() >= self._due:
            self._poll()
        self._start_step(step)
        att = self._att
        if att is not None:
            att.step_started()
        self._slow_starts += 1
        # the attachment needs two starts (a later repeat of a program is a recompile);
        # then the short path, once the first step was handed over and waited for
        if self._slow_starts >= 2 and self._first is None and self._live:
            self._short_path()

    def _short_path(self) -> None:
        """Turn the short path on: the recorder's sink takes the step starts (its one
        enqueue rule: drop and count when full, wake the writer at a batch); without a sink
        the short path stays off."""
        ready = self._sink_ready
        if ready is not None:
            self._put = ready.put
            self._enq = ready.queue.append
            if self._hooked is None:
                self._sink = self._put

    def _start_put(self, step: int) -> None:
        """The short path's start through the sink's ``put`` (its enqueue rule), then the
        next grant of direct appends (none while a readiness hook is installed)."""
        t = _time()
        if t >= self._due:
            self._poll()
            t = _time()
        self._put(_START, t, step)
        if self._hooked is None and step < self._hook_at:  # else: the hook is due (no grant)
            self._credit = self._sink_ready.reserve(min(_GRANT, self._hook_at - step - 1))

    def track(self, step: int, outputs: Any) -> None:
        """Hand ``step``'s outputs over; returns at once.

        The device end of ``step`` is recorded when its outputs are ready.
        Pass outputs that the next step does not donate (the loss, the
        metrics, or ``(state, metrics)``): a donated array cannot be watched
        after the next step is dispatched (such arrays are skipped).

        Example:
            >>> from goodput_jax import goodput, runtime
            >>> runtime.StepRecorder(goodput.GoodputRecorder("j", "l")).track(0, None)
        """
        if self._sink is not None and type(step) is int and 0 <= step < self._hook_at:
            self._pending.append((step, outputs))  # the short path: see __call__
            if self._after:
                self._after_track(step, None, (), None)
            return
        self._track_full(step, outputs)
        if self._compiled or self._cost_first:
            self._no_program(step)

    def _no_program(self, step: Any) -> None:
        """A step recorded through ``start``/``track`` compiled (or is the first): its program
        cannot be read (no step function here); say so once, naming the door that reads it."""
        self._compiled = self._cost_first = False
        if not self._warned_program:
            self._warned_program = True
            logger.warning(
                "goodput StepRecorder: step %r was recorded through start()/track(), which do "
                "not see the step function, so its program cost (program goodput, MFU) is not "
                "recorded; record the step with steps(step, fn, ...) or steps.wrap(fn)", step)

    def _track_full(self, step: int, outputs: Any) -> None:
        """``track`` past its shortest path: the readiness hook's step, the first steps."""
        if self._live:
            if type(step) is int and step < self._hook_at:
                self._pending.append((step, outputs))  # the watcher builds the _Item
                if self._idle:
                    self._idle = False
                    self._sem.put(None)
            else:
                self._track_hooked(step, outputs)
            return
        if not self._enabled:
            return
        if self._thread is None:
            self._start_thread()
        if self._handed or self._seen:
            self._handover((step, outputs))
        else:
            t = _time()
            self._first = item = _Item(step, outputs)
            self._pending.append(item)
            if _ready(item.probe):  # ran before its call returned: see _track_hooked
                self.ready_claims += self._claim_ready(None, t)
            self._handover(None)
            if item.t is None and item.probe is not None and _getprofile() is None:
                self._install_hook(item)
        self._handed += 1
        self._live = True

    def _handover(self, item: Any) -> None:
        """Hand ``item`` to the watcher and wake it (None: only wake it)."""
        if item is not None:
            self._pending.append(item)
        self._idle = False
        self._sem.put(None)

    def __call__(self, step: int, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``start(step)``, ``out = fn(*args, **kwargs)``, ``track(step, out)``; returns ``out``.

        Example:
            >>> from goodput_jax import goodput, runtime
            >>> runtime.StepRecorder(goodput.GoodputRecorder("j", "l"))(3, max, 1, 2)
            2
        """
        # start() and track()'s short paths, inlined: one Python call per step, not three;
        # three reads of this object's fields (the grant, which ends before the readiness
        # hook's next try, the poll's deadline, work after the hand-over) and one write (the
        # grant), two C-level appends (the step's start to the recorder's queue, the
        # outputs to the watcher's)
        n = self._credit
        if not n or type(step) is not int or step < 0:
            return self._call_full(step, fn, args, kwargs)
        self._credit = n - 1
        t = _time()
        if t >= self._due:
            self._poll()
            t = _time()
        self._enq((_START, t, step, None, None))
        out = fn(*args, **kwargs)
        self._pending.append((step, out))  # the watcher builds the _Item
        if self._after:
            self._after_track(step, fn, args, kwargs)
        return out

    def _call_full(self, step: int, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """A step call past the shortest path (the first steps, a readiness hook, a step the
        recorder validates): ``start``, the call, ``track``, then the program's cost when the
        call compiled."""
        if self._put is not None and type(step) is int and step >= 0:
            # the short path with the readiness hook (a loop that waits for its steps takes
            # this way at every step) or a new grant: start's and track's parts inlined
            if self._hooked is not None:
                self._hook_missed(step)
            t = _time()  # _start_put's work, inlined: this is the hook's way at every step
            if t >= self._due:
                self._poll()
                t = _time()
            self._put(_START, t, step)
            if self._hooked is None and step < self._hook_at:  # the grant ends at the hook
                self._credit = self._sink_ready.reserve(min(_GRANT, self._hook_at - step - 1))
            out = fn(*args, **kwargs)
            if step < self._hook_at:
                self._pending.append((step, out))
                if self._idle:
                    self._idle = False
                    self._sem.put(None)
            else:
                self._track_hooked(step, out)
            if self._compiled:
                self._program_seen(step, fn, args, kwargs)
            return out
        if not self._enabled:
            return fn(*args, **kwargs)
        self._start_full(step)
        out = fn(*args, **kwargs)
        self._track_full(step, out)
        if self._compiled or self._cost_first:
            # after track: the watcher times the step while the cost is read (a first
            # measured peak's probe then lies between steps, not inside one)
            self._program_seen(step, fn, args, kwargs)
        return out

    def _after_track(self, step: int, fn: Callable[..., Any] | None, args: tuple,
                     kwargs: dict | None) -> None:
        """The work ``_after`` flags, after a short-path hand-over (training thread): wake an
        idle watcher, read the program's cost after a compile (``fn``: the step's function,
        None from ``track``)."""
        self._after = False
        if self._idle:
            self._idle = False
            self._sem.put(None)
        if self._compiled:
            if fn is None:
                self._no_program(step)  # start/track: no function to analyse
            else:
                self._program_seen(step, fn, args, kwargs or {})

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` recorded, as a plain function: ``wrapped(step, *args)`` is ``self(step, fn, *args)``.

        The cheapest form of the recording (``benchmarks/step_recorder_bench.py``): calling
        an object, ``steps(step, fn, ...)``, goes through Python's generic ``__call__``
        slot (an argument tuple, a method lookup, a second call), and keyword arguments
        cost a dictionary per call; with cold caches each costs about 1 us. Wrap the step
        once, then call the wrapper every step with positional arguments (for keyword
        arguments use ``steps(step, fn, *args, **kwargs)``).

        Args:
            fn: the step function (e.g. a jitted train step).

        Returns:
            ``wrapped(step, *args)``: records ``step`` as :meth:`__call__` does and returns
            ``fn(*args)``; ``wrapped.__wrapped__`` is ``fn``.

        Raises:
            TypeError: ``fn`` is not callable.

        Example:
            >>> from goodput_jax import goodput, runtime
            >>> steps = runtime.StepRecorder(goodput.GoodputRecorder("j", "l"))
            >>> step_fn = steps.wrap(lambda x: x + 1)
            >>> step_fn(0, 1)
            2
        """
        if not callable(fn):
            raise TypeError(f"fn ({fn!r}) must be callable")
        rec = self
        pending_append = self._pending.append
        ready = self._sink_ready
        # the recorder's queue (fixed for its life): appended to only under a grant
        enq = ready.queue.append if ready is not None else None

        def recorded(step: int, *args: Any) -> Any:
            # StepRecorder.__call__'s short path (see there), no keyword dictionary
            n = rec._credit
            if not n or type(step) is not int or step < 0:
                return rec._call_full(step, fn, args, {})
            rec._credit = n - 1
            t = _time()
            if t >= rec._due:
                rec._poll()
                t = _time()
            enq((_START, t, step, None, None))
            out = fn(*args)
            pending_append((step, out))
            if rec._after:
                rec._after_track(step, fn, args, None)
            return out

        recorded.__wrapped__ = fn  # type: ignore[attr-defined]
        recorded.__name__ = recorded.__qualname__ = f"recorded_{getattr(fn, '__name__', 'step')}"
        recorded.__doc__ = f"``{recorded.__name__}(step, *args)``: {fn!r} recorded by a StepRecorder."
        return recorded

    # ------------------------------------------------------ program cost
    def _program_seen(self, step: Any, fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
        """A step call compiled (or is the first): record the program's cost (training
        thread; JAX's caches answer: 0.1 ms for a small program, about 1 ms for an 8-layer
        AdamW step, most of it reading the compiled module's matrix products; a measured
        peak once per process on a device the table does not know)."""
        self._cost_first = False
        if getattr(fn, "lower", None) is None:
            self._compiled = False
            return  # not a jitted function: no one program to analyse
        try:
            cost = program_cost(fn, *args, **kwargs)
            peak = self._cost_peak
            if peak is None:
                peak = lookup_peak(cost.device_kind, self._cost_table)
            if peak is None:
                peak = measured_peak(_devices_of(args, kwargs)[0])
            cost = dataclasses.replace(cost, peak=peak)
            # a compile between steps (an evaluation, a metric) flags the next step too: its
            # program is the one already recorded, unless the step recompiled into another
            if cost != self._cost_last:
                self._cost_last = cost
                self.recorder.record_program_cost(
                    cost, step if type(step) is int and step >= 0 else None)
        except Exception:
            logger.warning("goodput runtime: reading the program cost of %r failed", fn,
                           exc_info=True)
        # the read and a first peak probe compile on this thread: not a step's program
        self._compiled = False

    def _compile_callback(self) -> Callable[[], None]:
        """The attachment's compile callback: flags the compile for the step call's return
        (holds this StepRecorder weakly)."""
        ref = weakref.ref(self)
        att = self._att

        def step_program_compiled() -> None:
            steps = ref()
            if steps is None:  # collected without close(): leave the attachment
                att.remove_compile_callback(step_program_compiled)
            else:
                steps._compiled = True
                steps._after = True

        return step_program_compiled

    # ------------------------------------------------------ readiness hook
    def _track_hooked(self, step: int, outputs: Any) -> None:
        """track()'s short path with the readiness hook (training thread): the item is built
        here, so the hook and the watcher share it (whoever sees it ready first records)."""
        t = _time()  # the call returned
        item = _Item(step, outputs)
        self._pending.append(item)
        probe = item.probe
        if probe is not None and _ready(probe):
            # The call returned after the device finished the step (a runtime that ran the
            # program before returning, as the CPU client does for some steps): its end lies
            # before the return; recorded now, before waking the watcher (a woken thread can
            # take this thread's CPU on a loaded machine) and before this thread runs on.
            if self._hooked is not None:  # track() twice without a start: the hook must not
                self._hook_missed(step + 1 if type(step) is int else 0)  # fire in the claim
            self.ready_claims += self._claim_ready(None, t)
            probe = None
        if self._idle:
            self._idle = False
            self._sem.put(None)
        if probe is None:
            return
        if _getprofile() is not None:  # the user's profiler (or a debugger's): leave it alone
            self._hook_at = step + 1 + _HOOK_BACKOFF_MAX if type(step) is int else 0
            return
        self._install_hook(item)

    def _install_hook(self, item: _Item) -> None:
        """Install a profile function on this (the training) thread that records ``item``'s
        device end at the first function return after which its probe is ready, and then
        removes itself; it gives up after ``_HOOK_EVENTS`` events."""
        count = itertools.count(1).__next__
        claim = self._claim
        rec = self
        next_query = 0.0

        def ready_hook(frame: Any, event: str, arg: Any) -> None:
            # Called by the interpreter on every call and return of this thread while
            # installed: a blocking call (the device's wait) ends in a return, so calls are
            # only counted. Never raises (an exception here would surface in user code).
            nonlocal next_query
            n = count()
            if event == "call" or event == "c_call":
                if n < _HOOK_EVENTS:
                    return
                ok: bool | None = False
            elif rec._hooked is not ready_hook:
                ok = None  # removed at a start on another thread, or by close()
            elif item.t is not None:
                ok = True  # the watcher saw it first
            elif (now := _time()) < next_query and n < _HOOK_EVENTS:
                # asked less than _HOOK_QUERY_S ago: a run of Python between returns, not a
                # wait that just ended (the first return after a wait is later than that)
                return
            else:
                next_query = now + _HOOK_QUERY_S
                try:
                    ready = item.probe.is_ready()
                except Exception:  # noqa: BLE001 - donated or dropped: the watcher decides
                    ready = None
                if ready:
                    # the earlier steps the watcher has not recorded yet are done too: record
                    # them first, in order (profiling is off inside this function)
                    claimed = rec._claim_ready(item)
                    if item.t is None and claim(item):  # the earlier ones are not ready
                        item.hook = 2
                        claimed += 1
                    rec.hook_claims += claimed
                    ok = True
                elif ready is None:
                    ok = True
                elif n < _HOOK_EVENTS:
                    return
                else:
                    ok = False
            _setprofile(None)
            if ok is not None:
                step = item.step
                rec._hook_end(ready_hook, ok, step + 1 if type(step) is int else 0)

        item.hook = 1
        self._hooked = ready_hook
        self._sink = None  # the next start removes the hook if it is still installed
        self._credit = 0
        _setprofile(ready_hook)

    def _hook_end(self, hook: Callable, ok: bool, step: Any) -> None:
        """The hook ``hook`` is done: seen ready (try again next step, unless the watcher was
        the prompter one for the last ``_HOOK_NEEDLESS`` steps), or not (skip 1, 2, 4, ...
        steps; a step where the hook was worth it starts the count at 1 again)."""
        if self._hooked is hook:
            self._hooked = None
        if not ok or self._hook_need <= -_HOOK_NEEDLESS:
            self._hook_need = 0
            # ``step`` (the next step to start) and the skipped ones take the short path
            self._hook_at = step + self._hook_backoff if type(step) is int else 0
            self._hook_backoff = min(2 * self._hook_backoff, _HOOK_BACKOFF_MAX)
        if self._hooked is None:
            self._sink = self._put

    def _hook_verdict(self, item: _Item, recorded: bool) -> None:
        """The watcher, woken on ``item`` whose hook was installed: was the hook worth it?
        (``recorded``: the watcher recorded it, so it was the prompter one.)"""
        if not recorded and item.hook == 2 and item.t is not None \
                and _time() - item.t >= _HOOK_USEFUL_S:
            self._hook_need = 0
            self._hook_backoff = 1
        else:
            self._hook_need -= 1

    def _hook_missed(self, step: Any) -> None:
        """Step ``step`` starts while the previous step's hook is still installed: the host
        ran ahead of the device (the watcher, or the overdue poll, records that step)."""
        hook = self._hooked
        if hook is None:
            return
        if _getprofile() is hook:
            _setprofile(None)
        self._hook_end(hook, False, step)

    @property
    def tracked(self) -> int:
        """Steps handed over (taken by the watcher, or waiting for it)."""
        waiting = sum(1 for x in list(self._pending) if type(x) in (tuple, _Item))
        return self._seen + waiting

    # ------------------------------------------------------------- watcher
    def _start_thread(self) -> None:
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
                    waits.append(item.t - t0)
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

    # ------------------------------------------------------------- control
    def finish(self, timeout: float | None = None) -> bool:
        """Wait until every tracked step's device end is recorded (call before the job end).

        The calling thread sleeps (it holds no GIL) while the watcher waits on the steps in
        order and records each device end as it is seen, so the watcher is not kept waiting
        for the GIL by this thread's Python. A watcher that died stops the wait.

        Args:
            timeout: seconds to wait at most (None: until done).

        Returns:
            True when the watcher caught up.

        Example:
            >>> from goodput_jax import goodput, runtime
            >>> runtime.StepRecorder(goodput.GoodputRecorder("j", "l")).finish()
            True
        """
        th = self._thread
        if th is None:
            return True
        m = _Marker()
        self._handover(m)
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            left = _FINISH_POLL_S if end is None else min(_FINISH_POLL_S, end - time.monotonic())
            if m.done.wait(max(left, 0.0)):
                return True
            if not th.is_alive() or (end is not None and time.monotonic() >= end):
                return m.done.is_set()

    def close(self, timeout: float | None = 10.0) -> None:
        """:meth:`finish`, then stop the watcher thread (idempotent); a compile-time
        attachment this StepRecorder made is detached (a compile after the loop is not the
        job's)."""
        if self._own_att[0]:
            self._own_att[0] = False
            self.finish(timeout)
            self._att.detach()
        if self._thread is None:
            return
        self.finish(timeout)
        hook, self._hooked = self._hooked, None
        if hook is not None and _getprofile() is hook:
            _setprofile(None)
        self._live = False
        self._credit = 0
        self._sink = self._put = None
        if self._compile_cb is not None:
            self._att.remove_compile_callback(self._compile_cb)
            self._compile_cb = None
        self.recorder.remove_span_start_listener(self._span_listener)
        self._handover(_STOP)
        self._thread.join(timeout)
        self._thread = None
        _WATCHING.discard(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def finish_steps(recorder: Any, timeout: float | None = None) -> bool:
    """Wait until every step tracked for ``recorder`` has its device end recorded.

    :meth:`StepRecorder.finish` of each running ``StepRecorder`` that records on
    ``recorder``: code that holds the recorder, not the step recorder, calls it before it
    runs Python of its own while the device still finishes queued steps (an instrumented
    checkpoint save: the save waits for the device before it copies the arrays anyway, and
    while its Python holds the GIL the watcher would record the last device ends late).
    Returns at once when no ``StepRecorder`` records on ``recorder``, or none tracked a step.

    Args:
        recorder: the :class:`~goodput_jax.measure.recorder.GoodputRecorder`.
        timeout: seconds to wait at most for each step recorder (None: until done).

    Returns:
        True when every one caught up.

    Example:
        >>> from goodput_jax import goodput, runtime
        >>> rec = goodput.GoodputRecorder("j", "l")
        >>> runtime.finish_steps(rec)
        True
    """
    done = True
    for steps in list(_WATCHING):
        if steps.recorder is recorder:
            done = steps.finish(timeout) and done
    return done
