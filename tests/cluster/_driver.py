"""The Ray side of tests/cluster/test_cluster.py: runs INSIDE a loopback-only sandbox.

    python -m goodput_jax.cluster.local tests/cluster/_driver.py STATE_DIR OUT_JSON

Starts a three-node local cluster (n0, n1: type "a" with 2 fake CPU devices
each; n2: type "b" with 2), the controller actor (Sia, 3 s rounds and a round
after every arrival, finish or node change), and real small JAX jobs:

* ``span``: type a only, exactly 4 devices: one launch over n0 + n1, two processes
  (jax.distributed);
* ``flex``: any type, 1-2 devices; lands on n2 while span holds type a;
* ``late``: any type, 1 device, submitted once flex has checkpointed; its first
  attempt crashes at step 5 (retried with backoff);
* ``doomed``: fails at once on every attempt; marked failed after its retries.

Once a job on n2 has checkpointed on it, n2's raylet is killed (or, when the rounds
have placed flex and late elsewhere, the node of one that has checkpointed); its jobs
restart from their checkpoints elsewhere. Before that (once late runs), the controller
actor's process is killed (SIGKILL); Ray restarts the actor, which reads
controller.json and re-attaches to the launches still running (relaunching
nothing). Once every job is done, a client in another process and directory, with
only the cluster's address, submits, lists, moves, reads the logs of and cancels a
job through the CLI. The driver then shuts the controller and the cluster down and
writes what it saw (the controller's state, each job's progress log, the kill,
the stores' write-ahead logs, listening sockets left in the namespace) to OUT_JSON.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from goodput_jax.cluster import ClusterClient, JobSpec, LocalCluster, start_controller
from goodput_jax.cluster.controller import stop_controller

EX = "goodput_jax.cluster.examples:regression"
#: the launches' lease here (seconds; docs/cluster.md): short, so the cut-off launch
#: fences itself while the scenario runs
LEASE = 5.0


def listening_sockets() -> list[str]:
    out = []
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as fh:
                rows = fh.read().splitlines()[1:]
        except FileNotFoundError:
            continue
        out += [r.split()[1] for r in rows if r.split()[3] == "0A"]
    return out


def wait_for(pred, timeout: float, what: str, poll: float = 0.25):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(poll)
    raise TimeoutError(what)


def main(state_dir: str, out_path: str) -> None:
    t0 = time.time()
    info: dict = {"phases": {}}
    cluster = LocalCluster([("a", 2), ("a", 2), ("b", 2)])
    info["phases"]["cluster_up"] = time.time() - t0
    import ray

    ctl = start_controller(state_dir, policy="sia", interval=3.0, poll=0.25, node_grace=8.0,
                           policy_kwargs={"restart_penalty": 2.0}, lease=LEASE)
    client = ClusterClient(state_dir)
    wait_for(client.capacity, 30, "controller wrote the capacity")
    info["phases"]["controller_up"] = time.time() - t0
    common = {"hooks": {"init_batch_size": 32, "max_batch_size": 128}}
    client.submit(JobSpec("span", EX, args=("--steps", "30", "--ckpt-every", "10"),
                          min_replicas=4, max_replicas=4, accelerator_types=("a",), **common))
    client.submit(JobSpec("flex", EX, args=("--steps", "300", "--ckpt-every", "10",
                                            "--step-sleep", "0.1"),
                          min_replicas=1, max_replicas=2, stop_timeout=60.0, **common))
    client.submit(JobSpec("doomed", "goodput_jax.cluster.examples:always_crash",
                          max_retries=1, retry_backoff=0.5))

    def saved(name: str, node: str | None = None, avoid: str | None = None) -> bool:
        job = client.status().get(name, {})
        launches = job.get("launches") or []
        if not launches or job.get("status") != "running":
            return False
        last = launches[-1]
        if node is not None and node not in last["nodes"]:
            return False
        if avoid is not None and avoid in last["nodes"]:
            return False
        return any(p.get("event") == "save" and p.get("attempt") == last["attempt"]
                   for p in client.progress(name))

    wait_for(lambda: saved("flex"), 150, "flex checkpointed")
    info["phases"]["flex_saved"] = time.time() - t0
    # a reallocation by hand (the path a round takes), while flex runs on n2 and span holds
    # type a: from two devices to one of them, or from one to both of n2's (doomed, which
    # could hold the other, has failed by then). Here, not after the raylet kill: on a
    # loaded machine flex had finished by then (the test skipped in three runs of three).
    wait_for(lambda: client.status()["doomed"]["status"] == "failed", 120, "doomed failed")
    info["manual"] = None

    def flex_ready():  # running and checkpointed in its current attempt (not mid-restart)
        if client.status()["flex"]["status"] in ("finished", "failed"):
            return "done"
        return "ready" if saved("flex") else None

    # The controller's own rounds run meanwhile: one may have asked flex to stop between the
    # status read and the move, and then the move only retargets that restart (no stop
    # request of its own: the test's failure in 1 run of 7 beside a CPU burner). Such a move
    # is tried again once flex runs and has checkpointed in its new attempt.
    info["manual_tries"] = []
    while len(info["manual_tries"]) < 4 and \
            wait_for(flex_ready, 150, "flex running and checkpointed, or done") == "ready":
        job = client.status()["flex"]
        alloc, old = job["allocation"], job["launches"][-1]["attempt"]
        to = alloc[:1] if len(alloc) >= 2 else alloc * 2
        info["manual"] = {"t": time.time(), "from": alloc, "to": to}
        did = ray.get(ctl.reallocate.remote("flex", to))
        info["manual_tries"].append(did)
        if did != "stop requested":
            wait_for(lambda: any(p.get("event") == "step" and p["attempt"] > old
                                 for p in client.progress("flex"))
                     or client.status()["flex"]["status"] in ("finished", "failed"),
                     150, "flex restarted after a round's move")
            info["manual"] = None
            continue
        # relaunched there, restored and training (before the controller is killed below,
        # which would otherwise relaunch an attempt still starting up)
        wait_for(lambda: any(p.get("event") == "step" and p["attempt"] > old
                             for p in client.progress("flex")),
                 150, "flex training again after the move")
        break
    info["phases"]["manual"] = time.time() - t0
    client.submit(JobSpec("late", EX, args=("--steps", "60", "--ckpt-every", "10",
                                            "--step-sleep", "0.1", "--crash-at", "5"),
                          min_replicas=1, max_replicas=1, retry_backoff=0.5, **common))
    # the controller dies; a new one rebuilds from controller.json and relaunches what ran
    wait_for(lambda: client.status().get("late", {}).get("status") == "running", 120,
             "late launched")
    # late's first attempt crashes at step 5 by design: kill the controller only once an
    # attempt has got past it, so every launch running at the kill is one that runs on
    # (a crash right at the kill left no progress of that attempt after it: 1 run in 2)
    wait_for(lambda: any(p.get("event") == "step" and p.get("step", 0) > 5
                         for p in client.progress("late"))
             and client.status().get("late", {}).get("status") == "running", 120,
             "late past its injected crash")
    running = sorted(n for n, j in client.status().items() if j["status"] == "running")
    before = {n: (j["attempt"], len(j["launches"])) for n, j in client.status().items()}
    old_pid = ray.get(ctl.pid.remote())
    t_kill = time.time()
    os.kill(old_pid, signal.SIGKILL)  # Ray restarts the actor (max_restarts)

    def restarted():
        try:
            st = ray.get(ctl.status.remote(), timeout=10)
        except Exception:  # noqa: BLE001 - restarting
            return None
        return st if st["pid"] != old_pid else None

    st = wait_for(restarted, 120, "controller restarted by Ray")
    info["controller_restart"] = {"t": t_kill, "running": running, "status": st,
                                  "before": before, "back_after": time.time() - t_kill}
    info["phases"]["controller_restarted"] = time.time() - t0

    def checkpointed_somewhere():
        """(job, node) of a running job checkpointed in its current launch, on n2 (the
        type-b node) when one is there. Beside a CPU burner the rounds had moved flex to
        n0 and late ran on n1: waiting for n2 alone timed out there)."""
        found = []
        for n in ("flex", "late"):
            job = client.status().get(n, {})
            if job.get("status") == "running" and job.get("allocation") and saved(n):
                found += [(n, label) for label in job["allocation"]]
        return next((f for f in found if f[1] == "n2"), found[0] if found else None)

    victim, node = wait_for(checkpointed_somewhere, 150, "a job checkpointed on a node")
    info["killed"] = {"node": node, "t": time.time(), "victim": victim,
                      "jobs_on_node": sorted(n for n, j in client.status().items()
                                             if node in (j.get("allocation") or []))}
    cut = cut_off_processes(state_dir, client, node, info["killed"]["jobs_on_node"])
    cluster.kill_node(node)
    t_cut = time.time()
    info["phases"]["killed"] = time.time() - t0
    # the cut-off launches fence themselves: each of their processes on the killed node
    # ends within the lease (or died with its raylet)
    try:
        wait_for(lambda: all(process_gone(c["pid"]) for c in cut.values()), LEASE + 90,
                 "the cut-off launches' processes gone", poll=0.1)
    except TimeoutError:
        pass
    for name, c in cut.items():
        c["gone"] = process_gone(c["pid"])
        c["gone_after"] = time.time() - t_cut
        c["t_kill"] = t_cut
    info["cut_off"], info["lease"] = cut, LEASE
    names = ["span", "flex", "late", "doomed"]
    try:
        client.wait(names, timeout=200)
        info["timeout"] = None
    except TimeoutError as e:
        info["timeout"] = str(e)
    info["phases"]["all_done"] = time.time() - t0
    info["address_client"] = address_client(cluster.address)
    info["controller"] = ray.get(ctl.status.remote())
    stop_controller(ctl)
    info["jobs"] = client.status()
    info["wal_bytes"] = {}
    for n, j in info["jobs"].items():
        store = (j.get("spec") or {}).get("store") or ""
        wal = store[len("sqlite:///"):] + "-wal"
        info["wal_bytes"][n] = os.path.getsize(wal) if os.path.exists(wal) else 0
    info["progress"] = {n: client.progress(n) for n in names}
    for name, c in info["cut_off"].items():
        try:
            with open(client.sd.log_path(name, c["attempt"], c["rank"])) as fh:
                c["log_tail"] = fh.read()[-600:]
        except OSError as e:
            c["log_tail"] = f"(no log: {e})"
    info["logs_tail"] = {n: client.logs(n)[-1500:] for n in names}
    cluster.shutdown()
    time.sleep(1.0)
    info["listening_after_teardown"] = listening_sockets()
    info["phases"]["down"] = time.time() - t0
    with open(out_path, "w") as fh:
        json.dump(info, fh, default=str)


def cut_off_processes(state_dir: str, client, node: str, jobs: list) -> dict:
    """``{job: {attempt, rank, pid}}`` of the launch processes on ``node`` (before its
    raylet is killed), from the launch book and the actors' own ``pid()``."""
    import ray

    from goodput_jax.cluster.launch import NAMESPACE, pg_name

    with open(os.path.join(state_dir, "launches.json")) as fh:
        book = json.load(fh)
    out = {}
    for name in jobs:
        job = client.status()[name]
        attempt, nodes = job["attempt"], job["launches"][-1]["nodes"]
        if node not in nodes or pg_name(name, attempt) not in book:
            continue
        rank = nodes.index(node)
        actor = ray.get_actor(book[pg_name(name, attempt)][rank], namespace=NAMESPACE)
        out[name] = {"attempt": attempt, "rank": rank,
                     "pid": ray.get(actor.pid.remote(), timeout=30)}
    return out


