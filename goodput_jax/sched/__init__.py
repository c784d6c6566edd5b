"""goodput_jax.sched: cluster policies that share accelerators by modelled goodput.

The curated API, importable from here (each name is loaded on first use, so
``import goodput_jax.sched`` starts no JAX)::

    from goodput_jax.sched import JobInfo, NodeInfo, SpeedupFunction
    from goodput_jax.sched import PolluxPolicy          # one accelerator type
    from goodput_jax.sched import SiaPolicy             # several types (Sia)

Rooms, one job each:

* :mod:`.types`: ``JobInfo`` and ``NodeInfo`` (with ``accelerator_type``);
* :mod:`.speedup`: ``SpeedupFunction``, the batched table kernel ``goodput_grid``,
  ``speedup_tables`` and the (type x count) ``goodput_matrix``;
* :mod:`.pollux`: ``PolluxPolicy`` (genetic search in JAX; the padded problem built in
  :mod:`.pollux_problem`, searched by the kernels of :mod:`.pollux_search`);
* :mod:`.sia`: ``SiaPolicy`` (Lagrangian relaxation + local search in JAX,
  :mod:`.sia_solver`; configurations and their placement on nodes in :mod:`.sia_place`);
* :mod:`.hints`: a job's published hints + ``JobFacts`` -> ``JobInfo`` (``build_job_info``);
* :mod:`.warmup`: ``policy.precompile``, the persistent compilation cache, ``CompileCounter``;
* :mod:`.sim`: the trace-driven simulator.

Example:
    >>> from goodput_jax.sched import NodeInfo
    >>> NodeInfo({"gpu": 8}, False, "a100").accelerator_type
    'a100'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from goodput_jax._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "JobInfo": "goodput_jax.sched.types",
    "JobOptions": "goodput_jax.sched.types",
    "NodeInfo": "goodput_jax.sched.types",
    "SpeedupFunction": "goodput_jax.sched.speedup",
    "goodput_grid": "goodput_jax.sched.speedup",
    "goodput_matrix": "goodput_jax.sched.speedup",
    "speedup_tables": "goodput_jax.sched.speedup",
    "PolluxCarry": "goodput_jax.sched.pollux",
    "PolluxPolicy": "goodput_jax.sched.pollux",
    "SiaPolicy": "goodput_jax.sched.sia",
    "sia_configs": "goodput_jax.sched.sia",
    "solve_assignment": "goodput_jax.sched.sia",
    "JobFacts": "goodput_jax.sched.hints",
    "build_job_info": "goodput_jax.sched.hints",
    "job_info_from_hints": "goodput_jax.sched.hints",
    "speedup_fns_by_type": "goodput_jax.sched.hints",
    "CompileCounter": "goodput_jax.sched.warmup",
    "enable_compilation_cache": "goodput_jax.sched.warmup",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports("goodput_jax.sched", _EXPORTS, globals())


if TYPE_CHECKING:  # pragma: no cover
    from goodput_jax.sched.hints import (  # noqa: F401
        JobFacts,
        build_job_info,
        job_info_from_hints,
        speedup_fns_by_type,
    )
    from goodput_jax.sched.pollux import PolluxCarry, PolluxPolicy  # noqa: F401
    from goodput_jax.sched.sia import SiaPolicy, sia_configs, solve_assignment  # noqa: F401
    from goodput_jax.sched.speedup import (  # noqa: F401
        SpeedupFunction,
        goodput_grid,
        goodput_matrix,
        speedup_tables,
    )
    from goodput_jax.sched.types import JobInfo, JobOptions, NodeInfo  # noqa: F401
    from goodput_jax.sched.warmup import CompileCounter, enable_compilation_cache  # noqa: F401
