"""GoodputCalculator: invariants, incremental == from scratch, errors, statistics, threads."""

from __future__ import annotations

import datetime as dt
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from goodput_jax.measure.calculator import (
    BadputType,
    GoodputCalculator,
    NoEventsError,
    estimate_ideal_step_time,
)
from goodput_jax.measure.events import Event, EventKind
from tests.measure._timeline import K, calc_for, events, new_store

# ---------------------------------------------------------------- random timelines
_SPAN_KINDS = [
    (K.ACCELERATOR_INIT_START, K.ACCELERATOR_INIT_END),
    (K.TRAINING_PREP_START, K.TRAINING_PREP_END),
    (K.PROGRAM_STARTUP_START, K.PROGRAM_STARTUP_END),
    (K.DATA_LOADING_START, K.DATA_LOADING_END),
    (K.CHECKPOINT_SAVE_START, K.CHECKPOINT_SAVE_END),
    (K.CHECKPOINT_RESTORE_START, K.CHECKPOINT_RESTORE_END),
    (K.CUSTOM_BADPUT_START, K.CUSTOM_BADPUT_END),
]
_ALL = list(EventKind)


@st.composite
def timelines(draw):
    """Arbitrary (even ill-formed) event sequences over a few runs and hosts."""
    n = draw(st.integers(1, 40))
    out = []
    t = 0.0
    for _ in range(n):
        kind = draw(st.sampled_from(_ALL))
        t += draw(st.floats(-3.0, 20.0, allow_nan=False))  # negative: out-of-order / skew
        run = draw(st.sampled_from(["a", "b", "c"]))
        host = draw(st.integers(0, 1))
        step = (draw(st.integers(0, 12))
                if kind in (K.STEP_START, K.STEP_END, K.STEP_DEVICE_END) else None)
        label = (draw(st.sampled_from(["x", "y", "scale_up"]))
                 if kind.name.startswith(("CUSTOM", "ELASTIC_WAIT")) else None)
        payload = {"v": 1} if kind is K.HINTS else None
        if kind is K.CHECKPOINT_STATS:
            payload = {"event_type": draw(st.sampled_from(["save", "restore"])),
                       "duration_s": draw(st.floats(0.0, 15.0))}
        if kind is K.ELASTIC_SLICE_COUNTS:
            payload = {"active": 1, "total": 2, "available": 2}
        if kind is K.COMPILATION:
            payload = {"duration_s": draw(st.floats(0.0, 15.0)), "recompile": draw(st.booleans()),
                       "name": "f"}
        out.append(Event(kind, "job", run, host, max(t, 0.0), step=step, label=label,
                         payload=payload))
    return out


def _blocking_sum(badput: dict) -> float:
    return sum(v for k, v in badput.items() if k is not BadputType.DATA_LOADING_ASYNC)


