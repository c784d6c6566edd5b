"""Trace-driven cluster simulator (Pollux OSDI'21 experiments) and baseline policies.

Modules: :mod:`.apps` (application model from the measured traces), :mod:`.job` (job
model), :mod:`.cluster` (scheduling loop, workloads, metrics), :mod:`.policies` (Tiresias,
Optimus+Oracle), :mod:`.pollux_adapter` (our PolluxPolicy and batched goodput-model calls;
imports JAX), :mod:`.runner` (one-call runs), :mod:`.plots`, :mod:`.cli`
(``goodput-jax simulate``). See ``docs/simulator.md``.

Example:
    >>> from goodput_jax.sched.sim import run_workload
    >>> res = run_workload("6", "tiresias")      # doctest: +SKIP
    >>> round(res.avg_jct)                        # doctest: +SKIP
    3493
"""

from goodput_jax.sched.sim.apps import (
    Application,
    find_traces_dir,
    find_workload,
    load_applications,
)
from goodput_jax.sched.sim.cluster import Cluster, SimResult, load_workload, make_jobs, simulate
from goodput_jax.sched.sim.job import SimJob
from goodput_jax.sched.sim.options import SimOptions, WorkloadOptions
from goodput_jax.sched.sim.policies import OptimusPolicy, TiresiasPolicy
from goodput_jax.sched.sim.runner import run_workload

__all__ = [
    "Application",
    "Cluster",
    "OptimusPolicy",
    "SimJob",
    "SimOptions",
    "SimResult",
    "TiresiasPolicy",
    "WorkloadOptions",
    "find_traces_dir",
    "find_workload",
    "load_applications",
    "load_workload",
    "make_jobs",
    "run_workload",
    "simulate",
]
