"""PolluxPolicy (JAX) vs AdaptDL's PolluxPolicy (pymoo NSGA-II), side by side.

Workloads: J jobs on N nodes with 4 GPUs each, heterogeneous goodput models
(the seed's PerfParams, gradient noise varied per job), 3 scheduling cycles,
each cycle starting from the implementation's own previous allocation.
Both allocations are scored with the same evaluator
(:meth:`PolluxPolicy.evaluate`, p = -1, restart penalties against the
implementation's own previous allocation) and by plain total speedup (the
quantity AdaptDL's search maximises).

AdaptDL runs in an isolated venv (numpy 1.23 / pymoo 0.5; build it with
``bash benchmarks/adaptdl_policy_venv.sh``) through a subprocess; if it is
missing its rows say n/a. 512 x 128 is skipped for AdaptDL unless
``--adaptdl-large`` (its 64 x 16 cycle already takes tens of seconds and its
search grows with jobs x nodes; the row prints that extrapolation).

    python benchmarks/policy_bench.py            # full table
    python benchmarks/policy_bench.py --quick    # 16 x 4 only, one cycle

Heterogeneous clusters (issue 15), ``--hetero``: SiaPolicy round times inside the real
simulator (Sia's traces, our per-type models), the first R rounds of a workload on the
Sia cluster scaled to 64 / 512 / 2048 GPUs (Helios ``saturn/1``, ``scale_8x``,
``scale_32x``); median and p95 of the whole round (goodput tables + JobInfo + solve +
placement) and of the jitted solve alone, plus the number of active jobs. ``--gap`` adds the
optimality gap on 200 random small instances (<= 8 jobs, 2 types) against scipy's milp.

    python benchmarks/policy_bench.py --hetero --gap        # targets: 15 / 80 / 500 ms
    python benchmarks/policy_bench.py --hetero --quick      # 64 GPUs, 30 rounds
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import time
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
PERF = (0.121, 0.00568, 0.0236, 0.00634, 0.0118, 0.00317, 1.14)
GPU = "nvidia.com/gpu"
NOW = datetime(2024, 1, 1, 12, 0, 0)


def workload(num_jobs: int, num_nodes: int, seed: int = 0) -> dict:
    """JSON-able description of jobs and nodes."""
    rng = np.random.default_rng(seed)
    jobs = []
    for i in range(num_jobs):
        scale = float(np.exp(rng.normal(0.0, 1.5)))
        jobs.append({
            "key": f"job-{i}", "sqr": 0.00136, "var": 0.000502 * scale, "init_bsz": 128,
            "max_bsz": int(128 * rng.choice([4, 10, 20])), "bounds": [64, 256],
            "min_replicas": int(rng.choice([0, 0, 0, 1, 2])), "max_replicas": int(rng.choice([4, 8, 16])),
            "created_min": -(num_jobs - i) * 2, "age": 120.0 * (num_jobs - i)})
    nodes = [{"key": f"node-{n}", "gpus": 4} for n in range(num_nodes)]
    return {"jobs": jobs, "nodes": nodes}


# --------------------------------------------------------------------------- #
ADAPTDL_RUNNER = r"""
import json, sys, time, warnings
from datetime import datetime, timedelta
warnings.filterwarnings("ignore")
import logging; logging.disable(logging.CRITICAL)
import numpy, pymoo, adaptdl
from adaptdl.goodput import GoodputFunction, PerfParams, GradParams
from adaptdl_sched.policy.pollux import PolluxPolicy
from adaptdl_sched.policy.speedup import SpeedupFunction
from adaptdl_sched.policy.utils import JobInfo, NodeInfo
spec = json.load(sys.stdin)
now = datetime(2024, 1, 1, 12, 0, 0)
jobs = {}
for j in spec["jobs"]:
    fn = GoodputFunction(PerfParams(*spec["perf"]), GradParams(j["sqr"], j["var"]), j["init_bsz"])
    sp = SpeedupFunction(fn, j["max_bsz"], tuple(j["bounds"]), False)
    jobs[j["key"]] = JobInfo({"nvidia.com/gpu": 1, "pods": 1}, sp,
                             now + timedelta(minutes=j["created_min"]), j["min_replicas"],
                             j["max_replicas"])
