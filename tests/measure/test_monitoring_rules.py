"""Monitors that obey Cloud Monitoring's write rules, against the rule-enforcing loopback
MetricService of ``test_cloud_monitoring`` (the real google-cloud-monitoring client).

The service refuses a point written less than 5 s after the previous point of its time
series, and one whose end time is not after it; the loopback server refuses them with
the same status and message. Clocks are injected (``SteppingClock``: every reading moves
it on), so nothing here sleeps for the sampling period.
"""

from __future__ import annotations

import time

import pytest

pytest.importorskip("grpc")
pytest.importorskip("google.cloud.monitoring_v3")

from google.api_core import exceptions as gexc

from goodput_jax import goodput, monitoring
from goodput_jax.measure import cloud_monitoring as cm
from goodput_jax.measure.badput import BadputType as B
from goodput_jax.measure.calculator import GoodputCalculator
from goodput_jax.measure.stores.sqlite import SQLiteStore
from tests.measure.test_cloud_monitoring import (
    SAMPLING_PERIOD,
    LoopbackMetricService,
    SteppingClock,
)
from tests.measure.test_monitor import T0, scenario

W = "compute.googleapis.com/workload/"
HANG_TYPES = {cm.HEARTBEAT_METRIC, cm.CUSTOM_PREFIX + "hung",
              cm.CUSTOM_PREFIX + "seconds_since_last_step"}
#: the badput sources Google's monitor sends for a job that was never elastic and never
#: disrupted (its _upload_goodput_metrics_to_gcm over GoodputCalculator's unproductive
#: time: the buckets it always fills, custom badput per type, no DATA_LOADING_ASYNC)
GOOGLE_SOURCES = {"TPU_INITIALIZATION", "TRAINING_PREP", "DATA_LOADING_SYNC",
                  "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME", "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME",
                  "PROGRAM_STARTUP", "WASTED_PROGRESS_FROM_DISRUPTION", "OTHER"}
OPTS = goodput.GCPOptions(project_id="proj", location="us-central1", acc_type="TPU-v5e")


def _ts(metric_type, value, t):
    from google.cloud import monitoring_v3

    ts = monitoring_v3.TimeSeries()
    ts.metric.type = metric_type
    ts.resource.type = cm.RESOURCE_TYPE
    ts.resource.labels.update({"location": "l", "workload_id": "j", "replica_id": "0"})
    ts.points.append(monitoring_v3.Point(
        interval=monitoring_v3.TimeInterval(end_time={"seconds": int(t)}),
        value=monitoring_v3.TypedValue(double_value=value)))
    return ts


def test_the_loopback_service_refuses_what_cloud_monitoring_refuses():
    with LoopbackMetricService() as srv:
        client = srv.client()
        client.create_time_series(name="projects/p", time_series=[_ts(W + "performance", 1, T0)])
        with pytest.raises(gexc.InvalidArgument, match="more frequently than the maximum "
                                                       "sampling period"):
            client.create_time_series(name="projects/p",
                                      time_series=[_ts(W + "performance", 2, T0 + 1)])
        with pytest.raises(gexc.InvalidArgument, match="Points must be written in order"):
            client.create_time_series(name="projects/p",
                                      time_series=[_ts(W + "performance", 2, T0 - 10)])
        with pytest.raises(gexc.InvalidArgument, match="Duplicate TimeSeries"):
            client.create_time_series(name="projects/p", time_series=[
                _ts(W + "disruptions", 1, T0), _ts(W + "disruptions", 2, T0)])
        client.create_time_series(name="projects/p",
                                  time_series=[_ts(W + "performance", 3, T0 + SAMPLING_PERIOD)])
    assert [v for _, v in srv.points[next(k for k in srv.points if k[0] == W + "performance")]
            ] == [1, 3]
    assert len(srv.refused) == 3


