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

from __future__ import annotations

from typing import TYPE_CHECKING

from goodput_jax._lazy import lazy_exports

#: public name -> the module that defines it (imported on first use)
_EXPORTS: dict[str, str] = {
    "Application": "goodput_jax.sched.sim.apps",
    "Cluster": "goodput_jax.sched.sim.cluster",
    "find_traces_dir": "goodput_jax.sched.sim.apps",
    "find_workload": "goodput_jax.sched.sim.apps",
    "load_applications": "goodput_jax.sched.sim.apps",
    "load_workload": "goodput_jax.sched.sim.cluster",
    "make_jobs": "goodput_jax.sched.sim.cluster",
    "OptimusPolicy": "goodput_jax.sched.sim.policies",
    "run_workload": "goodput_jax.sched.sim.runner",
    "SimJob": "goodput_jax.sched.sim.job",
    "SimOptions": "goodput_jax.sched.sim.options",
    "SimResult": "goodput_jax.sched.sim.cluster",
    "simulate": "goodput_jax.sched.sim.cluster",
    "TiresiasPolicy": "goodput_jax.sched.sim.policies",
    "WorkloadOptions": "goodput_jax.sched.sim.options",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports("goodput_jax.sched.sim", _EXPORTS, globals())

if TYPE_CHECKING:  # pragma: no cover
    from goodput_jax.sched.sim.apps import (  # noqa: F401
        Application,
        find_traces_dir,
        find_workload,
        load_applications,
    )
    from goodput_jax.sched.sim.cluster import (  # noqa: F401
        Cluster,
        SimResult,
        load_workload,
        make_jobs,
        simulate,
    )
    from goodput_jax.sched.sim.job import (  # noqa: F401
        SimJob,
    )
    from goodput_jax.sched.sim.options import (  # noqa: F401
        SimOptions,
        WorkloadOptions,
    )
    from goodput_jax.sched.sim.policies import (  # noqa: F401
        OptimusPolicy,
        TiresiasPolicy,
    )
    from goodput_jax.sched.sim.runner import (  # noqa: F401
        run_workload,
    )
