"""What the runtime capture and the integrations need of a recorder: typed protocols.

Each door states its needs as a ``runtime_checkable`` :class:`~typing.Protocol`, checked once
at construction (:func:`require`): a recorder that lacks a member fails there with a
one-line ``TypeError`` naming what it lacks, never later or silently (no door chooses its
behaviour by what a recorder happens to have). Program cost and device ends are required
members: every door records the same facts.
:class:`goodput_jax.measure.recorder.GoodputRecorder` (and the Google / MaxText drop-ins,
which subclass it) satisfies all of them structurally.

* :class:`CompileRecording`: ``runtime.attach`` (compile times).
* :class:`StepRecording`: :class:`~goodput_jax.runtime.StepRecorder` (step starts, device
  ends, program costs, the fast path, span starts), and compile times.
* :class:`JobRecording`: ``runtime.start_job`` (the job start, the accelerator's start-up).
* :class:`CheckpointRecording`: ``integrations.orbax.instrument`` (saves and restores).
* :class:`HooksRecording`: :class:`~goodput_jax.integrations.hooks.GoodputHooks` (all of
  the step recorder's, the job's, hints and custom badput spans).

Example:
    >>> from goodput_jax import goodput
    >>> rec = goodput.GoodputRecorder("j", "l")
    >>> isinstance(rec, StepRecording) and isinstance(rec, HooksRecording)
    True
    >>> require(object(), StepRecording, "recorder")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    TypeError: recorder (<object object at ...>) must be a GoodputRecorder (a StepRecording; it lacks ...)
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # the light core: no import of measure's recorder at run time
    from goodput_jax.measure.productivity import ProgramCost
    from goodput_jax.measure.recorder import StepSink

__all__ = ["CheckpointRecording", "CompileRecording", "HooksRecording", "JobRecording",
           "StepRecording", "require"]


@runtime_checkable
class CompileRecording(Protocol):
    """What ``runtime.attach`` needs: compile times, whether the recorder still records, and
    whether its job runs (a compile after the job's end is not recorded)."""

    @property
    def logging_enabled(self) -> bool: ...

    @property
    def closed(self) -> bool: ...

    @property
    def job_started(self) -> bool: ...

    def record_compilation(self, duration_s: float, end_time: Any = None, *,
                           recompile: bool = False, name: str = "") -> None: ...


@runtime_checkable
class StepRecording(CompileRecording, Protocol):
    """What a :class:`~goodput_jax.runtime.StepRecorder` needs: step starts, device ends and
    program costs (required: each door records them), the fast path (``step_sink``; None
    means the validated calls) and span-start listeners (the training thread's poll)."""

    def record_step_start_time(self, step: int, start_time: Any = None) -> None: ...

    def record_step_device_end_time(self, step: int, end_time: Any = None) -> None: ...

    def record_program_cost(self, cost: ProgramCost, step: int | None = None,
                            timestamp: Any = None) -> None: ...

    def step_sink(self) -> StepSink | None: ...

    def add_span_start_listener(self, listener: Callable[[], Any]) -> None: ...

    def remove_span_start_listener(self, listener: Callable[[], Any]) -> None: ...

    def record_custom_badput_event_start_time(self, start_time: Any = None,
                                              custom_badput_event_type: str = "unknown") -> None: ...

    def record_custom_badput_event_end_time(self, end_time: Any = None,
                                            custom_badput_event_type: str = "unknown") -> None: ...


@runtime_checkable
class JobRecording(CompileRecording, Protocol):
    """What ``runtime.start_job`` needs: the job start and the accelerator's start-up."""

    def record_job_start_time(self, start_time: Any = None) -> None: ...

    def record_tpu_init_start_time(self, start_time: Any = None) -> None: ...

    def record_tpu_init_end_time(self, end_time: Any = None) -> None: ...


@runtime_checkable
class CheckpointRecording(Protocol):
    """What ``integrations.orbax.instrument`` needs: checkpoint saves, restores and progress."""

    def record_checkpoint_save_start_time(self, step: int | None = None,
                                          start_time: Any = None) -> None: ...

    def record_checkpoint_save_end_time(self, step: int | None = None,
                                        end_time: Any = None) -> None: ...

    def record_checkpoint_restore_start_time(self, step: int | None = None,
                                             start_time: Any = None) -> None: ...

    def record_checkpoint_restore_end_time(self, step: int | None = None,
                                           end_time: Any = None) -> None: ...

    def record_checkpoint_progress(self, step: int, checkpoint_start_time: Any) -> None: ...


@runtime_checkable
class HooksRecording(StepRecording, JobRecording, Protocol):
    """What :class:`~goodput_jax.integrations.hooks.GoodputHooks` needs: a step recorder's
    members, the job's start and end, hints, custom badput spans and the writer's cost."""

    @property
    def writer_cpu_seconds(self) -> float: ...

    def record_job_end_time(self, end_time: Any = None) -> None: ...

    def record_step_end_time(self, step: int, end_time: Any = None) -> None: ...

    def record_hints(self, hints: dict, timestamp: Any = None) -> None: ...

    def badput(self, kind: Any) -> AbstractContextManager[None]: ...

    def close(self, timeout: float | None = 30.0) -> None: ...


_PROTOCOLS = (CompileRecording, StepRecording, JobRecording, CheckpointRecording, HooksRecording)


def _members(protocol: type) -> list[str]:
    """The members a protocol declares (its own and its bases'), sorted."""
    names: set[str] = set()
    for klass in protocol.__mro__:
        if klass in _PROTOCOLS:
            names.update(n for n in vars(klass) if not n.startswith("_"))
    return sorted(names)


def require(recorder: Any, protocol: type, name: str = "recorder") -> Any:
    """``recorder`` if it satisfies ``protocol``, else a one-line ``TypeError`` naming what it
    lacks.

    Args:
        recorder: the object handed to a door.
        protocol: one of this module's protocols.
        name: the argument's name in the message.

    Returns:
        ``recorder`` (the caller annotates it with the protocol: a protocol class is not a
        concrete type a checker lets a function take and return).

    Raises:
        TypeError: a member of ``protocol`` is missing.

    Example:
        >>> from goodput_jax import goodput
        >>> rec = goodput.GoodputRecorder("j", "l")
        >>> require(rec, CheckpointRecording) is rec
        True
    """
    if isinstance(recorder, protocol):
        return recorder
    present = set(dir(recorder))
    missing = [m for m in _members(protocol) if m not in present]
    raise TypeError(f"{name} ({recorder!r}) must be a GoodputRecorder (a {protocol.__name__}; "
                    f"it lacks {', '.join(missing) or 'a member'})")
