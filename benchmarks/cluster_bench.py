"""The cluster runtime's costs: one controller round at scale, and one reallocation's restart.

    python benchmarks/cluster_bench.py [--quick] [--rounds-only] [--reallocations 3]
    python benchmarks/cluster_bench.py --restarts-only --compare   # baseline and today
    python benchmarks/cluster_bench.py --checkpoints [--regimes a,b] [--control] [--seed 0]

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
2. **Restarts**: real jobs (the example Flax MLP) on a three-node cluster (2
   devices each): one job alone moved by hand between 1 and 2 devices (the
   controller's ``reallocate``, the path a round takes), three jobs moved to
   the next node at the same moment, and a node loss (its raylet killed). Each
   restart's time from the stop request (the kill) to the end of the first step
   on the new allocation, in parts: notice (to the next step boundary; for a
   node loss, until the controller saw it), checkpoint, exit, relaunch (actor
   and process start), setup (imports, model), restore, first step (compile,
   or a load from the jobs' shared persistent compilation cache).
3. **Checkpoint interval** (``--checkpoints``, :mod:`ckpt_bench` beside this file): the
   example MLP saving when ``ctx.should_checkpoint`` asks (the Young/Daly interval) and
   every 20 steps (the docs' former example), side by side, each on its own 1-device
   node, under node losses injected at a known rate, in two regimes one after the
   other: **a**, where every 20 steps saves too often for the loss rate, and **b**, where
   it saves too rarely (``--control``: a third job saving every N steps, N the advice).
   Per job: losses, steps redone, the work lost (redone steps and restarts, in seconds)
   and the time spent saving, steps kept, the measured goodput and the one
   :func:`~goodput_jax.measure.advice.expected_goodput` predicts at the interval used.
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
        src["NodeID"] = os.urandom(28).hex()
        src["Labels"] = {**(src.get("Labels") or {}), "ray.io/node-id": src["NodeID"],
                         "goodput-jax/node": f"x{i:03d}"}
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
    from goodput_jax.cluster.record import JobStatus
    from goodput_jax.sched.warmup import CompileCounter

    with CompileCounter() as counter:
        plan, sec = ctl.plan()
    for name, alloc in plan.allocations.items():  # the next round's current state
        ctl.jobs[name].allocation = list(alloc)  # (the bench sets the state, no launcher)
        ctl.jobs[name].status = JobStatus.RUNNING if alloc else JobStatus.QUEUED
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


def _parts(job: dict, prog: list, a: int, t_req: float, stop_ev: dict | None) -> dict:
    """The parts of one restart of attempt ``a`` (its request at ``t_req``)."""
    launch = next(p for p in prog if p["attempt"] == a and p["event"] == "launch")
    restore = next(p for p in prog if p["attempt"] == a and p["event"] == "restore")
    first = next(p for p in prog if p["attempt"] == a and p["event"] == "step")
    setup_end = launch["t"] - restore["seconds"]  # t0 of the new process (before restore)
    entry = setup_end - launch["startup"]
    save = next((p for p in prog if p["attempt"] == a - 1 and p["event"] == "save"
                 and p.get("reason") == "stop"), None)
    last = max((p["step"] for p in prog if p["attempt"] < a and p["event"] == "step"),
               default=-1)
    if save is not None and stop_ev is not None:  # a cooperative stop
        notice, ck, ex = (save["t"] - save["seconds"] - t_req, save["seconds"],
                          stop_ev["t"] - save["t"])
        ended = stop_ev["t"]
    else:  # a node loss: the stop is the node table noticing
        notice, ck, ex = (stop_ev["t"] - t_req) if stop_ev else 0.0, 0.0, 0.0
        ended = stop_ev["t"] if stop_ev else t_req
    return {"devices": launch["devices"], "notice": notice, "checkpoint": ck, "exit": ex,
            "relaunch": entry - ended, "setup": launch["startup"],
            "restore": restore["seconds"], "first_step": first["seconds"],
            "total": first["t"] - t_req, "lost_steps": max(0, last + 1 - restore["step"])}


def bench_restart(work: str, moves: int, labels: list, cluster, baseline: bool = False) -> dict:
    """One job moved by hand ``moves`` times; three jobs moved together; a node loss.

    ``baseline``: without the jobs' shared compilation cache, the warm spare processes
    and the raylet probe (each relaunch starts a fresh process, imports and compiles; a
    node loss is seen when Ray's health checks drop the node: the runtime before them).
    """
    import ray

    from goodput_jax.cluster import ClusterClient, JobSpec, start_controller
    from goodput_jax.cluster.controller import CONTROLLER_NAME, stop_controller
    from goodput_jax.cluster.launch import NAMESPACE

    sd = os.path.join(work, "restart")
    for _ in range(100):  # a previous run's controller, killed, is gone
        try:
            ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)
        except ValueError:
            break
        time.sleep(0.1)
    ctl = start_controller(sd, policy="pollux", interval=1e6, poll=0.1,
                           job_cache=not baseline, spares=not baseline,
                           probe_raylets=not baseline)
    client = ClusterClient(sd)
    while client.capacity() is None:
        time.sleep(0.1)
    args = ("--steps", "100000", "--ckpt-every", "100000", "--step-sleep", "0.02")

    def steps_in(name: str, attempt: int) -> int:
        return sum(1 for p in client.progress(name)
                   if p["event"] == "step" and p["attempt"] == attempt)

    def wait_steps(name: str, attempt: int, n: int, deadline: float) -> None:
        while steps_in(name, attempt) < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} attempt {attempt}: {client.status(name)['status']}")
            time.sleep(0.1)

    def warm(labels_: list, deadline: float) -> None:
        """Wait for a warm spare process on each node a move goes to (a policy moves a
        job at most once per round, 60 s by default: by then a used spare is replaced)."""
        if baseline:
            return
        while not all(ray.get(ctl.spares.remote()).get(lb) for lb in set(labels_)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no warm spare on {labels_}")
            time.sleep(0.2)

    def move(name: str, to: list) -> None:
        warm(to, time.monotonic() + 120)
        did = ray.get(ctl.reallocate.remote(name, to))
        if did != "stop requested":  # a round moved it first: this move's cost is not one
            raise RuntimeError(f"{name}: the controller {did} (the job was not running)")

    out: dict = {"one": [], "three": [], "node_loss": []}
    # 1. one job alone, moved between 1 and 2 devices
    x, y, z = labels
    client.submit(JobSpec("one", EX, args=args, min_replicas=1, max_replicas=2, stop_timeout=120))
    targets = [[x, x], [y], [y, y], [x]]
    deadline = time.monotonic() + 600
    for m in range(moves):
        wait_steps("one", m, 20, deadline)
        move("one", targets[m % len(targets)])
        wait_steps("one", m + 1, 1, deadline)
    client.cancel("one")
    while client.status("one")["status"] != "cancelled":
        time.sleep(0.1)
    job, prog = client.status("one"), client.progress("one")
    req = [e for e in job["events"] if e["what"] == "stop requested"]
    stopped = [e for e in job["events"] if e["what"] == "stopped"]
    out["one"] = [_parts(job, prog, a, req[a - 1]["t"], stopped[a - 1])
                  for a in range(1, moves + 1)]
    # 2. three jobs on three nodes, each moved to the next node at the same moment
    names = ["t0", "t1", "t2"]
    for n in names:
        client.submit(JobSpec(n, EX, args=args, min_replicas=1, max_replicas=1,
                              stop_timeout=120))
    deadline = time.monotonic() + 600
    for n, label in zip(names, labels):  # one each on x, y, z (a round placed them)
        while client.status(n)["status"] != "running":
            if time.monotonic() > deadline:
                raise TimeoutError(f"{n}: {client.status(n)['status']}")
            time.sleep(0.1)
        att = client.status(n)["attempt"]
        if ray.get(ctl.reallocate.remote(n, [label])) == "stop requested":
            wait_steps(n, att + 1, 1, deadline)
    for n in names:
        wait_steps(n, client.status(n)["attempt"], 20, deadline)
    here = {n: client.status(n)["allocation"][0] for n in names}
    before = {n: client.status(n)["attempt"] for n in names}
    ring = {x: y, y: z, z: x}
    warm([x, y, z], time.monotonic() + 120)
    for n in names:
        move(n, [ring[here[n]]])
    for n in names:
        wait_steps(n, before[n] + 1, 1, deadline)
    for n in names:
        job, prog = client.status(n), client.progress(n)
        req = [e for e in job["events"] if e["what"] == "stop requested"][-1]
        stop_ev = [e for e in job["events"] if e["what"] == "stopped"][-1]
        out["three"].append({"job": n, **_parts(job, prog, before[n] + 1, req["t"], stop_ev)})
    # 3. a node loss: the node of t0 goes away, t0 restarts from its checkpoint elsewhere
    victim = "t0"
    node = client.status(victim)["allocation"][0]
    for n in names[1:]:
        client.cancel(n)
    while any(client.status(n)["status"] != "cancelled" for n in names[1:]):
        time.sleep(0.1)
    att = client.status(victim)["attempt"]
    wait_steps(victim, att, 30, deadline)
    # as for the moves: the spares the moves just used are replaced (5 s after use) by
    # the time a node is lost in a cluster that runs on; the bench kills seconds later
    warm([lb for lb in labels if lb != node], time.monotonic() + 120)
    # it restarts from the checkpoint of its last stop (the steps since are redone: "lost")
    t_kill = time.time()
    cluster.kill_node(node)
    wait_steps(victim, att + 1, 1, deadline)
    job, prog = client.status(victim), client.progress(victim)
    lost = [e for e in job["events"] if e["what"] == "node lost"][-1]
    out["node_loss"].append({"job": victim, "node": node,
                             **_parts(job, prog, att + 1, t_kill, lost)})
    stop_controller(ctl)
    return out


def _print_restarts(restarts: dict) -> None:
    parts = ("notice", "checkpoint", "exit", "relaunch", "setup", "restore", "first_step")
    print(f"{'restart (s)':<26}" + "".join(f"{p:>11}" for p in parts)
          + f"{'total':>9}{'lost':>6}")
    for kind, label in (("one", "one job"), ("three", "three jobs together"),
                        ("node_loss", "node loss")):
        for r in restarts.get(kind, []):
            name = f"{label}: {r.get('job', '')} -> {r['devices']} dev"
            print(f"{name:<26}" + "".join(f"{r[p]:>11.2f}" for p in parts)
                  + f"{r['total']:>9.2f}{r['lost_steps']:>6d}")
    one = [r["total"] for r in restarts.get("one", [])]
    if one:
        three = max((r["total"] for r in restarts["three"]), default=0)
        loss = restarts["node_loss"][0]["total"] if restarts["node_loss"] else 0
        print(f"one job: median {statistics.median(one):.2f} s over {len(one)} moves; "
              f"three together: max {three:.2f} s; node loss: {loss:.2f} s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="100 jobs only, 1 warm round, 2 moves")
    ap.add_argument("--reallocations", type=int, default=5)
    ap.add_argument("--rounds-only", action="store_true", help="skip the reallocation part")
    ap.add_argument("--restarts-only", action="store_true", help="skip the controller rounds")
    ap.add_argument("--baseline", action="store_true",
                    help="restarts without the shared compilation cache, spare processes "
                         "and raylet probe")
    ap.add_argument("--compare", action="store_true",
                    help="restarts as --baseline, then as today, in this one run (fresh "
                         "nodes for each)")
    ap.add_argument("--checkpoints", action="store_true",
                    help="only the checkpoint-interval run under injected node losses")
    ap.add_argument("--regimes", default="a,b",
                    help="--checkpoints: which regimes (a: every 20 steps too often, b: too "
                         "rarely), comma-separated")
    ap.add_argument("--control", action="store_true",
                    help="--checkpoints: a third job saving every N steps, N the advice")
    ap.add_argument("--seed", type=int, default=0,
                    help="--checkpoints: the seed of the loss times' order")
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
    if args.checkpoints:
        import ckpt_bench

        chosen = [r for r in ckpt_bench.REGIMES if r.name in args.regimes.split(",")]
        if not chosen:
            ap.error(f"--regimes ({args.regimes!r}): name a, b or both")
        results = []
        raw = os.path.join(work, "cluster_bench.json")
        with LocalCluster([("a", 1)]) as c:
            for regime in chosen:
                print(f"checkpoints, regime {regime.name} ({regime.window:.0f} s window) ...",
                      flush=True)
                results.append(ckpt_bench.run_regime(work, c, regime, seed=args.seed,
                                                     control=args.control))
                ckpt_bench.print_regime(results[-1])
                with open(raw, "w") as fh:
                    json.dump({"checkpoints": results}, fh, indent=1)
        print(f"\ncluster_bench: {platform.node()} {os.cpu_count()} CPUs, python "
              f"{platform.python_version()}, jax {jax.__version__}, ray {ray.__version__}")
        for res in results:
            ckpt_bench.print_regime(res)
            print()
        print(f"(raw numbers and the jobs' progress logs: {raw})")
        return 0
    sizes = [100] if args.quick else [100, 1000]
    moves = 2 if args.quick else args.reallocations
    with LocalCluster([("a", 4), ("b", 4)]) as c:
        table = ray.nodes()
        rounds = []
        if not args.restarts_only:
            print("controller rounds ...", flush=True)
            rounds = bench_rounds(table, work, sizes, 1 if args.quick else 3)
        runs: list = []
        if not args.rounds_only:
            c.kill_node("n0")
            c.kill_node("n1")
            modes = [True, False] if args.compare else [args.baseline]
            for i, baseline in enumerate(modes):
                labels = [c.add_node("a", 2), c.add_node("a", 2), c.add_node("a", 2)]
                print("restarts" + (" (baseline)" if baseline else "") + " ...", flush=True)
                runs.append((baseline, bench_restart(os.path.join(work, f"r{i}"), moves,
                                                     labels, c, baseline=baseline)))
                for label in labels:
                    if label in c.nodes:  # the node-loss one is gone already
                        c.kill_node(label)
    print()
    print(f"cluster_bench: {platform.node()} {os.cpu_count()} CPUs, python "
          f"{platform.python_version()}, jax {jax.__version__}, ray {ray.__version__}")
    if rounds:
        print_rounds(rounds)
    print()
    for baseline, restarts in runs:
        print("(baseline: no shared compilation cache, no spare processes, no raylet probe)"
              if baseline else "(shared compilation cache, warm spare processes, raylet probe)")
        _print_restarts(restarts)
        print()
    with open(os.path.join(work, "cluster_bench.json"), "w") as fh:
        json.dump({"rounds": rounds, "restarts": {("baseline" if b else "today"): r
                                                  for b, r in runs}}, fh, indent=1)
    print(f"\n(raw numbers: {os.path.join(work, 'cluster_bench.json')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
