"""Cluster loop of the trace-driven simulator, workloads, and metrics.

Every ``interval`` seconds of simulated time (60 by default):

1. each job holding GPUs advances (:meth:`SimJob.advance`), in rounds that stop at epoch
   boundaries; after each round the adaptive jobs that crossed an epoch re-optimise their
   batch size (ONE batched call over those jobs); at the end of the interval every job that
   met a new (nodes, replicas, atomic bsz) configuration re-fits its throughput model (ONE
   batched call);
2. the policy computes the allocations of the active (submitted, unfinished) jobs;
3. jobs whose allocation changed restart (30 s delay), and every running adaptive job
   re-optimises its batch size (one batched call);
4. one JSON line is logged.

The run ends when every job has finished. Metrics: job completion time (JCT = completion -
submission), its mean and 99th percentile, and the makespan (last completion - first
submission).

Example:
    >>> from goodput_jax.sched.sim.cluster import load_workload, simulate   # doctest: +SKIP
    >>> jobs = load_workload("workload-6.csv", apps, policy="tiresias")     # doctest: +SKIP
    >>> result = simulate(jobs, TiresiasPolicy())                           # doctest: +SKIP
    >>> round(result.avg_jct)                                               # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO

import numpy as np

from goodput_jax.sched.sim.apps import Application
from goodput_jax.sched.sim.job import SimJob
from goodput_jax.sched.sim.options import SimOptions, with_keywords

if TYPE_CHECKING:
    from goodput_jax.sched.sim.policies import SimPolicy

__all__ = ["AdaptiveModel", "Cluster", "SimResult", "WorkloadRow", "cluster_nodes",
           "load_workload", "make_jobs", "simulate"]

FIXED_BATCH_APPS = {"ncf": 32768}  # Pollux runs ncf at a fixed batch size (the authors' rule)


@dataclass(frozen=True)
class WorkloadRow:
    """One row of a workload CSV."""

    name: str
    time: float
    application: str
    num_replicas: int
    batch_size: int


def load_workload(path: str | os.PathLike[str], max_jobs: int | None = None) -> list[WorkloadRow]:
    """Read ``name,time,application,num_replicas,batch_size`` rows (sorted by time).

    Raises:
        ValueError: on a missing column or a bad value (naming the row).

    Example:
        >>> rows = load_workload("workloads/workload-6.csv", max_jobs=20)   # doctest: +SKIP
        >>> len(rows)                                                        # doctest: +SKIP
        20
    """
    if max_jobs is not None and max_jobs < 1:
        raise ValueError(f"max_jobs must be >= 1, got {max_jobs}")
    rows = []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        need = {"name", "time", "application", "num_replicas", "batch_size"}
        missing = need - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"workload {path}: missing columns {sorted(missing)}")
        for i, r in enumerate(reader):
            try:
                rows.append(WorkloadRow(r["name"], float(r["time"]), r["application"],
                                        int(r["num_replicas"]), int(r["batch_size"])))
            except ValueError as e:
                raise ValueError(f"workload {path}: bad row {i + 2}: {r} ({e})") from None
    rows.sort(key=lambda r: r.time)
    return rows[:max_jobs] if max_jobs else rows


def make_jobs(rows: Iterable[WorkloadRow],
              apps: Mapping[str, Application | Mapping[str, Application]],
              policy: str, *, calibrated: bool = True) -> list[SimJob]:
    """Jobs for ``policy``: Tiresias gets the workload's replicas and batch size, Optimus the
    batch size, Pollux and Sia neither (their batch size is adaptive, ncf's fixed at 32768).

    ``apps`` maps an application to its :class:`Application`, or (a heterogeneous cluster) to
    ``{type: Application}``; the jobs then run at the speed of the type they are placed on.
    There, with ``calibrated`` (the default), they follow the Sia artifact's simulator: a
    (re-)allocation costs the application's checkpoint-restore time
    (:data:`~.apps.SIA_RESCALE_TIMES`) and the goodput is divided by the application's
    calibration slowdown (:data:`~.apps.SIA_SLOWDOWNS`); without it, a restart costs Sia's
    restart penalty (:data:`~.apps.SIA_RESTART_PENALTIES`) and nothing is slowed.

    Example:
        >>> jobs = make_jobs(rows, apps, "pollux")   # doctest: +SKIP
    """
    from goodput_jax.sched.sim.apps import (
        SIA_RESCALE_TIMES,
        SIA_RESTART_PENALTIES,
        SIA_SLOWDOWNS,
    )

    if policy not in ("pollux", "optimus", "tiresias", "sia", "pollux-typed"):
        raise ValueError(f"policy must be pollux, optimus, tiresias, sia or pollux-typed, "
                         f"got {policy!r}")
    jobs = []
    for r in rows:
        if r.application not in apps:
            raise ValueError(f"job {r.name!r}: unknown application {r.application!r}")
        app = apps[r.application]
        if isinstance(app, Mapping):
            typed = dict(app)
            first = next(iter(typed.values()))
            batch: tuple[int | None, int | None] = (
                r.num_replicas, r.batch_size) if policy == "tiresias" else (
                None, r.batch_size) if policy == "optimus" else (
                None, FIXED_BATCH_APPS.get(r.application))
            if calibrated:
                delay = SIA_RESCALE_TIMES.get(r.application, 30.0)
                slow = SIA_SLOWDOWNS.get(r.application, 1.0)
            else:
                delay, slow = SIA_RESTART_PENALTIES.get(r.application, 30.0), 1.0
            replicas, batch_size = batch
            jobs.append(SimJob(r.name, first, r.time, replicas, batch_size, type_apps=typed,
                               restart_delay=delay, slowdown=slow))
            continue
        if policy == "tiresias":
            jobs.append(SimJob(r.name, app, r.time, r.num_replicas, r.batch_size))
        elif policy == "optimus":
            jobs.append(SimJob(r.name, app, r.time, None, r.batch_size))
        else:
            jobs.append(SimJob(r.name, app, r.time, None, FIXED_BATCH_APPS.get(r.application)))
    return jobs


class AdaptiveModel(Protocol):
    """Goodput-model side of an adaptive policy (see ``pollux_adapter``)."""

    def refit(self, jobs: Sequence[SimJob]) -> None:
        """Re-fit the throughput model of ``jobs`` from their profiles."""

    def reoptimize(self, jobs: Sequence[SimJob]) -> None:
        """Choose the batch configuration of the running adaptive ``jobs``."""


@dataclass
class SimResult:
    """Outcome of one simulation."""

    policy: str
    workload: str
    jcts: dict[str, float]
    unfinished: list[str]
    end_time: float
    makespan: float
    wall_time: float
    num_intervals: int
    timeline: list[tuple[float, dict[str, int]]] = field(repr=False, default_factory=list)
    log_path: str | None = None
    policy_time: float = 0.0
    model_time: float = 0.0
    cpu_time: float = 0.0  # process CPU time (all threads) of the run
    round_times: list[float] = field(repr=False, default_factory=list)  # per policy round (s)
    total_gpus: int = 0
    gpu_seconds: float = 0.0  # GPU-seconds held by all jobs

    @property
    def round_median(self) -> float:
        """Median wall time of a policy round (s)."""
        return float(np.median(self.round_times)) if self.round_times else float("nan")

    @property
    def round_p95(self) -> float:
        """95th percentile wall time of a policy round (s)."""
        return float(np.percentile(self.round_times, 95)) if self.round_times else float("nan")

    @property
    def avg_jct(self) -> float:
        return float(np.mean(list(self.jcts.values()))) if self.jcts else float("nan")

    @property
    def p99_jct(self) -> float:
        return float(np.percentile(list(self.jcts.values()), 99)) if self.jcts else float("nan")

    def summary(self) -> dict:
        """JSON-ready summary."""
        return {"policy": self.policy, "workload": self.workload, "jobs": len(self.jcts),
                "unfinished": len(self.unfinished), "avg_jct": self.avg_jct,
                "p99_jct": self.p99_jct, "makespan": self.makespan,
                "wall_time": self.wall_time, "cpu_time": self.cpu_time,
                "policy_time": self.policy_time,
                "model_time": self.model_time, "intervals": self.num_intervals,
                "round_median": self.round_median, "round_p95": self.round_p95,
                "total_gpus": self.total_gpus,
                "gpu_hours_per_job": self.gpu_seconds / 3600 / max(len(self.jcts) +
                                                                  len(self.unfinished), 1)}


class Cluster:
    """A fixed cluster of ``num_nodes`` x ``gpus_per_node`` GPUs running ``jobs`` under ``policy``.

    Args:
        jobs: the workload's jobs.
        policy: a :class:`~goodput_jax.sched.sim.policies.SimPolicy`.
        num_nodes, gpus_per_node: cluster shape (16 x 4 in the paper).
        interval: scheduling interval (s).
        interference: slowdown of a multi-node job sharing a node with another multi-node job.
        model: goodput model of adaptive jobs (needed when some job's batch size is adaptive
            or when the policy uses fitted models).
        log: open text file for one JSON line per interval, or None.

    Example:
        >>> cluster = Cluster(jobs, TiresiasPolicy())   # doctest: +SKIP
        >>> while not cluster.done: cluster.step()       # doctest: +SKIP
    """

    def __init__(self, jobs: Sequence[SimJob], policy: SimPolicy, *, num_nodes: int = 16,
                 gpus_per_node: int = 4, interval: float = 60.0, interference: float = 0.0,
                 model: AdaptiveModel | None = None, log: TextIO | None = None,
                 cluster: Mapping[str, tuple[int, int]] | None = None) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be > 0, got {interval}")
        if not 0.0 <= interference < 1.0:
            raise ValueError(f"interference must be in [0, 1), got {interference}")
        if num_nodes < 1 or gpus_per_node < 1:
            raise ValueError(f"num_nodes ({num_nodes}) and gpus_per_node ({gpus_per_node}) "
                             "must be >= 1")
        names = [j.name for j in jobs]
        if len(set(names)) != len(names):
            raise ValueError("job names must be unique")
        if model is None and any(j.adaptive for j in jobs):
            raise ValueError("adaptive jobs (target_batch_size=None) need a model")
        self.jobs = list(jobs)
        self.policy = policy
        self.nodes = {i: int(gpus_per_node) for i in range(num_nodes)}
        self.node_types: dict[int, str] = {}
        if cluster is not None:
            self.nodes, self.node_types = cluster_nodes(cluster)
        self.interval = float(interval)
        self.interference = float(interference)
        self.model = model
        self.log = log
        self.time = 0.0
        self.allocations: dict[str, list[int]] = {}
        self.timeline: list[tuple[float, dict[str, int]]] = []
        self.num_intervals = 0
        self.policy_time = 0.0
        self.model_time = 0.0
        self.round_times: list[float] = []  # wall seconds of each policy round with jobs

    @property
    def done(self) -> bool:
        return all(j.completion_time is not None for j in self.jobs)

    def job_type(self, job: SimJob, allocation: Sequence[int]) -> str:
        """Accelerator type a job runs at on ``allocation``: the slowest of its nodes' types
        (a synchronous data-parallel step waits for the slowest replica)."""
        types = {self.node_types[n] for n in allocation}
        if len(types) == 1:
            return types.pop()
        type_apps = job.type_apps
        if type_apps is None:
            raise ValueError(f"job {job.name!r} runs on several types but has no type_apps")
        bsz = job.app.min_local_bsz
        return max(sorted(types), key=lambda t: type_apps[t].get_throughput((1,), bsz)[0])

    def _interference(self) -> dict[str, float]:
        if self.interference == 0.0:
            return {}
        multi = {k: set(v) for k, v in self.allocations.items() if len(set(v)) > 1}
        shared: dict[int, int] = {}
        for nodes in multi.values():
            for n in nodes:
                shared[n] = shared.get(n, 0) + 1
        return {k: self.interference for k, nodes in multi.items()
                if any(shared[n] > 1 for n in nodes)}

    def _model_call(self, fn: Callable[[Sequence[SimJob]], None], jobs: list[SimJob]) -> None:
        if jobs and self.model is not None:
            t = time.perf_counter()
            fn(jobs)
            self.model_time += time.perf_counter() - t

    def _advance(self) -> None:
        t0, dt = self.time, self.interval
        slow = self._interference()
        budget = {j.name: dt for j in self.jobs if j.placement and j.completion_time is None}
        active = [j for j in self.jobs if j.name in budget]
        to_fit: dict[str, SimJob] = {}
        while active:
            to_opt: list[SimJob] = []
            nxt: list[SimJob] = []
            for job in active:
                left = budget[job.name]
                res = job.advance(left, t0 + dt - left, slow.get(job.name, 0.0))
                budget[job.name] = res.remaining
                if res.new_config:
                    to_fit[job.name] = job
                if res.remaining > 0 and job.completion_time is None:
                    nxt.append(job)
                    if res.crossed_epoch and job.adaptive:
                        to_opt.append(job)
            if self.model is not None:
                self._model_call(self.model.reoptimize, to_opt)
            active = nxt
        if self.model is not None:
            # One batched re-fit per interval for every job that met a new configuration
            # (finished jobs excluded); the policy and the next re-optimisations use it.
            self._model_call(self.model.refit,
                             [j for j in to_fit.values() if j.completion_time is None])

    def _check(self, allocations: Mapping[str, Sequence[int]],
               active: Mapping[str, SimJob]) -> None:
        used: dict[int, int] = {}
        for key, alloc in allocations.items():
            if key not in active:
                raise RuntimeError(f"policy allocated GPUs to inactive job {key!r}")
            for n in alloc:
                if n not in self.nodes:
                    raise RuntimeError(f"policy used unknown node {n!r} for job {key!r}")
                used[n] = used.get(n, 0) + 1
        for n, u in used.items():
            if u > self.nodes[n]:
                raise RuntimeError(f"policy put {u} replicas on node {n} ({self.nodes[n]} GPUs)")

    def step(self) -> None:
        """Simulate one scheduling interval (see the module docstring)."""
        self._advance()
        self.time += self.interval
        self.num_intervals += 1
        active = {j.name: j for j in self.jobs if j.is_active(self.time)}
        prev = {k: v for k, v in self.allocations.items() if k in active}
        t = time.perf_counter()
        allocations = self.policy.optimize(active, self.nodes, prev, self.time)
        dt = time.perf_counter() - t
        self.policy_time += dt
        if active:
            self.round_times.append(dt)
        allocations = {k: list(v) for k, v in allocations.items() if v}
        self._check(allocations, active)
        for job in self.jobs:
            if job.completion_time is not None and job.placement:
                job.reallocate([])
            new, old = allocations.get(job.name, []), prev.get(job.name, [])
            if job.name in active and sorted(new) != sorted(old):
                if new and job.type_apps is not None:
                    job.accel_type = self.job_type(job, new)
                job.reallocate(new)
        self.allocations = allocations
        if self.model is not None:
            self._model_call(self.model.reoptimize,
                             [j for j in active.values() if j.placement and j.adaptive])
        gpus = {k: len(v) for k, v in allocations.items()}
        self.timeline.append((self.time, gpus))
        if self.log is not None:
            rec = {"time": self.time, "active": len(active),
                   "finished": sum(j.completion_time is not None for j in self.jobs),
                   "gpus_used": sum(gpus.values()),
                   "jobs": {j.name: {"gpus": len(j.allocation), "placement": list(j.placement),
                                     "batch_size": j.batch_size, "atomic_bsz": j.atomic_bsz,
                                     "accum_steps": j.accum_steps, "epoch": j.epoch,
                                     "progress": round(j.progress / j.app.target_progress, 5),
                                     "goodput": round(j.last_goodput, 4),
                                     "restarts": j.num_restarts or 0,
                                     **({"type": j.accel_type} if j.accel_type else {})}
                          for j in active.values()}}
            self.log.write(json.dumps(rec) + "\n")


def cluster_nodes(cluster: Mapping[str, tuple[int, int]]) -> tuple[dict[int, int], dict[int, str]]:
    """Node ids -> GPUs and node ids -> type of a heterogeneous cluster ``{type: (nodes, gpus)}``.

    Example:
        >>> cluster_nodes({"t4": (2, 4), "a100": (1, 8)})
        ({0: 4, 1: 4, 2: 8}, {0: 't4', 1: 't4', 2: 'a100'})
    """
    gpus: dict[int, int] = {}
    types: dict[int, str] = {}
    for name, (n, g) in cluster.items():
        if int(n) < 1 or int(g) < 1:
            raise ValueError(f"cluster[{name!r}] = ({n}, {g}): need >= 1 node of >= 1 GPU")
        for _ in range(int(n)):
            i = len(gpus)
            gpus[i] = int(g)
            types[i] = str(name)
    return gpus, types


def simulate(jobs: Sequence[SimJob], policy: SimPolicy, *, model: AdaptiveModel | None = None,
             options: SimOptions | None = None,
             log_path: str | os.PathLike[str] | None = None, workload: str = "",
             progress: Callable[[int, int, float], None] | None = None,
             **keywords: Any) -> SimResult:
    """Run the cluster loop until every job finishes (or ``max_time`` passes).

    Args:
        jobs: jobs from :func:`make_jobs`.
        policy: a policy object (``policies.TiresiasPolicy()``, ...).
        model: goodput model of adaptive jobs (Pollux).
        options: the cluster and limits (:class:`~.options.SimOptions`: ``interval``,
            ``interference``, ``num_nodes``, ``gpus_per_node``, ``max_time``, ``cluster``).
        log_path: JSON Lines file for the per-interval log.
        workload: label for the result.
        progress: called after every interval with ``(finished, total, time)``.
        **keywords: ``SimOptions`` fields as keywords (``interval=30.0``; ``Any``: the
            fields differ in type, ``SimOptions`` checks them), applied over
            ``options``.

    Returns:
        A :class:`SimResult`.

    Example:
        >>> res = simulate(make_jobs(rows, apps, "tiresias"), TiresiasPolicy())  # doctest: +SKIP
        >>> res.avg_jct > 0                                                     # doctest: +SKIP
        True
    """
    if not jobs:
        raise ValueError("jobs is empty")
    opts = with_keywords(SimOptions, options, keywords, "simulate")
    start, cpu_start = time.perf_counter(), time.process_time()
    with contextlib.ExitStack() as stack:
        f = None
        if log_path is not None:
            Path(log_path).parent.mkdir(parents=True, exist_ok=True)
            f = stack.enter_context(open(log_path, "w"))
        sim = Cluster(jobs, policy, num_nodes=opts.num_nodes, gpus_per_node=opts.gpus_per_node,
                      interval=opts.interval, interference=opts.interference, model=model,
                      log=f, cluster=opts.cluster)
        while not sim.done and sim.time < opts.max_time:
            sim.step()
            if progress is not None:
                progress(sum(j.completion_time is not None for j in jobs), len(jobs), sim.time)
    jcts = {j.name: j.completion_time - j.submission_time for j in jobs
            if j.completion_time is not None}
    unfinished = [j.name for j in jobs if j.completion_time is None]
    ends = [j.completion_time for j in jobs if j.completion_time is not None]
    makespan = (max(ends) - min(j.submission_time for j in jobs)) if ends else float("nan")
    return SimResult(policy=getattr(policy, "name", type(policy).__name__), workload=workload,
                     jcts=jcts, unfinished=unfinished, end_time=sim.time, makespan=makespan,
                     wall_time=time.perf_counter() - start, num_intervals=sim.num_intervals,
                     timeline=sim.timeline, log_path=str(log_path) if log_path else None,
                     policy_time=sim.policy_time, model_time=sim.model_time,
                     round_times=sim.round_times, total_gpus=sum(sim.nodes.values()),
                     gpu_seconds=sum(j.attained_service for j in jobs),
                     cpu_time=time.process_time() - cpu_start)
