"""Sia in the simulator: per-type goodput models (fitted or bootstrapped) and a thin adapter.

:class:`SiaModel` extends :class:`~.pollux_adapter.PolluxModel` to heterogeneous clusters:

- :meth:`SiaModel.refit` fits one step-time model per (job, accelerator type) from what the
  job measured on that type (batched, as Pollux does for one type);
- a type the job has not run on is *bootstrapped* (Sia): the model of a type it has run on,
  scaled by the ratio of the two types' throughputs at one GPU
  (:func:`~goodput_jax.model.hints.bootstrap_perf_params`). The one-GPU throughput on every
  type is the job's profile at submission (Sia measures it in < 20 GPU-seconds per type; the
  simulator gives it for free);
- :meth:`SiaModel.goodput_tables`: one ``optimize_fn`` call over jobs x types x replicas
  gives every job's absolute goodput per (type, GPU count), the dense (type x count) table
  the policy reads; cached per job until its models change;
- :meth:`SiaModel.reoptimize` picks the batch size with the current type's model.

:class:`SiaAdapter` turns the active jobs into :class:`~goodput_jax.sched.JobInfo` with
``goodput_fns`` per type (none before the job's first run: Sia then offers one GPU of any
type; before its first run, the 1-GPU throughput it was profiled at on each type, so a new
job starts on the type where it runs fastest), ``restarting`` for jobs inside a
checkpoint-restore, the per-application restart penalty, and calls
:class:`~goodput_jax.sched.sia.SiaPolicy` on the typed nodes.

Example:
    >>> from goodput_jax.sched.sim.apps import CLUSTERS
    >>> model = SiaModel()                                            # doctest: +SKIP
    >>> policy = SiaAdapter(model, CLUSTERS["sia-64"])                # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from goodput_jax.model.hints import bootstrap_perf_params
from goodput_jax.model.types import PerfParams
from goodput_jax.sched.sia import sia_configs
from goodput_jax.sched.sim.apps import SIA_RESTART_PENALTIES
from goodput_jax.sched.sim.cluster import cluster_nodes
from goodput_jax.sched.sim.job import SimJob
from goodput_jax.sched.sim.pollux_adapter import (
    FIT_CHUNK,
    MAX_REPLICAS,
    LinearSpeedup,
    PolluxModel,
    fit_profiles,
    replica_cap,
)
from goodput_jax.sched.speedup import goodput_grid

__all__ = ["ConstantGoodput", "RowGoodput", "SiaAdapter", "SiaModel"]

TABLE_JOBS = 16  # jobs per batched table call (fixed shape: one compile per run)

# A job's typed tables are cached until its models change: (PerfParams per type, gradient
# statistics).
_TypedKey = tuple[tuple[tuple[float, ...] | None, ...], tuple[float, float] | None]


class RowGoodput:
    """``goodput(num_nodes, num_gpus)`` of one job on one type, read from ``row[gpus]``.

    Example:
        >>> RowGoodput(np.array([0.0, 1.0, 1.8]))(1, 2)
        1.8
    """

    def __init__(self, row: np.ndarray) -> None:
        self.row = np.asarray(row, dtype=np.float64)

    def __call__(self, num_nodes: Any, num_gpus: Any) -> Any:
        r = np.minimum(np.asarray(num_gpus, dtype=np.int64), len(self.row) - 1)
        out = self.row[r]
        return float(out) if np.ndim(out) == 0 else out


class ConstantGoodput:
    """``goodput(num_nodes, num_gpus) = value`` (a job known only by its 1-GPU throughput).

    Example:
        >>> ConstantGoodput(3.0)(1, np.array([1, 2]))
        array([3., 3.])
    """

    def __init__(self, value: float) -> None:
        self.value = float(value)

    def __call__(self, num_nodes: Any, num_gpus: Any) -> Any:
        out = np.full(np.shape(num_gpus), self.value)
        return float(out) if out.ndim == 0 else out


class SiaModel(PolluxModel):
    """Per-(job, type) step-time models, Sia's bootstrap, and batched (type x count) tables.

    Args:
        cluster: ``{type: (nodes, GPUs per node)}``.

    Example:
        >>> SiaModel({"aws": (6, 4)}).types
        ('aws',)
    """

    def __init__(self, cluster: Mapping[str, tuple[int, int]]) -> None:
        super().__init__()
        self.cluster = dict(cluster)
        self.types = tuple(self.cluster)
        self._min_thr: dict[str, dict[str, float]] = {}
        self._typed_tables: dict[str, tuple[_TypedKey, dict[str, np.ndarray]]] = {}
        self._cfg = sia_configs(self.cluster, MAX_REPLICAS)
        self.calls["typed_tables"] = 0

    # ------------------------------------------------------------------ bootstrap
    def min_throughput(self, job: SimJob) -> dict[str, float]:
        """Samples/s of ``job`` on one GPU of each type (its Sia profile at submission)."""
        hit = self._min_thr.get(job.name)
        if hit is None:
            hit = {}
            for t in self.types:
                app = job.type_app(t)
                bsz = min(app.init_batch_size, app.max_local_bsz)
                step, _ = app.get_throughput((1,), bsz)
                hit[t] = bsz / step
            self._min_thr[job.name] = hit
        return hit

    def perf_for(self, job: SimJob, accel_type: str) -> tuple[float, ...] | None:
        """Fitted parameters on ``accel_type``, else bootstrapped from an observed type.

        A type observed at one replica only has fitted compute terms; its network terms
        (and ``gamma``) are bootstrapped from the type observed at the most replicas.
        """
        fitted = job.perf_by_type
        if not fitted:
            return None
        reps = {t: max((k[1] for k in job.profile_by_type.get(t, ())), default=0)
                for t in fitted}
        ref = max(sorted(fitted), key=lambda t: (reps[t], len(job.profile_by_type.get(t, ()))))
        if accel_type in fitted and (reps[accel_type] > 1 or reps[ref] <= 1):
            return fitted[accel_type]
        thr = self.min_throughput(job)
        boot = bootstrap_perf_params(PerfParams(*fitted[ref]), thr[ref], thr[accel_type])
        if accel_type in fitted:  # compute from its own fit, network from the bootstrap
            own = fitted[accel_type]
            return (own[0], own[1], *tuple(boot)[2:])
        return tuple(boot)

    # ------------------------------------------------------------------ fitting
    def refit(self, jobs: Sequence[SimJob]) -> None:
        """Fit each job's model on every type it has measured (batched over (job, type))."""
        pairs = [(j, t) for j in jobs for t in sorted(j.profile_by_type) if j.profile_by_type[t]]
        for start in range(0, len(pairs), FIT_CHUNK):
            chunk = pairs[start:start + FIT_CHUNK]
            self.calls["refit"] += 1
            params = fit_profiles([j.profile_arrays(t) for j, t in chunk])
            for (job, t), p in zip(chunk, params):
                job.perf_by_type[t] = p
        for job in jobs:
            if job.accel_type is not None:
                job.perf_params = self.perf_for(job, job.accel_type)

    def reoptimize(self, jobs: Sequence[SimJob]) -> None:
        """Batch size with the model of the type each job runs on (then as Pollux)."""
        for job in jobs:
            if job.accel_type is not None and job.perf_by_type:
                job.perf_params = self.perf_for(job, job.accel_type)
        super().reoptimize(jobs)

    # ------------------------------------------------------------------ tables
    def goodput_tables(self, jobs: Sequence[SimJob]) -> list[dict[str, np.ndarray] | None]:
        """Per job, ``{type: goodput[r]}`` for ``r = 0..MAX_REPLICAS`` (None before any fit).

        Filled at the GPU counts of Sia's configurations (:func:`~goodput_jax.sched.sia.
        sia_configs`, nodes as there); other counts are 0.
        """
        out: list[dict[str, np.ndarray] | None] = [None] * len(jobs)
        todo: list[tuple[int, SimJob, _TypedKey]] = []
        for i, job in enumerate(jobs):
            if not job.perf_by_type:
                continue
            perfs = tuple(self.perf_for(job, t) for t in self.types)
            key: _TypedKey = (perfs, job.grad_params)
            hit = self._typed_tables.get(job.name)
            if hit is not None and hit[0] == key:
                out[i] = hit[1]
            else:
                todo.append((i, job, key))
        for start in range(0, len(todo), TABLE_JOBS):
            self._typed_chunk(todo[start:start + TABLE_JOBS], out)
        return out

    def _typed_chunk(self, todo: Sequence[tuple[int, SimJob, _TypedKey]],
                     out: list[dict[str, np.ndarray] | None]) -> None:
        """One ``optimize_fn`` call over [TABLE_JOBS, configurations]: only the GPU counts
        Sia can choose are evaluated (each with its type's parameters and batch limits)."""
        self.calls["typed_tables"] += 1
        J, K = TABLE_JOBS, len(self._cfg)
        cfg = self._cfg
        rows = np.tile(PolluxModel._param_rows([], 1), (J, K, 1))  # [J, K, 13]
        for a, (_, job, key) in enumerate(todo):
            grad = job.grad_params if job.grad_params is not None else (0.0, 1.0)
            for t, name in enumerate(self.types):
                app = job.type_app(name)
                perf = key[0][t]
                if perf is None:  # goodput_tables keys only jobs with a fitted type
                    raise ValueError(f"job {job.name!r} has no model for type {name!r}")
                rows[a, cfg.ctype == t] = (*perf, *grad, app.init_batch_size,
                                           app.max_batch_size, app.min_local_bsz,
                                           app.max_local_bsz)
        good = goodput_grid(rows, cfg.nodes[None, :].astype(np.float64),
                            cfg.gpus[None, :].astype(np.float64), accumulation=True)
        for a, (i, job, key) in enumerate(todo):
            tables = {}
            for t, name in enumerate(self.types):
                row = np.zeros(MAX_REPLICAS + 1)
                cols = cfg.ctype == t
                row[cfg.gpus[cols]] = good[a, cols]
                tables[name] = row
            self._typed_tables[job.name] = (key, tables)
            out[i] = tables