def test_a_point_within_the_period_is_held_merged_and_sent_by_the_flush():
    """Three values of one series 1 s apart: the first goes out, the third replaces the
    second, and the flush waits (on the injected clock) until 5 s after the first."""
    clk = SteppingClock(step=0.5)
    with LoopbackMetricService() as srv:
        exp = cm.CloudMonitoringExporter(OPTS, "job", client=srv.client(), clock=clk)
        for v in (1.0, 2.0, 3.0):
            exp.send([exp._m("total_elapsed_time", v, {"window_type": "cumulative"})])
            clk.t += 1.0
        assert exp.held == 1
        assert exp.flush(timeout=5.0)
    [(key, pts)] = srv.points.items()
    assert [v for _, v in pts] == [1.0, 3.0]
    assert pts[1][0] - pts[0][0] >= SAMPLING_PERIOD
    assert not srv.refused and exp.errors == 0 and exp.dropped == 0 and exp.held == 0


def test_a_flush_that_runs_out_of_time_drops_and_counts(caplog):
    clk = SteppingClock(step=0.0)  # time stands still: the period never passes
    with LoopbackMetricService() as srv:
        exp = cm.CloudMonitoringExporter(OPTS, "job", client=srv.client(), clock=clk)
        m = exp._m("total_elapsed_time", 1.0, {})
        exp.send([m])
        exp.send([m])
        assert not exp.flush(timeout=0.05)
    assert exp.dropped == 1 and exp.held == 0 and not srv.refused
    assert "dropped" in caplog.text


def _sources(metrics):
    return {m["metric_labels"]["badput_source"] for m in metrics
            if m["metric_type"] == W + "badput_time"}


def test_badput_sources_are_googles_for_a_job_that_was_never_elastic(tmp_path):
    store = SQLiteStore(str(tmp_path / "g.db"))
    store.append(scenario())  # accelerator init, data loading, steps, one custom badput
    calc = goodput.GoodputCalculator("job", None, store=store, clock=lambda: T0 + 120)
    details = GoodputCalculator.get_job_goodput_details(calc)  # what send_goodput sends
    exp = cm.CloudMonitoringExporter(OPTS, "job", client=object())
    assert _sources(exp.goodput_metrics(details)) == GOOGLE_SOURCES | {
        "CUSTOM_BADPUT_EVENTS.EVAL/PPL"}
    # an elastic monitor adds Google's elastic calculator's three
    elastic = cm.CloudMonitoringExporter(OPTS, "job", client=object(), elastic=True)
    assert _sources(elastic.goodput_metrics(details)) - _sources(exp.goodput_metrics(details)) \
        == {"ELASTIC_SLICE_DOWN", "ELASTIC_SCALE_UP", "ELASTIC_REINITIALIZATION"}
    # infrastructure recovery (after a disruption) and recompilation once they hold time
    busy = dict(details, badput_time={**details["badput_time"],
                                      B.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION: 4.0,
                                      B.RECOMPILATION: 1.5})
    assert _sources(exp.goodput_metrics(busy)) - _sources(exp.goodput_metrics(details)) == {
        "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION", "RECOMPILATION"}
    store.close()


def _monitor(tmp_path, store, srv, clk, **kw):
    kw.setdefault("include_step_deviation", True)
    return monitoring.GoodputMonitor(
        "job", "goodput_job", str(tmp_path / "tb"), kw.pop("upload_interval", 3600), True,
        include_badput_breakdown=True, gcp_options=OPTS, store=store, clock=clk,
        gcm_client=srv.client(), stop_timeout=5.0, **kw)


@pytest.mark.parametrize("threshold", [None, 60.0])
def test_hang_metrics_only_with_a_hang_threshold(tmp_path, threshold):
    store = SQLiteStore(str(tmp_path / "g.db"))
    store.append(scenario())
    with LoopbackMetricService() as srv:
        mon = _monitor(tmp_path, store, srv, SteppingClock(), hang_threshold_seconds=threshold)
        mon.upload_goodput()
        mon.close()
    sent = {k[0] for k in srv.points}
    assert (sent & HANG_TYPES) == (set() if threshold is None else HANG_TYPES)
    assert W + "goodput_time" in sent and not srv.refused
    store.close()


