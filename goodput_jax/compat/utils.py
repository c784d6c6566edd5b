"""ml-goodput-measurement's ``goodput_utils`` helpers: ideal step time, step-deviation
baseline, GCE metadata.

Re-exported (with Google's enums, ``GCPOptions`` and result shapes) by
``goodput_jax.goodput_utils``. As in Google's module, the metadata helpers
(:func:`get_cluster_name`, :func:`get_gcp_project_id`, :func:`get_node_zone`,
:func:`get_accelerator_type`) call ``goodput_utils.get_gcp_metadata`` through that module,
so a test that patches ``goodput_jax.goodput_utils.get_gcp_metadata`` changes what they
return, as it does in Google's library.

Example:
    >>> compute_ideal_step_time([1.0, 1.5, 1.25, 30.0])
    1.25
"""

from __future__ import annotations

import datetime
import logging
import sys
from typing import Any

from goodput_jax.compat.info import MonitoringWindowType
from goodput_jax.measure.calculator import mad_limit

__all__ = [
    "MACHINE_TYPE_TO_ACCELERATOR_TYPE_MAPPING",
    "compute_ideal_step_time",
    "compute_percentile",
    "compute_step_deviation_from_baseline",
    "get_anomalous_and_normal_step_times",
    "get_accelerator_type",
    "get_cluster_name",
    "get_extra_time_from_anomalous_steps",
    "get_gcp_metadata",
    "get_gcp_project_id",
    "get_node_zone",
    "get_timestamp_from_log_entry",
]

#: the logger of ``goodput_jax.goodput_utils``, where these helpers lived
_log = logging.getLogger("goodput_jax.goodput_utils")


def get_timestamp_from_log_entry(entry: dict[str, Any]) -> datetime.datetime | None:
    """The first ``*time*`` value of a Cloud Logging entry payload, as an aware datetime.

    Example:
        >>> get_timestamp_from_log_entry({"job_name": "j", "job_start_time": 0.0}).year
        1970

    ``Any``: the values are JSON-like (numbers, strings, lists, nested dicts), as stored or
    uploaded.
    """
    for key, value in entry.items():
        if "time" in key:
            return datetime.datetime.fromtimestamp(value, datetime.UTC)
    return None


def _split(step_times: list[float]) -> tuple[list[float], list[float]]:
    lim = mad_limit(step_times)
    return ([float(v) for v in step_times if v > lim],
            [float(v) for v in step_times if v <= lim])


def compute_ideal_step_time(step_times: list[float]) -> float | None:
    """Google's ideal step time: mean of the steps >= 1 s within median + 3 MAD (None if none).

    Example:
        >>> compute_ideal_step_time([0.5]) is None
        True
    """
    times = [float(t) for t in step_times if t >= 1.0]
    if not times:
        return None
    _, normal = _split(times)
    return sum(normal) / len(normal) if normal else None


def get_anomalous_and_normal_step_times(step_times: list[float]
                                        ) -> tuple[list[float], list[float]]:
    """``(anomalous, normal)`` step times: above, and within, median + 3 MAD (Google's split).

    Example:
        >>> get_anomalous_and_normal_step_times([1.0, 1.0, 1.0, 5.0])
        ([5.0], [1.0, 1.0, 1.0])
    """
    return _split(step_times)


def compute_percentile(values: list[float], percentile: float) -> float:
    """The ``percentile`` (0-100) of ``values``, linearly interpolated (0.0 when empty).

    Example:
        >>> compute_percentile([1.0, 2.0, 3.0, 4.0], 50)
        2.5
    """
    if not values:
        return 0.0
    v = sorted(float(x) for x in values)
    index = (len(v) - 1) * (percentile / 100.0)
    lo = int(index)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (index - lo)


def compute_step_deviation_from_baseline(
        step_time_deviation: dict[int, float],
        mode: MonitoringWindowType = MonitoringWindowType.CUMULATIVE,
        recent_window_size: int = 100, baseline_window_size: int = 1000,
        spike_percentile: int = 90) -> float:
    """Google's spike-sensitive step deviation (s) of ``{step: deviation}`` (in step order).

    Under 100 steps, the mean absolute deviation. ``INTERVAL``: the ``spike_percentile``
    of the last ``recent_window_size``. ``CUMULATIVE``: that percentile less the median of
    the ``baseline_window_size`` steps before them (the percentile alone until there are
    enough steps for both windows).

    Raises:
        ValueError: ``mode`` is not a :class:`MonitoringWindowType`.

    Example:
        >>> compute_step_deviation_from_baseline({0: 1.0, 1: -3.0})
        2.0
    """
    if not step_time_deviation:
        return 0.0
    dev = [abs(float(d)) for d in step_time_deviation.values()]
    if len(dev) < 100:  # Google compares with its default window size here
        return sum(dev) / len(dev)
    recent = dev[-recent_window_size:]
    if mode == MonitoringWindowType.INTERVAL:
        return compute_percentile(recent, spike_percentile)
    if mode != MonitoringWindowType.CUMULATIVE:
        raise ValueError(f"mode ({mode!r}) must be a MonitoringWindowType")
    if len(dev) < recent_window_size + baseline_window_size:
        return compute_percentile(recent, spike_percentile)
    base = sorted(dev[-(recent_window_size + baseline_window_size):-recent_window_size])
    if not base:
        return compute_percentile(recent, spike_percentile)
    mid = len(base) // 2
    median = base[mid] if len(base) % 2 else (base[mid - 1] + base[mid]) / 2
    return compute_percentile(recent, spike_percentile) - median


