"""The cluster runtime's costs: one controller round at scale, and one reallocation's restart.

    python benchmarks/cluster_bench.py [--quick] [--rounds-only] [--reallocations 3]

Runs itself inside a loopback-only network + PID namespace
(:func:`goodput_jax.cluster.local.run_sandboxed`) and starts real local Ray
clusters there.

1. **Controller round** (:meth:`goodput_jax.cluster.controller.Controller.plan`:
   read every job's latest hints from its goodput store, build JobInfo/NodeInfo,
   run the policy, diff): 100 jobs on 64 nodes and 1000 jobs on 64 nodes. The
   node table is Ray's own: ``ray.nodes()`` of a real two-node cluster (one node
   per accelerator type, 4 devices each), replicated to 64 entries with fresh
   labels and NodeIDs. The hints are synthetic (random fitted models,
   statistics and profiled replica counts) but real records in a real SQLite
   goodput store (one ``HINTS`` event per job, written by ``GoodputRecorder``).
   Sia on the mixed table, Pollux on a one-type table. Every case starts from
   an empty process state (``jax.clear_caches()``): ``cold`` is a controller's
   first round without precompiling (the policy compiles in it); ``startup`` is
   a new controller's ``precompile()`` for the jobs it holds (what the actor does
   before its first round, into a fresh persistent compilation cache) and ``bg``
   the one for half and twice as many jobs (the actor runs it in the background);
   ``first`` is the first round after startup, ``warm`` the median of the next
   rounds, each with the previous round's allocations as the current ones;
   ``restart`` is a new controller after ``jax.clear_caches()``, its precompile
   loading the programs from the persistent cache, then its first round. The
   targets: 1 s (100 jobs), 5 s (1000 jobs) per round.
2. **Restart per reallocation**: a real job (the example Flax MLP) on a two-node
   cluster, moved by hand between 1 and 2 devices (the controller's
   ``reallocate``, the path a round takes); each move's time from the stop
   request to the end of the first step on the new allocation, in parts:
   notice (to the next step boundary), checkpoint, exit, relaunch (Ray task and
   process start), setup (imports, model), restore, first step (compile).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

EX = "goodput_jax.cluster.examples:regression"


def _synthetic_hints(rng: random.Random) -> dict:
    from goodput_jax.model.hints import Hints
    from goodput_jax.model.types import GradParams, PerfParams

    perf = PerfParams(rng.uniform(0.01, 0.1), rng.uniform(1e-4, 1e-2), rng.uniform(0.0, 0.05),
                      rng.uniform(0.0, 1e-3), rng.uniform(0.0, 0.05), rng.uniform(0.0, 1e-3),
                      rng.uniform(1.0, 2.0))
    m0 = rng.choice([32, 64, 128])
    return Hints(perf_params=perf, grad_params=GradParams(rng.uniform(0.1, 1), rng.uniform(1, 10)),
                 init_batch_size=m0, max_batch_size=m0 * 16, local_bsz_bounds=(8, 256),
                 max_profiled_replicas=rng.choice([0, 1, 2, 4, 8])).to_json()


def _replicate(table: list, n: int, types: tuple) -> list:
    """``n`` node-table entries copied from Ray's, relabelled (label x{i}, fresh NodeID)."""
    by_type = {}
    for node in table:
        for k in node.get("Resources", {}):
            if k.startswith("gj_type_"):
                by_type[k[len("gj_type_"):]] = node
    out = []
    for i in range(n):
        src = copy.deepcopy(by_type[types[i % len(types)]])
        res = {k: v for k, v in src["Resources"].items() if not k.startswith("gj_node_")}
        res[f"gj_node_x{i:03d}"] = 1.0
        src["Resources"] = res
        src["NodeID"] = os.urandom(28).hex()
        out.append(src)
    return out


def _make_state(work: str, n_jobs: int, rng: random.Random) -> str:
    """A state directory holding ``n_jobs`` queued jobs, each with synthetic hints in its store."""
    from goodput_jax.cluster.spec import JobSpec
    from goodput_jax.cluster.state import StateDir
    from goodput_jax.measure.recorder import GoodputRecorder

    sd = StateDir(tempfile.mkdtemp(dir=work))
    store = "sqlite:///" + os.path.join(sd.root, "hints.db")
    jobs = {}
    for i in range(n_jobs):
        name = f"job{i:04d}"
        rec = GoodputRecorder(name, logging_enabled=True, store=store, synchronous=True)
        rec.record_hints(_synthetic_hints(rng))
        rec.close()
        spec = JobSpec(name, EX, min_replicas=1, max_replicas=16, store=store)
        jobs[name] = {"spec": spec.to_json(), "status": "queued", "allocation": [],
                      "next_allocation": None, "attempt": -1, "restarts": 0,
                      "failures": 0, "submitted": 1000.0 + i, "events": [],
                      "launches": [], "error": None}
    sd.write_json(sd.controller_path, {"jobs": jobs})
    return sd.root