def _details_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k, va in a.items():
        if isinstance(va, dict):
            assert va.keys() == b[k].keys()
            for kk, v in va.items():
                assert v == pytest.approx(b[k][kk], abs=1e-9), (k, kk)
        elif isinstance(va, float):
            assert va == pytest.approx(b[k], abs=1e-9), k
        else:
            assert va == b[k], k


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(timelines(), st.floats(0.0, 1000.0))
def test_buckets_sum_to_100_and_goodput_in_range(evs, now):
    store = new_store()
    store.append(evs)
    calc = calc_for(store, now=now)
    try:
        g, b, _ = calc.get_job_goodput(include_badput_breakdown=True)
    except NoEventsError:
        assert all(e.kind in (K.HINTS, K.CHECKPOINT_PROGRESS, K.CHECKPOINT_STATS, K.PROGRAM_COST,
                              K.ELASTIC_SLICE_COUNTS) for e in evs)
        return
    except ValueError as e:  # zero elapsed time
        assert "zero elapsed time" in str(e)
        return
    assert 0.0 <= g <= 100.0
    assert all(v >= -1e-9 for v in b.values())
    # DATA_LOADING_ASYNC is reported beside the buckets, not part of the 100 %
    assert g + _blocking_sum(b) == pytest.approx(100.0, abs=0.01)
    d = calc.get_job_goodput_details()
    assert d["productive_time"] + _blocking_sum(d["badput_time"]) == pytest.approx(d["total_time"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(timelines(), st.lists(st.integers(1, 5), min_size=1, max_size=10))
def test_incremental_equals_from_scratch_after_every_append(evs, chunk_sizes):
    store = new_store()
    incremental = calc_for(store, now=500.0)
    i = 0
    k = 0
    while i < len(evs):
        n = chunk_sizes[k % len(chunk_sizes)]
        store.append(evs[i:i + n])
        i += n
        k += 1
        scratch = calc_for(store, now=500.0)
        try:
            want = scratch.get_job_goodput_details()
        except NoEventsError:
            with pytest.raises(NoEventsError):
                incremental.get_job_goodput_details()
            continue
        _details_equal(incremental.get_job_goodput_details(), want)


class _ListStore:
    """A second, minimal EventStore implementation (no read_rows fast path)."""

    url = "list://"

    def __init__(self):
        self.events: list[Event] = []

    def append(self, events):
        self.events.extend(events)

    def read_events(self, job_name, cursor=None, limit=None):
        start = cursor or 0
        mine = [(i, e) for i, e in enumerate(self.events) if i >= start and e.job_name == job_name]
        mine = mine[:limit] if limit else mine
        return [e for _, e in mine], (mine[-1][0] + 1 if mine else cursor)

    def list_jobs(self):
        return sorted({e.job_name for e in self.events})

    def close(self):
        pass


@settings(max_examples=40, deadline=None)
@given(timelines())
def test_protocol_only_store_gives_the_same_result(evs):
    sql, lst = new_store(), _ListStore()
    sql.append(evs)
    lst.append(evs)
    a, b = calc_for(sql, now=300.0), calc_for(lst, now=300.0)
    try:
        want = a.get_job_goodput_details()
    except NoEventsError:
        with pytest.raises(NoEventsError):
            b.get_job_goodput_details()
        return
    _details_equal(b.get_job_goodput_details(), want)


# ---------------------------------------------------------------- incremental cost
def test_query_reads_only_new_events():
    store = new_store()
    store.append(events("job", "r", [(K.JOB_START, 0)] + [(K.STEP_START, i + 1, i) for i in range(500)]))
    calc = calc_for(store)
    assert calc.refresh() == 501
    assert calc.refresh() == 0
    store.append(events("job", "r", [(K.STEP_START, 600 + i, 500 + i) for i in range(7)]))
    store.append(events("other", "r", [(K.STEP_START, 1, 0)] * 3))
    assert calc.refresh() == 7
    assert calc.get_job_goodput()[2] == 505


# ---------------------------------------------------------------- errors
def test_no_events_error_names_store_and_job(tmp_path):
    from goodput_jax.measure.stores.sqlite import SQLiteStore

    store = SQLiteStore(str(tmp_path / "g.db"))
    calc = GoodputCalculator("missing-job", "l", store=store)
    with pytest.raises(NoEventsError, match="missing-job") as ei:
        calc.get_job_goodput()
    assert "g.db" in str(ei.value)
    assert isinstance(ei.value, ValueError)


def test_bad_arguments():
    store = new_store()
    with pytest.raises(ValueError, match="job_name"):
        GoodputCalculator("", "l", store=store)
    with pytest.raises(ValueError, match="configured_ideal_step_time"):
        GoodputCalculator("j", "l", store=store, configured_ideal_step_time=-1.0)
    with pytest.raises(TypeError, match="clock"):
        GoodputCalculator("j", "l", store=store, clock=3.0)
    store.append(events("j", "r", [(K.JOB_START, 0), (K.STEP_START, 1, 0)]))
    calc = calc_for(store, "j", now=10)
    with pytest.raises(ValueError, match="naive"):
        calc.get_job_goodput_interval(dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 2))
    with pytest.raises(ValueError, match="interval_end"):
        calc.get_job_goodput_interval(5.0, 5.0)
    with pytest.raises(TypeError, match="interval_start"):
        calc.get_job_goodput_interval("yesterday", 5.0)
    # zero elapsed job time
    with pytest.raises(ValueError, match="zero elapsed"):
        calc_for(store, "j", now=0).get_job_goodput_interval(100.0, 200.0)


def test_aware_datetimes_and_clock_returning_datetime():
    store = new_store()
    t0 = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    base = t0.timestamp()
    store.append(events("j", "r", [(K.JOB_START, base), (K.STEP_START, base, 0),
                                   (K.STEP_START, base + 10, 1)]))
    calc = GoodputCalculator("j", "l", store=store, clock=lambda: t0 + dt.timedelta(seconds=20))
    g, _, last = calc.get_job_goodput()
    assert g == pytest.approx(50.0) and last == 0
    g, _, _ = calc.get_job_goodput_interval(t0, t0 + dt.timedelta(seconds=10))
    assert g == pytest.approx(100.0)


def test_breakdown_keys_and_aliases():
    store = new_store()
    store.append(events("j", "r", [(K.JOB_START, 0), (K.STEP_START, 0, 0), (K.JOB_END, 10)]))
    calc = calc_for(store, "j")
    g, b, last = calc.get_job_goodput()
    assert b == {} and g == 100.0 and last == 0
    _, b, _ = calc.get_job_goodput(include_badput_breakdown=True)
    assert b[BadputType.TPU_INITIALIZATION] == 0.0  # Google's alias
    assert b[BadputType.DATA_LOADING_SYNC] == 0.0
    assert b[BadputType.DATA_LOADING_ASYNC] == 0.0
    assert set(b) == set(BadputType)


# ---------------------------------------------------------------- step deviation
def test_step_deviation_subsecond_steps_and_outlier():
    store = new_store()
    times = [5.0] + [0.010, 0.012, 0.011, 0.009, 0.010, 0.011, 0.010, 0.012, 0.3]
    t = 100.0
    spec = [(K.JOB_START, t)]
    for i, d in enumerate(times):
        spec.append((K.STEP_START, t, i))
        t += d
    spec.append((K.JOB_END, t))
    store.append(events("j", "r", spec))
    dev = calc_for(store, "j").get_step_deviation()
    assert dev.num_steps == len(times)
    assert dev.median == pytest.approx(np.median(times))
    assert dev.p90 == pytest.approx(np.percentile(times, 90))
    assert dev.ideal_source == "estimated"
    assert 0.009 <= dev.ideal_step_time <= 0.012  # compile step and straggler excluded
    assert dev.step_deviation[0] == pytest.approx(5.0 - dev.ideal_step_time)
    cfg = calc_for(store, "j", configured_ideal_step_time=0.01).get_step_deviation()
    assert cfg.ideal_source == "configured" and cfg.ideal_step_time == 0.01
    np.testing.assert_allclose(cfg.deviations, np.asarray(times) - 0.01, atol=1e-9)
    assert set(cfg.as_dict()) >= {"median", "p90", "ideal_step_time"}


def test_estimate_ideal_step_time():
    assert estimate_ideal_step_time([1.0, 1.1, 0.9, 1.0, 30.0]) == 1.0
    assert estimate_ideal_step_time([2.0, 2.0, 2.0]) == 2.0
    with pytest.raises(ValueError, match="step_times"):
        estimate_ideal_step_time([])


def test_latest_hints():
    store = new_store()
    store.append(events("j", "r", [(K.JOB_START, 0), (K.STEP_START, 0, 0)]))
    calc = calc_for(store, "j")
    assert calc.get_latest_hints() is None
    store.append([Event(K.HINTS, "j", "r", 0, 1.0, payload={"gns": 1.5}),
                  Event(K.HINTS, "j", "r", 0, 2.0, payload={"gns": 2.5, "bs": [1, 2]})])
    assert calc.get_latest_hints() == {"gns": 2.5, "bs": [1, 2]}


# ---------------------------------------------------------------- threads
def test_thread_safe_queries_while_appending():
    store = new_store()
    store.append(events("j", "r", [(K.JOB_START, 0)]))
    calc = calc_for(store, "j", now=10_000.0)
    errors = []
    stop = threading.Event()

    def reader():
        try:
            while not stop.is_set():
                g, b, _ = calc.get_job_goodput(include_badput_breakdown=True)
                assert g + _blocking_sum(b) == pytest.approx(100.0, abs=0.01)
                calc.get_step_deviation()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for th in threads:
        th.start()
    for chunk in range(50):
        store.append(events("j", "r", [(K.STEP_START, 1 + chunk * 20 + i, chunk * 20 + i)
                                       for i in range(20)]))
    stop.set()
    for th in threads:
        th.join()
    assert not errors
    _details_equal(calc.get_job_goodput_details(), calc_for(store, "j", now=10_000.0)
                   .get_job_goodput_details())


# ---------------------------------------------------------------- vectorised cold path
@st.composite
def long_timelines(draw):
    """Long, mostly well-formed MaxText-like timelines with rare irregularities."""
    n_steps = draw(st.integers(100, 700))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    rows = []  # (kind, stream, t, step, label)
    t, stream, step = 0.0, 0, 0
    rows.append((K.JOB_START, stream, t, -1, None))
    # from this step on, device ends (runtime capture), sometimes a few steps late (queued
    # steps, inside the next spans): the row loop's device mode next to the vectorised path
    dev_from = draw(st.sampled_from([None, 0, n_steps // 2]))
    queued: list[int] = []
    while step < n_steps:
        if dev_from is not None and step >= dev_from and queued and rng.random() < 0.6:
            for q in queued:
                t += rng.uniform(0.0, 0.3)
                rows.append((K.STEP_DEVICE_END, stream, t, q, None))
            queued = []
        r = rng.random()
        if r < 0.005:  # crash + restart in a new stream, rolled back a few steps
            stream += 1
            t += rng.uniform(-5, 30)
            rows.append((K.JOB_START, stream, t, -1, None))
            step = max(0, step - int(rng.integers(0, 20)))
        elif r < 0.01:  # in-stream rollback
            step = max(0, step - int(rng.integers(0, 5)))
        rows.append((K.STEP_START, stream, t, step, None))
        queued.append(step)
        t += rng.uniform(0.0, 0.2)
        if rng.random() < 0.9:
            rows.append((K.DATA_LOADING_START, stream, t, -1, None))
            t += rng.uniform(0.0, 0.05)
            rows.append((K.DATA_LOADING_END, stream, t, -1, None))
        t += rng.uniform(0.5, 1.5)
        x = rng.random()
        if x < 0.03:
            rows.append((K.CHECKPOINT_SAVE_START, stream, t, step, None))
            t += rng.uniform(0, 3)
            rows.append((K.CHECKPOINT_SAVE_END, stream, t, step, None))
        elif x < 0.05:
            rows.append((K.STEP_END, stream, t, step, None))
            t += rng.uniform(0, 1)
        elif x < 0.06:
            rows.append((K.CUSTOM_BADPUT_START, stream, t, -1, "eval"))
            t += rng.uniform(0, 2)
            rows.append((K.CUSTOM_BADPUT_END, stream, t, -1, "eval"))
        elif x < 0.065:
            rows.append((K.DATA_LOADING_END, stream, t, -1, None))  # unmatched
        elif x < 0.07:
            t -= rng.uniform(0, 1)  # out of order
        elif x < 0.075:  # nested spans
            rows.append((K.TRAINING_PREP_START, stream, t, -1, None))
            rows.append((K.CHECKPOINT_RESTORE_START, stream, t + 1, -1, None))
            rows.append((K.CHECKPOINT_RESTORE_END, stream, t + 2, -1, None))
            rows.append((K.TRAINING_PREP_END, stream, t + 3, -1, None))
            t += 3
        step += int(rng.integers(1, 3)) if rng.random() < 0.05 else 1
    if rng.random() < 0.5:
        rows.append((K.JOB_END, stream, t, -1, None))
    splits = sorted({int(v) for v in rng.integers(1, len(rows), size=draw(st.integers(0, 4)))})
    window = None
    if draw(st.booleans()):
        a = draw(st.floats(-10.0, t))
        window = (a, a + draw(st.floats(0.0, t)))
    return rows, splits, window


def _columns(rows):
    from goodput_jax.measure.events import KIND_CODES

    return {
        "kind": np.array([KIND_CODES[r[0]] for r in rows], dtype=np.int8),
        "stream": np.array([r[1] << 20 for r in rows], dtype=np.int64),  # one host per run
        "ts": np.array([r[2] for r in rows], dtype=np.float64),
        "step": np.array([r[3] for r in rows], dtype=np.int64),
        "labels": {i: r[4] for i, r in enumerate(rows) if r[4] is not None},
    }


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(long_timelines())
def test_vectorised_path_equals_row_loop(tl):
    from goodput_jax.measure.engine import Engine as _Engine

    rows, splits, window = tl
    slow, fast = (_Engine(*window), _Engine(*window)) if window else (_Engine(), _Engine())
    slow.feed_columns(_columns(rows), fast=False)
    for a, b in zip([0, *splits], [*splits, len(rows)]):
        cols = _columns(rows[a:b])
        fast.feed_columns(cols, fast=True)
    for now in (0.0, 1e7):
        ps, accs, cs = slow.totals(now)
        pf, accf, cf = fast.totals(now)
        assert pf == pytest.approx(ps, rel=1e-9, abs=1e-6)
        np.testing.assert_allclose(accf, accs, rtol=1e-9, atol=1e-6)
        assert cf == pytest.approx(cs)
    assert list(fast.live_steps) == list(slow.live_steps)
    np.testing.assert_allclose(np.array(fast.live_secs), np.array(slow.live_secs), rtol=1e-9,
                               atol=1e-9)
    for attr in ("open_step", "runs", "disruptions", "ignored", "unmatched", "out_of_order",
                 "events", "cur", "ended", "last_t"):
        assert getattr(fast, attr) == getattr(slow, attr), attr
    assert fast.pending == pytest.approx(slow.pending, abs=1e-9)
    assert fast.async_data_loading() == pytest.approx(slow.async_data_loading(), abs=1e-6)
    np.testing.assert_allclose(fast.inferred_startup(), slow.inferred_startup(), atol=1e-6)


def test_calculator_for_a_missing_store_creates_no_file(tmp_path, monkeypatch):
    """Issue 33: ``GoodputCalculator`` for a missing job created an empty ./goodput.db."""
    from goodput_jax.measure.events import Event
    from goodput_jax.measure.stores.sqlite import SQLiteStore

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GOODPUT_JAX_STORE", raising=False)
    calc = GoodputCalculator("missing")  # the default store, ./goodput.db
    with pytest.raises(NoEventsError, match="missing"):
        calc.get_job_goodput()
    explicit = GoodputCalculator("missing", store=f"sqlite:///{tmp_path / 'other.db'}")
    with pytest.raises(NoEventsError):
        explicit.get_job_goodput_details()
    assert list(tmp_path.iterdir()) == []
    # once a recorder writes the file, the same calculator reads it
    st = SQLiteStore(str(tmp_path / "goodput.db"))
    st.append([Event(EventKind.JOB_START, "missing", "r", 0, 0.0),
               Event(EventKind.STEP_START, "missing", "r", 0, 1.0, step=0),
               Event(EventKind.JOB_END, "missing", "r", 0, 2.0)])
    st.close()
    assert calc.get_job_goodput()[0] == pytest.approx(50.0)
