"""Ray's fake multi-node provider, each node labelled as the runtime needs (tests only).

Ray's autoscaler starts every node of a type with that type's resources, but the
runtime addresses nodes by a ``gj_node_<label>`` resource unique per node
(``docs/cluster.md``; on KubeRay it comes from the pod's name). This provider adds
``gj_node_<type>-<n>`` to each node it starts. The autoscaler's monitor loads it
through ``provider: {type: external, module: tests.cluster._fake_provider.LabelledFakeProvider}``
(needs ``RAY_FAKE_CLUSTER=1`` and this repository on ``PYTHONPATH``).

It also lists a node from the moment it is asked for, as a cloud provider lists an
instance from its create call on, and starts the node's raylet after that, outside
its lock. Ray's ``FakeMultiNodeProvider`` starts each raylet (seconds on a loaded
2-core machine) under its lock and lists the node only then, one node at a time:
the autoscaler's update could read the node list between two of them (one node
short) after the launcher had already taken the launch off its pending count, and
launch one node too many (a fourth beside ``max_workers=3``, seen in ``monitor.log``
as "Queue 1 new nodes" right after "Launching 2 nodes", then removed for
"max workers"; 2 runs in 8 of tests/cluster/test_autoscale_ray.py).
"""

from __future__ import annotations

import copy
import json

import ray
from ray._private import ray_constants
from ray.autoscaler._private.fake_multi_node.node_provider import FakeMultiNodeProvider
from ray.autoscaler.tags import (
    NODE_KIND_WORKER,
    STATUS_UP_TO_DATE,
    TAG_RAY_NODE_KIND,
    TAG_RAY_NODE_NAME,
    TAG_RAY_NODE_STATUS,
    TAG_RAY_USER_NODE_TYPE,
)

from goodput_jax.cluster.plan import NODE_PREFIX


class LabelledFakeProvider(FakeMultiNodeProvider):
    def create_node_with_resources_and_labels(self, node_config, tags, count, resources,
                                              labels):
        if self._creation_error:
            raise self._creation_error
        node_type = tags[TAG_RAY_USER_NODE_TYPE]
        todo = []
        with self.lock:  # every node of the call is listed at once
            for _ in range(count if self._launch_multiple else 1):
                node_id = self._next_hex_node_id()
                label = f"{node_type}-{self._next_node_id}"
                self._nodes[node_id] = {"tags": {  # the parent's tags, in its order
                    TAG_RAY_NODE_KIND: NODE_KIND_WORKER, TAG_RAY_USER_NODE_TYPE: node_type,
                    TAG_RAY_NODE_NAME: node_id, TAG_RAY_NODE_STATUS: STATUS_UP_TO_DATE,
                    **tags}, "node": None}
                todo.append((node_id, label))
        for node_id, label in todo:  # then their raylets, outside the lock
            node = self._start(node_id, node_type,
                               {**resources, f"{NODE_PREFIX}{label}": 1}, labels)
            with self.lock:
                entry = self._nodes.get(node_id)
                if entry is not None:
                    entry["node"] = node
            if entry is None:  # terminated while it started
                node.kill_all_processes(check_alive=False, allow_graceful=True)

    def _terminate_node(self, node):
        if node["node"] is not None:  # else the starter ends it once started
            super()._terminate_node(node)

    def _start(self, node_id, node_type, resources, labels):
        """A raylet as FakeMultiNodeProvider starts one (its ``gcs_address`` is set)."""
        resources = copy.deepcopy(resources)
        params = ray._private.parameter.RayParams(
            min_worker_port=0, max_worker_port=0, dashboard_port=None,
            dashboard_agent_listen_port=0, num_cpus=resources.pop("CPU", 0),
            num_gpus=resources.pop("GPU", 0),
            object_store_memory=resources.pop("object_store_memory", None),
            resources=resources, labels=labels, redis_address=self._gcs_address,
            gcs_address=self._gcs_address,
            env_vars={
                "RAY_OVERRIDE_NODE_ID_FOR_TESTING": node_id,
                "RAY_CLOUD_INSTANCE_ID": node_id,
                "RAY_NODE_TYPE_NAME": node_type,
                ray_constants.RESOURCES_ENVIRONMENT_VARIABLE: json.dumps(resources),
                ray_constants.LABELS_ENVIRONMENT_VARIABLE: json.dumps(labels),
            })
        return ray._private.node.Node(params, head=False, shutdown_at_exit=False,
                                      spawn_reaper=False)
