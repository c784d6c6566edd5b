"""The controller: every round, hints -> policy -> the jobs whose allocation changed.

:class:`Controller` is the logic, driven by :meth:`Controller.tick` (called
every ``poll`` seconds by :class:`ControllerActor`, a Ray actor on the head
node). A tick

1. takes in submitted specs and cancel requests from the state directory;
2. reads Ray's node table; a node that disappeared takes its jobs down: they
   are stopped and restart from their last checkpoint on what is left;
3. looks at each launch: finished, stopped on request (relaunch on the new
   allocation), crashed (retry with exponential backoff, ``failed`` with the
   error after ``spec.max_retries``), or a stop past its deadline (forced);
4. runs a round (:func:`goodput_jax.cluster.plan.plan_round`) every
   ``interval`` seconds (60 by default, as Pollux and Sia) and after an
   arrival, a finish or a node change: the latest hints of every job from its
   goodput store, JobInfo/NodeInfo with AdaptDL's rules, Pollux on one type or
   Sia on several; only jobs whose allocation changed are touched: a running
   one gets a cooperative stop request (it checkpoints at its next step
   boundary) and is relaunched on its new allocation;
5. persists its state (``controller.json``); a new controller rebuilds from it,
   relaunching the jobs that were running from their checkpoints.

Launching is delegated to a launcher (:class:`RayLauncher`: one placement group
per launch, one bundle per allocated node, one process per node); tests of the
logic may pass another object with the same four methods.
"""

from __future__ import annotations

import dataclasses
import glob
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from goodput_jax.cluster.plan import (
    ACCEL,
    NODE_PREFIX,
    NodeRecord,
    capacity_of,
    job_info,
    node_infos,
    nodes_from_ray,
    plan_round,
)
from goodput_jax.cluster.spec import JobSpec, validate
from goodput_jax.cluster.state import StateDir

logger = logging.getLogger(__name__)

__all__ = ["ACTIVE", "Controller", "ControllerActor", "RayLauncher", "make_policy"]

#: Name prefix of the runtime's placement groups.
PG_PREFIX = "gj-"

#: Job states the scheduler allocates for.
ACTIVE = ("queued", "running", "stopping", "retrying")


def make_policy(name: str, **kwargs: Any) -> Any:
    """``"sia"`` -> SiaPolicy(resource=ACCEL), ``"pollux"`` -> PolluxPolicy(autoscale=False).

    Example:
        >>> type(make_policy("sia")).__name__
        'SiaPolicy'
    """
    from goodput_jax.sched import PolluxPolicy, SiaPolicy

    if name == "sia":
        return SiaPolicy(resource=ACCEL, **kwargs)
    if name == "pollux":
        return PolluxPolicy(autoscale=False, **kwargs)
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


