"""Goodput, badput and step deviation as Google Cloud Monitoring time series.

What ml-goodput-measurement's monitor sends when ``GCPOptions`` ask for it, with
the same metric types and labels, on the ``compute.googleapis.com/Workload``
resource (``location``, ``workload_id`` = the job, ``replica_id``):

=========================================================  ===================================
``compute.googleapis.com/workload/goodput_time``           productive seconds (``goodput_source=TOTAL``)
``compute.googleapis.com/workload/badput_time``            seconds per ``badput_source`` (Google's
                                                           names; custom badput as
                                                           ``CUSTOM_BADPUT_EVENTS.<TYPE>``)
``compute.googleapis.com/workload/disruptions``            disruptions (int)
``compute.googleapis.com/workload/max_productive_steps``   last productive step (int)
``compute.googleapis.com/workload/total_elapsed_time``     job seconds
``compute.googleapis.com/workload/step_time_deviation``    mean absolute step deviation (s)
``compute.googleapis.com/workload/performance``            ideal step time (s); the step-deviation
                                                           uploader sends the mean deviation
=========================================================  ===================================

The client is the real ``google-cloud-monitoring`` ``MetricServiceClient``
(extra ``gcp``), injected (``client=``) or built from the default credentials.
A failed send is logged and counted (:attr:`CloudMonitoringExporter.errors`);
it never stops the monitor.

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
import time
from typing import Any

from goodput_jax.measure.badput import GOOGLE_NAMES

_log = logging.getLogger(__name__)

RESOURCE_TYPE = "compute.googleapis.com/Workload"
_PREFIX = "compute.googleapis.com/workload/"
#: not sent (as the reference: asynchronous loading is not an activity to report)
_EXCLUDED = {"DATA_LOADING_ASYNC"}
_MAX_SERIES_PER_CALL = 200  # Cloud Monitoring's limit per CreateTimeSeries


class CloudMonitoringExporter:
    """Sends a job's goodput metrics to Cloud Monitoring (see the module docstring).

    Args:
        gcp_options: :class:`goodput_jax.goodput.GCPOptions` (``project_id`` required).
        job_name: the workload id.
        client: a ``monitoring_v3.MetricServiceClient`` (default: built here).

    Raises:
        ValueError: no ``project_id``.
    """

    def __init__(self, gcp_options: Any, job_name: str, client: Any = None):
        project = getattr(gcp_options, "project_id", None)
        if not isinstance(project, str) or not project:
            raise ValueError(f"gcp_options.project_id ({project!r}) must be a non-empty string "
                             "to send metrics to Cloud Monitoring")
        self.options = gcp_options
        self.job_name = job_name
        self.project_name = f"projects/{project}"
        if client is None:
            try:
                from google.cloud import monitoring_v3
            except ImportError as e:  # pragma: no cover - depends on the install
                raise ImportError("Cloud Monitoring needs google-cloud-monitoring: "
                                  "pip install 'goodput-jax[gcp]'") from e
            client = monitoring_v3.MetricServiceClient()
        self.client = client
        self.sent = 0
        self.errors = 0
        self.last_error: str | None = None

    # ------------------------------------------------------------ metric dicts
    def resource_labels(self) -> dict[str, str]:
        """The ``compute.googleapis.com/Workload`` resource labels."""
        o = self.options
        return {"location": str(o.location or ""), "workload_id": self.job_name,
                "replica_id": str(o.replica_id)}

    def _labels(self, extra: dict) -> dict[str, str]:
        out = {k: str(v) for k, v in extra.items() if v is not None}
        acc = getattr(self.options, "acc_type", None)
        if acc:
            out["accelerator_type"] = str(acc)
        cluster = getattr(self.options, "cluster_name", None)
        if cluster:
            out["cluster_name"] = str(cluster)
        return out

    def goodput_metrics(self, details: dict, step_deviation: Any = None) -> list[dict]:
        """The metrics of one goodput upload, from a calculator's details (seconds).

        Args:
            details: ``GoodputCalculator.get_job_goodput_details()``.
            step_deviation: ``get_step_statistics()`` / ``StepDeviation`` (optional).
        """
        out = [self._m("goodput_time", float(details["productive_time"]),
                       {"goodput_source": "TOTAL"})]
        for bt, secs in details["badput_time"].items():
            name = GOOGLE_NAMES.get(bt.name, bt.name)
            if name in _EXCLUDED or bt.name == "CUSTOM_BADPUT_EVENTS":
                continue
            out.append(self._m("badput_time", float(secs), {"badput_source": name}))
        by_type: dict[str, float] = {}
        for label, secs in details.get("custom_badput_time", {}).items():
            key = str(label).upper()
            by_type[key] = by_type.get(key, 0.0) + float(secs)
        for key, secs in sorted(by_type.items()):
            out.append(self._m("badput_time", secs,
                               {"badput_source": f"CUSTOM_BADPUT_EVENTS.{key}"}))
        out.append(self._m("disruptions", int(details["num_disruptions"]),
                           {"window_type": "cumulative"}))
        out.append(self._m("max_productive_steps", int(details["last_productive_step"]), {}))
        out.append(self._m("total_elapsed_time", float(details["total_time"]),
                           {"window_type": "cumulative"}))
        if step_deviation is not None and getattr(step_deviation, "num_steps", 0):
            dev = step_deviation.deviations
            out.append(self._m("step_time_deviation", float(abs(dev).mean()), {}))
            ideal = float(step_deviation.ideal_step_time)
            if math.isfinite(ideal):
                out.append(self._m("performance", ideal, {}, with_labels=False))
        return out

    def _m(self, name: str, value: float, labels: dict, *,
           with_labels: bool = True) -> dict:
        return {"metric_type": _PREFIX + name, "value": value,
                "metric_labels": self._labels(labels) if with_labels else {},
                "resource_labels": self.resource_labels()}

    # ------------------------------------------------------------ sending
    def send(self, metrics: list[dict], now: float | None = None) -> int:
        """Send metric dicts as time series (one point each at ``now``); returns how many.

        Errors are logged and counted, not raised.
        """
        from google.cloud import monitoring_v3

        now = time.time() if now is None else float(now)
        seconds = int(now)
        nanos = int((now - seconds) * 1e9)
        series = []
        for m in metrics:
            ts = monitoring_v3.TimeSeries()
            ts.metric.type = m["metric_type"]
            ts.metric.labels.update(m["metric_labels"])
            ts.resource.type = RESOURCE_TYPE
            ts.resource.labels.update(m["resource_labels"])
            v = m["value"]
            typed = (monitoring_v3.TypedValue(int64_value=v) if isinstance(v, int)
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

    def send_goodput(self, calculator: Any, now: float | None = None) -> int:
        """Send the goodput metrics of ``calculator``'s job now."""
        from goodput_jax.measure.calculator import GoodputCalculator

        details = GoodputCalculator.get_job_goodput_details(calculator)
        stats = GoodputCalculator.get_step_deviation(calculator)
        return self.send(self.goodput_metrics(details, stats), now)

    def send_step_deviation(self, calculator: Any, now: float | None = None) -> int:
        """Send the mean step deviation as ``performance`` (the step-deviation uploader)."""
        from goodput_jax.measure.calculator import GoodputCalculator

        stats = GoodputCalculator.get_step_deviation(calculator)
        if not stats.num_steps:
            return 0
        mean = float(stats.deviations.mean())
        if not math.isfinite(mean):
            return 0
        return self.send([self._m("performance", mean, {}, with_labels=False)], now)
