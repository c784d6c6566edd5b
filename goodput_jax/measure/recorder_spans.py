"""The recorder's context managers: one ``with`` block per start/end pair.

:class:`SpanContexts` is a base of :class:`~goodput_jax.measure.recorder.GoodputRecorder`;
each context manager calls the recorder's own ``record_*`` methods (so a subclass that
adapts them, Google's drop-in reading naive datetimes as local time, adapts these too).

Example:
    >>> from goodput_jax.measure.recorder import GoodputRecorder
    >>> rec = GoodputRecorder("j", "l")
    >>> with rec.job(), rec.step(0), rec.data_loading():
    ...     pass
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Self

from goodput_jax.measure.badput import RECORDABLE, BadputType
from goodput_jax.measure.events import EventKind, TimeLike

__all__ = ["SpanContexts", "check_label"]


def check_label(label: Any) -> str:
    """A custom badput event type: a non-empty string (else a one-line ``ValueError``).

    ``Any``: this is where the caller's value is checked (anything may come in; a one-line error
    names the argument and the value).
    """
    if not isinstance(label, str) or not label:
        raise ValueError(f"custom_badput_event_type ({label!r}) must be a non-empty string")
    return label


class SpanContexts:
    """``with rec.job():``, ``with rec.step(i):``, ``with rec.data_loading():``, ..."""

    if TYPE_CHECKING:  # what the recorder provides
        def record_job_start_time(self, start_time: TimeLike | None = None) -> None: ...
        def record_job_end_time(self, end_time: TimeLike | None = None) -> None: ...
        def record_step_start_time(self, step: int, start_time: TimeLike | None = None) -> None: ...
        def record_step_end_time(self, step: int, end_time: TimeLike | None = None) -> None: ...
        def record_tpu_init_start_time(self, start_time: TimeLike | None = None) -> None: ...
        def record_tpu_init_end_time(self, end_time: TimeLike | None = None) -> None: ...
        def record_training_preparation_start_time(self,
                                                   start_time: TimeLike | None = None) -> None: ...
        def record_training_preparation_end_time(self,
                                                 end_time: TimeLike | None = None) -> None: ...
        def record_program_startup_start_time(self, start_time: TimeLike | None = None) -> None: ...
        def record_program_startup_end_time(self, end_time: TimeLike | None = None) -> None: ...
        def record_data_loading_start_time(self, start_time: TimeLike | None = None) -> None: ...
        def record_data_loading_end_time(self, end_time: TimeLike | None = None) -> None: ...
        def record_checkpoint_save_start_time(self, step: int | None = None,
                                              start_time: TimeLike | None = None) -> None: ...
        def record_checkpoint_save_end_time(self, step: int | None = None,
                                            end_time: TimeLike | None = None) -> None: ...
        def record_checkpoint_restore_start_time(self, step: int | None = None,
                                                 start_time: TimeLike | None = None) -> None: ...
        def record_checkpoint_restore_end_time(self, step: int | None = None,
                                               end_time: TimeLike | None = None) -> None: ...
        def record_custom_badput_event_start_time(
                self, start_time: TimeLike | None = None,
                custom_badput_event_type: str = "unknown") -> None: ...
        def record_custom_badput_event_end_time(
                self, end_time: TimeLike | None = None,
                custom_badput_event_type: str = "unknown") -> None: ...
        def _record(self, kind: EventKind, when: Any, argname: str,
                    step: int | None = None, label: str | None = None) -> None: ...

    @contextlib.contextmanager
    def job(self) -> Iterator[Self]:
        """Job start on enter, job end on a normal exit (an exception = crashed run)."""
        self.record_job_start_time()
        yield self
        self.record_job_end_time()

    @contextlib.contextmanager
    def step(self, step: int) -> Iterator[None]:
        """Step start on enter, step end on a normal exit."""
        self.record_step_start_time(step)
        yield
        self.record_step_end_time(step)

    @contextlib.contextmanager
    def _span(self, start: Callable[[], None], end: Callable[[], None]) -> Iterator[None]:
        start()
        try:
            yield
        finally:
            end()

    def accelerator_init(self) -> AbstractContextManager[None]:
        """``with rec.accelerator_init():`` around device discovery / ``jax.devices()``."""
        return self._span(self.record_tpu_init_start_time, self.record_tpu_init_end_time)

    def training_prep(self) -> AbstractContextManager[None]:
        """``with rec.training_prep():`` around model / optimizer / checkpoint-manager setup."""
        return self._span(self.record_training_preparation_start_time,
                          self.record_training_preparation_end_time)

    def program_startup(self) -> AbstractContextManager[None]:
        """``with rec.program_startup():`` around tracing and compilation."""
        return self._span(self.record_program_startup_start_time,
                          self.record_program_startup_end_time)

    def data_loading(self) -> AbstractContextManager[None]:
        """``with rec.data_loading():`` around a blocking fetch of the next batch."""
        return self._span(self.record_data_loading_start_time, self.record_data_loading_end_time)

    def checkpoint_save(self, step: int | None = None) -> AbstractContextManager[None]:
        """``with rec.checkpoint_save(step):`` around a blocking checkpoint save."""
        return self._span(lambda: self.record_checkpoint_save_start_time(step),
                          lambda: self.record_checkpoint_save_end_time(step))

    def checkpoint_restore(self, step: int | None = None) -> AbstractContextManager[None]:
        """``with rec.checkpoint_restore(step):`` around a checkpoint restore."""
        return self._span(lambda: self.record_checkpoint_restore_start_time(step),
                          lambda: self.record_checkpoint_restore_end_time(step))

    def badput(self, kind: BadputType | str) -> AbstractContextManager[None]:
        """``with rec.badput(BadputType.DATA_LOADING):`` or ``with rec.badput("eval"):``.

        Args:
            kind: a recordable BadputType (accelerator init, training prep, program
                startup, data loading, checkpoint save/restore, custom), or a string
                label for a custom badput event.
        """
        if isinstance(kind, str):
            label = check_label(kind)
            return self._span(
                lambda: self.record_custom_badput_event_start_time(custom_badput_event_type=label),
                lambda: self.record_custom_badput_event_end_time(custom_badput_event_type=label),
            )
        if not isinstance(kind, BadputType) or kind not in RECORDABLE:
            raise ValueError(
                f"badput kind ({kind!r}) must be a string label or one of BadputType."
                f"{{{', '.join(k.name for k in RECORDABLE)}}}; wasted progress, recovery, "
                "other, recompilation and the elastic buckets are derived"
            )
        if kind is BadputType.CUSTOM_BADPUT_EVENTS:
            return self.badput("unknown")
        start, end = RECORDABLE[kind]
        return self._span(lambda: self._record(start, None, "start_time"),
                          lambda: self._record(end, None, "end_time"))
