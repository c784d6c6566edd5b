"""A reader of a SQLite store file that may not exist yet (the calculator's): it creates
nothing until written to. Re-exported by ``goodput_jax.measure.stores.sqlite``."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

from goodput_jax.measure.events import Event

__all__ = ["PendingSQLiteStore"]


class PendingSQLiteStore:
    """A reader of a SQLite store file that may not exist yet: it creates nothing.

    A calculator opened on a path where no recorder has written reads an empty store
    (``NoEventsError`` names the path) and leaves the directory as it was; once the file
    exists, every call goes to a :class:`SQLiteStore` opened on it. Writing (``append``)
    opens, and creates, the file as a plain :class:`SQLiteStore` would.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "absent.db")
        >>> st = PendingSQLiteStore(path)
        >>> st.read_columns("job"), os.path.exists(path)
        ((None, None, True), False)
    """

    def __init__(self, path: str | os.PathLike, *, timeout: float = 30.0):
        self.path = os.fspath(path)
        if not self.path or self.path == ":memory:":
            raise ValueError(f"path ({path!r}) must name a file")
        self.url = "sqlite:///" + self.path
        self.timeout = timeout
        self._store: Any = None
        self._lock = threading.Lock()

    def _open(self, create: bool = False) -> Any:
        from goodput_jax.measure.stores.sqlite import SQLiteStore

        with self._lock:
            if self._store is None and (create or os.path.exists(self.path)):
                self._store = SQLiteStore(self.path, create=create, timeout=self.timeout)
            return self._store

    def append(self, events: Sequence[Event]) -> None:
        self._open(create=True).append(events)

    def read_columns(self, job_name: str, cursor: Any = None, max_events: int = 1_000_000):
        st = self._open()
        return (None, cursor, True) if st is None else st.read_columns(job_name, cursor, max_events)

    def read_events(self, job_name: str, cursor: Any = None, limit: int | None = None):
        st = self._open()
        return ([], cursor) if st is None else st.read_events(job_name, cursor, limit)

    def stream_info(self, stream_id: int) -> tuple[str, int]:
        st = self._open()
        if st is None:
            raise KeyError(f"stream_id ({stream_id!r}) unknown: store {self.url!r} does not exist")
        return st.stream_info(stream_id)

    def list_jobs(self) -> list[str]:
        st = self._open()
        return [] if st is None else st.list_jobs()

    def flush(self, timeout: float | None = None) -> bool:
        st = self._store
        return True if st is None else st.flush(timeout)

    def close(self) -> None:
        with self._lock:
            st, self._store = self._store, None
        if st is not None:
            st.close()

    def __repr__(self) -> str:
        return f"PendingSQLiteStore({self.path!r})"
