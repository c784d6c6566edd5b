"""The controller as a Ray actor: :class:`ControllerActor`, started and stopped here.

:class:`ControllerActor` is a named, detached Ray actor running a
:class:`~goodput_jax.cluster.controller_core.Controller` every ``poll`` seconds;
:func:`start_controller` / :func:`stop_controller` start and end it. Its options are
one :class:`~goodput_jax.cluster.options.ControllerActorOptions`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from goodput_jax.cluster.autoscale import RayAutoscaler
from goodput_jax.cluster.controller_core import Controller
from goodput_jax.cluster.controller_nodes import raylet_gone
from goodput_jax.cluster.controller_rounds import make_policy
from goodput_jax.cluster.controller_state import one_line
from goodput_jax.cluster.launch import NAMESPACE, RayLauncher
from goodput_jax.cluster.options import ControllerActorOptions, options_from
from goodput_jax.cluster.state import StateDir

logger = logging.getLogger(__name__)

__all__ = ["CONTROLLER_NAME", "ControllerActor", "start_controller", "stop_controller"]

#: The controller actor's name (in the runtime's namespace, :data:`NAMESPACE`).
CONTROLLER_NAME = "goodput_jax_controller"


class ControllerActor:
    """The Ray actor running :class:`~goodput_jax.cluster.controller_core.Controller` every
    ``poll`` seconds on its own thread.

    Args:
        state_dir: the cluster's state directory.
        options: a :class:`~goodput_jax.cluster.options.ControllerActorOptions` (or its
            fields as keywords); the options named below are its fields.

    Create it with :func:`start_controller`: a named (:data:`CONTROLLER_NAME`),
    detached actor in the runtime's namespace (:data:`NAMESPACE`) that Ray restarts
    when its process dies (``max_restarts``); the restarted actor reads the saved
    state and re-attaches to the launches still running. Its remote methods serve
    clients that have only the cluster's address (:class:`~goodput_jax.cluster.ClusterClient`).

    At startup it turns on JAX's persistent compilation cache in
    ``STATE_DIR/jax-cache`` (``compile_cache``) and compiles the policy in the
    background (:meth:`~goodput_jax.cluster.controller_core.Controller.precompile`): first
    for the jobs it holds (rounds wait for this, at most ``precompile_wait`` seconds; ticks go on), then for half
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

    def __init__(self, state_dir: str, options: ControllerActorOptions | None = None,
                 **keywords: Any):
        o = options_from(ControllerActorOptions, options, keywords)
        self.options = o
        logging.basicConfig(level=logging.INFO)
        sd = StateDir(state_dir)
        policy_kwargs = dict(o.policy_kwargs or {})
        if o.autoscale and o.policy == "pollux":
            policy_kwargs = {"autoscale": True, **policy_kwargs}
        if o.compile_cache:
            from goodput_jax.sched.warmup import enable_compilation_cache

            enable_compilation_cache(sd.compile_cache)
        policy = make_policy(o.policy, **policy_kwargs) if policy_kwargs else None
        launcher = RayLauncher(o.fake_devices, compile_cache=(
            os.path.join(sd.root, "jax-cache-jobs") if o.job_cache else None),
            spares=o.spares, state_root=sd.root)
        import ray

        head = ray.get_runtime_context().gcs_address if ray.is_initialized() else None
        self.launcher = launcher
        self.controller = Controller(state_dir, o.controller(policy, head), launcher=launcher,
                                     autoscaler=RayAutoscaler() if o.autoscale else None,
                                     probe=raylet_gone if o.probe_raylets else None)
        #: Placement groups and launch actors of a previous controller that nothing
        #: re-attached to, removed at start.
        self.stale_removed = launcher.remove_stale(list(self.controller.handles.values()))
        self.poll = o.poll
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.errors: list[str] = []
        self.started = time.time()
        self.precompiled = threading.Event()
        self.precompile_info: list[dict] = []
        self._precompile_more = o.precompile_more
        self._wait_until = time.monotonic() + o.precompile_wait
        if o.precompile:
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
            self.errors.append(f"precompile: {one_line(e)}")
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
                self.errors.append(one_line(e))
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
        (:meth:`~goodput_jax.cluster.controller_core.Controller.admission_capacity`: ``max_capacity``, else the live nodes)."""
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
        return self.launcher.spare_status()

    def shutdown(self) -> bool:
        """Stop every launch and the loop (the cluster is going down)."""
        self._stop.set()
        self._thread.join(timeout=30)
        with self._lock:
            self.controller.shutdown()
        return True


def start_controller(state_dir: str, *, options: ControllerActorOptions | None = None,
                     name: str = CONTROLLER_NAME, max_restarts: int = -1,
                     **keywords: Any) -> Any:
    """Start the controller actor on this driver's node (the head); returns its handle.

    The actor is named ``name`` in the runtime's namespace (:data:`NAMESPACE`),
    detached (it outlives this driver: stop it with ``shutdown()`` and
    ``ray.kill``) and restarted by Ray up to ``max_restarts`` times (-1: always).
    ``options`` (a :class:`~goodput_jax.cluster.options.ControllerActorOptions`), or
    its fields as keywords (``policy``, ``interval``, ``poll``, ``policy_kwargs``,
    ``autoscale``, ...), go to :class:`ControllerActor`; they are checked here, before
    anything starts.

    Raises:
        ValueError / TypeError: a wrong option (one line), or a controller of that name
            is already running.
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    opts = options_from(ControllerActorOptions, options, keywords)
    try:
        ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        pass
    else:
        raise ValueError(f"name ({name!r}): a controller is already running in namespace "
                         f"{NAMESPACE!r}")
    here = ray.get_runtime_context().get_node_id()
    actor: Any = ray.remote(ControllerActor).options(
        num_cpus=0, max_concurrency=8, name=name, namespace=NAMESPACE, lifetime="detached",
        max_restarts=max_restarts,
        scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False),
    ).remote(os.path.abspath(state_dir), opts)
    ray.get(actor.status.remote())
    return actor


def stop_controller(actor: Any) -> None:
    """Shut the controller down (its launches stop) and end its actor for good."""
    import ray

    try:
        ray.get(actor.shutdown.remote(), timeout=120)
    finally:
        ray.kill(actor, no_restart=True)
