"""ml-goodput-measurement's ``goodput_utils`` helpers: ideal step time, GCE metadata.

Re-exported (with Google's enums and ``GCPOptions``) by ``goodput_jax.goodput_utils``.

Example:
    >>> compute_ideal_step_time([1.0, 1.5, 1.25, 30.0])
    1.25
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

from goodput_jax.measure.calculator import mad_limit

__all__ = [
    "compute_ideal_step_time",
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
def get_gcp_metadata(category: str, attribute: str, timeout: float = 1.0) -> str | None:
    """Google's ``get_gcp_metadata``: one metadata-server value, None when unavailable.

    The server is ``$GCE_METADATA_HOST``, else ``$GCE_METADATA_ROOT``, or, on a Google
    VM, ``metadata.google.internal`` (:func:`goodput_jax.measure.cloud_monitoring.metadata_host`).

    Example:
        >>> get_gcp_metadata("project", "project-id")  # doctest: +SKIP
        'my-project'
    """
    from goodput_jax.measure import cloud_monitoring as cm

    try:
        return cm.query_gce_metadata(category, attribute, timeout=timeout)
    except cm.MetadataUnavailable as e:
        _log.warning("Failed to retrieve metadata for %s/%s: %s", category, attribute, e)
        return None


def get_gcp_project_id() -> str | None:
    """The project of this VM, from the metadata server (None off GCP)."""
    return get_gcp_metadata("project", "project-id")


def get_node_zone() -> str | None:
    """The zone of this VM (``us-central2-b``), from the metadata server (None off GCP)."""
    zone = get_gcp_metadata("instance", "zone")
    return zone.rsplit("/", 1)[-1] if zone else None


def get_accelerator_type() -> str:
    """Google's accelerator label of this VM's machine type (``"UNKNOWN"`` if none)."""
    from goodput_jax.measure.cloud_monitoring import accelerator_from_machine_type

    return accelerator_from_machine_type(get_gcp_metadata("instance", "machine-type"))


def get_cluster_name() -> str | None:
    """The ``cluster-name`` instance attribute (GKE nodes), or None."""
    return get_gcp_metadata("instance", "attributes/cluster-name")
