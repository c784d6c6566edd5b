"""Cloud Monitoring defaults from the GCE metadata server, and the metrics MaxText's wrapper
sends with them: a real HTTP fake metadata server and the real google-cloud-monitoring client
against a loopback MetricService, both on 127.0.0.1."""

from __future__ import annotations

import logging
import time
import types

import pytest

pytest.importorskip("grpc")
pytest.importorskip("google.cloud.monitoring_v3")

from goodput_jax import goodput, goodput_elastic, goodput_utils, monitoring_elastic
from goodput_jax.measure import cloud_monitoring as cm
from goodput_jax.measure.stores.sqlite import SQLiteStore
from tests.measure._gce_metadata_server import FakeMetadataServer, closed_port
from tests.measure.test_cloud_monitoring import LoopbackMetricService

T0 = 1_700_000_000.0
W = "compute.googleapis.com/workload/"


@pytest.fixture
def metadata(monkeypatch):
    with FakeMetadataServer() as md:
        monkeypatch.setenv(cm.METADATA_HOST_ENV, md.host)
        yield md


def _record_job(store, job, now, *, steps=40, end=True):
    """A job on an injected clock: TPU init 0-5 s, a data load, ``steps`` 1 s steps."""
    rec = goodput.GoodputRecorder(job, f"goodput_{job}", True, store=store,
                                  clock=lambda: now[0])

    def at(t, method, *args):
        now[0] = T0 + t
        getattr(rec, method)(*args)

    at(0, "record_job_start_time")
    at(0, "record_tpu_init_start_time")
    at(5, "record_tpu_init_end_time")
    at(5, "record_data_loading_start_time")
    at(6, "record_data_loading_end_time")
    for i in range(steps):
        at(6 + i, "record_step_start_time", i)
    if end:
        at(6 + steps, "record_job_end_time")
    rec.close()


def test_metadata_lookup_sends_the_flavor_header_and_reads_project_zone_accelerator(metadata):
    md = cm.read_gce_metadata(cached=False)
    assert md.error is None and md.host == metadata.host
    assert (md.project_id, md.zone, md.accelerator_type, md.instance_id, md.cluster_name) == (
        "fake-proj", "us-central2-b", "TPU-v5e", "4242", "fake-cluster")
    assert metadata.requests and all(flavor == "Google" for _, flavor in metadata.requests)
    # Google's helper names (goodput_utils), on the same lookup
    assert goodput_utils.get_gcp_project_id() == "fake-proj"
    assert goodput_utils.get_node_zone() == "us-central2-b"
    assert goodput_utils.get_accelerator_type() == "TPU-v5e"
    assert goodput_utils.get_cluster_name() == "fake-cluster"
    # the fake is faithful: no header, no answer
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", metadata.port, timeout=5)
    conn.request("GET", "/computeMetadata/v1/project/project-id")
    assert conn.getresponse().status == 403
    conn.close()
    # fields already given are kept; only the empty ones are filled
    opts, _ = cm.fill_gcp_options(goodput.GCPOptions(location="europe-west4-a"), md)
    assert (opts.project_id, opts.location, opts.acc_type) == ("fake-proj", "europe-west4-a",
                                                               "TPU-v5e")


def _maxtext_0_2_5_monitor(config, **extra):
    """maxtext/common/goodput.py's maybe_monitor_goodput, line for line in what it passes
    (``monitoring`` being goodput_jax's), plus the test's store, clock and client."""
    from goodput_jax import monitoring

    gcp_options = monitoring.GCPOptions(
        enable_gcp_goodput_metrics=config.enable_gcp_goodput_metrics,
        enable_gcp_step_deviation_metrics=config.enable_gcp_step_deviation_metrics)
    common_kwargs = {
        "job_name": goodput.get_goodput_job_name(config),
        "logger_name": f"goodput_{goodput.get_goodput_job_name(config)}",
        "tensorboard_dir": config.tensorboard_dir,
        "upload_interval": config.goodput_upload_interval_seconds,
        "monitoring_enabled": True,
        "include_badput_breakdown": True,
        "include_step_deviation": config.monitor_step_time_deviation,
        "step_deviation_interval_seconds": config.step_deviation_interval_seconds,
        "gcp_options": gcp_options,
    }
    mon = monitoring.GoodputMonitor(pathway_enabled=config.enable_pathways_goodput,
                                    **common_kwargs, **extra)
    mon.start_goodput_uploader()
    mon.start_rolling_window_goodput_uploader(config.rolling_windows_seconds)
    mon.stop_rolling_window_goodput_uploader()
    mon.stop_goodput_uploader()
    return mon


