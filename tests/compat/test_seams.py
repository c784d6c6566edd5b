"""The public seams ``goodput_jax.measure`` offers the drop-ins, and the drop-ins' use of them.

``calculator.breakdown`` / ``check_ideal`` / ``BUCKET_TYPES``, ``GoodputRecorder.closed``
and ``GoodputMonitor.elastic_tags``; each on a real SQLite store (tmp_path) with an
injected clock, no sleeps.
"""

from __future__ import annotations

import pytest

from goodput_jax import goodput, goodput_elastic, monitoring_elastic
from goodput_jax.compat.recorder import flush_live_recorders
from goodput_jax.measure import calculator as mcalc
from goodput_jax.measure.badput import BUCKET_NAMES, BadputType
from goodput_jax.measure.monitor import GoodputMonitor as BaseMonitor
from goodput_jax.measure.recorder import GoodputRecorder as BaseRecorder
from goodput_jax.measure.stores.sqlite import SQLiteStore


def _elastic_job(store, clock_box):
    """Job of 51 s: 10 s TPU init, 20 one-second steps, a 10 s slice-down wait, a 10 s
    re-initialisation (the shape of tests/integrations/test_maxtext.py's elastic run)."""
    rec = goodput_elastic.ElasticGoodputRecorder("el", "goodput_el", True, store=store,
                                                 clock=lambda: clock_box[0])

    def at(t, method, *args):
        clock_box[0] = float(t)
        getattr(rec, method)(*args)

    at(0, "record_job_start_time")
    at(0, "record_elastic_slice_counts", 2, 2, 2)
    at(1, "record_tpu_init_start_time")
    at(11, "record_tpu_init_end_time")
    for i in range(10):
        at(11 + i, "record_step_start_time", i)
    at(21, "record_elastic_wait_start_time", "slice_down")
    at(31, "record_elastic_wait_end_time", "slice_down")
    at(31, "record_elastic_reinit_start_time")
    at(41, "record_elastic_reinit_end_time")
    for i in range(10, 20):
        at(41 + (i - 10), "record_step_start_time", i)
    at(51, "record_job_end_time")
    rec.close()


# ------------------------------------------------------------------ calculator seams
def test_bucket_types_follow_the_engine_buckets():
    assert [t.name for t in mcalc.BUCKET_TYPES] == list(BUCKET_NAMES)
    assert all(isinstance(t, BadputType) for t in mcalc.BUCKET_TYPES)


def test_breakdown_is_the_calculators_rule(tmp_path):
    store = SQLiteStore(str(tmp_path / "g.db"))
    now = [0.0]
    _elastic_job(store, now)
    calc = mcalc.GoodputCalculator("el", "goodput_el", store=store, clock=lambda: now[0])
    _, flat, _ = calc.get_job_goodput(include_badput_breakdown=True)
    d = calc.get_job_goodput_details()
    acc = [d["badput_time"][t] for t in mcalc.BUCKET_TYPES]
    pct = mcalc.breakdown(acc, d["total_time"], d["badput_time"][BadputType.DATA_LOADING_ASYNC])
    assert pct == pytest.approx(flat)
    assert pct[BadputType.ELASTIC_SLICE_DOWN] == pytest.approx(100 * 10 / 51)
    assert pct[BadputType.ELASTIC_REINITIALIZATION] == pytest.approx(100 * 10 / 51)
    store.close()


def test_breakdown_rejects_a_bad_accumulator_or_total():
    n = len(mcalc.BUCKET_TYPES)
    with pytest.raises(ValueError, match=r"acc \(2 entries\) must hold one entry per bucket"):
        mcalc.breakdown([1.0, 2.0], 10.0)
    with pytest.raises(ValueError, match=r"total \(0.0\) must be positive"):
        mcalc.breakdown([0.0] * n, 0.0)


@pytest.mark.parametrize(("value", "err", "match"), [
    (True, TypeError, r"configured_ideal_step_time \(True\) must be a positive float"),
    ("1", TypeError, r"configured_ideal_step_time \('1'\)"),
    (0.0, ValueError, r"configured_ideal_step_time \(0.0\) must be a positive finite float"),
    (float("inf"), ValueError, r"configured_ideal_step_time \(inf\)"),
])
def test_check_ideal_names_the_argument(value, err, match):
    with pytest.raises(err, match=match):
        mcalc.check_ideal(value)
    with pytest.raises(err, match=match):  # the drop-in validates through the same seam
        goodput.GoodputCalculator("j", "goodput_j", store=":memory:",
                                  configured_ideal_step_time=value)


def test_check_ideal_accepts_none_and_positive_numbers():
    assert mcalc.check_ideal(None) is None
    assert mcalc.check_ideal(3) == 3.0 and isinstance(mcalc.check_ideal(3), float)


# ------------------------------------------------------------------ recorder.closed
def test_closed_is_a_read_only_property(tmp_path):
    store = SQLiteStore(str(tmp_path / "g.db"))
    rec = BaseRecorder("j", "goodput_j", True, store=store, clock=lambda: 5.0)
    assert rec.closed is False
    rec.record_job_start_time()
    rec.close()
    assert rec.closed is True
    with pytest.raises(AttributeError):
        rec.closed = False
    assert store.count_events("j") == 1  # the close flushed what was recorded
    disabled = goodput.GoodputRecorder("j", "goodput_j", False)
    assert disabled.closed is False
    disabled.close()
    assert disabled.closed is True
    store.close()


