"""Stores declare flush and the columnar read; a basic store gets a clear adapter."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from goodput_jax.measure import calculator, recorder
from goodput_jax.measure.events import EventKind as K
from goodput_jax.measure.recorder import GoodputRecorder
from goodput_jax.measure.stores import (
    BasicStore,
    EventStore,
    RowStoreAdapter,
    as_event_store,
    resolve_store,
)
from goodput_jax.measure.stores.sqlite import SQLiteStore
from tests.measure._timeline import calc_for, events


class _ListStore:
    """A basic store: the four methods and a url, nothing else."""

    url = "list://"

    def __init__(self):
        self.events = []
        self.closed = False

    def append(self, evs):
        self.events.extend(evs)

    def read_events(self, job_name, cursor=None, limit=None):
        start = cursor or 0
        mine = [(i, e) for i, e in enumerate(self.events) if i >= start and e.job_name == job_name]
        mine = mine[:limit] if limit else mine
        return [e for _, e in mine], (mine[-1][0] + 1 if mine else cursor)

    def list_jobs(self):
        return sorted({e.job_name for e in self.events})

    def close(self):
        self.closed = True


def _spec():
    spec = [(K.JOB_START, 0.0), (K.CUSTOM_BADPUT_START, 0.5), (K.CUSTOM_BADPUT_END, 1.5)]
    t = 2.0
    for i in range(40):
        spec += [(K.STEP_START, t, i), (K.DATA_LOADING_START, t + 0.1), (K.DATA_LOADING_END, t + 0.3)]
        t += 1.0
    return spec + [(K.JOB_END, t)]


def test_sqlite_is_a_full_event_store_and_a_basic_store_is_adapted():
    sql = SQLiteStore(":memory:")
    assert isinstance(sql, EventStore) and resolve_store(sql) is sql and sql.flush(0) is True
    basic = _ListStore()
    assert isinstance(basic, BasicStore) and not isinstance(basic, EventStore)
    adapted = resolve_store(basic)
    assert isinstance(adapted, RowStoreAdapter) and isinstance(adapted, EventStore)
    assert adapted.inner is basic and adapted.url == "list://" and adapted.flush() is True
    adapted.close()
    assert basic.closed
    with pytest.raises(TypeError, match=r"store \(42\) must be an EventStore"):
        as_event_store(42)


def test_adapter_columns_match_sqlite_columns():
    evs = events("j", "r", _spec())
    sql, basic = SQLiteStore(":memory:"), as_event_store(_ListStore())
    for s in (sql, basic):
        s.append(evs)
    a, _, done_a = sql.read_columns("j")
    b, cur, done_b = basic.read_columns("j", None, 10)  # chunked: not done after 10
    assert done_a and not done_b and b["kind"].size == 10
    rest, _, done = basic.read_columns("j", cur)
    assert done
    for k in ("kind", "ts", "step"):
        assert np.array_equal(a[k], np.concatenate([b[k], rest[k]])), k
    assert basic.stream_info(int(b["stream"][0])) == sql.stream_info(int(a["stream"][0]))
    assert [v for v in a["labels"].values() if v is not None] == list(b["labels"].values())
    with pytest.raises(ValueError, match="stream_id"):
        basic.stream_info(99)
    with pytest.raises(ValueError, match="max_events"):
        basic.read_columns("j", None, 0)


def test_calculator_gives_the_same_answer_through_the_adapter():
    evs = events("j", "r", _spec())
    sql, basic = SQLiteStore(":memory:"), _ListStore()
    sql.append(evs)
    basic.append(evs)
    want = calc_for(sql, "j").get_job_goodput(include_badput_breakdown=True)
    got = calc_for(basic, "j").get_job_goodput(include_badput_breakdown=True)
    assert got[0] == pytest.approx(want[0]) and got[2] == want[2]
    assert got[1] == pytest.approx(want[1])


def test_recorder_flushes_a_basic_store(tmp_path):
    basic = _ListStore()
    rec = GoodputRecorder("j", logging_enabled=True, store=basic)
    rec.record_job_start_time()
    assert rec.flush(10) and [e.kind for e in basic.events] == [K.JOB_START]
    rec.close()


def test_no_capability_probes():
    for mod in (calculator, recorder):
        src = inspect.getsource(mod)
        for name in ("flush", "read_columns", "stream_info"):
            assert f'"{name}"' not in src, (mod.__name__, name)
