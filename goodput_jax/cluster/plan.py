"""One controller round as plain functions: node table + hints -> policy -> changes.

No Ray here: the controller (:mod:`goodput_jax.cluster.controller`) feeds these
functions Ray's node table and the hints it read from each job's goodput store,
and so do the tests and the benchmark.

* :func:`nodes_from_ray`: Ray's ``ray.nodes()`` -> :class:`NodeRecord` per live
  node that carries the runtime's resources (``gj_accel``: devices,
  ``gj_type_<T>``: its accelerator type). Each node is named by a label: the
  Ray node label ``goodput-jax/node`` where the operator gave one (the local
  cluster's ``n0``, ``n1``, ...), else one made from Ray's node id
  (``<type>-<last 8 hex digits>``); launches are placed by Ray's node id,
  never by IP and never by a per-node custom resource.
* :func:`node_infos`: the policy's :class:`~goodput_jax.sched.NodeInfo` per node.
* :func:`job_info`: a job's :class:`~goodput_jax.sched.JobInfo` from its spec and
  latest :class:`~goodput_jax.model.hints.Hints`, with AdaptDL's rules
  (:func:`goodput_jax.sched.hints.build_job_info`: ``max_replicas`` from the
  replicas profiled so far, linear speedup without a model) and, for Sia, one
  goodput function per accelerator type
  (:func:`~goodput_jax.sched.hints.speedup_fns_by_type`). Where the hints carry
  no per-type profile, the job's one model (or the linear speedup) stands for
  every allowed type; a type the job may not use gets a goodput of 0 (Sia
  never picks it).
* :func:`plan_round`: runs the policy (Pollux on one type, Sia on several) and
  returns the new allocations and which jobs changed.

Example:
    >>> from goodput_jax.cluster.spec import JobSpec
    >>> from goodput_jax.sched import SiaPolicy
    >>> recs = [NodeRecord("n0", "a", 2), NodeRecord("n1", "b", 2)]
    >>> spec = JobSpec("j", "m:f", min_replicas=1, max_replicas=2)
    >>> jobs = {"j": job_info(spec, None, 0.0, types=("a", "b"))}
    >>> plan = plan_round(SiaPolicy(resource=ACCEL), jobs, node_infos(recs), {})
    >>> len(plan.allocations["j"]), plan.changed
    (1, ('j',))
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from goodput_jax.cluster.spec import Capacity, JobSpec
from goodput_jax.model.hints import Hints

if TYPE_CHECKING:  # (the scheduler, and with it JAX, is imported when a round runs)
    from goodput_jax.sched import JobInfo, NodeInfo, PolluxPolicy, SiaPolicy

__all__ = [
    "ACCEL",
    "NODE_ID_LABEL",
    "NODE_LABEL",
    "NODE_PREFIX",
    "TYPE_PREFIX",
    "NodeRecord",
    "RoundPlan",
    "capacity_of",
    "check_allocation",
    "group_allocation",
    "job_info",
    "node_infos",
    "nodes_from_ray",
    "parse_allocation",
    "plan_round",
]

#: Ray custom resource: accelerator devices of a node (one per replica).
ACCEL = "gj_accel"
#: Ray custom resource prefix naming a node's accelerator type.
TYPE_PREFIX = "gj_type_"
#: Ray node label that names a node (optional: without it the name is made from
#: Ray's node id). ``ray start --labels goodput-jax/node=n0``.
NODE_LABEL = "goodput-jax/node"
#: Ray custom resource prefix that named a node before Ray had node labels
#: (``gj_node_<label>: 1``); still read as a name, never required.
NODE_PREFIX = "gj_node_"
#: Ray's own node label holding its node id (every node has it; launches are pinned
#: to nodes by it, ``bundle_label_selector``).
NODE_ID_LABEL = "ray.io/node-id"


@dataclass(frozen=True)
class NodeRecord:
    """One node of the cluster as the runtime sees it.

    Attributes:
        label: its name: the Ray node label ``goodput-jax/node`` (:data:`NODE_LABEL`)
            where given, else ``<type>-<last 8 hex digits of its node id>``.
        accelerator_type: its type (the ``gj_type_<T>`` resource).
        devices: its accelerator devices (``gj_accel``).
        node_id: Ray's NodeID (hex), when known.
        address: Ray's node manager address (for the JAX coordinator).
        preemptible: whether it may disappear (spot).
        port: Ray's node manager (raylet) port at ``address``, when known (the
            controller probes it to see a dead raylet before Ray's health checks do).
    """

    label: str
    accelerator_type: str
    devices: int
    node_id: str | None = None
    address: str = "127.0.0.1"
    preemptible: bool = False
    port: int | None = None


def nodes_from_ray(table: Sequence[Mapping[str, Any]]) -> list[NodeRecord]:
    """Live runtime nodes from ``ray.nodes()`` (nodes without ``gj_accel`` are skipped;
    ``Any``: the rows are Ray's JSON-like node table).

    A node needs ``gj_accel`` and one ``gj_type_<T>`` resource, nothing unique to it:
    every node of an autoscaler's node type (or a KubeRay worker group) may carry the
    same resources. Its label is the Ray node label ``goodput-jax/node`` when set
    (else a legacy ``gj_node_<label>`` resource), otherwise ``<type>-<last 8 hex
    digits of its node id>`` (the whole id where two live nodes would share that).

    Example:
        >>> nodes_from_ray([{"Alive": True, "NodeID": "ab12cd34ef", "NodeManagerPort": 40123,
        ...     "NodeManagerAddress": "127.0.0.1",
        ...     "Resources": {"CPU": 2.0, "gj_accel": 2.0, "gj_type_t4": 2.0}}])
        [NodeRecord(label='t4-12cd34ef', accelerator_type='t4', devices=2, \
node_id='ab12cd34ef', address='127.0.0.1', preemptible=False, port=40123)]
    """
    found = []
    for node in table:
        if not node.get("Alive", False):
            continue
        res = node.get("Resources") or {}
        devices = int(res.get(ACCEL, 0))
        if devices < 1:
            continue
        types = [k[len(TYPE_PREFIX):] for k in res if k.startswith(TYPE_PREFIX)]
        if len(types) != 1:
            raise ValueError(f"node {node.get('NodeID')!r} must carry exactly one "
                             f"{TYPE_PREFIX}* resource, got {sorted(res)}")
        node_id = str(node.get("NodeID") or "")
        given = (node.get("Labels") or {}).get(NODE_LABEL) or next(
            (k[len(NODE_PREFIX):] for k in res if k.startswith(NODE_PREFIX)), None)
        found.append((given, types[0], node_id, devices, node, res))
    short = [f"{t}-{nid[-8:]}" for given, t, nid, *_ in found]
    out = []
    for (given, t, nid, devices, node, res), s in zip(found, short):
        label = given or (s if short.count(s) == 1 else f"{t}-{nid}")
        port = node.get("NodeManagerPort")
        out.append(NodeRecord(label, t, devices, nid or None,
                              node.get("NodeManagerAddress") or "127.0.0.1",
                              bool(res.get("gj_preemptible", 0)),
                              int(port) if isinstance(port, int) and port > 0 else None))
    return sorted(out, key=lambda r: r.label)


def capacity_of(records: Sequence[NodeRecord]) -> Capacity:
    """The :class:`Capacity` (``{type: (nodes, devices of its largest node)}``) of records.

    Example:
        >>> capacity_of([NodeRecord("n0", "a", 2), NodeRecord("n1", "a", 2)]).by_type
        {'a': (2, 2)}
    """
    by: dict[str, list[int]] = {}
    for r in records:
        by.setdefault(r.accelerator_type, []).append(r.devices)
    return Capacity({t: (len(d), max(d)) for t, d in sorted(by.items())})


def node_infos(records: Sequence[NodeRecord]) -> dict[str, NodeInfo]:
    """``{label: NodeInfo({ACCEL: devices}, preemptible, accelerator_type)}``."""
    from goodput_jax.sched import NodeInfo

    return {r.label: NodeInfo({ACCEL: r.devices}, r.preemptible, r.accelerator_type)
            for r in records}


def job_info(spec: JobSpec, hints: Hints | Mapping[str, Any] | None, created: float, *,
             types: Sequence[str] = (), num_restarts: int = 0, restarting: bool = False,
             age: float | None = None) -> JobInfo:
    """The policy's JobInfo of one job (AdaptDL's rules; Sia's goodput per type).

    Through :func:`goodput_jax.sched.hints.build_job_info` with the job's
    :class:`~goodput_jax.sched.hints.JobFacts` (one replica = one ``gj_accel``).

    Args:
        spec: the job's spec (min/max replicas, preemptible, allowed types).
        hints: its latest published hints (None before the first publish); a mapping is
            their JSON form (``Any``: JSON values).
        created: submission time (POSIX seconds).
        types: the cluster's accelerator types (for ``goodput_fns``).
        num_restarts: restarts so far (the policies' restart penalty).
        restarting: it is between a stop and its relaunch (Sia keeps it in place).
        age: seconds since submission (None: the policy's clock decides).

    Example:
        >>> from goodput_jax.cluster.spec import JobSpec
        >>> info = job_info(JobSpec("j", "m:f", min_replicas=2, max_replicas=8), None, 0.0)
        >>> info.min_replicas, info.max_replicas, info.speedup_fn(1, 3)
        (2, 2, 3)
    """
    from goodput_jax.sched.hints import JobFacts, build_job_info

    facts = JobFacts(created, {ACCEL: 1}, min_replicas=spec.min_replicas,
                     max_replicas=spec.max_replicas, preemptible=spec.preemptible, age=age,
                     num_restarts=num_restarts, restarting=restarting,
                     cluster_types=tuple(types), allowed_types=tuple(spec.accelerator_types))
    return build_job_info(hints, facts)


@dataclass(frozen=True)
class RoundPlan:
    """A round's outcome.

    Attributes:
        allocations: job -> node labels, one per replica (sorted), every job present.
        changed: jobs whose allocation differs from the current one (sorted).
        policy: ``"pollux"`` or ``"sia"``.
        desired_nodes: Pollux's cluster size for autoscaling (a
            ``PolluxPolicy(autoscale=True)``); None otherwise.
    """

    allocations: Mapping[str, tuple[str, ...]]
    changed: tuple[str, ...]
    policy: str
    desired_nodes: int | None = None


def plan_round(policy: PolluxPolicy | SiaPolicy, jobs: Mapping[str, JobInfo],
               nodes: Mapping[str, NodeInfo], current: Mapping[str, Sequence[str]]) -> RoundPlan:
    """Run ``policy`` (a PolluxPolicy or SiaPolicy) once and diff against ``current``.

    ``allocations`` are exactly the policy's own output (sorted per job), so a
    test can compare them with a direct ``policy.optimize`` call.
    """
    from goodput_jax.sched import NodeInfo, PolluxPolicy, SiaPolicy

    if not jobs:
        return RoundPlan({}, (), "none")
    cur = {k: list(current.get(k, ()) or ()) for k in jobs}
    desired: int | None
    if isinstance(policy, PolluxPolicy):
        types = {n.accelerator_type for n in nodes.values()}
        if len(types) > 1:
            raise ValueError(f"policy: PolluxPolicy schedules one accelerator type, the "
                             f"cluster has {sorted(map(str, types))}; use SiaPolicy")
        big = max(nodes.values(), key=lambda n: n.resources.get(ACCEL, 0))
        template = NodeInfo(dict(big.resources), False, big.accelerator_type)
        alloc, size = policy.optimize(jobs, nodes, cur, template)
        desired = int(size) if policy.autoscale else None
        name = "pollux"
    elif isinstance(policy, SiaPolicy):
        alloc = policy.optimize(jobs, nodes, cur)
        desired = None
        name = "sia"
    else:
        raise TypeError(f"policy must be a PolluxPolicy or SiaPolicy, got "
                        f"{type(policy).__name__}")
    out = {k: tuple(sorted(alloc.get(k, ()) or ())) for k in jobs}
    changed = tuple(sorted(k for k in jobs if out[k] != tuple(sorted(cur[k]))))
    return RoundPlan(out, changed, name, desired)


def group_allocation(allocation: Sequence[str]) -> list[tuple[str, int]]:
    """Replicas per node, the first replica's node first (it hosts rank 0).

    Example:
        >>> group_allocation(["n1", "n0", "n1"])
        [('n1', 2), ('n0', 1)]
    """
    counts: dict[str, int] = {}
    for n in allocation:
        counts[n] = counts.get(n, 0) + 1
    first = allocation[0] if allocation else None
    return sorted(counts.items(), key=lambda kv: (kv[0] != first, -kv[1], kv[0]))


def parse_allocation(text: str) -> list[str]:
    """``"n0:2,n1"`` -> ``["n0", "n0", "n1"]`` (node labels, one per replica).

    Example:
        >>> parse_allocation("n1:2,n0")
        ['n1', 'n1', 'n0']
        >>> parse_allocation("n1:x")
        Traceback (most recent call last):
        ...
        ValueError: to ('n1:x'): each entry is LABEL or LABEL:REPLICAS with REPLICAS >= 1
    """
    out: list[str] = []
    for part in str(text).split(","):
        label, sep, k = part.strip().partition(":")
        if not label or (sep and (not k.isdigit() or int(k) < 1)):
            raise ValueError(f"to ({text!r}): each entry is LABEL or LABEL:REPLICAS with "
                             f"REPLICAS >= 1")
        out += [label] * (int(k) if sep else 1)
    return out


def check_allocation(name: str, spec: JobSpec | None, allocation: Sequence[str],
                     nodes: Sequence[NodeRecord], used: Mapping[str, int]) -> None:
    """Refuse (one line) a move of job ``name`` to ``allocation`` (node labels, one per
    replica) that cannot run: an unknown node, a replica count outside the spec's
    bounds, nodes of several types, a type the job may not use, or a node without
    that many free devices (``used``: devices the other jobs hold per node).

    Example:
        >>> check_allocation("j", JobSpec("j", "m:f", max_replicas=2), ["n0", "n0"],
        ...                  [NodeRecord("n0", "a", 2)], {"n0": 1})
        Traceback (most recent call last):
        ...
        ValueError: allocation: node 'n0' has 1 free devices, 2 asked
    """
    by_label = {n.label: n for n in nodes}
    bad = [n for n in allocation if n not in by_label]
    if bad:
        raise ValueError(f"allocation: unknown node {bad[0]!r} (the cluster has: "
                         f"{', '.join(sorted(by_label)) or 'none'})")
    if not allocation or spec is None:
        return
    if not spec.min_replicas <= len(allocation) <= spec.max_replicas:
        raise ValueError(f"allocation ({len(allocation)} replicas) must be within "
                         f"{spec.min_replicas}-{spec.max_replicas} for job {name!r}")
    types = {by_label[n].accelerator_type for n in allocation}
    if len(types) > 1:
        raise ValueError(f"allocation: nodes of one type only, got {sorted(types)}")
    t = types.pop()
    if spec.accelerator_types and t not in spec.accelerator_types:
        raise ValueError(f"allocation: type {t!r} is not one of the types of job {name!r} "
                         f"({', '.join(spec.accelerator_types)})")
    for label, k in group_allocation(allocation):
        free = by_label[label].devices - used.get(label, 0)
        if k > free:
            raise ValueError(f"allocation: node {label!r} has {free} free devices, "
                             f"{k} asked")
