"""The step recorder's readiness hook: a profile function on the training thread that
records a step's device end at the first function return after which it is ready (a loop
that waits for its steps), with its back-off for loops that run ahead."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from typing import Any

from goodput_jax.runtime.step_items import (
    _HOOK_BACKOFF_MAX,
    _HOOK_EVENTS,
    _HOOK_NEEDLESS,
    _HOOK_QUERY_S,
    _HOOK_USEFUL_S,
    StepState,
    _getprofile,
    _Item,
    _ready,
    _setprofile,
    _time,
)

logger = logging.getLogger("goodput_jax.runtime.steps")


class ReadinessHook(StepState):
    """Mixin of :class:`~goodput_jax.runtime.StepRecorder`: the readiness hook."""

    __slots__ = ()

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
        self._hook_end(hook, False, step)  # type: ignore[arg-type]
