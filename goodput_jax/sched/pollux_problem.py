"""Pollux's host side: one cycle's jobs and nodes as a padded problem for the kernels.

:func:`_build_problem` turns the policy's inputs (``JobInfo``/``NodeInfo`` mappings and
the current allocation) into the padded arrays of :mod:`goodput_jax.sched.pollux_search`
(``_Arrays``) and what the policy needs to read the answer back (``_Meta``). See
:mod:`goodput_jax.sched.pollux` for the objective and the search.

Example:
    >>> from goodput_jax.sched.types import JobInfo, NodeInfo
    >>> jobs = {"a": JobInfo({"gpu": 1}, lambda n, r: r, 0.0, 0, 4)}
    >>> arrays, meta = _build_problem(jobs, {0: NodeInfo({"gpu": 2}, False)}, None, {},
    ...                               restart_penalty=30.0, clock=lambda: 0.0)
    >>> meta.job_keys, meta.n_nodes, int(arrays["fit"][0, 0])
    (['a'], 1, 2)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Generic, NamedTuple

import numpy as np

from goodput_jax.model.buckets import bucket as _bucket
from goodput_jax.sched.pollux_search import _BIG, _TOL, _Arrays, replicas_that_fit
from goodput_jax.sched.speedup import speedup_tables, table_dims
from goodput_jax.sched.types import JobInfo, JobKey, NodeInfo, NodeKey, realloc_factor

__all__: list[str] = []


class _Meta(NamedTuple, Generic[JobKey, NodeKey]):
    """What :meth:`PolluxPolicy._build` knows about the padded problem besides its arrays."""

    job_keys: list[JobKey]  # in row order (pinned, min_replicas, creation time)
    node_keys: list[NodeKey]  # in column order (non-preemptible first)
    n_jobs: int
    n_nodes: int  # real nodes (template copies follow them)
    jb: int  # padded job count
    nb: int  # padded node count
    accel: np.ndarray  # accelerators per node (real + template)
    slots: int  # replica slots over all nodes


def _sorted_nodes(nodes: Mapping[NodeKey, NodeInfo]) -> list[NodeKey]:
    """Node keys, non-preemptible first, then by key (input order if keys don't compare)."""
    keys = list(nodes)
    try:
        return sorted(keys, key=lambda k: (nodes[k].preemptible, k))
    except TypeError:
        return sorted(keys, key=lambda k: nodes[k].preemptible)


def _is_accelerator(name: str) -> bool:
    low = name.lower()
    return any(tag in low for tag in ("gpu", "tpu", "accelerator", "neuron"))


def _binding_resources(res: np.ndarray, cap: np.ndarray, drop_first: Sequence[bool]) -> list[int]:
    """Resource columns that can ever limit a placement.

    A resource ``k`` is dropped when, on every node, the replicas that still-kept
    resources requested by every job allow could never exhaust ``k`` (e.g. 32
    pods on a 4-GPU node with one GPU and one pod per replica).  Fewer columns
    make the repair cheaper; feasibility is unchanged.
    """
    num = res.shape[1]
    if num <= 1 or res.shape[0] == 0:
        return list(range(num))
    dropped: set[int] = set()
    for k in sorted(range(num), key=lambda q: not drop_first[q]):
        others = [q for q in range(num) if q != k and q not in dropped and np.all(res[:, q] > 0)]
        if not others:
            continue
        bound = np.min([np.floor(cap[:, q] / res[:, q].min() + _TOL) for q in others], axis=0)
        if np.all(res[:, k].max() * bound <= cap[:, k] * (1 + 1e-6)):
            dropped.add(k)
    return [k for k in range(num) if k not in dropped] or [0]


def _build_problem(jobs: Mapping[JobKey, JobInfo], nodes: Mapping[NodeKey, NodeInfo],
                   node_template: NodeInfo | None,
                   base_allocations: Mapping[JobKey, Sequence[NodeKey] | None], *,
                   restart_penalty: float, clock: Callable[[], float], extra_template: int = 0
                   ) -> tuple[_Arrays[np.ndarray], _Meta[JobKey, NodeKey]]:
    """Padded arrays for jobs x (real nodes [+ template copies]).

    ``clock`` gives the job ages where ``JobInfo.age`` is unset; ``restart_penalty``
    (seconds) sets the restart penalty factor.
    """
    job_keys = list(jobs)
    for k in job_keys:
        if not isinstance(jobs[k], JobInfo):
            raise TypeError(f"jobs[{k!r}] must be a JobInfo, got {type(jobs[k]).__name__}")
    node_keys = _sorted_nodes(nodes)
    for nk in node_keys:
        if not isinstance(nodes[nk], NodeInfo):
            raise TypeError(f"nodes[{nk!r}] must be a NodeInfo, got {type(nodes[nk]).__name__}")
    node_index = {k: i for i, k in enumerate(node_keys)}
    n_jobs, n_nodes = len(job_keys), len(node_keys)
    # Base allocation (unknown jobs/nodes dropped).
    base = np.zeros((n_jobs, n_nodes), np.int32)
    for j, key in enumerate(job_keys):
        for node_key in base_allocations.get(key, ()) or ():
            if node_key in node_index:
                base[j, node_index[node_key]] += 1
    pinned = np.array([(not jobs[k].preemptible) and base[j].sum() > 0
                       for j, k in enumerate(job_keys)], bool)
    # Order: pinned, then min_replicas, then creation time (stable).
    order = sorted(range(n_jobs), key=lambda j: (not pinned[j], jobs[job_keys[j]].min_replicas,
                                                 jobs[job_keys[j]].creation_time))
    job_keys = [job_keys[j] for j in order]
    base, pinned = base[order], pinned[order]
    infos = [jobs[k] for k in job_keys]
    rtypes = sorted({r for job in infos for r, v in job.resources.items() if v > 0})
    total_nodes = n_nodes + extra_template
    # Buckets of at least 16: small problems share one compiled search.
    jb, nb, kb = _bucket(n_jobs, 16), _bucket(total_nodes, 16), max(len(rtypes), 1)
    res = np.zeros((jb, kb), np.float32)
    for j, job in enumerate(infos):
        for r, name in enumerate(rtypes):
            res[j, r] = job.resources.get(name, 0)
    node_infos = [nodes[k] for k in node_keys]
    if extra_template:
        if node_template is None:
            raise ValueError(f"extra_template ({extra_template}) needs a node_template")
        node_infos += [node_template] * extra_template
    cap = np.zeros((nb, kb), np.float32)
    for n, node in enumerate(node_infos):
        for r, name in enumerate(rtypes):
            cap[n, r] = node.resources.get(name, 0)
    # Replicas of each job that fit alone on each node.
    fit = replicas_that_fit(cap[None], res, np)
    fit[n_jobs:] = 0
    fit[:, total_nodes:] = 0
    if not rtypes:  # jobs request nothing: one replica slot per node and job
        fit[:n_jobs, :total_nodes] = _BIG
    min_r = np.zeros(jb, np.int32)
    max_r = np.zeros(jb, np.int32)
    min_r[:n_jobs] = [job.min_replicas for job in infos]
    max_r[:n_jobs] = [job.max_replicas for job in infos]
    max_r[:n_jobs] = np.minimum(max_r[:n_jobs], fit[:n_jobs].sum(axis=1).clip(0, _BIG))
    # Speedup tables (n <= min(replicas, nodes)).
    top_r = int(max(max_r.max(), 1))
    tn, tr = table_dims(min(top_r, max(total_nodes, 1)), top_r)
    table = np.zeros((jb, tn + 1, tr + 1), np.float32)
    if n_jobs:
        table[:n_jobs] = speedup_tables([job.speedup_fn for job in infos], tn, tr)
    # Fair share over the real nodes: 1/J of the job's replica slots.
    slots = fit[:n_jobs, :n_nodes].astype(np.float64).sum(axis=1)
    share = slots / max(n_jobs, 1)
    fair = np.ones(jb, np.float32)
    for j in range(n_jobs):
        per_node = max(int(fit[j, :n_nodes].max(initial=0)), 1)
        if share[j] >= 1:
            r = int(min(math.floor(share[j]), max(max_r[j], 1)))
            value = table[j, min(math.ceil(r / per_node), tn), min(r, tr)]
        else:
            value = share[j] * table[j, 1, 1]
        fair[j] = value if value > 0 else 1.0
    # Restart penalty factor.
    now = clock()
    factor = np.ones(jb, np.float32)
    for j, job in enumerate(infos):
        age = job.age if job.age is not None else now - job.creation_time
        age = max(age, 0.0)
        pen = restart_penalty
        factor[j] = realloc_factor(age, job.num_restarts, pen)
    accel = [i for i, name in enumerate(rtypes) if _is_accelerator(name)]
    if accel:
        per_node_accel = cap[:total_nodes, accel[0]].astype(np.float64)
    else:
        per_node_accel = fit[:n_jobs, :total_nodes].max(axis=0, initial=0).astype(np.float64)
    keep = _binding_resources(res[:n_jobs], cap[:total_nodes],
                              [not _is_accelerator(name) for name in rtypes])
    res, cap = np.ascontiguousarray(res[:, keep]), np.ascontiguousarray(cap[:, keep])
    base_p = np.zeros((jb, nb), np.int32)
    base_p[:n_jobs, :n_nodes] = base
    pinned_p = np.zeros(jb, bool)
    pinned_p[:n_jobs] = pinned
    valid_job = np.arange(jb) < n_jobs
    valid_node = np.arange(nb) < total_nodes
    pinned_rows = base_p * pinned_p[:, None]
    free = cap - np.einsum("jn,jk->nk", pinned_rows.astype(np.float32), res)
    pinned_dist_node = ((pinned_rows > 0) & ((pinned_rows > 0).sum(axis=1) > 1)[:, None]).any(0)
    arrays: _Arrays[np.ndarray] = {
        "free": free, "pinned_dist_node": pinned_dist_node, "res": res, "cap": cap,
        "fit": fit, "min_r": min_r, "max_r": max_r, "table": table, "fair": fair,
        "factor": factor, "base": base_p, "running": base_p.sum(axis=1) > 0,
        "pinned": pinned_p, "valid_job": valid_job, "valid_node": valid_node,
        "num_nodes": np.asarray(total_nodes, np.int32)}
    meta = _Meta(job_keys=job_keys, node_keys=node_keys, n_jobs=n_jobs, n_nodes=n_nodes,
                 jb=jb, nb=nb, accel=per_node_accel, slots=int(fit.max(axis=0).sum()))
    return arrays, meta
