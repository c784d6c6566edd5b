"""EventStore protocol shared by every back end.

A store appends events and reads them back for one job in insertion order,
resuming from an opaque cursor so that a calculator can be incremental.

Two protocols:

* :class:`BasicStore`: the four methods (and ``url``) a minimal store writes.
* :class:`EventStore`: what the recorder and calculator use; adds ``flush``
  (reach the back end) and the columnar read (``read_columns`` and
  ``stream_info``). :class:`RowColumns` implements those three on top of
  ``read_events`` for stores without a faster path; :func:`as_event_store`
  wraps a :class:`BasicStore` in :class:`RowStoreAdapter`.

Example:
    >>> from goodput_jax.measure.stores import open_store
    >>> store = open_store("sqlite:///tmp/example-goodput.db")  # doctest: +SKIP
    >>> events, cursor = store.read_events("job")               # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from goodput_jax.measure.events import KIND_CODES, Event, EventKind

__all__ = ["BasicStore", "EventStore", "RawEventStore", "RowColumns", "RowStoreAdapter",
           "StoreError",
           "as_event_store"]

#: kinds whose payload (not label) a columnar read returns in ``labels``
_PAYLOAD_KINDS = frozenset({EventKind.HINTS, EventKind.COMPILATION, EventKind.CHECKPOINT_STATS,
                            EventKind.ELASTIC_SLICE_COUNTS, EventKind.PROGRAM_COST})


class StoreError(RuntimeError):
    """A store could not be opened, read or written (message names the store)."""


@runtime_checkable
class BasicStore(Protocol):
    """The minimum a store implements; :func:`as_event_store` completes it.

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
        in insertion order, at most ``limit``; returns them and the new cursor.

        ``Any``: a cursor is the store's own opaque token (None = from the start); the return is
        ``(events or columns, the next cursor[, done])``.
        """
        ...

    def list_jobs(self) -> list[str]:
        """Names of all jobs with at least one event."""
        ...

    def close(self) -> None:
        ...


@runtime_checkable
class EventStore(BasicStore, Protocol):
    """What the recorder writes to and the calculator reads from.

    Attributes:
        url: a URL that reopens the same store (``sqlite:///path``, ``gcl://P/L``).
    """

    url: str

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until appended events reached the back end; True when they all did.
        Stores that write synchronously return True at once."""
        ...

    def read_columns(
        self, job_name: str, cursor: Any = None, max_events: int = 1_000_000
    ) -> tuple[dict | None, Any, bool]:
        """Events of ``job_name`` after ``cursor`` as columns (at most about ``max_events``).

        Returns ``(columns or None when nothing is new, cursor, done)``; columns are
        equal-length numpy arrays ``kind`` (int8 kind codes), ``stream`` (int64, see
        :meth:`stream_info`), ``ts`` (float64), ``step`` (int64, -1 = none) and
        ``labels`` ({position: custom label, or payload of a payload kind}).

        ``Any``: a cursor is the store's own opaque token (None = from the start); the return is
        ``(events or columns, the next cursor[, done])``.
        """
        ...

    def stream_info(self, stream_id: int) -> tuple[str, int]:
        """``(run_id, host)`` of a stream id returned by :meth:`read_columns`."""
        ...


@runtime_checkable
class RawEventStore(EventStore, Protocol):
    """An :class:`EventStore` whose write path also takes the recorder's queued tuples as
    they are (SQLite): the recorder then builds no :class:`Event` objects.

    Example:
        >>> from goodput_jax.measure.stores.sqlite import SQLiteStore
        >>> isinstance(SQLiteStore(":memory:"), RawEventStore)
        True
    """

    def append_raw(self, job_name: str, run_id: str, host: int,
                   items: Sequence[tuple]) -> None:
        """Append ``items``, ``(kind code, timestamp, step, label, payload)`` of one stream."""
        ...


class RowColumns:
    """``flush`` and the columnar read, built on a store's own ``read_events``.

    Mix into a store without a faster path (the Cloud Logging stores), or use
    through :class:`RowStoreAdapter`.

    Example:
        >>> class ListStore(RowColumns):
        ...     url = "list://"
        ...     def __init__(self): self.events = []
        ...     def append(self, events): self.events.extend(events)
        ...     def read_events(self, job_name, cursor=None, limit=None):
        ...         mine = [e for e in self.events if e.job_name == job_name][cursor or 0:]
        ...         mine = mine[:limit] if limit else mine
        ...         return mine, (cursor or 0) + len(mine)
        ...     def list_jobs(self): return sorted({e.job_name for e in self.events})
        ...     def close(self): pass
        >>> ListStore().read_columns("j")  # nothing yet: no columns, the store's cursor, done
        (None, 0, True)
    """

    def flush(self, timeout: float | None = None) -> bool:
        """Nothing is buffered: True."""
        return True

    def _stream_id(self, run_id: str, host: int) -> int:
        ids = self.__dict__.setdefault("_row_stream_ids", {})
        sid = ids.get((run_id, host))
        if sid is None:
            sid = ids[(run_id, host)] = len(ids)
            self.__dict__.setdefault("_row_streams", []).append((run_id, host))
        return sid

    def stream_info(self, stream_id: int) -> tuple[str, int]:
        """``(run_id, host)`` of a stream id from :meth:`read_columns`."""
        streams = self.__dict__.get("_row_streams", [])
        if isinstance(stream_id, bool) or not 0 <= int(stream_id) < len(streams):
            raise ValueError(f"stream_id ({stream_id!r}) was not returned by read_columns")
        return streams[int(stream_id)]

    def read_columns(
        self, job_name: str, cursor: Any = None, max_events: int = 1_000_000
    ) -> tuple[dict | None, Any, bool]:
        """:meth:`EventStore.read_columns` from ``read_events`` (one call, ``limit=max_events``).

        ``Any``: a cursor is the store's own opaque token (None = from the start); the return is
        ``(events or columns, the next cursor[, done])``.
        """
        if isinstance(max_events, bool) or not isinstance(max_events, int) or max_events <= 0:
            raise ValueError(f"max_events ({max_events!r}) must be a positive int")
        events, cursor = self.read_events(job_name, cursor, max_events)  # type: ignore[attr-defined]
        done = len(events) < max_events
        if not events:
            return None, cursor, done
        n = len(events)
        kind = np.empty(n, dtype=np.int8)
        stream = np.empty(n, dtype=np.int64)
        ts = np.empty(n, dtype=np.float64)
        step = np.empty(n, dtype=np.int64)
        labels: dict[int, Any] = {}
        sid = self._stream_id
        for i, ev in enumerate(events):
            kind[i] = KIND_CODES[ev.kind]
            stream[i] = sid(ev.run_id, ev.host)
            ts[i] = ev.timestamp
            step[i] = -1 if ev.step is None else ev.step
            extra = ev.payload if ev.kind in _PAYLOAD_KINDS else ev.label
            if extra is not None:
                labels[i] = extra
        return {"kind": kind, "stream": stream, "ts": ts, "step": step, "labels": labels}, \
            cursor, done


class RowStoreAdapter(RowColumns):
    """A :class:`BasicStore` completed to an :class:`EventStore` (see :func:`as_event_store`).

    Args:
        store: the basic store; every :class:`BasicStore` call goes to it.

    Attributes:
        inner: the wrapped store.
    """

    def __init__(self, store: BasicStore):
        self.inner = store
        self.url = store.url

    def append(self, events: Sequence[Event]) -> None:
        self.inner.append(events)

    def read_events(self, job_name: str, cursor: Any = None,
                    limit: int | None = None) -> tuple[list[Event], Any]:
        """``Any``: a cursor is the store's own opaque token (None = from the start); the return is
        ``(events or columns, the next cursor[, done])``.
        """
        return self.inner.read_events(job_name, cursor, limit)

    def list_jobs(self) -> list[str]:
        return self.inner.list_jobs()

    def close(self) -> None:
        self.inner.close()

    def __repr__(self) -> str:
        return f"RowStoreAdapter({self.inner!r})"


def as_event_store(store: Any) -> EventStore:
    """``store`` itself if it is a full :class:`EventStore`, else a :class:`RowStoreAdapter`.

    Raises:
        TypeError: ``store`` is not even a :class:`BasicStore`.

    Example:
        >>> as_event_store(object())
        Traceback (most recent call last):
        ...
        TypeError: store (<object object at ...>) must be an EventStore or a store URL; ...

    ``Any``: this is where the caller's value is checked (anything may come in; a one-line error
    names the argument and the value).
    """
    if isinstance(store, EventStore):
        return store
    if isinstance(store, BasicStore):
        return RowStoreAdapter(store)
    raise TypeError(f"store ({store!r}) must be an EventStore or a store URL; it needs url, "
                    "append(), read_events(), list_jobs() and close()")
