"""Job model of the trace-driven simulator.

A :class:`SimJob` trains one application of :mod:`goodput_jax.sched.sim.apps`. While it holds
GPUs it advances by the simulated goodput::

    goodput = gain / (step_time + accum_steps * (step_time - sync_time)) * (1 - interference)
    gain    = (var + sqr) / (var / scale + sqr),   scale = batch_size / init_batch_size
              (goodput_jax.model.formulas.gain_np, the model's own gain)

with step and sync time interpolated from the traces at its placement and atomic batch size,
and the gradient statistics of its current epoch at its batch size (an oracle, as in the
paper). Progress is scale-invariant (iterations at the initial batch size); the job finishes
when its progress reaches the end of its last epoch. A (re-)allocation first costs a restart
delay (30 s).

Adaptive (Pollux) jobs pick their batch size with the goodput model (see
:mod:`goodput_jax.sched.sim.policies`); baseline jobs use the workload's batch size, split
over their replicas with gradient accumulation where the local batch exceeds the largest
atomic batch size (:func:`fixed_batch_config`).

Example:
    >>> job = SimJob("cifar10-0", apps["cifar10"], 53.0, target_batch_size=2048)  # doctest: +SKIP
    >>> job.reallocate([0, 0, 1, 1])                                             # doctest: +SKIP
    >>> job.advance(60.0)                                                        # doctest: +SKIP
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from goodput_jax.model.formulas import gain_np
from goodput_jax.model.types import GradParams
from goodput_jax.sched.sim.apps import Application

__all__ = ["SimJob", "StepResult", "fixed_batch_config", "placement_of"]

RESTART_DELAY = 30.0


def _ceil(x: float) -> int:
    return math.ceil(x - 1e-8)


def fixed_batch_config(app: Application, num_replicas: int, batch_size: int) -> tuple[int, int]:
    """Atomic batch size and accumulation steps that run ``batch_size`` on ``num_replicas``.

    The authors' rule: the local batch ``ceil(M / R)`` is split into ``s + 1`` micro-batches
    no larger than ``max_local_bsz``; one replica running above the initial batch size uses at
    least one accumulation step; the result is capped so that ``R * b * (s + 1)`` does not
    exceed the application's maximum batch size.

    Example:
        >>> fixed_batch_config(apps["cifar10"], 2, 4096)     # doctest: +SKIP
        (1024, 1)
    """
    if num_replicas < 1:
        raise ValueError(f"num_replicas must be >= 1, got {num_replicas}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    local_bsz = _ceil(batch_size / num_replicas)
    accum = _ceil(local_bsz / app.max_local_bsz) - 1
    if num_replicas == 1 and batch_size > app.init_batch_size:
        accum = max(1, accum)
    atomic = _ceil(local_bsz / (accum + 1))
    count = num_replicas * (accum + 1)
    atomic = min(atomic, int(app.max_batch_size / count))
    return max(atomic, 1), accum


def placement_of(allocation: Sequence[int]) -> tuple[int, ...]:
    """Replicas per node, in order of first appearance, of an allocation ``[node, ...]``.

    Example:
        >>> placement_of([3, 3, 0, 3])
        (3, 1)
    """
    counts: dict[int, int] = {}
    for n in allocation:
        counts[n] = counts.get(n, 0) + 1
    return tuple(counts.values())


@dataclass
class StepResult:
    """What one call of :meth:`SimJob.advance` did."""

    remaining: float  # seconds of the call left unused (> 0 only after an epoch boundary)
    crossed_epoch: bool  # reached an epoch boundary (the batch size may be re-optimised)
    new_config: bool  # ran a (nodes, replicas, atomic bsz) not seen before (re-fit needed)


@dataclass
class SimJob:
    """One simulated training job.

    Attributes:
        name: job name from the workload.
        app: its application model.
        submission_time: submission second.
        target_num_replicas: replicas a baseline asks for (None for adaptive jobs).
        target_batch_size: fixed total batch size (None = chosen by the goodput model).
    """

    name: str
    app: Application
    submission_time: float
    target_num_replicas: int | None = None
    target_batch_size: int | None = None
    # --- dynamic state
    allocation: tuple[int, ...] = ()
    placement: tuple[int, ...] = ()
    atomic_bsz: int = 0
    accum_steps: int = 0
    progress: float = 0.0
    epoch: int = 0
    completion_time: float | None = None
    rescale_time: float = 0.0
    attained_service: float = 0.0  # GPU-seconds held
    run_time: float = 0.0  # seconds held (any number of GPUs)
    num_restarts: int | None = None
    profile: dict[tuple[int, int, int], tuple[float, float]] = field(default_factory=dict)
    perf_params: tuple[float, ...] | None = None
    grad_params: tuple[float, float] | None = None
    last_goodput: float = 0.0
    # --- heterogeneous clusters (None/empty on a homogeneous one)
    type_apps: dict[str, Application] | None = None  # step times measured per type
    accel_type: str | None = None  # type the job runs on now (the slowest if mixed)
    restart_delay: float = RESTART_DELAY
    # the Sia artifact's calibration: true goodput divided by this (1 = none; never seen by
    # the policies' models, which are fitted to the traces' step times)
    slowdown: float = 1.0
    profile_by_type: dict[str, dict[tuple[int, int, int], tuple[float, float]]] = field(
        default_factory=dict)
    perf_by_type: dict[str, tuple[float, ...]] = field(default_factory=dict)

    # ---------------------------------------------------------------- properties
    @property
    def speed_app(self) -> Application:
        """The application model whose step times apply now (the current type's)."""
        if self.type_apps is not None and self.accel_type is not None:
            return self.type_apps[self.accel_type]
        return self.app

    def type_app(self, accel_type: str) -> Application:
        """The application model of ``accel_type`` (a job of a heterogeneous cluster).

        Raises:
            ValueError: the job has no per-type applications (``type_apps`` is None).
        """
        if self.type_apps is None:
            raise ValueError(f"job {self.name!r} has no per-type applications (type_apps)")
        return self.type_apps[accel_type]

    @property
    def num_replicas(self) -> int:
        return sum(self.placement)

    @property
    def num_nodes(self) -> int:
        return len(self.placement)

    @property
    def batch_size(self) -> int:
        """Current total batch size ``R * b * (s + 1)`` (0 when not running)."""
        return self.num_replicas * self.atomic_bsz * (self.accum_steps + 1)

    @property
    def max_profiled_replicas(self) -> int:
        return max((k[1] for k in self.profile), default=0)

    @property
    def adaptive(self) -> bool:
        """True when the goodput model chooses the batch size."""
        return self.target_batch_size is None

    def is_active(self, now: float) -> bool:
        """Submitted and not finished at time ``now``."""
        return self.submission_time <= now and self.completion_time is None

    # ---------------------------------------------------------------- batch size
    def default_batch_config(self) -> tuple[int, int]:
        """Batch configuration without a goodput model (fixed or initial batch size)."""
        r = self.num_replicas
        bsz = self.target_batch_size
        if bsz is None:
            bsz = max(self.app.init_batch_size, self.app.min_local_bsz * r)
        return fixed_batch_config(self.speed_app, r, bsz)

    def set_batch_config(self, atomic_bsz: int, accum_steps: int) -> None:
        """Install a batch configuration, capped by the application's maximum batch size."""
        if not self.placement:
            return
        count = self.num_replicas * (int(accum_steps) + 1)
        atomic = min(int(atomic_bsz), int(self.app.max_batch_size / count))
        self.atomic_bsz = max(atomic, 1)
        self.accum_steps = int(accum_steps)

    # ---------------------------------------------------------------- allocation
    def reallocate(self, allocation: Sequence[int]) -> None:
        """Move to a new allocation ``[node, ...]`` (one entry per replica); [] = suspend.

        A non-empty allocation starts the restart countdown and installs the default batch
        configuration (adaptive jobs re-optimise it right after, batched with the others).
        """
        alloc = tuple(int(n) for n in allocation)
        if alloc:
            self.allocation = alloc
            self.placement = placement_of(alloc)
            self.set_batch_config(*self.default_batch_config())
            self.rescale_time = self.restart_delay
            self.num_restarts = 0 if self.num_restarts is None else self.num_restarts + 1
        else:
            self.allocation = ()
            self.placement = ()
            self.atomic_bsz = 0
            self.accum_steps = 0
            self.rescale_time = 0.0

    # ---------------------------------------------------------------- simulation
    def current_rates(self) -> tuple[float, float, float, float, float]:
        """``(goodput, step_time, sync_time, grad_sqr, grad_var)`` at the current config."""
        step_time, sync_time = self.speed_app.get_throughput(self.placement, self.atomic_bsz)
        bsz = self.batch_size
        grad_sqr, grad_var = self.app.get_grad_stats(bsz, self.epoch)
        gain = gain_np(GradParams(grad_sqr, grad_var), bsz / self.app.init_batch_size)
        total = step_time + (step_time - sync_time) * self.accum_steps
        return float(gain) / total, step_time, sync_time, grad_sqr, grad_var

    def advance(self, seconds: float, now: float, interference: float = 0.0) -> StepResult:
        """Run for up to ``seconds`` from time ``now``, stopping early at an epoch boundary.

        Args:
            seconds: time budget.
            now: simulated time at the start of this call (for the completion time).
            interference: fractional slowdown from sharing nodes.

        Returns:
            A :class:`StepResult`; call again with ``remaining`` after re-optimising.
        """
        if seconds < 0:
            raise ValueError(f"seconds must be >= 0, got {seconds}")
        if not self.placement or self.completion_time is not None or seconds == 0:
            return StepResult(0.0, False, False)
        gpus = self.num_replicas
        if self.rescale_time > 0:
            delay = min(self.rescale_time, seconds)
            self.rescale_time -= delay
            self.attained_service += delay * gpus
            self.run_time += delay
            seconds -= delay
            now += delay
            if seconds <= 0:
                return StepResult(0.0, False, False)
        goodput, step_time, sync_time, sqr, var = self.current_rates()
        goodput *= (1.0 - interference) / self.slowdown
        self.last_goodput = goodput
        self.grad_params = (sqr, var)
        key = (self.num_nodes, self.num_replicas, self.atomic_bsz)
        new_config = key not in self.profile
        if new_config:
            self.profile[key] = (step_time, sync_time)
        if self.type_apps is not None and self.accel_type is not None:
            typed = self.profile_by_type.setdefault(self.accel_type, {})
            if key not in typed:
                typed[key] = (step_time, sync_time)
                new_config = True
        target = self.app.get_progress(self.epoch + 1)
        if goodput <= 0:
            self.attained_service += seconds * gpus
            self.run_time += seconds
            return StepResult(0.0, False, new_config)
        if self.progress + goodput * seconds < target:
            self.progress += goodput * seconds
            self.attained_service += seconds * gpus
            self.run_time += seconds
            return StepResult(0.0, False, new_config)
        delta = min(max((target - self.progress) / goodput, 0.0), seconds)
        self.progress = target
        self.epoch += 1
        self.attained_service += delta * gpus
        self.run_time += delta
        if self.epoch >= self.app.get_completion_epoch(self.batch_size):
            self.completion_time = now + delta
            return StepResult(0.0, True, new_config)
        return StepResult(seconds - delta, True, new_config)

    def profile_arrays(self, accel_type: str | None = None,
                       ) -> tuple[list[int], list[int], list[int], list[float], list[float]]:
        """Profile as ``(nodes, replicas, atomic_bsz, accum_step_time, optim_step_time)`` lists.

        ``accum_step_time`` is the compute part (step - sync), ``optim_step_time`` the step.
        With ``accel_type``, only what was measured on that accelerator type.
        """
        profile = self.profile if accel_type is None else self.profile_by_type[accel_type]
        keys = list(profile)
        vals = [profile[k] for k in keys]
        return ([k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys],
                [v[0] - v[1] for v in vals], [v[0] for v in vals])
