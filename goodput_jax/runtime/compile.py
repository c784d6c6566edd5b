"""Compile time measured from ``jax.monitoring``, recorded on attached recorders.

JAX reports its own compilation work through :mod:`jax.monitoring`: one time
span per jaxpr trace (``/jax/core/compile/jaxpr_trace_duration``), per lowering
to MLIR (``.../jaxpr_to_mlir_module_duration``) and per backend compile
(``.../backend_compile_duration``, which also covers a persistent-cache
retrieval). One listener per process (installed the first time a recorder is
attached) chains each backend compile with the trace and lowering spans that
led up to it on the same thread, and records the chain's length (from the first
chained span's start to the compile's end; nested traces count once, and the
host's work between the phases counts with them: it is part of the same call)
as one
:meth:`~goodput_jax.measure.recorder.GoodputRecorder.record_compilation` on every
attached recorder.

The chain is found by name: JAX names the lowering and the compile of a
program after its top-level function (``jit(train_step)``) and the trace after
the function itself (``train_step``), so the latest lowering of the compiled
program and then the latest trace of its function join the chain whatever the
time between them (up to :data:`MATCHED_GAP_S`): on a loaded machine, or for a
large program, the host's work between tracing and lowering takes tens to
hundreds of milliseconds (0.18 s for a 1,000-op program), and a chain cut
there lost the whole trace (compile time 0.385 s against 0.515 s of host time
on the first call of a new shape, under load). Other spans (a trace JAX names
differently) join only when they end within :data:`CHAIN_GAP_S` of the chain.

A compilation is a *recompile* when a program of the same name (e.g.
``jit(train_step)`` with a new batch shape) was already compiled while the
recorder was attached, and training is under way: a
:class:`~goodput_jax.runtime.StepRecorder` on the recorder has started its
second step. Compiles before and within the first step, and any compile of a
recorder without a StepRecorder, are program startup.

The listener costs one attribute read per JAX compile event while no recorder
is attached, and nothing before the first attach. An event name a JAX version
does not emit is simply never seen (no compile time is recorded, nothing fails).
Only compiles on the thread that attached are recorded (the training thread:
a compile on a background thread does not stall training), unless
``attach(recorder, all_threads=True)``.

Example:
    >>> from goodput_jax import goodput, runtime
    >>> rec = goodput.GoodputRecorder("job", "log")   # disabled: attach is a no-op
    >>> with runtime.attach(rec):
    ...     pass
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any, Self

from goodput_jax.runtime.contracts import CompileRecording, require

logger = logging.getLogger(__name__)

#: JAX's event names (stable from jax 0.4.x through 0.12)
TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
LOWER_EVENT = "/jax/core/compile/jaxpr_to_mlir_module_duration"
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_PRE_EVENTS = frozenset((TRACE_EVENT, LOWER_EVENT))

#: a trace / lowering span of another name that ended more than this long before the
#: chain's start belongs to something else (``jax.eval_shape``, a Flax ``init``)
CHAIN_GAP_S = 0.05
#: the lowering of the compiled program, and the trace of its function, join the chain
#: when they ended at most this long before it: long enough for the host's work between
#: the phases under load, short enough that a trace done earlier for another purpose
#: (``jax.eval_shape`` of the jitted step, whose trace the call then reuses) or an
#: ahead-of-time ``.lower()`` long before ``.compile()`` stays the user's time
MATCHED_GAP_S = 0.5
#: spans kept per thread while waiting for a backend compile
_MAX_PENDING = 256

__all__ = ["Attachment", "CompileListener", "attach", "attached", "detach", "listener"]


class Attachment:
    """One recorder receiving runtime measurements; a context manager that detaches.

    Attributes:
        recorder: the :class:`GoodputRecorder` fed.
        compilations: compilations recorded so far.
        recompilations: how many of them were recompiles.
        compile_seconds: their total duration.

    Example:
        >>> from goodput_jax import goodput, runtime
        >>> att = runtime.attach(goodput.GoodputRecorder("j", "l"))
        >>> att.compilations
        0
        >>> att.detach()
    """

    def __init__(self, recorder: Any, thread: int | None = None):
        self._ref = weakref.ref(recorder)
        self.thread = thread  # only compiles on this thread (None: every thread)
        self._names: set[str] = set()
        self._lock = threading.Lock()
        # step starts reported (a StepRecorder reports its first two: all the rule below needs)
        self.steps_started = 0
        self.compilations = 0
        self.recompilations = 0
        self.compile_seconds = 0.0
        self._job_ran = False
        self._warned_ended = False
        #: called (no arguments) after each compilation is recorded (a tuple: read without a
        #: lock, replaced on change)
        self._callbacks: tuple[Callable[[], Any], ...] = ()

    @property
    def recorder(self) -> Any:
        return self._ref()

    @property
    def live(self) -> bool:
        """False once the recorder was garbage-collected or closed (then it is dropped)."""
        rec = self._ref()
        return rec is not None and not rec.closed

    def step_started(self) -> None:
        """Count a training step's start (a StepRecorder calls it; so can a trainer that
        records its own steps). From the second step on, a repeated program name is a
        recompile.

        Example:
            >>> from goodput_jax import goodput, runtime
            >>> att = runtime.attach(goodput.GoodputRecorder("j", "l"))
            >>> att.step_started(); att.steps_started
            1
        """
        self.steps_started += 1

    def _on_compile(self, duration: float, end: float, name: str) -> None:
        rec = self._ref()
        if rec is None:
            return
        # a finished job stays finished: once the recorder's job ran and ended, a compile
        # (an evaluation, a read of the statistics after the loop) is not the job's; a new
        # job start on the recorder records them again
        if rec.job_started:
            self._job_ran = True
        elif self._job_ran:
            if not self._warned_ended:
                self._warned_ended = True
                logger.warning("goodput runtime: a compile of %r after the job's end is not "
                               "recorded (the job ended; detach or start a new job)", name)
            return
        with self._lock:
            seen = name in self._names
            self._names.add(name)
            recompile = seen and self.steps_started >= 2
            self.compilations += 1
            self.recompilations += recompile
            self.compile_seconds += duration
        rec.record_compilation(duration, end, recompile=recompile, name=name)
        for callback in self._callbacks:
            callback()

    def add_compile_callback(self, callback: Callable[[], Any]) -> None:
        """Call ``callback()`` after each compilation recorded through this attachment (on the
        thread that compiled, inside the compiling call). A StepRecorder learns so that a step
        call compiled, with nothing to read on its steps that compile nothing.

        Raises:
            TypeError: ``callback`` is not callable.

        Example:
            >>> from goodput_jax import goodput, runtime
            >>> att = runtime.attach(goodput.GoodputRecorder("j", "l"))
            >>> att.add_compile_callback(print); att.remove_compile_callback(print)
        """
        if not callable(callback):
            raise TypeError(f"callback ({callback!r}) must be callable")
        with self._lock:
            self._callbacks = (*self._callbacks, callback)

    @property
    def compile_callbacks(self) -> tuple[Callable[[], Any], ...]:
        """The callbacks added with :meth:`add_compile_callback`, in order."""
        return self._callbacks

    def remove_compile_callback(self, callback: Callable[[], Any]) -> None:
        """Stop calling ``callback`` (added with :meth:`add_compile_callback`; idempotent)."""
        with self._lock:
            self._callbacks = tuple(c for c in self._callbacks if c is not callback)

    def detach(self) -> None:
        """Stop feeding this recorder (idempotent)."""
        detach(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.detach()


class CompileListener:
    """The process-wide ``jax.monitoring`` listener (see :func:`listener`).

    Attributes:
        installed: whether the callbacks are registered with ``jax.monitoring``.
        events_seen: JAX compile events received (all, attached or not).
    """

    def __init__(self) -> None:
        self.installed = False
        self.events_seen = 0
        self._tls = threading.local()
        self._lock = threading.Lock()
        self._attached: tuple[Attachment, ...] = ()

    def install(self) -> None:
        """Register with ``jax.monitoring`` once per process (idempotent)."""
        with self._lock:
            if self.installed:
                return
            import jax.monitoring as mon

            if hasattr(mon, "register_event_time_span_listener"):
                mon.register_event_time_span_listener(self._on_span)
            else:  # older JAX: durations only; the span ends now
                mon.register_event_duration_secs_listener(self._on_duration)
            self.installed = True

    # ------------------------------------------------------------- callbacks
    def _on_duration(self, event: str, duration_secs: float, **kwargs: Any) -> None:
        import time

        end = time.time()
        self._on_span(event, end - duration_secs, end, **kwargs)

    def _on_span(self, event: str, start_time: float, end_time: float, **kwargs: Any) -> None:
        if not self._attached:
            return
        if any(not a.live for a in self._attached):
            for a in self._attached:
                if not a.live:
                    self.remove(a)
            if not self._attached:
                return
        if event in _PRE_EVENTS:
            self.events_seen += 1
            pend = getattr(self._tls, "pending", None)
            if pend is None:
                pend = self._tls.pending = []
            pend.append((start_time, end_time, event, str(kwargs.get("fun_name", ""))))
            if len(pend) > _MAX_PENDING:
                del pend[: len(pend) // 2]
        elif event == BACKEND_COMPILE_EVENT:
            self.events_seen += 1
            pend = getattr(self._tls, "pending", None) or []
            self._tls.pending = []
            name = str(kwargs.get("fun_name", "")) or "<unknown>"
            duration = chain_duration(pend, start_time, end_time, name)
            tid = threading.get_ident()
            for att in self._attached:
                if att.thread is not None and att.thread != tid:
                    continue
                try:
                    att._on_compile(duration, end_time, name)
                except Exception:
                    logger.exception("goodput runtime: recording a compilation failed")

    # ------------------------------------------------------------ registry
    def add(self, att: Attachment) -> None:
        with self._lock:
            self._attached = (*self._attached, att)

    def remove(self, att: Attachment) -> None:
        with self._lock:
            self._attached = tuple(a for a in self._attached if a is not att)

    @property
    def attachments(self) -> tuple[Attachment, ...]:
        return self._attached


def _traced_as(fun: str, program: str) -> bool:
    """Whether a trace of ``fun`` is the top-level trace of ``program`` (``jit(fun)``,
    ``pmap(fun)``, or the same name)."""
    return bool(fun) and (program == fun or program.endswith(f"({fun})"))


def chain_duration(pending: list[tuple], start: float, end: float, name: str = "") -> float:
    """Seconds from the start of the chain of spans that led to a compile until its end.

    ``pending`` holds ``(start, end)`` or ``(start, end, event, fun_name)`` spans of this
    thread's traces and lowerings; ``name`` is the compiled program's. The latest lowering
    named ``name`` and then the latest trace of its function (``train_step`` for
    ``jit(train_step)``) join the chain when they ended at most :data:`MATCHED_GAP_S`
    before it; any other span joins when it ends no more than :data:`CHAIN_GAP_S` before
    the chain's current start. Nested spans (an inner ``jit`` traced inside an outer one)
    lie inside the chain, and the host's work between trace, lowering and compile counts
    with them (it is part of the same ``jit`` call).

    Example:
        >>> chain_duration([(0.0, 1.0), (0.2, 0.5), (1.01, 1.5)], 1.5, 3.0)
        3.0
        >>> chain_duration([(0.0, 1.0)], 5.0, 6.0)  # too long ago: not part of it
        1.0
        >>> spans = [(0.0, 1.0, TRACE_EVENT, "f"), (1.3, 1.5, LOWER_EVENT, "jit(f)")]
        >>> chain_duration(spans, 1.5, 3.0, "jit(f)")  # 0.3 s between trace and lowering
        3.0
    """
    lo = start
    spans = sorted(pending, key=lambda span: span[1], reverse=True)
    if name:
        # the program's own lowering, then its function's trace, by name
        for kind, match in ((LOWER_EVENT, lambda n: n == name),
                            (TRACE_EVENT, lambda n: _traced_as(n, name))):
            for sp in spans:
                if len(sp) > 2 and sp[2] == kind and match(sp[3]) and sp[1] <= lo + 1e-3:
                    if sp[1] >= lo - MATCHED_GAP_S:
                        lo = min(lo, sp[0])
                    break
    for sp in spans:
        s, e = sp[0], sp[1]
        if e < lo - CHAIN_GAP_S:
            break
        lo = min(lo, s)  # a span inside the chain (nested) changes nothing
    return max(end - lo, 0.0)


_LISTENER = CompileListener()


def listener() -> CompileListener:
    """The process-wide listener (installed on the first :func:`attach`).

    Example:
        >>> listener().events_seen >= 0
        True
    """
    return _LISTENER


def attach(recorder: CompileRecording, *, all_threads: bool = False) -> Attachment:
    """Feed ``recorder`` the JAX compilations of the calling thread from now on.

    Only the training thread's compiles stall training: a compile on another
    thread (a background model fit, a checkpointing thread) overlaps it, so by
    default only compiles on the thread that attaches are recorded. A disabled
    recorder (``logging_enabled=False``) gets a detached handle and nothing is
    installed.

    Args:
        recorder: a :class:`~goodput_jax.measure.recorder.GoodputRecorder`.
        all_threads: record compiles on every thread of the process.

    Returns:
        An :class:`Attachment` (a context manager that detaches on exit).

    Raises:
        TypeError: ``recorder`` is not a :class:`~goodput_jax.runtime.contracts.CompileRecording`
            (the message names the members it lacks).

    Example:
        >>> from goodput_jax import goodput, runtime
        >>> rec = goodput.GoodputRecorder("j", "l")
        >>> runtime.attach(rec).detach()
    """
    require(recorder, CompileRecording)
    for att in _LISTENER.attachments:
        if att.recorder is recorder:
            return att
    att = Attachment(recorder, None if all_threads else threading.get_ident())
    if recorder.logging_enabled:
        _LISTENER.install()
        _LISTENER.add(att)
    return att


def attached(recorder: Any) -> Attachment | None:
    """The live attachment of ``recorder``, or None.

    Example:
        >>> attached(object()) is None
        True
    """
    for att in _LISTENER.attachments:
        if att.recorder is recorder:
            return att
    return None


def detach(what: Any) -> None:
    """Stop feeding a recorder (pass the recorder or its :class:`Attachment`).

    Example:
        >>> detach(object())  # not attached: nothing happens
    """
    for att in _LISTENER.attachments:
        if att is what or att.recorder is what or att.recorder is None:
            _LISTENER.remove(att)