class SiaAdapter:
    """Our :class:`~goodput_jax.sched.sia.SiaPolicy` behind the simulator's policy interface.

    Args:
        model: the :class:`SiaModel` shared with the cluster loop.
        cluster: ``{type: (nodes, GPUs per node)}`` (node ids as in
            :func:`~.cluster.cluster_nodes`).
        **policy_kwargs: passed to ``SiaPolicy`` (``p``, ``lambda_n``, ``lambda_a`` ...;
            ``Any``: its arguments differ in type, it checks them).

    Example:
        >>> adapter = SiaAdapter(SiaModel({"aws": (1, 4)}), {"aws": (1, 4)})   # doctest: +SKIP
    """

    name = "sia"

    def __init__(self, model: SiaModel, cluster: Mapping[str, tuple[int, int]],
                 **policy_kwargs: Any) -> None:
        from goodput_jax.sched.sia import SiaPolicy

        self.model = model
        self.cluster = dict(cluster)
        _, self.node_types = cluster_nodes(self.cluster)
        self.policy = SiaPolicy(resource="nvidia.com/gpu", **policy_kwargs)

    def optimize(self, jobs: Mapping[str, SimJob], nodes: Mapping[int, int],
                 prev_allocations: Mapping[str, Sequence[int]], now: float,
                 ) -> dict[str, list[int]]:
        """Allocations from SiaPolicy for the active ``jobs``."""
        from goodput_jax.sched.types import JobInfo, JobOptions, NodeInfo

        if not jobs:
            return {}
        names = list(jobs)
        tables = self.model.goodput_tables([jobs[k] for k in names])
        infos = {}
        for k, table in zip(names, tables):
            job = jobs[k]
            cap = replica_cap(job)
            if table is None:
                # Not run yet: Sia ranks the types by the 1-GPU throughput it profiled at
                # submission (the job's replica cap is 1 until it has run).
                thr = self.model.min_throughput(job)
                fns: dict[str, ConstantGoodput | RowGoodput] = {
                    t: ConstantGoodput(v) for t, v in thr.items()}
            else:
                fns = {t: RowGoodput(row) for t, row in table.items()}
            infos[k] = JobInfo({"nvidia.com/gpu": 1}, LinearSpeedup(), job.submission_time, 0,
                               cap, True, options=JobOptions(
                                   age=max(now - job.submission_time, 0.0),
                                   num_restarts=job.num_restarts or 0, goodput_fns=fns,
                                   restarting=bool(job.placement) and job.rescale_time > 0,
                                   # Sia's objective penalty (sia.py), not the job's
                                   # checkpoint-restore time in the simulator
                                   restart_penalty=SIA_RESTART_PENALTIES.get(job.app.name,
                                                                             30.0)))
        node_infos = {n: NodeInfo({"nvidia.com/gpu": g}, False, self.node_types[n])
                      for n, g in nodes.items()}
        out = self.policy.optimize(infos, node_infos,
                                   {k: list(v) for k, v in prev_allocations.items()})
        return {k: [int(n) for n in v] for k, v in out.items() if v}
