"""The controller: every round, hints -> policy -> the jobs whose allocation changed.

:class:`Controller` is the logic, driven by :meth:`Controller.tick` (called
every ``poll`` seconds by :class:`ControllerActor`, a named, detached Ray actor
in the runtime's namespace that Ray restarts if it dies). A tick

1. takes in submitted specs, cancel and reallocation requests (from the state
   directory; a client with the cluster's address calls :meth:`Controller.submit`,
   :meth:`~Controller.cancel` and :meth:`~Controller.reallocate` through the actor);
2. reads Ray's node table; a node that disappeared takes its jobs down: they
   are stopped and restart from their last checkpoint on what is left. The nodes
   of a launch that died of a system error are held out of rounds and launches
   until the node table drops them or ``node_grace`` passes;
3. looks at each launch: finished, stopped on request (relaunch on the new
   allocation), crashed (retry with exponential backoff, ``failed`` with the
   error after ``spec.max_retries``), or a stop past its deadline (forced);
4. runs a round (:func:`goodput_jax.cluster.plan.plan_round`) every
   ``interval`` seconds (60 by default, as Pollux and Sia) and after an
   arrival, a finish or a node change; only jobs whose allocation changed are
   touched: a running one gets a cooperative stop request (it checkpoints at its
   next step boundary) and is relaunched on its new allocation;
5. persists its state (``controller.json``, :class:`~goodput_jax.cluster.record.ClusterState`)
   when it changed. A new controller reads it and re-attaches to the launches
   still running (their processes are detached actors, not the controller's);
   only a launch that did not survive is relaunched from its checkpoint.

Each job is a :class:`~goodput_jax.cluster.record.JobRecord`; its status changes
only through the record's transition methods. Launching is delegated to a
:class:`~goodput_jax.cluster.record.Launcher` (:class:`~goodput_jax.cluster.launch.RayLauncher`).
"""

from __future__ import annotations

import glob
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from goodput_jax.cluster.autoscale import RayAutoscaler, ResourceRequester, desired_bundles
from goodput_jax.cluster.launch import NAMESPACE, RayLauncher
from goodput_jax.cluster.plan import (
    ACCEL,
    NodeRecord,
    capacity_of,
    job_info,
    node_infos,
    nodes_from_ray,
    plan_round,
)
from goodput_jax.cluster.record import (
    ClusterState,
    JobRecord,
    JobStatus,
    Launcher,
    Placement,
    read_state,
)
from goodput_jax.cluster.spec import Capacity, JobSpec, validate
from goodput_jax.cluster.state import StateDir

logger = logging.getLogger(__name__)

__all__ = ["ACTIVE", "CONTROLLER_NAME", "Controller", "ControllerActor", "RayLauncher",
           "as_capacity", "checkpoint_store", "make_policy", "raylet_gone",
           "start_controller"]

#: Job states the scheduler allocates for.
ACTIVE = ("queued", "running", "stopping", "retrying")
#: The controller actor's name (in the runtime's namespace, :data:`NAMESPACE`).
CONTROLLER_NAME = "goodput_jax_controller"


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


def _one_line(e: BaseException | str) -> str:
    text = str(e).strip().splitlines()
    last = [ln for ln in text if ln.strip()]
    msg = last[-1].strip() if last else type(e).__name__
    return msg[:300]


def group_allocation(allocation: Sequence[str]) -> list[tuple[str, int]]:
    """Replicas per node, the first replica's node first (it hosts rank 0).

    Example:
        >>> group_allocation(["n1", "n0", "n1"])
        [('n1', 2), ('n0', 1)]
    """
    counts: dict[str, int] = {}
    for n in allocation:
        counts[n] = counts.get(n, 0) + 1
    first = allocation[0] if allocation else None
    return sorted(counts.items(), key=lambda kv: (kv[0] != first, -kv[1], kv[0]))


def checkpoint_store(url: str) -> bool:
    """Fold a SQLite goodput store's write-ahead log into its database file
    (``PRAGMA wal_checkpoint(TRUNCATE)``), so the ``.db`` file alone holds every
    event; True when done (False: not a SQLite file, none there, or busy)."""
    if not isinstance(url, str) or not url.startswith("sqlite:///"):
        return False
    path = url[len("sqlite:///"):]
    if not os.path.exists(path):
        return False
    import sqlite3

    try:
        conn = sqlite3.connect(path, timeout=5.0)
        try:
            busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error as e:
        logger.warning("store %s: checkpoint failed: %s", path, e)
        return False
    return busy == 0


