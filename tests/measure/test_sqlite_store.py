"""SQLiteStore specifics: schema/version checks, WAL, indexes, atomicity, processes, URLs."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from goodput_jax.measure.events import KIND_CODES, Event, EventKind
from goodput_jax.measure.stores import StoreError, open_store
from goodput_jax.measure.stores.sqlite import SCHEMA_VERSION, SQLiteStore

K = EventKind


def ev(job="job", t=1.0, step=None, kind=K.STEP_START, run="r", **kw):
    return Event(kind, job, run, 0, t, step=step, **kw)


def test_wal_mode_schema_version_and_indexes(tmp_path):
    path = str(tmp_path / "g.db")
    store = SQLiteStore(path)
    assert store.schema_version == SCHEMA_VERSION
    store.close()
    c = sqlite3.connect(path)
    assert c.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    idx = {}
    for (name,) in c.execute("SELECT name FROM sqlite_master WHERE type='index' AND tbl_name='events'"):
        idx[name] = [r[2] for r in c.execute("SELECT * FROM pragma_index_info(?)", (name,))]
    assert ["job_id", "ts"] in idx.values()
    assert ["job_id", "id"] in idx.values()
    plan = " ".join(str(r) for r in c.execute(
        "EXPLAIN QUERY PLAN SELECT id FROM events WHERE job_id = 1 AND ts > 5"))
    assert "events_job_ts" in plan
    c.close()


def test_newer_schema_is_refused_and_left_untouched(tmp_path):
    path = str(tmp_path / "g.db")
    SQLiteStore(path).close()
    c = sqlite3.connect(path)
    c.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    c.commit()
    c.close()
    with open(path, "rb") as f:
        before = f.read()
    with pytest.raises(StoreError, match=rf"schema version {SCHEMA_VERSION + 1}, newer"):
        SQLiteStore(path)
    with open(path, "rb") as f:
        assert f.read() == before


def test_corrupt_and_foreign_files_are_refused(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(StoreError, match="not a readable SQLite file"):
        SQLiteStore(str(junk))
    assert junk.read_bytes() == b"this is not sqlite at all" * 100
    foreign = tmp_path / "foreign.db"
    c = sqlite3.connect(foreign)
    c.execute("CREATE TABLE precious (x)")
    c.commit()
    c.close()
    with pytest.raises(StoreError, match="not a goodput_jax event store"):
        SQLiteStore(str(foreign))
    with pytest.raises(FileNotFoundError, match="missing.db"):
        SQLiteStore(str(tmp_path / "missing.db"), create=False)
    assert not (tmp_path / "missing.db").exists()
    with pytest.raises(StoreError, match="does not exist"):
        SQLiteStore(str(tmp_path / "no-such-dir" / "g.db"))


def test_hostile_job_name_is_stored_verbatim(tmp_path):
    store = SQLiteStore(str(tmp_path / "g.db"))
    name = "x'; DROP TABLE events; --"
    store.append([ev(job=name, step=1, label="l'); --", kind=K.CUSTOM_BADPUT_START)])
    got, _ = store.read_events(name)
    assert got[0].job_name == name and got[0].label == "l'); --"
    assert store.list_jobs() == [name]


def test_batch_with_a_bad_event_stores_nothing(tmp_path):
    store = SQLiteStore(str(tmp_path / "g.db"))
    bad = Event(K.STEP_START, "job", "r", 0, 2.0, step=-3)
    with pytest.raises(ValueError, match="step"):
        store.append([ev(step=1), bad])
    naive = Event(K.STEP_START, "job", "r", 0, float("nan"), step=1)
    with pytest.raises(ValueError, match="finite"):
        store.append([ev(step=1), naive])
    assert store.read_events("job") == ([], None)


def test_read_rows_cursor_over_interleaved_jobs(tmp_path):
    store = SQLiteStore(str(tmp_path / "g.db"))
    for i in range(10):
        store.append([ev("a", t=i, step=i), ev("b", t=i, step=i)])
    rows, cur, done = [], None, False
    while not done:
        got, cur, done = store.read_rows("a", cur, span=3)
        rows += got
    assert [r[3] for r in rows] == list(range(10))
    assert store.read_rows("a", cur) == ([], cur, True)
    store.append([ev("a", t=99, step=99)])
    got, cur2, done = store.read_rows("a", cur)
    assert [r[3] for r in got] == [99] and done and cur2 > cur
    with pytest.raises(ValueError, match="cursor"):
        store.read_rows("a", "bogus")


_WRITER = textwrap.dedent("""
    import sys
    from goodput_jax.measure.events import Event, EventKind
    from goodput_jax.measure.stores.sqlite import SQLiteStore
    path, run, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = SQLiteStore(path, timeout=60)
    for i in range(0, n, 10):
        store.append([Event(EventKind.STEP_START, "job", run, 0, float(j), step=j)
                      for j in range(i, i + 10)])
    store.close()
