"""The EventStore contract, as a reusable test class.

Every back end must pass it. A test module subclasses :class:`StoreContract`
and provides a ``backend`` fixture: an object with

- ``open()`` -> a fresh store instance on the backend shared by the test (a
  second ``open()`` sees what the first wrote once that one is flushed/closed);
- ``sync(store)`` -> make ``store``'s appends visible to other instances.

Ordering: stores return a job's events oldest first; events appended with
non-decreasing timestamps come back in append order (SQLite: insertion order;
Cloud Logging: timestamp order with ties broken by a sortable insertId).
"""

from __future__ import annotations

import threading

import pytest

from goodput_jax.measure.events import Event, EventKind
from goodput_jax.measure.stores.base import EventStore

T0 = 1_700_000_000.0


def ev(kind=EventKind.STEP_START, job="job", run="run-1", host=0, t=T0, step=None, **kw) -> Event:
    return Event(kind, job, run, host, t, step=step, **kw)


def steps(job: str, n: int, t0: float = T0, dt: float = 1.0, run: str = "run-1", host: int = 0):
    return [ev(EventKind.STEP_START, job, run, host, t0 + i * dt, step=i) for i in range(n)]


def read_all(store, job, cursor=None, limit=None):
    """Read until the store has nothing new; returns (events, cursor)."""
    out = []
    while True:
        got, cursor = store.read_events(job, cursor, limit)
        out.extend(got)
        if not got or limit is None:
            return out, cursor


HOSTILE_NAMES = [
    'a" OR labels.job="victim',
    'x" OR "1"="1',
    "x' OR 1=1 --",
    "AND",
    "OR",
    "trailing\\",
    'back\\"slash',
    "(paren) NOT victim",
    "ünïcödé-джоб-作业",
    "labels.job:victim",
]


