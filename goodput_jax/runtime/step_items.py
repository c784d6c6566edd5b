"""The step recorder's shared parts: its tuning constants, the tracked-step item, the
readiness checks and its typed state (:class:`StepState`), which
:mod:`goodput_jax.runtime.steps` and its rooms import."""

from __future__ import annotations

import collections
import os
import queue
import select
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from goodput_jax.measure.recorder import StepSink

if TYPE_CHECKING:
    from goodput_jax.measure.productivity import DevicePeak
    from goodput_jax.runtime.compile import Attachment
    from goodput_jax.runtime.contracts import StepRecording

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
#: the longest switch interval ``StepRecorder(switch_interval=...)`` accepts: Python's default
#: (a longer one only delays every observation more)
_SWITCH_MAX = 0.005


#: the StepRecorders that hold a shortened switch interval (``StepRecorder(switch_interval=
#: ...)``), the interval to put back when the last lets go, and the one they set
_SWITCH_HELD: list = [0, None, None]


if os.name == "posix":
    def _let_go_of_the_gil() -> None:
        """Release the GIL for a moment, without giving up the CPU (``select`` on nothing,
        about 0.6 us): a thread already waiting for the GIL (the watcher, handed a step at
        the step call) is woken and waits again with the interval now set. CPython reads
        the interval when a wait starts, so without this that thread would sit out the
        interval it started with (5 ms by default) however short the new one is: in
        ``benchmarks/step_truth_bench.py``'s ``py6-lagged`` about one step in five was seen
        3-5 ms late, each time about 5 ms after the span's start."""
        select.select([], [], [], 0)
else:  # Windows' select needs a socket: a zero sleep releases the GIL there
    def _let_go_of_the_gil() -> None:
        """Release the GIL for a moment (see the POSIX version)."""
        time.sleep(0)


def _set_switch(switch: list) -> None:
    """Apply ``switch[0]`` (``StepRecorder(switch_interval=...)``) as the interpreter's switch
    interval where it is shorter than the current one, and hold it (``switch[1]``) until
    :func:`_restore_switch`; the first holder remembers the interval to put back."""
    wanted = switch[0]
    if wanted is None or switch[1] is not None:
        return
    held = _SWITCH_HELD
    cur = sys.getswitchinterval()
    if not held[0]:
        held[1] = cur
    if wanted < cur:
        sys.setswitchinterval(wanted)
        _let_go_of_the_gil()
    held[0] += 1
    held[2] = sys.getswitchinterval()
    switch[1] = True


def _restore_switch(switch: list) -> None:
    """Let go of the switch interval :func:`_set_switch` held; the last holder puts back the
    interval it replaced, unless someone changed it since (their value stays)."""
    if switch[1] is None:
        return
    switch[1] = None
    held = _SWITCH_HELD
    held[0] -= 1
    if not held[0] and held[1] is not None and sys.getswitchinterval() == held[2]:
        sys.setswitchinterval(held[1])


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


def _wait_ready(outputs: Any, leaves_of: Callable[[Any], list[Any]], is_array: type[Any]) -> bool:
    """Block until every live array of ``outputs`` is ready; False when none could be watched."""
    watched = False
    leaf: Any
    for leaf in leaves_of(outputs):
        if not isinstance(leaf, is_array) or leaf.is_deleted():
            continue
        try:
            leaf.block_until_ready()
            watched = True
        except Exception:  # noqa: BLE001, S112 - deleted (donated) meanwhile: try the next
            continue
    return watched


@runtime_checkable
class Pollable(Protocol):
    """A step output the training thread can ask whether it is ready (a ``jax.Array``)."""

    def is_ready(self) -> bool: ...


#: output type -> whether it is :class:`Pollable` (the protocol's check costs microseconds; a
#: dict lookup per step does not)
_POLLABLE: dict[type, bool] = {}


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
            ok = _POLLABLE.get(t)
            if ok is None:
                ok = _POLLABLE[t] = isinstance(out, Pollable)
            return out if ok else None
        depth += 1
    return None


class StepState:
    """The state of a :class:`~goodput_jax.runtime.StepRecorder`, typed, shared by its rooms
    (``steps``, ``step_paths``, ``step_watch``, ``step_hook``: each a mixin on this base);
    the constructor is ``StepRecorder.__init__``. The methods below are each defined in one
    of the rooms (declared here so that each room type-checks alone)."""

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
        "_span_switch",
        "_start_step",
        "_switch",
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

    recorder: StepRecording
    observed: int
    unobserved: int
    hook_claims: int
    ready_claims: int
    span_claims: int
    _after: bool
    _att: Attachment | None
    _compile_cb: Callable[[], None] | None
    _compiled: bool
    _cost_first: bool
    _cost_last: Any
    _cost_peak: DevicePeak | None
    _cost_table: dict[str, DevicePeak] | None
    _credit: int
    _due: float
    _due_gap: float
    _enabled: bool
    _enq: Callable[[tuple], None] | None
    _first: _Item | None
    _handed: int
    _head: _Item | None
    _hook_at: int
    _hook_backoff: int
    _hook_need: int
    _hooked: Callable[..., Any] | None
    _idle: bool
    _live: bool
    _lock: threading.Lock
    _next: _Item | None
    _own_att: list[bool]
    _pending: collections.deque
    _put: Callable[..., None] | None
    _record_end: Callable[..., None]
    _seen: int
    _sem: queue.SimpleQueue
    _sink: Callable[..., None] | None
    _sink_ready: StepSink | None
    _slow_starts: int
    _span_listener: Callable[[], None]
    #: ``[wanted, held]`` for ``span_switch_interval``: held from a badput span's start while
    #: a step is in flight to the next step call (None: not held)
    _span_switch: list[Any]
    _start_step: Callable[..., None]
    #: ``[wanted, held, auto]``: the switch interval asked for (None: leave it), whether
    #: this recorder holds it (from the watcher's start to close; None: not), and whether it
    #: is the span interval held for a loop that marks no spans (let go at the first span)
    _switch: list[Any]
    _thread: threading.Thread | None
    _warned: bool
    _warned_program: bool

    # ---------------------------------------------- defined in the rooms (see each)
    def _poll(self) -> bool:
        raise NotImplementedError

    def _claim(self, item: _Item, t: float | None = None) -> bool:
        raise NotImplementedError

    def _claim_ready(self, hooked: _Item | None = None, t: float | None = None) -> int:
        raise NotImplementedError

    def _wait_first(self) -> None:
        raise NotImplementedError

    def _start_thread(self) -> None:
        raise NotImplementedError

    def _handover(self, item: Any) -> None:
        raise NotImplementedError

    def _track_hooked(self, step: int, outputs: Any) -> None:
        raise NotImplementedError

    def _install_hook(self, item: _Item) -> None:
        raise NotImplementedError

    def _hook_missed(self, step: Any) -> None:
        raise NotImplementedError

    def _hook_verdict(self, item: _Item, recorded: bool) -> None:
        raise NotImplementedError

    def _program_seen(self, step: Any, fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
        raise NotImplementedError

    def _no_program(self, step: Any) -> None:
        raise NotImplementedError