def _round(ctl) -> tuple[dict, object]:
    """One controller round (plan + the allocations becoming the current ones)."""
    from goodput_jax.sched.warmup import CompileCounter

    with CompileCounter() as counter:
        plan, sec = ctl.plan()
    for name, alloc in plan.allocations.items():  # the next round's current state
        ctl.jobs[name]["allocation"] = list(alloc)
        ctl.jobs[name]["status"] = "running" if alloc else "queued"
    return {**sec, "compiles": counter.compiles}, plan


def bench_rounds(table: list, work: str, sizes: list, warm_rounds: int) -> list:
    """Per policy and job count, from an empty process state each time (``jax.clear_caches``):

    * ``cold``: a controller's first round with no precompile and no persistent cache;
    * ``startup``: a new controller's :meth:`Controller.precompile` for its jobs (fresh
      persistent cache: it compiles), ``background``: for half and twice as many jobs
      (the actor runs this while rounds go on; here it runs before the first round);
    * ``first``: the first round after startup, ``warm``: the median of the next rounds;
    * ``restart``: a new controller on the same state after ``jax.clear_caches()`` (as a
      restarted process): its precompile (programs load from the persistent cache) and
      its first round.
    """
    import jax

    from goodput_jax.cluster.controller import Controller
    from goodput_jax.cluster.plan import nodes_from_ray
    from goodput_jax.sched.warmup import enable_compilation_cache

    rows = []
    rng = random.Random(0)
    for policy, types in (("sia", ("a", "b")), ("pollux", ("a",))):
        records = nodes_from_ray(_replicate(table, 64, types))
        for n_jobs in sizes:
            root = _make_state(work, n_jobs, rng)

            def controller(records=records, root=root, policy=policy):
                ctl = Controller(root, policy=policy, nodes=lambda: records, clock=lambda: 5000.0)
                ctl.alive = records
                return ctl

            enable_compilation_cache(None)
            jax.clear_caches()
            cold, _ = _round(controller())
            enable_compilation_cache(os.path.join(root, "jax-cache"))
            jax.clear_caches()
            ctl = controller()
            startup = ctl.precompile()
            background = ctl.precompile(job_counts=[max(n_jobs // 2, 1), 2 * n_jobs])
            first, _ = _round(ctl)
            warm = []
            for _ in range(warm_rounds):
                sec, plan = _round(ctl)
                warm.append(sec)
            jax.clear_caches()
            ctl2 = controller()
            restart = ctl2.precompile()
            restart_first, _ = _round(ctl2)
            enable_compilation_cache(None)
            med = {p: statistics.median(t[p] for t in warm) for p in warm[0]}
            placed = sum(1 for a in plan.allocations.values() if a)
            rows.append({"policy": policy, "jobs": n_jobs, "nodes": len(records),
                         "devices": sum(r.devices for r in records), "cold": cold["total"],
                         "cold_compiles": cold["compiles"], "startup": startup["seconds"],
                         "startup_compiles": startup["compiles"],
                         "background": background["seconds"], "first": first["total"],
                         "first_compiles": first["compiles"],
                         **{f"warm_{p}": v for p, v in med.items()},
                         "restart_startup": restart["seconds"],
                         "restart_cache_hits": restart["cache_hits"],
                         "restart_first": restart_first["total"], "placed": placed,
                         "changed_last": len(plan.changed)})
            print(f"  round {policy} {n_jobs} jobs: cold {cold['total']:.2f} s, startup "
                  f"{startup['seconds']:.2f} s (+{background['seconds']:.2f} s background), "
                  f"first {first['total']:.3f} s, warm {med['total']:.3f} s, restart "
                  f"{restart['seconds']:.2f} s + {restart_first['total']:.3f} s", flush=True)
    return rows


def print_rounds(rounds: list) -> None:
    print(f"{'controller round (s)':<30} {'cold':>6} {'startup':>8} {'bg':>6} {'first':>6} "
          f"{'warm':>6} {'restart':>8} {'r.first':>8} {'target':>7} {'first/t':>8} "
          f"{'compiles':>9}")
    for r in rounds:
        target = 1.0 if r["jobs"] <= 100 else 5.0
        label = f"{r['policy']} {r['jobs']} jobs x {r['nodes']} nodes"
        print(f"{label:<30} {r['cold']:>6.2f} {r['startup']:>8.2f} {r['background']:>6.2f} "
              f"{r['first']:>6.3f} {r['warm_total']:>6.3f} {r['restart_startup']:>8.2f} "
              f"{r['restart_first']:>8.3f} {'<' + str(target):>7} "
              f"{r['first'] / target:>8.3f} "
              f"{str(r['cold_compiles']) + '/' + str(r['first_compiles']):>9}")
    print("(cold: first round, no precompile or cache; startup: precompile for the jobs held; "
          "bg: for half and twice as many;\n first: first round after startup; restart: a new "
          "process's precompile from the persistent cache, then its first round;\n compiles: "
          "XLA compilations in the cold / first round)")
    print(f"{'warm round parts (s)':<30} {'hints':>7} {'infos':>7} {'policy':>7} {'placed':>7}")
    for r in rounds:
        label = f"{r['policy']} {r['jobs']} jobs ({r['devices']} dev)"
        print(f"{label:<30} {r['warm_hints']:>7.3f} {r['warm_infos']:>7.3f} "
              f"{r['warm_policy']:>7.3f} {r['placed']:>7d}")


def bench_restart(work: str, moves: int, labels: list) -> list:
    import ray

    from goodput_jax.cluster import ClusterClient, JobSpec, start_controller

    sd = os.path.join(work, "restart")
    ctl = start_controller(sd, policy="pollux", interval=1e6, poll=0.1)
    client = ClusterClient(sd)
    while client.capacity() is None:
        time.sleep(0.1)
    client.submit(JobSpec("bench", EX, args=("--steps", "100000", "--ckpt-every", "100000",
                                             "--step-sleep", "0.02"),
                          min_replicas=1, max_replicas=2, stop_timeout=120))

    def steps_in(attempt: int) -> int:
        return sum(1 for p in client.progress("bench")
                   if p["event"] == "step" and p["attempt"] == attempt)

    x, y = labels
    targets = [[x, x], [y], [y, y], [x]]
    deadline = time.monotonic() + 300
    attempt = 0
    for m in range(moves):
        while steps_in(attempt) < 20 and time.monotonic() < deadline:
            time.sleep(0.2)
        did = ray.get(ctl.reallocate.remote("bench", targets[m % len(targets)]))
        if did != "stop requested":  # a round moved it first: this move's cost is not one
            raise RuntimeError(f"move {m}: the controller {did} (the job was not running)")
        attempt += 1
        while steps_in(attempt) < 1 and time.monotonic() < deadline:
            time.sleep(0.2)
    client.cancel("bench")
    while client.status("bench")["status"] != "cancelled" and time.monotonic() < deadline:
        time.sleep(0.2)
    ray.get(ctl.shutdown.remote())
    job = client.status("bench")
    prog = client.progress("bench")
    requests = [e for e in job["events"] if e["what"] == "stop requested"]
    stopped = [e for e in job["events"] if e["what"] == "stopped"]
    rows = []
    for a in range(1, attempt + 1):
        req, stop_ev = requests[a - 1], stopped[a - 1]
        save = next(p for p in prog if p["attempt"] == a - 1 and p["event"] == "save")
        launch = next(p for p in prog if p["attempt"] == a and p["event"] == "launch")
        restore = next(p for p in prog if p["attempt"] == a and p["event"] == "restore")
        first = next(p for p in prog if p["attempt"] == a and p["event"] == "step")
        setup_end = launch["t"] - restore["seconds"]  # t0 of the new process (before restore)
        entry = setup_end - launch["startup"]
        rows.append({
            "from": save["devices"], "to": launch["devices"],
            "notice": save["t"] - save["seconds"] - req["t"], "checkpoint": save["seconds"],
            "exit": stop_ev["t"] - save["t"], "relaunch": entry - stop_ev["t"],
            "setup": launch["startup"], "restore": restore["seconds"],
            "first_step": first["seconds"], "total": first["t"] - req["t"],
            "lost_steps": save["step"] - restore["step"]})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="100 jobs only, 1 warm round, 2 moves")
    ap.add_argument("--reallocations", type=int, default=3)
    ap.add_argument("--rounds-only", action="store_true", help="skip the reallocation part")
    args = ap.parse_args(argv)
    from goodput_jax.cluster.local import LocalCluster, in_sandbox, run_sandboxed

    if not in_sandbox():
        env = dict(os.environ)
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
        return run_sandboxed([os.path.abspath(__file__), *(argv or sys.argv[1:])],
                             env=env).returncode
    import jax
    import ray

    work = tempfile.mkdtemp(prefix="gjbench")
    sizes = [100] if args.quick else [100, 1000]
    moves = 2 if args.quick else args.reallocations
    with LocalCluster([("a", 4), ("b", 4)]) as c:
        table = ray.nodes()
        print("controller rounds ...", flush=True)
        rounds = bench_rounds(table, work, sizes, 1 if args.quick else 3)
        restarts = []
        if not args.rounds_only:
            c.kill_node("n0")
            c.kill_node("n1")
            labels = [c.add_node("a", 2), c.add_node("a", 2)]
            print("restarts ...", flush=True)
            restarts = bench_restart(work, moves, labels)
    print()
    print(f"cluster_bench: {platform.node()} {os.cpu_count()} CPUs, python "
          f"{platform.python_version()}, jax {jax.__version__}, ray {ray.__version__}")
    print_rounds(rounds)
    print()
    parts = ("notice", "checkpoint", "exit", "relaunch", "setup", "restore", "first_step")
    print(f"{'reallocation (s)':<18}" + "".join(f"{p:>11}" for p in parts)
          + f"{'total':>9}{'lost':>6}")
    for r in restarts:
        print(f"{r['from']} -> {r['to']} devices    " + "".join(f"{r[p]:>11.2f}" for p in parts)
              + f"{r['total']:>9.2f}{r['lost_steps']:>6d}")
    with open(os.path.join(work, "cluster_bench.json"), "w") as fh:
        json.dump({"rounds": rounds, "restarts": restarts}, fh, indent=1)
    print(f"\n(raw numbers: {os.path.join(work, 'cluster_bench.json')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
