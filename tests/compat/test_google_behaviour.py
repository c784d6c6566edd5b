"""What Google's own tests check, through the drop-in's public API (and Google's module path).

ml-goodput-measurement 0.2.3's unit tests (``benchmarks/google_tests/run.sh``) reach into
its private helpers in three places (``_get_step_times``, ``_extract_slice_count_entries`` /
``_compute_time_weighted_efficiency`` and ``_fetch_new_entries`` /
``_get_current_productive_and_unproductive_time``: the drop-ins keep them as adaptors,
``test_google_private_helpers.py``); the behaviour those tests check is checked here through
the public calls, with the numbers their scenarios expect. Also: Google's step deviation rule, its result shapes, the last
result a calculator keeps (``_goodput_cache``, which Google's tests read) and
``goodput_utils``' metadata helpers on Google's module path.
"""

from __future__ import annotations

import inspect

import pytest

from goodput_jax import goodput, goodput_elastic, goodput_utils
from goodput_jax.measure.stores.sqlite import SQLiteStore

T0 = 1_779_926_400.0  # 2026-05-28 00:00 UTC, the date of Google's elastic tests
BT = goodput_utils.BadputType


def _pair(tmp_path, cls_rec=goodput.GoodputRecorder, cls_calc=goodput.GoodputCalculator,
          now=None):
    store = SQLiteStore(str(tmp_path / "g.db"))
    rec = cls_rec("job", "goodput_job", True, store=store)
    clock = None if now is None else (lambda: now)
    return rec, cls_calc("job", "goodput_job", store=store, clock=clock), store


# ------------------------------------------------------------------- step deviation
def test_step_deviation_is_googles_gap_between_consecutive_starts_from_the_mean(tmp_path):
    """Google: a step's time is the gap to step + 1's start (the last step has none); the
    ideal is the mean of the steps within median + 3 MAD; deviations are absolute
    (0.2.3 returned {0: .667, 1: .333, 2: 12.667, 3: .333} for these starts)."""
    rec, calc, _ = _pair(tmp_path)
    rec.record_job_start_time(T0)
    for i, s in enumerate([0, 3, 5, 20, 22]):
        rec.record_step_start_time(i, T0 + s)
    rec.record_job_end_time(T0 + 30)
    dev = calc.get_step_deviation()
    assert dev == pytest.approx({0: 2 / 3, 1: 1 / 3, 2: 38 / 3, 3: 1 / 3})
    assert calc.get_step_deviation(configured_ideal_step_time=2.0) == pytest.approx(
        {0: 1.0, 1: 0.0, 2: 13.0, 3: 0.0})
    info = calc._goodput_cache.get_step_info()  # Google's tests read it there
    assert info.ideal_step_time == 2.0 and info.step_deviations == pytest.approx(
        {0: 1.0, 1: 0.0, 2: 13.0, 3: 0.0})
    details = calc.get_job_goodput_details()
    assert details["ideal_step_time"] == pytest.approx(7 / 3)
    assert details["step_time_deviation"] == pytest.approx(dev)


def test_step_deviation_after_a_restart_takes_the_rerun_steps(tmp_path):
    rec, calc, _ = _pair(tmp_path)
    rec.record_job_start_time(T0)
    for i in range(4):
        rec.record_step_start_time(i, T0 + 3 * i)
    rec.record_job_start_time(T0 + 20)
    for i in (2, 3, 4):  # resumed from step 2: its new time replaces the old one
        rec.record_step_start_time(i, T0 + 25 + 4 * (i - 2))
    assert calc.get_step_deviation(configured_ideal_step_time=3.0) == pytest.approx(
        {0: 0.0, 1: 0.0, 2: 1.0, 3: 1.0})


def test_step_deviation_without_steps_raises_googles_error(tmp_path):
    rec, calc, _ = _pair(tmp_path)
    rec.record_job_start_time(T0)
    rec.record_step_start_time(0, T0 + 1)
    with pytest.raises(ValueError, match="No step times available"):
        calc.get_step_deviation()


# ------------------------------------------------------------------ the last result
def test_the_last_result_is_what_get_job_goodput_computed_in_seconds(tmp_path):
    rec, calc, _ = _pair(tmp_path)
    assert calc._goodput_cache.get_goodput_info() is None
    rec.record_job_start_time(T0)
    rec.record_tpu_init_start_time(T0)
    rec.record_tpu_init_end_time(T0 + 2)
    for i in range(5):
        rec.record_step_start_time(i, T0 + 2 + 3 * i)
    rec.record_job_end_time(T0 + 2 + 15 + 4)
    g, _, last = calc.get_job_goodput()
    info = calc._goodput_cache.get_goodput_info()
    d = calc.get_job_goodput_details()  # the same job, ended: the same seconds
    assert info.total_productive_time == d["goodput_time"][goodput.GoodputType.TOTAL]
    assert info.total_elapsed_time == d["total_elapsed_time"] == 21.0
    assert info.total_unproductive_time == d["badput_time"]
    assert info.total_unproductive_time[BT.TPU_INITIALIZATION] == 2.0
    assert info.max_productive_step == last == 4
    assert g == pytest.approx(100 * info.total_productive_time / 21.0)


