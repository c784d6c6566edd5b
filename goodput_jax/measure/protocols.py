"""The recorder as other rooms see it: typed contracts to check with ``isinstance``.

:class:`StepRecording` is what ``goodput_jax.runtime``'s step recorder and
``goodput_jax.integrations``' hooks call on a recorder (steps, device ends, program costs,
compiles, the fast path and the span-start listeners): every member is required, so a
recorder that lacks one fails the check at construction, with a message, instead of being
probed member by member. :class:`~goodput_jax.measure.recorder.GoodputRecorder` and the
drop-ins (``goodput_jax.goodput.GoodputRecorder``) satisfy it.

Example:
    >>> from goodput_jax.measure.recorder import GoodputRecorder
    >>> isinstance(GoodputRecorder("j", "l"), StepRecording), isinstance(object(), StepRecording)
    (True, False)
    >>> require_step_recording(object(), "StepRecorder")
    Traceback (most recent call last):
    ...
    TypeError: StepRecorder: recorder (<object object at ...>) must be a GoodputRecorder (a ...)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from goodput_jax.measure.events import TimeLike
from goodput_jax.measure.productivity import ProgramCost
from goodput_jax.measure.sink import StepSink

__all__ = ["StepRecording", "require_step_recording"]


@runtime_checkable
class StepRecording(Protocol):
    """What a step recorder or the hooks need of a recorder (all members required)."""

    job_name: str

    @property
    def logging_enabled(self) -> bool: ...

    @property
    def job_started(self) -> bool: ...

    def record_step_start_time(self, step: int, start_time: TimeLike | None = None) -> None: ...

    def record_step_device_end_time(self, step: int, end_time: TimeLike | None = None) -> None: ...

    def record_program_cost(self, cost: ProgramCost, step: int | None = None,
                            timestamp: TimeLike | None = None) -> None: ...

    def record_compilation(self, duration_s: float, end_time: TimeLike | None = None, *,
                           recompile: bool = False, name: str = "") -> None: ...

    def step_sink(self) -> StepSink | None: ...

    def add_span_start_listener(self, listener: Callable[[], object]) -> None: ...

    def remove_span_start_listener(self, listener: Callable[[], object]) -> None: ...

    def flush(self, timeout: float | None = None) -> bool: ...


def require_step_recording(recorder: Any, who: str) -> StepRecording:
    """``recorder`` itself when it is a :class:`StepRecording`, else a one-line
    ``TypeError`` naming ``who`` and the contract.

    ``Any``: this is where the caller's value is checked (anything may come in; a one-line error
    names the argument and the value).
    """
    if isinstance(recorder, StepRecording):
        return recorder
    raise TypeError(f"{who}: recorder ({recorder!r}) must be a GoodputRecorder (a "
                    "goodput_jax.measure.protocols.StepRecording: record_step_start_time, "
                    "record_step_device_end_time, record_program_cost, record_compilation, "
                    "step_sink, span-start listeners, flush)")
