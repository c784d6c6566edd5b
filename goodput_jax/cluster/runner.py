"""The body of one job process: what the runtime's Ray task runs on a node.

:func:`run_replica` takes a :class:`~goodput_jax.cluster.context.JobContext`
(as JSON) and the entry point, sends the process's output to the job's log
file, initialises ``jax.distributed`` when the launch has several processes
(coordinator on the first replica's node; CPU collectives over gloo), and
runs the entry point: ``module:function`` is called with the context, a script
runs as ``__main__`` with the spec's arguments. The return value tells the
controller whether the job finished or stopped on request: a ``module:function``
returns :data:`STOPPED`, a script (or a function) calls
:func:`goodput_jax.cluster.context.mark_stopped` (``job_context().mark_stopped()``)
before it returns; anything else that returns is finished.

The process's device count comes from its environment, set by the launcher
before JAX starts (``XLA_FLAGS=--xla_force_host_platform_device_count=N`` for
fake CPU devices).

Each process holds a lease on its node's raylet and the cluster's head
(:mod:`goodput_jax.cluster.lease`): one that cannot reach either for longer than the
lease logs why and ends itself.
"""

from __future__ import annotations

import importlib
import json
import os
import runpy
import sys
from collections.abc import Callable

from goodput_jax.cluster.context import CONTEXT_ENV, JobContext, reset_stopped, stop_marked
from goodput_jax.cluster.lease import Lease, end_process

__all__ = ["STOPPED", "run_replica"]

#: What an entry point returns when it checkpointed and stopped on a stop request.
STOPPED = "stopped"


def _redirect(path: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _hold_lease(ctx: JobContext) -> Lease | None:
    """Start the process's lease on its raylet and the head (:mod:`.lease`), if any."""
    targets = [t for t in (ctx.raylet, ctx.head) if t]
    if ctx.lease <= 0 or not targets:
        return None
    lease = Lease(targets, ctx.lease)
    lease.watch(end_process(f"job {ctx.job} attempt {ctx.attempt} rank {ctx.rank}"))
    print(f"[goodput_jax.cluster] lease {ctx.lease:g} s on {', '.join(targets)}", flush=True)
    return lease


def run_replica(context: dict, entry_point: str, log_path: str,
                on_distributed: Callable[[], None] | None = None) -> dict:
    """Run one process of a launch; returns ``{"status": "finished"|"stopped", ...}``.

    ``on_distributed`` is called once ``jax.distributed`` is up (the launcher then
    releases the coordinator port it held).

    Raises:
        whatever the entry point raises (the controller counts it as a crash).
    """
    ctx = JobContext.from_json(context)
    _redirect(log_path)
    os.environ[CONTEXT_ENV] = json.dumps(ctx.to_json())
    print(f"[goodput_jax.cluster] job {ctx.job} attempt {ctx.attempt} rank {ctx.rank}/"
          f"{ctx.num_processes} on {ctx.nodes[ctx.rank]} with {ctx.local_devices} devices",
          flush=True)
    lease = _hold_lease(ctx)
    distributed = False
    if ctx.num_processes > 1:
        import jax

        if os.environ.get("JAX_PLATFORMS", "") == "cpu":
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(coordinator_address=ctx.coordinator,
                                   num_processes=ctx.num_processes, process_id=ctx.rank,
                                   initialization_timeout=120)
        distributed = True
    if on_distributed is not None:
        on_distributed()
    reset_stopped()
    try:
        if entry_point.endswith(".py"):
            old = sys.argv
            sys.argv = [entry_point, *ctx.args]
            try:
                runpy.run_path(entry_point, run_name="__main__")
                result = None
            finally:
                sys.argv = old
        else:
            module, _, func = entry_point.partition(":")
            result = getattr(importlib.import_module(module), func)(ctx)
    finally:
        if lease is not None:
            lease.release()
        sys.stdout.flush()
        sys.stderr.flush()
    if distributed:
        import jax

        try:
            jax.distributed.shutdown()
        except Exception as e:  # noqa: BLE001 - a peer already gone; the job's result stands
            print(f"[goodput_jax.cluster] jax.distributed.shutdown: {e}", flush=True)
    status = STOPPED if (result == STOPPED or stop_marked()) else "finished"
    print(f"[goodput_jax.cluster] {status}", flush=True)
    return {"status": status, "rank": ctx.rank, "pid": os.getpid()}