class RayLauncher:
    """Launches a job's processes on Ray: one placement group, one bundle per node.

    Bundle ``i`` holds ``{gj_node_<label>: 0.001, gj_accel: devices}`` (it can
    only land on that node); the process of rank ``i`` is a Ray task in it
    (``max_calls=1``: a fresh process, so JAX starts with its own device count,
    set through ``XLA_FLAGS`` in the task's runtime environment).

    Args:
        fake_devices: the accelerators are fake CPU devices (local clusters, CI).
    """

    def __init__(self, fake_devices: bool = True):
        import ray

        from goodput_jax.cluster.runner import run_replica

        self._ray = ray
        self.fake_devices = fake_devices
        self._task = ray.remote(max_calls=1, num_cpus=0, max_retries=0)(run_replica)

    def launch(self, spec: JobSpec, groups: list[tuple[str, int]], contexts: list[dict],
               log_paths: list[str]) -> dict:
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        bundles = [{f"{NODE_PREFIX}{label}": 0.001, ACCEL: float(k)} for label, k in groups]
        pg = placement_group(bundles, strategy="SPREAD" if len(bundles) > 1 else "PACK",
                             name=f"{PG_PREFIX}{spec.name}-{contexts[0]['attempt']}")
        refs = []
        for i, ((_, k), ctx, log) in enumerate(zip(groups, contexts, log_paths)):
            env = dict(spec.env)
            if self.fake_devices:
                env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                                    f" --xla_force_host_platform_device_count={k}").strip()
                env["JAX_PLATFORMS"] = "cpu"
            refs.append(self._task.options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    pg, placement_group_bundle_index=i),
                runtime_env={"env_vars": env}).remote(ctx, spec.entry_point, log))
        return {"pg": pg, "refs": refs}

    def remove_stale(self) -> list[str]:
        """Remove the runtime's placement groups left by a dead controller (their tasks
        died with it, their reservations did not); returns their names."""
        from ray.util import get_placement_group, placement_group_table

        gone = []
        for info in placement_group_table().values():
            name = info.get("name") or ""
            if name.startswith(PG_PREFIX) and info.get("state") != "REMOVED":
                try:
                    self._ray.util.remove_placement_group(get_placement_group(name))
                    gone.append(name)
                except Exception as e:  # noqa: BLE001 - removed meanwhile
                    logger.debug("stale placement group %s: %s", name, e)
        return gone

    def poll(self, handle: dict) -> tuple[str, Any] | None:
        """None: running; ``("ok", [results])``; ``("error", (message, system))``."""
        ray = self._ray
        refs = handle["refs"]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        results = []
        for ref in ready:
            try:
                results.append(ray.get(ref, timeout=5))
            except ray.exceptions.RayTaskError as e:
                cause = e.cause
                text = f"{type(cause).__name__}: {cause}" if cause is not None else str(e)
                return "error", (_one_line(text), False)
            except ray.exceptions.RayError as e:
                return "error", (_one_line(f"{type(e).__name__}: {e}"), True)
        if len(ready) < len(refs):
            return None
        return "ok", results

    def kill(self, handle: dict) -> None:
        ray = self._ray
        for ref in handle["refs"]:
            try:
                ray.cancel(ref, force=True)
            except Exception as e:  # noqa: BLE001 - already finished or its node is gone
                logger.debug("cancel: %s", e)
        self.release(handle)

    def release(self, handle: dict) -> None:
        try:
            self._ray.util.remove_placement_group(handle["pg"])
        except Exception as e:  # noqa: BLE001 - its node is gone
            logger.debug("remove_placement_group: %s", e)


def ray_nodes() -> list[NodeRecord]:
    """The runtime's live nodes from Ray's node table."""
    import ray

    return nodes_from_ray(ray.nodes())


