"""The controller's Ray calls on nodes: Ray's node table and the raylet probe.

* :func:`ray_nodes`: the runtime's live nodes from Ray's node table.
* :func:`raylet_gone`: whether a node's raylet still listens (a refused connection:
  gone), before Ray's health checks tell.
* :class:`RayletWatch`: the nodes jobs hold, probed; those whose raylet is gone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from goodput_jax.cluster.plan import NodeRecord, nodes_from_ray

logger = logging.getLogger(__name__)

__all__ = ["RayletWatch", "ray_nodes", "raylet_gone"]


def ray_nodes() -> list[NodeRecord]:
    """The runtime's live nodes from Ray's node table."""
    import ray

    return nodes_from_ray(ray.nodes())



def raylet_gone(node: NodeRecord, timeout: float = 0.2) -> bool | None:
    """Whether ``node``'s raylet is gone: True when nothing listens at its node manager
    port any more (the connection is refused), False when it accepts, None when that
    cannot be told (no port known, no answer within ``timeout``: a host down, a busy
    network; Ray's health checks decide those).

    A listening socket accepts connections however busy its process is (the kernel
    completes them), so a loaded raylet is never taken for a dead one; only a port
    with no listener refuses.

    Example:
        >>> raylet_gone(NodeRecord("n0", "a", 2)) is None  # no port known
        True
    """
    import socket

    if not node.port:
        return None
    s = socket.socket(socket.AF_INET6 if ":" in node.address else socket.AF_INET,
                      socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect((node.address, node.port))
        return False
    except ConnectionRefusedError:
        return True
    except OSError:
        return None
    finally:
        s.close()


class RayletWatch:
    """The nodes whose raylet was found gone, by probing the nodes jobs hold.

    Args:
        probe: tells whether a node's raylet is gone (:func:`raylet_gone`); None:
            never probe (only Ray's node table tells).
        every: seconds between two probes of one node (after an unclear answer, 5 s).

    Example:
        >>> w = RayletWatch(lambda node: node.label == "n1", every=0.5)
        >>> nodes = [NodeRecord("n0", "a", 2, "id0"), NodeRecord("n1", "a", 2, "id1")]
        >>> [n.label for n in w.live(nodes, held={"n0", "n1"}, now=0.0)], w.dead
        (['n0'], {'n1': 'id1'})
    """

    def __init__(self, probe: Callable[[NodeRecord], bool | None] | None, every: float):
        self.probe = probe
        self.every = float(every)
        #: label -> NodeID of a node whose raylet was found gone, left out of the live
        #: nodes until the node table drops it (or lists a new node under that label)
        self.dead: dict[str, str | None] = {}
        self._due: dict[str, float] = {}

    def live(self, alive: list[NodeRecord], held: set[str], now: float) -> list[NodeRecord]:
        """``alive`` less the nodes whose raylet is gone; the nodes of ``held`` are
        probed (each at most every ``every`` seconds)."""
        ids = {n.label: n.node_id for n in alive}
        self.dead = {k: v for k, v in self.dead.items() if ids.get(k, "") == v}
        if self.probe is not None:
            for node in alive:
                if node.label not in held or node.label in self.dead \
                        or self._due.get(node.label, -1.0) > now:
                    continue
                gone = self.probe(node)
                self._due[node.label] = now + (self.every if gone is not None else 5.0)
                if gone:
                    self.dead[node.label] = node.node_id
                    logger.warning("node %s: its raylet is gone (%s:%s refuses)", node.label,
                                   node.address, node.port)
        return [n for n in alive if n.label not in self.dead]
