"""The Ray side of tests/cluster/test_raylet_kill.py: runs INSIDE a loopback-only sandbox.

    python -m goodput_jax.cluster.local tests/cluster/_raylet_kill_driver.py STATE_DIR OUT_JSON

Starts a local cluster of three one-device worker nodes and the controller with a
short lease (:data:`LEASE` seconds), runs one job (``_raylet_kill_job.py``: a step
loop with a child process, heartbeats that no fence stops) and, while it trains:

1. kills the controller actor's process (SIGKILL): Ray restarts it; the launch must
   train on through it (a controller restart stops nothing, however long it takes
   against the lease);
2. SIGKILLs the raylet process of the job's node, that one process only (not a node
   removal: the node's other processes, the job's among them, are left as they are),
   and leaves it unreaped. A killed raylet that nobody reaps (its parent here is this
   driver, elsewhere an init that does not reap) is a zombie, which Ray's worker-side
   check on its raylet (``kill(pid, 0)``) takes for a live one: the launch outlives
   its raylet, as a launch cut off by a network partition does, and only its lease
   stops it;
3. once the job trains elsewhere, SIGKILLs that node's raylet and reaps it at once (as
   ``ray start --block`` or a container's init does): then Ray ends the launch's
   processes itself.

After each kill it waits (at most the lease and :data:`WAIT` seconds) for the cut-off
launch's processes to end, records their state, and waits for the job to train in a new
launch. Then it ends the job and writes what it saw to OUT_JSON: every kill's time,
the cut-off launches' pids, node, states and log, every progress record and
heartbeat, the controller's view of the job.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from goodput_jax.cluster import ClusterClient, JobSpec, LocalCluster, start_controller
from goodput_jax.cluster.controller import stop_controller

#: the launches' lease here (seconds): short, so the test is quick
LEASE = 3.0
#: how long past the lease the driver waits for a cut-off launch's processes to end
WAIT = 60.0
JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_raylet_kill_job.py")


def wait_for(pred, timeout: float, what: str, poll: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(poll)
    raise TimeoutError(what)


def process_state(pid: int) -> str:
    """``/proc/PID/stat``'s state letter, or ``"gone"``."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def ended(pid: int) -> bool:
    """Gone, or a zombie (this driver is the sandbox's PID 1: it reaps no orphan)."""
    return process_state(pid) in ("gone", "Z")


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from ``/proc/*/stat``'s parent pids)."""
    parent = {}
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{p}/stat") as fh:
                parent[int(p)] = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    out, todo = [], [pid]
    while todo:
        kids = [p for p, pp in parent.items() if pp == todo[-1]]
        todo.pop()
        out += kids
        todo += kids
    return out


def read_jsonl(path: str) -> list[dict]:
    try:
        with open(path) as fh:
            return [json.loads(ln) for ln in fh if ln.strip()]
    except FileNotFoundError:
        return []


class Scenario:
    def __init__(self, state_dir: str, phases: dict):
        t0 = time.time()
        self.cluster = LocalCluster([("a", 1), ("a", 1), ("a", 1)])
        phases["cluster"] = time.time() - t0
        self.ctl = start_controller(state_dir, policy="sia", interval=30.0, poll=0.2,
                                    node_grace=8.0, lease=LEASE, spares=False,
                                    precompile=False, precompile_more=False,
                                    compile_cache=False, job_cache=False)
        self.client = ClusterClient(state_dir)
        wait_for(self.client.capacity, 60, "controller wrote the capacity")
        phases["controller"] = time.time() - t0
        self.beats = os.path.join(state_dir, "beats")
        os.makedirs(self.beats)
        self.client.submit(JobSpec("rk", JOB, args=(self.beats,), min_replicas=1,
                                   max_replicas=1))

    def beats_of(self, attempt: int) -> list[dict]:
        return [b for b in read_jsonl(os.path.join(self.beats, "beats.jsonl"))
                if b["attempt"] == attempt]

    def training(self) -> dict:
        """The job, once it runs and its current launch has beaten 5 times."""
        def ready():
            job = self.client.status().get("rk", {})
            ok = job.get("status") == "running" and len(self.beats_of(job["attempt"])) >= 5
            return job if ok else None

        return wait_for(ready, 120, "rk training")

    def pids(self, attempt: int) -> dict:
        with open(os.path.join(self.beats, f"pid-{attempt}")) as fh:
            return json.load(fh)

    def restart_controller(self) -> dict:
        """Kill the controller's process; the launch must train on through its restart."""
        import ray

        job = self.training()
        pid = self.pids(job["attempt"])["pid"]
        old = ray.get(self.ctl.pid.remote())
        t_kill = time.time()
        os.kill(old, signal.SIGKILL)  # Ray restarts the actor (max_restarts)

        def restarted():
            try:
                st = ray.get(self.ctl.status.remote(), timeout=10)
            except Exception:  # noqa: BLE001 - restarting
                return None
            return st if st["pid"] != old else None

        st = wait_for(restarted, 120, "controller restarted by Ray")
        back = time.time()
        # the launch beats on for more than a lease past the kill and the restart
        wait_for(lambda: any(b["t"] > max(back, t_kill + LEASE) + 1.0
                             for b in self.beats_of(job["attempt"])), LEASE + WAIT,
                 "the launch trains on after the controller's restart")
        return {"t_kill": t_kill, "back_after": back - t_kill, "attempt": job["attempt"],
                "pid": pid, "state": process_state(pid), "reattached": st["reattached"],
                "attempt_after": self.client.status("rk")["attempt"]}

    def kill_raylet(self, reap: bool) -> dict:
        job = self.training()
        attempt, node = job["attempt"], job["allocation"][0]
        pids = self.pids(attempt)
        ray_node = self.cluster.nodes[node]
        raylet = ray_node.all_processes["raylet"][0].process
        cut = {"attempt": attempt, "node": node, "reap": reap, "raylet_pid": raylet.pid,
               "raylet": f"{ray_node.node_ip_address}:{ray_node.node_manager_port}",
               "pid": pids["pid"], "child": pids["child"],
               "pids": sorted({pids["pid"], pids["child"], *descendants(pids["pid"])}),
               "log": self.client.sd.log_path("rk", attempt, 0)}
        t_kill = time.time()
        os.kill(raylet.pid, signal.SIGKILL)  # that node's raylet only
        if reap:
            raylet.wait()
        cut["t_kill"] = t_kill
        try:
            wait_for(lambda: all(ended(p) for p in cut["pids"]), LEASE + WAIT,
                     "the cut-off launch's processes ended", poll=0.05)
        except TimeoutError:
            pass
        cut["ended_after"] = time.time() - t_kill
        cut["states"] = {str(p): process_state(p) for p in cut["pids"]}
        wait_for(lambda: [b for b in read_jsonl(os.path.join(self.beats, "beats.jsonl"))
                          if b["attempt"] > attempt], 120, "rk trains in a new launch")
        new = self.client.status("rk")
        cut["new"] = {"attempt": new["attempt"], "allocation": new["allocation"],
                      "pid": self.pids(new["attempt"])["pid"]}
        try:
            with open(cut["log"]) as fh:
                cut["log_tail"] = fh.read()[-2000:]
        except OSError as e:
            cut["log_tail"] = f"(no log: {e})"
        return cut

    def finish(self, info: dict) -> None:
        import ray

        open(os.path.join(self.beats, "done"), "w").close()
        self.client.wait(["rk"], timeout=120)
        info["job"] = self.client.status("rk")
        info["progress"] = self.client.progress("rk")
        info["beats"] = read_jsonl(os.path.join(self.beats, "beats.jsonl"))
        info["controller_errors"] = ray.get(self.ctl.status.remote(), timeout=30)["errors"]
        for cut in info["cuts"]:
            cut["states_at_end"] = {str(p): process_state(p) for p in cut["pids"]}
        stop_controller(self.ctl)
        self.cluster.shutdown()


def main(state_dir: str, out_path: str) -> None:
    t0 = time.time()
    info: dict = {"lease": LEASE, "phases": {}}
    sc = Scenario(state_dir, info["phases"])
    info["up_s"] = time.time() - t0
    info["restart"] = sc.restart_controller()
    info["phases"]["restart"] = time.time() - t0
    info["cuts"] = [sc.kill_raylet(reap=False)]
    info["phases"]["unreaped"] = time.time() - t0
    info["cuts"].append(sc.kill_raylet(reap=True))
    info["phases"]["reaped"] = time.time() - t0
    sc.finish(info)
    info["total_s"] = time.time() - t0
    with open(out_path, "w") as fh:
        json.dump(info, fh, default=str)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
    sys.stdout.flush()
    os._exit(0)
