"""Cloud Monitoring upload through the real google-cloud-monitoring client.

The client talks gRPC over an insecure channel to a loopback ``grpc.server`` of ours
(127.0.0.1 only) that registers ``google.monitoring.v3.MetricService`` with a
generic handler and keeps every ``CreateTimeSeriesRequest`` it receives.
"""

from __future__ import annotations

from concurrent import futures

import pytest

grpc = pytest.importorskip("grpc")
monitoring_v3 = pytest.importorskip("google.cloud.monitoring_v3")

from goodput_jax import goodput
from goodput_jax.measure.stores.sqlite import SQLiteStore
from tests.measure.test_monitor import clock, scenario


class LoopbackMetricService:
    """A MetricService on 127.0.0.1 answering CreateTimeSeries (faults injectable)."""

    def __init__(self) -> None:
        self.requests: list = []
        self.fail_next = 0

    def __enter__(self):
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        handler = grpc.method_handlers_generic_handler("google.monitoring.v3.MetricService", {
            "CreateTimeSeries": grpc.unary_unary_rpc_method_handler(
                self._create,
                request_deserializer=monitoring_v3.CreateTimeSeriesRequest.deserialize,
                response_serializer=lambda _: b""),  # google.protobuf.Empty
        })
        self.server.add_generic_rpc_handlers((handler,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        return self

    def __exit__(self, *exc):
        self.server.stop(0)

    def _create(self, request, context):
        if self.fail_next:
            self.fail_next -= 1
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "injected")
        self.requests.append(request)

    def client(self):
        from google.cloud.monitoring_v3.services.metric_service.transports import (
            MetricServiceGrpcTransport,
        )

        channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        return monitoring_v3.MetricServiceClient(
            transport=MetricServiceGrpcTransport(channel=channel))

    def series(self) -> dict:
        out = {}
        for req in self.requests:
            for ts in req.time_series:
                key = (ts.metric.type, tuple(sorted(ts.metric.labels.items())))
                v = ts.points[0].value
                out[key] = (v.double_value if "double_value" in v else v.int64_value,
                            dict(ts.resource.labels), req.name)
        return out


def test_goodput_badput_and_step_deviation_reach_cloud_monitoring(tmp_path):
    store = SQLiteStore(str(tmp_path / "g.db"))
    store.append(scenario())
    opts = goodput.GCPOptions(project_id="proj", location="us-central1", acc_type="TPU-v5e",
                              cluster_name="c1")
    with LoopbackMetricService() as srv:
        mon = goodput.GoodputMonitor("job", "goodput_job", str(tmp_path / "tb"), 3600, True,
                                     include_badput_breakdown=True, include_step_deviation=True,
                                     gcp_options=opts, store=store, clock=clock,
                                     gcm_client=srv.client())
        mon.upload_goodput()
        mon.upload_step_deviation()
        srv.fail_next = 1
        mon.upload_goodput()  # a failed send is logged and counted, the monitor goes on
        mon.close()
    assert mon._gcm.errors == 1
    got = srv.series()
    details = goodput.GoodputCalculator("job", None, store=store, clock=clock
                                        ).get_job_goodput_details()
    base = {"accelerator_type": "TPU-v5e", "cluster_name": "c1"}
    res = {"location": "us-central1", "workload_id": "job", "replica_id": "0"}
    w = "compute.googleapis.com/workload/"
    value, resource, name = got[(w + "goodput_time",
                                 tuple(sorted({**base, "goodput_source": "TOTAL"}.items())))]
    assert value == pytest.approx(details["productive_time"]) and resource == res
    assert name == "projects/proj"
    tpu = got[(w + "badput_time",
               tuple(sorted({**base, "badput_source": "TPU_INITIALIZATION"}.items())))][0]
    assert tpu == pytest.approx(details["badput_time"][goodput.BadputType.TPU_INITIALIZATION])
    custom = got[(w + "badput_time",
                  tuple(sorted({**base, "badput_source": "CUSTOM_BADPUT_EVENTS.EVAL/PPL"}.items())))]
    assert custom[0] == pytest.approx(3.5)
    assert not any(dict(k[1]).get("badput_source") == "DATA_LOADING_ASYNC" for k in got)
    assert got[(w + "max_productive_steps", tuple(sorted(base.items())))][0] == 29
    assert got[(w + "total_elapsed_time", tuple(sorted({**base, "window_type": "cumulative"}
                                                       .items())))][0] == pytest.approx(71.0)
    assert (w + "performance", ()) in got  # ideal step time, then the mean step deviation
    assert all(r.name == "projects/proj" for r in srv.requests)
    store.close()


def test_project_id_is_required():
    from goodput_jax.measure.cloud_monitoring import CloudMonitoringExporter

    with pytest.raises(ValueError, match="project_id"):
        CloudMonitoringExporter(goodput.GCPOptions(), "job", client=object())
