"""Ray's fake multi-node provider, each node labelled as the runtime needs (tests only).

Ray's autoscaler starts every node of a type with that type's resources, but the
runtime addresses nodes by a ``gj_node_<label>`` resource unique per node
(``docs/cluster.md``; on KubeRay it comes from the pod's name). This provider adds
``gj_node_<type>-<n>`` to each node it starts. The autoscaler's monitor loads it
through ``provider: {type: external, module: tests.cluster._fake_provider.LabelledFakeProvider}``
(needs ``RAY_FAKE_CLUSTER=1`` and this repository on ``PYTHONPATH``).
"""

from __future__ import annotations

from ray.autoscaler._private.fake_multi_node.node_provider import FakeMultiNodeProvider
from ray.autoscaler.tags import TAG_RAY_USER_NODE_TYPE

from goodput_jax.cluster.plan import NODE_PREFIX


class LabelledFakeProvider(FakeMultiNodeProvider):
    def _create_node_with_resources_and_labels(self, node_config, tags, count, resources,
                                               labels):
        with self.lock:  # an RLock: the parent takes it again
            label = f"{tags[TAG_RAY_USER_NODE_TYPE]}-{self._next_node_id + 1}"
            super()._create_node_with_resources_and_labels(
                node_config, tags, count, {**resources, f"{NODE_PREFIX}{label}": 1}, labels)
