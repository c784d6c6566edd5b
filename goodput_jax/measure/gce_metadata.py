"""Where the job runs: the GCE metadata server, and the GCP options filled from it.

Empty ``GCPOptions`` fields (project, zone, accelerator type) are filled from the
GCE metadata server, as Google's library does (:func:`fill_gcp_options`): the
host is ``$GCE_METADATA_HOST`` (as Google's client libraries read it), else
``$GCE_METADATA_ROOT`` (as google-auth reads it), or, on a
machine whose DMI product name says Google, ``metadata.google.internal``; each
request has a short timeout and the whole lookup a deadline.

:class:`GCPTarget` is what the Cloud Monitoring exporter and :func:`fill_gcp_options`
read of the drop-in's ``GCPOptions`` (a protocol: the measure room imports no
``compat``).

Example:
    >>> accelerator_from_machine_type("a3-highgpu-8g")
    'NVIDIA-H100'
"""

from __future__ import annotations

import dataclasses
import http.client
import os
import threading
from typing import Any, Protocol, TypeVar, runtime_checkable

__all__ = ["DEFAULT_METADATA_HOST", "METADATA_HOST_ENV", "METADATA_ROOT_ENV", "GCEMetadata",
           "GCPTarget", "MetadataUnavailable", "accelerator_from_machine_type",
           "fill_gcp_options", "metadata_host", "on_gce", "query_gce_metadata",
           "read_gce_metadata"]

#: environment variable naming the metadata server ``host[:port]`` (Google's clients'
#: name for it; a test points it at a loopback server).
METADATA_HOST_ENV = "GCE_METADATA_HOST"
#: its older name, which google-auth still reads when ``GCE_METADATA_HOST`` is unset
METADATA_ROOT_ENV = "GCE_METADATA_ROOT"
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


def query_gce_metadata(category: str, attribute: str, *, host: str | None = None,
                       timeout: float = 1.0) -> str | None:
    """One value from the GCE metadata server (``/computeMetadata/v1/<category>/<attribute>``).

    It raises when no server answers; Google's ``get_gcp_metadata``
    (``goodput_jax.goodput_utils``) returns None instead: two names for two things.

    Sends ``Metadata-Flavor: Google`` and accepts only an answer carrying it back.

    Returns:
        The value, or None when the server has no such entry (404).

    Raises:
        MetadataUnavailable: no server (no host, refused, timed out, or not a
            metadata server).

    Example:
        >>> query_gce_metadata("project", "project-id", host="127.0.0.1:9")  # doctest: +SKIP
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
        def value(category: str, attribute: str) -> str | None:
            return query_gce_metadata(category, attribute, host=host, timeout=timeout)

        try:
            out["project_id"] = value("project", "project-id")
            zone = value("instance", "zone")
            out["zone"] = zone.rsplit("/", 1)[-1] if zone else None
            out["machine_type"] = value("instance", "machine-type")
            out["instance_id"] = value("instance", "id")
            out["cluster_name"] = value("instance", "attributes/cluster-name")
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


@runtime_checkable
class GCPTarget(Protocol):
    """Where a job's Cloud Monitoring metrics go and how they are labelled: the fields of
    Google's ``GCPOptions`` (``goodput_jax.goodput.GCPOptions``) that the exporter reads.
    :func:`fill_gcp_options` needs a dataclass (it returns a filled copy)."""

    project_id: str | None
    location: str | None
    replica_id: str
    acc_type: str | None
    cluster_name: str | None


_Target = TypeVar("_Target", bound=GCPTarget)


def fill_gcp_options(options: _Target, metadata: GCEMetadata | None = None
                     ) -> tuple[_Target, GCEMetadata]:
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
    return (dataclasses.replace(options, **changes) if changes else options), md  # type: ignore[type-var]