# ---------------------------------------------- elastic (Google's private-helper tests)
def test_elastic_buckets_in_seconds_through_the_details(tmp_path):
    """goodput_elastic_test's ``test_get_current_productive_and_unproductive_time_elastic``
    scenario: slice-down 10 s, scale-up 15 s, re-initialisation 20 s with the TPU init and
    training preparation inside it (counted as re-initialisation, not apart)."""
    rec, calc, _ = _pair(tmp_path, goodput_elastic.ElasticGoodputRecorder,
                         goodput_elastic.ElasticGoodputCalculator, now=T0 + 95)
    rec.record_job_start_time(T0)
    rec.record_elastic_wait_start_time("slice_down", T0 + 10)
    rec.record_elastic_wait_end_time("slice_down", T0 + 20)
    rec.record_elastic_wait_start_time("scale_up", T0 + 30)
    rec.record_elastic_wait_end_time("scale_up", T0 + 45)
    rec.record_elastic_reinit_start_time(T0 + 55)
    rec.record_tpu_init_start_time(T0 + 57)
    rec.record_tpu_init_end_time(T0 + 62)
    rec.record_training_preparation_start_time(T0 + 65)
    rec.record_training_preparation_end_time(T0 + 70)
    rec.record_elastic_reinit_end_time(T0 + 75)
    rec.record_step_start_time(0, T0 + 75)
    rec.record_step_start_time(1, T0 + 85)
    badput = calc.get_job_goodput_details()["badput_time"]
    assert badput[BT.ELASTIC_SLICE_DOWN] == 10.0
    assert badput[BT.ELASTIC_SCALE_UP] == 15.0
    assert badput[BT.ELASTIC_REINITIALIZATION] == 20.0
    assert badput.get(BT.TPU_INITIALIZATION, 0.0) == 0.0
    assert badput.get(BT.TRAINING_PREP, 0.0) == 0.0
    calc.get_job_goodput()
    cached = calc._goodput_cache.get_goodput_info().total_unproductive_time
    assert cached[BT.ELASTIC_REINITIALIZATION] == 20.0


def test_elastic_time_weighted_slice_efficiency_through_the_details(tmp_path):
    """goodput_elastic_test's ``test_compute_time_weighted_efficiency`` scenario: 2 of 4
    slices stepping for 9 h, 2 then (after 8 h) 4 of 4 available."""
    rec, calc, _ = _pair(tmp_path, goodput_elastic.ElasticGoodputRecorder,
                         goodput_elastic.ElasticGoodputCalculator, now=T0 + 9 * 3600)
    rec.record_job_start_time(T0)
    rec.record_elastic_slice_counts(2, 4, 2, T0)
    rec.record_elastic_slice_counts(2, 4, 4, T0 + 8 * 3600)
    details = calc.get_job_goodput_details()
    assert details["stepping_slice_efficiency"] == pytest.approx(0.5)
    assert details["available_slice_efficiency"] == pytest.approx(5 / 9)
    assert goodput_elastic.slice_efficiency(
        [(T0, 2, 2, 4), (T0 + 8 * 3600, 2, 4, 4)], T0, T0 + 9 * 3600) == pytest.approx(
        (0.5, 5 / 9))


# -------------------------------------------------------------- goodput_utils' helpers
def test_get_gcp_metadata_has_googles_signature():
    params = inspect.signature(goodput_utils.get_gcp_metadata).parameters
    assert [(p.name, p.default) for p in params.values()] == [
        ("category", inspect.Parameter.empty), ("attribute", inspect.Parameter.empty),
        ("timeout", 5), ("retries", 3)]


def test_metadata_helpers_call_get_gcp_metadata_on_googles_module_path(monkeypatch):
    calls = []

    def fake(category, attribute):
        calls.append((category, attribute))
        return {"attributes/cluster-name": "c", "zone": "projects/1/zones/z-1",
                "machine-type": "projects/1/machineTypes/ct6e-standard-4t",
                "project-id": "p"}[attribute]

    monkeypatch.setattr(goodput_utils, "get_gcp_metadata", fake)
    assert (goodput_utils.get_cluster_name(), goodput_utils.get_node_zone(),
            goodput_utils.get_accelerator_type(), goodput_utils.get_gcp_project_id()) == (
        "c", "z-1", "TPU-v6e", "p")
    assert calls[0] == ("instance", "attributes/cluster-name")


