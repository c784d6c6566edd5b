"""Autoscaling: the policy's desired cluster size as Ray resource requests.

Every round the controller turns its plan into the bundles the cluster should be
able to hold (:func:`desired_bundles`, pure) and hands them to a
:class:`ResourceRequester` (:class:`RayAutoscaler`: Ray's
``ray.autoscaler.sdk.request_resources``, sent only when they change). Ray's
autoscaler (the fake one of ``ray.cluster_utils.AutoscalingCluster``, KubeRay's,
a cloud one) then adds nodes until the bundles fit the nodes' *total*
resources, and removes nodes idle for its ``idle_timeout_minutes`` that the
request does not need; ``[]`` drops the request.

Bundles use the runtime's own resources (:mod:`goodput_jax.cluster.plan`):
``{"gj_accel": k, "gj_type_<T>": k}`` for ``k`` devices of type ``T`` on one
node, or ``{"gj_accel": k}`` when any type will do. The node types the
autoscaler starts must advertise them; nothing unique per node is needed (the
runtime places launches by Ray's node id, ``docs/cluster.md``), so every node of
a type may carry the same resources, as Ray's autoscalers start them.

What is desired:

* **Pollux** (with ``autoscale=True``): its ``desired_nodes`` nodes of the node
  template (the largest live node) when that is more than the live nodes;
* **otherwise** (Sia, which does not autoscale, or Pollux without it): the
  queue's demand, when a job is left without devices by the round: one bundle
  per node each allocated job holds (what it has), plus each waiting job's
  ``max(min_replicas, 1)`` devices in node-sized bundles (of its one allowed
  type, else of any type);
* **what the jobs hold** when no job waits and Pollux asks for no more nodes
  than there are: one bundle per node each allocated job holds. A job just
  placed on a new node does not make that node busy in the autoscaler's eyes
  until its placement group is reserved there (a round-trip through the GCS);
  a node that joined more than ``idle_timeout_minutes`` earlier would be removed
  as idle in between if the request were dropped the moment the last waiting job
  was placed (the Ray test's job launched twice, 1 run in 8). Held bundles only
  keep what is used, so they never grow the cluster;
* **nothing** (``[]``, the request released) when no job holds or waits for
  devices (the queue has emptied): idle nodes may go.

Example:
    >>> from goodput_jax.cluster.plan import NodeRecord, RoundPlan
    >>> from goodput_jax.cluster.spec import JobSpec
    >>> nodes = [NodeRecord("n0", "a", 2)]
    >>> specs = {"j1": JobSpec("j1", "m:f", min_replicas=2, max_replicas=2),
    ...          "j2": JobSpec("j2", "m:f", min_replicas=2, max_replicas=2,
    ...                        accelerator_types=("a",))}
    >>> plan = RoundPlan({"j1": ("n0", "n0"), "j2": ()}, ("j1",), "sia")
    >>> desired_bundles(plan, specs, nodes)
    [{'gj_accel': 2.0, 'gj_type_a': 2.0}, {'gj_accel': 2.0, 'gj_type_a': 2.0}]
    >>> desired_bundles(RoundPlan({"j1": ("n0", "n0")}, (), "sia"), specs, nodes)
    [{'gj_accel': 2.0, 'gj_type_a': 2.0}]
    >>> desired_bundles(RoundPlan({"j1": ()}, (), "none"), specs, [])
    [{'gj_accel': 1.0}, {'gj_accel': 1.0}]
    >>> desired_bundles(RoundPlan({}, (), "none"), specs, nodes)
    []
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Protocol

from goodput_jax.cluster.plan import ACCEL, TYPE_PREFIX, NodeRecord, RoundPlan
from goodput_jax.cluster.spec import JobSpec

__all__ = ["RayAutoscaler", "ResourceRequester", "bundle", "desired_bundles"]

logger = logging.getLogger(__name__)

Bundle = dict[str, float]


def bundle(devices: int, accelerator_type: str | None = None) -> Bundle:
    """One node's share of a demand: ``devices`` of ``gj_accel`` (and of its type).

    Example:
        >>> bundle(4, "v5e"), bundle(1)
        ({'gj_accel': 4.0, 'gj_type_v5e': 4.0}, {'gj_accel': 1.0})
    """
    if not isinstance(devices, int) or devices < 1:
        raise ValueError(f"devices ({devices!r}) must be an int >= 1")
    out = {ACCEL: float(devices)}
    if accelerator_type is not None:
        out[f"{TYPE_PREFIX}{accelerator_type}"] = float(devices)
    return out


def _chunks(need: int, size: int) -> list[int]:
    size = max(int(size), 1)
    return [size] * (need // size) + ([need % size] if need % size else [])


def desired_bundles(plan: RoundPlan, specs: Mapping[str, JobSpec],
                    nodes: Sequence[NodeRecord]) -> list[Bundle]:
    """The bundles the cluster should hold after ``plan`` (see the module doc); ``[]``
    releases the request.

    Args:
        plan: the round's plan (``allocations`` of every active job; Pollux's
            ``desired_nodes`` when it autoscales).
        specs: the active jobs' specs, by name (``min_replicas``, ``accelerator_types``).
        nodes: the live nodes the round used.
    """
    if not isinstance(plan, RoundPlan):
        raise TypeError(f"plan must be a RoundPlan, got {type(plan).__name__}")
    if not plan.allocations:
        return []
    by_label = {n.label: n for n in nodes}
    held_bundles: list[Bundle] = []
    for name in sorted(plan.allocations):
        held: dict[str, int] = {}
        for label in plan.allocations[name]:
            held[label] = held.get(label, 0) + 1
        for label, k in sorted(held.items()):
            node = by_label.get(label)
            held_bundles.append(bundle(k, node.accelerator_type if node is not None else None))
    if plan.desired_nodes is not None and nodes and plan.desired_nodes > len(nodes):
        big = max(nodes, key=lambda n: (n.devices, n.label))
        return [bundle(big.devices, big.accelerator_type)] * int(plan.desired_nodes)
    waiting = sorted(k for k, alloc in plan.allocations.items() if not alloc)
    if not waiting or plan.desired_nodes is not None:
        return held_bundles
    out = list(held_bundles)
    for name in waiting:
        spec = specs.get(name)
        need = max(spec.min_replicas, 1) if spec is not None else 1
        types = tuple(spec.accelerator_types) if spec is not None else ()
        kind = types[0] if len(types) == 1 else None
        sizes = [n.devices for n in nodes if kind is None or n.accelerator_type == kind]
        for k in _chunks(need, max(sizes) if sizes else 1):
            out.append(bundle(k, kind))
    return out


class ResourceRequester(Protocol):
    """What the controller calls once per round with :func:`desired_bundles`."""

    def request(self, bundles: list[Bundle]) -> bool:
        """Ask the cluster to be able to hold ``bundles`` (``[]``: drop the request);
        True when a request was sent."""


class RayAutoscaler:
    """:class:`ResourceRequester` through ``ray.autoscaler.sdk.request_resources``
    (in the driver or actor connected to the cluster); sends only a change.

    Attributes:
        last: the bundles last sent (None: nothing sent yet).
        sent: how many requests were sent.
    """

    def __init__(self) -> None:
        self.last: list[Bundle] | None = None
        self.sent = 0

    def request(self, bundles: list[Bundle]) -> bool:
        bundles = [dict(b) for b in bundles]
        if bundles == self.last:
            return False
        from ray.autoscaler.sdk import request_resources

        request_resources(bundles=bundles)
        logger.info("autoscaler: requested %d bundles", len(bundles))
        self.last = bundles
        self.sent += 1
        return True
