"""The SQLite store file's schema: created in a new file, version-checked in an existing
one (a foreign or newer file is refused, never modified), and put in WAL mode."""

from __future__ import annotations

import sqlite3
import time

from goodput_jax.measure.stores.base import StoreError

__all__ = ["SCHEMA_VERSION", "init_schema"]

SCHEMA_VERSION = 2
_FORMAT = "goodput_jax.events"

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS jobs (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)",
    ("CREATE TABLE IF NOT EXISTS streams (id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL,"
     " run_id TEXT NOT NULL, host INTEGER NOT NULL, UNIQUE(job_id, run_id, host))"),
    ("CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL,"
     " stream_id INTEGER NOT NULL, kind INTEGER NOT NULL, ts REAL NOT NULL, step INTEGER,"
     " label TEXT, payload TEXT)"),
    "CREATE INDEX IF NOT EXISTS events_job_ts ON events(job_id, ts)",
    "CREATE INDEX IF NOT EXISTS events_job_id ON events(job_id, id)",
    # Columnar copy of the timeline for fast cold reads: one row per run of
    # consecutive events of one (job, stream) in an appended batch; event ids
    # first_id..last_id are contiguous. kinds int8, ts float64, steps int64 (-1 = none).
    ("CREATE TABLE IF NOT EXISTS blocks (id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL,"
     " stream_id INTEGER NOT NULL, first_id INTEGER NOT NULL, last_id INTEGER NOT NULL,"
     " kinds BLOB NOT NULL, ts BLOB NOT NULL, steps BLOB NOT NULL, n_labelled INTEGER NOT NULL)"),
    "CREATE INDEX IF NOT EXISTS blocks_job_last ON blocks(job_id, last_id)",
)


def init_schema(c: sqlite3.Connection, url: str, timeout: float, is_memory: bool) -> None:
    """Create the schema in a new file, or check an existing one (refusing a foreign or
    newer file with a :class:`StoreError`); put a file in WAL mode."""
    try:
        # the connection's timeout= sets the same busy handler: keep them equal
        c.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
        tables = {
            r[0]
            for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
        }
    except sqlite3.DatabaseError as e:
        raise StoreError(
            f"store {url!r} is not a readable SQLite file ({e}); "
            "refusing to touch it. Move it away or point GOODPUT_JAX_STORE elsewhere."
        ) from e
    if tables and "meta" not in tables:
        raise StoreError(
            f"store {url!r} is an SQLite file but not a goodput_jax event store "
            f"(tables: {sorted(tables)}); refusing to modify it"
        )
    if "meta" in tables:
        _check_version(c, url)
        if not is_memory:
            _set_wal(c, url, timeout)
        return
    if not is_memory:
        _set_wal(c, url, timeout)
    try:
        c.execute("BEGIN IMMEDIATE")
        # Another process may have created it between our check and the lock.
        has_meta = c.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'"
        ).fetchone()
        if not has_meta:
            for stmt in _SCHEMA:
                c.execute(stmt)
            c.executemany(
                "INSERT INTO meta(key, value) VALUES (?, ?)",
                [("schema_version", str(SCHEMA_VERSION)), ("format", _FORMAT)],
            )
        c.execute("COMMIT")
    except sqlite3.Error as e:
        if c.in_transaction:
            c.execute("ROLLBACK")
        raise StoreError(f"cannot initialise store {url!r}: {e}") from e
    _check_version(c, url)

def _set_wal(c: sqlite3.Connection, url: str, timeout: float) -> None:
    # Switching the journal mode can fail at once with "database is locked", without
    # the busy handler, while another process holds a lock on the file (two processes
    # opening one new store together): retry until the store's timeout.
    deadline = time.monotonic() + timeout
    delay = 0.002
    while True:
        try:
            mode = c.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            c.execute("PRAGMA synchronous=NORMAL")
            break
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() >= deadline:
                raise StoreError(
                    f"cannot switch store {url!r} to WAL mode: {e}") from e
            time.sleep(delay)
            delay = min(2 * delay, 0.05)
        except sqlite3.Error as e:
            raise StoreError(f"cannot switch store {url!r} to WAL mode: {e}") from e
    if str(mode).lower() != "wal":
        raise StoreError(f"store {url!r} refused WAL journal mode (got {mode!r})")

def _check_version(c: sqlite3.Connection, url: str) -> None:
    try:
        rows = dict(c.execute("SELECT key, value FROM meta").fetchall())
    except sqlite3.DatabaseError as e:
        raise StoreError(f"store {url!r} has an unreadable meta table: {e}") from e
    if rows.get("format") != _FORMAT:
        raise StoreError(
            f"store {url!r} is not a goodput_jax event store (format {rows.get('format')!r})"
        )
    try:
        version = int(rows.get("schema_version", ""))
    except ValueError:
        raise StoreError(
            f"store {url!r} has a corrupt schema_version {rows.get('schema_version')!r}"
        ) from None
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"store {url!r} has schema version {version}, newer than this goodput_jax "
            f"supports ({SCHEMA_VERSION}); upgrade goodput_jax to read it"
        )
    if version < SCHEMA_VERSION:
        raise StoreError(
            f"store {url!r} has schema version {version}, written by a pre-release "
            f"goodput_jax without columnar blocks; this version reads {SCHEMA_VERSION} only"
        )
