"""Job spec + published scheduling hints -> :class:`~goodput_jax.sched.types.JobInfo`.

The training side publishes *hints* (AdaptDL's ``status.train`` of an
AdaptDLJob): the fitted ``perfParams``, ``gradParams``, ``initBatchSize``,
batch limits and the largest replica count profiled so far.  The scheduler
turns them, plus the job's spec, into a JobInfo with the rules of AdaptDL's
``_get_job_info``:

* ``max_replicas = max(2 * maxProfiledReplicas, 1)``, capped by
  ``spec.maxReplicas`` and raised to ``spec.minReplicas``;
* with ``localBszBounds = [lo, hi]``, ``max_replicas`` is cut so that
  ``max_batch_size / max_replicas >= lo`` (``max_batch_size`` is
  ``maxBatchSize`` or ``initBatchSize``), but never below
  ``max(minReplicas, 1)``;
* gradient statistics default to ``GradParams(0.0, 1.0)``;
* jobs without ``perfParams``/``initBatchSize`` and non-preemptible jobs get a
  linear speedup (``speedup(n, r) = r``).

Hints are parsed by :meth:`goodput_jax.model.hints.Hints.from_json` (one typed
record shared with the training hooks); malformed hints raise
``ValueError``/``TypeError`` naming the offending key.
Identical hints map to the same memoised SpeedupFunction, so tables are not
recomputed every scheduling cycle.

Example:
    >>> job = {"metadata": {"creationTimestamp": "2024-01-01T00:00:00Z"},
    ...        "spec": {"maxReplicas": 8, "template": {"spec": {"containers": [
    ...            {"resources": {"requests": {"nvidia.com/gpu": 1, "cpu": "500m"}}}]}}},
    ...        "status": {"train": {"maxProfiledReplicas": 2}}}
    >>> info = job_info_from_hints(job)
    >>> info.max_replicas, info.resources["cpu"], info.speedup_fn(1, 3)
    (4, 0.5, 3)
"""

from __future__ import annotations

import math
import numbers
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from goodput_jax.model.hints import PERF_PARAM_KEYS, Hints, max_replicas_allowed
from goodput_jax.model.types import GradParams, PerfParams
from goodput_jax.sched.speedup import SpeedupFunction
from goodput_jax.sched.types import JobInfo

__all__ = [
    "PERF_PARAM_KEYS",
    "job_info_from_hints",
    "linear_speedup",
    "parse_quantity",
    "pod_requests",
    "speedup_fns_by_type",
]


_SUFFIX = {
    "n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
    "P": 1e15, "E": 1e18, "Ki": 2.0 ** 10, "Mi": 2.0 ** 20, "Gi": 2.0 ** 30, "Ti": 2.0 ** 40,
    "Pi": 2.0 ** 50, "Ei": 2.0 ** 60,
}
_QUANTITY = re.compile(r"^\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*([a-zA-Z]*)\s*$")
_CACHE: OrderedDict = OrderedDict()
_CACHE_SIZE = 4096


def linear_speedup(num_nodes: Any, num_replicas: Any) -> Any:
    """Speedup of a job without a model: proportional to its replicas.

    Example:
        >>> linear_speedup(1, 4)
        4
    """
    return num_replicas


def parse_quantity(value: Any, key: str = "quantity") -> float:
    """Kubernetes resource quantity (``"500m"``, ``"2Gi"``, ``4``) -> float.

    Args:
        value: the quantity.
        key: name used in error messages.

    Example:
        >>> parse_quantity("500m"), parse_quantity("1Ki"), parse_quantity(2)
        (0.5, 1024.0, 2.0)
    """
    if isinstance(value, bool):
        raise TypeError(f"{key} must be a resource quantity, got {value!r}")
    if isinstance(value, numbers.Real):
        out = float(value)
    elif isinstance(value, str):
        match = _QUANTITY.match(value)
        if not match or match.group(2) not in _SUFFIX:
            raise ValueError(f"{key}: cannot parse resource quantity {value!r}")
        out = float(match.group(1)) * _SUFFIX[match.group(2)]
    else:
        raise TypeError(f"{key} must be a resource quantity, got {value!r}")
    if not math.isfinite(out) or out < 0:
        raise ValueError(f"{key} must be finite and >= 0, got {value!r}")
    return out


def pod_requests(pod_spec: Mapping) -> dict:
    """Resources one replica requests: the sum over containers of ``resources.requests``
    (``limits`` where a request is missing), plus ``pods: 1``.

    Example:
        >>> pod_requests({"containers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}]})
        {'nvidia.com/gpu': 1.0, 'pods': 1.0}
    """
    if not isinstance(pod_spec, Mapping):
        raise TypeError(f"spec.template.spec must be a mapping, got {type(pod_spec).__name__}")
    containers = pod_spec.get("containers", [])
    if not isinstance(containers, (list, tuple)):
        raise TypeError(f"spec.template.spec.containers must be a list, got {containers!r}")
    out: dict[str, float] = {}
    for i, container in enumerate(containers):
        res = (container or {}).get("resources", {}) or {}
        requests = dict(res.get("limits", {}) or {})
        requests.update(res.get("requests", {}) or {})
        for name, value in requests.items():
            key = f"spec.template.spec.containers[{i}].resources[{name!r}]"
            out[name] = out.get(name, 0.0) + parse_quantity(value, key)
    out.setdefault("pods", 1.0)
    return out


def _spec_int(spec: Mapping, key: str, default: int | None) -> int | None:
    value = spec.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"spec.{key} must be a non-negative integer, got {value!r}")
    return int(value)


