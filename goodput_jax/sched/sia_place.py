"""Sia's candidate configurations of a cluster, and their placement onto concrete nodes.

:func:`sia_configs` lists the (type, nodes, GPUs) configurations a job may get
(:class:`SiaConfigs`); after :class:`~goodput_jax.sched.sia.SiaPolicy` chose one per job,
:func:`place` maps the choices onto node keys: unchanged allocations keep their nodes,
multi-node jobs take whole free nodes, smaller ones are packed best-fit.

Example:
    >>> c = sia_configs({"t4": (2, 4)})
    >>> place({"a": 3}, c, {"t4": ["n0", "n1"]}, {"n0": 4, "n1": 4}, {})["a"].count("n1")
    4
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from goodput_jax.sched.types import JobKey, NodeKey

__all__ = ["SiaConfigs", "place", "sia_configs"]


@dataclass(frozen=True)
class SiaConfigs:
    """Sia's candidate configurations of a cluster.

    Attributes:
        types: accelerator type names (index order of ``ctype`` and ``capacity``).
        ctype, nodes, gpus: int arrays ``[configs]``.
        capacity: GPUs per type, float array ``[types]``.
        gpus_per_node: GPUs per node of each type.
    """

    types: tuple[str, ...]
    ctype: np.ndarray
    nodes: np.ndarray
    gpus: np.ndarray
    capacity: np.ndarray
    gpus_per_node: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.gpus)

    def label(self, k: int) -> str:
        """``"type:GPUs"`` of configuration ``k``.

        Example:
            >>> sia_configs({"t4": (2, 4)}).label(3)
            't4:8'
        """
        return f"{self.types[self.ctype[k]]}:{self.gpus[k]}"


def sia_configs(cluster: Mapping[str, tuple[int, int]], max_config_gpus: int = 64) -> SiaConfigs:
    """Candidate configurations: 1, 2, 4 GPUs (below the node size), then whole nodes.

    Args:
        cluster: type -> ``(num_nodes, gpus_per_node)``.
        max_config_gpus: largest configuration (the artifact's 64).

    Example:
        >>> c = sia_configs({"t4": (6, 4), "a100": (2, 8)})
        >>> [c.label(k) for k in range(len(c))]   # doctest: +NORMALIZE_WHITESPACE
        ['t4:1', 't4:2', 't4:4', 't4:8', 't4:12', 't4:16', 't4:20', 't4:24',
         'a100:1', 'a100:2', 'a100:4', 'a100:8', 'a100:16']
    """
    if not cluster:
        raise ValueError("cluster is empty: give at least one accelerator type")
    types, ctype, nodes, gpus, cap, per_node = [], [], [], [], [], []
    for t, (name, (n, g)) in enumerate(cluster.items()):
        if int(n) < 1 or int(g) < 1:
            raise ValueError(f"cluster[{name!r}] = ({n}, {g}): need >= 1 node of >= 1 GPU")
        types.append(str(name))
        cap.append(float(n * g))
        per_node.append(int(g))
        counts = [(1, c) for c in (1, 2, 4) if c < g] + [(k, k * g) for k in range(1, n + 1)]
        for nn, c in counts:
            if c <= max_config_gpus:
                ctype.append(t)
                nodes.append(nn)
                gpus.append(c)
    return SiaConfigs(tuple(types), np.asarray(ctype, np.int32), np.asarray(nodes, np.int32),
                      np.asarray(gpus, np.int32), np.asarray(cap, np.float32), tuple(per_node))


# --------------------------------------------------------------------------- #
# Placement onto concrete nodes.
# --------------------------------------------------------------------------- #


def _try_place(requests: Mapping[JobKey, int], node_keys: Sequence[NodeKey],
               node_gpus: Sequence[int], kept: Mapping[JobKey, list[NodeKey]]
               ) -> dict[JobKey, list[NodeKey]] | None:
    """Kept placements stay; the others go whole-node first, then best fit, largest first."""
    free = dict(zip(node_keys, node_gpus))
    size = max(node_gpus)
    for old in kept.values():
        for n in old:
            free[n] -= 1
    out = dict(kept)
    rest = sorted((k for k in requests if k not in kept), key=lambda k: -requests[k])
    for key in rest:
        g = requests[key]
        placement: list[NodeKey] = []
        if g >= size:
            whole = [n for n in node_keys if free[n] == size]
            k = -(-g // size)
            if len(whole) < k:
                return None
            for n in whole[:k]:
                take = min(size, g - len(placement))
                placement += [n] * take
                free[n] -= take
        else:
            fits = [n for n in node_keys if free[n] >= g]
            if not fits:
                return None
            n = min(fits, key=lambda n: free[n])  # best fit
            placement = [n] * g
            free[n] -= g
        out[key] = placement
    return out


def _place_type(requests: Mapping[JobKey, int], node_keys: Sequence[NodeKey],
                node_gpus: Sequence[int], prev: Mapping[JobKey, Sequence[NodeKey]]
                ) -> dict[JobKey, list[NodeKey]] | None:
    """Places ``{job: gpus}`` onto the nodes of one type; None if it does not fit.

    Jobs whose GPU count is unchanged keep their nodes. When the kept small jobs fragment
    the nodes, the fewest of them move: first those on the least-used nodes, as many as the
    new whole-node jobs need; then every small one; only then is the type repacked.
    """
    capacity = dict(zip(node_keys, node_gpus))
    size = max(node_gpus)
    kept: dict[JobKey, list[NodeKey]] = {}
    used = {n: 0 for n in node_keys}
    for key, g in requests.items():
        old = list(prev.get(key, ()))
        if len(old) == g and all(n in capacity for n in old):
            need: dict[NodeKey, int] = {}
            for n in old:
                need[n] = need.get(n, 0) + 1
            if all(capacity[n] - used[n] >= c for n, c in need.items()):
                for n, c in need.items():
                    used[n] += c
                kept[key] = old
    out = _try_place(requests, node_keys, node_gpus, kept)
    if out is not None:
        return out
    small = {k: v for k, v in kept.items() if len(v) < size}
    # Free as many whole nodes as the new multi-node jobs need, from the least-used nodes.
    deficit = sum(-(-requests[k] // size) for k in requests
                  if k not in kept and requests[k] >= size)
    deficit -= sum(1 for n in node_keys if used[n] == 0)
    if deficit > 0:
        on_node: dict[NodeKey, list[JobKey]] = {}
        for k, v in small.items():
            for n in set(v):
                on_node.setdefault(n, []).append(k)
        whole_kept = {n for k, v in kept.items() if len(v) >= size for n in v}
        order = sorted((n for n in on_node if n not in whole_kept), key=lambda n: used[n])
        trimmed = dict(kept)
        for n in order[:deficit]:
            for k in on_node[n]:
                trimmed.pop(k, None)
        out = _try_place(requests, node_keys, node_gpus, trimmed)
        if out is not None:
            return out
    out = _try_place(requests, node_keys, node_gpus,
                     {k: v for k, v in kept.items() if k not in small})
    if out is not None:
        return out
    return _try_place(requests, node_keys, node_gpus, {})


def place(choices: Mapping[JobKey, int], configs: SiaConfigs,
          nodes_by_type: Mapping[str, Sequence[NodeKey]], gpus_of: Mapping[NodeKey, int],
          prev: Mapping[JobKey, Sequence[NodeKey]]) -> dict[JobKey, list[NodeKey]]:
    """Concrete node lists for the chosen configurations (keeps unchanged ones in place).

    Args:
        choices: job -> configuration index (or -1).
        configs: the candidate configurations.
        nodes_by_type: type -> node keys.
        gpus_of: node key -> GPUs.
        prev: job -> previous node list.

    Example:
        >>> c = sia_configs({"t4": (2, 4)})
        >>> place({"a": 3, "b": -1}, c, {"t4": ["n0", "n1"]}, {"n0": 4, "n1": 4}, {})
        {'a': ['n0', 'n0', 'n0', 'n0', 'n1', 'n1', 'n1', 'n1'], 'b': []}
    """
    out: dict[JobKey, list[NodeKey]] = {key: [] for key in choices}
    for t, name in enumerate(configs.types):
        requests = {key: int(configs.gpus[k]) for key, k in choices.items()
                    if k >= 0 and configs.ctype[k] == t}
        if not requests:
            continue
        keys = list(nodes_by_type[name])
        gpus = [int(gpus_of[n]) for n in keys]
        placed = _place_type(requests, keys, gpus, prev)
        if placed is None:
            raise RuntimeError(f"placement failed on type {name!r}: {requests}")
        out.update(placed)
    return out
