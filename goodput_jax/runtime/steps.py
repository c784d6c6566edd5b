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
import functools
import logging
import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, Self

from goodput_jax.measure.productivity import DevicePeak, lookup_peak
from goodput_jax.runtime.compile import attach, attached
from goodput_jax.runtime.contracts import StepRecording, require
from goodput_jax.runtime.program import (
    PEAK_PROBE,
    _devices_of,
    peak_or_later,
    prefetch_peak,
    program_cost,
    wait_for_probes,
)
from goodput_jax.runtime.step_hook import ReadinessHook
from goodput_jax.runtime.step_items import (  # noqa: F401 - tests read them here
    _FINISH_POLL_S,
    _GRANT,
    _HOOK_QUERY_S,
    _INF,
    _START,
    _STOP,
    _SWITCH_MAX,
    _WATCHING,
    _getprofile,
    _Item,
    _Marker,
    _restore_switch,
    _setprofile,
    _time,
)
from goodput_jax.runtime.step_paths import FullPaths
from goodput_jax.runtime.step_watch import StepWatching, _finalize

logger = logging.getLogger(__name__)

__all__ = ["StepRecorder", "finish_steps"]


class StepRecorder(FullPaths, StepWatching, ReadinessHook):
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

    The first tracked step is waited for at the second ``start`` (once, usually hidden
    behind loading the next batch), so the store shows device ends before the host runs ahead.

    Where no thread observes readiness promptly (a loader holding the GIL while the device
    finishes, in a loop that never waits), the watcher records the end once it gets the GIL:
    late by up to the switch interval, which the recorder shortens (the options below).

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
        switch_interval: seconds; while the watcher runs (first tracked step to
            :meth:`close`) the interpreter's switch interval (``sys.setswitchinterval``,
            process-wide) is at most this; the last such recorder to close puts the old one
            back (unless changed meanwhile): a loader's Python holding the GIL delays the
            watcher by up to it (5 ms by default; docs/semantics.md). None (the default):
            ``span_switch_interval``, held so until the loop's first badput span.
        span_switch_interval: seconds; from the start of a badput span (``with
            recorder.data_loading():``, a checkpoint, a custom span) during which a step is
            in flight, to the next step call, the switch interval is at most this (then put
            back): the window where a loader's Python would delay the watcher. Default
            ``1e-5``; a loader of more Python threads than cores may want ``1e-4`` (they
            hand the GIL over that often: docs/semantics.md). None: left alone (in a loop
            without spans too).

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

    __slots__ = ()  # the state is StepState's (slots: see there)

    def __init__(self, recorder: StepRecording, *, compile_times: bool = True,
                 program_costs: bool = True, peak: DevicePeak | None = None,
                 peak_table: dict[str, DevicePeak] | None = None,
                 switch_interval: float | None = None,
                 span_switch_interval: float | None = 1e-5):
        self.recorder: StepRecording = require(recorder, StepRecording)
        for name, value in (("switch_interval", switch_interval),
                            ("span_switch_interval", span_switch_interval)):
            if value is not None and (type(value) not in (int, float)
                                      or not 0 < value <= _SWITCH_MAX):
                raise ValueError(f"{name} ({value!r}) must be None or a number of seconds in "
                                 f"(0, {_SWITCH_MAX}]")
        span = None if span_switch_interval is None else float(span_switch_interval)
        # [wanted, held, auto]: auto (no switch_interval): the span interval, let go at the
        # first span (a loop that marks none keeps it while the watcher runs)
        self._switch = [span if switch_interval is None else float(switch_interval), None,
                        switch_interval is None]
        self._span_switch = [span, None]
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
        att = self._att
        if costs and att is not None:
            self._compile_cb = self._compile_callback()
            att.add_compile_callback(self._compile_cb)
            if peak is None:  # a device no table knows: its peak probe starts now, off this
                prefetch_peak(table=peak_table)  # thread (nothing when a cache has it)
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
                               self._compile_cb, self._own_att, (self._switch, self._span_switch))
        fin.atexit = False  # at exit the daemon watcher simply ends, as the recorder flushes

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
            self._enq((_START, t, step, None, None))  # type: ignore[misc]  # StepSink's event, under its grant
            return
        self._start_full(step)

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
        self._enq((_START, t, step, None, None))  # type: ignore[misc]  # set with the grant
        out = fn(*args, **kwargs)
        self._pending.append((step, out))  # the watcher builds the _Item
        if self._after:
            self._after_track(step, fn, args, kwargs)
        return out

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
            enq((_START, t, step, None, None))  # type: ignore[misc]  # set with the grant
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
            if peak is None and cost == self._cost_last:  # its record waits for the probe
                self._compiled = False
                return
            if peak is None:
                peak = peak_or_later(_devices_of(args, kwargs)[0],
                                     functools.partial(self._record_probed, cost, step))
            if peak is None:  # the probe runs on its own thread: recorded when it ends
                self._cost_last = cost
                self._compiled = False
                return
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

    def _record_probed(self, cost: Any, step: Any, peak: DevicePeak) -> None:
        """The peak probe's thread, when it ends: record the cost read at ``step`` with the
        peak it measured (the probe never held the training thread)."""
        cost = dataclasses.replace(cost, peak=peak)
        self._cost_last = cost
        self.recorder.record_program_cost(cost, step if type(step) is int and step >= 0 else None)

    def _compile_callback(self) -> Callable[[], None]:
        """The attachment's compile callback: flags the compile for the step call's return
        (holds this StepRecorder weakly)."""
        ref = weakref.ref(self)
        att = self._att

        def step_program_compiled() -> None:
            steps = ref()
            if steps is None:  # collected without close(): leave the attachment
                att.remove_compile_callback(step_program_compiled)  # type: ignore[union-attr]
            else:
                steps._compiled = True
                steps._after = True

        return step_program_compiled

    @property
    def tracked(self) -> int:
        """Steps handed over (taken by the watcher, or waiting for it)."""
        waiting = sum(1 for x in list(self._pending) if type(x) in (tuple, _Item))
        return self._seen + waiting

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
            self._att.detach()  # type: ignore[union-attr]  # made it
        if self._thread is None:
            return
        self.finish(timeout)
        last = self._cost_last
        if last is not None and last.peak is None:
            # a job shorter than its machine's first peak probe: wait for the probe, in a
            # bucket of its own ("peak probe"), so the cost is recorded before the job ends
            self.recorder.record_custom_badput_event_start_time(
                custom_badput_event_type=PEAK_PROBE)
            wait_for_probes(120.0)
            self.recorder.record_custom_badput_event_end_time(
                custom_badput_event_type=PEAK_PROBE)
        hook, self._hooked = self._hooked, None
        if hook is not None and _getprofile() is hook:
            _setprofile(None)
        self._live = False
        self._credit = 0
        self._sink = self._put = None
        if self._compile_cb is not None:
            self._att.remove_compile_callback(self._compile_cb)  # type: ignore[union-attr]
            self._compile_cb = None
        self.recorder.remove_span_start_listener(self._span_listener)
        self._handover(_STOP)
        self._thread.join(timeout)
        self._thread = None
        _WATCHING.discard(self)
        _restore_switch(self._switch)
        _restore_switch(self._span_switch)

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
