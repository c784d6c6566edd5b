"""Orbax checkpoints as checkpoint badput, without wrapping each call.

``instrument(manager, recorder)`` returns the same Orbax ``CheckpointManager``
behind a thin proxy whose ``save``, ``restore``, ``wait_until_finished`` and
``close`` record checkpoint save / restore spans on a
:class:`~goodput_jax.measure.recorder.GoodputRecorder`; every other attribute is
the manager's own. The spans time exactly what blocks the training loop:

* ``save(step, ...)``: the call. With asynchronous checkpointing (Orbax's
  default) the call returns once the arrays are copied off the device and the
  commit runs in the background, so only that blocking part counts. The save
  first waits until the steps that a :class:`~goodput_jax.runtime.StepRecorder`
  dispatched on the same recorder are done, their device ends recorded
  (:func:`~goodput_jax.runtime.finish_steps`; Orbax waits for the device before
  it copies the arrays anyway). A save that Orbax skips (``should_save`` is
  False) records nothing. A save that
  happened also records checkpoint progress (the step, from the call's start).
* ``wait_until_finished()`` and ``close()``: waiting for a background commit
  blocks the loop, so it counts as checkpoint save time too.
* ``restore(step, ...)``: the call (the step, or the latest one when None).

The proxy passes ``isinstance`` checks for the manager's own class, so a
training loop that dispatches on the manager's type (MaxText's ``save_checkpoint``
does) behaves as before. In MaxText, wrap the manager where ``setup_train_loop``
creates it, with :func:`goodput_jax.goodput.maybe_instrument_checkpoint_manager`.

Requires ``orbax-checkpoint`` (``pip install "goodput-jax[orbax]"``); this module
imports it only through the manager it is given.

Example:
    >>> import orbax.checkpoint as ocp  # doctest: +SKIP
    >>> from goodput_jax.integrations.orbax import instrument  # doctest: +SKIP
    >>> mngr = instrument(ocp.CheckpointManager("/tmp/ckpt"), recorder)  # doctest: +SKIP
    >>> mngr.save(step, args=ocp.args.StandardSave(state))  # doctest: +SKIP
"""

from __future__ import annotations

import time
from typing import Any, Self

from goodput_jax.runtime import finish_steps
from goodput_jax.runtime.contracts import CheckpointRecording, require

__all__ = ["RecordedCheckpointManager", "instrument"]


class RecordedCheckpointManager:
    """An Orbax ``CheckpointManager`` whose saves and restores are recorded as badput.

    Build it with :func:`instrument`. Attributes not listed here are the wrapped
    manager's (``latest_step``, ``all_steps``, ``directory``, ...).

    Attributes:
        manager: the wrapped Orbax ``CheckpointManager``.
        recorder: the :class:`~goodput_jax.measure.recorder.GoodputRecorder` written to.
        save_seconds: blocking save time recorded so far (saves, waits, close).
        restore_seconds: restore time recorded so far.

    Example:
        >>> mngr = instrument(ocp.CheckpointManager(path), recorder)  # doctest: +SKIP
        >>> mngr.save_seconds  # doctest: +SKIP
        0.0
    """

    def __init__(self, manager: Any, recorder: CheckpointRecording):
        self.manager = manager
        self.recorder = recorder
        self.save_seconds = 0.0
        self.restore_seconds = 0.0
        self._last_saved: int | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.manager, name)

    # typeshed's object.__class__ is read-write; this proxy's is read-only on purpose
    @property  # type: ignore[misc]
    def __class__(self) -> type:
        # isinstance(proxy, type(manager)) holds, so code that dispatches on the
        # manager's class (MaxText's save_checkpoint tells emergency managers apart
        # that way) takes the same branch; isinstance(proxy, RecordedCheckpointManager)
        # holds too (isinstance looks at type() first).
        return type(self.manager)

    def __repr__(self) -> str:
        return f"RecordedCheckpointManager({self.manager!r})"

    def save(self, step: int, *args: Any, **kwargs: Any) -> bool:
        """``manager.save(step, ...)``, its blocking part recorded as a checkpoint save."""
        if not (kwargs.get("force") or self.manager.should_save(step)):
            return self.manager.save(step, *args, **kwargs)
        rec = self.recorder
        t0 = time.time()
        rec.record_checkpoint_save_start_time(step, t0)
        try:
            # Orbax copies the arrays off the device, so it waits for the queued steps first;
            # wait here instead, so the device ends of the steps are recorded while this
            # thread sleeps, not while Orbax's Python holds the GIL (late, by that Python)
            finish_steps(rec)
            saved = self.manager.save(step, *args, **kwargs)
        finally:
            rec.record_checkpoint_save_end_time(step)
            self.save_seconds += time.time() - t0
        if saved:
            self._last_saved = step
            rec.record_checkpoint_progress(step, t0)
        return saved

    def restore(self, step: int | None = None, *args: Any, **kwargs: Any) -> Any:
        """``manager.restore(step, ...)`` recorded as a checkpoint restore."""
        rec = self.recorder
        t0 = time.time()
        rec.record_checkpoint_restore_start_time(step, t0)
        try:
            return self.manager.restore(step, *args, **kwargs)
        finally:
            rec.record_checkpoint_restore_end_time(step)
            self.restore_seconds += time.time() - t0

    def _blocking_save(self, fn: Any) -> Any:
        rec = self.recorder
        t0 = time.time()
        rec.record_checkpoint_save_start_time(self._last_saved, t0)
        try:
            return fn()
        finally:
            rec.record_checkpoint_save_end_time(self._last_saved)
            self.save_seconds += time.time() - t0

    def wait_until_finished(self) -> None:
        """``manager.wait_until_finished()``: waiting for a background commit is save time."""
        return self._blocking_save(self.manager.wait_until_finished)

    def close(self) -> None:
        """``manager.close()`` (it waits for a background commit: save time)."""
        return self._blocking_save(self.manager.close)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def instrument(manager: Any, recorder: CheckpointRecording) -> RecordedCheckpointManager:
    """Record an Orbax ``CheckpointManager``'s saves and restores on ``recorder``.

    Args:
        manager: an ``orbax.checkpoint.CheckpointManager`` (anything with
            ``save``, ``restore``, ``should_save`` and ``wait_until_finished``).
        recorder: a :class:`~goodput_jax.measure.recorder.GoodputRecorder`
            (a disabled one records nothing; the manager still works).

    Returns:
        A :class:`RecordedCheckpointManager`: use it where the manager was used.

    Raises:
        TypeError: ``manager`` lacks the CheckpointManager methods, or
            ``recorder`` is not a recorder.

    Example:
        >>> import orbax.checkpoint as ocp  # doctest: +SKIP
        >>> mngr = instrument(ocp.CheckpointManager("/tmp/ckpt"), recorder)  # doctest: +SKIP
        >>> mngr.save(0, args=ocp.args.StandardSave(state))  # doctest: +SKIP
        True
    """
    if isinstance(manager, RecordedCheckpointManager):
        manager = manager.manager
    missing = [m for m in ("save", "restore", "should_save", "wait_until_finished")
               if not callable(getattr(manager, m, None))]
    if missing:
        raise TypeError(f"manager ({manager!r}) must be an orbax.checkpoint.CheckpointManager "
                        f"(it has no {', '.join(missing)})")
    require(recorder, CheckpointRecording)
    return RecordedCheckpointManager(manager, recorder)
