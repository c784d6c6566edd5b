"""Goodput, badput and step deviation sent to Google Cloud Monitoring, within its write rules.

Which metrics go out, with which types and labels, is
:mod:`goodput_jax.measure.cloud_metrics` (:class:`~goodput_jax.measure.cloud_metrics.CloudMetrics`,
whose names are public here too); this module sends them: the client, the service's write
rules, the send and flush.

Empty ``GCPOptions`` fields (project, zone, accelerator type) are filled from the GCE
metadata server, as Google's library does (:func:`fill_gcp_options`, in
:mod:`goodput_jax.measure.gce_metadata`, re-exported here).

The client is the real ``google-cloud-monitoring`` ``MetricServiceClient``
(extra ``gcp``), injected (``client=``) or built by :func:`make_client` (default
credentials; ``$GOODPUT_JAX_MONITORING_ENDPOINT`` names another endpoint).
A failed send is logged and counted (:attr:`CloudMonitoringExporter.errors`);
it never stops the monitor.

The service's write rules are kept (:class:`CloudMonitoringExporter`): at most one
point per time series per :data:`SAMPLING_PERIOD_SECONDS` (5 s), end times increasing
per series; a point that would come too soon is held (the newest value wins) and sent
later, and :meth:`CloudMonitoringExporter.flush` waits for the period at stop.

Example:
    >>> from goodput_jax.goodput import GCPOptions
    >>> exp = CloudMonitoringExporter(GCPOptions(project_id="p", location="us-c1"), "job",
    ...                               client=object())
    >>> exp.resource_labels()
    {'location': 'us-c1', 'workload_id': 'job', 'replica_id': '0'}
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from goodput_jax.measure.cloud_metrics import (  # noqa: F401 - public here too (the old path)
    CUSTOM_PREFIX,
    HEARTBEAT_METRIC,
    PROCESS_RESOURCE_TYPE,
    RESOURCE_TYPE,
    TASK_RESOURCE_TYPE,
    CloudMetrics,
    series_key,
)
from goodput_jax.measure.gce_metadata import (  # noqa: F401 - public here too (the old path)
    DEFAULT_METADATA_HOST,
    METADATA_HOST_ENV,
    METADATA_ROOT_ENV,
    GCEMetadata,
    GCPTarget,
    MetadataUnavailable,
    accelerator_from_machine_type,
    fill_gcp_options,
    metadata_host,
    on_gce,
    query_gce_metadata,
    read_gce_metadata,
)

if TYPE_CHECKING:
    from goodput_jax.measure.calculator import StepDeviation
    from goodput_jax.measure.monitor_calculator import MonitoredCalculator

_log = logging.getLogger(__name__)

#: environment variable naming the Cloud Monitoring endpoint the exporter's client talks
#: to: ``host[:port]`` (TLS, default credentials) or ``insecure://host:port`` (plaintext,
#: no credentials: an emulator or a loopback test server). See ``docs/maxtext.md``.
MONITORING_ENDPOINT_ENV = "GOODPUT_JAX_MONITORING_ENDPOINT"
#: Cloud Monitoring's write rule: at most one point per time series per this many
#: seconds (points closer together are refused). The exporter keeps its points apart by
#: at least this much (see :class:`CloudMonitoringExporter`); not configurable.
SAMPLING_PERIOD_SECONDS = 5.0
_MAX_SERIES_PER_CALL = 200  # Cloud Monitoring's limit per CreateTimeSeries


def make_client(endpoint: str | None = None) -> Any:
    """A ``monitoring_v3.MetricServiceClient``, for ``endpoint`` or
    ``$GOODPUT_JAX_MONITORING_ENDPOINT`` (default: Google's endpoint).

    ``host[:port]`` talks TLS with the default credentials (a private or regional
    endpoint); ``insecure://host:port`` talks plaintext gRPC without credentials (an
    emulator, a loopback test server).

    Raises:
        ValueError: an ``insecure://`` endpoint without ``host:port``.
        ImportError: google-cloud-monitoring is not installed (extra ``gcp``).

    Example:
        >>> make_client("insecure://127.0.0.1:9").__class__.__name__  # doctest: +SKIP
        'MetricServiceClient'

    ``Any``: Google's or MaxText's objects (a ``google.cloud.logging`` logger, a MaxText config,
    an orbax manager) from libraries without type information, duck-typed as their code does.
    """
    try:
        from google.cloud import monitoring_v3
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ImportError("Cloud Monitoring needs google-cloud-monitoring: "
                          "pip install 'goodput-jax[gcp]'") from e
    endpoint = (os.environ.get(MONITORING_ENDPOINT_ENV, "") if endpoint is None
                else endpoint).strip()
    if not endpoint:
        return monitoring_v3.MetricServiceClient()
    if endpoint.startswith("insecure://"):
        target = endpoint[len("insecure://"):]
        if not target or ":" not in target:
            raise ValueError(f"{MONITORING_ENDPOINT_ENV} ({endpoint!r}) must be "
                             "insecure://host:port")
        import grpc
        from google.cloud.monitoring_v3.services.metric_service.transports import (
            MetricServiceGrpcTransport,
        )

        return monitoring_v3.MetricServiceClient(
            transport=MetricServiceGrpcTransport(channel=grpc.insecure_channel(target)))
    return monitoring_v3.MetricServiceClient(client_options={"api_endpoint": endpoint})


class CloudMonitoringExporter(CloudMetrics):
    """Sends a job's goodput metrics (:class:`~goodput_jax.measure.cloud_metrics.CloudMetrics`)
    to Cloud Monitoring, within the service's write rules.

    Cloud Monitoring refuses a point written less than 5 s
    (:data:`SAMPLING_PERIOD_SECONDS`) after the previous point of its series, and one
    whose end time is not after it. Every send goes through one lock and stamps its
    points with the clock (never earlier than an earlier send's stamp), and a point
    that comes within the period of its series' last point is **held**: the newest
    held value of a series replaces an older one (merge), and it goes out with the
    first send at least the period after that last point. :meth:`flush` (the
    monitor's stop) **waits** until the held points may go and sends them, so a
    job's final values are kept; what is still held when its timeout runs out is
    dropped and counted (:attr:`dropped`).

    Args:
        gcp_options: :class:`goodput_jax.goodput.GCPOptions` (``project_id`` required).
        job_name: the workload id.
        client: a ``monitoring_v3.MetricServiceClient`` (default: :func:`make_client`,
            which reads ``$GOODPUT_JAX_MONITORING_ENDPOINT``).
        clock: "now" as float UTC seconds (default ``time.time``); the points' end times.
        elastic: the job may be elastic: send the ``ELASTIC_*`` badput sources (as
            Google's elastic monitor).

    Raises:
        ValueError: no ``project_id``.
    """

    def __init__(self, gcp_options: GCPTarget, job_name: str, client: Any = None, *,
                 clock: Callable[[], float] | None = None, elastic: bool = False):
        """``Any``: Google's or MaxText's objects (a ``google.cloud.logging`` logger, a MaxText
        config, an orbax manager) from libraries without type information, duck-typed as their
        code does.
        """
        super().__init__(gcp_options, job_name, elastic=elastic)
        if clock is not None and not callable(clock):
            raise TypeError(f"clock ({clock!r}) must be a callable returning UTC seconds")
        self.client = make_client() if client is None else client
        self._clock = clock or time.time
        self._lock = threading.RLock()
        self._last_end: dict[tuple, float] = {}
        self._held: dict[tuple, dict] = {}
        self._latest = -math.inf
        self.sent = 0
        self.errors = 0
        #: points held back and then dropped (a flush that ran out of time)
        self.dropped = 0
        self.last_error: str | None = None

    @property
    def held(self) -> int:
        """Points waiting for their series' sampling period to pass."""
        with self._lock:
            return len(self._held)

    # ------------------------------------------------------------ sending
    def send(self, metrics: list[dict], now: float | None = None) -> int:
        """Send metric dicts as time series, one point each, within the write rules.

        The points' end time is ``now`` (default: the clock), never earlier than an
        earlier send's. A point within the sampling period of its series' last point
        is held (see the class docstring); held points whose period has passed go
        out with this call. Errors are logged and counted, not raised.

        Returns:
            How many points were sent now.
        """
        with self._lock:
            t = float(self._clock() if now is None else now)
            t = max(t, self._latest)
            self._latest = t
            for m in metrics:  # in order: a later value of a series replaces an earlier one
                self._held[series_key(m)] = m
            return self._send_due(t)

    def _send_due(self, t: float) -> int:
        due = [(k, m) for k, m in self._held.items()
               if t - self._last_end.get(k, -math.inf) >= SAMPLING_PERIOD_SECONDS]
        for k, _ in due:
            del self._held[k]
            self._last_end[k] = t
        return self._write([m for _, m in due], t) if due else 0

    def flush(self, timeout: float = 10.0) -> bool:
        """Send every held point, waiting (at most ``timeout`` s of real time) until
        each series' sampling period has passed; drop and count what is left then.

        Returns:
            True when nothing was left held.
        """
        deadline = time.monotonic() + max(0.0, float(timeout))
        while True:
            with self._lock:
                if not self._held:
                    return True
                t = max(float(self._clock()), self._latest)
                self._latest = t
                self._send_due(t)
                if not self._held:
                    return True
                wait = min(self._last_end[k] for k in self._held) \
                    + SAMPLING_PERIOD_SECONDS - t
                left = deadline - time.monotonic()
                if left <= 0:
                    n = len(self._held)
                    self._held.clear()
                    self.dropped += n
                    _log.warning("Cloud Monitoring: %d point(s) dropped: their series' %gs "
                                 "sampling period had not passed when the flush timed out",
                                 n, SAMPLING_PERIOD_SECONDS)
                    return False
            # real time passes; a test's clock may move on its own
            time.sleep(max(0.001, min(wait, left, 0.05)))

    def _write(self, metrics: list[dict], now: float) -> int:
        from google.cloud import monitoring_v3

        seconds = int(now)
        nanos = int((now - seconds) * 1e9)
        series = []
        for m in metrics:
            ts = monitoring_v3.TimeSeries()
            ts.metric.type = m["metric_type"]
            ts.metric.labels.update(m["metric_labels"])
            ts.resource.type = m.get("resource_type", RESOURCE_TYPE)
            ts.resource.labels.update(m["resource_labels"])
            v = m["value"]
            typed = (monitoring_v3.TypedValue(bool_value=v) if isinstance(v, bool)
                     else monitoring_v3.TypedValue(int64_value=v) if isinstance(v, int)
                     else monitoring_v3.TypedValue(double_value=v))
            ts.points.append(monitoring_v3.Point(
                interval=monitoring_v3.TimeInterval(end_time={"seconds": seconds,
                                                              "nanos": nanos}),
                value=typed))
            series.append(ts)
        n = 0
        for i in range(0, len(series), _MAX_SERIES_PER_CALL):
            chunk = series[i:i + _MAX_SERIES_PER_CALL]
            try:
                self.client.create_time_series(name=self.project_name, time_series=chunk)
                n += len(chunk)
            except Exception as e:  # noqa: BLE001 - logged and counted; the monitor goes on
                self.errors += 1
                self.last_error = f"{type(e).__name__}: {e}"
                _log.warning("Cloud Monitoring: sending %d series failed: %s", len(chunk),
                             self.last_error)
        self.sent += n
        return n

    def send_goodput(self, details: dict[str, Any], step_statistics: StepDeviation | None,
                     now: float | None = None, *, include_slice_efficiency: bool = False
                     ) -> int:
        """Send the :meth:`goodput_metrics` of one goodput upload now.

        Args:
            details: the measure room's ``GoodputCalculator.get_job_goodput_details()``
                (seconds; with the elastic keys for ``include_slice_efficiency``).
            step_statistics: the calculator's ``get_step_statistics()``.

        ``Any``: the details are the calculator's JSON-like dict (numbers and nested dicts).
        """
        return self.send(self.goodput_metrics(details, step_statistics,
                                              include_slice_efficiency=include_slice_efficiency),
                         now)

    def send_interval(self, details: dict, now: float | None = None, *,
                      include_slice_efficiency: bool = False) -> int:
        """Send one window's :meth:`interval_metrics`."""
        metrics = self.interval_metrics(details, include_slice_efficiency=include_slice_efficiency)
        return self.send(metrics, now) if metrics else 0

    def send_productivity(self, result: Any, now: float | None = None) -> int:
        """Send :meth:`productivity_metrics` of ``result`` (through :meth:`send`, so
        within the write rules).

        ``Any``: a calculator result (a ProductivityGoodput), read by its fields.
        """
        metrics = self.productivity_metrics(result)
        return self.send(metrics, now) if metrics else 0

    def send_step_deviation(self, calculator: MonitoredCalculator, now: float | None = None
                            ) -> int:
        """Send ``step_time_deviation`` (the step-deviation uploader).

        Google's step-deviation uploader sends the mean deviation as ``performance``,
        which its goodput uploader fills with the ideal step time; here
        ``performance`` keeps that one meaning and the deviation goes to its own
        series (the same one each goodput upload updates)."""
        metrics = self.step_deviation_metrics(calculator.get_step_statistics())
        return self.send(metrics, now) if metrics else 0