def test_performance_carries_only_the_ideal_step_time(tmp_path):
    """Google's step-deviation uploader writes the mean deviation into ``performance``,
    which its goodput uploader fills with the ideal step time: here the deviation goes
    to ``step_time_deviation`` and ``performance`` keeps one meaning."""
    store = SQLiteStore(str(tmp_path / "g.db"))
    store.append(scenario())
    clk = SteppingClock(step=0.0)
    with LoopbackMetricService() as srv:
        mon = _monitor(tmp_path, store, srv, clk)
        for upload in (mon.upload_goodput, mon.upload_step_deviation, mon.upload_goodput,
                       mon.upload_step_deviation):
            upload()
            clk.t += SAMPLING_PERIOD
        mon.close()
    stats = goodput.GoodputCalculator("job", None, store=store, clock=clk).get_step_statistics()
    perf = [v for k, pts in srv.points.items() if k[0] == W + "performance" for _, v in pts]
    dev = [v for k, pts in srv.points.items() if k[0] == W + "step_time_deviation"
           for _, v in pts]
    assert perf == [pytest.approx(stats.ideal_step_time)] * 2
    assert dev == [pytest.approx(float(abs(stats.deviations).mean()))] * 4
    assert not srv.refused
    store.close()


@pytest.mark.parametrize("run", range(3))
def test_a_monitor_with_a_hang_threshold_sends_nothing_refused_and_ends_not_hung(
        tmp_path, run):
    """Acceptance: the uploader threads run (every 10 ms, real time) while the job steps,
    hangs past the threshold, steps again and ends; no point is refused, none dropped,
    and the last point of the finished job says it is not hung."""
    store = SQLiteStore(str(tmp_path / "g.db"))
    clk = SteppingClock(start=T0, step=0.25)
    rec = goodput.GoodputRecorder("job", "goodput_job", True, store=store, clock=clk,
                                  synchronous=True)
    with LoopbackMetricService() as srv:
        mon = monitoring.GoodputMonitor(
            "job", "goodput_job", str(tmp_path / "tb"), 0.01, True,
            include_badput_breakdown=True, monitor_step_time_deviation=True,
            step_deviation_interval_seconds=0.01, rolling_windows_seconds=[60],
            gcp_options=OPTS, store=store, clock=clk, gcm_client=srv.client(),
            hang_threshold_seconds=20.0, stop_timeout=10.0, send_productivity_metrics=True)
        rec.record_job_start_time()
        mon.start()
        for step in range(20):
            rec.record_step_start_time(step)
            time.sleep(0.002)
        deadline = time.monotonic() + 20
        while not mon.hung and time.monotonic() < deadline:
            time.sleep(0.01)  # no step: the clock moves with the uploaders' readings
        assert mon.hung

        def reported():
            return any(v is True for k, pts in list(srv.points.items())
                       if k[0] == cm.CUSTOM_PREFIX + "hung" for _, v in pts)

        while not reported() and time.monotonic() < deadline:
            time.sleep(0.01)  # held until 5 s (on the clock) after the last point
        for step in range(20, 30):
            rec.record_step_start_time(step)
        rec.record_job_end_time()
        rec.close()
        mon.stop()
        mon.close()
        exp = mon.cloud_monitoring
    assert srv.refused == [], srv.refused[:3]
    assert exp.errors == 0 and exp.dropped == 0 and exp.held == 0
    hung = [pts for k, pts in srv.points.items() if k[0] == cm.CUSTOM_PREFIX + "hung"]
    beat = [pts for k, pts in srv.points.items() if k[0] == cm.HEARTBEAT_METRIC]
    assert len(hung) == 1 and len(beat) == 1
    assert True in [v for _, v in hung[0]]  # the hang was reported
    assert hung[0][-1][1] is False and beat[0][-1][1] is True  # the finished job is not hung
    # the final upload was kept: the last total time is the finished job's
    total = GoodputCalculator("job", None, store=store, clock=clk).get_job_goodput_details()[
        "total_time"]
    [elapsed] = [pts for k, pts in srv.points.items() if k[0] == W + "total_elapsed_time"]
    assert elapsed[-1][1] == pytest.approx(total)
    # ML Productivity Goodput's series too (no program cost here: no program/MFU/product),
    # the last point the finished job's
    prod = GoodputCalculator("job", None, store=store, clock=clk).get_productivity_goodput()
    for name in ("scheduling_goodput", "runtime_goodput", "ettr"):
        [pts] = [p for k, p in srv.points.items() if k[0] == cm.CUSTOM_PREFIX + name]
        assert pts[-1][1] == pytest.approx(100 * getattr(prod, name))
    assert not [k for k in srv.points if k[0] == cm.CUSTOM_PREFIX + "program_goodput"]
    store.close()


