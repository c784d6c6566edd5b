"""Sia: a heterogeneity-aware, goodput-driven cluster policy, solved in JAX.

Sia (Jayaram Subramanya et al., SOSP'23) gives every job at most one
*configuration* ``(accelerator type, nodes, GPUs)`` per round. The candidates
per type are 1, 2 and 4 GPUs on one node, then whole nodes (multiples of the
node size) up to the type's capacity (and at most ``max_config_gpus``). With
``G[j, c]`` the job's goodput in configuration ``c``, normalised by its smallest
non-zero goodput over all configurations, and ``r_j`` Pollux's re-allocation
factor ``max(age - restarts * penalty, 0) / (age + penalty)`` (1 for young
jobs) applied to every configuration except the job's current one, the round
minimises::

    sum_j  [ (r_j G[j, c_j]) ** p  + lambda_a [c_j != previous] ]   (allocated jobs)
         + lambda_n * (number of unallocated jobs)

with ``p = -0.5``, ``lambda_n = 1.1``, ``lambda_a = 0.01``, subject to the GPUs
of each type. Jobs in the middle of a checkpoint-restore keep their allocation.

The artifact solves this integer program with CBC every 60 s. Here it is a
multiple-choice knapsack over a dense ``jobs x configurations`` gain matrix
``lambda_n - cost``, solved in one jitted XLA computation:

1. a Lagrangian relaxation of the per-type capacities (projected subgradient
   on the GPU prices; each job then picks its best priced configuration),
2. a vectorised repair (per type, keep the jobs with the highest gain per GPU
   that fit),
3. a greedy local search from several starts (empty, the repaired dual
   solutions, the previous allocation; moves ranked by gain per extra GPU or by
   gain), vmapped over the starts; the best final objective wins;
4. on small problems (at most ``pair_cells`` padded job x configuration
   cells), a 2-exchange local search over pairs of moves.

On 200 random instances of up to 8 jobs and 2 types the result is within 2% of
the exact optimum (scipy ``milp``) in all of them, and exact in 96%
(``benchmarks/policy_bench.py --hetero --gap``).

A placement step then maps each (type, GPUs) choice onto concrete nodes:
unchanged allocations keep their nodes, multi-node jobs take whole free nodes,
smaller ones are packed best-fit.

Example:
    >>> from goodput_jax.sched.types import JobInfo, NodeInfo
    >>> nodes = {"t0": NodeInfo({"gpu": 4}, False, "t4"), "a0": NodeInfo({"gpu": 8}, False, "a100")}
    >>> fns = {"t4": lambda n, r: 1.0 * r, "a100": lambda n, r: 4.0 * r}
    >>> jobs = {"j": JobInfo({"gpu": 1}, lambda n, r: r, 0.0, 0, 8, goodput_fns=fns)}
    >>> alloc = SiaPolicy(resource="gpu").optimize(jobs, nodes, {})
    >>> alloc["j"]
    ['a0', 'a0', 'a0', 'a0', 'a0', 'a0', 'a0', 'a0']
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from goodput_jax.sched import pollux
from goodput_jax.sched.sia_place import SiaConfigs, place, sia_configs
from goodput_jax.sched.sia_solver import SolverOptions, solve_assignment
from goodput_jax.sched.speedup import goodput_matrix
from goodput_jax.sched.types import JobInfo, JobKey, NodeInfo, NodeKey
from goodput_jax.sched.warmup import PrecompileInfo

__all__ = ["SiaConfigs", "SiaPolicy", "SiaStats", "SolverOptions", "realloc_factor",
           "sia_configs", "solve_assignment"]

# The shape of a cluster's configurations: ((type, (nodes, GPUs per node)), ...) and
# ((type, GPUs), ...); the configurations are rebuilt when it changes.
_ConfigsKey = tuple[tuple[tuple[str, tuple[int, int]], ...], tuple[tuple[str, int], ...]]

#: Restart penalty (s) per application in Sia's artifact (others: 30 s).
RESTART_PENALTIES = {"deepspeech2": 25.0, "imagenet": 250.0, "cifar10": 30.0, "bert": 120.0,
                     "yolov3": 45.0}


def realloc_factor(age: float, num_restarts: int, penalty: float) -> float:
    """Sia's re-allocation factor: Pollux's (:func:`goodput_jax.sched.pollux.realloc_factor`),
    1 for jobs younger than one restart penalty.

    Example:
        >>> realloc_factor(600.0, 2, 30.0), realloc_factor(10.0, 0, 30.0)
        (0.8571428571428571, 1.0)
    """
    return pollux.realloc_factor(age, num_restarts, penalty, exempt_young=True)


# --------------------------------------------------------------------------- #
# The policy.
# --------------------------------------------------------------------------- #


@dataclass
class SiaStats:
    """Diagnostics of the last :meth:`SiaPolicy.optimize` call.

    Attributes:
        objective: Sia's objective (lower is better) of the returned choice.
        start_gains: total gain (``lambda_n - cost`` summed) reached from each
            search start.
        prices: final Lagrangian GPU price per type.
        seconds: wall time of the round.
        solve_seconds: of which the jitted solve.
    """

    objective: float
    start_gains: tuple[float, ...]
    prices: tuple[float, ...]
    seconds: float
    solve_seconds: float


class SiaPolicy:
    """Heterogeneity-aware policy: one (type, nodes, GPUs) configuration per job (Sia).

    Args:
        p: fairness power (< 0; Sia's -0.5).
        lambda_n: cost of leaving a job without GPUs (Sia's 1.1).
        lambda_a: cost of changing a job's configuration (Sia's 0.01).
        restart_penalty: seconds per restart for the re-allocation factor when a
            JobInfo does not set its own.
        resource: the accelerator resource name in ``NodeInfo.resources``.
        max_config_gpus: largest configuration (Sia's 64).
        dual_steps: Lagrangian subgradient steps.
        clock: POSIX time, for job ages when ``JobInfo.age`` is unset.

    Non-preemptible jobs (``JobInfo.preemptible=False``) that hold devices keep
    them in every round: never moved, shrunk, grown or stopped (Pollux pins them
    the same way). When nodes it ran on are gone, the job keeps its devices on
    the surviving nodes if they still number at least ``max(min_replicas, 1)``
    (it restarts in place on them; no other job gets them); with fewer (or
    none) it cannot run where it was: it is placed first, before the solver
    shares the rest, at its former device count where that fits (else the
    largest count below it that fits, else the smallest above), on the type
    where that count has the best goodput; preemptible jobs give way to it, and
    it is pinned again where it lands. It waits only when no configuration fits
    beside the pinned jobs. (Pollux pins the survivors but does not place a
    displaced job first.) The policy knows a job was displaced from its current
    allocation (``base_allocations``) naming nodes that are gone: a caller that
    clears the allocation of a job on a lost node makes it an ordinary queued job.

    Jobs carry ``JobInfo.goodput_fns`` (type -> goodput function); a job without
    them (or without a function for some type) can run only on one GPU of the
    types it lacks a model for, with goodput 1 there (Sia's rule for unprofiled
    jobs). ``JobInfo.max_replicas``/``min_replicas`` bound its configurations.

    Example:
        >>> from goodput_jax.sched.types import JobInfo, NodeInfo
        >>> nodes = {i: NodeInfo({"gpu": 4}, False, "t4") for i in range(2)}
        >>> jobs = {k: JobInfo({"gpu": 1}, lambda n, r: r, 0.0, 0, 4) for k in "ab"}
        >>> alloc = SiaPolicy(resource="gpu").optimize(jobs, nodes, {})
        >>> sorted(len(v) for v in alloc.values())
        [1, 1]
    """

    def __init__(self, p: float = -0.5, lambda_n: float = 1.1, lambda_a: float = 0.01,
                 restart_penalty: float = 30.0, resource: str = "nvidia.com/gpu",
                 max_config_gpus: int = 64, dual_steps: int = 24,
                 clock: Callable[[], float] = time.time) -> None:
        if not (math.isfinite(p) and p < 0):
            raise ValueError(f"p must be a finite negative number (Sia: -0.5), got {p!r}")
        for name, v in (("lambda_n", lambda_n), ("lambda_a", lambda_a),
                        ("restart_penalty", restart_penalty)):
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be finite and >= 0, got {v!r}")
        if int(max_config_gpus) < 1:
            raise ValueError(f"max_config_gpus must be >= 1, got {max_config_gpus!r}")
        self.p = float(p)
        self.lambda_n = float(lambda_n)
        self.lambda_a = float(lambda_a)
        self.restart_penalty = float(restart_penalty)
        self.resource = resource
        self.max_config_gpus = int(max_config_gpus)
        self.dual_steps = int(dual_steps)
        self._clock = clock
        self._configs_key: _ConfigsKey | None = None
        self._configs: SiaConfigs | None = None
        self.last_stats: SiaStats | None = None

    # ------------------------------------------------------------------ #
    def cluster_configs(self, nodes: Mapping[NodeKey, NodeInfo]
                        ) -> tuple[SiaConfigs, dict[str, list[NodeKey]]]:
        """The candidate configurations of ``nodes`` and the node keys per type.

        Nodes without ``accelerator_type`` form one type named ``"default"``; a
        type's node size is its largest node's GPU count.

        Example:
            >>> from goodput_jax.sched.types import NodeInfo
            >>> nodes = {0: NodeInfo({"gpu": 8}, False, "a100")}
            >>> c, by_type = SiaPolicy(resource="gpu").cluster_configs(nodes)
            >>> c.gpus.tolist(), by_type
            ([1, 2, 4, 8], {'a100': [0]})
        """
        by_type: dict[str, list[NodeKey]] = {}
        for key, node in nodes.items():
            if not isinstance(node, NodeInfo):
                raise TypeError(f"nodes[{key!r}] must be a NodeInfo, got {type(node).__name__}")
            if node.resources.get(self.resource, 0) >= 1:
                by_type.setdefault(node.accelerator_type or "default", []).append(key)
        shape = {t: (len(keys), int(max(nodes[k].resources[self.resource] for k in keys)))
                 for t, keys in by_type.items()}
        cap_key: _ConfigsKey = (
            tuple(shape.items()),
            tuple((t, sum(int(nodes[k].resources[self.resource]) for k in keys))
                  for t, keys in by_type.items()))
        configs = self._configs
        if configs is None or cap_key != self._configs_key:
            if not shape:
                raise ValueError(f"no node offers the resource {self.resource!r}")
            base = sia_configs(shape, self.max_config_gpus)
            cap = np.array([sum(int(nodes[k].resources[self.resource]) for k in by_type[t])
                            for t in base.types], np.float32)
            configs = SiaConfigs(base.types, base.ctype, base.nodes, base.gpus, cap,
                                 base.gpus_per_node)
            self._configs = configs
            self._configs_key = cap_key
        return configs, by_type

    def cost_matrix(self, jobs: Sequence[JobInfo], configs: SiaConfigs,
                    previous: np.ndarray, now: float) -> np.ndarray:
        """Sia's per-(job, configuration) cost; ``inf`` where a job cannot run.

        ``previous[j]`` is the job's current configuration (-1 for none); the
        re-allocation factor scales every other configuration, ``lambda_a`` is
        added to them when the job has a current configuration.
        """
        fns = [job.goodput_fns for job in jobs]
        good = goodput_matrix(fns, configs.types, configs.ctype, configs.nodes, configs.gpus)
        J, K = good.shape
        lo = np.array([max(job.min_replicas, 1) for job in jobs])
        hi = np.array([job.max_replicas for job in jobs])
        valid = (configs.gpus[None, :] >= lo[:, None]) & (configs.gpus[None, :] <= hi[:, None])
        # Types without a model: one GPU only, at goodput 1 (after normalisation).
        have = np.array([[name in (job.goodput_fns or ()) for name in configs.types]
                         for job in jobs], bool)  # [J, T]
        missing = ~have[:, configs.ctype]  # [J, K]
        valid &= ~missing | (configs.gpus[None, :] == 1)
        good = np.where(valid & (good > 0), good, 0.0)
        pos = np.where(good > 0, good, np.inf)
        row_min = pos.min(1, keepdims=True)
        norm = np.where(np.isfinite(row_min), good / np.where(np.isfinite(row_min), row_min, 1.0),
                        0.0)
        norm = np.where(missing & valid, 1.0, norm)
        factor = np.ones(J)
        for j, job in enumerate(jobs):
            age = job.age if job.age is not None else now - job.creation_time
            pen = self.restart_penalty if job.restart_penalty is None else job.restart_penalty
            factor[j] = realloc_factor(max(age, 0.0), job.num_restarts, pen)
        has_prev = previous >= 0
        other = np.ones((J, K), bool)
        other[np.arange(J)[has_prev], previous[has_prev]] = False
        scaled = np.where(other & has_prev[:, None], norm * factor[:, None], norm)
        with np.errstate(divide="ignore"):
            cost = np.where(scaled > 0, np.power(np.maximum(scaled, 1e-12), self.p), np.inf)
        cost = cost + np.where(other & has_prev[:, None], self.lambda_a, 0.0)
        return np.where(valid & (norm > 0), cost, np.inf)

    def objective(self, cost: np.ndarray, choice: np.ndarray) -> float:
        """Sia's objective of a choice (lower is better).

        Example:
            >>> SiaPolicy().objective(np.array([[1.0, 0.5], [1.0, 0.7]]), np.array([1, -1]))
            1.6
        """
        picked = cost[np.arange(len(choice)), np.maximum(choice, 0)]
        return float(np.sum(np.where(choice >= 0, picked, self.lambda_n)))

    def _config_of(self, alloc: Sequence[NodeKey], configs: SiaConfigs,
                   type_of: Mapping[NodeKey, str]) -> int:
        if not alloc:
            return -1
        types = {type_of.get(n) for n in alloc}
        if len(types) != 1 or None in types:
            return -1
        t = configs.types.index(types.pop())
        hit = np.nonzero((configs.ctype == t) & (configs.gpus == len(alloc)))[0]
        return int(hit[0]) if hit.size else -1

    @staticmethod
    def _pinned(job: JobInfo, alloc: Sequence[NodeKey], type_of: Mapping[NodeKey, str]
                ) -> list[NodeKey] | None:
        """The devices a non-preemptible job keeps this round (None: it is not pinned)."""
        if job.preemptible or not alloc:
            return None
        alive = [n for n in alloc if n in type_of]
        if len(alive) < max(job.min_replicas, 1):
            return None
        return alive

    @staticmethod
    def _resume_config(cost_row: np.ndarray, configs: SiaConfigs, free: np.ndarray,
                       size: int) -> int:
        """Where a displaced non-preemptible job resumes: among the configurations that
        fit the free devices, its former size (else the largest below it, else the
        smallest above), the best cost at that size; -1 when nothing fits."""
        fits = np.isfinite(cost_row) & (configs.gpus <= free[configs.ctype])
        if not fits.any():
            return -1
        sizes = np.unique(configs.gpus[fits])
        below = sizes[sizes <= size]
        want = below.max() if below.size else sizes.min()
        cand = np.nonzero(fits & (configs.gpus == want))[0]
        return int(cand[np.argmin(cost_row[cand])])

    def precompile(self, jobs: Mapping[Hashable, JobInfo], nodes: Mapping[Hashable, NodeInfo],
                   job_counts: Sequence[int] | None = None) -> PrecompileInfo:
        """Compile the solver for ``jobs`` on ``nodes`` (and ``job_counts`` copies of them)
        before the first round, on a copy of this policy (its decisions do not change).

        See :func:`goodput_jax.sched.warmup.precompile`; returns its summary
        (``seconds``, ``compiles``, ``cache_hits``, ``job_counts``).
        """
        from goodput_jax.sched.warmup import precompile
        return precompile(self, jobs, nodes, job_counts=job_counts)

    def optimize(self, jobs: Mapping[JobKey, JobInfo], nodes: Mapping[NodeKey, NodeInfo],
                 base_allocations: Mapping[JobKey, Sequence[NodeKey] | None],
                 node_template: NodeInfo | None = None,
                 ) -> dict[JobKey, list[NodeKey]]:
        """Runs one scheduling round.

        Args:
            jobs: job key -> JobInfo (``goodput_fns`` per type; ``restarting``).
            nodes: node key -> NodeInfo with ``accelerator_type``.
            base_allocations: job key -> node keys currently held.
            node_template: ignored (the heterogeneous cluster does not autoscale);
                accepted for symmetry with ``PolluxPolicy.optimize``.

        Returns:
            job key -> list of node keys (one per GPU), ``[]`` for no GPUs; every
            job in ``jobs`` appears.
        """
        started = time.perf_counter()
        if not isinstance(base_allocations, Mapping):
            raise TypeError(f"base_allocations must be a mapping, got "
                            f"{type(base_allocations).__name__}")
        if not jobs:
            self.last_stats = SiaStats(0.0, (), (), time.perf_counter() - started, 0.0)
            return {}
        configs, by_type = self.cluster_configs(nodes)
        type_of = {n: t for t, keys in by_type.items() for n in keys}
        keys = list(jobs)
        infos = []
        for key in keys:
            job = jobs[key]
            if not isinstance(job, JobInfo):
                raise TypeError(f"jobs[{key!r}] must be a JobInfo, got {type(job).__name__}")
            per_replica = job.resources.get(self.resource, 1)
            if per_replica != 1:
                raise ValueError(f"jobs[{key!r}].resources[{self.resource!r}] = {per_replica!r}: "
                                 f"SiaPolicy places one accelerator per replica")
            infos.append(job)
        prev_alloc = {k: list(base_allocations.get(k, ()) or ()) for k in keys}
        previous = np.array([self._config_of(prev_alloc[k], configs, type_of) for k in keys],
                            np.int64)
        now = self._clock()
        cost = self.cost_matrix(infos, configs, previous, now)
        # Restarting jobs keep their allocation: fixed at their configuration, or
        # (when it is not a Sia configuration) taken out with their GPUs.
        # Non-preemptible jobs that hold devices are taken out with them (never
        # moved, shrunk or stopped); after a node loss they keep the devices that
        # survive, if those still give them their min_replicas (see the class doc).
        fixed = np.full(len(keys), -1, np.int64)
        kept: dict[JobKey, list[NodeKey]] = {}
        capacity = configs.capacity.copy()
        for j, key in enumerate(keys):
            pin = self._pinned(infos[j], prev_alloc[key], type_of)
            if pin is not None:
                kept[key] = pin
                cost[j, :] = np.inf  # the solver gives it nothing more
                for n in pin:
                    capacity[configs.types.index(type_of[n])] -= 1
            elif infos[j].restarting and prev_alloc[key] and all(n in type_of for n in
                                                                  prev_alloc[key]):
                if previous[j] >= 0:
                    fixed[j] = previous[j]
                    if not np.isfinite(cost[j, previous[j]]):
                        cost[j, previous[j]] = 1.0
                else:
                    kept[key] = prev_alloc[key]
                    for n in prev_alloc[key]:
                        capacity[configs.types.index(type_of[n])] -= 1
        # Non-preemptible jobs displaced by a node loss (they held devices, too few
        # survive) are placed first, at their former size where it fits.
        free = np.maximum(capacity, 0).astype(np.int64)
        for jf in np.nonzero(fixed >= 0)[0]:
            free[configs.ctype[fixed[jf]]] -= int(configs.gpus[fixed[jf]])
        displaced = [j for j, key in enumerate(keys)
                     if not infos[j].preemptible and prev_alloc[key] and key not in kept
                     and fixed[j] < 0]
        for j in sorted(displaced, key=lambda j: infos[j].creation_time):
            c = self._resume_config(cost[j], configs, free, len(prev_alloc[keys[j]]))
            if c >= 0:
                fixed[j] = c
                free[configs.ctype[c]] -= int(configs.gpus[c])
        gain = self.lambda_n - cost  # -inf where invalid
        t0 = time.perf_counter()
        choice, info = solve_assignment(gain, configs.ctype, configs.gpus,
                                        np.maximum(capacity, 0), fixed, previous,
                                        options=SolverOptions(dual_steps=self.dual_steps),
                                        return_info=True)
        solve_s = time.perf_counter() - t0
        for j, key in enumerate(keys):
            if key in kept:
                choice[j] = -1
        choices = {key: int(choice[j]) for j, key in enumerate(keys) if key not in kept}
        gpus_of = {n: int(nodes[n].resources[self.resource]) for n in type_of}
        # Nodes held by kept jobs are not free for placement.
        for alloc in kept.values():
            for n in alloc:
                gpus_of[n] -= 1
        out = place(choices, configs, by_type, gpus_of, prev_alloc)
        out.update(kept)
        rows = np.array([key not in kept for key in keys], bool)  # kept jobs: not chosen here
        self.last_stats = SiaStats(self.objective(cost[rows], choice[rows]), info["start_gains"],
                                   info["prices"], time.perf_counter() - started, solve_s)
        return {key: out.get(key, []) for key in keys}
