"""The controller's ticks and the jobs' lifecycle: :class:`Controller`.

See :mod:`goodput_jax.cluster.controller` (the public module, which re-exports
this one's names) for what a tick does. This module holds the decisions between
rounds: taking in requests, watching launches (finished, stopped, crashed, a node
lost), relaunching, applying a round's changes; the rounds themselves are
:mod:`goodput_jax.cluster.controller_rounds`', the state on disk
:mod:`goodput_jax.cluster.controller_state`', the Ray calls
:mod:`goodput_jax.cluster.controller_nodes`' and
:mod:`goodput_jax.cluster.controller_actor`'.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from goodput_jax.cluster.autoscale import ResourceRequester, desired_bundles
from goodput_jax.cluster.controller_nodes import RayletWatch, ray_nodes, raylet_gone
from goodput_jax.cluster.controller_rounds import RoundPlanner, current_allocations
from goodput_jax.cluster.controller_state import HintReaders, StateBook, one_line
from goodput_jax.cluster.options import ControllerOptions, options_from
from goodput_jax.cluster.plan import (
    NodeRecord,
    RoundPlan,
    capacity_of,
    check_allocation,
    group_allocation,
)
from goodput_jax.cluster.record import ClusterState, JobRecord, JobStatus, Launcher, Placement
from goodput_jax.cluster.spec import Capacity, JobSpec, validate

logger = logging.getLogger(__name__)

__all__ = ["ACTIVE", "Controller"]

#: Job states the scheduler allocates for.
ACTIVE = ("queued", "running", "stopping", "retrying")


class Controller:
    """The scheduling and lifecycle logic of the cluster runtime (see the module doc).

    Args:
        state_dir: the cluster's state directory.
        options: a :class:`~goodput_jax.cluster.options.ControllerOptions` (policy,
            interval, round_on_events, node_grace, probe_every, max_capacity), or its
            fields as keywords.
        launcher: a :class:`~goodput_jax.cluster.record.Launcher` (the actor passes a
            :class:`~goodput_jax.cluster.launch.RayLauncher`); None: nothing can
            launch (plans only).
        nodes: returns the live :class:`NodeRecord` list (default: Ray's table).
        clock: POSIX seconds.
        autoscaler: a :class:`~goodput_jax.cluster.autoscale.ResourceRequester`
            (the actor passes a :class:`~goodput_jax.cluster.autoscale.RayAutoscaler`
            with ``autoscale=True``): after every round it is given the bundles the
            cluster should hold (:func:`~goodput_jax.cluster.autoscale.desired_bundles`);
            Pollux then computes ``desired_nodes``, rounds run even before any node
            with devices is up, and warm spare processes are kept only on nodes a
            job holds (a spare would keep an idle node from being removed).
            None: no autoscaling.
        probe: tells whether a node's raylet is gone
            (:func:`~goodput_jax.cluster.controller_nodes.raylet_gone`: its node manager
            port refuses connections). Every tick, each node that a running or
            stopping job holds is probed (at most every ``probe_every`` seconds;
            after an unclear answer, 5 s later); a node whose raylet is gone counts
            as lost at once, as if the node table had dropped it (which Ray's GCS
            does only after its health checks miss ``health_check_failure_threshold``
            times). None: only the node table tells.
    """

    def __init__(self, state_dir: str, options: ControllerOptions | None = None, *,
                 launcher: Launcher | None = None,
                 nodes: Callable[[], list[NodeRecord]] | None = None,
                 clock: Callable[[], float] = time.time,
                 autoscaler: ResourceRequester | None = None,
                 probe: Callable[[NodeRecord], bool | None] | None = raylet_gone,
                 **keywords: Any):
        o = self.options = options_from(ControllerOptions, options, keywords)
        self.max_capacity: Capacity | None = o.max_capacity  # type: ignore[assignment]
        self.book = StateBook(state_dir, o.node_mtbf)
        self.sd = self.book.sd
        self.interval = o.interval
        self.launcher = launcher
        self._nodes = nodes or ray_nodes
        self.clock = clock
        self.round_on_events = o.round_on_events
        self.node_grace = o.node_grace
        self.autoscaler = autoscaler
        #: the raylets of the nodes running jobs hold, probed
        self.watch = RayletWatch(probe, o.probe_every)
        #: the bundles last given to the autoscaler (None: none yet)
        self.requested: list[dict] | None = None
        self.handles: dict[str, Any] = {}
        self.readers = HintReaders()
        self.alive: list[NodeRecord] = []
        #: every node the cluster had, lost ones too (cluster.json's nodes_seen: the report's
        #: nodes over the run); kept across controller restarts
        self.seen: dict[str, dict] = {n["label"]: n for n in (
            self.sd.read_json(self.sd.cluster_path, {}) or {}).get("nodes_seen") or []}
        #: label -> until when it is held out (a launch on it died of a system error)
        self.suspect_nodes: dict[str, float] = {}
        self.last_round = -float("inf")
        self.trigger = True
        self._taken: list[str] = []
        state = self.book.state
        self.jobs: dict[str, JobRecord] = state.jobs
        self.rounds: list[dict] = state.rounds
        self.round_seconds: list[float] = state.round_seconds
        self.restored = bool(self.jobs)
        #: the policy and a round's inputs (a restarted controller's Pollux continues
        #: its saved cycles)
        self.planner = RoundPlanner(o.policy, autoscale=autoscaler is not None,
                                    carry=self.book.read_carry() if self.restored else None,
                                    readers=self.readers)
        #: jobs whose running launch this controller found again at start
        self.reattached: list[str] = []
        self._reattach(self.clock())

    def _reattach(self, now: float) -> None:
        for name, job in self.jobs.items():
            if job.status not in (JobStatus.RUNNING, JobStatus.STOPPING):
                continue
            handle = None
            if self.launcher is not None and job.attempt >= 0 and job.allocation:
                handle = self.launcher.attach(name, job.attempt,
                                              len(group_allocation(job.allocation)))
            if handle is not None:
                self.handles[name] = handle
                self.reattached.append(name)
                job.event(now, "re-attached", attempt=job.attempt)
                logger.info("job %s: re-attached to launch %d", name, job.attempt)
            else:  # its launch did not survive: relaunch from its checkpoint
                job.rebuild(now)
                logger.info("job %s: relaunching from its checkpoint", name)

    # ------------------------------------------------------------------ helpers
    @property
    def policy(self) -> Any:
        """The policy object (None until the first round or precompile makes it)."""
        return self.planner.policy

    @property
    def carry_path(self) -> str:
        """Where Pollux's carried state is saved (:attr:`StateBook.carry_path`)."""
        return self.book.carry_path

    def admission_capacity(self) -> Capacity | None:
        """What a spec is checked against: ``max_capacity`` when given, else the live
        nodes' (None while there is none)."""
        if self.max_capacity is not None:
            return self.max_capacity
        return capacity_of(self.alive) if self.alive else None

    def usable(self, now: float | None = None) -> list[NodeRecord]:
        """The live nodes that rounds and launches may use (not held out as suspect)."""
        now = self.clock() if now is None else now
        return [n for n in self.alive if self.suspect_nodes.get(n.label, -1.0) <= now]


    def _hints(self, name: str) -> Any:
        return self.readers.hints(name, self.jobs[name])

    def _close_store(self, name: str) -> None:
        """Close this controller's reader of a job's store and fold its WAL in."""
        self.readers.close(name, self.jobs.get(name))

    def state(self) -> ClusterState:
        """The controller's state as saved."""
        return ClusterState(self.jobs, self.rounds, self.round_seconds, updated=self.clock())

    def persist(self) -> None:
        """Write ``controller.json`` (only when something changed)."""
        self.book.write(self.state())

    # ------------------------------------------------------------------ inputs
    def submit(self, spec: JobSpec | dict, now: float | None = None) -> str:
        """Take in a job now (validated against :meth:`admission_capacity`, defaults
        filled once).

        Raises:
            ValueError / TypeError: a spec that cannot run or a name already known,
                in one line; nothing is changed.
        """
        now = self.clock() if now is None else now
        spec = JobSpec.from_json(spec) if isinstance(spec, dict) else spec
        validate(spec, self.admission_capacity())
        if spec.name in self.jobs:
            raise ValueError(f"name ({spec.name!r}) is already submitted")
        self.jobs[spec.name] = JobRecord.new(self.sd.fill_defaults(spec), now)
        self.trigger = True
        return spec.name

    def cancel(self, name: str, now: float | None = None) -> str:
        """Stop ``name`` for good (its checkpoints stay); returns its new status.

        Raises:
            KeyError: an unknown job.
        """
        now = self.clock() if now is None else now
        job = self._job(name)
        if job.status.active:
            self._kill(name)
            job.cancel(now)
            self._close_store(name)
            self.trigger = True
        return job.status.value

    def _job(self, name: str) -> JobRecord:
        if name not in self.jobs:
            raise KeyError(f"job ({name!r}) is not known to the cluster at {self.sd.root}")
        return self.jobs[name]

    def _ingest(self, now: float) -> None:
        submitted, cancels, moves = self.book.take_requests()
        for path, name, data in submitted:
            self._taken.append(path)  # removed once the job is in controller.json
            if name in self.jobs:
                logger.warning("job %s submitted twice; the second is ignored", name)
                continue
            try:
                self.submit(data, now)
            except (TypeError, ValueError) as e:
                self.jobs[name] = JobRecord.refused(name, data, one_line(e), now)
        for name in cancels:
            if name in self.jobs:
                self.cancel(name, now)
        for name, allocation in moves:
            try:
                self.reallocate(name, allocation)
            except (KeyError, TypeError, ValueError) as e:
                logger.warning("reallocation of %s refused: %s", name, one_line(e))

    def _kill(self, name: str) -> None:
        handle = self.handles.pop(name, None)
        if handle is not None and self.launcher is not None:
            self.launcher.kill(handle)

    # ------------------------------------------------------------------ the tick
    def tick(self, rounds: bool = True) -> None:
        """One pass: inputs, nodes, launches, (maybe) a round, persist.

        ``rounds=False`` holds rounds back (the actor does while the policy compiles
        at startup); a due round then runs at the first tick that allows it.
        """
        now = self.clock()
        alive = self._without_dead(self._nodes(), now)
        if [(n.label, n.devices, n.accelerator_type) for n in alive] != [
                (n.label, n.devices, n.accelerator_type) for n in self.alive]:
            self.trigger = True
            self.seen.update((n.label, dict(n.__dict__)) for n in alive)
            self.sd.write_json(self.sd.cluster_path, {
                "nodes": [n.__dict__ for n in alive],
                "nodes_seen": list(self.seen.values()),
                # what clients check a spec against (max_capacity, when given)
                "capacity": {t: list(v) for t, v in (self.max_capacity or
                                                     capacity_of(alive)).by_type.items()},
                "live_capacity": {t: list(v) for t, v in capacity_of(alive).by_type.items()},
                "updated": now})
        labels = {n.label for n in alive}
        held = {n for j in self.jobs.values() if j.status.active for n in j.current_allocation()}
        # a node that left is a loss (an autoscaler removes only idle nodes)
        self.book.observe_nodes(sorted(labels), now, lost={
            n.label for n in self.alive if n.label not in labels
            and (self.autoscaler is None or n.label in held)})
        self.alive = alive
        if self.launcher is not None:
            warm = self.usable(now)
            if self.autoscaler is not None:  # no spare on an idle node: it could not go
                warm = [n for n in warm if n.label in held]
            self.launcher.warm(warm)
        for label in [k for k, until in self.suspect_nodes.items()
                      if until <= now or k not in labels]:
            del self.suspect_nodes[label]
            self.trigger = True
        self._ingest(now)
        for name, job in self.jobs.items():
            if not job.status.active:
                continue
            lost = [n for n in job.allocation if n not in labels]
            if lost:
                self._kill(name)
                job.lose_node(now, lost)
                self.trigger = True
                continue
            handle = self.handles.get(name)
            if handle is None or self.launcher is None:
                continue
            res = self.launcher.poll(handle)
            if res is None:
                if job.status == JobStatus.STOPPING and job.deadline is not None \
                        and now > job.deadline:
                    self._kill(name)
                    job.event(now, "stop forced")
                    self._stopped(name, job, now, forced=True)
                continue
            kind, value = res
            if kind == "ok":
                self.launcher.release(self.handles.pop(name))
                if all(r["status"] == "finished" for r in value):
                    job.finish(now)
                    self._close_store(name)
                    self.trigger = True
                elif job.status == JobStatus.STOPPING:
                    self._stopped(name, job, now, forced=False)
                else:  # stopped without being asked (its own stop request): queue it
                    job.request_stop(now, [], reason="stopped by itself")
                    self._stopped(name, job, now, forced=False)
            else:
                message, system = value
                if system:
                    if job.suspect_since is None:
                        job.suspect(now, message)  # wait for the node table to tell
                        for label in job.allocation:
                            self.suspect_nodes[label] = now + self.node_grace
                        continue
                    if now - job.suspect_since < self.node_grace:
                        continue
                self._kill(name)
                if job.crash(now, job.suspect_error or message):
                    if system:  # its nodes are held out: the next round places it
                        job.requeue(now)
                        self.trigger = True
                else:
                    self._close_store(name)
                    self.trigger = True
        usable = {n.label for n in self.usable(now)}
        for name, job in self.jobs.items():
            if job.status == JobStatus.RETRYING and job.retry_at is not None \
                    and now >= job.retry_at:
                if job.allocation and all(n in usable for n in job.allocation):
                    self._launch(name, job, now, job.relaunch_reason or "retry")
                else:
                    job.requeue(now)
                    self.trigger = True
        if rounds and (self.alive or self.autoscaler is not None) and (
                now - self.last_round >= self.interval
                or (self.trigger and self.round_on_events)):
            self.run_round(now)
        self.persist()
        for path in self._taken:
            if os.path.exists(path):
                os.remove(path)
        self._taken.clear()

    def _without_dead(self, alive: list[NodeRecord], now: float) -> list[NodeRecord]:
        """``alive`` less the nodes whose raylet is gone (probed, see ``probe``)."""
        held = {n for j in self.jobs.values()
                if j.status in (JobStatus.RUNNING, JobStatus.STOPPING) for n in j.allocation}
        return self.watch.live(alive, held, now)

    @property
    def dead_nodes(self) -> dict[str, str | None]:
        """label -> NodeID of a node whose raylet was found gone (:class:`RayletWatch`)."""
        return self.watch.dead

    def _stopped(self, name: str, job: JobRecord, now: float, forced: bool) -> None:
        nxt = job.stopped(now, forced=forced)
        usable = {a.label for a in self.usable(now)}
        if nxt and all(n in usable for n in nxt):
            self._launch(name, job, now, "reallocation", nxt)
        else:
            self.trigger = True

    # ------------------------------------------------------------------ launches
    def _launch(self, name: str, job: JobRecord, now: float, reason: str,
                allocation: Sequence[str] | None = None) -> None:
        from goodput_jax.cluster.context import launch_contexts

        spec = job.spec
        if spec is None or self.launcher is None:
            raise RuntimeError(f"job {name!r} cannot be launched (no spec or no launcher)")
        alloc = list(allocation if allocation is not None else job.allocation)
        groups = group_allocation(alloc)
        by_label = {n.label: n for n in self.alive}
        atype = by_label[groups[0][0]].accelerator_type
        attempt = job.launch(now, alloc, reason, nodes=[g[0] for g in groups],
                             accelerator_type=atype)
        # rank 0's process reserves the coordinator's port on its own node (launch.py)
        coord = f"{by_label[groups[0][0]].address}:0" if len(groups) > 1 else None
        contexts = [c.to_json() for c in launch_contexts(
            name, spec, attempt, groups, by_label, coord, self.sd, self.options.lease,
            self.options.head, self.book.reliability_path)]
        logs = [self.sd.log_path(name, attempt, rank) for rank in range(len(groups))]
        self.book.fence(name, attempt)  # the stop request cleared, the attempt written
        placements = [Placement(label, k, by_label[label].node_id) for label, k in groups]
        self.handles[name] = self.launcher.launch(spec, placements, contexts, logs)

    # ------------------------------------------------------------------ rounds
    def job_infos(self, now: float, hints: dict | None = None,
                  nodes: Sequence[NodeRecord] | None = None) -> dict:
        """The JobInfo of every active job (``hints``: by job; default: read them now)."""
        return self.planner.job_infos(self.jobs, now, self.alive if nodes is None else nodes,
                                      hints)

    def current_allocations(self) -> dict:
        """What each active job holds (:func:`~goodput_jax.cluster.controller_rounds.current_allocations`)."""
        return current_allocations(self.jobs)

    def plan(self, now: float | None = None) -> tuple[RoundPlan, dict]:
        """One round's decision without acting on it: ``(RoundPlan, seconds per part)``
        (:meth:`~goodput_jax.cluster.controller_rounds.RoundPlanner.plan`) on the usable
        nodes (:meth:`usable`); a job held on a suspect node keeps it."""
        now = self.clock() if now is None else now
        return self.planner.plan(self.jobs, self.alive, self.usable(now), now)

    def precompile(self, job_counts: Sequence[int] | None = None,
                   lock: Any = None) -> dict:
        """Compile the policy's programs for this cluster before the first round.

        The problem is this controller's: the live nodes and every active job's
        JobInfo from its latest hints (read now; with ``lock``, a
        ``threading.Lock``, held only while reading, not while compiling), or one
        job with the default spec when there is none. ``job_counts`` (default:
        the active jobs' count, at least 1): see
        :meth:`~goodput_jax.cluster.controller_rounds.RoundPlanner.precompile`.
        """
        import contextlib

        with lock if lock is not None else contextlib.nullcontext():
            alive = self.alive or self._nodes()
            infos = self.job_infos(self.clock(), nodes=alive) if alive else {}
            if alive:
                self.planner.policy_for({n.accelerator_type for n in alive})
        return self.planner.precompile(infos, alive, self.clock(), job_counts)

    def run_round(self, now: float | None = None) -> Any:
        """Hints -> JobInfo/NodeInfo -> policy -> apply the changes; returns the RoundPlan."""
        now = self.clock() if now is None else now
        self.trigger = False
        self.last_round = now
        plan, seconds = self.plan(now)
        for name in plan.changed:
            self._apply(name, self.jobs[name], list(plan.allocations[name]), now)
        record = {"t": now, "policy": plan.policy, "changed": list(plan.changed),
                  "allocations": {k: list(v) for k, v in plan.allocations.items()}}
        if self.autoscaler is not None:
            specs = {k: spec for k in plan.allocations
                     if (spec := self.jobs[k].spec) is not None}
            bundles = desired_bundles(plan, specs, self.usable(now))
            try:
                self.autoscaler.request(bundles)
                self.requested = bundles
                record["requested"] = bundles
                if plan.desired_nodes is not None:
                    record["desired_nodes"] = plan.desired_nodes
            except Exception as e:  # noqa: BLE001 - the next round asks again
                logger.warning("autoscaler request failed: %s", one_line(e))
        self.book.save_carry(self.policy)
        self.round_seconds.append(seconds["total"])
        self.rounds.append(record)
        del self.rounds[:-200], self.round_seconds[:-200]
        return plan


    def reallocate(self, name: str, allocation: Sequence[str]) -> str:
        """Move a job to ``allocation`` (node labels, one per replica) by hand, as a
        round would: a running job checkpoints, stops and is relaunched there.

        Returns what it did, which depends on where the job stood (a round may have
        acted on it a moment before): ``"stop requested"`` (it was running: asked to
        stop, it is relaunched on ``allocation``), ``"launched"`` (it was queued),
        ``"retargeted"`` (it was already stopping, for a round or an earlier move: it
        is relaunched on ``allocation`` instead; no new stop request), ``"retry moved"``
        (it was waiting to retry: it retries on ``allocation``) or ``"unchanged"``
        (a queued job given no devices, or a job moved to where it is).

        Raises:
            KeyError / ValueError: an unknown job, an inactive one, an unknown node, a
                node without that many free devices, a type the job may not use, or a
                replica count outside the job's bounds
                (:func:`~goodput_jax.cluster.plan.check_allocation`); nothing is changed.
        """
        job = self._job(name)
        if isinstance(allocation, str) or not all(isinstance(a, str) for a in allocation):
            raise TypeError(f"allocation ({allocation!r}) must be a list of node labels")
        allocation = list(allocation)
        if not job.status.active:
            raise ValueError(f"job ({name!r}) is {job.status.value}, not active")
        used: dict[str, int] = {}
        for other, rec in self.jobs.items():
            if other != name and rec.status.active:
                for n in rec.current_allocation():
                    used[n] = used.get(n, 0) + 1
        check_allocation(name, job.spec, allocation, self.alive, used)
        if sorted(allocation) == sorted(job.current_allocation()):
            return "unchanged"
        return self._apply(name, job, allocation, self.clock())

    def _apply(self, name: str, job: JobRecord, new: list, now: float) -> str:
        """Act on ``job``'s new allocation ``new``; returns what was done (see
        :meth:`reallocate`)."""
        status = job.status
        if status == JobStatus.QUEUED:
            if not new:
                return "unchanged"
            self._launch(name, job, now, "allocated" if job.attempt < 0 else "resumed", new)
            return "launched"
        if status == JobStatus.RUNNING:
            reason = f"reallocation to {len(new)} devices" if new else "preempted"
            job.request_stop(now, new, reason=reason)
            from goodput_jax.adaptive.stop import StopRequest

            StopRequest(self.sd.stop_path(name)).request(reason)
            return "stop requested"
        if status == JobStatus.STOPPING:
            job.retarget(now, new)
            return "retargeted"
        job.move_retry(new)
        return "retry moved"

    # ------------------------------------------------------------------ reading
    def status(self) -> dict:
        """Jobs (their records as JSON), the nodes and the round count."""
        return {"jobs": {n: j.to_json() for n, j in self.jobs.items()},
                "nodes": [n.__dict__ for n in self.alive], "rounds": len(self.rounds),
                "suspect_nodes": sorted(self.suspect_nodes),
                "dead_nodes": sorted(self.dead_nodes)}

    def logs(self, name: str, attempt: int | None = None, rank: int = 0) -> str:
        """One process's output of one launch (default: the latest, rank 0).

        Read from the state directory on this node, or, for a running launch whose
        file is not here (another node), from its process over Ray.

        Raises:
            KeyError: an unknown job.
        """
        job = self._job(name)
        attempt = job.attempt if attempt is None else int(attempt)
        if attempt < 0:
            return ""
        try:
            with open(self.sd.log_path(name, attempt, rank)) as fh:
                return fh.read()
        except FileNotFoundError:
            pass
        handle = self.handles.get(name)
        if handle is not None and attempt == job.attempt and self.launcher is not None:
            return self.launcher.log_tail(handle, rank) or ""
        return ""

    def shutdown(self) -> None:
        """Force-stop every launch (the jobs keep their checkpoints), fold every SQLite
        store's write-ahead log into its database, and persist."""
        for name in list(self.handles):
            self._kill(name)
        for name in list(self.jobs):
            self._close_store(name)
        self.persist()
    def detach(self) -> None:
        """Let go without stopping anything (a controller handing over): close the
        stores' readers and persist."""
        self.readers.close_all()
        self.persist()
