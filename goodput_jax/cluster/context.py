"""What a job's process knows about its launch: :class:`JobContext`.

The runtime starts one process per allocated node; each gets a JobContext
(its rank, the process count, the JAX coordinator, its devices, where to
checkpoint and record, the stop request, the hooks' and controller's settings).
A ``module:function`` entry point receives it as its argument; a script reads it
with :func:`job_context` (from ``$GOODPUT_JAX_CLUSTER_CONTEXT``).

A job that checkpoints and returns because the runtime asked it to stop says so
with :meth:`JobContext.mark_stopped` (or the module's :func:`mark_stopped`)
before it returns (a ``module:function`` may return
:data:`goodput_jax.cluster.runner.STOPPED` instead): the runtime then relaunches
it; a job that returns without it is recorded as finished.

Example:
    >>> ctx = JobContext(job="j", attempt=0, rank=0, num_processes=1, coordinator=None,
    ...                  local_devices=2, accelerator_type="a", nodes=("n0",),
    ...                  checkpoint_dir="/tmp/ckpt", store="sqlite:////tmp/g.db",
    ...                  stop_path="/tmp/stop", progress_path="/tmp/p.jsonl")
    >>> JobContext.from_json(ctx.to_json()) == ctx
    True
    >>> ctx.total_devices
    2
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from goodput_jax.adaptive.stop import StopRequest
    from goodput_jax.cluster.checkpointing import CheckpointTimer
    from goodput_jax.cluster.plan import NodeRecord
    from goodput_jax.cluster.spec import JobSpec
    from goodput_jax.cluster.state import StateDir

__all__ = ["CONTEXT_ENV", "JobContext", "job_context", "launch_contexts", "mark_stopped",
           "stop_marked"]

_STOPPED: list[bool] = [False]
_TIMER: list[CheckpointTimer | None] = [None]  # this process's (one launch per process)


def mark_stopped() -> None:
    """Record that this process stops on the runtime's request (it checkpointed and
    returns early): the launch counts as stopped, not finished.

    Example:
        >>> reset_stopped(); stop_marked()
        False
        >>> mark_stopped(); stop_marked()
        True
        >>> reset_stopped()
    """
    _STOPPED[0] = True


def stop_marked() -> bool:
    """Whether :func:`mark_stopped` was called in this process (since its launch began)."""
    return _STOPPED[0]


def reset_stopped() -> None:
    """Clear the mark and the checkpoint timer (the runner does, before it runs the
    entry point)."""
    _STOPPED[0] = False
    _TIMER[0] = None

#: Environment variable holding a process's JobContext as JSON.
CONTEXT_ENV = "GOODPUT_JAX_CLUSTER_CONTEXT"


@dataclass(frozen=True)
class JobContext:
    """One process of one launch of a job.

    Attributes:
        job: the job name (also its goodput job name).
        attempt: the launch number (0 first; each restart adds one).
        rank: this process's index (``jax.process_index()`` once initialised).
        num_processes: processes of this launch (one per allocated node).
        coordinator: ``host:port`` of the ``jax.distributed`` coordinator (None: one process).
        local_devices: devices of this process.
        accelerator_type: the type of the nodes it runs on.
        nodes: the node labels of the launch, rank order.
        devices_per_process: devices of every process, rank order (default: all
            ``local_devices``).
        checkpoint_dir, store, stop_path, progress_path: where it checkpoints,
            records goodput, polls the stop request, logs progress.
        hooks, adaptive: keyword arguments of its GoodputHooks / AdaptiveBatchSize
            (``Any``: JSON values, from the job's spec).
        args: the spec's arguments.
        lease: seconds this process trains on without reaching ``raylet`` or ``head``
            before it stops itself (:mod:`goodput_jax.cluster.lease`; 0: no lease).
        raylet: ``host:port`` of its node's raylet (its node manager), when known.
        head: ``host:port`` of the cluster's head (its GCS), when known.
        reliability_path: the controller's record of node losses
            (``STATE_DIR/reliability.json``) that :meth:`should_checkpoint` follows.
    """

    job: str
    attempt: int
    rank: int
    num_processes: int
    coordinator: str | None
    local_devices: int
    accelerator_type: str | None
    nodes: tuple[str, ...]
    checkpoint_dir: str
    store: str
    stop_path: str
    progress_path: str
    devices_per_process: tuple[int, ...] = ()
    hooks: Mapping[str, Any] = field(default_factory=dict)
    adaptive: Mapping[str, Any] = field(default_factory=dict)
    args: tuple[str, ...] = ()
    lease: float = 0.0
    raylet: str | None = None
    head: str | None = None
    reliability_path: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", tuple(self.nodes))
        object.__setattr__(self, "args", tuple(self.args))
        dpp = tuple(self.devices_per_process) or (self.local_devices,) * self.num_processes
        object.__setattr__(self, "devices_per_process", dpp)

    @property
    def total_devices(self) -> int:
        """Devices of the whole launch."""
        return int(sum(self.devices_per_process))

    @property
    def is_primary(self) -> bool:
        """Whether this is rank 0 (it fits, publishes hints and logs progress)."""
        return self.rank == 0

    def to_json(self) -> dict[str, Any]:
        """JSON-safe dict (``Any``: JSON values)."""
        out = dataclasses.asdict(self)
        for k in ("nodes", "args", "devices_per_process"):
            out[k] = list(out[k])
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobContext:
        """Inverse of :meth:`to_json` (``Any``: JSON values)."""
        return cls(**dict(data))

    def stop_request(self, check_every: int = 1) -> StopRequest:
        """The launch's :class:`goodput_jax.adaptive.stop.StopRequest`."""
        from goodput_jax.adaptive.stop import StopRequest

        return StopRequest(self.stop_path, check_every=check_every,
                           multiprocess=self.num_processes > 1)

    @property
    def fence_path(self) -> str:
        """The file where the runtime writes the job's current attempt number."""
        return os.path.join(os.path.dirname(os.path.abspath(self.progress_path)), "attempt")

    def is_current(self) -> bool:
        """Whether this launch is still the job's current one.

        A process of an older launch can outlive its supervisor for a moment (its
        controller died, a node's processes are being torn down); it must then
        neither checkpoint nor log. True where no fence was written (not
        started by the runtime).
        """
        try:
            with open(self.fence_path) as fh:
                return int(fh.read().strip() or -1) == self.attempt
        except (FileNotFoundError, ValueError):
            return True

    def mark_stopped(self) -> None:
        """This process checkpointed and returns on a stop request (see :func:`mark_stopped`)."""
        mark_stopped()

    def should_checkpoint(self, step: int) -> bool:
        """Whether to save before ``step``: True once the goodput-optimal seconds of work
        since the last save have passed (Young/Daly from this job's measured save cost
        and the cluster's observed time between node losses, or the operator's node
        MTBF, over the launch's nodes; :mod:`goodput_jax.cluster.checkpointing`).
        Call it once per step; the save it asks for is measured from the next call.
        When it answers True, rank 0 logs the advice to the progress log (``event``
        ``"checkpoint advice"``: the interval in steps and seconds, the save cost, the
        MTBF and the goodput predicted), for the cluster report."""
        timer = self.checkpoint_timer()
        due = timer.should_checkpoint(step)
        if due and self.progress_path:
            a = timer.advice()
            self.log_progress(event="checkpoint advice", step=step,
                              interval_steps=a.interval_steps, interval_s=a.interval_s,
                              save_cost_s=a.save_cost_s, mtbf_s=a.mtbf_s,
                              mtbf_source=a.mtbf_source, restart_s=a.restart_s,
                              restarts=timer.restarts,
                              predicted_goodput=a.predicted_goodput)
        return due

    def checkpoint_timer(self) -> CheckpointTimer:
        """This process's :class:`~goodput_jax.cluster.checkpointing.CheckpointTimer`
        (its ``advice()`` gives the interval in steps and the goodput it predicts)."""
        timer = _TIMER[0]
        if timer is None:
            from goodput_jax.cluster.checkpointing import (
                CheckpointTimer,
                last_advice,
                restart_seconds,
            )

            timer = CheckpointTimer(nodes=self.num_processes,
                                    reliability_path=self.reliability_path)
            # a relaunch starts from the save cost its earlier launches measured
            timer.carry_save_cost(last_advice(self.progress_path))
            if self.attempt > 0 and self.progress_path:
                # this launch's restart after a loss (none after a move): the advice's
                # predicted goodput pays it per loss
                restart = restart_seconds(self.progress_path, self.attempt, time.time())
                if restart is not None:
                    timer.observe_restart(restart)
            _TIMER[0] = timer
        return timer

    def log_progress(self, **record: Any) -> None:
        """Append one JSON line (rank 0 only) to the job's progress log, flushed
        (``record``, ``Any``: its JSON fields).

        The attempt, device and process counts and a wall time are added; a
        superseded launch (:meth:`is_current`) logs nothing.
        """
        if not self.is_primary or not self.is_current():
            return
        line = {"attempt": self.attempt, "devices": self.total_devices,
                "processes": self.num_processes, "t": time.time(), **record}
        with open(self.progress_path, "a") as fh:
            fh.write(json.dumps(line) + "\n")
            fh.flush()


def job_context() -> JobContext:
    """The current process's JobContext (from ``$GOODPUT_JAX_CLUSTER_CONTEXT``).

    Raises:
        RuntimeError: not started by the cluster runtime.
    """
    raw = os.environ.get(CONTEXT_ENV)
    if not raw:
        raise RuntimeError(f"${CONTEXT_ENV} is not set: this process was not started by "
                           f"the goodput_jax cluster runtime")
    return JobContext.from_json(json.loads(raw))


def launch_contexts(name: str, spec: JobSpec, attempt: int, groups: Sequence[tuple[str, int]],
                    nodes: Mapping[str, NodeRecord], coordinator: str | None,
                    sd: StateDir, lease: float = 0.0, head: str | None = None,
                    reliability_path: str | None = None) -> list[JobContext]:
    """The :class:`JobContext` of each process of one launch, rank order.

    ``spec`` is the job's :class:`~goodput_jax.cluster.spec.JobSpec`, ``groups`` its
    ``(node label, devices)`` per process, ``nodes`` the node records by label (their
    accelerator type, their raylet's address and port), ``sd`` the cluster's
    :class:`~goodput_jax.cluster.state.StateDir` (the stop and progress paths),
    ``lease`` and ``head`` the launch's lease (seconds) and the head's GCS address,
    ``reliability_path`` the controller's record of node losses.
    """
    return [JobContext(
        job=name, attempt=attempt, rank=rank, num_processes=len(groups),
        coordinator=coordinator, local_devices=k, accelerator_type=nodes[label].accelerator_type,
        nodes=tuple(g[0] for g in groups), devices_per_process=tuple(g[1] for g in groups),
        checkpoint_dir=spec.checkpoint_dir or "", store=spec.store or "",
        stop_path=sd.stop_path(name), progress_path=sd.progress_path(name),
        hooks=spec.hooks, adaptive=spec.adaptive, args=spec.args, lease=lease,
        raylet=f"{nodes[label].address}:{nodes[label].port}" if nodes[label].port else None,
        head=head, reliability_path=reliability_path)
        for rank, (label, k) in enumerate(groups)]
