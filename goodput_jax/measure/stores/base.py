"""EventStore protocol shared by every back end.

A store appends events and reads them back for one job in insertion order,
resuming from an opaque cursor so that a calculator can be incremental.

Example:
    >>> from goodput_jax.measure.stores import open_store
    >>> store = open_store("sqlite:///tmp/example-goodput.db")  # doctest: +SKIP
    >>> events, cursor = store.read_events("job")               # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from goodput_jax.measure.events import Event


class StoreError(RuntimeError):
    """A store could not be opened, read or written (message names the store)."""


@runtime_checkable
class EventStore(Protocol):
    """What the recorder writes to and the calculator reads from.

    Attributes:
        url: a URL that reopens the same store (``sqlite:///path``, ``gcl://P/L``).
    """

    url: str

    def append(self, events: Sequence[Event]) -> None:
        """Durably append a batch of events (all or nothing where the back end allows)."""
        ...

    def read_events(
        self, job_name: str, cursor: Any = None, limit: int | None = None
    ) -> tuple[list[Event], Any]:
        """Events of ``job_name`` appended after ``cursor`` (None = from the start),
        in insertion order, at most ``limit``; returns them and the new cursor."""
        ...

    def list_jobs(self) -> list[str]:
        """Names of all jobs with at least one event."""
        ...

    def close(self) -> None:
        ...
