"""Cloud Monitoring upload through the real google-cloud-monitoring client.

The client talks gRPC over an insecure channel to a loopback ``grpc.server`` of ours
(127.0.0.1 only) that registers ``google.monitoring.v3.MetricService`` with a
generic handler, keeps every ``CreateTimeSeriesRequest`` it receives and **enforces
the service's write rules** (``LoopbackMetricService``): one point per time series per
request, at most one point per series per 5 s sampling period, end times strictly
increasing per series. A request breaking them is answered as Cloud Monitoring
answers it: ``INVALID_ARGUMENT`` with "One or more TimeSeries could not be written:
...", the valid series of the request written, the refused ones listed.
"""

from __future__ import annotations

import threading
from concurrent import futures

import pytest

grpc = pytest.importorskip("grpc")
monitoring_v3 = pytest.importorskip("google.cloud.monitoring_v3")

from goodput_jax import goodput
from goodput_jax.measure.stores.sqlite import SQLiteStore
from tests.measure.test_monitor import NOW, clock, scenario

#: Cloud Monitoring's sampling period for these metrics (s): the service's rule, fixed
SAMPLING_PERIOD = 5.0
_TOO_OFTEN = ("One or more points were written more frequently than the maximum sampling "
              "period configured for the metric.")
_OUT_OF_ORDER = ("Points must be written in order. One or more of the points specified had "
                 "an older start time than the most recent point.")
_DUPLICATE = ("Field timeSeries had an invalid value: Duplicate TimeSeries encountered. "
              "Only one point can be written per TimeSeries per request.")


def series_id(ts) -> tuple:
    return (ts.metric.type, tuple(sorted(ts.metric.labels.items())), ts.resource.type,
            tuple(sorted(ts.resource.labels.items())))


def point_value(point):
    v = point.value
    for field in ("bool_value", "int64_value", "double_value", "string_value"):
        if field in v:
            return getattr(v, field)
    return None


class LoopbackMetricService:
    """A MetricService on 127.0.0.1 answering CreateTimeSeries under the service's write
    rules (faults injectable).

    ``points`` keeps every accepted point by series, ``refused`` every refused one as
    ``(series, end time, reason)``.
    """

    def __init__(self) -> None:
        self.requests: list = []
        self.fail_next = 0
        self.points: dict[tuple, list[tuple[float, object]]] = {}
        self.refused: list[tuple[tuple, float, str]] = []
        self.project: dict[tuple, str] = {}

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
        errors: dict[str, list[int]] = {}
        seen: set = set()
        for i, ts in enumerate(request.time_series):
            key = series_id(ts)
            if len(ts.points) != 1:
                errors.setdefault("Expected exactly one point per TimeSeries.", []).append(i)
                continue
            end = ts.points[0].interval.end_time
            t = end.timestamp() if hasattr(end, "timestamp") else float(end.seconds)
            reason = None
            if key in seen:
                reason = _DUPLICATE
            else:
                seen.add(key)
                prior = self.points.get(key)
                if prior:
                    last = prior[-1][0]
                    if t <= last:
                        reason = _OUT_OF_ORDER
                    elif t - last < SAMPLING_PERIOD:
                        reason = _TOO_OFTEN
            if reason is not None:
                errors.setdefault(reason, []).append(i)
                self.refused.append((key, t, reason))
                continue
            self.points.setdefault(key, []).append((t, point_value(ts.points[0])))
            self.project[key] = request.name
        if errors:
            detail = "; ".join(f"{reason}: timeSeries{idx}" for reason, idx in errors.items())
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"One or more TimeSeries could not be written: {detail}")

    def client(self):
        from google.cloud.monitoring_v3.services.metric_service.transports import (
            MetricServiceGrpcTransport,
        )

        channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        return monitoring_v3.MetricServiceClient(
            transport=MetricServiceGrpcTransport(channel=channel))

    def series(self) -> dict:
        """The latest accepted point of each series: ``(metric type, labels) ->
        (value, resource labels, project)``."""
        return {(k[0], k[1]): (pts[-1][1], dict(k[3]), self.project[k])
                for k, pts in self.points.items()}

    def last_values(self, metric_type: str) -> list:
        """The last accepted value of each series of ``metric_type``."""
        return [pts[-1][1] for k, pts in self.points.items() if k[0] == metric_type]


class SteppingClock:
    """A clock that moves ``step`` seconds on every reading (a test's stand-in for time
    passing: the monitor's uploads and the exporter's waits advance it, no sleeping)."""

    def __init__(self, start: float = NOW, step: float = 0.25) -> None:
        self.t = start
        self.step = step
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            self.t += self.step
            return self.t


def test_goodput_badput_and_step_deviation_reach_cloud_monitoring(tmp_path):
    store = SQLiteStore(str(tmp_path / "g.db"))
    store.append(scenario())
    opts = goodput.GCPOptions(project_id="proj", location="us-central1", acc_type="TPU-v5e",
                              cluster_name="c1")
    clk = SteppingClock(step=0.0)  # moved by hand below
    with LoopbackMetricService() as srv:
        mon = goodput.GoodputMonitor("job", "goodput_job", str(tmp_path / "tb"), 3600, True,
                                     include_badput_breakdown=True, include_step_deviation=True,
                                     gcp_options=opts, store=store, clock=clk,
                                     gcm_client=srv.client())
        mon.upload_goodput()
        clk.t += SAMPLING_PERIOD
        mon.upload_step_deviation()
        clk.t += SAMPLING_PERIOD
        srv.fail_next = 1
        mon.upload_goodput()  # a failed send is logged and counted, the monitor goes on
        clk.t += SAMPLING_PERIOD
        mon.close()
    assert mon._gcm.errors == 1 and not srv.refused and mon._gcm.dropped == 0
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
    ideal = goodput.GoodputCalculator("job", None, store=store, clock=clock
                                      ).get_step_statistics().ideal_step_time
    perf = [pts for k, pts in srv.points.items() if k[0] == w + "performance"]
    assert len(perf) == 1 and [v for _, v in perf[0]] == [pytest.approx(ideal)] * len(perf[0])
    assert all(r.name == "projects/proj" for r in srv.requests)
    store.close()


def test_project_id_is_required():
    from goodput_jax.measure.cloud_monitoring import CloudMonitoringExporter

    with pytest.raises(ValueError, match="project_id"):
        CloudMonitoringExporter(goodput.GCPOptions(), "job", client=object())
