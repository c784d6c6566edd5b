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
``compute.googleapis.com/workload/step_time_deviation``    mean absolute step deviation (s; also
                                                           the step-deviation uploader's metric)
``compute.googleapis.com/workload/performance``            ideal step time (s), its one meaning
=========================================================  ===================================

Badput sources as Google's library sends them: never ``DATA_LOADING_ASYNC``;
``ELASTIC_*`` only from an elastic monitor; ``INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION``
and ``RECOMPILATION`` (goodput_jax's own) only when they hold time.

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

Hang detection (goodput_jax's own, see ``docs/maxtext.md``; sent only when the monitor
has a hang threshold):

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

ML Productivity Goodput (goodput_jax's own, issue 35; ``generic_task`` resource, no metric
labels; sent only when the monitor is asked to, ``send_productivity_metrics=True``, so no
custom metric is created in a project unasked; each in %, and only when the figure exists:
no program cost recorded, no program goodput, MFU or product):

=================================================================  ===========================
``custom.googleapis.com/goodput_jax/scheduling_goodput``           held time / job time
``custom.googleapis.com/goodput_jax/runtime_goodput``              productive / held time
``custom.googleapis.com/goodput_jax/program_goodput``              roofline ideal / actual
                                                                   step time
``custom.googleapis.com/goodput_jax/ml_productivity_goodput``      the product of the three
``custom.googleapis.com/goodput_jax/ettr``                         productive / job time
                                                                   (Meta's ETTR)
``custom.googleapis.com/goodput_jax/mfu``                          model FLOPs utilisation
=================================================================  ===========================

Empty ``GCPOptions`` fields (project, zone, accelerator type) are filled from the
GCE metadata server, as Google's library does (:func:`fill_gcp_options`): the
host is ``$GCE_METADATA_HOST`` (as Google's client libraries read it), else
``$GCE_METADATA_ROOT`` (as google-auth reads it), or, on a
machine whose DMI product name says Google, ``metadata.google.internal``; each
request has a short timeout and the whole lookup a deadline.

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

import dataclasses
import http.client
import logging
import math
import os
import threading
import time
from typing import TYPE_CHECKING, Any

from goodput_jax.measure.badput import GOOGLE_NAMES

if TYPE_CHECKING:
    from goodput_jax.measure.calculator import StepDeviation
    from goodput_jax.measure.monitor_calculator import MonitoredCalculator

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
#: its older name, which google-auth still reads when ``GCE_METADATA_HOST`` is unset
METADATA_ROOT_ENV = "GCE_METADATA_ROOT"
#: environment variable naming the Cloud Monitoring endpoint the exporter's client talks
#: to: ``host[:port]`` (TLS, default credentials) or ``insecure://host:port`` (plaintext,
#: no credentials: an emulator or a loopback test server). See ``docs/maxtext.md``.
MONITORING_ENDPOINT_ENV = "GOODPUT_JAX_MONITORING_ENDPOINT"
#: Cloud Monitoring's write rule: at most one point per time series per this many
#: seconds (points closer together are refused). The exporter keeps its points apart by
#: at least this much (see :class:`CloudMonitoringExporter`); not configurable.
SAMPLING_PERIOD_SECONDS = 5.0
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
    """The metadata server to ask: ``$GCE_METADATA_HOST``, else ``$GCE_METADATA_ROOT``
    (google-auth reads the two in this order), else ``metadata.google.internal`` on a
    Google VM, else None (not on GCP: no request).

    Example:
        >>> os.environ["GCE_METADATA_HOST"] = "127.0.0.1:8080"  # doctest: +SKIP
        >>> metadata_host()                                      # doctest: +SKIP
        '127.0.0.1:8080'
    """
    for env in (METADATA_HOST_ENV, METADATA_ROOT_ENV):
        host = os.environ.get(env, "").strip()
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
        raise MetadataUnavailable(f"no metadata server (${METADATA_HOST_ENV} and "
                                  f"${METADATA_ROOT_ENV} are not set and this is not a "
                                  "Google VM)")
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
        return GCEMetadata(error=f"not on GCP (${METADATA_HOST_ENV} and ${METADATA_ROOT_ENV} "
                                 f"are not set and {_DMI_PRODUCT} does not name Google)")
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
#: sent only by an elastic monitor (``elastic=True``), as only Google's elastic
#: calculator has them
_ELASTIC_SOURCES = {"ELASTIC_SLICE_DOWN", "ELASTIC_SCALE_UP", "ELASTIC_REINITIALIZATION"}
#: sent only when they hold time: Google's calculator has infrastructure recovery only
#: after a disruption and no recompilation bucket at all (goodput_jax's own)
_ONLY_WHEN_NONZERO = {"INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION", "RECOMPILATION"}
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


def series_key(metric: dict) -> tuple:
    """What identifies a metric dict's time series: its type, labels, resource type
    and resource labels (two points with the same key are points of one series)."""
    return (metric["metric_type"], tuple(sorted(metric["metric_labels"].items())),
            metric.get("resource_type", RESOURCE_TYPE),
            tuple(sorted(metric["resource_labels"].items())))


class CloudMonitoringExporter:
    """Sends a job's goodput metrics to Cloud Monitoring (see the module docstring),
    within the service's write rules.

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

    def __init__(self, gcp_options: Any, job_name: str, client: Any = None, *,
                 clock: Any = None, elastic: bool = False):
        project = getattr(gcp_options, "project_id", None)
        if not isinstance(project, str) or not project:
            raise ValueError(f"gcp_options.project_id ({project!r}) must be a non-empty string "
                             "to send metrics to Cloud Monitoring")
        if clock is not None and not callable(clock):
            raise TypeError(f"clock ({clock!r}) must be a callable returning UTC seconds")
        self.options = gcp_options
        self.job_name = job_name
        self.project_name = f"projects/{project}"
        self.client = make_client() if client is None else client
        self.elastic = bool(elastic)
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
            if not self._sends_source(name, secs) or bt.name == "CUSTOM_BADPUT_EVENTS":
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
            out += self.step_deviation_metrics(step_deviation)
            ideal = float(step_deviation.ideal_step_time)
            if math.isfinite(ideal):  # one meaning: the ideal step time (s), only
                out.append(self._m("performance", ideal, {}, with_labels=False))
        if include_slice_efficiency:
            out += self._slice_efficiency(details, {"window_type": "CUMULATIVE",
                                                    "rolling_window_size": "0"})
        return out

    def _sends_source(self, name: str, value: Any) -> bool:
        """Whether a badput source goes out, as Google's library sends them: never
        asynchronous loading, ``ELASTIC_*`` only from an elastic monitor,
        infrastructure recovery and recompilation only when they hold time."""
        if name in _EXCLUDED or (name in _ELASTIC_SOURCES and not self.elastic):
            return False
        if name in _ONLY_WHEN_NONZERO:
            return isinstance(value, dict) or float(value) > 0
        return True

    def step_deviation_metrics(self, step_deviation: Any) -> list[dict]:
        """``step_time_deviation``: the mean absolute step deviation (s), empty when
        there is no step (the step-deviation uploader's metric, and part of each
        goodput upload)."""
        if step_deviation is None or not getattr(step_deviation, "num_steps", 0):
            return []
        mean = float(abs(step_deviation.deviations).mean())
        return [self._m("step_time_deviation", mean, {})] if math.isfinite(mean) else []

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
            if not self._sends_source(name, pct):
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
        task = self.task_resource_labels()
        return [
            {"metric_type": HEARTBEAT_METRIC, "value": not hung, "metric_labels": hb_labels,
             "resource_type": PROCESS_RESOURCE_TYPE, "resource_labels": process},
            {"metric_type": CUSTOM_PREFIX + "seconds_since_last_step",
             "value": float(seconds_since_last_step), "metric_labels": {},
             "resource_type": TASK_RESOURCE_TYPE, "resource_labels": task},
            {"metric_type": CUSTOM_PREFIX + "hung", "value": bool(hung), "metric_labels": {},
             "resource_type": TASK_RESOURCE_TYPE, "resource_labels": task},
        ]

    def task_resource_labels(self) -> dict[str, str]:
        """The ``generic_task`` resource labels of goodput_jax's own metrics (stragglers,
        productivity, the hang check's): project, location, namespace ``goodput_jax``,
        job, task (the replica)."""
        o = self.options
        return {"project_id": self.project_name.split("/", 1)[1],
                "location": str(o.location or ""), "namespace": "goodput_jax",
                "job": self.job_name, "task_id": str(o.replica_id)}

    def productivity_metrics(self, result: Any) -> list[dict]:
        """ML Productivity Goodput's factors, product, ETTR and MFU (%) under
        :data:`CUSTOM_PREFIX` (see the module docstring); a figure that does not exist
        (NaN: no program cost recorded, no held time yet) is not sent.

        Args:
            result: ``GoodputCalculator.get_productivity_goodput()``
                (:class:`~goodput_jax.measure.productivity.ProductivityGoodput`).

        Example:
            >>> import math
            >>> from goodput_jax.goodput import GCPOptions
            >>> from goodput_jax.measure.productivity import ProgramGoodput, productivity_of
            >>> exp = CloudMonitoringExporter(GCPOptions(project_id="p", location="l"), "job",
            ...                               client=object())
            >>> r = productivity_of(100.0, 80.0, 60.0, ProgramGoodput((), math.nan, math.nan, 0))
            >>> [(m["metric_type"].rsplit("/", 1)[1], m["value"])
            ...  for m in exp.productivity_metrics(r)]
            [('scheduling_goodput', 80.0), ('runtime_goodput', 75.0), ('ettr', 60.0)]
        """
        from goodput_jax.measure.tags import PRODUCTIVITY_TAGS, productivity_scalars

        task = self.task_resource_labels()
        return [{"metric_type": CUSTOM_PREFIX + PRODUCTIVITY_TAGS[tag], "value": float(v),
                 "metric_labels": {}, "resource_type": TASK_RESOURCE_TYPE,
                 "resource_labels": dict(task)}
                for tag, v in productivity_scalars(result).items()]

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
        task = self.task_resource_labels()
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
        within the write rules)."""
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
