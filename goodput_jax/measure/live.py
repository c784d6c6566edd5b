"""Read your own writes: this process's live recorders, flushed before a calculator reads.

A :class:`~goodput_jax.measure.recorder.GoodputRecorder` queues events and writes them in
the background. A calculator of the same job and the same store in the same process must
still see every event recorded before its call (Google's README computes goodput right after
the job end, with no ``flush()``), so each enabled recorder registers here under
``(job name, store identity)`` and the calculator calls :func:`flush_writers` before each
read. A registry entry holds its recorder weakly; a closed recorder is skipped.

Store identity: a SQLite file is its real path, an in-memory or other store the object
(a :class:`~goodput_jax.measure.stores.RowStoreAdapter` is its inner store) and, for any
other store, also its ``url``. Two stores with the same URL that are not the same (two fake
Cloud Logging loggers) only cost an extra flush.

Example:
    >>> import tempfile, os
    >>> from goodput_jax.measure.recorder import GoodputRecorder
    >>> from goodput_jax.measure.calculator import GoodputCalculator
    >>> path = os.path.join(tempfile.mkdtemp(), "g.db")
    >>> rec = GoodputRecorder("j", "l", True, store="sqlite:///" + path)
    >>> rec.record_job_start_time(1.7e9); rec.record_job_end_time(1.7e9 + 10)
    >>> GoodputCalculator("j", "l", store="sqlite:///" + path).get_job_goodput()[0]
    0.0
    >>> rec.close()
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Hashable
from typing import Protocol

from goodput_jax.measure.stores import EventStore, RowStoreAdapter

__all__ = ["FLUSH_ON_READ_TIMEOUT_S", "LiveWriter", "flush_job", "flush_writers",
           "register", "store_identity"]

#: seconds a calculator's read waits at most for one live recorder's queue to be written
FLUSH_ON_READ_TIMEOUT_S = 5.0


class LiveWriter(Protocol):
    """What the registry needs of a recorder: its job, whether it is closed, and flush."""

    job_name: str

    @property
    def closed(self) -> bool: ...

    def flush(self, timeout: float | None = None) -> bool: ...


_lock = threading.Lock()
#: store identity key -> job name -> live writers
_LIVE: dict[Hashable, dict[str, weakref.WeakSet]] = {}


def store_identity(store: EventStore) -> tuple[Hashable, ...]:
    """The keys under which ``store`` is known (one or two; see the module docstring).

    Example:
        >>> from goodput_jax.measure.stores.sqlite import SQLiteStore
        >>> import tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "g.db")
        >>> store_identity(SQLiteStore(p)) == store_identity(SQLiteStore(p))
        True
    """
    from goodput_jax.measure.stores.sqlite import PendingSQLiteStore, SQLiteStore

    if isinstance(store, RowStoreAdapter):
        return (("object", id(store.inner)), ("url", store.url))
    if isinstance(store, (SQLiteStore, PendingSQLiteStore)) and store.path != ":memory:":
        return (("sqlite", os.path.realpath(store.path)),)
    return (("object", id(store)), ("url", store.url))


def register(writer: LiveWriter, store: EventStore) -> None:
    """Make ``writer`` (a recorder writing to ``store``) visible to :func:`flush_writers`."""
    with _lock:
        for key in store_identity(store):
            _LIVE.setdefault(key, {}).setdefault(writer.job_name, weakref.WeakSet()).add(writer)


def _writers(job_name: str, store: EventStore | None) -> list[LiveWriter]:
    with _lock:
        if store is None:
            found = {w for jobs in _LIVE.values() for w in jobs.get(job_name, ())}
        else:
            found = set()
            for key in store_identity(store):
                found.update(_LIVE.get(key, {}).get(job_name, ()))
    return [w for w in found if not w.closed]


def flush_writers(job_name: str, store: EventStore,
                  timeout: float | None = FLUSH_ON_READ_TIMEOUT_S) -> bool:
    """Write what this process's live recorders of ``job_name`` on ``store`` hold.

    Called by the calculator before each read. Returns True when every one wrote all
    (also when there is none: then it costs one dict look-up).
    """
    ok = True
    for w in _writers(job_name, store):
        ok = w.flush(timeout) and ok
    return ok


def flush_job(job_name: str, timeout: float | None) -> bool:
    """:func:`flush_writers` for every store: each live recorder of ``job_name``.

    Example:
        >>> flush_job("no-such-job", 1.0)
        True
    """
    ok = True
    for w in _writers(job_name, None):
        ok = w.flush(timeout) and ok
    return ok