@pytest.mark.parametrize("wrapper", ["goodput_jax_helper", "maxtext_module"])
def test_maxtext_wrapper_with_default_gcp_options_sends_metrics_with_metadata_defaults(
        tmp_path, metadata, wrapper):
    """Acceptance: MaxText's maybe_monitor_goodput passes GCPOptions with only the two
    enable flags; the project and zone come from the metadata server, and goodput, badput,
    rolling-window (interval) and step-time metrics reach Cloud Monitoring. Through
    goodput_jax's copy of the wrapper and through the calls MaxText's module makes."""
    store = SQLiteStore(str(tmp_path / "g.db"))
    now = [T0]
    _record_job(store, "mt", now)
    config = types.SimpleNamespace(
        run_name="run-7", goodput_job_name="mt", enable_goodput_recording=True,
        monitor_goodput=True, tensorboard_dir=str(tmp_path / "tb"),
        goodput_upload_interval_seconds=3600, monitor_step_time_deviation=True,
        step_deviation_interval_seconds=3600, enable_pathways_goodput=False,
        enable_gcp_goodput_metrics=True, enable_gcp_step_deviation_metrics=True,
        enable_rolling_window_goodput=True, rolling_windows_seconds=[30])
    # the clock stands still, so the final uploads' points (within 5 s of the first
    # ones) wait for a sampling period that never passes: a short stop timeout drops them
    # (their values are the first ones': the job has ended)
    with LoopbackMetricService() as srv:
        if wrapper == "maxtext_module":
            mon = _maxtext_0_2_5_monitor(config, store=store, clock=lambda: now[0],
                                         gcm_client=srv.client(), stop_timeout=0.2)
            mon.close()
        else:
            with goodput.maybe_monitor_goodput(config, process_index=0, store=store,
                                               clock=lambda: now[0], stop_timeout=0.2,
                                               gcm_client=srv.client()) as mon:
                pass
        assert not srv.refused and mon.cloud_monitoring.dropped > 0
        assert mon.job_name == "mt"  # goodput_job_name wins over run_name
        assert (mon.gcp_options.project_id, mon.gcp_options.location) == (
            "fake-proj", "us-central2-b")
        got = srv.series()
    assert {r.name for r in srv.requests} == {"projects/fake-proj"}
    types_sent = {k[0] for k in got}
    assert {W + "goodput_time", W + "badput_time", W + "interval_goodput",
            W + "interval_badput", W + "step_time_deviation", W + "performance",
            W + "total_elapsed_time", W + "max_productive_steps"} <= types_sent
    labels = {"accelerator_type": "TPU-v5e", "goodput_source": "TOTAL"}
    value, resource, _ = got[(W + "goodput_time", tuple(sorted(labels.items())))]
    assert resource == {"location": "us-central2-b", "workload_id": "mt", "replica_id": "0"}
    calc = goodput.GoodputCalculator("mt", None, store=store, clock=lambda: now[0])
    assert value == pytest.approx(calc.get_job_goodput_details()["productive_time"])
    win = calc.get_interval_metric_details(now[0] - 30, now[0])
    key = (W + "interval_goodput",
           tuple(sorted({**labels, "rolling_window_size": "30"}.items())))
    assert got[key][0] == pytest.approx(win["interval_goodput"][goodput.GoodputType.TOTAL])
    assert all(dict(k[1]).get("rolling_window_size") == "30"
               for k in got if k[0] in (W + "interval_goodput", W + "interval_badput"))
    assert not any(dict(k[1]).get("badput_source") == "DATA_LOADING_ASYNC" for k in got)
    store.close()


def test_gce_metadata_root_is_read_as_google_auth_reads_it(monkeypatch):
    """google-auth reads ``GCE_METADATA_HOST``, else its older name ``GCE_METADATA_ROOT``."""
    with FakeMetadataServer() as md:
        monkeypatch.delenv(cm.METADATA_HOST_ENV, raising=False)
        monkeypatch.setenv(cm.METADATA_ROOT_ENV, md.host)
        assert cm.metadata_host() == md.host
        assert cm.read_gce_metadata(cached=False).project_id == "fake-proj"
        monkeypatch.setenv(cm.METADATA_HOST_ENV, "127.0.0.1:9")  # the newer name wins
        assert cm.metadata_host() == "127.0.0.1:9"