def test_get_gcp_metadata_asks_the_server_googles_way(monkeypatch):
    pytest.importorskip("requests")
    from tests.measure._gce_metadata_server import FakeMetadataServer

    with FakeMetadataServer() as md:
        monkeypatch.setenv("GCE_METADATA_HOST", md.host)
        assert goodput_utils.get_gcp_metadata("instance", "attributes/cluster-name") == \
            "fake-cluster"
        assert goodput_utils.get_gcp_metadata("instance", "missing", retries=0) is None
    assert md.requests[0] == ("/computeMetadata/v1/instance/attributes/cluster-name",
                              "Google")


def test_googles_result_shapes_and_baseline_helpers():
    info = goodput_utils.GoodputInfo(total_productive_time=1.0)
    assert info.total_unproductive_time == {} and info.number_of_disruptions == 0
    assert goodput_utils.StepInfo(1.0, {0: 0.1}).step_deviations == {0: 0.1}
    assert goodput_utils.compute_percentile([], 90) == 0.0
    assert goodput_utils.compute_percentile([1.0, 2.0, 3.0, 4.0, 5.0], 90) == pytest.approx(4.6)
    devs = {i: float(i % 7) for i in range(1200)}
    W = goodput_utils.MonitoringWindowType
    recent = [float(i % 7) for i in range(1100, 1200)]
    assert goodput_utils.compute_step_deviation_from_baseline(devs, W.INTERVAL) == \
        pytest.approx(goodput_utils.compute_percentile(recent, 90))
    assert goodput_utils.compute_step_deviation_from_baseline(devs) == pytest.approx(
        goodput_utils.compute_percentile(recent, 90) - 3.0)
    assert goodput_utils.compute_step_deviation_from_baseline({0: -1.0, 1: 3.0}) == 2.0
    assert goodput_utils.get_anomalous_and_normal_step_times([1.0, 1.0, 1.0, 9.0]) == (
        [9.0], [1.0, 1.0, 1.0])


#: every public class and function of ml-goodput-measurement 0.2.3's modules (read from the
#: installed reference: names defined in ``ml_goodput_measurement``), less the ones the
#: drop-in does not provide (its on-disk cache, its Orbax-log reader, its Cloud Monitoring
#: client wrapper; docs/migrating-from-ml-goodput-measurement.md says why)
GOOGLE_PUBLIC = {
    "goodput": ["BadputType", "GoodputCalculator", "GoodputInfo", "GoodputRecorder",
                "GoodputType", "IntervalMetricType", "IntervalWorkloadMetricDetails",
                "MetricType", "StepInfo", "WorkloadMetricDetails", "compute_ideal_step_time",
                "get_extra_time_from_anomalous_steps", "get_timestamp_from_log_entry"],
    "goodput_utils": ["BadputType", "ElasticIntervalWorkloadMetricDetails",
                      "ElasticWorkloadMetricDetails", "GCPOptions", "GoodputInfo",
                      "GoodputType", "IntervalMetricType", "IntervalWorkloadMetricDetails",
                      "MetricType", "MonitoringWindowType", "StepInfo", "WorkloadMetricDetails",
                      "compute_ideal_step_time", "compute_percentile",
                      "compute_step_deviation_from_baseline", "get_accelerator_type",
                      "get_anomalous_and_normal_step_times", "get_cluster_name",
                      "get_extra_time_from_anomalous_steps", "get_gcp_metadata",
                      "get_gcp_project_id", "get_node_zone", "get_timestamp_from_log_entry",
                      "MACHINE_TYPE_TO_ACCELERATOR_TYPE_MAPPING"],
    "goodput_elastic": ["ElasticGoodputCalculator", "ElasticGoodputRecorder",
                        "GoodputRecorder"],
    "monitoring": ["BadputType", "GCPOptions", "GoodputCalculator", "GoodputMonitor",
                   "IntervalMetricType", "IntervalWorkloadMetricDetails", "MetricType",
                   "MonitoringWindowType", "WorkloadMetricDetails"],
    "monitoring_elastic": ["ElasticGoodputMonitor", "GCPOptions"],
}
NOT_PROVIDED = {"goodput": ["CheckpointBadputCalculator", "CheckpointLoggerOptions",
                            "GoodputCache"],
                "monitoring": ["GCPMetrics", "ValueType"]}


@pytest.mark.parametrize("module", sorted(GOOGLE_PUBLIC))
def test_every_public_name_of_googles_module_is_there(module):
    import importlib

    mod = importlib.import_module(f"goodput_jax.{module}")
    assert [n for n in GOOGLE_PUBLIC[module] if not hasattr(mod, n)] == []
    assert [n for n in NOT_PROVIDED.get(module, []) if hasattr(mod, n)] == []