nodes = {n["key"]: NodeInfo({"nvidia.com/gpu": n["gpus"], "pods": 32}, preemptible=False)
         for n in spec["nodes"]}
template = NodeInfo({"nvidia.com/gpu": 4, "pods": 32}, preemptible=True)
policy = PolluxPolicy()
prev, out = {}, []
for cycle in range(spec["cycles"]):
    t = time.perf_counter()
    alloc, desired = policy.optimize(jobs, nodes, prev, template)
    out.append(dict(seconds=time.perf_counter() - t, alloc=alloc, desired=int(desired), base=prev))
    prev = alloc
print(json.dumps(dict(cycles=out, versions=dict(numpy=numpy.__version__, pymoo=pymoo.__version__,
                                               python=sys.version.split()[0]))))
"""


def adaptdl_python() -> Path | None:
    for cand in (os.environ.get("ADAPTDL_POLICY_PYTHON"),
                 HERE / ".venv-adaptdl-policy" / "bin" / "python",
                 Path("/tmp/adaptdl-policy-venv/bin/python")):
        if cand and Path(cand).exists():
            return Path(cand)
    return None


def run_adaptdl(spec: dict, cycles: int, timeout: float) -> tuple[dict | None, str]:
    py = adaptdl_python()
    if py is None:
        return None, "n/a: AdaptDL venv missing (bash benchmarks/adaptdl_policy_venv.sh)"
    payload = json.dumps(dict(spec, perf=PERF, cycles=cycles))
    try:
        proc = subprocess.run([str(py), "-c", ADAPTDL_RUNNER], input=payload, text=True,
                              capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None, f"n/a: AdaptDL exceeded {timeout:.0f} s"
    if proc.returncode != 0:
        return None, "n/a: AdaptDL failed: " + proc.stderr.strip().splitlines()[-1][:120]
    return json.loads(proc.stdout.strip().splitlines()[-1]), ""


# --------------------------------------------------------------------------- #
def build_jobs(spec: dict):
    from goodput_jax.model.goodput import GoodputFunction
    from goodput_jax.model.types import GradParams, PerfParams
    from goodput_jax.sched.speedup import SpeedupFunction
    from goodput_jax.sched.types import JobInfo, NodeInfo

    jobs = {}
    for j in spec["jobs"]:
        fn = GoodputFunction(PerfParams(*PERF), GradParams(j["sqr"], j["var"]), j["init_bsz"])
        sp = SpeedupFunction(fn, j["max_bsz"], tuple(j["bounds"]), False)
        jobs[j["key"]] = JobInfo({GPU: 1, "pods": 1}, sp, NOW + timedelta(minutes=j["created_min"]),
                                 j["min_replicas"], j["max_replicas"], age=j["age"])
    nodes = {n["key"]: NodeInfo({GPU: n["gpus"], "pods": 32}, preemptible=False)
             for n in spec["nodes"]}
    template = NodeInfo({GPU: 4, "pods": 32}, preemptible=True)
    return jobs, nodes, template


def score(policy_eval, jobs, nodes, alloc, base) -> tuple[float, float, int, int]:
    objective = policy_eval.evaluate(jobs, nodes, alloc, base)
    total = 0.0
    for key, placement in alloc.items():
        if placement:
            total += float(jobs[key].speedup_fn(len(set(placement)), len(placement)))
    running = sum(1 for p in alloc.values() if p)
    return objective, total, sum(len(p) for p in alloc.values()), running


def run_jax(spec: dict, cycles: int):
    from goodput_jax.sched.pollux import PolluxPolicy

    jobs, nodes, template = build_jobs(spec)
    t = time.perf_counter()
    PolluxPolicy(seed=0).optimize(jobs, nodes, {}, template)  # compile + speedup tables
    cold = time.perf_counter() - t
    policy = PolluxPolicy(seed=0)
    prev, out = {}, []
    for _ in range(cycles):
        t = time.perf_counter()
        alloc, desired = policy.optimize(jobs, nodes, prev, template)
        out.append({"seconds": time.perf_counter() - t, "alloc": alloc, "desired": desired, "base": prev})
        prev = alloc
    return cold, out


def hetero_rounds(cluster_name: str, workload: str, rounds: int) -> dict:
    """Simulate the first ``rounds`` rounds under SiaPolicy; per-round times and job counts."""
    from goodput_jax.sched.sim.apps import CLUSTERS, load_typed_applications
    from goodput_jax.sched.sim.cluster import load_workload, make_jobs, simulate
    from goodput_jax.sched.sim.options import SimOptions
    from goodput_jax.sched.sim.runner import find_sia_workload
    from goodput_jax.sched.sim.sia_adapter import SiaAdapter, SiaModel

    cluster = CLUSTERS[cluster_name]
    apps = load_typed_applications(list(cluster))
    jobs = make_jobs(load_workload(find_sia_workload(workload)), apps, "sia")
    model = SiaModel(cluster)
    adapter = SiaAdapter(model, cluster)
    solves, active = [], []
    inner = adapter.optimize

    def timed(jobs_, nodes_, prev_, now_):
        out = inner(jobs_, nodes_, prev_, now_)
        if jobs_:
            solves.append(adapter.policy.last_stats.solve_seconds)
            active.append(len(jobs_))
        return out

    adapter.optimize = timed
    t = time.perf_counter()
    res = simulate(jobs, adapter, model=model,
                   options=SimOptions(cluster=cluster, max_time=60.0 * rounds))
    rt = np.array(res.round_times) * 1000
    sv = np.array(solves) * 1000
    return {"cluster": cluster_name, "gpus": res.total_gpus, "workload": workload,
            "rounds": len(rt), "median_ms": float(np.median(rt)),
            "p95_ms": float(np.percentile(rt, 95)), "solve_median_ms": float(np.median(sv)),
            "solve_p95_ms": float(np.percentile(sv, 95)), "max_active": int(max(active)),
            "median_active": int(np.median(active)), "wall_s": time.perf_counter() - t}


def gap_table(instances: int = 200) -> str:
    import sys

    sys.path.insert(0, str(HERE.parent))  # the test support lives in tests/
    from tests.sched.sia_check import exact_choice, random_problem, solve_problem

    gaps = []
    for seed in range(instances):
        prob = random_problem(seed)
        opt, _ = exact_choice(prob)
        gaps.append((prob.objective(solve_problem(prob)) - opt) / opt)
    g = np.array(gaps)
    return (f"| {instances} instances (<= 8 jobs, 2 types) | within 2%: {100 * np.mean(g <= 0.02):.1f}% "
            f"| exact: {100 * np.mean(g <= 1e-9):.1f}% | mean gap {100 * g.mean():.3f}% "
            f"| max gap {100 * g.max():.2f}% |")


def main_hetero(args) -> None:
    import jax

    setups = [("sia-64", "saturn/1", 30 if args.quick else 124)]
    if not args.quick:
        setups += [("sia-512", "scale_8x", 124), ("sia-2048", "scale_32x", args.rounds_2048)]
    print(f"# SiaPolicy round time in the simulator; device: {jax.devices()[0].device_kind} "
          f"({jax.default_backend()}), {os.cpu_count()} CPUs; jax {jax.__version__}, "
          f"numpy {np.__version__}, python {platform.python_version()}")
    print("| GPUs | workload | rounds | active jobs (median / max) | round median (ms) "
          "| round p95 (ms) | solve median (ms) | solve p95 (ms) | target median |")
    print("|---|---|---|---|---|---|---|---|---|")
    target = {64: "< 15 ms", 512: "< 80 ms", 2048: "< 500 ms"}
    for cluster, workload, rounds in setups:
        r = hetero_rounds(cluster, workload, rounds)
        print(f"| {r['gpus']} | {workload} | {r['rounds']} | {r['median_active']} / "
              f"{r['max_active']} | {r['median_ms']:.1f} | {r['p95_ms']:.1f} | "
              f"{r['solve_median_ms']:.1f} | {r['solve_p95_ms']:.1f} | "
              f"{target.get(r['gpus'], '')} |", flush=True)
    if args.gap:
        print(gap_table())


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="16 x 4 only, one cycle")
    parser.add_argument("--hetero", action="store_true",
                        help="SiaPolicy round times at 64 / 512 / 2048 GPUs (issue 15)")
    parser.add_argument("--gap", action="store_true",
                        help="--hetero: also the gap to the exact optimum on 200 instances")
    parser.add_argument("--rounds-2048", type=int, default=60,
                        help="--hetero: rounds simulated on scale_32x (2048 GPUs)")
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--adaptdl-large", action="store_true",
                        help="also run AdaptDL on 512 x 128 (very slow)")
    parser.add_argument("--adaptdl-timeout", type=float, default=1800.0)
    args = parser.parse_args(argv)
    if args.hetero:
        main_hetero(args)
        return

    import jax

    from goodput_jax.sched.pollux import PolluxPolicy

    configs = [(16, 4)] if args.quick else [(16, 4), (64, 16), (512, 128)]
    cycles = 1 if args.quick else args.cycles
    evaluator = PolluxPolicy()
    rows, adaptdl_versions, adaptdl_64 = [], None, None
    for num_jobs, num_nodes in configs:
        spec = workload(num_jobs, num_nodes)
        jobs, nodes, _ = build_jobs(spec)
        total_gpus = 4 * num_nodes
        cold, ours = run_jax(spec, cycles)
        if (num_jobs, num_nodes) == (512, 128) and not args.adaptdl_large:
            ref = None
            if adaptdl_64 is not None:  # its search scales with jobs x nodes
                est = adaptdl_64 * (512 * 128) / (64 * 16) / 60.0
                why = f"n/a: skipped, est. ~{est:.0f} min/cycle (--adaptdl-large runs it)"
            else:
                why = "n/a: skipped (--adaptdl-large runs it)"
        else:
            ref, why = run_adaptdl(spec, cycles, args.adaptdl_timeout)
        results = [("goodput_jax", ours, cold)]
        if ref is not None:
            adaptdl_versions = ref["versions"]
            results.append(("adaptdl", ref["cycles"], None))
        warm = {}
        for name, out, cold_s in results:
            per_cycle = statistics.mean(c["seconds"] for c in out)
            warm[name] = per_cycle
            last = out[-1]
            objective, total, gpus, running = score(evaluator, jobs, nodes, last["alloc"],
                                                    last["base"])
            rows.append([f"{num_jobs}x{num_nodes}", name,
                         "-" if cold_s is None else f"{cold_s:.2f}", f"{per_cycle:.3f}", "",
                         f"{objective:.4f}", f"{total:.2f}", f"{running}/{num_jobs}",
                         f"{gpus}/{total_gpus}", str(last["desired"])])
        if "adaptdl" in warm and (num_jobs, num_nodes) == (64, 16):
            adaptdl_64 = warm["adaptdl"]
        if "adaptdl" in warm:
            rows[-2][4] = f"{warm['adaptdl'] / warm['goodput_jax']:.1f}x"
        else:
            rows.append([f"{num_jobs}x{num_nodes}", "adaptdl", "-", why, "", "", "", "", "", ""])
    header = ["jobs x nodes", "policy", "cold s", "warm s/cycle", "speedup",
              "objective p=-1", "sum speedup", "jobs running", "GPUs alloc", "desired nodes"]
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    print(f"# PolluxPolicy benchmark: {cycles} cycles, 4 GPUs/node; objective = power mean "
          f"(p=-1) of fair-share speedups of the last cycle's allocation, scored by goodput_jax")
    print(f"# device: {jax.devices()[0].device_kind} ({jax.default_backend()}), "
          f"{os.cpu_count()} CPUs, {platform.processor() or platform.machine()}; "
          f"jax {jax.__version__}, numpy {np.__version__}, python {platform.python_version()}; "
          f"adaptdl-sched 0.2.11 venv: {adaptdl_versions or 'not run'}")
    print(" | ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("-|-".join("-" * w for w in widths))
    for row in rows:
        print(" | ".join(str(c).ljust(w) for c, w in zip(row, widths)))


if __name__ == "__main__":
    main()
