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

With the rolling-window uploader (``rolling_window_size`` = the window in seconds):

=========================================================  ===================================
``compute.googleapis.com/workload/interval_goodput``       goodput of the window (%,
                                                           ``goodput_source=TOTAL``)
``compute.googleapis.com/workload/interval_badput``        badput of the window (%) per
                                                           ``badput_source``
=========================================================  ===================================

Elastic jobs with ``include_slice_efficiency``:
``compute.googleapis.com/workload/stepping_slice_efficiency`` and
``.../available_slice_efficiency`` (``window_type=CUMULATIVE``, ``rolling_window_size=0``
from the goodput upload; ``window_type=INTERVAL`` from the rolling window). All as
ml-goodput-measurement names and labels them.

Hang detection (goodput_jax's own, see ``docs/maxtext.md``):

=========================================================  ===================================
``compute.googleapis.com/workload_process/heartbeat``      True while the job steps, False once
                                                           it is hung (MaxText's metric type,
                                                           ``WorkloadProcess`` resource)
``custom.googleapis.com/goodput_jax/seconds_since_last_step``  seconds since the job's last step
                                                           (``generic_task`` resource)
``custom.googleapis.com/goodput_jax/hung``                 True when past the hang threshold
=========================================================  ===================================

Stragglers (goodput_jax's own; only when several hosts record the job; ``generic_task``
resource; ``rolling_window_size`` = the monitor's straggler window in seconds, ``0`` for the
whole job):

=================================================================  ===========================
``custom.googleapis.com/goodput_jax/straggler_lost_time``          seconds the other hosts
                                                                   waited for ``host`` (one
                                                                   series per slowest host)
``custom.googleapis.com/goodput_jax/straggler_share``              ``host``'s share of the
                                                                   straggler time (%)
``custom.googleapis.com/goodput_jax/straggler_total_lost_time``    all hosts' lost time (s)
=================================================================  ===========================

Empty ``GCPOptions`` fields (project, zone, accelerator type) are filled from the
GCE metadata server, as Google's library does (:func:`fill_gcp_options`): the
host is ``$GCE_METADATA_HOST`` (as Google's client libraries read it) or, on a
machine whose DMI product name says Google, ``metadata.google.internal``; each
request has a short timeout and the whole lookup a deadline.

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

import dataclasses
import http.client
import logging
import math
import os
import threading
import time
from typing import Any

from goodput_jax.measure.badput import GOOGLE_NAMES

_log = logging.getLogger(__name__)

RESOURCE_TYPE = "compute.googleapis.com/Workload"
PROCESS_RESOURCE_TYPE = "compute.googleapis.com/WorkloadProcess"
TASK_RESOURCE_TYPE = "generic_task"
_PREFIX = "compute.googleapis.com/workload/"
HEARTBEAT_METRIC = "compute.googleapis.com/workload_process/heartbeat"
CUSTOM_PREFIX = "custom.googleapis.com/goodput_jax/"

# ---------------------------------------------------------------- GCE metadata
#: environment variable naming the metadata server ``host[:port]`` (Google's clients'
#: name for it; a test points it at a loopback server).
METADATA_HOST_ENV = "GCE_METADATA_HOST"
DEFAULT_METADATA_HOST = "metadata.google.internal"
_DMI_PRODUCT = "/sys/class/dmi/id/product_name"
#: machine-type prefixes (longest first) -> the accelerator label Google's library sends
_ACCELERATORS: tuple[tuple[str, str], ...] = (
    ("a3-ultragpu", "NVIDIA-H200"), ("a3-megagpu", "NVIDIA-H100"),
    ("a3-highgpu", "NVIDIA-H100"), ("a3-edgegpu", "NVIDIA-H100"),
    ("tpu-v2", "TPU-v2"), ("tpu7x", "TPU-7x"), ("ct5lp", "TPU-v5e"), ("ct6e", "TPU-v6e"),
    ("ct5p", "TPU-v5p"), ("ct5l", "TPU-v5e"), ("ct4p", "TPU-v4p"), ("ct3p", "TPU-v3"),
    ("ct3", "TPU-v3"), ("a2", "NVIDIA-A100"), ("tpu", "TPU"), ("gpu", "GPU"),
)


def on_gce(product_file: str = _DMI_PRODUCT) -> bool:
    """Whether this machine says it is a Google VM (GCE, TPU VM, GKE node).

    Reads the DMI product name, as Google's auth library does; no network.

    Example:
        >>> on_gce("/nonexistent")
        False
    """
    try:
        with open(product_file, encoding="utf-8") as f:
            return f.read().strip().startswith("Google")
    except OSError:
        return False


def metadata_host() -> str | None:
    """The metadata server to ask: ``$GCE_METADATA_HOST``, else
    ``metadata.google.internal`` on a Google VM, else None (not on GCP: no request).

    Example:
        >>> os.environ["GCE_METADATA_HOST"] = "127.0.0.1:8080"  # doctest: +SKIP
        >>> metadata_host()                                      # doctest: +SKIP
        '127.0.0.1:8080'
    """
    host = os.environ.get(METADATA_HOST_ENV, "").strip()
    if host:
        return host
    return DEFAULT_METADATA_HOST if on_gce() else None


class MetadataUnavailable(RuntimeError):
    """The metadata server could not be reached or did not answer as one."""


def get_gcp_metadata(category: str, attribute: str, *, host: str | None = None,
                     timeout: float = 1.0) -> str | None:
    """One value from the GCE metadata server (``/computeMetadata/v1/<category>/<attribute>``).

    Sends ``Metadata-Flavor: Google`` and accepts only an answer carrying it back.

    Returns:
        The value, or None when the server has no such entry (404).

    Raises:
        MetadataUnavailable: no server (no host, refused, timed out, or not a
            metadata server).

    Example:
        >>> get_gcp_metadata("project", "project-id", host="127.0.0.1:9")  # doctest: +SKIP
        Traceback (most recent call last):
        MetadataUnavailable: ...
    """
    host = metadata_host() if host is None else host
    if not host:
        raise MetadataUnavailable(f"no metadata server (${METADATA_HOST_ENV} is not set and "
                                  "this is not a Google VM)")
    name, _, port = host.rpartition(":") if host.count(":") == 1 else (host, "", "")
    conn = http.client.HTTPConnection(name or host, int(port) if port else 80, timeout=timeout)
    path = f"/computeMetadata/v1/{category}/{attribute}"
    try:
        conn.request("GET", path, headers={"Metadata-Flavor": "Google"})
        resp = conn.getresponse()
        body = resp.read().decode("utf-8", "replace")
    except (OSError, http.client.HTTPException) as e:
        raise MetadataUnavailable(f"metadata server {host}: {type(e).__name__}: {e}") from None
    finally:
        conn.close()
    if resp.getheader("Metadata-Flavor") != "Google":
        raise MetadataUnavailable(f"{host} answered {path} without Metadata-Flavor: Google")
    if resp.status == 404:
        return None
    if resp.status != 200:
        raise MetadataUnavailable(f"metadata server {host}: HTTP {resp.status} for {path}")
    return body.strip()


def accelerator_from_machine_type(machine_type: str | None) -> str:
    """Google's accelerator label for a machine type (``"UNKNOWN"`` when none matches).

    Example:
        >>> accelerator_from_machine_type("projects/1/machineTypes/ct5lp-hightpu-4t")
        'TPU-v5e'
        >>> accelerator_from_machine_type("n2-standard-8")
        'UNKNOWN'
    """
    name = (machine_type or "").rsplit("/", 1)[-1].lower()
    for prefix, acc in _ACCELERATORS:
        if name.startswith(prefix):
            return acc
    return "UNKNOWN" if not name else next(
        (acc for prefix, acc in _ACCELERATORS if prefix in name), "UNKNOWN")


@dataclasses.dataclass(frozen=True)
class GCEMetadata:
    """What the metadata server said (None where it said nothing).

    ``error`` says why nothing came back (no server, refused, timed out).
    """

    project_id: str | None = None
    zone: str | None = None
    machine_type: str | None = None
    instance_id: str | None = None
    cluster_name: str | None = None
    host: str | None = None
    error: str | None = None

    @property
    def accelerator_type(self) -> str:
        """Google's accelerator label of :attr:`machine_type` (``"UNKNOWN"`` if none)."""
        return accelerator_from_machine_type(self.machine_type)


_METADATA_CACHE: dict[str, GCEMetadata] = {}
_METADATA_LOCK = threading.Lock()


def read_gce_metadata(*, host: str | None = None, timeout: float = 1.0,
                      deadline: float = 5.0, cached: bool = True) -> GCEMetadata:
    """Project, zone, machine type, instance id and cluster name from the metadata server.

    Never raises: an unreachable server gives a :class:`GCEMetadata` whose
    ``error`` says why. The first failed connection ends the lookup, and the whole
    lookup (name resolution included) is bounded by ``deadline`` seconds.

    Args:
        host: ``host[:port]``; default :func:`metadata_host`.
        timeout: seconds per request.
        deadline: seconds for the whole lookup.
        cached: reuse this process's earlier answer from the same host.

    Example:
        >>> read_gce_metadata(host="127.0.0.1:9", cached=False).project_id is None
        True
    """
    host = metadata_host() if host is None else host
    if not host:
        return GCEMetadata(error=f"not on GCP (${METADATA_HOST_ENV} is not set and "
                                 f"{_DMI_PRODUCT} does not name Google)")
    if cached:
        with _METADATA_LOCK:
            hit = _METADATA_CACHE.get(host)
        if hit is not None:
            return hit
    out: dict[str, Any] = {"host": host}

    def lookup() -> None:
        try:
            out["project_id"] = get_gcp_metadata("project", "project-id", host=host,
                                                 timeout=timeout)
            zone = get_gcp_metadata("instance", "zone", host=host, timeout=timeout)
            out["zone"] = zone.rsplit("/", 1)[-1] if zone else None
            out["machine_type"] = get_gcp_metadata("instance", "machine-type", host=host,
                                                   timeout=timeout)
            out["instance_id"] = get_gcp_metadata("instance", "id", host=host, timeout=timeout)
            out["cluster_name"] = get_gcp_metadata("instance", "attributes/cluster-name",
                                                   host=host, timeout=timeout)
        except MetadataUnavailable as e:
            out["error"] = str(e)

    worker = threading.Thread(target=lookup, name="goodput-gce-metadata", daemon=True)
    worker.start()
    worker.join(deadline)
    if worker.is_alive():
        return GCEMetadata(host=host, error=f"metadata server {host}: no answer within "
                                            f"{deadline:g}s")
    md = GCEMetadata(**out)
    if cached and md.error is None:
        with _METADATA_LOCK:
            _METADATA_CACHE[host] = md
    return md


def fill_gcp_options(options: Any, metadata: GCEMetadata | None = None) -> tuple[Any, GCEMetadata]:
    """A copy of ``options`` with an empty ``project_id``, ``location`` (the zone) and
    ``acc_type`` filled from the metadata server, as Google's monitor fills them.

    Fields already set are kept; a field the server cannot give stays None
    (``acc_type`` becomes ``"UNKNOWN"`` as in Google's library once a server
    answered).

    Returns:
        ``(filled options, the metadata read)``.

    Example:
        >>> from goodput_jax.goodput import GCPOptions
        >>> opts, md = fill_gcp_options(GCPOptions(project_id="p", location="z", acc_type="TPU"))
        >>> opts.project_id, md.error is None
        ('p', True)
    """
    if options.project_id and options.location and options.acc_type:
        return options, metadata or GCEMetadata()
    md = read_gce_metadata() if metadata is None else metadata
    changes: dict[str, Any] = {}
    if not options.project_id and md.project_id:
        changes["project_id"] = md.project_id
    if not options.location and md.zone:
        changes["location"] = md.zone
    if not options.acc_type and md.error is None:
        changes["acc_type"] = md.accelerator_type
    return (dataclasses.replace(options, **changes) if changes else options), md

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

    def goodput_metrics(self, details: dict, step_deviation: Any = None, *,
                        include_slice_efficiency: bool = False) -> list[dict]:
        """The metrics of one goodput upload, from a calculator's details (seconds).

        Args:
            details: ``GoodputCalculator.get_job_goodput_details()``.
            step_deviation: ``get_step_statistics()`` / ``StepDeviation`` (optional).
            include_slice_efficiency: also send the job's slice efficiency (elastic
                calculators' ``stepping_slice_efficiency`` / ``available_slice_efficiency``).
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
        if include_slice_efficiency:
            out += self._slice_efficiency(details, {"window_type": "CUMULATIVE",
                                                    "rolling_window_size": "0"})
        return out

    def _slice_efficiency(self, details: dict, labels: dict) -> list[dict]:
        out = []
        for key in ("stepping_slice_efficiency", "available_slice_efficiency"):
            v = details.get(key)
            if v is not None and math.isfinite(float(v)):
                out.append(self._m(key, float(v), labels))
        return out

    def interval_metrics(self, details: dict, *, include_slice_efficiency: bool = False
                         ) -> list[dict]:
        """The metrics of one rolling-window upload, from Google's interval details.

        Args:
            details: ``get_interval_metric_details(start, end)`` of the drop-in
                calculator (``interval_goodput`` {GoodputType: %}, ``interval_badput``
                {BadputType: % or {TYPE: %}}, ``interval_size`` s, and for elastic
                jobs ``stepping_slice_efficiency`` / ``available_slice_efficiency``).
            include_slice_efficiency: also send the window's slice efficiency.

        Returns:
            ``interval_goodput`` / ``interval_badput`` metrics labelled with
            ``rolling_window_size`` (empty when the window had no size).
        """
        size = details.get("interval_size")
        if not size:
            return []
        window = {"rolling_window_size": str(int(size))}
        out = []
        for gtype, pct in (details.get("interval_goodput") or {}).items():
            out.append(self._m("interval_goodput", float(pct),
                               {"goodput_source": getattr(gtype, "name", str(gtype)), **window}))
        for bt, pct in (details.get("interval_badput") or {}).items():
            name = GOOGLE_NAMES.get(bt.name, bt.name)
            if name in _EXCLUDED:
                continue
            if isinstance(pct, dict):
                for sub, v in sorted(pct.items()):
                    out.append(self._m("interval_badput", float(v),
                                       {"badput_source": f"{name}.{str(sub).upper()}", **window}))
            else:
                out.append(self._m("interval_badput", float(pct),
                                   {"badput_source": name, **window}))
        if include_slice_efficiency:
            out += self._slice_efficiency(details, {**window, "window_type": "INTERVAL"})
        return out

    def hang_metrics(self, seconds_since_last_step: float, hung: bool, *,
                     process_id: str = "0", local_rank: str = "0",
                     instance_id: str | None = None) -> list[dict]:
        """Heartbeat (True while stepping, False once hung), seconds since the last step
        and the hung flag (see the module docstring for types and resources)."""
        hb_labels = {"local_rank": str(local_rank)}
        if instance_id:
            hb_labels["instance_id"] = str(instance_id)
        o = self.options
        process = {"project_id": self.project_name.split("/", 1)[1],
                   "location": str(o.location or ""), "workload_id": self.job_name,
                   "replica_id": str(o.replica_id), "process_id": str(process_id)}
        task = {"project_id": self.project_name.split("/", 1)[1],
                "location": str(o.location or ""), "namespace": "goodput_jax",
                "job": self.job_name, "task_id": str(o.replica_id)}
        return [
            {"metric_type": HEARTBEAT_METRIC, "value": not hung, "metric_labels": hb_labels,
             "resource_type": PROCESS_RESOURCE_TYPE, "resource_labels": process},
            {"metric_type": CUSTOM_PREFIX + "seconds_since_last_step",
             "value": float(seconds_since_last_step), "metric_labels": {},
             "resource_type": TASK_RESOURCE_TYPE, "resource_labels": task},
            {"metric_type": CUSTOM_PREFIX + "hung", "value": bool(hung), "metric_labels": {},
             "resource_type": TASK_RESOURCE_TYPE, "resource_labels": task},
        ]

    def straggler_metrics(self, stragglers: Any, *, top: int = 3,
                          window_seconds: float | None = None) -> list[dict]:
        """Per-host lost time and share of the ``top`` slowest hosts, labelled ``host``,
        and the total lost time (see the module docstring); empty for one host.

        Args:
            stragglers: ``GoodputCalculator.get_step_stragglers()``
                (:class:`~goodput_jax.measure.stragglers.Stragglers`).
            top: how many of the slowest hosts get a series.
            window_seconds: the window the stragglers were computed over (None: the job).

        Example:
            >>> from goodput_jax.goodput import GCPOptions
            >>> import numpy as np
            >>> from goodput_jax.measure.events import KIND_CODES, EventKind as K
            >>> from goodput_jax.measure.stragglers import step_stragglers
            >>> st = step_stragglers(np.full(2, KIND_CODES[K.STEP_START]), np.zeros(2, int),
            ...                      np.array([0, 1]), np.array([0.0, 0.5]), np.zeros(2, int))
            >>> exp = CloudMonitoringExporter(GCPOptions(project_id="p", location="l"), "job",
            ...                               client=object())
            >>> [(m["metric_labels"].get("host"), m["value"]) for m in exp.straggler_metrics(st)]
            [('1', 0.5), ('1', 100.0), (None, 0.5)]
        """
        if stragglers is None or int(stragglers.num_hosts) <= 1:
            return []
        o = self.options
        task = {"project_id": self.project_name.split("/", 1)[1],
                "location": str(o.location or ""), "namespace": "goodput_jax",
                "job": self.job_name, "task_id": str(o.replica_id)}
        window = {"rolling_window_size": "0" if window_seconds is None
                  else str(int(window_seconds))}
        out = []
        for h in stragglers.slowest(top):
            labels = {**window, "host": str(int(h.host))}
            out.append({"metric_type": CUSTOM_PREFIX + "straggler_lost_time",
                        "value": float(h.lost_time), "metric_labels": labels,
                        "resource_type": TASK_RESOURCE_TYPE, "resource_labels": task})
            out.append({"metric_type": CUSTOM_PREFIX + "straggler_share",
                        "value": 100.0 * float(h.share), "metric_labels": dict(labels),
                        "resource_type": TASK_RESOURCE_TYPE, "resource_labels": task})
        out.append({"metric_type": CUSTOM_PREFIX + "straggler_total_lost_time",
                    "value": float(stragglers.total_lost), "metric_labels": window,
                    "resource_type": TASK_RESOURCE_TYPE, "resource_labels": task})
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

    def send_goodput(self, calculator: Any, now: float | None = None, *,
                     include_slice_efficiency: bool = False) -> int:
        """Send the goodput metrics of ``calculator``'s job now."""
        from goodput_jax.measure.calculator import GoodputCalculator

        details = GoodputCalculator.get_job_goodput_details(calculator)
        if include_slice_efficiency:  # the elastic calculator's own details carry them
            full = calculator.get_job_goodput_details()
            for key in ("stepping_slice_efficiency", "available_slice_efficiency"):
                if key in full:
                    details[key] = full[key]
        stats = GoodputCalculator.get_step_deviation(calculator)
        return self.send(self.goodput_metrics(details, stats,
                                              include_slice_efficiency=include_slice_efficiency),
                         now)

    def send_interval(self, details: dict, now: float | None = None, *,
                      include_slice_efficiency: bool = False) -> int:
        """Send one window's :meth:`interval_metrics`."""
        metrics = self.interval_metrics(details, include_slice_efficiency=include_slice_efficiency)
        return self.send(metrics, now) if metrics else 0

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
