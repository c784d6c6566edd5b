"""The step recorder's full paths: the first steps, a new grant of short-path starts, the
readiness hook's way and steps the recorder validates (the short path is in
:mod:`goodput_jax.runtime.steps`, written once per door)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from goodput_jax.runtime.step_items import (
    _GRANT,
    _START,
    StepState,
    _getprofile,
    _Item,
    _ready,
    _restore_switch,
    _time,
)

logger = logging.getLogger("goodput_jax.runtime.steps")


class FullPaths(StepState):
    """Mixin of :class:`~goodput_jax.runtime.StepRecorder`: ``start``/``track``/call past the short path."""

    __slots__ = ()

    def _start_full(self, step: int) -> None:
        """``start`` past its shortest path: a readiness hook to remove, a grant used up, the
        first steps, or a step the recorder validates."""
        if self._span_switch[1] is not None:
            _restore_switch(self._span_switch)
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
        self._put(_START, t, step)  # type: ignore[misc]  # the short path: set
        if self._hooked is None and step < self._hook_at:  # else: the hook is due (no grant)
            self._credit = self._sink_ready.reserve(  # type: ignore[union-attr]
                min(_GRANT, self._hook_at - step - 1))

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

    def _call_full(self, step: int, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """A step call past the shortest path (the first steps, a readiness hook, a step the
        recorder validates): ``start``, the call, ``track``, then the program's cost when the
        call compiled."""
        if self._span_switch[1] is not None:
            _restore_switch(self._span_switch)  # held since a span's start: the step is here
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
                self._credit = self._sink_ready.reserve(  # type: ignore[union-attr]
                min(_GRANT, self._hook_at - step - 1))
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
        if self._span_switch[1] is not None:
            _restore_switch(self._span_switch)  # held since a span's start: the step is here
        if self._idle:
            self._idle = False
            self._sem.put(None)
        if self._compiled:
            if fn is None:
                self._no_program(step)  # start/track: no function to analyse
            else:
                self._program_seen(step, fn, args, kwargs or {})
