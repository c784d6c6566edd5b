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

The typed route is :func:`build_job_info`: a :class:`~goodput_jax.model.hints.Hints`
(or its JSON) plus the scheduler's own facts about the job (:class:`JobFacts`:
creation time, per-replica resources, replica bounds, preemptibility, age,
restarts, the cluster's accelerator types) -> JobInfo. AdaptDL's Kubernetes
form (:func:`job_info_from_hints`, an ``AdaptDLJob`` dict) is a thin wrapper
that reads its facts from the dict and calls it.

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from goodput_jax.model.hints import PERF_PARAM_KEYS, Hints, max_replicas_allowed
from goodput_jax.model.types import GradParams, PerfParams
from goodput_jax.sched.speedup import SpeedupFunction
from goodput_jax.sched.types import JobInfo, JobOptions

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike

_R = TypeVar("_R")

__all__ = [
    "PERF_PARAM_KEYS",
    "JobFacts",
    "build_job_info",
    "job_info_from_hints",
    "linear_speedup",
    "no_goodput",
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


def linear_speedup(num_nodes: object, num_replicas: _R) -> _R:
    """Speedup of a job without a model: proportional to its replicas (returned as given:
    an int, or an array of them).

    Example:
        >>> linear_speedup(1, 4)
        4
    """
    return num_replicas


def parse_quantity(value: object, key: str = "quantity") -> float:
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
    if perf_params is None or h.init_batch_size is None:
        raise ValueError("a speedup model needs hints with perfParams and initBatchSize")
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
    h = hints if isinstance(hints, Hints) else Hints.from_json(hints)
    if h.init_batch_size is None:
        return {}
    out = {}
    for name in accelerator_types:
        perf = h.perf_params_for(name)
        if perf is not None:
            out[name] = _speedup_from_hints(h, perf)
    return out


def no_goodput(num_nodes: object, num_replicas: ArrayLike) -> float | np.ndarray:
    """Goodput of an accelerator type a job may not use: 0 everywhere (Sia never picks it).

    Example:
        >>> no_goodput(1, 4), no_goodput(1, [1, 2]).tolist()
        (0.0, [0.0, 0.0])
    """
    import numpy as np

    out = np.zeros(np.shape(num_replicas))
    return float(out) if out.ndim == 0 else out


def _check_int(name: str, value: Any, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < lo:
        raise ValueError(f"JobFacts.{name} must be an integer >= {lo}, got {value!r}")
    return int(value)


def _check_types(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple, frozenset, set)):
        raise ValueError(f"JobFacts.{name} must be a sequence of accelerator types, "
                         f"got {value!r}")
    for t in value:
        if not isinstance(t, str) or not t:
            raise ValueError(f"JobFacts.{name} must hold non-empty str, got {t!r}")
    return tuple(sorted(set(value))) if isinstance(value, (set, frozenset)) else tuple(value)


@dataclass(frozen=True)
class JobFacts:
    """What the scheduler knows about a job besides its published hints.

    The job's current allocation is not here: policies take it as their own
    argument (``prev_allocs``); a JobInfo describes the job, not where it runs.

    Attributes:
        created: submission time (a ``datetime`` or POSIX seconds).
        resources: what one replica needs, e.g. ``{"gj_accel": 1}`` or
            ``{"nvidia.com/gpu": 1, "pods": 1}``.
        min_replicas: fewest replicas it can run with (0 or more).
        max_replicas: most replicas the user allows (None: no cap beyond the
            hints' rule).
        preemptible: whether the policy may stop or move it once it runs
            (a non-preemptible job also gets a linear speedup, AdaptDL's rule).
        age: seconds since submission (None: the policy's clock decides).
        num_restarts: restarts so far (the restart penalty).
        restarting: between a stop and its relaunch (Sia keeps it in place).
        restart_penalty: seconds one restart costs (None: the policy's default).
        cluster_types: the cluster's accelerator types; when given, the JobInfo
            carries one goodput function per type (Sia's ``goodput_fns``).
        allowed_types: the types the job may use (empty: every type); a type
            outside it gets :func:`no_goodput`.

    Example:
        >>> JobFacts(0.0, {"gj_accel": 1}, max_replicas=4).max_replicas
        4
        >>> JobFacts(0.0, {"gj_accel": 1}, min_replicas=-1)
        Traceback (most recent call last):
        ...
        ValueError: JobFacts.min_replicas must be an integer >= 0, got -1
    """

    created: float | datetime
    resources: Mapping[str, float]
    min_replicas: int = 0
    max_replicas: int | None = None
    preemptible: bool = True
    age: float | None = None
    num_restarts: int = 0
    restarting: bool = False
    restart_penalty: float | None = None
    cluster_types: tuple[str, ...] = ()
    allowed_types: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if not isinstance(self.created, datetime) and (
                isinstance(self.created, bool) or not isinstance(self.created, numbers.Real)
                or not math.isfinite(self.created)):
            raise ValueError(f"JobFacts.created must be a datetime or POSIX seconds, "
                             f"got {self.created!r}")
        if not isinstance(self.resources, Mapping):
            raise ValueError(f"JobFacts.resources must be a mapping of resource to amount, "
                             f"got {self.resources!r}")
        _check_int("min_replicas", self.min_replicas, 0)
        if self.max_replicas is not None:
            _check_int("max_replicas", self.max_replicas, 1)
        _check_int("num_restarts", self.num_restarts, 0)
        for name in ("preemptible", "restarting"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"JobFacts.{name} must be a bool, got "
                                 f"{getattr(self, name)!r}")
        for name in ("age", "restart_penalty"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool)
                                      or not isinstance(value, numbers.Real)
                                      or not math.isfinite(value)
                                      or (name == "restart_penalty" and value < 0)):
                raise ValueError(f"JobFacts.{name} must be a finite number of seconds or "
                                 f"None, got {value!r}")
        object.__setattr__(self, "resources", dict(self.resources))
        object.__setattr__(self, "cluster_types", _check_types("cluster_types",
                                                               self.cluster_types))
        object.__setattr__(self, "allowed_types", _check_types("allowed_types",
                                                               self.allowed_types))