class StoreContract:
    """Tests every EventStore must pass (see module docstring)."""

    def test_is_an_event_store(self, backend):
        store = backend.open()
        assert isinstance(store, EventStore)
        assert isinstance(store.url, str) and store.url

    def test_round_trip_every_field(self, backend):
        store = backend.open()
        events = [
            ev(EventKind.JOB_START, t=T0),
            ev(EventKind.STEP_START, t=T0 + 1.25, step=0),
            ev(EventKind.CUSTOM_BADPUT_START, t=T0 + 1.5, label="eval \"quoted\" ü"),
            ev(EventKind.CUSTOM_BADPUT_END, t=T0 + 1.75, label="eval \"quoted\" ü"),
            ev(EventKind.HINTS, t=T0 + 2.0, payload={"gradParams": {"norm": 0.5, "var": 2},
                                                     "initBatchSize": 64, "tags": ["a", "b"]}),
            ev(EventKind.STEP_START, t=T0 + 2.000001, step=1, host=3),
            ev(EventKind.JOB_END, t=T0 + 3.0),
        ]
        store.append(events)
        backend.sync(store)
        got, _ = read_all(store, "job")
        assert got == events
        assert [type(e.step) for e in got] == [type(e.step) for e in events]
        assert all(isinstance(e.host, int) for e in got)

    def test_empty_and_unknown_job(self, backend):
        store = backend.open()
        got, cursor = store.read_events("nobody")
        assert got == []
        store.append(steps("nobody", 3))
        backend.sync(store)
        got, cursor2 = store.read_events("nobody", cursor)
        assert got == steps("nobody", 3)
        assert store.read_events("nobody", cursor2)[0] == []

    def test_job_isolation_and_list_jobs(self, backend):
        store = backend.open()
        store.append(steps("alpha", 5) + steps("beta", 4, t0=T0 + 0.5))
        backend.sync(store)
        assert read_all(store, "alpha")[0] == steps("alpha", 5)
        assert read_all(store, "beta")[0] == steps("beta", 4, t0=T0 + 0.5)
        assert {"alpha", "beta"} <= set(store.list_jobs())

    def test_cursor_is_incremental(self, backend):
        store = backend.open()
        first = steps("job", 10)
        store.append(first)
        backend.sync(store)
        got, cursor = read_all(store, "job")
        assert got == first
        assert store.read_events("job", cursor)[0] == []
        second = steps("job", 10, t0=T0 + 10)
        second = [Event(e.kind, e.job_name, e.run_id, e.host, e.timestamp, step=e.step + 10)
                  for e in second]
        store.append(second)
        backend.sync(store)
        got2, cursor2 = store.read_events("job", cursor)
        assert got2 == second
        assert store.read_events("job", cursor2)[0] == []
        # An old cursor is still valid and replays from where it was.
        assert read_all(store, "job", cursor)[0] == second

    def test_limit_pages_without_loss_or_duplicates(self, backend):
        store = backend.open()
        events = steps("job", 230, dt=0.01)
        store.append(events)
        backend.sync(store)
        got, cursor = [], None
        for _ in range(100):
            batch, cursor = store.read_events("job", cursor, limit=40)
            assert len(batch) <= 40
            if not batch:
                break
            got.extend(batch)
        assert got == events

    def test_equal_timestamps_keep_append_order(self, backend):
        store = backend.open()
        events = [
            ev(EventKind.STEP_START, t=T0, step=0),
            ev(EventKind.STEP_END, t=T0 + 1, step=0),
            ev(EventKind.STEP_START, t=T0 + 1, step=1),
            ev(EventKind.CHECKPOINT_SAVE_START, t=T0 + 1),
            ev(EventKind.CHECKPOINT_SAVE_END, t=T0 + 2),
        ]
        for e in events:  # one append per event, as a recorder flushing often would
            store.append([e])
        backend.sync(store)
        assert read_all(store, "job")[0] == events

    def test_second_instance_sees_writes(self, backend):
        writer = backend.open()
        writer.append(steps("shared", 7))
        backend.sync(writer)
        writer.close()
        reader = backend.open()
        assert read_all(reader, "shared")[0] == steps("shared", 7)

    def test_concurrent_appends_from_threads(self, backend):
        store = backend.open()
        per_thread = {h: steps("job", 40, dt=0.001, host=h, run=f"run-{h}") for h in range(4)}

        def work(h):
            for i in range(0, 40, 8):
                store.append(per_thread[h][i:i + 8])

        threads = [threading.Thread(target=work, args=(h,)) for h in per_thread]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        backend.sync(store)
        got, _ = read_all(store, "job")
        assert len(got) == 160
        for h, events in per_thread.items():
            assert [e for e in got if e.host == h] == events

    def test_rejects_non_events_and_stores_nothing(self, backend):
        store = backend.open()
        with pytest.raises(TypeError, match=r"events\[1\]"):
            store.append([ev(job="typed"), {"kind": "step_start"}])
        backend.sync(store)
        assert store.read_events("typed")[0] == []

    @pytest.mark.parametrize("name", HOSTILE_NAMES)
    def test_hostile_job_names_stay_isolated(self, backend, name):
        store = backend.open()
        store.append(steps("victim", 3) + steps(name, 2, t0=T0 + 0.5))
        backend.sync(store)
        got, _ = read_all(store, name)
        assert got == steps(name, 2, t0=T0 + 0.5)
        assert all(e.job_name == name for e in got)
        assert name in store.list_jobs()

    @pytest.mark.parametrize("name", ["line\nbreak", "tab\there", "nul\x00", "del\x7f", "cr\r"])
    def test_job_names_with_control_characters_are_refused(self, backend, name):
        # such a name breaks Cloud Logging filters (the job could never be read back)
        store = backend.open()
        with pytest.raises(ValueError, match=r"job_name .*control character"):
            store.append([ev(job="fine"), ev(job=name)])
        backend.sync(store)
        assert store.read_events("fine")[0] == []  # nothing of the batch is stored
        assert name not in store.list_jobs()

    def test_job_names_differing_only_in_case_are_distinct(self, backend):
        # Cloud Logging's filter `=` is case-insensitive: the store must not mix these up.
        store = backend.open()
        store.append(steps("Job-A", 3) + steps("job-a", 2, t0=T0 + 0.5) + steps("JOB-A", 1))
        backend.sync(store)
        assert read_all(store, "job-a")[0] == steps("job-a", 2, t0=T0 + 0.5)
        assert read_all(store, "Job-A")[0] == steps("Job-A", 3)
        assert read_all(store, "JOB-A", limit=1)[0] == steps("JOB-A", 1)
        assert {"Job-A", "job-a", "JOB-A"} <= set(store.list_jobs())

    def test_close_is_idempotent(self, backend):
        store = backend.open()
        store.append(steps("job", 2))
        backend.sync(store)
        store.close()
        store.close()
