"""Pollux cluster scheduling policy as a vectorised genetic search in JAX.

One scheduling cycle (:meth:`PolluxPolicy.optimize`) decides how many
replicas of every job run on every node.  The state is a ``jobs x nodes``
integer matrix.  The search maximises the power mean (fairness power ``p``)
of each job's speedup relative to its fair share of the cluster, with a
restart penalty for jobs whose running allocation changes:

* ``speedup_j = speedup_fn_j(nodes_j, replicas_j)`` (a dense table lookup);
* ``x_j = speedup_j * penalty_j / fair_j`` where ``fair_j`` is the speedup of
  job ``j`` on ``1/J`` of the cluster's replica slots, and ``penalty_j`` is
  AdaptDL's ``max(age - restarts * 30 s, 0) / (age + 30 s)`` when a running
  job's allocation changes (1 otherwise; starting a waiting job is not a
  restart);
* ``objective = (mean_j (x_j + eps)^p)^(1/p)`` (geometric mean for ``p = 0``;
  ``eps = 0.01`` only for ``p <= 0``, so that a job left without resources
  counts as a large but finite loss instead of zeroing the whole mean).
  ``p = -1`` is the paper's default; ``p = 1`` is AdaptDL master's sum
  (divided by the job count).

Constraints are enforced by a vectorised *repair* applied to every candidate:
node capacity for every resource type (nodes that cannot hold one replica of a
job are never used by it), ``max_replicas``, ``min_replicas`` (below it a job
gets nothing), pinned jobs (non-preemptible jobs that hold an allocation keep
it) and at most one distributed (multi-node) job per node.

The search is a (mu + lambda) genetic algorithm: tournament selection,
row-wise (per job) uniform crossover, per-job mutations (add a replica, remove
one, stop the job, move it to one node), repair, and truncation selection of
the best distinct candidates.  The whole population is evaluated with
``vmap`` and the generation loop is a ``lax.fori_loop`` under ``jit``.  The
initial population holds the previous allocation, two greedy allocations (from
scratch with worst-fit placement, and grown from the previous allocation with
first-fit placement) and the previous cycle's
population, so the result is never worse than any of them.  Jobs and nodes
are padded to power-of-two buckets, so a changing job count does not
recompile.

Autoscaling (``desired_nodes``) is computed separately from the search, by a
greedy allocation whose history gives an allocation for every cluster size
``m``; cluster utility is total speedup per accelerator.  If the current
cluster's utility is inside ``[0.35, 0.65]`` the size is kept.  Above the
band, the chosen allocation is grown greedily onto ``max(N, T)`` copies of
``node_template`` (``T``: template nodes that would hold every job at its
``max_replicas``, at most 16); below it, the real nodes are refilled from
scratch in order.  The answer is the largest size that still improves the
objective with utility at or above the 0.5 midpoint (growing: else ``N``;
shrinking: else the smallest useful size).

Example:
    >>> from datetime import datetime
    >>> from goodput_jax.sched.types import JobInfo, NodeInfo
    >>> nodes = {"a": NodeInfo({"gpu": 4}, preemptible=False)}
    >>> jobs = {"j1": JobInfo({"gpu": 1}, lambda n, r: r, datetime(2024, 1, 1), 0, 8),
    ...         "j2": JobInfo({"gpu": 1}, lambda n, r: r, datetime(2024, 1, 2), 0, 8)}
    >>> allocations, desired = PolluxPolicy().optimize(jobs, nodes, {}, nodes["a"])
    >>> sorted(len(v) for v in allocations.values())
    [2, 2]
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import NamedTuple

import jax
import numpy as np

from goodput_jax.model.buckets import bucket as _bucket
from goodput_jax.sched.pollux_problem import _build_problem, _Meta, _sorted_nodes
from goodput_jax.sched.pollux_search import (
    _BIG,
    _EPS,
    _TOL,
    _Arrays,
    _autoscale_curve,
    _evaluate_states,
    _search,
)
from goodput_jax.sched.pollux_state import CycleStats, PolluxCarry
from goodput_jax.sched.types import JobInfo, JobKey, NodeInfo, NodeKey, realloc_factor
from goodput_jax.sched.warmup import PrecompileInfo

__all__ = ["CycleStats", "PolluxCarry", "PolluxPolicy", "realloc_factor"]


class _Population(NamedTuple):
    """The last cycle's population, carried into the next cycle."""

    job_keys: list[Hashable]
    node_keys: list[Hashable]
    population: np.ndarray  # int32 [population, jobs, nodes]
    fitness: np.ndarray  # float32 [population]


