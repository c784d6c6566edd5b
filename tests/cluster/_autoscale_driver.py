"""The Ray side of tests/cluster/test_autoscale_ray.py: runs INSIDE a loopback-only sandbox.

    python -m goodput_jax.cluster.local tests/cluster/_autoscale_driver.py ROOT_DIR OUT_JSON

Ray's stock ``ray.cluster_utils.AutoscalingCluster`` (Ray's fake multi-node provider,
its ``start`` and ``shutdown`` with their ``ray stop --force``, which inside the
sandbox's PID namespace sees only the sandbox's processes): one worker type ``a2``
(2 devices of type ``a``, every node the same resources; at least 1 node, at most 3),
nodes idle for 0.05 minutes removed. Ray's wheel leaves out the example config that
``AutoscalingCluster`` builds on (``fake_multi_node/example.yaml``), so
:class:`StockAutoscalingCluster` gives it the same base inline; nothing else differs.
On that one cluster, one phase per policy, one after the other: a controller with
``autoscale=True`` (``sia`` asks for the queue's demand; ``pollux`` for its
``desired_nodes``), its state in ``ROOT_DIR/<policy>``.

Three jobs of exactly 2 devices each are submitted: one fits, two wait; the round
asks for three ``a`` nodes; the autoscaler adds two; the next rounds place the
waiting jobs on them. The jobs (a script that waits for a file, no JAX) then end;
the request drops to what is held, then is released, and the idle nodes go, back to
one; the controller stops and the next phase starts. Teardown: ``shutdown()``, and
the sandbox's PID namespace ends with this process.
"""

from __future__ import annotations

import json
import os
import sys
import time

EX_SCRIPT = """
import os, sys, time
from goodput_jax.cluster import job_context
ctx = job_context()
print("job", ctx.job, "on", ctx.nodes, flush=True)
deadline = time.time() + 240
while not os.path.exists(sys.argv[1]) and time.time() < deadline:
    time.sleep(0.2)
"""

POLICIES = ("sia", "pollux")

OSM = 80 * 2**20
#: Ray's ``autoscaler/_private/fake_multi_node/example.yaml`` (not in its wheel), which
#: ``AutoscalingCluster`` loads and then overrides with its arguments.
EXAMPLE_BASE = {
    "cluster_name": "fake_multinode", "max_workers": 8,
    "provider": {"type": "fake_multinode", "use_node_id_as_ip": True,
                 "disable_node_updaters": True, "disable_launch_config_check": True},
    "available_node_types": {}, "head_node_type": "ray.head.default", "auth": {},
    "upscaling_speed": 1.0, "idle_timeout_minutes": 0.1, "docker": {},
    "initialization_commands": [], "setup_commands": [], "head_setup_commands": [],
    "worker_setup_commands": [], "head_start_ray_commands": [],
    "worker_start_ray_commands": [], "file_mounts": {}, "cluster_synced_files": [],
    "file_mounts_sync_continuously": False, "rsync_exclude": [], "rsync_filter": [],
}
#: the one worker type: every node the same resources, nothing that names a node
WORKERS = {"a2": {"resources": {"CPU": 1, "gj_accel": 2, "gj_type_a": 2,
                                "object_store_memory": OSM},
                  "node_config": {}, "min_workers": 1, "max_workers": 3}}


def stock_cluster():
    """Ray's ``AutoscalingCluster`` with its example config given inline."""
    import copy

    from ray.cluster_utils import AutoscalingCluster

    class StockAutoscalingCluster(AutoscalingCluster):
        def _generate_config(self, head_resources, worker_node_types, autoscaler_v2=False,
                             **config_kwargs):
            config = copy.deepcopy(EXAMPLE_BASE)
            config["available_node_types"] = worker_node_types
            config["available_node_types"]["ray.head.default"] = {
                "resources": head_resources, "node_config": {}, "max_workers": 0}
            config.update(config_kwargs)
            return config

    return StockAutoscalingCluster(head_resources={"CPU": 1, "object_store_memory": OSM},
                                   worker_node_types=copy.deepcopy(WORKERS), max_workers=3,
                                   upscaling_speed=10.0, idle_timeout_minutes=0.05)


def wait_for(pred, timeout: float, what: str, poll: float = 0.25):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(poll)
    raise TimeoutError(what)