def test_the_endpoint_comes_from_the_environment(tmp_path, monkeypatch):
    store = SQLiteStore(str(tmp_path / "g.db"))
    store.append(scenario())
    with LoopbackMetricService() as srv:
        monkeypatch.setenv(cm.MONITORING_ENDPOINT_ENV, f"insecure://127.0.0.1:{srv.port}")
        mon = monitoring.GoodputMonitor("job", "goodput_job", str(tmp_path / "tb"), 3600, True,
                                        gcp_options=OPTS, store=store,
                                        clock=SteppingClock())  # no client given
        mon.upload_goodput()
        mon.close()
    assert W + "goodput_time" in {k[0] for k in srv.points}
    store.close()
    with pytest.raises(ValueError, match=r"GOODPUT_JAX_MONITORING_ENDPOINT \('insecure://x'\)"):
        cm.make_client("insecure://x")


def test_maxtexts_order_the_monitor_stops_before_the_job_end_and_ends_not_hung(tmp_path):
    """MaxText's ``run`` leaves ``maybe_monitor_goodput`` before ``maybe_record_goodput(JOB)``
    records the job end: the final upload at stop sees no job end, here after a stall
    past the threshold (a long final save, say). The process is finishing, not hung: the
    last points say so."""
    store = SQLiteStore(str(tmp_path / "g.db"))
    clk = SteppingClock(start=T0, step=0.25)
    rec = goodput.GoodputRecorder("job", "goodput_job", True, store=store, clock=clk,
                                  synchronous=True)
    with LoopbackMetricService() as srv:
        mon = monitoring.GoodputMonitor(
            "job", "goodput_job", str(tmp_path / "tb"), 0.01, True,
            gcp_options=OPTS, store=store, clock=clk, gcm_client=srv.client(),
            hang_threshold_seconds=20.0, stop_timeout=10.0)
        rec.record_job_start_time()
        mon.start()
        for step in range(5):
            rec.record_step_start_time(step)
        deadline = time.monotonic() + 20

        def hung_points():
            return [v for k, pts in list(srv.points.items())
                    if k[0] == cm.CUSTOM_PREFIX + "hung" for _, v in pts]

        while True not in hung_points() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert mon.hung and True in hung_points()
        mon.stop()  # leaving maybe_monitor_goodput ...
        rec.record_job_end_time()  # ... then maybe_record_goodput(JOB) records the end
        rec.close()
        mon.close()
    assert not srv.refused and mon.cloud_monitoring.dropped == 0
    assert hung_points()[-1] is False and not mon.hung
    [beat] = [pts for k, pts in srv.points.items() if k[0] == cm.HEARTBEAT_METRIC]
    assert beat[-1][1] is True
    store.close()
