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

Malformed hints raise ``ValueError``/``TypeError`` naming the offending key.
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
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from goodput_jax.sched.speedup import SpeedupFunction
from goodput_jax.sched.types import JobInfo

__all__ = [
    "PERF_PARAM_KEYS",
    "job_info_from_hints",
    "linear_speedup",
    "parse_quantity",
    "pod_requests",
]

#: Keys of ``hints["perfParams"]``, in PerfParams order.
PERF_PARAM_KEYS = ("alpha_c", "beta_c", "alpha_n", "beta_n", "alpha_r", "beta_r", "gamma")

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


def _number(hints: Mapping, key: str, *, positive: bool = False, integer: bool = False) -> float:
    value = hints[key]
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise TypeError(f"hint {key!r} must be a finite number, got {value!r}")
    if integer and value != int(value):
        raise ValueError(f"hint {key!r} must be an integer, got {value!r}")
    if positive and value <= 0:
        raise ValueError(f"hint {key!r} must be > 0, got {value!r}")
    if value < 0:
        raise ValueError(f"hint {key!r} must be >= 0, got {value!r}")
    return value


def _spec_int(spec: Mapping, key: str, default: int | None) -> int | None:
    value = spec.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"spec.{key} must be a non-negative integer, got {value!r}")
    return int(value)


def _speedup_from_hints(hints: Mapping) -> SpeedupFunction:
    from goodput_jax.model.goodput import GoodputFunction
    from goodput_jax.model.types import GradParams, PerfParams

    perf = hints["perfParams"]
    if not isinstance(perf, Mapping):
        raise TypeError(f"hint 'perfParams' must be a mapping, got {perf!r}")
    values = []
    for name in PERF_PARAM_KEYS:
        if name not in perf:
            raise ValueError(f"hint 'perfParams' is missing key {name!r}")
        values.append(_number(perf, name) if name != "gamma" else _number(perf, name, positive=True))
    perf_params = PerfParams(*values)
    grad = hints.get("gradParams")
    if grad is None:
        grad_params = GradParams(0.0, 1.0)
    else:
        if not isinstance(grad, Mapping):
            raise TypeError(f"hint 'gradParams' must be a mapping, got {grad!r}")
        for name in ("norm", "var"):
            if name not in grad:
                raise ValueError(f"hint 'gradParams' is missing key {name!r}")
        grad_params = GradParams(_number(grad, "norm"), _number(grad, "var"))
    init_bsz = _number(hints, "initBatchSize", positive=True, integer=True)
    max_bsz = hints.get("maxBatchSize")
    if max_bsz is not None:
        max_bsz = _number(hints, "maxBatchSize", positive=True)
        if max_bsz < init_bsz:
            raise ValueError(f"hint 'maxBatchSize' ({max_bsz}) < 'initBatchSize' ({init_bsz})")
    bounds = hints.get("localBszBounds")
    if bounds is not None:
        if not isinstance(bounds, (list, tuple)) or len(bounds) != 2:
            raise ValueError(f"hint 'localBszBounds' must be [min, max], got {bounds!r}")
        lo, hi = bounds
        for name, v in (("min", lo), ("max", hi)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, numbers.Real) or v < 0):
                raise ValueError(f"hint 'localBszBounds' {name} must be a number >= 0 or null, "
                                 f"got {v!r}")
        if lo and hi and lo > hi:
            raise ValueError(f"hint 'localBszBounds' min ({lo}) > max ({hi})")
        bounds = (lo, hi)
    accumulation = hints.get("gradientAccumulation", False)
    if not isinstance(accumulation, bool):
        raise TypeError(f"hint 'gradientAccumulation' must be a bool, got {accumulation!r}")
    key = (tuple(perf_params), tuple(grad_params), init_bsz, max_bsz, bounds, accumulation)
    cached = _CACHE.get(key)
    if cached is not None:
        _CACHE.move_to_end(key)
        return cached
    goodput_fn = GoodputFunction(perf_params, grad_params, int(init_bsz))
    speedup = SpeedupFunction(goodput_fn, max_bsz, bounds, accumulation)
    _CACHE[key] = speedup
    if len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return speedup


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

    profiled = 0
    if "maxProfiledReplicas" in hints:
        profiled = int(_number(hints, "maxProfiledReplicas", integer=True))
    max_replicas = max(2 * profiled, 1)
    spec_max = _spec_int(spec, "maxReplicas", None)
    if spec_max:
        max_replicas = min(max_replicas, spec_max)
    min_replicas = _spec_int(spec, "minReplicas", 0)
    max_replicas = max(max_replicas, min_replicas)
    preemptible = spec.get("preemptible", True)
    if not isinstance(preemptible, bool):
        raise TypeError(f"spec.preemptible must be a bool, got {preemptible!r}")

    if {"perfParams", "initBatchSize"} <= set(hints) and preemptible:
        speedup_fn = _speedup_from_hints(hints)
        max_batch_size = hints.get("maxBatchSize") or hints["initBatchSize"]
        bounds = hints.get("localBszBounds")
        if bounds and bounds[0]:
            min_local = bounds[0]
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
