"""goodput_jax.cluster: the runtime that schedules real JAX jobs on Ray by goodput.

Jobs (:class:`JobSpec`) are submitted to a cluster by its address or its state
directory (:class:`ClusterClient`: ``submit``, ``status``, ``cancel``,
``reallocate``, ``logs``); a controller actor (:mod:`.controller`, named and
detached, restarted by Ray) keeps a typed :class:`JobRecord` per job, reads each job's published hints, runs
Pollux (one accelerator type) or Sia (several), and restarts only the jobs whose
allocation changed, from their checkpoints, after a cooperative stop
(:class:`goodput_jax.adaptive.stop.StopRequest`). :class:`LocalCluster` runs a
head and worker raylets on this machine inside a loopback-only namespace.
See ``docs/cluster.md``. Names load lazily (``import goodput_jax.cluster``
imports neither Ray nor JAX).

Example:
    >>> from goodput_jax.cluster import JobSpec
    >>> JobSpec("j", "goodput_jax.cluster.examples:regression").min_replicas
    1
"""

from __future__ import annotations

from goodput_jax._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "Capacity": "goodput_jax.cluster.spec",
    "JobSpec": "goodput_jax.cluster.spec",
    "validate": "goodput_jax.cluster.spec",
    "ClusterClient": "goodput_jax.cluster.api",
    "JobContext": "goodput_jax.cluster.context",
    "job_context": "goodput_jax.cluster.context",
    "mark_stopped": "goodput_jax.cluster.context",
    "Controller": "goodput_jax.cluster.controller",
    "ControllerActorOptions": "goodput_jax.cluster.options",
    "ControllerOptions": "goodput_jax.cluster.options",
    "RayLauncher": "goodput_jax.cluster.launch",
    "start_controller": "goodput_jax.cluster.controller",
    "stop_controller": "goodput_jax.cluster.controller",
    "ClusterState": "goodput_jax.cluster.record",
    "JobRecord": "goodput_jax.cluster.record",
    "JobStatus": "goodput_jax.cluster.record",
    "Launcher": "goodput_jax.cluster.record",
    "Placement": "goodput_jax.cluster.record",
    "read_state": "goodput_jax.cluster.record",
    "scheduling_timeline": "goodput_jax.cluster.record",
    "make_policy": "goodput_jax.cluster.controller",
    "NodeRecord": "goodput_jax.cluster.plan",
    "RoundPlan": "goodput_jax.cluster.plan",
    "job_info": "goodput_jax.cluster.plan",
    "node_infos": "goodput_jax.cluster.plan",
    "nodes_from_ray": "goodput_jax.cluster.plan",
    "plan_round": "goodput_jax.cluster.plan",
    "LocalCluster": "goodput_jax.cluster.local",
    "run_sandboxed": "goodput_jax.cluster.local",
    "StateDir": "goodput_jax.cluster.state",
    "RayAutoscaler": "goodput_jax.cluster.autoscale",
    "ResourceRequester": "goodput_jax.cluster.autoscale",
    "desired_bundles": "goodput_jax.cluster.autoscale",
}

__all__ = sorted(_EXPORTS)  # noqa: PLE0605 - the lazy table's names

__getattr__, __dir__ = lazy_exports("goodput_jax.cluster", _EXPORTS, globals())