""")


def test_two_processes_write_one_store_at_once(tmp_path):
    path = str(tmp_path / "shared.db")
    SQLiteStore(path).close()
    n = 400
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, path, run, str(n)])
             for run in ("p1", "p2")]
    for p in procs:
        assert p.wait(timeout=120) == 0
    store = SQLiteStore(path)
    got, _ = store.read_events("job")
    assert len(got) == 2 * n
    for run in ("p1", "p2"):
        assert [e.step for e in got if e.run_id == run] == list(range(n))


def test_open_store_urls_and_environment(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = open_store("sqlite:///rel.db")
    assert s.path == "rel.db" and (tmp_path / "rel.db").exists()
    s.close()
    abs_path = str(tmp_path / "abs.db")
    s = open_store("sqlite:///" + abs_path)
    assert s.path == abs_path and s.url == "sqlite:///" + abs_path
    s.close()
    monkeypatch.setenv("GOODPUT_JAX_STORE", "sqlite:///env.db")
    s = open_store()
    assert s.path == "env.db"
    s.close()
    monkeypatch.delenv("GOODPUT_JAX_STORE")
    s = open_store()
    assert os.path.basename(s.path) == "goodput.db"
    s.close()
    with pytest.raises(ValueError, match="unknown scheme"):
        open_store("mysql://x")


def test_read_columns_matches_read_events_from_any_cursor(tmp_path):
    store = SQLiteStore(str(tmp_path / "g.db"))
    batch = []
    for i in range(30):
        run = "r1" if i % 7 < 4 else "r2"
        kind = [K.STEP_START, K.CUSTOM_BADPUT_START, K.CUSTOM_BADPUT_END, K.HINTS][i % 4]
        batch.append(Event(kind, "a", run, i % 2, float(i), step=i if kind is K.STEP_START else None,
                           label=f"l{i}" if "CUSTOM" in kind.name else None,
                           payload={"i": i} if kind is K.HINTS else None))
        batch.append(ev("b", t=i, step=i))
        if i % 6 == 5:
            store.append(batch)
            batch = []
    all_events, _ = store.read_events("a")
    for start in (None, 1, 3, 17, 29):
        if start is None:
            want, cursor = all_events, None
        else:
            _, cursor = store.read_events("a", None, limit=start)
            want = store.read_events("a", cursor)[0]
        got = []
        done = False
        while not done:
            cols, cursor, done = store.read_columns("a", cursor, max_events=4)
            if cols is None:
                continue
            for j in range(cols["kind"].size):
                got.append((int(cols["kind"][j]), float(cols["ts"][j]), int(cols["step"][j]),
                            cols["labels"].get(j)))
        expect = []
        for e in want:
            extra = e.label if e.label is not None else (e.payload_json() if e.payload else None)
            expect.append((KIND_CODES[e.kind], e.timestamp, -1 if e.step is None else e.step, extra))
        assert got == expect, start


def test_timeout_argument_is_the_busy_timeout(tmp_path):
    """timeout= bounds how long a write waits for another writer's lock (a fixed
    PRAGMA busy_timeout of 30 s used to override it)."""
    import sqlite3
    import threading
    import time

    from goodput_jax.measure.events import Event, EventKind

    path = str(tmp_path / "g.db")
    SQLiteStore(path).close()
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    store = SQLiteStore(path, timeout=0.2)
    out = {}

    def write():
        t = time.monotonic()
        try:
            store.append([Event(EventKind.JOB_START, "j", "r", 0, 1.0)])
            out["ok"] = True
        except Exception as e:  # noqa: BLE001 - the error is what we check
            out["error"] = e
        out["s"] = time.monotonic() - t

    th = threading.Thread(target=write)
    th.start()
    th.join(5.0)
    alive = th.is_alive()
    blocker.execute("ROLLBACK")
    th.join()
    blocker.close()
    store.close()
    assert not alive, "the write waited past its timeout"
    assert "error" in out and "locked" in str(out["error"]) and out["s"] < 3.0
    with pytest.raises(ValueError, match="timeout"):
        SQLiteStore(path, timeout=-1)


def test_append_raw_stores_what_append_stores(tmp_path):
    """The recorder's tuple path: the same events, columns and blocks as Event objects,
    and a labelled or payload tuple is still validated (nothing of its batch stored)."""
    kinds = [K.STEP_START, K.STEP_DEVICE_END, K.CUSTOM_BADPUT_START, K.CUSTOM_BADPUT_END,
             K.HINTS]
    events = []
    for i in range(25):
        kind = kinds[i % 5]
        events.append(Event(kind, "a", "r", 1, 10.0 + i,
                            step=i if kind in (K.STEP_START, K.STEP_DEVICE_END) else None,
                            label=f"l{i}" if "CUSTOM" in kind.name else None,
                            payload={"b": i, "a": [1]} if kind is K.HINTS else None))
    one, two = SQLiteStore(str(tmp_path / "one.db")), SQLiteStore(str(tmp_path / "two.db"))
    one.append(events)
    two.append_raw("a", "r", 1, [(KIND_CODES[e.kind], e.timestamp, e.step, e.label, e.payload)
                                 for e in events])
    assert one.read_events("a") == two.read_events("a")
    cols_one, _, _ = one.read_columns("a", None)
    cols_two, _, _ = two.read_columns("a", None)
    for k in ("kind", "ts", "step"):
        assert cols_one[k].tolist() == cols_two[k].tolist()
    assert cols_one["labels"] == cols_two["labels"]
    code = KIND_CODES[K.HINTS]
    with pytest.raises(ValueError, match="payload"):
        two.append_raw("a", "r", 1, [(KIND_CODES[K.STEP_START], 99.0, 99, None, None),
                                     (code, 100.0, None, None, {"x": object()})])
    with pytest.raises(ValueError, match="job_name"):
        two.append_raw("", "r", 1, [(KIND_CODES[K.STEP_START], 99.0, 99, None, None)])
    assert len(two.read_events("a")[0]) == len(events)