def main(root: str, out_path: str) -> None:
    import tempfile

    from goodput_jax.cluster.local import in_sandbox

    if not in_sandbox():
        raise RuntimeError("run this driver only inside the loopback-only sandbox "
                           "(AutoscalingCluster runs `ray stop --force`)")
    t0 = time.time()
    info: dict = {"t0": t0, "phases": {}, "policies": {}}
    os.makedirs(root, exist_ok=True)
    tempfile.tempdir = root  # AutoscalingCluster writes its config with mkstemp()
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]
    cluster = stock_cluster()
    cluster.start()
    info["phases"]["head_up"] = time.time() - t0
    import ray

    ray.init(address="auto", log_to_driver=False)
    try:
        for policy in POLICIES:
            info["policies"][policy] = phase(os.path.join(root, policy), policy, t0)
            info["phases"][f"{policy}_done"] = time.time() - t0
    finally:
        ray.shutdown()
        cluster.shutdown()
    with open(out_path, "w") as fh:
        json.dump(info, fh, default=str)


def phase(state_dir: str, policy: str, t0: float) -> dict:
    """One controller (``policy``, autoscaling on) on the running cluster: three jobs
    grow it, run, end; the cluster shrinks back to one node; the controller stops."""
    import ray

    from goodput_jax.cluster import ClusterClient, JobSpec, start_controller
    from goodput_jax.cluster.controller import CONTROLLER_NAME, ray_nodes, stop_controller
    from goodput_jax.cluster.launch import NAMESPACE
    from goodput_jax.cluster.record import read_state

    info: dict = {"phases": {}, "nodes_seen": [], "t0": t0}
    os.makedirs(state_dir, exist_ok=True)

    def labels():
        got = sorted(n.label for n in ray_nodes())
        if not info["nodes_seen"] or info["nodes_seen"][-1][1] != got:
            info["nodes_seen"].append((time.time() - t0, got))
        return got

    # the min_workers node (the previous phase's cluster has shrunk back to it)
    first = wait_for(lambda: len(labels()) == 1 and labels(), 120, "one node")
    info["first_nodes"] = first
    info["phases"]["first_node"] = time.time() - t0
    # precompile off: the first round compiles for the three jobs it sees (a precompile
    # for the jobs held at start, none, would compile a one-job problem first)
    def name_free():  # the previous phase's controller, killed, is gone
        try:
            ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)
        except ValueError:
            return True
        return False

    wait_for(name_free, 30, "the previous controller gone")
    ctl = start_controller(state_dir, policy=policy, interval=2.0, poll=0.25, autoscale=True,
                           spares=False, job_cache=False, precompile=False)
    client = ClusterClient(state_dir)
    wait_for(client.capacity, 60, "controller wrote the capacity")
    script = os.path.join(state_dir, "wait_job.py")
    with open(script, "w") as fh:
        fh.write(EX_SCRIPT)
    release = os.path.join(state_dir, "release")
    for i in range(3):
        client.submit(JobSpec(f"{policy[0]}{i}", script, args=(release,), min_replicas=2,
                              max_replicas=2, accelerator_types=("a",)))
    info["phases"]["submitted"] = time.time() - t0

    def all_running():
        labels()
        st = client.status()
        return len(st) == 3 and all(j["status"] == "running" for j in st.values())

    try:
        wait_for(all_running, 150, "all three jobs running")
        info["timeout"] = None
    except TimeoutError as e:
        info["timeout"] = str(e)
    info["phases"]["all_running"] = time.time() - t0
    info["grown_nodes"] = labels()
    info["jobs_running"] = client.status()
    with open(release, "w") as fh:
        fh.write("go")
    wait_for(lambda: all(j["status"] == "finished" for j in client.status().values()), 90,
             "jobs finished")
    info["phases"]["finished"] = time.time() - t0
    try:
        wait_for(lambda: len(labels()) == 1, 120, "the idle nodes removed")
        info["shrink_timeout"] = None
    except TimeoutError as e:
        info["shrink_timeout"] = str(e)
    info["phases"]["shrunk"] = time.time() - t0
    info["final_nodes"] = labels()
    info["controller"] = ray.get(ctl.status.remote())
    stop_controller(ctl)
    info["jobs"] = client.status()
    info["rounds"] = read_state(state_dir).rounds
    info["phases"]["down"] = time.time() - t0
    return info


if __name__ == "__main__":
    main(*sys.argv[1:3])
    sys.stdout.flush()
    os._exit(0)  # the sandbox's PID namespace ends with this process: Ray with it
