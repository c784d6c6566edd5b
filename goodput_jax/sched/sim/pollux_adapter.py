"""Pollux in the simulator: batched goodput-model calls and a thin adapter to PolluxPolicy.

:class:`PolluxModel` does the per-job model work of adaptive jobs, always batched over jobs:

- :meth:`PolluxModel.refit`: one :func:`~goodput_jax.model.perf.fit_perf_params_batched`
  call re-fits the throughput model of every job that met a new configuration;
- :meth:`PolluxModel.reoptimize`: one :func:`~goodput_jax.model.goodput.optimize_fn` call
  picks ``(atomic_bsz, accum_steps)`` for every job (gradient accumulation on, the job's
  maximum batch size and atomic range, the oracle gradient statistics of its epoch);
- :meth:`PolluxModel.speedup_tables`: one ``optimize_fn`` call over jobs x nodes x replicas
  gives every job's dense speedup table ``goodput(n, r) / goodput(1, 1)`` (the
  :class:`~goodput_jax.sched.speedup.SpeedupFunction` definition); tables are cached per job
  until its model parameters change.

Shapes are padded to power-of-two buckets so the jitted kernels compile a handful of times
per run.

:class:`PolluxAdapter` turns the active jobs into :class:`~goodput_jax.sched.JobInfo` (speedup
= the precomputed table; linear before the first fit; at most twice the largest replica count
profiled so far; ncf, whose batch size is fixed, one replica) and calls
:class:`~goodput_jax.sched.PolluxPolicy`.

Example:
    >>> model = PolluxModel()                                  # doctest: +SKIP
    >>> policy = PolluxAdapter(model, p=-1.0, seed=0)          # doctest: +SKIP
    >>> result = simulate(jobs, policy, model=model)           # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from goodput_jax.model.buckets import bucket as _bucket
from goodput_jax.model.goodput import optimize_fn
from goodput_jax.model.hints import max_replicas_allowed
from goodput_jax.model.perf import fit_perf_params_batched
from goodput_jax.model.types import GradParams, PerfParams
from goodput_jax.sched.sim.job import SimJob
from goodput_jax.sched.speedup import goodput_grid

__all__ = ["PolluxAdapter", "PolluxModel", "TableSpeedup", "UnawarePolluxAdapter",
           "fit_profiles", "replica_cap"]

MAX_REPLICAS = 64  # the simulator's cluster size
# Jobs per batched call: fixed sizes, so each jitted kernel compiles once per run.
FIT_CHUNK = 8
OPT_CHUNK = 16
TABLE_CHUNK = 8


def fit_profiles(profiles: Sequence[tuple]) -> list[tuple[float, ...]]:
    """PerfParams (as tuples) fitted to at most FIT_CHUNK profiles in one batched call.

    Each profile is ``(nodes, replicas, atomic_bsz, accum_step_time, optim_step_time)``
    lists (:meth:`SimJob.profile_arrays`); the batch is padded to FIT_CHUNK jobs.
    """
    J = FIT_CHUNK
    if len(profiles) > J:
        raise ValueError(f"at most {J} profiles per call, got {len(profiles)}")
    P = _bucket(max(len(p[0]) for p in profiles), 16)
    arr = np.ones((5, J, P))
    mask = np.zeros((J, P), bool)
    for i, cols in enumerate(profiles):
        k = len(cols[0])
        for c in range(5):
            arr[c, i, :k] = cols[c]
        mask[i, :k] = True
    mask[len(profiles):, 0] = True  # padding rows: one dummy point each
    params = fit_perf_params_batched(arr[0], arr[1], arr[2], arr[3], arr[4], mask)
    out = np.stack([np.asarray(x, dtype=np.float64) for x in params], axis=1)
    return [tuple(float(x) for x in out[i]) for i in range(len(profiles))]


class TableSpeedup:
    """``speedup(num_nodes, num_replicas)`` read from a dense table ``t[n, r]``.

    Queries beyond the table are clamped to its last row/column (the table always covers the
    job's ``max_replicas``).

    Example:
        >>> s = TableSpeedup(np.array([[0.0, 0.0, 0.0], [0.0, 1.0, 1.8], [0.0, 0.0, 1.5]]))
        >>> s(1, 2), s(2, 2), s(0, 0)
        (1.8, 1.5, 0.0)
    """

    def __init__(self, table: np.ndarray) -> None:
        self.table = np.asarray(table, dtype=np.float64)

    def __call__(self, num_nodes: Any, num_replicas: Any) -> Any:
        n = np.minimum(np.asarray(num_nodes, dtype=np.int64), self.table.shape[0] - 1)
        r = np.minimum(np.asarray(num_replicas, dtype=np.int64), self.table.shape[1] - 1)
        out = self.table[n, r]
        return float(out) if np.ndim(out) == 0 else out


# A job's table is cached until its model changes: (PerfParams, gradient statistics).
_TableKey = tuple[tuple[float, ...] | None, tuple[float, float] | None]


class LinearSpeedup:
    """Speedup of a job without a fitted model: ``num_replicas`` (the authors' rule).

    Example:
        >>> LinearSpeedup()(1, 3)
        3.0
    """

    def __call__(self, num_nodes: Any, num_replicas: Any) -> Any:
        out = np.asarray(num_replicas, dtype=np.float64)
        return float(out) if out.ndim == 0 else out


class PolluxModel:
    """Batched goodput-model work of the adaptive jobs (see the module docstring).

    Example:
        >>> model = PolluxModel()
        >>> model.refit([])
    """

    def __init__(self, table_type: str | None = None) -> None:
        # Heterogeneous clusters: the type whose batch-size limits the speedup tables use
        # (None: the type the job runs on now). The batch size a running job picks always
        # uses the limits of the type it runs on.
        self.table_type = table_type
        self._tables: dict[str, tuple[_TableKey, np.ndarray]] = {}
        self.calls = {"refit": 0, "reoptimize": 0, "tables": 0}  # batched calls made

    # ------------------------------------------------------------------ fitting
    def refit(self, jobs: Sequence[SimJob]) -> None:
        """Fit every job's PerfParams to its profile (batched, fixed-size chunks of jobs)."""
        jobs = [j for j in jobs if j.profile]
        for start in range(0, len(jobs), FIT_CHUNK):
            self._refit(jobs[start:start + FIT_CHUNK])

    def _refit(self, jobs: Sequence[SimJob]) -> None:
        self.calls["refit"] += 1
        params = fit_profiles([j.profile_arrays() for j in jobs])
        for job, p in zip(jobs, params):
            job.perf_params = p

    # ------------------------------------------------------------------ batch size
    @staticmethod
    def _param_rows(jobs: Sequence[SimJob], J: int, limits_type: str | None = None,
                    ) -> np.ndarray:
        """``[J, 13]`` rows for :func:`~goodput_jax.sched.speedup.goodput_grid` (padding
        rows: a harmless default model). Batch-size limits: ``limits_type``'s when given
        (heterogeneous jobs), else the type the job runs on."""
        rows = np.tile(np.array([[0.1, 0.01, 1e-8, 1e-8, 1e-8, 1e-8, 1.0, 0.0, 1.0,
                                  1.0, 1.0, 1.0, 1.0]]), (J, 1))
        for i, job in enumerate(jobs):
            rows[i, :7] = job.perf_params
            rows[i, 7:9] = job.grad_params if job.grad_params is not None else (0.0, 1.0)
            if limits_type is not None and job.type_apps is not None:
                app = job.type_apps[limits_type]
            else:
                app = job.speed_app  # the current type's (= job.app when homogeneous)
            rows[i, 9:13] = (app.init_batch_size, app.max_batch_size, app.min_local_bsz,
                             app.max_local_bsz)
        return rows

    @staticmethod
    def _params(jobs: Sequence[SimJob], J: int) -> tuple[PerfParams, GradParams, np.ndarray,
                                                         np.ndarray, np.ndarray, np.ndarray]:
        rows = PolluxModel._param_rows(jobs, J)
        return (PerfParams(*(jnp.asarray(rows[:, k]) for k in range(7))),
                GradParams(jnp.asarray(rows[:, 7]), jnp.asarray(rows[:, 8])),
                rows[:, 9], rows[:, 10], rows[:, 11], rows[:, 12])

    def reoptimize(self, jobs: Sequence[SimJob]) -> None:
        """Set ``(atomic_bsz, accum_steps)`` of the running adaptive ``jobs`` (one call)."""
        todo = [j for j in jobs if j.placement and j.adaptive]
        for j in todo:
            if j.perf_params is None:
                j.set_batch_config(*j.default_batch_config())
        todo = [j for j in todo if j.perf_params is not None]
        for start in range(0, len(todo), OPT_CHUNK):
            self._reoptimize(todo[start:start + OPT_CHUNK])

    def _reoptimize(self, todo: Sequence[SimJob]) -> None:
        self.calls["reoptimize"] += 1
        J = OPT_CHUNK
        perf, grad, m0, max_bs, lo, hi = self._params(todo, J)
        nodes = np.ones(J)
        reps = np.ones(J)
        for i, j in enumerate(todo):
            nodes[i], reps[i] = j.num_nodes, j.num_replicas
        _, atomic, accum = optimize_fn(perf, grad, m0, nodes, reps, max_bs, lo, hi,
                                       accumulation=True)
        atomic, accum = np.asarray(atomic), np.asarray(accum)
        for i, j in enumerate(todo):
            j.set_batch_config(int(atomic[i]), int(accum[i]))

    # ------------------------------------------------------------------ speedup
    def speedup_tables(self, jobs: Sequence[SimJob], max_replicas: Sequence[int],
                       max_nodes: int = 16) -> list[np.ndarray | None]:
        """Dense speedup tables ``t[n, r]`` (``n <= max_nodes``, ``r <= 64``).

        Jobs without a fitted model get ``None`` (linear speedup). Cached per job until its
        model parameters (PerfParams or gradient statistics) change. ``max_replicas`` is
        accepted for interface symmetry; the policy applies the caps itself.
        """
        out: list[np.ndarray | None] = [None] * len(jobs)
        todo: list[tuple[int, SimJob, _TableKey]] = []
        for i, (job, _cap) in enumerate(zip(jobs, max_replicas)):
            if job.perf_params is None:
                continue
            key = (job.perf_params, job.grad_params)
            hit = self._tables.get(job.name)
            if hit is not None and hit[0] == key:
                out[i] = hit[1]
            else:
                todo.append((i, job, key))
        for start in range(0, len(todo), TABLE_CHUNK):
            self._tables_chunk(todo[start:start + TABLE_CHUNK], out, max_nodes)
        return out

    def _tables_chunk(self, todo: Sequence[tuple[int, SimJob, _TableKey]],
                      out: list[np.ndarray | None], max_nodes: int) -> None:
        """Tables of ``todo``'s jobs (one :func:`goodput_grid` call) into ``out``."""
        self.calls["tables"] += 1
        J, R = TABLE_CHUNK, MAX_REPLICAS
        N = min(max_nodes, R)
        rows = self._param_rows([t[1] for t in todo], J, self.table_type)
        n = np.arange(N + 1, dtype=np.float64).reshape(1, N + 1, 1)
        r = np.arange(R + 1, dtype=np.float64).reshape(1, 1, R + 1)
        valid = (n >= 1) & (n <= r)
        nn = np.where(valid, n, 1.0)
        rr = np.where(valid, r, 1.0)
        good = goodput_grid(rows[:, None, None, :], nn, rr, accumulation=True, clean=False)
        good = np.where(valid, good, 0.0)
        base = good[:, 1:2, 1:2]
        tables = np.where(base > 0, good / np.where(base > 0, base, 1.0), 0.0)
        for t, (i, job, key) in enumerate(todo):
            table = tables[t]
            self._tables[job.name] = (key, table)
            out[i] = table


def replica_cap(job: SimJob) -> int:
    """Pollux's replica cap of a simulated job: twice the largest profiled count (1 before
    any), at most 64 and the application's max batch size / min local bsz; 1 for
    fixed-batch-size jobs."""
    if not job.adaptive:
        return 1
    app = job.app
    return max(1, min(max_replicas_allowed(job.max_profiled_replicas), MAX_REPLICAS,
                      app.max_batch_size // app.min_local_bsz))


class PolluxAdapter:
    """Our :class:`~goodput_jax.sched.PolluxPolicy` behind the simulator's policy interface.

    Args:
        model: the :class:`PolluxModel` shared with the cluster loop.
        p: fairness power of the policy (-1 = the paper's default).
        seed: random seed of the policy's search.
        **policy_kwargs: passed to ``PolluxPolicy`` (``Any``: its arguments differ in type;
            it checks them).

    Example:
        >>> adapter = PolluxAdapter(PolluxModel(), p=-1.0)   # doctest: +SKIP
    """

    name = "pollux"

    def __init__(self, model: PolluxModel, p: float = -1.0, seed: int = 0,
                 **policy_kwargs: Any) -> None:
        from goodput_jax.sched.pollux import PolluxPolicy

        self.model = model
        # The simulated cluster never scales: skip the desired-nodes computation.
        policy_kwargs.setdefault("autoscale", False)
        self.policy = PolluxPolicy(p=p, seed=seed, **policy_kwargs)

    def max_replicas(self, job: SimJob) -> int:
        """Replica cap: :func:`replica_cap`."""
        return replica_cap(job)

    def optimize(self, jobs: Mapping[str, SimJob], nodes: Mapping[int, int],
                 prev_allocations: Mapping[str, Sequence[int]], now: float,
                 ) -> dict[str, list[int]]:
        """Allocations from PolluxPolicy for the active ``jobs``."""
        return self._solve(jobs, nodes, prev_allocations, now)

    def _solve(self, jobs: Mapping[str, SimJob], nodes: Mapping[int, int],
               prev_allocations: Mapping[str, Sequence[int]], now: float,
               ) -> dict[str, list[int]]:
        from goodput_jax.sched.types import JobInfo, JobOptions, NodeInfo

        if not jobs:
            return {}
        names = list(jobs)
        caps = [self.max_replicas(jobs[k]) for k in names]
        tables = self.model.speedup_tables([jobs[k] for k in names], caps,
                                           max_nodes=len(nodes))
        infos = {}
        for k, cap, table in zip(names, caps, tables):
            job = jobs[k]
            fn = LinearSpeedup() if table is None else TableSpeedup(table)
            infos[k] = JobInfo({"nvidia.com/gpu": 1}, fn, job.submission_time, 0, cap,
                               True, options=JobOptions(
                                   age=max(now - job.submission_time, 0.0),
                                   num_restarts=job.num_restarts or 0))
        node_infos = {n: NodeInfo({"nvidia.com/gpu": g}, preemptible=False)
                      for n, g in nodes.items()}
        template = next(iter(node_infos.values()))
        out = self.policy.optimize(infos, node_infos, {k: list(v) for k, v in
                                                       prev_allocations.items()}, template)
        allocations = out[0] if isinstance(out, tuple) else out
        return {k: [int(n) for n in v] for k, v in allocations.items() if v}


class UnawarePolluxAdapter(PolluxAdapter):
    """Heterogeneity-unaware Pollux as the Sia authors' artifact runs it.

    The rules of ``sia-simulator/multi_simulator_unaware.py``, ``cluster_unaware.py`` and
    ``job.py`` (h_unaware) in github.com/siasosp23/artifacts:

    - the policy sees virtual nodes of ``g`` GPUs, ``g`` the smallest node size (4 on
      ``sia-64``: 16 virtual nodes; an 8-GPU node is two of them), all of one kind;
    - each job has one step-time model fitted to everything it measured on any type (the
      :class:`PolluxModel`'s merged profile); its speedup function uses the batch-size
      limits of the reference type (``aws``, the T4s) and counts virtual nodes;
    - replica cap: ``min(2 x most replicas profiled (1 before any), the smallest per-type
      GPU count (the simulated one, or the authors' profiled one if smaller: 16 on sia-64),
      max_batch_size // min_local_bsz of the reference type)``; fixed-batch jobs (ncf) 1;
    - an allocation that spans types keeps only the GPUs of its most represented type (on a
      tie the faster type, :data:`~.apps.SIA_TYPE_PRIORITY`); the others stay idle this
      interval, and the trimmed allocation is the next round's previous allocation;
    - the job runs on the real nodes under its virtual nodes (two halves of one 8-GPU node
      are one node), at that type's speed, choosing its batch size with the merged model
      and the limits of that type.

    Args:
        model: a :class:`PolluxModel` (``table_type`` set to the reference type).
        cluster: ``{type: (nodes, GPUs per node)}``.
        p, seed, **policy_kwargs: as for :class:`PolluxAdapter` (``Any``: ``PolluxPolicy``'s
            keyword arguments).

    Example:
        >>> from goodput_jax.sched.sim.apps import CLUSTERS
        >>> a = UnawarePolluxAdapter(PolluxModel("aws"), CLUSTERS["sia-64"])
        >>> len(a.vnodes), a.vnode_gpus, a.cap
        (16, 4, 16)
    """

    name = "pollux"

    def __init__(self, model: PolluxModel, cluster: Mapping[str, tuple[int, int]],
                 p: float = -1.0, seed: int = 0, **policy_kwargs: Any) -> None:
        from goodput_jax.sched.sim.apps import (
            SIA_PROFILED_GPUS,
            SIA_TYPE_PRIORITY,
            SIA_UNAWARE_REFERENCE_TYPE,
        )
        from goodput_jax.sched.sim.cluster import cluster_nodes

        super().__init__(model, p=p, seed=seed, **policy_kwargs)
        real, self.node_types = cluster_nodes(cluster)
        self.vnode_gpus = min(real.values())
        self.vnode_real: dict[int, int] = {}
        for n, g in real.items():
            for _ in range(g // self.vnode_gpus):
                self.vnode_real[len(self.vnode_real)] = n
        self.vnodes = {v: self.vnode_gpus for v in self.vnode_real}
        self.reference_type = (SIA_UNAWARE_REFERENCE_TYPE if SIA_UNAWARE_REFERENCE_TYPE in cluster
                               else next(iter(cluster)))
        self.cap = min(min(int(n) * int(g), SIA_PROFILED_GPUS.get(t, int(n) * int(g)))
                       for t, (n, g) in cluster.items())
        self.priority = dict(SIA_TYPE_PRIORITY)
        self._valloc: dict[str, list[int]] = {}
        self.dropped_gpus: list[int] = []  # GPUs idled by the repair, per round

    def max_replicas(self, job: SimJob) -> int:
        """The artifact's cap (see the class docstring)."""
        if not job.adaptive:
            return 1
        app = job.type_apps[self.reference_type] if job.type_apps else job.app
        return max(1, min(max_replicas_allowed(job.max_profiled_replicas), self.cap,
                          app.max_batch_size // app.min_local_bsz))

    def _virtual_prev(self, prev: Mapping[str, Sequence[int]]) -> dict[str, list[int]]:
        """Previous allocations on virtual nodes (the ones chosen last round when they still
        match the real allocation, else filled onto the real node's virtual nodes)."""
        out: dict[str, list[int]] = {}
        used = {v: 0 for v in self.vnode_real}
        rest = {}
        for k, real in prev.items():
            v = self._valloc.get(k)
            if v is not None and sorted(self.vnode_real[x] for x in v) == sorted(real):
                out[k] = list(v)
                for x in v:
                    used[x] += 1
            else:
                rest[k] = real
        for k, real in rest.items():
            alloc = []
            for n in real:
                x = next(x for x, m in self.vnode_real.items()
                         if m == n and used[x] < self.vnode_gpus)
                used[x] += 1
                alloc.append(x)
            out[k] = alloc
        return out

    def _keep_one_type(self, valloc: Sequence[int]) -> list[int]:
        """Keep the GPUs of the allocation's most represented type (tie: the faster)."""
        counts: dict[str, int] = {}
        for x in sorted(valloc):
            t = self.node_types[self.vnode_real[x]]
            counts[t] = counts.get(t, 0) + 1
        if len(counts) <= 1:
            return sorted(valloc)
        ranked = sorted(counts, key=lambda t: -counts[t])  # stable: first seen first
        keep = ranked[0]
        if counts[ranked[1]] == counts[keep] and (self.priority.get(ranked[1], 99)
                                                  < self.priority.get(keep, 99)):
            keep = ranked[1]
        return [x for x in sorted(valloc) if self.node_types[self.vnode_real[x]] == keep]

    def optimize(self, jobs: Mapping[str, SimJob], nodes: Mapping[int, int],
                 prev_allocations: Mapping[str, Sequence[int]], now: float,
                 ) -> dict[str, list[int]]:
        """Allocations on the real nodes (see the class docstring)."""
        if not jobs:
            self._valloc = {}
            return {}
        vprev = self._virtual_prev({k: v for k, v in prev_allocations.items() if k in jobs})
        valloc = self._solve(jobs, self.vnodes, vprev, now)
        out: dict[str, list[int]] = {}
        self._valloc = {}
        dropped = 0
        for k, v in valloc.items():
            kept = self._keep_one_type(v)
            dropped += len(v) - len(kept)
            if kept:
                self._valloc[k] = kept
                out[k] = [self.vnode_real[x] for x in kept]
        self.dropped_gpus.append(dropped)
        return out