def process_gone(pid: int) -> bool:
    """Whether ``pid`` has ended (gone, or a zombie: this driver is the sandbox's PID 1,
    the parent of every orphan)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


ADDRESS_CLIENT = """
import json, sys, time
from goodput_jax.cli import main
from goodput_jax.cluster import ClusterClient

address = sys.argv[1]
out = {}
def cli(*argv):
    return main(["cluster", argv[0], "--address", address, *argv[1:]])
out["bad_type"] = cli("submit", "--name", "bad", "--entry-point",
                      "goodput_jax.cluster.examples:regression", "--accelerator-types", "tpu")
out["submit"] = cli("submit", "--name", "addr", "--entry-point",
                    "goodput_jax.cluster.examples:regression", "--hooks",
                    '{"init_batch_size": 32}', "--", "--steps", "2000", "--step-sleep", "0.05")
client = ClusterClient(address=address)
deadline = time.time() + 120
while client.status("addr")["status"] != "running" and time.time() < deadline:
    time.sleep(0.5)
job = client.status("addr")
out["running"] = job["status"]
out["list"] = cli("status")
here = ",".join(job["allocation"])
out["move_same"] = client.reallocate("addr", job["allocation"])
out["move_bad"] = cli("reallocate", "addr", "--to", "n9")
out["move_unknown_job"] = cli("reallocate", "nope", "--to", here)
while "job addr attempt" not in client.logs("addr") and time.time() < deadline:
    time.sleep(0.5)
