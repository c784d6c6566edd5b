"""The one-step-late step timer: device-busy step times without stalling the dispatch.

:class:`OneStepLateTimer` times the steps of a loop that dispatches asynchronously:
after dispatching step ``i`` it waits for step ``i - 1``'s outputs, so host and device
overlap by one step. :class:`goodput_jax.integrations.hooks.GoodputHooks` profiles with
it. Importing this module does not import JAX (the first timer does).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["OneStepLateTimer"]

#: Concrete array types seen (``isinstance(x, jax.Array)`` goes through an ABC check,
#: microseconds per step on the hot path; a type lookup does not).
_ARRAY_TYPES: set = set()
_wall = time.time
#: ``jax``, imported by the first timer (importing ``goodput_jax.runtime`` loads no JAX).
jax: Any = None


def _live_arrays(outputs: Any) -> list:
    # The outputs of one XLA program become ready together: a couple of live
    # leaves (the last ones: losses and metrics, rarely donated) stand for all.
    # Fast path (most loops return ``(..., loss)``): the last element alone,
    # without flattening the parameters and optimizer state every step.
    if type(outputs) is tuple and outputs:
        last = outputs[-1]
        t = type(last)
        known = t in _ARRAY_TYPES
        if not known and isinstance(last, jax.Array):
            _ARRAY_TYPES.add(t)
            known = True
        if known and not last.is_deleted():
            return [last]
    leaves = [x for x in jax.tree.leaves(outputs) if isinstance(x, jax.Array)]
    return [x for x in leaves[::-1][:2] if not x.is_deleted()] or [
        x for x in leaves if not x.is_deleted()][:1]


def _all_ready(arrays: list) -> bool:
    for a in arrays:
        try:
            if not a.is_ready():
                return False
        except Exception:  # noqa: BLE001, S112 - deleted meanwhile: nothing to wait for
            continue
    return True


def _block(arrays: list) -> None:
    for a in arrays:
        if a.is_deleted():
            continue
        try:
            a.block_until_ready()
        except Exception:  # noqa: BLE001, S112 - donated to a later step: its successor covers it
            continue


class OneStepLateTimer:
    """Step times without stalling the dispatch: wait for step ``i - 1`` after dispatching ``i``.

    :meth:`dispatched` is the only timing call the hooks make. It returns the
    steps that completed, as ``(step, seconds, wall_end, tag)`` tuples (``tag``:
    what the caller passed with the step, e.g. its configuration). A step's time
    is its device-busy interval ``ready(i) - max(dispatch_start(i), ready(i-1))``.
    Outputs that are already ready when the call returns (host-side functions,
    synchronous backends) complete at once.

    Readiness queries cost microseconds each (~10 us on the multi-device CPU
    backend), and a loop whose device is behind finds the previous step still
    running at the next dispatch, and the new outputs never ready at once. So each
    of the two queries runs while it has found something in the last
    :data:`PROBE_KEEP` tries, and otherwise on one call in :data:`PROBE_EVERY`:
    a host-bound loop or a synchronous backend is detected within that many steps
    and probed every step from then on.

    Args:
        clock: monotonic seconds.

    Example:
        >>> from goodput_jax.runtime import OneStepLateTimer
        >>> t = iter([0.0, 1.0, 1.0, 3.0])
        >>> timer = OneStepLateTimer(lambda: next(t))
        >>> timer.dispatched(0, None, 0.0, 1.0)[0][:2]   # no arrays: complete at once
        (0, 1.0)
    """

    #: Probe every call for this many calls after a probe found something ready.
    PROBE_KEEP = 8
    #: Otherwise probe one call in this many.
    PROBE_EVERY = 16

    def __init__(self, clock: Callable[[], float]):
        global jax
        if jax is None:
            import jax as _jax

            jax = _jax
        self._clock = clock
        self._pending: tuple | None = None
        self._calls = 0
        self._probe_pending = self.PROBE_KEEP  # before_dispatch: the previous step
        self._probe_new = self.PROBE_KEEP  # dispatched: the new outputs
        self._last_ready: float | None = None
        #: Seconds spent waiting for the device (not the hooks' own cost: a loop waits anyway).
        self.waited = 0.0

    def _complete(self, item: tuple, t_end: float) -> tuple[int, float, float, Any]:
        step, _arrays, t_start, tag = item
        last = self._last_ready
        begin = t_start if last is None or t_start >= last else last
        self._last_ready = t_end
        d = t_end - begin
        return step, max(0.0, d), _wall(), tag

    def before_dispatch(self, t_start: float) -> list[tuple[int, float, float, Any]]:
        """Called right before the next dispatch: completes the pending step if it is ready."""
        if self._pending is None:
            return []
        if self._probe_pending <= 0 and self._calls % self.PROBE_EVERY:
            return []
        if _all_ready(self._pending[1]):
            self._probe_pending = self.PROBE_KEEP
            item, self._pending = self._pending, None
            return [self._complete(item, t_start)]
        self._probe_pending -= 1
        return []

    def dispatched(self, step: int, outputs: Any, t_start: float,
                   t_dispatched: float, tag: Any = None) -> list[tuple[int, float, float, Any]]:
        """Register step ``step`` (dispatched between ``t_start`` and ``t_dispatched``)."""
        arrays = _live_arrays(outputs)
        done = []
        self._calls += 1
        probe = not arrays or self._probe_new > 0 or not self._calls % self.PROBE_EVERY
        if probe and _all_ready(arrays):
            if arrays:
                self._probe_new = self.PROBE_KEEP
            if self._pending is not None:
                done.append(self._complete(self._pending, t_dispatched))
                self._pending = None
            done.append(self._complete((step, arrays, t_start, tag), t_dispatched))
            return done
        if probe:
            self._probe_new -= 1
        if self._pending is not None:
            t0 = self._clock()
            _block(self._pending[1])
            t_end = self._clock()
            self.waited += t_end - t0
            done.append(self._complete(self._pending, t_end))
        self._pending = (step, arrays, t_start, tag)
        return done

    def flush(self) -> list[tuple[int, float, float, Any]]:
        """Wait for the pending step (if any) and return it completed."""
        if self._pending is None:
            return []
        _block(self._pending[1])
        item, self._pending = self._pending, None
        return [self._complete(item, self._clock())]

    def reset(self) -> None:
        """Forget the readiness chain (after an idle gap, e.g. a checkpoint)."""
        self._last_ready = None