def test_no_metadata_server_logs_and_disables_cloud_monitoring(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv(cm.METADATA_HOST_ENV, f"127.0.0.1:{closed_port()}")
    store = SQLiteStore(str(tmp_path / "g.db"))
    now = [T0]
    _record_job(store, "j", now)
    with caplog.at_level(logging.WARNING, logger="goodput_jax.goodput"):
        mon = goodput.GoodputMonitor("j", "goodput_j", str(tmp_path / "tb"), 3600, True,
                                     include_badput_breakdown=True, store=store,
                                     clock=lambda: now[0])
    assert mon.cloud_monitoring is None and mon.gcp_options.project_id is None
    assert "Cloud Monitoring disabled" in caplog.text and "project_id" in caplog.text
    assert "ConnectionRefusedError" in mon.gce_metadata.error
    assert mon.upload_goodput()["goodput/goodput"] > 0  # TensorBoard goes on
    mon.close()
    # a server that accepts and never answers: bounded by the per-request timeout
    with FakeMetadataServer(stall=True) as stalled:
        t = time.monotonic()
        md = cm.read_gce_metadata(host=stalled.host, timeout=0.2, deadline=2.0, cached=False)
        took = time.monotonic() - t
    assert md.project_id is None and md.error
    assert took < 30.0  # generous: the bound is 2 s; the point is that it returns
    # a web server that is not a metadata server (no Metadata-Flavor answer) is not believed
    with FakeMetadataServer(flavor=False) as impostor:
        md = cm.read_gce_metadata(host=impostor.host, cached=False)
    assert md.project_id is None and "without Metadata-Flavor: Google" in md.error
    # not on GCP and no GCE_METADATA_HOST / GCE_METADATA_ROOT: nothing is asked
    monkeypatch.delenv(cm.METADATA_HOST_ENV)
    monkeypatch.delenv(cm.METADATA_ROOT_ENV, raising=False)
    if not cm.on_gce():
        assert cm.metadata_host() is None
        assert "not on GCP" in cm.read_gce_metadata().error
    store.close()


def test_elastic_slice_efficiency_and_hang_metrics_reach_cloud_monitoring(tmp_path, metadata):
    store = SQLiteStore(str(tmp_path / "g.db"))
    now = [T0]
    rec = goodput_elastic.ElasticGoodputRecorder("el", "goodput_el", True, store=store,
                                                 clock=lambda: now[0])

    def at(t, method, *args):
        now[0] = T0 + t
        getattr(rec, method)(*args)

    at(0, "record_job_start_time")
    at(0, "record_elastic_slice_counts", 2, 2, 2)
    for i in range(20):
        at(1 + i, "record_step_start_time", i)
    at(21, "record_elastic_slice_counts", 1, 2, 1)
    for i in range(20, 40):
        at(2 + i, "record_step_start_time", i)
    rec.close()
    now[0] = T0 + 42
    with LoopbackMetricService() as srv:
        mon = monitoring_elastic.ElasticGoodputMonitor(
            "el", "goodput_el", str(tmp_path / "tb"), 3600, True, include_badput_breakdown=True,
            include_slice_efficiency=True, store=store, clock=lambda: now[0],
            gcm_client=srv.client(), hang_threshold_seconds=60)
        mon.upload_goodput()
        mon.upload_rolling_window_goodput([20])
        now[0] = T0 + 200  # no step for 159 s
        mon.upload_hang_status()
        mon.close()
        got = srv.series()
        reqs = list(srv.requests)
    cum = {"accelerator_type": "TPU-v5e", "window_type": "CUMULATIVE", "rolling_window_size": "0"}
    stepping = got[(W + "stepping_slice_efficiency", tuple(sorted(cum.items())))][0]
    assert stepping == pytest.approx((21 * 1.0 + 21 * 0.5) / 42, rel=1e-6)  # 2/2, then 1/2
    assert (W + "available_slice_efficiency", tuple(sorted(cum.items()))) in got
    itv = {"accelerator_type": "TPU-v5e", "window_type": "INTERVAL", "rolling_window_size": "20"}
    assert got[(W + "stepping_slice_efficiency", tuple(sorted(itv.items())))][0] == \
        pytest.approx(0.5)
    # hang: the heartbeat (MaxText's metric type) turns False, hung turns True
    beats = [(ts.points[0].value.bool_value, dict(ts.resource.labels), dict(ts.metric.labels))
             for r in reqs for ts in r.time_series if ts.metric.type == cm.HEARTBEAT_METRIC]
    assert [b[0] for b in beats] == [True, False]
    assert beats[0][1] == {"project_id": "fake-proj", "location": "us-central2-b",
                           "workload_id": "el", "replica_id": "0", "process_id": "0"}
    assert beats[0][2] == {"local_rank": "0", "instance_id": "4242"}
    hung = [ts.points[0].value.bool_value for r in reqs for ts in r.time_series
            if ts.metric.type == cm.CUSTOM_PREFIX + "hung"]
    assert hung == [False, True]
    secs = [ts.points[0].value.double_value for r in reqs for ts in r.time_series
            if ts.metric.type == cm.CUSTOM_PREFIX + "seconds_since_last_step"]
    assert secs == pytest.approx([1.0, 159.0])
    store.close()


@pytest.mark.parametrize("machine_type,acc", [
    ("projects/1/machineTypes/ct5lp-hightpu-4t", "TPU-v5e"),
    ("projects/1/machineTypes/ct6e-standard-4t", "TPU-v6e"),
    ("projects/1/machineTypes/ct5p-hightpu-4t", "TPU-v5p"),
    ("projects/1/machineTypes/tpu7x-standard-4t", "TPU-7x"),
    ("projects/1/machineTypes/a3-highgpu-8g", "NVIDIA-H100"),
    ("projects/1/machineTypes/a3-ultragpu-8g", "NVIDIA-H200"),
    ("projects/1/machineTypes/a2-highgpu-1g", "NVIDIA-A100"),
    ("projects/1/machineTypes/n2-standard-8", "UNKNOWN"),
    (None, "UNKNOWN"),
])
def test_accelerator_labels_from_machine_types(machine_type, acc):
    assert cm.accelerator_from_machine_type(machine_type) == acc
