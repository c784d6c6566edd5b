"""The controller's rounds: the policy, and what a round hands it.

The seam: :class:`RoundPlanner` turns the jobs' records, the live nodes and each
job's latest hints into a :class:`~goodput_jax.cluster.plan.RoundPlan` (the pure
parts are :mod:`goodput_jax.cluster.plan`'s); the
:class:`~goodput_jax.cluster.controller.Controller` acts on the plan (stop,
relaunch, ask the autoscaler), :mod:`goodput_jax.cluster.controller_state` keeps the
state it decides from.

* The policy: ``"auto"`` picks Pollux on a one-type cluster and Sia on a mixed one
  (anew when the types change); a restarted controller's Pollux continues its saved
  cycles (its carry).
* :meth:`RoundPlanner.plan`: hints -> JobInfo/NodeInfo -> policy -> diff, timed by
  part. A non-preemptible job that a node loss displaced keeps naming its lost
  nodes, so Sia places it first.
* :meth:`RoundPlanner.precompile`: the policy's programs compiled for the
  controller's problem before the first round.

Example:
    >>> from goodput_jax.cluster.controller_state import HintReaders
    >>> from goodput_jax.cluster.plan import NodeRecord
    >>> from goodput_jax.cluster.record import JobRecord
    >>> from goodput_jax.cluster.spec import JobSpec
    >>> rp = RoundPlanner("sia", autoscale=False, carry=None, readers=HintReaders())
    >>> jobs = {"j": JobRecord.new(JobSpec("j", "m:f", max_replicas=2), now=0.0)}
    >>> nodes = [NodeRecord("n0", "a", 2), NodeRecord("n1", "b", 2)]
    >>> plan, seconds = rp.plan(jobs, nodes, nodes, now=1.0)
    >>> plan.policy, plan.changed, len(plan.allocations["j"])
    ('sia', ('j',), 1)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from goodput_jax.cluster.controller_state import HintReaders
from goodput_jax.cluster.plan import (
    ACCEL,
    NodeRecord,
    RoundPlan,
    job_info,
    node_infos,
    plan_round,
)
from goodput_jax.cluster.record import JobRecord, JobStatus
from goodput_jax.cluster.spec import JobSpec

logger = logging.getLogger(__name__)

__all__ = ["RoundPlanner", "current_allocations", "make_policy"]


def make_policy(name: str, **kwargs: Any) -> Any:
    """``"sia"`` -> SiaPolicy(resource=ACCEL), ``"pollux"`` -> PolluxPolicy(autoscale=False)
    (``autoscale=True`` in ``kwargs``: it computes ``desired_nodes``).

    Example:
        >>> type(make_policy("sia")).__name__
        'SiaPolicy'
    """
    from goodput_jax.sched import PolluxPolicy, SiaPolicy

    if name == "sia":
        return SiaPolicy(resource=ACCEL, **kwargs)
    if name == "pollux":
        return PolluxPolicy(**{"autoscale": False, **kwargs})
    raise ValueError(f"policy ({name!r}) must be 'sia' or 'pollux'")


def current_allocations(jobs: Mapping[str, JobRecord]) -> dict:
    """What each active job holds (a stopping job: where it goes next; a queued
    non-preemptible job that a node loss took down: where it ran, lost nodes
    included, :meth:`JobRecord.displaced_allocation`, so that Sia places it first)."""
    return {name: job.current_allocation() or job.displaced_allocation()
            for name, job in jobs.items() if job.status.active}


class RoundPlanner:
    """The controller's policy and the inputs of its rounds.

    Args:
        policy: ``"auto"``, ``"sia"``, ``"pollux"`` or a policy object.
        autoscale: the controller asks an autoscaler (Pollux then computes
            ``desired_nodes``).
        carry: Pollux's saved carry (a restarted controller), given to the policy
            when it is first used; None: start afresh.
        readers: the jobs' hint readers.
    """

    def __init__(self, policy: Any, *, autoscale: bool, carry: Any,
                 readers: HintReaders):
        self._arg = policy
        self._name: str | None = None
        self.policy: Any = None if isinstance(policy, str) else policy
        self.autoscale = bool(autoscale)
        self._carry = carry
        self.readers = readers

    def policy_for(self, types: set) -> Any:
        """The policy for a cluster of accelerator ``types`` (made, or remade under
        ``"auto"`` when the types call for the other one)."""
        if self.policy is None or self._arg == "auto":
            want = self._arg if self._arg != "auto" else ("sia" if len(types) > 1
                                                          else "pollux")
            if self.policy is None or self._name != want:
                kw = {"autoscale": True} if want == "pollux" and self.autoscale else {}
                self.policy = make_policy(want, **kw)
                self._name = want
        if self._carry is not None:  # a restarted controller: continue Pollux's cycles
            from goodput_jax.sched.pollux import PolluxPolicy

            if isinstance(self.policy, PolluxPolicy):
                self.policy.restore(self._carry)
                logger.info("pollux: continuing from cycle %d", self._carry.cycle)
            self._carry = None
        return self.policy

    def job_infos(self, jobs: Mapping[str, JobRecord], now: float,
                  nodes: Sequence[NodeRecord], hints: Mapping | None = None) -> dict:
        """The JobInfo of every active job (``hints``: by job; default: read them now)."""
        types = sorted({n.accelerator_type for n in nodes})
        infos = {}
        for name, job in jobs.items():
            if not job.status.active or job.spec is None:
                continue
            h = hints[name] if hints is not None and name in hints else \
                self.readers.hints(name, job)
            infos[name] = job_info(job.spec, h, job.submitted, types=types,
                                   num_restarts=job.restarts,
                                   restarting=job.status == JobStatus.STOPPING,
                                   age=now - job.submitted)
        return infos

    def plan(self, jobs: Mapping[str, JobRecord], alive: Sequence[NodeRecord],
             usable: Sequence[NodeRecord], now: float) -> tuple[RoundPlan, dict]:
        """One round's decision: ``(RoundPlan, seconds per part)``.

        The parts: ``hints`` (every active job's latest hints), ``infos``
        (JobInfo/NodeInfo), ``policy`` (the policy's optimize and the diff). The nodes
        are ``usable`` (the live ones not held out); the policy is chosen by the
        types of ``alive``.
        """
        t0 = time.perf_counter()
        hints = {name: self.readers.hints(name, job) for name, job in jobs.items()
                 if job.status.active}
        t1 = time.perf_counter()
        infos = self.job_infos(jobs, now, alive, hints)
        nodes = node_infos(usable)
        labels = {n.label for n in usable}
        # a displaced non-preemptible job keeps naming its lost nodes (the policy sees
        # them gone); every other job holds only usable nodes
        displaced = {k for k, job in jobs.items() if job.displaced_allocation()}
        current = {k: list(v) if k in displaced else [n for n in v if n in labels]
                   for k, v in current_allocations(jobs).items()}
        t2 = time.perf_counter()
        policy = self.policy_for({n.accelerator_type for n in alive})
        plan = plan_round(policy, infos, nodes, current) if nodes else None
        if plan is None:
            plan = RoundPlan({k: () if k in displaced else tuple(sorted(v))
                              for k, v in current.items()}, (), "none")
        elif displaced:  # one still waiting for room has not changed
            plan = RoundPlan(plan.allocations, tuple(k for k in plan.changed
                                                     if k not in displaced
                                                     or plan.allocations[k]), plan.policy,
                             plan.desired_nodes)
        t3 = time.perf_counter()
        return plan, {"hints": t1 - t0, "infos": t2 - t1, "policy": t3 - t2, "total": t3 - t0}

    def precompile(self, infos: dict, alive: Sequence[NodeRecord], now: float,
                   job_counts: Sequence[int] | None = None) -> dict:
        """Compile the policy's programs for ``infos`` (the active jobs' JobInfo; one
        default job when empty) on ``alive`` before the first round; the policy's
        decisions do not change (:func:`goodput_jax.sched.warmup.precompile`).

        Returns:
            ``{"seconds", "compiles", "cache_hits", "job_counts", "jobs"}`` (``jobs``:
            the active jobs seen), or ``{"jobs": n, "skipped": reason}`` without nodes.
        """
        if not alive:
            return {"jobs": len(infos), "skipped": "no nodes"}
        policy = self.policy_for({n.accelerator_type for n in alive})
        n = len(infos)
        if not infos:
            spec = JobSpec("precompile", "m:f")
            infos = {"precompile": job_info(spec, None, now,
                                            types=sorted({r.accelerator_type for r in alive}))}
        counts = [max(n, 1)] if job_counts is None else list(job_counts)
        out = policy.precompile(infos, node_infos(alive), job_counts=counts)
        return {**out, "jobs": n}
