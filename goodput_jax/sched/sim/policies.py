"""Scheduling policies of the simulator: Tiresias and Optimus+Oracle baselines, Pollux adapter.

Every policy implements::

    optimize(jobs, nodes, prev_allocations, now) -> {job_name: [node, ...]}

with ``jobs`` the active :class:`~goodput_jax.sched.sim.job.SimJob` objects by name (in
submission order), ``nodes`` the GPU count per node index, ``prev_allocations`` the current
allocations and ``now`` the simulated time. An allocation lists one node index per replica.

- :class:`TiresiasPolicy`: two-queue discretised least-attained-service (Gu et al., NSDI'19,
  as the Pollux paper runs it). Jobs get exactly the workload's replica count or nothing; a
  job that has used ``queue_threshold`` GPU-seconds is demoted to the low-priority queue;
  within a queue jobs are served first come, first served; a job that does not fit is skipped
  (smaller jobs behind it may start), running jobs that lose their place are preempted.
- :class:`OptimusPolicy`: Optimus (Peng et al., EuroSys'18) with an oracle throughput model,
  as in the Pollux paper: every active job gets one GPU in submission order, then GPUs go one
  at a time to the job with the largest marginal gain in predicted remaining time,
  ``(T(r) - T(r+1)) * remaining_iterations``, with step times ``T`` read from the traces
  (the oracle) at the workload's batch size.
- :class:`PolluxAdapter` (in :mod:`goodput_jax.sched.sim.pollux_adapter`): our
  :class:`~goodput_jax.sched.PolluxPolicy` on JobInfo/NodeInfo built from the jobs.

Example:
    >>> policy = TiresiasPolicy()
    >>> policy.optimize({}, {0: 4}, {}, 0.0)
    {}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from goodput_jax.model.hints import max_replicas_allowed
from goodput_jax.sched.sim.job import SimJob, fixed_batch_config

__all__ = ["OptimusPolicy", "SimPolicy", "TiresiasPolicy", "place_replicas"]


class SimPolicy(Protocol):
    """What the cluster loop calls every scheduling interval."""

    name: str

    def optimize(self, jobs: Mapping[str, SimJob], nodes: Mapping[int, int],
                 prev_allocations: Mapping[str, Sequence[int]], now: float,
                 ) -> dict[str, list[int]]:
        ...  # pragma: no cover


def place_replicas(num: int, free: dict[int, int]) -> list[int]:
    """Take ``num`` GPUs, repeatedly from the node with the most free GPUs (lowest index wins
    ties); ``free`` is updated in place.

    Raises:
        ValueError: if fewer than ``num`` GPUs are free.

    Example:
        >>> free = {0: 2, 1: 4}
        >>> place_replicas(5, free), free
        ([1, 1, 1, 1, 0], {0: 1, 1: 0})
    """
    if num > sum(free.values()):
        raise ValueError(f"cannot place {num} replicas on {sum(free.values())} free GPUs")
    alloc: list[int] = []
    while len(alloc) < num:
        node = max(free, key=lambda k: (free[k], -k))
        take = min(free[node], num - len(alloc))
        alloc.extend([node] * take)
        free[node] -= take
    return alloc


class TiresiasPolicy:
    """Two-queue discretised least-attained-service with fixed (workload) replica counts.

    Args:
        queue_threshold: GPU-seconds of service after which a job drops to the second queue
            (Tiresias' setting in the Pollux experiments: 16 GPU-hours).

    Example:
        >>> TiresiasPolicy(queue_threshold=3600.0).queue_threshold
        3600.0
    """

    name = "tiresias"

    def __init__(self, queue_threshold: float = 3600.0 * 16) -> None:
        if not queue_threshold > 0:
            raise ValueError(f"queue_threshold must be > 0, got {queue_threshold}")
        self.queue_threshold = float(queue_threshold)
        self._queues: tuple[list[str], list[str]] = ([], [])
        self._running: set[str] = set()
        self._last_time: dict[str, float] = {}
        self._executed: dict[str, float] = {}

    def _demand(self, job: SimJob) -> int:
        if job.target_num_replicas is None:
            raise ValueError(f"Tiresias needs target_num_replicas for job {job.name!r}")
        return int(job.target_num_replicas)

    def optimize(self, jobs: Mapping[str, SimJob], nodes: Mapping[int, int],
                 prev_allocations: Mapping[str, Sequence[int]], now: float,
                 ) -> dict[str, list[int]]:
        """Return the allocations for the next interval (see the class docstring)."""
        q0, q1 = self._queues
        q0[:] = [k for k in q0 if k in jobs]
        q1[:] = [k for k in q1 if k in jobs]
        self._running &= set(jobs)
        allocations = {k: list(v) for k, v in prev_allocations.items() if k in jobs and v}
        for key in jobs:
            if key not in self._last_time:
                q0.append(key)
                self._last_time[key] = now
                self._executed[key] = 0.0
        # Attained service of running jobs; demotion.
        for key, job in jobs.items():
            if key in self._running:
                self._executed[key] += now - self._last_time[key]
                if key in q0 and self._executed[key] * self._demand(job) >= self.queue_threshold:
                    q0.remove(key)
                    q1.append(key)
            self._last_time[key] = now
        # Decide who runs: queue order, skipping jobs that do not fit.
        num_free = sum(int(g) for g in nodes.values())
        running: set[str] = set()
        for queue in (q0, q1):
            for key in queue:
                need = self._demand(jobs[key])
                if need <= num_free:
                    running.add(key)
                    num_free -= need
                else:
                    allocations.pop(key, None)
        for key in list(allocations):
            if key not in running:
                allocations.pop(key)
        self._running = running
        # Place newly started jobs.
        free = {int(n): int(g) for n, g in nodes.items()}
        for alloc in allocations.values():
            for n in alloc:
                free[n] -= 1
        for queue in (q0, q1):
            for key in queue:
                if key in running and not allocations.get(key):
                    allocations[key] = place_replicas(self._demand(jobs[key]), free)
        return allocations


class OptimusPolicy:
    """Optimus with an oracle step-time model and the workload's batch size.

    Args:
        ramp_up: cap each job at twice the largest replica count it has run with (as the
            adaptive jobs are capped), instead of letting the first allocation jump to any size.

    Example:
        >>> OptimusPolicy().name
        'optimus'
    """

    name = "optimus"

    def __init__(self, ramp_up: bool = True) -> None:
        self.ramp_up = bool(ramp_up)
        self._cache: dict[tuple[str, int, int], float] = {}

    @staticmethod
    def _target(job: SimJob) -> int:
        if job.target_batch_size is None:
            raise ValueError(f"Optimus needs target_batch_size for job {job.name!r}")
        return int(job.target_batch_size)

    def max_replicas(self, job: SimJob) -> int:
        """Largest replica count Optimus may give ``job``."""
        cap = min(64, self._target(job) // job.app.min_local_bsz)
        if self.ramp_up:
            cap = min(cap, max_replicas_allowed(job.max_profiled_replicas))
        return max(cap, 1)

    def predict_step_time(self, job: SimJob, num_replicas: int) -> float:
        """Oracle time of one optimizer step (with accumulation) on ``num_replicas`` GPUs
        packed 4 per node."""
        key = (job.app.name, self._target(job), int(num_replicas))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        placement: tuple[int, ...] = ()
        while sum(placement) < num_replicas:
            placement += (min(num_replicas - sum(placement), 4),)
        atomic, accum = fixed_batch_config(job.app, num_replicas, self._target(job))
        step, sync = job.app.get_throughput(placement, atomic)
        out = step + (step - sync) * accum
        self._cache[key] = out
        return out

    def remaining_iterations(self, job: SimJob) -> float:
        """Iterations left at the workload's batch size, from the current epoch."""
        bsz = self._target(job)
        done = job.app.get_completion_epoch(bsz)
        if done <= job.epoch:
            return 1.0
        return job.app.get_iteration(bsz, done) - job.app.get_iteration(bsz, job.epoch)

    def _gain(self, job: SimJob, r: int, remaining: float, cap: int) -> float:
        if r + 1 > cap:
            return 0.0
        return (self.predict_step_time(job, r) - self.predict_step_time(job, r + 1)) * remaining

    def optimize(self, jobs: Mapping[str, SimJob], nodes: Mapping[int, int],
                 prev_allocations: Mapping[str, Sequence[int]], now: float,
                 ) -> dict[str, list[int]]:
        """Return the allocations for the next interval (see the class docstring)."""
        num_gpus = sum(int(g) for g in nodes.values())
        replicas: dict[str, int] = {}
        gain: dict[str, float] = {}
        remaining: dict[str, float] = {}
        caps: dict[str, int] = {}
        for key, job in jobs.items():
            if num_gpus < 1:
                replicas[key] = 0
                continue
            replicas[key] = 1
            num_gpus -= 1
            remaining[key] = self.remaining_iterations(job)
            caps[key] = self.max_replicas(job)
            gain[key] = self._gain(job, 1, remaining[key], caps[key])
        while num_gpus > 0 and gain and max(gain.values()) > 0:
            key = max(gain, key=lambda k: gain[k])
            replicas[key] += 1
            num_gpus -= 1
            gain[key] = self._gain(jobs[key], replicas[key], remaining[key], caps[key])
        # Placement: keep allocations whose size is unchanged, place the rest largest first.
        allocations: dict[str, list[int]] = {}
        free = {int(n): int(g) for n, g in nodes.items()}
        for key, r in replicas.items():
            prev = list(prev_allocations.get(key, ()))
            if r > 0 and len(prev) == r:
                allocations[key] = prev
                for n in prev:
                    free[n] -= 1
        for key in sorted(replicas, key=lambda k: -replicas[k]):
            r = replicas[key]
            if r > 0 and key not in allocations:
                allocations[key] = place_replicas(r, free)
        return allocations