class _Best(NamedTuple):
    """This cycle's best state (the autoscaler grows it)."""

    job_keys: list[Hashable]
    node_keys: list[Hashable]
    state: np.ndarray


class PolluxPolicy:
    """Pollux scheduling policy (goodput-driven, fair, restart-aware), searched in JAX.

    Args:
        p: fairness power of the power mean (-1: the paper's default; 1: sum).
        restart_penalty: seconds a restart costs (AdaptDL: 30).
        population: candidate allocations per generation; ``None`` sizes it from
            the padded problem (64 up to 4096 job-node cells, 32 up to 16384,
            else 16).
        generations: generations per cycle; ``None`` keeps
            ``population * generations * cells`` near 2**22 (8 to 100
            generations), which bounds the time per cycle: at 512 jobs x 128
            nodes the search relies mostly on its greedy seeds.
        seed: PRNG seed; the same seed and the same sequence of calls give the
            same allocations.
        min_util, max_util: target band of cluster utility for autoscaling.
        clock: returns the current POSIX time; used for job ages when
            ``JobInfo.age`` is not set.
        autoscale: compute ``desired_nodes`` from the node template (default).
            ``False`` is for a fixed-size cluster: ``optimize`` then reports the
            current node count and skips the extra evaluation.

    Example:
        >>> from goodput_jax.sched.types import JobInfo, NodeInfo
        >>> policy = PolluxPolicy(seed=0)
        >>> nodes = {0: NodeInfo({"gpu": 2}, preemptible=False)}
        >>> policy.allocate_job(JobInfo({"gpu": 1}, lambda n, r: r, 0.0, 2, 4), nodes)
        [0, 0]
    """

    def __init__(self, p: float = -1.0, restart_penalty: float = 30.0,
                 population: int | None = None, generations: int | None = None, seed: int = 0,
                 min_util: float = 0.35, max_util: float = 0.65,
                 clock: Callable[[], float] = time.time, autoscale: bool = True) -> None:
        if not math.isfinite(p):
            raise ValueError(f"p must be finite, got {p!r}")
        if not (restart_penalty >= 0 and math.isfinite(restart_penalty)):
            raise ValueError(f"restart_penalty must be >= 0 seconds, got {restart_penalty!r}")
        if population is not None and int(population) < 4:
            raise ValueError(f"population must be >= 4, got {population!r}")
        if generations is not None and int(generations) < 0:
            raise ValueError(f"generations must be >= 0, got {generations!r}")
        if not (0 <= min_util <= max_util):
            raise ValueError(f"need 0 <= min_util <= max_util, got {min_util!r}, {max_util!r}")
        self.p = float(p)
        self.restart_penalty = float(restart_penalty)
        self.population = None if population is None else int(population)
        self.generations = None if generations is None else int(generations)
        self.seed = int(seed)
        self.min_util = float(min_util)
        self.max_util = float(max_util)
        self._clock = clock
        self.autoscale = bool(autoscale)
        self._cycle = 0
        self._prev: _Population | None = None  # the last cycle's population
        self._last_best: _Best | None = None  # this cycle's best state
        self.last_stats: CycleStats | None = None

    # ------------------------------------------------------------------ #
    def carry(self) -> PolluxCarry:
        """What the next :meth:`optimize` builds on (see :class:`PolluxCarry`)."""
        if self._prev is None:
            return PolluxCarry(self._cycle)
        jobs, nodes, pop, fit = self._prev
        return PolluxCarry(self._cycle, tuple(jobs), tuple(nodes), np.array(pop),
                           np.array(fit))

    def restore(self, carry: PolluxCarry) -> None:
        """Continue from a saved :meth:`carry` (a restarted scheduler).

        Raises:
            TypeError: ``carry`` is not a PolluxCarry.
        """
        if not isinstance(carry, PolluxCarry):
            raise TypeError(f"carry must be a PolluxCarry, got {type(carry).__name__}")
        self._cycle = int(carry.cycle)
        self._prev = None if carry.population is None else _Population(
            list(carry.job_keys), list(carry.node_keys), np.asarray(carry.population, np.int32),
            np.asarray(carry.fitness, np.float32))

    # ------------------------------------------------------------------ #
    def allocate_job(self, job_info: JobInfo, nodes: Mapping[NodeKey, NodeInfo]) -> list[NodeKey]:
        """First allocation of a new job: ``max(min_replicas, 1)`` replicas on the
        first node (non-preemptible nodes first) that holds them all.

        Args:
            job_info: the job.
            nodes: node key -> NodeInfo (their full capacity is considered).

        Returns:
            ``[node_key] * replicas``, or ``[]`` if no single node fits them.

        Example:
            >>> from goodput_jax.sched.types import JobInfo, NodeInfo
            >>> nodes = {"small": NodeInfo({"gpu": 1}, False), "big": NodeInfo({"gpu": 4}, False)}
            >>> PolluxPolicy().allocate_job(JobInfo({"gpu": 1}, lambda n, r: r, 0, 2, 2), nodes)
            ['big', 'big']
        """
        if not isinstance(job_info, JobInfo):
            raise TypeError(f"job_info must be a JobInfo, got {type(job_info).__name__}")
        replicas = max(job_info.min_replicas, 1)
        for key in _sorted_nodes(nodes):
            node = nodes[key]
            fits = min((node.resources.get(name, 0) / amount + _TOL) // 1
                       for name, amount in job_info.resources.items() if amount > 0) \
                if any(v > 0 for v in job_info.resources.values()) else _BIG
            if fits >= replicas:
                return [key] * replicas
        return []

    # ------------------------------------------------------------------ #
    def _build(self, jobs: Mapping[JobKey, JobInfo], nodes: Mapping[NodeKey, NodeInfo],
               node_template: NodeInfo | None,
               base_allocations: Mapping[JobKey, Sequence[NodeKey] | None],
               extra_template: int = 0
               ) -> tuple[_Arrays[np.ndarray], _Meta[JobKey, NodeKey]]:
        """Padded arrays for jobs x (real nodes [+ template copies]) (the host side:
        :mod:`goodput_jax.sched.pollux_problem`)."""
        return _build_problem(jobs, nodes, node_template, base_allocations,
                              restart_penalty=self.restart_penalty, clock=self._clock,
                              extra_template=extra_template)

    def _budget(self, arrays: _Arrays[np.ndarray]) -> tuple[int, int]:
        cells = arrays["base"].size
        population = self.population
        if population is None:
            population = 64 if cells <= 4096 else 32 if cells <= 16384 else 16
        generations = self.generations
        if generations is None:
            generations = int(min(max((1 << 22) // (population * cells), 8), 100))
        return population, generations

    def _greedy_steps(self, arrays: _Arrays[np.ndarray], meta: _Meta[JobKey, NodeKey]) -> int:
        """Sets the greedy's step bound (traced: ``arrays["steps"]``); returns its history
        length (static: from the replica slots alone, so the job mix does not recompile)."""
        demand = int(np.minimum(arrays["max_r"], arrays["fit"].sum(axis=1)).sum())
        arrays["steps"] = np.asarray(_bucket(max(min(demand, meta.slots), 1), minimum=64),
                                     np.int32)
        return _bucket(max(meta.slots, 1), minimum=64)

    def _state_to_allocations(self, state: np.ndarray, meta: _Meta[JobKey, NodeKey]
                              ) -> dict[JobKey, list[NodeKey]]:
        out = {}
        for j, key in enumerate(meta.job_keys):
            placement: list[NodeKey] = []
            for n in np.nonzero(state[j, :meta.n_nodes])[0]:
                placement += [meta.node_keys[n]] * int(state[j, n])
            out[key] = placement
        return out

    def _objective_value(self, fitness: float, n_jobs: int) -> float:
        """Power mean from the summed utility."""
        if n_jobs == 0:
            return 0.0
        mean = fitness / n_jobs
        p = self.p
        if p == 0:
            return float(math.exp(mean) - _EPS)
        inner = mean * p
        if inner <= 0:
            return 0.0
        value = inner ** (1.0 / p)
        return float(value - _EPS if p < 0 else value)

    # ------------------------------------------------------------------ #
    def evaluate(self, jobs: Mapping[JobKey, JobInfo], nodes: Mapping[NodeKey, NodeInfo],
                 allocations: Mapping[JobKey, Sequence[NodeKey] | None],
                 base_allocations: Mapping[JobKey, Sequence[NodeKey] | None] | None = None
                 ) -> float:
        """Objective (power mean of penalised fair-share speedups) of an allocation.

        Args:
            jobs, nodes: as for :meth:`optimize`.
            allocations: job key -> list of node keys to score.
            base_allocations: the previous allocation (for restart penalties);
                ``None`` means no job was running.

        Returns:
            The objective as a Python float (higher is better).

        Example:
            >>> from goodput_jax.sched.types import JobInfo, NodeInfo
            >>> nodes = {0: NodeInfo({"gpu": 2}, False)}
            >>> jobs = {0: JobInfo({"gpu": 1}, lambda n, r: r, 0.0, 0, 2)}
            >>> round(PolluxPolicy().evaluate(jobs, nodes, {0: [0, 0]}), 3)
            1.0
        """
        arrays, meta = self._build(jobs, nodes, None, base_allocations or {})
        state = self._allocations_to_state(allocations, meta, arrays)
        fit, _, _ = _evaluate_states(arrays, state[None], p=self.p)
        return self._objective_value(float(fit[0]), meta.n_jobs)

    def _allocations_to_state(self, allocations: Mapping[JobKey, Sequence[NodeKey] | None],
                              meta: _Meta[JobKey, NodeKey], arrays: _Arrays[np.ndarray]
                              ) -> np.ndarray:
        node_index = {k: i for i, k in enumerate(meta.node_keys)}
        state = np.zeros(arrays["base"].shape, np.int32)
        for j, key in enumerate(meta.job_keys):
            for node_key in allocations.get(key, ()) or ():
                if node_key not in node_index:
                    raise ValueError(f"allocations[{key!r}] names unknown node {node_key!r}")
                state[j, node_index[node_key]] += 1
        return state

    def precompile(self, jobs: Mapping[Hashable, JobInfo], nodes: Mapping[Hashable, NodeInfo],
                   node_template: NodeInfo | None = None,
                   job_counts: Sequence[int] | None = None) -> PrecompileInfo:
        """Compile the search for ``jobs`` on ``nodes`` (and ``job_counts`` copies) on a copy
        of this policy (template: the largest node): :func:`goodput_jax.sched.warmup.precompile`."""
        from goodput_jax.sched.warmup import precompile
        node_template = node_template or max(nodes.values(),
                                             key=lambda n: sum(n.resources.values()))
        return precompile(self, jobs, nodes, extra_args=(node_template,), job_counts=job_counts)

    # ------------------------------------------------------------------ #
    def optimize(self, jobs: Mapping[JobKey, JobInfo], nodes: Mapping[NodeKey, NodeInfo],
                 base_allocations: Mapping[JobKey, Sequence[NodeKey] | None],
                 node_template: NodeInfo) -> tuple[dict[JobKey, list[NodeKey]], int]:
        """Runs one scheduling cycle.

        Args:
            jobs: job key -> JobInfo.
            nodes: node key -> NodeInfo (the real cluster).
            base_allocations: job key -> node keys (one per replica) currently
                held; unknown jobs and nodes are ignored.
            node_template: the node type the cluster would be grown with.

        Returns:
            ``(allocations, desired_nodes)``: job key -> list of node keys (one
            entry per replica, ``[]`` for jobs that get nothing; every job in
            ``jobs`` appears), and the cluster size autoscaling should aim for.

        Example:
            >>> from goodput_jax.sched.types import JobInfo, NodeInfo
            >>> nodes = {0: NodeInfo({"gpu": 1}, False)}
            >>> jobs = {k: JobInfo({"gpu": 1}, lambda n, r: r, float(k), 0, 1) for k in range(3)}
            >>> alloc, desired = PolluxPolicy(generations=5).optimize(jobs, nodes, {}, nodes[0])
            >>> sum(map(len, alloc.values())), desired > 1
            (1, True)
        """
        started = time.perf_counter()
        if not isinstance(node_template, NodeInfo):
            raise TypeError(f"node_template must be a NodeInfo, got {type(node_template).__name__}")
        if not isinstance(base_allocations, Mapping):
            raise TypeError(f"base_allocations must be a mapping, got "
                            f"{type(base_allocations).__name__}")
        if not jobs:
            desired = sum(1 for node in nodes.values() if not node.preemptible)
            self.last_stats = CycleStats(0.0, 0.0, 0.0, 0.0, 0.0, desired,
                                         time.perf_counter() - started)
            return {}, desired
        arrays, meta = self._build(jobs, nodes, node_template, base_allocations)
        n_jobs, n_nodes = meta.n_jobs, meta.n_nodes
        seeds = [arrays["base"]]
        if self._prev is not None:
            seeds += self._carry_population(self._prev, meta, arrays)
        num_seeds = len(seeds)
        population, generations = self._budget(arrays)
        pad = np.zeros((population - 2, *arrays["base"].shape), np.int32)
        pad[:num_seeds] = np.stack(seeds)[: population - 2]
        key = jax.random.fold_in(jax.random.key(self.seed, impl="rbg"), self._cycle)
        self._cycle += 1
        rate = np.float32(min(1.0, 2.0 / max(n_jobs, 1)))
        steps = self._greedy_steps(arrays, meta)
        best, best_fit, pop, pop_fit, seed_fit = _search(
            arrays, pad, np.int32(min(num_seeds, population - 2)), key, rate, p=self.p,
            population=population, generations=generations, greedy_steps=steps)
        best = np.asarray(best)
        self._prev = _Population(list(meta.job_keys), list(meta.node_keys), np.asarray(pop),
                                 np.asarray(pop_fit))
        allocations = self._state_to_allocations(best, meta)
        _, speedup, _ = _evaluate_states(arrays, best[None], p=self.p)
        total_speedup = float(np.asarray(speedup).sum())
        accel_real = float(meta.accel[:n_nodes].sum())
        utility = total_speedup / accel_real if accel_real > 0 else 0.0
        self._last_best = _Best(list(meta.job_keys), list(meta.node_keys), best)
        if self.autoscale:
            desired = self._desired_nodes(jobs, nodes, node_template, base_allocations,
                                          utility, n_nodes)
        else:
            desired = n_nodes
        seed_fit = np.asarray(seed_fit)
        self.last_stats = CycleStats(
            objective=self._objective_value(float(best_fit), n_jobs),
            greedy_objective=self._objective_value(float(seed_fit[0]), n_jobs),
            grown_objective=self._objective_value(float(seed_fit[1]), n_jobs),
            previous_objective=self._objective_value(float(seed_fit[2]), n_jobs),
            utility=utility, desired_nodes=desired, seconds=time.perf_counter() - started)
        return allocations, desired

    def _carry_population(self, prev: _Population, meta: _Meta[JobKey, NodeKey],
                          arrays: _Arrays[np.ndarray]) -> list[np.ndarray]:
        """Previous cycle's population mapped onto this cycle's jobs and nodes."""
        prev_jobs, prev_nodes, prev_pop, prev_fit = prev
        jpos = {k: i for i, k in enumerate(prev_jobs)}
        npos = {k: i for i, k in enumerate(prev_nodes)}
        rows = np.array([jpos.get(k, -1) for k in meta.job_keys])
        cols = np.array([npos.get(k, -1) for k in meta.node_keys])
        keep = min(len(prev_pop), self._budget(arrays)[0] // 4)
        order = np.argsort(-prev_fit)[:keep]
        out = []
        for i in order:
            state = np.zeros(arrays["base"].shape, np.int32)
            if len(rows) and len(cols):
                sub = prev_pop[i][np.maximum(rows, 0)][:, np.maximum(cols, 0)]
                sub = sub * (rows >= 0)[:, None] * (cols >= 0)[None, :]
                state[:len(rows), :len(cols)] = sub
            out.append(state)
        return out

    @staticmethod
    def _template_nodes_needed(jobs: Mapping[JobKey, JobInfo], node_template: NodeInfo) -> int:
        """Template nodes that would hold every job at max_replicas, one job per node
        group (an upper bound), capped at 16."""
        needed = 0
        for job in jobs.values():
            per_node = min((node_template.resources.get(name, 0) / amount + _TOL) // 1
                           for name, amount in job.resources.items() if amount > 0) \
                if any(v > 0 for v in job.resources.values()) else job.max_replicas
            if per_node >= 1:
                needed += math.ceil(job.max_replicas / per_node)
        return int(min(max(needed, 1), 16))

    def _desired_nodes(self, jobs: Mapping[JobKey, JobInfo], nodes: Mapping[NodeKey, NodeInfo],
                       node_template: NodeInfo,
                       base_allocations: Mapping[JobKey, Sequence[NodeKey] | None],
                       utility: float, n_nodes: int) -> int:
        if n_nodes > 0 and self.min_util <= utility <= self.max_util:
            return n_nodes
        grow = n_nodes == 0 or utility > self.max_util
        # Growing: the current allocation plus template nodes; shrinking: the real
        # nodes alone, filled greedily from the pinned jobs.
        extra = max(n_nodes, self._template_nodes_needed(jobs, node_template)) if grow else 0
        arrays, meta = self._build(jobs, nodes, node_template, base_allocations,
                                   extra_template=extra)
        # Size the cluster for the steady state: no restart penalties here.
        arrays["factor"] = np.ones_like(arrays["factor"])
        start_state = np.where(arrays["pinned"][:, None], arrays["base"], 0)
        last = self._last_best
        if grow and last is not None and last.job_keys == meta.job_keys \
                and last.node_keys == meta.node_keys:
            start_state = np.zeros_like(start_state)
            best = last.state
            start_state[:best.shape[0], :n_nodes] = best[:start_state.shape[0], :n_nodes]
        steps = self._greedy_steps(arrays, meta)
        count, hist, start = _autoscale_curve(arrays, start_state, p=self.p, greedy_steps=steps)
        count = int(count)
        prefix = np.concatenate([[int(start[0])], np.asarray(hist[0])[:count]])
        speed = np.concatenate([[float(start[1])], np.asarray(hist[1])[:count]])
        value = np.concatenate([[float(start[2])], np.asarray(hist[2])[:count]])
        accel = np.cumsum(meta.accel)
        total = n_nodes + extra
        target = 0.5 * (self.min_util + self.max_util)
        # t(m): last greedy step whose allocation fits on the first m nodes
        # (adds only, so the highest used node index never decreases).
        best_value = value[0]
        front = []  # sizes where one more node still improves the objective
        for m in range(1, total + 1):
            t = np.nonzero(prefix <= m)[0]
            if len(t) == 0:
                continue
            t = t[-1]
            if value[t] > best_value + 1e-6 * max(1.0, abs(best_value)):
                best_value = value[t]
                front.append((m, speed[t] / accel[m - 1] if accel[m - 1] > 0 else 0.0))
        good = [m for m, u in front if u >= target]
        if good:
            return int(max(good))
        if grow and n_nodes > 0:
            return n_nodes  # one more node would already fall below the target
        if front:
            return int(min(m for m, _ in front))
        return max(int(prefix[0]), 1)