def _speedup_from_hints(h: Hints, perf_params: PerfParams | None = None) -> SpeedupFunction:
    """Memoised SpeedupFunction of parsed hints (``perf_params`` overrides ``h.perf_params``)."""
    from goodput_jax.model.goodput import GoodputFunction

    perf_params = h.perf_params if perf_params is None else perf_params
    grad_params = GradParams(0.0, 1.0) if h.grad_params is None else h.grad_params
    key = (tuple(perf_params), tuple(grad_params), h.init_batch_size, h.max_batch_size,
           h.local_bsz_bounds, h.gradient_accumulation)
    cached = _CACHE.get(key)
    if cached is not None:
        _CACHE.move_to_end(key)
        return cached
    goodput_fn = GoodputFunction(perf_params, grad_params, int(h.init_batch_size))
    speedup = SpeedupFunction(goodput_fn, h.max_batch_size, h.local_bsz_bounds,
                              h.gradient_accumulation)
    _CACHE[key] = speedup
    if len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return speedup


def speedup_fns_by_type(hints: Mapping | Hints,
                        accelerator_types: Sequence[str]) -> dict[str, SpeedupFunction]:
    """Per-accelerator-type speedup functions of a job (fitted or bootstrapped, Sia-style).

    A type the job has observed uses its fitted step-time parameters; another
    type is bootstrapped from an observed one by the throughput ratio at the
    minimum GPU count (:meth:`~goodput_jax.model.hints.Hints.perf_params_for`).
    Types with neither are left out.

    Example:
        >>> p = dict(alpha_c=0.1, beta_c=0.01, alpha_n=0.2, beta_n=0.02, alpha_r=0.1,
        ...          beta_r=0.01, gamma=1.5)
        >>> fns = speedup_fns_by_type({"perfParamsByType": {"t4": p}, "initBatchSize": 32,
        ...     "minThroughputByType": {"t4": 100.0, "a100": 300.0}}, ["t4", "a100", "v100"])
        >>> sorted(fns), round(fns["a100"].base_goodput / fns["t4"].base_goodput, 3)
        (['a100', 't4'], 3.0)
    """
    h = Hints.from_json(hints)
    if h.init_batch_size is None:
        return {}
    out = {}
    for name in accelerator_types:
        perf = h.perf_params_for(name)
        if perf is not None:
            out[name] = _speedup_from_hints(h, perf)
    return out


def job_info_from_hints(job: Mapping, resources: Mapping[str, float] | None = None) -> JobInfo:
    """Builds the policy's view of one job from its spec and published hints.

    Args:
        job: ``{"metadata": {"creationTimestamp": ISO-8601},
            "spec": {"template": {"spec": pod spec}, "minReplicas", "maxReplicas",
            "preemptible"}, "status": {"train": hints}}``; ``status`` may be absent.
        resources: per-replica resources; by default taken from the pod spec
            (:func:`pod_requests`).

    Returns:
        The JobInfo (speedup from the goodput model, or linear).

    Raises:
        ValueError / TypeError: naming the missing or malformed key.

    Example:
        >>> job = {"metadata": {"creationTimestamp": "2024-01-01T00:00:00+00:00"},
        ...        "spec": {"template": {"spec": {}}, "preemptible": False},
        ...        "status": {"train": {}}}
        >>> job_info_from_hints(job, {"gpu": 1}).preemptible
        False
    """
    if not isinstance(job, Mapping):
        raise TypeError(f"job must be a mapping, got {type(job).__name__}")
    spec = job.get("spec")
    if not isinstance(spec, Mapping):
        raise TypeError("job is missing 'spec' (a mapping)")
    if resources is None:
        template = spec.get("template")
        if not isinstance(template, Mapping) or "spec" not in template:
            raise ValueError("job is missing 'spec.template.spec'")
        resources = pod_requests(template["spec"])
    status = job.get("status") or {}
    if not isinstance(status, Mapping):
        raise TypeError(f"job 'status' must be a mapping, got {status!r}")
    hints = status.get("train") or {}
    if not isinstance(hints, Mapping):
        raise TypeError(f"job 'status.train' (hints) must be a mapping, got {hints!r}")

    h = Hints.from_json(hints)
    max_replicas = max_replicas_allowed(h.max_profiled_replicas)
    spec_max = _spec_int(spec, "maxReplicas", None)
    if spec_max:
        max_replicas = min(max_replicas, spec_max)
    min_replicas = _spec_int(spec, "minReplicas", 0)
    max_replicas = max(max_replicas, min_replicas)
    preemptible = spec.get("preemptible", True)
    if not isinstance(preemptible, bool):
        raise TypeError(f"spec.preemptible must be a bool, got {preemptible!r}")

    if h.perf_params is not None and h.init_batch_size is not None and preemptible:
        speedup_fn = _speedup_from_hints(h)
        max_batch_size = h.max_batch_size or h.init_batch_size
        if h.local_bsz_bounds and h.local_bsz_bounds[0]:
            min_local = h.local_bsz_bounds[0]
            if max_batch_size < min_local * max_replicas:
                max_replicas = max(int(max_batch_size / min_local), min_replicas, 1)
    else:
        speedup_fn = linear_speedup

    metadata = job.get("metadata")
    if not isinstance(metadata, Mapping) or "creationTimestamp" not in metadata:
        raise ValueError("job is missing 'metadata.creationTimestamp'")
    stamp = metadata["creationTimestamp"]
    if isinstance(stamp, datetime):
        created = stamp
    else:
        try:
            created = datetime.fromisoformat(str(stamp))
        except ValueError:
            raise ValueError(f"metadata.creationTimestamp is not ISO-8601: {stamp!r}") from None
    return JobInfo(resources, speedup_fn, created, min_replicas, max_replicas, preemptible)
