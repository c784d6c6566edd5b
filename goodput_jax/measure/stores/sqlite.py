"""SQLite event store: the embedded default.

One file holds every job. WAL journal mode lets several processes append to
the same file at once; every statement takes its values as parameters. The
file carries a schema version: a file written by a newer goodput_jax, or a file
that is not a goodput_jax store, is refused with a clear :class:`StoreError`
instead of being modified.

Layout (schema version 2)::

    meta(key PRIMARY KEY, value)                       -- 'schema_version', 'format'
    jobs(id INTEGER PRIMARY KEY, name UNIQUE)
    streams(id INTEGER PRIMARY KEY, job_id, run_id, host, UNIQUE(job_id, run_id, host))
    events(id INTEGER PRIMARY KEY, job_id, stream_id, kind, ts, step, label, payload)
    INDEX events(job_id, ts), INDEX events(job_id, id)
    blocks(id, job_id, stream_id, first_id, last_id, kinds, ts, steps)  -- columnar copy
    INDEX blocks(job_id, last_id)

The cursor returned by :meth:`SQLiteStore.read_events` is the insertion id of
the last event returned; ids grow in commit order, so resuming from a cursor
never skips an event.

Example:
    >>> import tempfile, os
    >>> from goodput_jax.measure.events import Event, EventKind
    >>> path = os.path.join(tempfile.mkdtemp(), "g.db")
    >>> store = SQLiteStore(path)
    >>> store.append([Event(EventKind.JOB_START, "job", "run-1", 0, 10.0)])
    >>> events, cursor = store.read_events("job")
    >>> [e.kind.value for e in events], cursor
    (['job_start'], 1)
    >>> store.close()
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import threading
from collections.abc import Callable, Sequence
from typing import Any, Self

import numpy as np

from goodput_jax.measure.events import (
    KIND_CODES,
    KINDS_BY_CODE,
    Event,
    check_job_name,
)
from goodput_jax.measure.stores.base import StoreError
from goodput_jax.measure.stores.sqlite_blocks import blocks_of, read_blocks
from goodput_jax.measure.stores.sqlite_schema import SCHEMA_VERSION, init_schema

__all__ = ["SCHEMA_VERSION", "PendingSQLiteStore", "SQLiteStore"]

#: One raw row as read by :meth:`SQLiteStore.read_rows`:
#: (kind code, stream id, timestamp, step or None, custom label or hints payload JSON or None)
RawRow = tuple


class SQLiteStore:
    """Event store in one SQLite file (WAL mode, schema-versioned).

    Safe to share between threads of one process (one connection guarded by a
    lock) and between processes (WAL + busy timeout).

    Args:
        path: file path, opened exactly as given (relative paths are relative to
            the working directory). Its directory must exist.
        create: create the file if it does not exist (False: a missing file is a
            FileNotFoundError).
        timeout: seconds to wait for another process's write lock.

    Raises:
        FileNotFoundError: ``create=False`` and the file does not exist.
        StoreError: the file is not a readable goodput_jax store, or it was
            written by a newer schema version.

    Example:
        >>> store = SQLiteStore(":memory:")
        >>> store.list_jobs()
        []
    """

    #: the connection; None before ``__init__`` connects (a failed open) and after close()
    #: (the store is then unusable by design: a call fails on None)
    _conn: sqlite3.Connection = None  # type: ignore[assignment]

    def __init__(self, path: str | os.PathLike, *, create: bool = True, timeout: float = 30.0):
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path ({path!r}) must be a str or os.PathLike")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
                or not math.isfinite(timeout) or timeout < 0:
            raise ValueError(f"timeout ({timeout!r}) must be a non-negative number of seconds")
        self.timeout = float(timeout)
        self.path = os.fspath(path)
        if not self.path:
            raise ValueError(f"path ({path!r}) must be a non-empty path")
        if self.path == ":memory:":
            self.url = "sqlite://"
        elif os.path.isabs(self.path):
            self.url = "sqlite:///" + self.path  # -> sqlite:////abs/path
        else:
            self.url = "sqlite:///" + self.path
        is_memory = self.path == ":memory:"
        if not is_memory and not create and not os.path.exists(self.path):
            raise FileNotFoundError(f"store file {self.path!r} does not exist")
        if not is_memory:
            parent = os.path.dirname(os.path.abspath(self.path))
            if not os.path.isdir(parent):
                raise StoreError(
                    f"cannot open store {self.url!r}: directory {parent!r} does not exist"
                )
        self._lock = threading.RLock()
        self._job_ids: dict[str, int] = {}
        self._stream_ids: dict[tuple[int, str, int], int] = {}
        self._streams_by_id: dict[int, tuple[str, int]] = {}
        try:
            self._conn = sqlite3.connect(
                self.path, timeout=timeout, check_same_thread=False, isolation_level=None
            )
        except sqlite3.Error as e:
            raise StoreError(f"cannot open store {self.url!r}: {e}") from e
        try:
            init_schema(self._conn, self.url, self.timeout, is_memory)
        except BaseException:
            self._conn.close()
            raise

    @property
    def schema_version(self) -> int:
        """The schema version recorded in the file."""
        with self._lock:
            (v,) = self._conn.execute(
                "SELECT value FROM meta WHERE key='schema_version'"
            ).fetchone()
        return int(v)

    # ---------------------------------------------------------------- helpers
    def _job_id(self, name: str, create: bool) -> int | None:
        jid = self._job_ids.get(name)
        if jid is not None:
            return jid
        c = self._conn
        if create:
            c.execute("INSERT OR IGNORE INTO jobs(name) VALUES (?)", (name,))
        row = c.execute("SELECT id FROM jobs WHERE name = ?", (name,)).fetchone()
        if row is None:
            return None
        self._job_ids[name] = row[0]
        return row[0]

    def _new_job_id(self, name: str) -> int:
        """The id of job ``name``, created if it is new."""
        jid = self._job_id(name, create=True)
        if jid is None:  # (INSERT OR IGNORE, then SELECT: the row is there)
            raise StoreError(f"job {name!r} has no row after its insert")
        return jid

    def _stream_id(self, job_id: int, run_id: str, host: int) -> int:
        key = (job_id, run_id, host)
        sid = self._stream_ids.get(key)
        if sid is not None:
            return sid
        c = self._conn
        c.execute(
            "INSERT OR IGNORE INTO streams(job_id, run_id, host) VALUES (?, ?, ?)", key
        )
        (sid,) = c.execute(
            "SELECT id FROM streams WHERE job_id = ? AND run_id = ? AND host = ?", key
        ).fetchone()
        self._stream_ids[key] = sid
        self._streams_by_id[sid] = (run_id, host)
        return sid

    def _stream(self, sid: int) -> tuple[str, int]:
        s = self._streams_by_id.get(sid)
        if s is None:
            row = self._conn.execute(
                "SELECT run_id, host FROM streams WHERE id = ?", (sid,)
            ).fetchone()
            if row is None:
                raise StoreError(
                    f"store {self.url!r} is corrupt: event refers to unknown stream {sid}")
            s = (row[0], int(row[1]))
            self._streams_by_id[sid] = s
        return s

    # --------------------------------------------------------------- protocol
    def append(self, events: Sequence[Event]) -> None:
        """Append a batch of events atomically (one transaction).

        Every event is validated first: a bad event raises TypeError/ValueError
        and nothing of the batch is stored.

        Example:
            >>> from goodput_jax.measure.events import Event, EventKind
            >>> s = SQLiteStore(":memory:")
            >>> s.append([Event(EventKind.STEP_START, "j", "r", 0, 1.0, step=0)])
        """
        events = list(events)
        for i, ev in enumerate(events):
            if not isinstance(ev, Event):
                raise TypeError(f"events[{i}] ({ev!r}) must be an Event")
            ev.validate()
        if not events:
            return

        def rows(next_id: int) -> list[tuple]:
            out = []
            for i, ev in enumerate(events):
                jid = self._new_job_id(ev.job_name)
                sid = self._stream_id(jid, ev.run_id, ev.host)
                out.append((next_id + i, jid, sid, KIND_CODES[ev.kind], float(ev.timestamp),
                            ev.step, ev.label, ev.payload_json()))
            return out

        self._insert(rows)

    def append_raw(self, job_name: str, run_id: str, host: int,
                   items: Sequence[tuple[int, float, int | None, str | None, Any]]) -> None:
        """Append one stream's events from ``(kind_code, timestamp, step, label, payload)``
        tuples, as :class:`~goodput_jax.measure.recorder.GoodputRecorder` queues them.

        The recorder's writer path: it validates every call when it is made, so a
        tuple without label or payload is stored as it is (no per-event object);
        one with a label or a payload is validated as an :class:`Event`. Atomic,
        as :meth:`append`.

        Example:
            >>> from goodput_jax.measure.events import KIND_CODES, EventKind
            >>> s = SQLiteStore(":memory:")
            >>> s.append_raw("j", "r", 0, [(KIND_CODES[EventKind.STEP_START], 1.0, 0, None, None)])
            >>> [(e.kind.value, e.step) for e in s.read_events("j")[0]]
            [('step_start', 0)]

        ``Any``: the values are JSON-like (numbers, strings, lists, nested dicts), as stored or
        uploaded.
        """
        items = list(items)
        if not items:
            return
        check_job_name(job_name)

        def rows(next_id: int) -> list[tuple]:
            jid = self._new_job_id(job_name)
            sid = self._stream_id(jid, run_id, host)
            out = []
            for i, (code, ts, step, label, payload) in enumerate(items):
                pj = None
                if label is not None or payload is not None:
                    ev = Event(KINDS_BY_CODE[code], job_name, run_id, host, ts, step=step,
                               label=label, payload=payload).validate()
                    ts, pj = float(ev.timestamp), ev.payload_json()
                out.append((next_id + i, jid, sid, code, ts, step, label, pj))
            return out

        self._insert(rows)

    def _insert(self, build: Callable[[int], list[tuple]]) -> None:
        """One transaction: ``build(next_id)`` returns the event rows, stored with their blocks."""
        with self._lock:
            c = self._conn
            try:
                c.execute("BEGIN IMMEDIATE")
                (top,) = c.execute("SELECT MAX(id) FROM events").fetchone()
                rows = build((top or 0) + 1)
                c.executemany(
                    "INSERT INTO events(id, job_id, stream_id, kind, ts, step, label, payload)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )
                c.executemany(
                    "INSERT INTO blocks(job_id, stream_id, first_id, last_id, kinds, ts, steps,"
                    " n_labelled) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    blocks_of(rows),
                )
                c.execute("COMMIT")
            except BaseException as e:
                if c.in_transaction:
                    c.execute("ROLLBACK")
                # ids cached inside the failed transaction may not exist
                self._job_ids.clear()
                self._stream_ids.clear()
                if isinstance(e, sqlite3.Error):
                    raise StoreError(f"cannot append to store {self.url!r}: {e}") from e
                raise

    def read_rows(
        self, job_name: str, cursor: Any = None, span: int = 200_000
    ) -> tuple[list[RawRow], Any, bool]:
        """Raw rows for the calculator's hot path (no per-event objects).

        Reads the events of ``job_name`` whose insertion id lies in
        ``(cursor, cursor + span]``, capped at the newest committed id.

        Returns:
            ``(rows, cursor, done)``: rows are ``(kind_code, stream_id, ts, step,
            label_or_payload_json)`` in insertion order; ``done`` is True when the
            returned cursor is the newest id in the store.

        Example:
            >>> s = SQLiteStore(":memory:")
            >>> s.read_rows("nobody")
            ([], None, True)

        ``Any``: a cursor is the store's own opaque token (None = from the start); the return is
        ``(events or columns, the next cursor[, done])``.
        """
        after = self._check_cursor(cursor)
        if isinstance(span, bool) or not isinstance(span, int) or span <= 0:
            raise ValueError(f"span ({span!r}) must be a positive int")
        with self._lock:
            c = self._conn
            try:
                jid = self._job_id(job_name, create=False)
                if jid is None:
                    return [], cursor, True
                c.execute("BEGIN")  # one snapshot for MAX(id) and the rows
                try:
                    (top,) = c.execute("SELECT MAX(id) FROM events").fetchone()
                    top = top or 0
                    hi = min(after + span, top)
                    if hi <= after:
                        return [], cursor, True
                    rows = c.execute(
                        "SELECT kind, stream_id, ts, step, COALESCE(label, payload) FROM events"
                        " WHERE job_id = ? AND id > ? AND id <= ? ORDER BY id",
                        (jid, after, hi),
                    ).fetchall()
                finally:
                    c.execute("COMMIT")
            except sqlite3.DatabaseError as e:
                raise StoreError(f"cannot read store {self.url!r}: {e}") from e
        return rows, hi, hi >= top

    def read_columns(
        self, job_name: str, cursor: Any = None, max_events: int = 1_000_000
    ) -> tuple[dict | None, Any, bool]:
        """Columnar read for the calculator's cold path (no per-event Python objects).

        Reads the events of ``job_name`` with insertion ids in ``(cursor, ...]``,
        at most about ``max_events`` of them (whole appended blocks), up to the
        newest committed id.

        Returns:
            ``(columns, cursor, done)``. ``columns`` is None when nothing is new,
            else a dict of equal-length numpy arrays ``kind`` (int8), ``stream``
            (int64), ``ts`` (float64), ``step`` (int64, -1 = none), and
            ``labels``: {position: custom label or hints payload JSON}.

        Example:
            >>> s = SQLiteStore(":memory:")
            >>> s.read_columns("nobody")
            (None, None, True)

        ``Any``: a cursor is the store's own opaque token (None = from the start); the return is
        ``(events or columns, the next cursor[, done])``.
        """
        after = self._check_cursor(cursor)
        if isinstance(max_events, bool) or not isinstance(max_events, int) or max_events <= 0:
            raise ValueError(f"max_events ({max_events!r}) must be a positive int")
        with self._lock:
            c = self._conn
            try:
                jid = self._job_id(job_name, create=False)
                if jid is None:
                    return None, cursor, True
                c.execute("BEGIN")  # one snapshot
                try:
                    (top,) = c.execute("SELECT MAX(id) FROM events").fetchone()
                    top = top or 0
                    if top <= after:
                        return None, cursor, True
                    n, hi, done, kinds, streams, ts, steps, labels = read_blocks(
                        c, jid, after, top, max_events)
                finally:
                    c.execute("COMMIT")
            except sqlite3.DatabaseError as e:
                raise StoreError(f"cannot read store {self.url!r}: {e}") from e
        if not n:
            return None, hi, done
        cols = {
            "kind": np.concatenate(kinds),
            "stream": np.concatenate(streams),
            "ts": np.concatenate(ts),
            "step": np.concatenate(steps),
            "labels": labels,
        }
        return cols, hi, done

    def flush(self, timeout: float | None = None) -> bool:
        """Appends are written synchronously: nothing to wait for, True.

        Example:
            >>> SQLiteStore(":memory:").flush()
            True
        """
        return True

    def stream_info(self, stream_id: int) -> tuple[str, int]:
        """(run_id, host) of a stream id returned by :meth:`read_rows` / :meth:`read_columns`."""
        with self._lock:
            return self._stream(stream_id)

    def read_events(
        self, job_name: str, cursor: Any = None, limit: int | None = None
    ) -> tuple[list[Event], Any]:
        """Events of ``job_name`` after ``cursor`` in insertion order (see protocol).

        The cursor is the insertion id of the last event returned.

        ``Any``: a cursor is the store's own opaque token (None = from the start); the return is
        ``(events or columns, the next cursor[, done])``.
        """
        after = self._check_cursor(cursor)
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit <= 0):
            raise ValueError(f"limit ({limit!r}) must be a positive int or None")
        out = []
        with self._lock:
            try:
                jid = self._job_id(job_name, create=False)
                if jid is None:
                    return [], cursor
                sql = (
                    "SELECT id, kind, stream_id, ts, step, label, payload FROM events"
                    " WHERE job_id = ? AND id > ? ORDER BY id"
                )
                if limit is not None:
                    rows = self._conn.execute(sql + " LIMIT ?", (jid, after, limit)).fetchall()
                else:
                    rows = self._conn.execute(sql, (jid, after)).fetchall()
                for _id, kind, sid, ts, step, label, payload in rows:
                    run_id, host = self._stream(sid)
                    out.append(
                        Event(
                            kind=KINDS_BY_CODE[kind],
                            job_name=job_name,
                            run_id=run_id,
                            host=host,
                            timestamp=ts,
                            step=step,
                            label=label,
                            payload=None if payload is None else json.loads(payload),
                        )
                    )
            except sqlite3.DatabaseError as e:
                raise StoreError(f"cannot read store {self.url!r}: {e}") from e
        return out, (rows[-1][0] if rows else cursor)

    def list_jobs(self) -> list[str]:
        """Names of all jobs with at least one event, sorted."""
        with self._lock:
            try:
                rows = self._conn.execute(
                    "SELECT name FROM jobs WHERE EXISTS"
                    " (SELECT 1 FROM events WHERE events.job_id = jobs.id) ORDER BY name"
                ).fetchall()
            except sqlite3.DatabaseError as e:
                raise StoreError(f"cannot read store {self.url!r}: {e}") from e
        return [r[0] for r in rows]

    def count_events(self, job_name: str) -> int:
        """Number of stored events of ``job_name``."""
        with self._lock:
            jid = self._job_id(job_name, create=False)
            if jid is None:
                return 0
            return self._conn.execute(
                "SELECT COUNT(*) FROM events WHERE job_id = ?", (jid,)
            ).fetchone()[0]

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            conn = self._conn  # (None when __init__ failed before connecting)
            # closed: a later call fails on None, as the store is unusable by design
            self._conn = None  # type: ignore[assignment]
            if conn is not None:
                conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    @staticmethod
    def _check_cursor(cursor: Any) -> int:
        if cursor is None:
            return 0
        if isinstance(cursor, bool) or not isinstance(cursor, int) or cursor < 0:
            raise ValueError(f"cursor ({cursor!r}) must be None or a cursor returned by this store")
        return cursor


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
        self._store: SQLiteStore | None = None
        self._lock = threading.Lock()

    def _open(self, create: bool = False) -> SQLiteStore | None:
        with self._lock:
            if self._store is None and (create or os.path.exists(self.path)):
                self._store = SQLiteStore(self.path, create=create, timeout=self.timeout)
            return self._store

    def _created(self) -> SQLiteStore:
        with self._lock:
            if self._store is None:
                self._store = SQLiteStore(self.path, create=True, timeout=self.timeout)
            return self._store

    def append(self, events: Sequence[Event]) -> None:
        self._created().append(events)

    def read_columns(self, job_name: str, cursor: Any = None,
                     max_events: int = 1_000_000) -> tuple[dict | None, Any, bool]:
        """``Any``: a cursor is the store's own opaque token (None = from the start); the return is
        ``(events or columns, the next cursor[, done])``.
        """
        st = self._open()
        return (None, cursor, True) if st is None else st.read_columns(job_name, cursor, max_events)

    def read_events(self, job_name: str, cursor: Any = None,
                    limit: int | None = None) -> tuple[list[Event], Any]:
        """``Any``: a cursor is the store's own opaque token (None = from the start); the return is
        ``(events or columns, the next cursor[, done])``.
        """
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