def ray_nodes() -> list[NodeRecord]:
    """The runtime's live nodes from Ray's node table."""
    import ray

    return nodes_from_ray(ray.nodes())


def as_capacity(value: Any) -> Capacity:
    """``{type: (nodes, devices per node)}`` (or a :class:`Capacity`) as a Capacity.

    Example:
        >>> as_capacity({"a": [3, 2]}).by_type
        {'a': (3, 2)}
        >>> as_capacity({"a": (0, 2)})
        Traceback (most recent call last):
        ...
        ValueError: max_capacity ({'a': (0, 2)}): want {TYPE: (NODES, DEVICES)}, both >= 1
    """
    if isinstance(value, Capacity):
        return value
    ok = isinstance(value, Mapping) and bool(value) and all(
        isinstance(t, str) and t and isinstance(v, (list, tuple)) and len(v) == 2
        and all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in v)
        for t, v in value.items())
    if not ok:
        raise ValueError(f"max_capacity ({value!r}): want {{TYPE: (NODES, DEVICES)}}, "
                         f"both >= 1")
    return Capacity({t: (int(v[0]), int(v[1])) for t, v in sorted(value.items())})


def raylet_gone(node: NodeRecord, timeout: float = 0.2) -> bool | None:
    """Whether ``node``'s raylet is gone: True when nothing listens at its node manager
    port any more (the connection is refused), False when it accepts, None when that
    cannot be told (no port known, no answer within ``timeout``: a host down, a busy
    network; Ray's health checks decide those).

    A listening socket accepts connections however busy its process is (the kernel
    completes them), so a loaded raylet is never taken for a dead one; only a port
    with no listener refuses.

    Example:
        >>> raylet_gone(NodeRecord("n0", "a", 2)) is None  # no port known
        True
    """
    import socket

    if not node.port:
        return None
    s = socket.socket(socket.AF_INET6 if ":" in node.address else socket.AF_INET,
                      socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect((node.address, node.port))
        return False
    except ConnectionRefusedError:
        return True
    except OSError:
        return None
    finally:
        s.close()


def parse_allocation(text: str) -> list[str]:
    """``"n0:2,n1"`` -> ``["n0", "n0", "n1"]`` (node labels, one per replica).

    Example:
        >>> parse_allocation("n1:2,n0")
        ['n1', 'n1', 'n0']
        >>> parse_allocation("n1:x")
        Traceback (most recent call last):
        ...
        ValueError: to ('n1:x'): each entry is LABEL or LABEL:REPLICAS with REPLICAS >= 1
    """
    out: list[str] = []
    for part in str(text).split(","):
        label, sep, k = part.strip().partition(":")
        if not label or (sep and (not k.isdigit() or int(k) < 1)):
            raise ValueError(f"to ({text!r}): each entry is LABEL or LABEL:REPLICAS with "
                             f"REPLICAS >= 1")
        out += [label] * (int(k) if sep else 1)
    return out


class Controller:
    """The scheduling and lifecycle logic of the cluster runtime (see the module doc).

    Args:
        state_dir: the cluster's state directory.
        policy: ``"sia"``, ``"pollux"`` or a policy object; ``"auto"``: Pollux on
            a one-type cluster, Sia on a mixed one.
        interval: seconds between periodic rounds (60).
        launcher: a :class:`~goodput_jax.cluster.record.Launcher` (the actor passes a
            :class:`RayLauncher`); None: nothing can launch (plans only).
        nodes: returns the live :class:`NodeRecord` list (default: Ray's table).
        clock: POSIX seconds.
        round_on_events: also run a round right after an arrival, a finish or a
            node change (default True; AdaptDL allocates new jobs at once too).
        node_grace: seconds a launch that died of a system error waits for the
            node table to show a dead node before counting as a crash (its nodes
            are held out of rounds meanwhile).
        autoscaler: a :class:`~goodput_jax.cluster.autoscale.ResourceRequester`
            (the actor passes a :class:`~goodput_jax.cluster.autoscale.RayAutoscaler`
            with ``autoscale=True``): after every round it is given the bundles the
            cluster should hold (:func:`~goodput_jax.cluster.autoscale.desired_bundles`);
            Pollux then computes ``desired_nodes``, rounds run even before any node
            with devices is up, and warm spare processes are kept only on nodes a
            job holds (a spare would keep an idle node from being removed).
            None: no autoscaling.
        probe: tells whether a node's raylet is gone (:func:`raylet_gone`: its node
            manager port refuses connections). Every tick, each node that a running
            or stopping job holds is probed (at most every ``probe_every`` seconds;
            after an unclear answer, 5 s later); a node whose raylet is gone counts
            as lost at once, as if the node table had dropped it (which Ray's GCS
            does only after its health checks miss ``health_check_failure_threshold``
            times). None: only the node table tells.
        max_capacity: the largest the cluster can grow to, ``{type: (nodes, devices
            per node)}`` (with autoscaling: the autoscaler's node types at their
            ``max_workers``; on KubeRay the worker groups at ``maxReplicas``): specs
            are checked against it instead of the live nodes, so a job that fits
            only a grown cluster is taken in and waits for the nodes. None: the live
            nodes.
    """

    def __init__(self, state_dir: str, *, policy: Any = "auto", interval: float = 60.0,
                 launcher: Launcher | None = None,
                 nodes: Callable[[], list[NodeRecord]] | None = None,
                 clock: Callable[[], float] = time.time, round_on_events: bool = True,
                 node_grace: float = 15.0, autoscaler: ResourceRequester | None = None,
                 probe: Callable[[NodeRecord], bool | None] | None = raylet_gone,
                 probe_every: float = 0.5,
                 max_capacity: Capacity | Mapping | None = None):
        if not (isinstance(interval, (int, float)) and interval > 0):
            raise ValueError(f"interval ({interval!r}) must be > 0 seconds")
        self.max_capacity = None if max_capacity is None else as_capacity(max_capacity)
        self.sd = StateDir(state_dir)
        self.interval = float(interval)
        self._policy_arg = policy
        self._policy_name: str | None = None
        self.policy: Any = None if isinstance(policy, str) else policy
        self.launcher = launcher
        self._nodes = nodes or ray_nodes
        self.clock = clock
        self.round_on_events = bool(round_on_events)
        self.node_grace = float(node_grace)
        self.autoscaler = autoscaler
        self.probe = probe
        self.probe_every = float(probe_every)
        #: label -> NodeID of a node whose raylet was found gone, out of ``alive``
        #: until the node table drops it (or lists a new node under that label)
        self.dead_nodes: dict[str, str | None] = {}
        self._probe_due: dict[str, float] = {}
        #: the bundles last given to the autoscaler (None: none yet)
        self.requested: list[dict] | None = None
        self.handles: dict[str, Any] = {}
        self._calcs: dict[str, Any] = {}
        self.alive: list[NodeRecord] = []
        #: label -> until when it is held out (a launch on it died of a system error)
        self.suspect_nodes: dict[str, float] = {}
        self.last_round = -float("inf")
        self.trigger = True
        self._taken: list[str] = []
        self._written: str | None = None
        state = read_state(self.sd.root)
        self.jobs: dict[str, JobRecord] = state.jobs
        self.rounds: list[dict] = state.rounds
        self.round_seconds: list[float] = state.round_seconds
        self.restored = bool(self.jobs)
        #: Pollux's saved carry, given to the policy when it is first used
        self._carry = self._read_carry() if self.restored else None
        #: jobs whose running launch this controller found again at start
        self.reattached: list[str] = []
        now = self.clock()
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
    def _policy(self, types: set) -> Any:
        if self.policy is None or self._policy_arg == "auto":
            want = self._policy_arg if self._policy_arg != "auto" else (
                "sia" if len(types) > 1 else "pollux")
            if self.policy is None or self._policy_name != want:
                kw = {"autoscale": True} if want == "pollux" and self.autoscaler else {}
                self.policy = make_policy(want, **kw)
                self._policy_name = want
        if self._carry is not None:  # a restarted controller: continue Pollux's cycles
            from goodput_jax.sched.pollux import PolluxPolicy

            if isinstance(self.policy, PolluxPolicy):
                self.policy.restore(self._carry)
                logger.info("pollux: continuing from cycle %d", self._carry.cycle)
            self._carry = None
        return self.policy

    @property
    def carry_path(self) -> str:
        """Where Pollux's carried state (:class:`~goodput_jax.sched.pollux.PolluxCarry`)
        is saved after each round, so that a restarted controller decides as one that
        never stopped."""
        return os.path.join(self.sd.root, "pollux.json")

    def _read_carry(self) -> Any:
        data = self.sd.read_json(self.carry_path)
        if data is None:
            return None
        from goodput_jax.sched.pollux import PolluxCarry

        try:
            return PolluxCarry.from_json(data)
        except ValueError as e:  # a damaged file: start the cycles afresh
            logger.warning("ignoring %s: %s", self.carry_path, _one_line(e))
            return None

    def _save_carry(self) -> None:
        from goodput_jax.sched.pollux import PolluxPolicy

        if isinstance(self.policy, PolluxPolicy):
            self.sd.write_json(self.carry_path, self.policy.carry().to_json())

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
        spec = self.jobs[name].spec
        if spec is None or spec.store is None:
            return None
        store = spec.store
        if store.startswith("sqlite:///") and not os.path.exists(store[len("sqlite:///"):]):
            return None
        calc = self._calcs.get(name)
        if calc is None:
            from goodput_jax.measure.calculator import GoodputCalculator

            calc = self._calcs[name] = GoodputCalculator(name, store=store)
        try:
            raw = calc.get_latest_hints()
        except Exception as e:  # noqa: BLE001 - a store mid-write: next round
            logger.warning("job %s: hints not readable: %s", name, e)
            return None
        if raw is None:
            return None
        from goodput_jax.model.hints import Hints

        try:
            return Hints.from_json(raw)
        except (TypeError, ValueError) as e:
            logger.warning("job %s: malformed hints ignored: %s", name, e)
            return None

    def _close_store(self, name: str) -> None:
        """Close this controller's reader of a job's store and fold its WAL in."""
        calc = self._calcs.pop(name, None)
        if calc is not None:
            try:
                calc.store.close()
            except Exception as e:  # noqa: BLE001 - closing a reader
                logger.debug("close %s: %s", name, e)
        spec = self.jobs[name].spec if name in self.jobs else None
        if spec is not None and spec.store:
            checkpoint_store(spec.store)

    def state(self) -> ClusterState:
        """The controller's state as saved."""
        return ClusterState(self.jobs, self.rounds, self.round_seconds, updated=self.clock())

    def persist(self) -> None:
        """Write ``controller.json`` (only when something changed)."""
        data = self.state().to_json()
        data.pop("updated")
        text = json.dumps(data, sort_keys=True, default=str)
        if text == self._written:
            return
        self.sd.write_json(self.sd.controller_path, {**data, "updated": self.clock()})
        self._written = text

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
        for path in sorted(glob.glob(os.path.join(self.sd.inbox, "*.json"))):
            data = self.sd.read_json(path)
            self._taken.append(path)  # removed once the job is in controller.json
            name = (data or {}).get("name", os.path.basename(path)[:-5]) \
                if isinstance(data, dict) else os.path.basename(path)[:-5]
            if name in self.jobs:
                logger.warning("job %s submitted twice; the second is ignored", name)
                continue
            try:
                self.submit(data, now)
            except (TypeError, ValueError) as e:
                self.jobs[name] = JobRecord.refused(name, data, _one_line(e), now)
        for path in sorted(glob.glob(os.path.join(self.sd.requests, "cancel-*"))):
            name = os.path.basename(path)[len("cancel-"):]
            os.remove(path)
            if name in self.jobs:
                self.cancel(name, now)
        for path in sorted(glob.glob(os.path.join(self.sd.requests, "reallocate-*.json"))):
            data = self.sd.read_json(path) or {}
            os.remove(path)
            name = os.path.basename(path)[len("reallocate-"):-len(".json")]
            try:
                self.reallocate(name, data.get("allocation", []))
            except (KeyError, TypeError, ValueError) as e:
                logger.warning("reallocation of %s refused: %s", name, _one_line(e))

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
            self.sd.write_json(self.sd.cluster_path, {
                "nodes": [n.__dict__ for n in alive],
                # what clients check a spec against (max_capacity, when given)
                "capacity": {t: list(v) for t, v in (self.max_capacity or
                                                     capacity_of(alive)).by_type.items()},
                "live_capacity": {t: list(v) for t, v in capacity_of(alive).by_type.items()},
                "updated": now})
        self.alive = alive
        labels = {n.label for n in alive}
        if self.launcher is not None:
            warm = self.usable(now)
            if self.autoscaler is not None:  # no spare on an idle node: it could not go
                held = {n for j in self.jobs.values() if j.status.active
                        for n in j.current_allocation()}
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
        ids = {n.label: n.node_id for n in alive}
        self.dead_nodes = {k: v for k, v in self.dead_nodes.items() if ids.get(k, "") == v}
        if self.probe is not None:
            held = {n for j in self.jobs.values()
                    if j.status in (JobStatus.RUNNING, JobStatus.STOPPING) for n in j.allocation}
            for node in alive:
                if node.label not in held or node.label in self.dead_nodes \
                        or self._probe_due.get(node.label, -1.0) > now:
                    continue
                gone = self.probe(node)
                self._probe_due[node.label] = now + (self.probe_every if gone is not None
                                                     else 5.0)
                if gone:
                    self.dead_nodes[node.label] = node.node_id
                    logger.warning("node %s: its raylet is gone (%s:%s refuses)", node.label,
                                   node.address, node.port)
        return [n for n in alive if n.label not in self.dead_nodes]

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
        from goodput_jax.adaptive.stop import StopRequest
        from goodput_jax.cluster.context import JobContext

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
        jd = self.sd.job_dir(name)
        os.makedirs(jd, exist_ok=True)
        contexts, logs = [], []
        for rank, (label, k) in enumerate(groups):
            ctx = JobContext(
                job=name, attempt=attempt, rank=rank, num_processes=len(groups),
                coordinator=coord, local_devices=k,
                accelerator_type=by_label[label].accelerator_type,
                nodes=tuple(g[0] for g in groups), devices_per_process=tuple(g[1] for g in groups),
                checkpoint_dir=spec.checkpoint_dir or "", store=spec.store or "",
                stop_path=self.sd.stop_path(name), progress_path=self.sd.progress_path(name),
                hooks=spec.hooks, adaptive=spec.adaptive, args=spec.args)
            contexts.append(ctx.to_json())
            logs.append(self.sd.log_path(name, attempt, rank))
        StopRequest(self.sd.stop_path(name)).clear()  # served (or moot): the launch starts clean
        with open(os.path.join(jd, "attempt.tmp"), "w") as fh:  # the fence (JobContext.is_current)
            fh.write(str(attempt))
        os.replace(os.path.join(jd, "attempt.tmp"), os.path.join(jd, "attempt"))
        placements = [Placement(label, k, by_label[label].node_id) for label, k in groups]
        self.handles[name] = self.launcher.launch(spec, placements, contexts, logs)

    # ------------------------------------------------------------------ rounds
    def job_infos(self, now: float, hints: dict | None = None,
                  nodes: Sequence[NodeRecord] | None = None) -> dict:
        """The JobInfo of every active job (``hints``: by job; default: read them now)."""
        types = sorted({n.accelerator_type for n in (self.alive if nodes is None else nodes)})
        infos = {}
        for name, job in self.jobs.items():
            if not job.status.active or job.spec is None:
                continue
            h = hints[name] if hints is not None and name in hints else self._hints(name)
            infos[name] = job_info(job.spec, h, job.submitted, types=types,
                                   num_restarts=job.restarts,
                                   restarting=job.status == JobStatus.STOPPING,
                                   age=now - job.submitted)
        return infos

    def current_allocations(self) -> dict:
        """What each active job holds (a stopping job: where it goes next; a queued
        non-preemptible job that a node loss took down: where it ran, lost nodes
        included, :meth:`JobRecord.displaced_allocation`, so that Sia places it first)."""
        return {name: job.current_allocation() or job.displaced_allocation()
                for name, job in self.jobs.items() if job.status.active}

    def plan(self, now: float | None = None) -> tuple[Any, dict]:
        """One round's decision without acting on it: ``(RoundPlan, seconds per part)``.

        The parts: ``hints`` (read every active job's latest hints from its store),
        ``infos`` (JobInfo/NodeInfo), ``policy`` (the policy's optimize and the diff).
        The nodes are the usable ones (:meth:`usable`); a job held on a suspect node
        keeps it.
        """
        now = self.clock() if now is None else now
        t0 = time.perf_counter()
        hints = {name: self._hints(name) for name, job in self.jobs.items()
                 if job.status.active}
        t1 = time.perf_counter()
        usable = self.usable(now)
        infos = self.job_infos(now, hints)
        nodes = node_infos(usable)
        labels = {n.label for n in usable}
        # a displaced non-preemptible job keeps naming its lost nodes (the policy sees
        # them gone); every other job holds only usable nodes
        displaced = {k for k, job in self.jobs.items() if job.displaced_allocation()}
        current = {k: list(v) if k in displaced else [n for n in v if n in labels]
                   for k, v in self.current_allocations().items()}
        t2 = time.perf_counter()
        policy = self._policy({n.accelerator_type for n in self.alive})
        plan = plan_round(policy, infos, nodes, current) if nodes else None
        from goodput_jax.cluster.plan import RoundPlan

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

    def precompile(self, job_counts: Sequence[int] | None = None,
                   lock: Any = None) -> dict:
        """Compile the policy's programs for this cluster before the first round.

        The problem is this controller's: the live nodes and every active job's
        JobInfo from its latest hints (read now; with ``lock``, a
        ``threading.Lock``, held only while reading, not while compiling), or one
        job with the default spec when there is none. ``job_counts`` (default:
        the active jobs' count, at least 1) are the job counts to compile for
        (:func:`goodput_jax.sched.warmup.precompile`); the policy's decisions do
        not change.

        Returns:
            ``{"seconds", "compiles", "cache_hits", "job_counts", "jobs"}`` (``jobs``:
            the active jobs seen), or ``{"jobs": n, "skipped": reason}`` without nodes.
        """
        import contextlib

        with lock if lock is not None else contextlib.nullcontext():
            alive = self.alive or self._nodes()
            infos = self.job_infos(self.clock(), nodes=alive) if alive else {}
            policy = self._policy({n.accelerator_type for n in alive}) if alive else None
        if not alive:
            return {"jobs": len(infos), "skipped": "no nodes"}
        n = len(infos)
        if not infos:
            spec = JobSpec("precompile", "m:f")
            infos = {"precompile": job_info(spec, None, self.clock(),
                                            types=sorted({r.accelerator_type for r in alive}))}
        counts = [max(n, 1)] if job_counts is None else list(job_counts)
        out = policy.precompile(infos, node_infos(alive), job_counts=counts)
        return {**out, "jobs": n}

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
            specs = {k: self.jobs[k].spec for k in plan.allocations
                     if self.jobs[k].spec is not None}
            bundles = desired_bundles(plan, specs, self.usable(now))
            try:
                self.autoscaler.request(bundles)
                self.requested = bundles
                record["requested"] = bundles
                if plan.desired_nodes is not None:
                    record["desired_nodes"] = plan.desired_nodes
            except Exception as e:  # noqa: BLE001 - the next round asks again
                logger.warning("autoscaler request failed: %s", _one_line(e))
        self._save_carry()
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
                replica count outside the job's bounds; nothing is changed.
        """
        job = self._job(name)
        if isinstance(allocation, str) or not all(isinstance(a, str) for a in allocation):
            raise TypeError(f"allocation ({allocation!r}) must be a list of node labels")
        allocation = list(allocation)
        if not job.status.active:
            raise ValueError(f"job ({name!r}) is {job.status.value}, not active")
        by_label = {n.label: n for n in self.alive}
        bad = [n for n in allocation if n not in by_label]
        if bad:
            raise ValueError(f"allocation: unknown node {bad[0]!r} (the cluster has: "
                             f"{', '.join(sorted(by_label)) or 'none'})")
        spec = job.spec
        if allocation and spec is not None:
            if not spec.min_replicas <= len(allocation) <= spec.max_replicas:
                raise ValueError(f"allocation ({len(allocation)} replicas) must be within "
                                 f"{spec.min_replicas}-{spec.max_replicas} for job {name!r}")
            types = {by_label[n].accelerator_type for n in allocation}
            if len(types) > 1:
                raise ValueError(f"allocation: nodes of one type only, got {sorted(types)}")
            t = types.pop()
            if spec.accelerator_types and t not in spec.accelerator_types:
                raise ValueError(f"allocation: type {t!r} is not one of job {name!r}'s "
                                 f"({', '.join(spec.accelerator_types)})")
            used: dict[str, int] = {}
            for other, rec in self.jobs.items():
                if other != name and rec.status.active:
                    for n in rec.current_allocation():
                        used[n] = used.get(n, 0) + 1
            for label, k in group_allocation(allocation):
                free = by_label[label].devices - used.get(label, 0)
                if k > free:
                    raise ValueError(f"allocation: node {label!r} has {free} free devices, "
                                     f"{k} asked")
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
        for name in list(self._calcs):
            calc = self._calcs.pop(name)
            try:
                calc.store.close()
            except Exception as e:  # noqa: BLE001 - closing a reader
                logger.debug("close %s: %s", name, e)
        self.persist()


class ControllerActor:
    """The Ray actor running :class:`Controller` every ``poll`` seconds on its own thread.

    Create it with :func:`start_controller`: a named (:data:`CONTROLLER_NAME`),
    detached actor in the runtime's namespace (:data:`NAMESPACE`) that Ray restarts
    when its process dies (``max_restarts``); the restarted actor reads the saved
    state and re-attaches to the launches still running. Its remote methods serve
    clients that have only the cluster's address (:class:`~goodput_jax.cluster.ClusterClient`).

    At startup it turns on JAX's persistent compilation cache in
    ``STATE_DIR/jax-cache`` (``compile_cache``) and compiles the policy in the
    background (:meth:`Controller.precompile`): first for the jobs it holds (rounds
    wait for this, at most ``precompile_wait`` seconds; ticks go on), then for half
    and twice as many (``precompile_more``). ``status()["precompile"]`` reports it.
    ``job_cache``: every job's processes share a persistent compilation cache in
    ``STATE_DIR/jax-cache-jobs`` (a relaunch loads what its earlier launch compiled).
    ``spares``: one warm spare process per node, its imports done, that the next
    launch there takes (:meth:`~goodput_jax.cluster.launch.RayLauncher.warm`).
    ``autoscale``: after every round, ask Ray's autoscaler for the policy's desired
    size (:mod:`goodput_jax.cluster.autoscale`, ``request_resources``).
    ``probe_raylets``: a node whose raylet's port refuses connections is lost at once
    (:func:`raylet_gone`); off, only Ray's node table (its health checks) tells.
    ``max_capacity``: ``{type: [nodes, devices per node]}`` the cluster can grow to
    (with ``autoscale``): specs are checked against it, not the live nodes.
    """

    def __init__(self, state_dir: str, policy: str = "auto", interval: float = 60.0,
                 poll: float = 0.5, fake_devices: bool = True, node_grace: float = 15.0,
                 policy_kwargs: dict | None = None, compile_cache: bool = True,
                 precompile: bool = True, precompile_more: bool = True,
                 precompile_wait: float = 120.0, job_cache: bool = True, spares: bool = True,
                 autoscale: bool = False, probe_raylets: bool = True,
                 max_capacity: dict | None = None):
        logging.basicConfig(level=logging.INFO)
        sd = StateDir(state_dir)
        if autoscale and policy == "pollux":
            policy_kwargs = {"autoscale": True, **(policy_kwargs or {})}
        if compile_cache:
            from goodput_jax.sched.warmup import enable_compilation_cache

            enable_compilation_cache(sd.compile_cache)
        if policy != "auto" and policy_kwargs:
            policy = make_policy(policy, **policy_kwargs)
        launcher = RayLauncher(fake_devices, compile_cache=(
            os.path.join(sd.root, "jax-cache-jobs") if job_cache else None),
            spares=spares, state_root=sd.root)
        self.controller = Controller(state_dir, policy=policy, interval=interval,
                                     launcher=launcher, node_grace=node_grace,
                                     autoscaler=RayAutoscaler() if autoscale else None,
                                     probe=raylet_gone if probe_raylets else None,
                                     max_capacity=max_capacity)
        #: Placement groups and launch actors of a previous controller that nothing
        #: re-attached to, removed at start.
        self.stale_removed = launcher.remove_stale(list(self.controller.handles.values()))
        self.poll = float(poll)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.errors: list[str] = []
        self.started = time.time()
        self.precompiled = threading.Event()
        self.precompile_info: list[dict] = []
        self._precompile_more = bool(precompile_more)
        self._wait_until = time.monotonic() + float(precompile_wait)
        if precompile:
            threading.Thread(target=self._precompile, name="gj-precompile", daemon=True).start()
        else:
            self.precompiled.set()
        self._thread = threading.Thread(target=self._loop, name="gj-controller", daemon=True)
        self._thread.start()

    def _precompile(self) -> None:
        try:
            first = self.controller.precompile(lock=self._lock)
            self.precompile_info.append(first)
            self.precompiled.set()
            n = max(first.get("jobs", 0), 1)
            if self._precompile_more and "skipped" not in first and not self._stop.is_set():
                self.precompile_info.append(
                    self.controller.precompile(job_counts=[max(n // 2, 1), 2 * n],
                                               lock=self._lock))
        except Exception as e:
            logger.exception("precompile failed")
            self.errors.append(f"precompile: {_one_line(e)}")
        finally:
            self.precompiled.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                rounds = self.precompiled.is_set() or time.monotonic() > self._wait_until
                with self._lock:
                    self.controller.tick(rounds=rounds)
            except Exception as e:
                logger.exception("controller tick failed")
                self.errors.append(_one_line(e))
                del self.errors[:-50]
            self._stop.wait(self.poll)

    def status(self) -> dict:
        with self._lock:
            out = self.controller.status()
            out["errors"] = list(self.errors[-20:])
            out["restored"] = self.controller.restored
            out["reattached"] = list(self.controller.reattached)
            out["stale_removed"] = list(self.stale_removed)
            out["precompile"] = list(self.precompile_info)
            out["started"] = self.started
            out["requested"] = self.controller.requested
            scaler = self.controller.autoscaler
            out["requests_sent"] = scaler.sent if isinstance(scaler, RayAutoscaler) else None
            out["pid"] = os.getpid()
            return out

    def jobs(self) -> dict:
        """Every job's record as JSON, by name."""
        with self._lock:
            return {n: j.to_json() for n, j in self.controller.jobs.items()}

    def capacity(self) -> dict:
        """``{type: [nodes, devices per node]}`` a spec is checked against
        (:meth:`Controller.admission_capacity`: ``max_capacity``, else the live nodes)."""
        with self._lock:
            cap = self.controller.admission_capacity()
            return {t: list(v) for t, v in cap.by_type.items()} if cap is not None else {}

    def submit(self, spec: dict) -> str:
        with self._lock:
            return self.controller.submit(spec)

    def cancel(self, name: str) -> str:
        with self._lock:
            return self.controller.cancel(name)

    def logs(self, name: str, attempt: int | None = None, rank: int = 0) -> str:
        with self._lock:
            return self.controller.logs(name, attempt, rank)

    def round_now(self) -> list:
        with self._lock:
            return list(self.controller.run_round().changed)

    def reallocate(self, name: str, allocation: list) -> str:
        with self._lock:
            return self.controller.reallocate(name, allocation)

    def pid(self) -> int:
        return os.getpid()

    def spares(self) -> dict:
        """``{node label: warm}`` of the launcher's spare processes."""
        return self.controller.launcher.spare_status()

    def shutdown(self) -> bool:
        """Stop every launch and the loop (the cluster is going down)."""
        self._stop.set()
        self._thread.join(timeout=30)
        with self._lock:
            self.controller.shutdown()
        return True


def start_controller(state_dir: str, *, policy: str = "auto", interval: float = 60.0,
                     poll: float = 0.5, fake_devices: bool = True, node_grace: float = 15.0,
                     policy_kwargs: dict | None = None, name: str = CONTROLLER_NAME,
                     max_restarts: int = -1, **actor_kwargs: Any) -> Any:
    """Start the controller actor on this driver's node (the head); returns its handle.

    The actor is named ``name`` in the runtime's namespace (:data:`NAMESPACE`),
    detached (it outlives this driver: stop it with ``shutdown()`` and
    ``ray.kill``) and restarted by Ray up to ``max_restarts`` times (-1: always).
    ``policy_kwargs`` go to the policy's constructor (with ``policy`` "sia" or
    "pollux"); ``actor_kwargs`` (``compile_cache``, ``precompile``,
    ``precompile_more``, ``precompile_wait``, ``job_cache``, ``spares``,
    ``autoscale``, ``probe_raylets``, ``max_capacity``) to :class:`ControllerActor`.

    Raises:
        ValueError: a controller of that name is already running.
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    try:
        ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        pass
    else:
        raise ValueError(f"name ({name!r}): a controller is already running in namespace "
                         f"{NAMESPACE!r}")
    here = ray.get_runtime_context().get_node_id()
    actor = ray.remote(num_cpus=0, max_concurrency=8)(ControllerActor).options(
        name=name, namespace=NAMESPACE, lifetime="detached", max_restarts=max_restarts,
        scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False),
    ).remote(os.path.abspath(state_dir), policy, interval, poll, fake_devices, node_grace,
             policy_kwargs, **actor_kwargs)
    ray.get(actor.status.remote())
    return actor


def stop_controller(actor: Any) -> None:
    """Shut the controller down (its launches stop) and end its actor for good."""
    import ray

    try:
        ray.get(actor.shutdown.remote(), timeout=120)
    finally:
        ray.kill(actor, no_restart=True)