def build_job_info(hints: Hints | Mapping[str, Any] | None, facts: JobFacts) -> JobInfo:
    """A job's JobInfo from its published hints and the scheduler's facts (AdaptDL's rules).

    * ``max_replicas = max(2 * maxProfiledReplicas, 1)``, capped by
      ``facts.max_replicas``, raised to ``facts.min_replicas``;
    * with a step-time model (``perfParams`` and ``initBatchSize``) and a
      preemptible job: the model's memoised SpeedupFunction, and
      ``max_replicas`` cut so each replica keeps at least ``localBszBounds[0]``
      examples; otherwise a linear speedup;
    * with ``facts.cluster_types``: ``goodput_fns`` per type, the type's fitted
      or bootstrapped model (``perfParamsByType``/``minThroughputByType``)
      where the hints have one, else the job's one speedup function, and
      :func:`no_goodput` for a type outside ``facts.allowed_types``.

    Args:
        hints: the latest published hints (a Hints, its JSON, or None before the
            first publish); the JSON's values are ``Any`` (parsed JSON, checked by
            :meth:`~goodput_jax.model.hints.Hints.from_json`).
        facts: the job's scheduling facts.

    Raises:
        ValueError / TypeError: malformed hints (naming the key) or facts.

    Example:
        >>> facts = JobFacts(0.0, {"gj_accel": 1}, min_replicas=1, max_replicas=8,
        ...                  cluster_types=("a", "b"), allowed_types=("a",))
        >>> info = build_job_info({"maxProfiledReplicas": 2}, facts)
        >>> info.max_replicas, info.speedup_fn(1, 3), info.goodput_fns["b"](1, 3)
        (4, 3, 0.0)
    """
    if not isinstance(facts, JobFacts):
        raise TypeError(f"facts must be a JobFacts, got {type(facts).__name__}")
    h = Hints() if hints is None else hints if isinstance(hints, Hints) else Hints.from_json(hints)
    max_replicas = max_replicas_allowed(h.max_profiled_replicas)
    if facts.max_replicas is not None:
        max_replicas = min(max_replicas, facts.max_replicas)
    min_replicas = facts.min_replicas
    max_replicas = max(max_replicas, min_replicas)

    speedup_fn: Callable
    if h.perf_params is not None and h.init_batch_size is not None and facts.preemptible:
        speedup_fn = _speedup_from_hints(h)
        max_batch_size = h.max_batch_size or h.init_batch_size
        if h.local_bsz_bounds and h.local_bsz_bounds[0]:
            min_local = h.local_bsz_bounds[0]
            if max_batch_size < min_local * max_replicas:
                max_replicas = max(int(max_batch_size / min_local), min_replicas, 1)
    else:
        speedup_fn = linear_speedup

    fns: dict[str, Callable] = {}
    if facts.cluster_types:
        allowed = [t for t in facts.cluster_types
                   if not facts.allowed_types or t in facts.allowed_types]
        fitted = speedup_fns_by_type(h, allowed) if h.perf_params_by_type else {}
        for t in facts.cluster_types:
            fns[t] = fitted.get(t, speedup_fn) if t in allowed else no_goodput
    return JobInfo(facts.resources, speedup_fn, facts.created, min_replicas, max_replicas,
                   facts.preemptible,
                   options=JobOptions(age=facts.age, num_restarts=facts.num_restarts,
                                      goodput_fns=fns or None, restarting=facts.restarting,
                                      restart_penalty=facts.restart_penalty))



def job_info_from_hints(job: Mapping, resources: Mapping[str, float] | None = None) -> JobInfo:
    """Builds the policy's view of one job from its spec and published hints.

    Args:
        job: ``{"metadata": {"creationTimestamp": ISO-8601},
            "spec": {"template": {"spec": pod spec}, "minReplicas", "maxReplicas",
            "preemptible"}, "status": {"train": hints}}``; ``status`` may be absent.
        resources: per-replica resources; by default taken from the pod spec
            (:func:`pod_requests`).

    Returns:
        The JobInfo (speedup from the goodput model, or linear): the dict's
        facts as a :class:`JobFacts`, passed to :func:`build_job_info`.

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
    spec_max = _spec_int(spec, "maxReplicas", None)
    min_replicas = _spec_int(spec, "minReplicas", 0)
    if min_replicas is None:
        raise ValueError("spec.minReplicas must be a non-negative integer, got None")
    preemptible = spec.get("preemptible", True)
    if not isinstance(preemptible, bool):
        raise TypeError(f"spec.preemptible must be a bool, got {preemptible!r}")
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
    # spec.maxReplicas 0 means "no cap" in AdaptDL's CRD
    facts = JobFacts(created, resources, min_replicas=min_replicas,
                     max_replicas=spec_max or None, preemptible=preemptible)
    return build_job_info(h, facts)