class Controller:
    """The scheduling and lifecycle logic of the cluster runtime (see the module doc).

    Args:
        state_dir: the cluster's state directory.
        policy: ``"sia"``, ``"pollux"`` or a policy object; ``"auto"``: Pollux on
            a one-type cluster, Sia on a mixed one.
        interval: seconds between periodic rounds (60).
        launcher: starts and stops launches (default :class:`RayLauncher`).
        nodes: returns the live :class:`NodeRecord` list (default: Ray's table).
        clock: POSIX seconds.
        round_on_events: also run a round right after an arrival, a finish or a
            node change (default True; AdaptDL allocates new jobs at once too).
        node_grace: seconds a launch that died of a system error waits for the
            node table to show a dead node before counting as a crash.
        coordinator_port: returns a port for a launch's ``jax.distributed``
            coordinator (default: a random one in 20000-40000).
    """

    def __init__(self, state_dir: str, *, policy: Any = "auto", interval: float = 60.0,
                 launcher: Any = None, nodes: Callable[[], list[NodeRecord]] | None = None,
                 clock: Callable[[], float] = time.time, round_on_events: bool = True,
                 node_grace: float = 15.0, coordinator_port: Callable[[], int] | None = None):
        if not (isinstance(interval, (int, float)) and interval > 0):
            raise ValueError(f"interval ({interval!r}) must be > 0 seconds")
        self.sd = StateDir(state_dir)
        self.interval = float(interval)
        self._policy_arg = policy
        self.policy: Any = None if isinstance(policy, str) else policy
        self.launcher = launcher
        self._nodes = nodes or ray_nodes
        self.clock = clock
        self.round_on_events = bool(round_on_events)
        self.node_grace = float(node_grace)
        self._port = coordinator_port or (lambda: random.randint(20000, 40000))
        self.handles: dict[str, Any] = {}
        self._calcs: dict[str, Any] = {}
        self.alive: list[NodeRecord] = []
        self.last_round = -float("inf")
        self.trigger = True
        self._taken: list[str] = []
        saved = self.sd.read_json(self.sd.controller_path, {}) or {}
        self.jobs: dict[str, dict] = saved.get("jobs", {})
        self.rounds: list[dict] = saved.get("rounds", [])
        self.round_seconds: list[float] = saved.get("round_seconds", [])
        self.restored = bool(self.jobs)
        now = self.clock()
        for name, job in self.jobs.items():  # rebuild: what ran restarts from its checkpoint
            if job["status"] in ("running", "stopping"):
                alloc = job.get("next_allocation") if job["status"] == "stopping" else None
                job["allocation"] = alloc if alloc is not None else job["allocation"]
                job["status"] = "retrying" if job["allocation"] else "queued"
                job["retry_at"] = now
                job["relaunch_reason"] = "rebuilt"
                job["restarts"] += 1
                self._event(job, now, "controller restarted")
                logger.info("job %s: relaunching from its checkpoint", name)

    # ------------------------------------------------------------------ helpers
    def _event(self, job: dict, now: float, what: str, **extra: Any) -> None:
        job["events"].append({"t": now, "what": what, **extra})

    def _policy(self, types: set) -> Any:
        if self.policy is None or self._policy_arg == "auto":
            want = self._policy_arg if self._policy_arg != "auto" else (
                "sia" if len(types) > 1 else "pollux")
            if self.policy is None or getattr(self, "_policy_name", None) != want:
                self.policy = make_policy(want)
                self._policy_name = want
        return self.policy

    def _hints(self, name: str) -> Any:
        store = self.jobs[name]["spec"]["store"]
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

    def persist(self) -> None:
        self.sd.write_json(self.sd.controller_path, {
            "jobs": self.jobs, "rounds": self.rounds[-200:],
            "round_seconds": self.round_seconds[-200:], "updated": self.clock()})

    # ------------------------------------------------------------------ inputs
    def _ingest(self, now: float) -> None:
        cap = capacity_of(self.alive)
        for path in sorted(glob.glob(os.path.join(self.sd.inbox, "*.json"))):
            data = self.sd.read_json(path)
            self._taken.append(path)  # removed once the job is in controller.json
            try:
                spec = validate(JobSpec.from_json(data), cap if self.alive else None)
                spec = dataclasses.replace(
                    spec, store=spec.store or self.sd.default_store(spec.name),
                    checkpoint_dir=spec.checkpoint_dir or self.sd.default_checkpoint_dir(spec.name))
                error = None
            except (TypeError, ValueError) as e:
                spec, error = None, _one_line(e)
            name = (data or {}).get("name", os.path.basename(path)[:-5])
            if name in self.jobs:
                logger.warning("job %s submitted twice; the second is ignored", name)
                continue
            self.jobs[name] = {
                "spec": spec.to_json() if spec else data, "status": "failed" if error else "queued",
                "error": error, "allocation": [], "next_allocation": None, "attempt": -1,
                "restarts": 0, "failures": 0, "submitted": now, "started": None,
                "finished": None, "retry_at": None, "deadline": None, "suspect_since": None,
                "events": [], "launches": [],
            }
            self._event(self.jobs[name], now, "submitted" if not error else "refused",
                        error=error)
            self.trigger = True
        for path in sorted(glob.glob(os.path.join(self.sd.requests, "cancel-*"))):
            name = os.path.basename(path)[len("cancel-"):]
            os.remove(path)
            job = self.jobs.get(name)
            if job and job["status"] in ACTIVE:
                self._kill(name)
                job["status"], job["allocation"], job["finished"] = "cancelled", [], now
                self._event(job, now, "cancelled")
                self.trigger = True

    def _kill(self, name: str) -> None:
        handle = self.handles.pop(name, None)
        if handle is not None:
            self.launcher.kill(handle)

    # ------------------------------------------------------------------ the tick
    def tick(self, rounds: bool = True) -> None:
        """One pass: inputs, nodes, launches, (maybe) a round, persist.

        ``rounds=False`` holds rounds back (the actor does while the policy compiles
        at startup); a due round then runs at the first tick that allows it.
        """
        now = self.clock()
        alive = self._nodes()
        if [(n.label, n.devices, n.accelerator_type) for n in alive] != [
                (n.label, n.devices, n.accelerator_type) for n in self.alive]:
            self.trigger = True
            self.sd.write_json(self.sd.cluster_path, {
                "nodes": [n.__dict__ for n in alive],
                "capacity": {t: list(v) for t, v in capacity_of(alive).by_type.items()},
                "updated": now})
        self.alive = alive
        labels = {n.label for n in alive}
        self._ingest(now)
        for name, job in self.jobs.items():
            if job["status"] not in ACTIVE:
                continue
            lost = [n for n in job["allocation"] if n not in labels]
            if lost:
                self._lose(name, job, now, sorted(set(lost)))
                continue
            handle = self.handles.get(name)
            if handle is None:
                continue
            res = self.launcher.poll(handle)
            if res is None:
                if job["status"] == "stopping" and now > job["deadline"]:
                    self._kill(name)
                    self._event(job, now, "stop forced")
                    self._stopped(name, job, now, forced=True)
                continue
            kind, value = res
            if kind == "ok":
                self.launcher.release(self.handles.pop(name))
                if all(r["status"] == "finished" for r in value):
                    job["status"], job["allocation"], job["finished"] = "finished", [], now
                    self._event(job, now, "finished")
                    self.trigger = True
                else:
                    self._stopped(name, job, now, forced=False)
            else:
                message, system = value
                if system and job["suspect_since"] is None:
                    job["suspect_since"] = now  # wait for the node table to tell
                    job["suspect_error"] = message
                    continue
                if system and now - job["suspect_since"] < self.node_grace:
                    continue
                self._crash(name, job, now, job.get("suspect_error") or message)
        for name, job in self.jobs.items():
            if job["status"] == "retrying" and now >= job["retry_at"]:
                reason = job.pop("relaunch_reason", None) or "retry"
                if job["allocation"] and all(n in labels for n in job["allocation"]):
                    self._launch(name, job, now, reason)
                else:
                    job["status"], job["allocation"] = "queued", []
                    self.trigger = True
        if rounds and self.alive and (now - self.last_round >= self.interval
                           or (self.trigger and self.round_on_events)):
            self.run_round(now)
        self.persist()
        for path in self._taken:
            os.remove(path)
        self._taken.clear()

    def _lose(self, name: str, job: dict, now: float, lost: list) -> None:
        self._kill(name)
        job["restarts"] += 1
        job["status"], job["allocation"], job["next_allocation"] = "queued", [], None
        job["suspect_since"] = None
        self._event(job, now, "node lost", nodes=lost)
        self.trigger = True

    def _stopped(self, name: str, job: dict, now: float, forced: bool) -> None:
        nxt = job["next_allocation"] or []
        job["next_allocation"] = None
        self._event(job, now, "stopped", forced=forced)
        if nxt and all(n in {a.label for a in self.alive} for n in nxt):
            job["allocation"] = list(nxt)
            self._launch(name, job, now, "reallocation")
        else:
            job["status"], job["allocation"] = "queued", []
            self.trigger = True

    def _crash(self, name: str, job: dict, now: float, message: str) -> None:
        self._kill(name)
        job["failures"] += 1
        job["suspect_since"] = None
        job["error"] = message
        spec = job["spec"]
        self._event(job, now, "crashed", error=message)
        if job["failures"] > spec["max_retries"]:
            job["status"], job["allocation"], job["finished"] = "failed", [], now
            self._event(job, now, "failed", error=message)
            self.trigger = True
        else:
            job["status"] = "retrying"
            job["retry_at"] = now + spec["retry_backoff"] * 2 ** (job["failures"] - 1)

    # ------------------------------------------------------------------ launches
    def _launch(self, name: str, job: dict, now: float, reason: str) -> None:
        spec = JobSpec.from_json(job["spec"])
        groups = group_allocation(job["allocation"])
        by_label = {n.label: n for n in self.alive}
        job["attempt"] += 1
        coord = (f"{by_label[groups[0][0]].address}:{self._port()}" if len(groups) > 1
                 else None)
        jd = self.sd.job_dir(name)
        os.makedirs(jd, exist_ok=True)
        contexts, logs = [], []
        for rank, (label, k) in enumerate(groups):
            from goodput_jax.cluster.context import JobContext

            ctx = JobContext(
                job=name, attempt=job["attempt"], rank=rank, num_processes=len(groups),
                coordinator=coord, local_devices=k,
                accelerator_type=by_label[label].accelerator_type,
                nodes=tuple(g[0] for g in groups), devices_per_process=tuple(g[1] for g in groups),
                checkpoint_dir=spec.checkpoint_dir or self.sd.default_checkpoint_dir(name),
                store=spec.store or self.sd.default_store(name),
                stop_path=self.sd.stop_path(name), progress_path=self.sd.progress_path(name),
                hooks=spec.hooks, adaptive=spec.adaptive, args=spec.args)
            contexts.append(ctx.to_json())
            logs.append(self.sd.log_path(name, job["attempt"], rank))
        from goodput_jax.adaptive.stop import StopRequest

        StopRequest(self.sd.stop_path(name)).clear()  # served (or moot): the launch starts clean
        with open(os.path.join(jd, "attempt.tmp"), "w") as fh:  # the fence (JobContext.is_current)
            fh.write(str(job["attempt"]))
        os.replace(os.path.join(jd, "attempt.tmp"), os.path.join(jd, "attempt"))
        self.handles[name] = self.launcher.launch(spec, groups, contexts, logs)
        job["status"] = "running"
        job["started"] = job["started"] or now
        job["launches"].append({"t": now, "attempt": job["attempt"], "reason": reason,
                                "allocation": list(job["allocation"]),
                                "devices": len(job["allocation"]),
                                "nodes": [g[0] for g in groups],
                                "type": by_label[groups[0][0]].accelerator_type})
        self._event(job, now, "launched", attempt=job["attempt"], reason=reason,
                    allocation=list(job["allocation"]))

    # ------------------------------------------------------------------ rounds
    def job_infos(self, now: float, hints: dict | None = None) -> dict:
        """The JobInfo of every active job (``hints``: by job; default: read them now)."""
        types = sorted({n.accelerator_type for n in self.alive})
        infos = {}
        for name, job in self.jobs.items():
            if job["status"] not in ACTIVE:
                continue
            spec = JobSpec.from_json(job["spec"])
            h = hints[name] if hints is not None and name in hints else self._hints(name)
            infos[name] = job_info(spec, h, job["submitted"], types=types,
                                   num_restarts=job["restarts"],
                                   restarting=job["status"] == "stopping",
                                   age=now - job["submitted"])
        return infos

    def current_allocations(self) -> dict:
        """What each active job holds (a stopping job: where it goes next)."""
        out = {}
        for name, job in self.jobs.items():
            if job["status"] not in ACTIVE:
                continue
            nxt = job["next_allocation"]
            out[name] = list(nxt) if (job["status"] == "stopping" and nxt is not None) \
                else list(job["allocation"])
        return out

    def plan(self, now: float | None = None) -> tuple[Any, dict]:
        """One round's decision without acting on it: ``(RoundPlan, seconds per part)``.

        The parts: ``hints`` (read every active job's latest hints from its store),
        ``infos`` (JobInfo/NodeInfo), ``policy`` (the policy's optimize and the diff).
        """
        now = self.clock() if now is None else now
        t0 = time.perf_counter()
        hints = {name: self._hints(name) for name, job in self.jobs.items()
                 if job["status"] in ACTIVE}
        t1 = time.perf_counter()
        infos = self.job_infos(now, hints)
        nodes = node_infos(self.alive)
        t2 = time.perf_counter()
        policy = self._policy({n.accelerator_type for n in self.alive})
        plan = plan_round(policy, infos, nodes, self.current_allocations())
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
            infos = self.job_infos(self.clock()) if alive else {}
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
        self.round_seconds.append(seconds["total"])
        self.rounds.append({"t": now, "policy": plan.policy, "changed": list(plan.changed),
                            "allocations": {k: list(v) for k, v in plan.allocations.items()}})
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
        (a queued job given no devices).

        Raises:
            KeyError / ValueError: an unknown job, an inactive one or an unknown node.
        """
        job = self.jobs[name]
        if job["status"] not in ACTIVE:
            raise ValueError(f"job ({name!r}) is {job['status']}, not active")
        labels = {n.label for n in self.alive}
        bad = [n for n in allocation if n not in labels]
        if bad:
            raise ValueError(f"allocation: unknown node {bad[0]!r}")
        return self._apply(name, job, list(allocation), self.clock())

    def _apply(self, name: str, job: dict, new: list, now: float) -> str:
        """Act on ``job``'s new allocation ``new``; returns what was done (see
        :meth:`reallocate`)."""
        status = job["status"]
        if status == "queued":
            if not new:
                return "unchanged"
            job["allocation"] = new
            self._launch(name, job, now, "allocated" if job["attempt"] < 0 else "resumed")
            return "launched"
        if status == "running":
            job["next_allocation"] = new
            job["status"] = "stopping"
            job["deadline"] = now + float(job["spec"]["stop_timeout"])
            job["restarts"] += 1
            from goodput_jax.adaptive.stop import StopRequest

            StopRequest(self.sd.stop_path(name)).request(
                f"reallocation to {len(new)} devices" if new else "preempted")
            self._event(job, now, "stop requested", to=new)
            return "stop requested"
        if status == "stopping":
            if new != job["next_allocation"]:
                job["next_allocation"] = new
                self._event(job, now, "retargeted", to=new)
            return "retargeted"
        # retrying
        job["allocation"] = new
        if not new:
            job["status"] = "queued"
        return "retry moved"

    # ------------------------------------------------------------------ reading
    def status(self) -> dict:
        """Jobs (status, allocation, attempts, restarts, error) and the nodes."""
        return {"jobs": self.jobs, "nodes": [n.__dict__ for n in self.alive],
                "rounds": len(self.rounds)}

    def shutdown(self) -> None:
        """Force-stop every launch (the jobs keep their checkpoints) and persist."""
        for name in list(self.handles):
            self._kill(name)
        self.persist()


class ControllerActor:
    """A Ray actor running :class:`Controller` every ``poll`` seconds on its own thread.

    Create it with :func:`start_controller`; ``status()``, ``round_now()`` and
    ``shutdown()`` are its remote methods.

    At startup it turns on JAX's persistent compilation cache in
    ``STATE_DIR/jax-cache`` (``compile_cache``) and compiles the policy in the
    background (:meth:`Controller.precompile`): first for the jobs it holds (rounds
    wait for this, at most ``precompile_wait`` seconds; ticks go on), then for half
    and twice as many (``precompile_more``). ``status()["precompile"]`` reports it.
    """

    def __init__(self, state_dir: str, policy: str = "auto", interval: float = 60.0,
                 poll: float = 0.5, fake_devices: bool = True, node_grace: float = 15.0,
                 policy_kwargs: dict | None = None, compile_cache: bool = True,
                 precompile: bool = True, precompile_more: bool = True,
                 precompile_wait: float = 120.0):
        logging.basicConfig(level=logging.INFO)
        if compile_cache:
            from goodput_jax.sched.warmup import enable_compilation_cache

            enable_compilation_cache(StateDir(state_dir).compile_cache)
        if policy != "auto" and policy_kwargs:
            policy = make_policy(policy, **policy_kwargs)
        launcher = RayLauncher(fake_devices)
        #: Placement groups of a previous controller, removed at start.
        self.stale_removed = launcher.remove_stale()
        self.controller = Controller(state_dir, policy=policy, interval=interval,
                                     launcher=launcher, node_grace=node_grace)
        self.poll = float(poll)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.errors: list[str] = []
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
            self._stop.wait(self.poll)

    def status(self) -> dict:
        with self._lock:
            out = self.controller.status()
            out["errors"] = list(self.errors[-20:])
            out["restored"] = self.controller.restored
            out["stale_removed"] = list(self.stale_removed)
            out["precompile"] = list(self.precompile_info)
            return out

    def round_now(self) -> list:
        with self._lock:
            return list(self.controller.run_round().changed)

    def reallocate(self, name: str, allocation: list) -> str:
        with self._lock:
            return self.controller.reallocate(name, allocation)

    def shutdown(self) -> bool:
        self._stop.set()
        self._thread.join(timeout=30)
        with self._lock:
            self.controller.shutdown()
        return True


def start_controller(state_dir: str, *, policy: str = "auto", interval: float = 60.0,
                     poll: float = 0.5, fake_devices: bool = True, node_grace: float = 15.0,
                     policy_kwargs: dict | None = None,
                     name: str = "goodput_jax_controller", **actor_kwargs: Any) -> Any:
    """Start the controller actor on this driver's node (the head); returns its handle.

    ``policy_kwargs`` go to the policy's constructor (with ``policy`` "sia" or "pollux");
    ``actor_kwargs`` (``compile_cache``, ``precompile``, ``precompile_more``,
    ``precompile_wait``) to :class:`ControllerActor`.
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = ray.get_runtime_context().get_node_id()
    actor = ray.remote(num_cpus=0, max_concurrency=4)(ControllerActor).options(
        name=name, scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False),
    ).remote(os.path.abspath(state_dir), policy, interval, poll, fake_devices, node_grace,
             policy_kwargs, **actor_kwargs)
    ray.get(actor.status.remote())
    return actor