def get_extra_time_from_anomalous_steps(step_times: list[float]) -> float:
    """Seconds the anomalous steps (> median + 3 MAD) took beyond the normal steps' mean.

    Example:
        >>> get_extra_time_from_anomalous_steps([1.0, 1.0, 1.0, 5.0])
        4.0
    """
    anomalous, normal = _split(step_times)
    mean = sum(normal) / len(normal) if normal else 0.0
    return sum(anomalous) - len(anomalous) * mean


# ---------------------------------------------------------------- GCE metadata
#: Google's metadata request: the URL prefix and the header
_METADATA_PATH = "/computeMetadata/v1/"
_METADATA_HEADERS = {"Metadata-Flavor": "Google"}


def get_gcp_metadata(category: str, attribute: str, timeout: float = 5,
                     retries: int = 3) -> str | None:
    """Google's ``get_gcp_metadata``: one metadata-server value, None when unavailable.

    As in Google's library: ``GET http://<host>/computeMetadata/v1/<category>/<attribute>``
    with ``Metadata-Flavor: Google``, through a ``requests.Session`` that retries
    ``retries`` times (backoff 0.5 s, and on HTTP 429/500/502/503/504); any request error or
    error status returns None with a warning. The host is ``$GCE_METADATA_HOST``, else
    ``$GCE_METADATA_ROOT``, else ``metadata.google.internal``; off a Google VM with neither
    set, a failed connection is not retried (there is no server to come up). Without
    ``requests`` installed the same request goes through ``http.client``, without retries.

    Example:
        >>> get_gcp_metadata("project", "project-id")  # doctest: +SKIP
        'my-project'
    """
    from goodput_jax.measure import gce_metadata as gm

    known = gm.metadata_host()
    host = known or gm.DEFAULT_METADATA_HOST
    try:
        import requests
        from requests.adapters import HTTPAdapter
        from urllib3.util.retry import Retry
    except ImportError:
        try:
            return gm.query_gce_metadata(category, attribute, host=host, timeout=timeout)
        except gm.MetadataUnavailable as e:
            _log.warning("Failed to retrieve metadata for %s/%s: %s", category, attribute, e)
            return None
    session = requests.Session()
    retry = Retry(total=retries, backoff_factor=0.5,
                  status_forcelist=[429, 500, 502, 503, 504],
                  connect=None if known else 0)  # None: counted in total, as Google's
    session.mount("http://", HTTPAdapter(max_retries=retry))
    try:
        response = session.get(f"http://{host}{_METADATA_PATH}{category}/{attribute}",
                               headers=dict(_METADATA_HEADERS), timeout=timeout)
        response.raise_for_status()
        return response.text
    except requests.exceptions.RequestException as e:
        _log.warning("Failed to retrieve metadata for %s/%s: %s", category, attribute, e)
        return None


#: Google's module path of these helpers (``goodput_jax.goodput_utils`` re-exports this module)
_GOOGLE_PATH = "goodput_jax.goodput_utils"


def _metadata(category: str, attribute: str) -> str | None:
    """``get_gcp_metadata`` as Google's module path holds it now (a test may have patched it
    there); read from ``sys.modules``, as the thin module imports this one."""
    shim = sys.modules.get(_GOOGLE_PATH)
    fetch = shim.get_gcp_metadata if shim is not None else get_gcp_metadata
    return fetch(category, attribute)


def get_gcp_project_id() -> str | None:
    """The project of this VM, from the metadata server (None off GCP)."""
    return _metadata("project", "project-id")


def get_node_zone() -> str | None:
    """The zone of this VM (``us-central2-b``), from the metadata server (None off GCP)."""
    zone = _metadata("instance", "zone")
    return zone.rsplit("/", 1)[-1] if zone else None


#: machine-type name part -> accelerator label, matched in this order (Google's table)
MACHINE_TYPE_TO_ACCELERATOR_TYPE_MAPPING = {
    "tpu7x": "TPU-7x", "ct6e": "TPU-v6e", "ct5p": "TPU-v5p", "ct5lp": "TPU-v5e",
    "ct5l": "TPU-v5e", "ct4p": "TPU-v4p", "ct3p": "TPU-v3", "ct3": "TPU-v3",
    "tpu-v2": "TPU-v2", "tpu": "TPU", "a3-edgegpu": "NVIDIA-H100",
    "a3-highgpu": "NVIDIA-H100", "a3-megagpu": "NVIDIA-H100", "a3-ultragpu": "NVIDIA-H200",
    "a2": "NVIDIA-A100", "gpu": "GPU",
}


def get_accelerator_type() -> str:
    """Google's accelerator label of this VM's machine type (``"UNKNOWN"`` if none): the
    first entry of :data:`MACHINE_TYPE_TO_ACCELERATOR_TYPE_MAPPING` found in its name."""
    url = _metadata("instance", "machine-type")
    name = url.split("/")[-1].lower() if url else ""
    if not name:
        return "UNKNOWN"
    return next((acc for part, acc in MACHINE_TYPE_TO_ACCELERATOR_TYPE_MAPPING.items()
                 if part in name), "UNKNOWN")


def get_cluster_name() -> str | None:
    """The ``cluster-name`` instance attribute (GKE nodes), or None."""
    return _metadata("instance", "attributes/cluster-name")