out["logs"] = client.logs("addr")[-400:]
out["cancel"] = cli("cancel", "addr")
deadline = time.time() + 60
while client.status("addr")["status"] != "cancelled" and time.time() < deadline:
    time.sleep(0.5)
out["final"] = client.status("addr")["status"]
out["bad_known"] = "bad" in client.status()
print("RESULT " + json.dumps(out), flush=True)
"""


def address_client(address: str) -> dict:
    """A client in another process and directory with only the address (and the CLI)."""
    where = tempfile.mkdtemp(prefix="gj-client-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    proc = subprocess.run([sys.executable, "-c", ADDRESS_CLIENT, address], cwd=where,
                          capture_output=True, text=True, timeout=240, env=env)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    out = json.loads(line[-1][7:]) if line else {}
    out["rc"] = proc.returncode
    out["stderr"] = proc.stderr[-3000:]
    return out


def _dump(state_dir: str) -> None:
    """What the jobs were doing when a wait timed out (to the driver log, for the test)."""
    try:
        client = ClusterClient(state_dir)
        for name, job in client.status().items():
            print(f"--- {name}: {job.get('status')} {job.get('allocation')} "
                  f"events {[e['what'] for e in job.get('events', [])][-6:]}", file=sys.stderr)
            print(client.logs(name)[-800:], file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - best effort, the timeout is the error
        print(f"(no status: {e!r})", file=sys.stderr)


if __name__ == "__main__":
    try:
        main(sys.argv[1], sys.argv[2])
    except TimeoutError:
        _dump(sys.argv[1])
        raise
    sys.stdout.flush()
    os._exit(0)