def test_monitor_flushes_open_drop_in_recorders_of_its_job_only(tmp_path):
    """The drop-in monitor's final upload first flushes this process's open recorders of
    the same job (through GoodputRecorder.closed): an event still queued is counted."""
    store = SQLiteStore(str(tmp_path / "g.db"))
    def clock():
        return 100.0

    # a long latency: nothing is written in the background during the test
    rec = goodput.GoodputRecorder("fj", "goodput_fj", True, store=store, clock=clock,
                                  background_max_latency_s=3600.0)
    other = goodput.GoodputRecorder("other", "goodput_other", True, store=store, clock=clock,
                                    background_max_latency_s=3600.0)
    closed = goodput.GoodputRecorder("fj", "goodput_fj", True, store=store, clock=clock)
    closed.close()
    rec.record_job_start_time(0.0)
    other.record_job_start_time(0.0)
    assert store.count_events("fj") == 0
    flush_live_recorders("fj", 10.0)  # skips the closed one without error
    assert store.count_events("fj") == 1 and store.count_events("other") == 0
    rec.close()
    other.close()
    store.close()


# ------------------------------------------------------------------ monitor.elastic_tags
def test_elastic_tags_decide_the_reference_layouts_elastic_buckets(tmp_path):
    store = SQLiteStore(str(tmp_path / "g.db"))
    now = [0.0]
    _elastic_job(store, now)
    assert BaseMonitor.elastic_tags is False and goodput.GoodputMonitor.elastic_tags is False
    assert monitoring_elastic.ElasticGoodputMonitor.elastic_tags is True

    def upload():
        return BaseMonitor("el", "goodput_el", str(tmp_path / "tb"), 30, store=store,
                           clock=lambda: now[0], tag_layout="reference")

    plain = upload()
    values = plain.upload_goodput()
    assert "badput/tpu_initialization" in values
    assert not any(k.startswith("badput/elastic_") for k in values), values
    plain.close()
    elastic = upload()
    elastic.elastic_tags = True  # an instance may switch it too
    values = elastic.upload_goodput()
    assert values["badput/elastic_slice_down"] == pytest.approx(100 * 10 / 51)
    assert values["badput/elastic_reinitialization"] == pytest.approx(100 * 10 / 51)
    elastic.close()
    # the goodput_jax layout writes every bucket whatever the attribute says
    ours = BaseMonitor("el", "goodput_el", str(tmp_path / "tb2"), 30, store=store,
                       clock=lambda: now[0])
    assert "badput/elastic_slice_down" in ours.upload_goodput()
    ours.close()
    store.close()


@pytest.fixture
def closes(monkeypatch):
    """The SQLite stores closed during the test (the real close runs)."""
    seen: list[SQLiteStore] = []
    real = SQLiteStore.close

    def close(self):
        seen.append(self)
        real(self)

    monkeypatch.setattr(SQLiteStore, "close", close)
    return seen


def test_elastic_monitor_closes_only_the_store_it_opened(tmp_path, closes):
    mon = monitoring_elastic.ElasticGoodputMonitor(
        "j", "goodput_j", str(tmp_path / "tb"), 30, store=f"sqlite:///{tmp_path / 'own.db'}")
    own = mon.calculator.store
    assert mon.close() is True and mon.close() is True  # idempotent
    assert closes == [own]
    given = SQLiteStore(str(tmp_path / "given.db"))
    mon = monitoring_elastic.ElasticGoodputMonitor("j", "goodput_j", str(tmp_path / "tb2"), 30,
                                                   store=given)
    mon.close()
    assert closes == [own] and given.count_events("j") == 0  # still open
    given.close()


def test_elastic_monitor_closes_its_store_when_the_arguments_are_bad(tmp_path, closes):
    with pytest.raises(ValueError, match=r"upload_interval \(-1\)"):
        monitoring_elastic.ElasticGoodputMonitor(
            "j", "goodput_j", str(tmp_path / "tb"), -1, store=f"sqlite:///{tmp_path / 'o.db'}")
    assert len(closes) == 1


def test_one_mad_rule_and_one_goodput_formula_serve_the_calculator_and_the_drop_ins():
    import math
    import statistics

    from goodput_jax import goodput_utils
    from goodput_jax.measure.calculator import (
        estimate_ideal_step_time,
        goodput_percent,
        mad_limit,
    )

    times = [1.0, 1.2, 1.1, 1.0, 9.0, 1.05, 1.15, 30.0]  # all >= 1 s, as Google's ideal wants
    lim = mad_limit(times)
    normal = [t for t in times if t <= lim]
    assert sorted(t for t in times if t > lim) == [9.0, 30.0]
    # Google's ideal is the mean of the normal steps, ours their median: the same split
    assert goodput_utils.compute_ideal_step_time(times) == sum(normal) / len(normal)
    assert estimate_ideal_step_time(times) == statistics.median(normal)
    assert mad_limit([2.0, 2.0, 2.0]) == 2.0  # MAD 0: the limit is the median
    with pytest.raises(ValueError, match="step_times"):
        mad_limit([])
    assert goodput_percent(1.0, 4.0) == 25.0 and math.isnan(goodput_percent(1.0, 0.0))
