"""Benchmark the JAX Pollux goodput model against AdaptDL 0.2.11 and a numpy reference.

Runs the same workloads three ways in one invocation and prints ONE table of
warm times, compile times and speed-up ratios:

* goodput_jax (this package, jitted);
* the independent float64 numpy/scipy reference in ``tests/model/numpy_reference.py``;
* AdaptDL 0.2.11 (``adaptdl.goodput``), in the isolated venv built by
  ``benchmarks/adaptdl_venv.sh`` (``benchmarks/.venv-adaptdl``, or
  ``$ADAPTDL_PYTHON``), through a subprocess. Without it the column reads n/a.

Usage::

    python benchmarks/model_bench.py            # full (AdaptDL's 10k-point fit takes minutes)
    python benchmarks/model_bench.py --quick    # small repeat counts, skips the slowest AdaptDL fit
    python benchmarks/model_bench.py --quick --optimize-only --rounds 7   # the acceptance's two rows

Timings are medians of repeated warm calls; "compile" is the first call minus
a warm call. The machine may be shared: compare the ratios, not absolute
times across runs. The two optimize rows (the acceptance's: 1024 configurations
>= 10x AdaptDL, one >= 5x) are measured side by side: alternating windows of
JAX and of a persistent AdaptDL process (``--rounds``), so both see the same
load; their ratio is the median of the per-round ratios, each printed below
the table with the load average, and with the ratio of CPU time per call (all
threads of each process: a conservative stand-in for the quiet machine's ratio,
as CPU time hardly grows with other processes' load).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

import jax

from goodput_jax.model.goodput import GoodputFunction, GradParams, PerfParams
from goodput_jax.model.perf import fit_perf_params, fit_perf_params_batched
from tests.model import numpy_reference as ref

PERF = PerfParams(0.121, 0.00568, 0.0236, 0.00634, 0.0118, 0.00317, 1.14)
GRAD = GradParams(sqr=0.00136, var=0.000502)
TRUE_FIT = PerfParams(0.1, 0.01, 0.5, 1.0, 1e-6, 1e-6, 1.2)
SCALAR_ARGS = {"max_batch_size": 1280, "atomic_bsz_range": (64, 256), "accumulation": True}
SWEEP_ARGS = {"max_batch_size": 65536, "atomic_bsz_range": (32, 256), "accumulation": True}

# (name, target seconds or None, target speed-up over AdaptDL or None)
ROWS = [
    ("optimize R=1..1024 (1 call)", 1e-3, 10),
    ("optimize scalar", 60e-6, 5),
    ("evaluate 1e6 points", 25e-3, 4),
    ("fit 100 points", 30e-3, 30),
    ("fit 10k points", 300e-3, 400),
    ("batched fit 100 jobs x 50 pts", 200e-3, None),
]


def measure(fn, min_time: float, max_reps: int = 10_000, inner: int = 1):
    """Median per-call seconds of warm calls (after one warm-up call)."""
    fn()
    times = []
    start = time.perf_counter()
    while len(times) < max_reps and (time.perf_counter() - start < min_time or len(times) < 3):
        t = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - t) / inner)
    return float(np.median(times))


def first_call(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def make_data(quick: bool) -> dict:
    rng = np.random.default_rng(0)
    data = {}
    r = np.arange(1, 1025)
    data["sweep_r"] = r
    data["sweep_n"] = np.ceil(r / 4).astype(np.int64)
    m = 10**6
    n = rng.integers(1, 5, m)
    data["eval_n"] = n
    data["eval_r"] = n * rng.integers(1, 9, m)
    data["eval_b"] = rng.integers(16, 257, m)
    data["eval_s"] = rng.integers(0, 4, m)

    def profile(k):
        n = rng.integers(1, 5, k)
        r = n * rng.integers(1, 9, k)
        b = rng.integers(16, 257, k)
        t_acc = ref.accum_time(TRUE_FIT, b) * np.exp(rng.normal(0, 0.01, k))
        t_opt = ref.optim_time(TRUE_FIT, n, r, b) * np.exp(rng.normal(0, 0.01, k))
        return np.stack([n, r, b, t_acc, t_opt])

    data["fit100"] = profile(100)
    data["fit10k"] = profile(10_000)
    data["batched"] = np.stack([profile(50) for _ in range(100)], axis=1)  # [5, J, P]
    return data


ADAPTDL_SCRIPT = r"""
import json, sys, time
import numpy as np
from adaptdl.goodput import GoodputFunction, PerfParams, GradParams, fit_perf_params
d = dict(np.load(sys.argv[1]))
cfg = json.loads(sys.argv[2])
quick = cfg["quick"]
def measure(fn, min_time, max_reps=10000, inner=1):
    fn(); times = []; start = time.perf_counter()
    while len(times) < max_reps and (time.perf_counter() - start < min_time or len(times) < 3):
        t = time.perf_counter()
        for _ in range(inner): fn()
        times.append((time.perf_counter() - t) / inner)
    return float(np.median(times))
fn = GoodputFunction(PerfParams(*cfg["perf"]), GradParams(*cfg["grad"]), 128)
out, res = {}, {}
sa, sw = cfg["scalar"], cfg["sweep"]
res["sweep"] = fn.optimize(d["sweep_n"], d["sweep_r"], sw["max_batch_size"], tuple(sw["atomic_bsz_range"]), sw["accumulation"])
out["optimize R=1..1024 (1 call)"] = measure(lambda: fn.optimize(d["sweep_n"], d["sweep_r"], sw["max_batch_size"], tuple(sw["atomic_bsz_range"]), sw["accumulation"]), 0.3 if quick else 1.0)
res["scalar"] = np.array(fn.optimize(2, 8, sa["max_batch_size"], tuple(sa["atomic_bsz_range"]), sa["accumulation"]))
out["optimize scalar"] = measure(lambda: fn.optimize(2, 8, sa["max_batch_size"], tuple(sa["atomic_bsz_range"]), sa["accumulation"]), 0.3 if quick else 1.0, inner=20)
fe = GoodputFunction(PerfParams(*cfg["perf"]), GradParams(*cfg["grad"]), 16)
if not cfg["optimize_only"]:
    res["eval"] = fe(d["eval_n"], d["eval_r"], d["eval_b"], d["eval_s"])
    out["evaluate 1e6 points"] = measure(lambda: fe(d["eval_n"], d["eval_r"], d["eval_b"], d["eval_s"]), 0.5 if quick else 2.0)
    p = d["fit100"]
    res["fit100"] = np.array(fit_perf_params(*p))
    out["fit 100 points"] = measure(lambda: fit_perf_params(*p), 0.5 if quick else 3.0, max_reps=3 if quick else 10)
if not quick and not cfg["optimize_only"]:
    p = d["fit10k"]
    t = time.perf_counter(); res["fit10k"] = np.array(fit_perf_params(*p)); out["fit 10k points"] = time.perf_counter() - t
np.savez(sys.argv[3], **{k: np.asarray(v[0] if isinstance(v, tuple) else v) for k, v in res.items()},
         **{k + "_bsz": np.asarray(v[1]) for k, v in res.items() if isinstance(v, tuple)})
import numpy, scipy
out["_versions"] = "numpy " + numpy.__version__ + ", scipy " + scipy.__version__ + ", python " + sys.version.split()[0]
print(json.dumps(out))
"""


def adaptdl_python() -> str | None:
    env = os.environ.get("ADAPTDL_PYTHON")
    if env:
        return env
    cand = HERE / ".venv-adaptdl" / "bin" / "python"
    return str(cand) if cand.exists() else None


def run_adaptdl(data: dict, quick: bool, optimize_only: bool = False) -> tuple[dict, dict, str]:
    py = adaptdl_python()
    if py is None:
        return (
            {},
            {},
            "AdaptDL: n/a (run benchmarks/adaptdl_venv.sh to build benchmarks/.venv-adaptdl)",
        )
    with tempfile.TemporaryDirectory() as tmp:
        inp = os.path.join(tmp, "in.npz")
        outp = os.path.join(tmp, "out.npz")
        np.savez(inp, **{k: v for k, v in data.items() if k != "batched"})
        cfg = {
            "quick": quick,
            "optimize_only": optimize_only,
            "perf": list(PERF),
            "grad": list(GRAD),
            "scalar": SCALAR_ARGS,
            "sweep": SWEEP_ARGS,
        }
        proc = subprocess.run(
            [py, "-c", ADAPTDL_SCRIPT, inp, json.dumps(cfg), outp],
            capture_output=True,
            text=True,
            timeout=3600,
            check=False,
        )
        if proc.returncode != 0:
            return (
                {},
                {},
                f"AdaptDL: n/a (subprocess failed: {proc.stderr.strip().splitlines()[-1:]})",
            )
        times = json.loads(proc.stdout.strip().splitlines()[-1])
        results = dict(np.load(outp))
    return times, results, "AdaptDL 0.2.11: " + times.pop("_versions")


ADAPTDL_SERVER = r"""
import json, sys, time
import numpy as np
from adaptdl.goodput import GoodputFunction, PerfParams, GradParams
cfg = json.loads(sys.argv[1])
fn = GoodputFunction(PerfParams(*cfg["perf"]), GradParams(*cfg["grad"]), 128)
r = np.arange(1, 1025); n = np.ceil(r / 4).astype(np.int64)
sa, sw = cfg["scalar"], cfg["sweep"]
calls = {
    "sweep": (lambda: fn.optimize(n, r, sw["max_batch_size"], tuple(sw["atomic_bsz_range"]), sw["accumulation"]), 1),
    "scalar": (lambda: fn.optimize(2, 8, sa["max_batch_size"], tuple(sa["atomic_bsz_range"]), sa["accumulation"]), 20),
}
for f, _ in calls.values():
    f()
print("ready", flush=True)
for line in sys.stdin:
    name, window = line.split()
    f, inner = calls[name]
    times, start, cpu = [], time.perf_counter(), time.process_time()
    while time.perf_counter() - start < float(window) or len(times) < 3:
        t = time.perf_counter()
        for _ in range(inner): f()
        times.append((time.perf_counter() - t) / inner)
    cpu = (time.process_time() - cpu) / (len(times) * inner)
    print(float(np.median(times)), cpu, flush=True)
"""


def measure_cpu(fn, window: float, inner: int = 1) -> tuple[float, float]:
    """(median wall seconds, process CPU seconds) per warm call over ``window``: the CPU
    time counts every thread of the process (XLA's intra-op threads too) and, unlike the
    wall time, hardly grows with other processes' load."""
    fn()
    times, start, cpu = [], time.perf_counter(), time.process_time()
    while time.perf_counter() - start < window or len(times) < 3:
        t = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - t) / inner)
    return float(np.median(times)), (time.process_time() - cpu) / (len(times) * inner)


def side_by_side(calls: dict, rounds: int, window: float) -> dict:
    """Warm time of each call here and in AdaptDL, measured in alternating windows (JAX,
    AdaptDL, JAX, ...) so that both see the same machine load: per call the medians of
    each side and the per-round ratios AdaptDL / JAX. ``calls`` maps "sweep"/"scalar"
    to ``(fn, inner)``. Empty without the AdaptDL venv."""
    py = adaptdl_python()
    if py is None:
        return {}
    cfg = {"perf": list(PERF), "grad": list(GRAD), "scalar": SCALAR_ARGS, "sweep": SWEEP_ARGS}
    proc = subprocess.Popen([py, "-c", ADAPTDL_SERVER, json.dumps(cfg)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        if proc.stdout.readline().strip() != "ready":
            return {}
        out: dict = {name: {k: [] for k in ("jax", "adaptdl", "jax_cpu", "adaptdl_cpu")}
                     for name in calls}
        for _ in range(rounds):
            for name, (fn, inner) in calls.items():
                wall, cpu = measure_cpu(fn, window, inner=inner)
                out[name]["jax"].append(wall)
                out[name]["jax_cpu"].append(cpu)
                proc.stdin.write(f"{name} {window}\n")
                proc.stdin.flush()
                wall, cpu = map(float, proc.stdout.readline().split())
                out[name]["adaptdl"].append(wall)
                out[name]["adaptdl_cpu"].append(cpu)
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    for v in out.values():
        v["ratios"] = [a / j for a, j in zip(v["adaptdl"], v["jax"])]
        v["cpu_ratios"] = [a / j for a, j in zip(v["adaptdl_cpu"], v["jax_cpu"])]
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--quick", action="store_true", help="few repeats; skip AdaptDL's 10k-point fit"
    )
    ap.add_argument("--optimize-only", action="store_true",
                    help="only the two optimize rows (the acceptance's)")
    ap.add_argument("--rounds", type=int, default=None,
                    help="alternating JAX/AdaptDL rounds of the optimize rows (default 5 quick, 9)")
    args = ap.parse_args(argv)
    quick = args.quick
    mt = 0.2 if quick else 1.0
    data = make_data(quick)

    jx, comp, npref, checks = {}, {}, {}, {}
    fn = GoodputFunction(PERF, GRAD, 128)

    # optimize sweep
    sweep = lambda: fn.optimize(data["sweep_n"], data["sweep_r"], **SWEEP_ARGS)
    c = first_call(sweep)
    jx[ROWS[0][0]] = measure(sweep, mt)
    comp[ROWS[0][0]] = c - jx[ROWS[0][0]]
    sa = SWEEP_ARGS
    npref[ROWS[0][0]] = measure(
        lambda: ref.optimize(
            PERF,
            GRAD,
            128,
            data["sweep_n"],
            data["sweep_r"],
            sa["max_batch_size"],
            sa["atomic_bsz_range"],
            True,
        ),
        mt,
    )
    sweep_out = sweep()

    # scalar optimize
    scalar = lambda: fn.optimize(2, 8, **SCALAR_ARGS)
    c = first_call(scalar)
    jx[ROWS[1][0]] = measure(scalar, mt, inner=50)
    comp[ROWS[1][0]] = c - jx[ROWS[1][0]]
    s = SCALAR_ARGS
    npref[ROWS[1][0]] = measure(
        lambda: ref.optimize(
            PERF, GRAD, 128, 2, 8, s["max_batch_size"], s["atomic_bsz_range"], True
        ),
        mt,
        inner=20,
    )
    scalar_out = scalar()

    if not args.optimize_only:
        # evaluate 1e6
        fe = GoodputFunction(PERF, GRAD, 16)
        ev = lambda: fe(data["eval_n"], data["eval_r"], data["eval_b"], data["eval_s"])
        c = first_call(ev)
        jx[ROWS[2][0]] = measure(ev, mt)
        comp[ROWS[2][0]] = c - jx[ROWS[2][0]]
        npref[ROWS[2][0]] = measure(
            lambda: ref.goodput(
                PERF, GRAD, 16, data["eval_n"], data["eval_r"], data["eval_b"], data["eval_s"]
            ),
            mt,
        )
        eval_out = ev()
        eval_ref = ref.goodput(
            PERF, GRAD, 16, data["eval_n"], data["eval_r"], data["eval_b"], data["eval_s"]
        )
        checks[ROWS[2][0]] = f"max rel diff vs numpy {np.max(np.abs(eval_out / eval_ref - 1)):.1e}"

        # fits
        fit_out = {}
        for row, key in ((ROWS[3][0], "fit100"), (ROWS[4][0], "fit10k")):
            p = data[key]
            f = lambda p=p: fit_perf_params(*p)
            c = first_call(f)
            jx[row] = measure(f, mt, max_reps=20)
            comp[row] = c - jx[row]
            npref[row] = measure(lambda p=p: ref.fit(*p), mt, max_reps=3)
            fit_out[key] = f()
            ratio = ref.fit_loss(fit_out[key], *p) / ref.fit_loss(ref.fit(*p), *p)
            checks[row] = f"loss / scipy loss {ratio:.4f}"

        # batched fit
        bt = data["batched"]
        row = ROWS[5][0]
        fb = lambda: fit_perf_params_batched(*bt)
        c = first_call(fb)
        jx[row] = measure(fb, mt, max_reps=20)
        comp[row] = c - jx[row]
        npref[row] = (
            None
            if quick
            else measure(lambda: [ref.fit(*bt[:, j]) for j in range(bt.shape[1])], 0.0, max_reps=1)
        )
        loop = measure(
            lambda: [fit_perf_params(*bt[:, j]) for j in range(bt.shape[1])], 0.0, max_reps=3
        )
        out_b = fb()
        worst = max(
            ref.fit_loss([x[j] for x in out_b], *bt[:, j])
            / ref.fit_loss(fit_perf_params(*bt[:, j]), *bt[:, j])
            for j in range(bt.shape[1])
        )
        checks[row] = f"{loop / jx[row]:.1f}x vs JAX loop of single fits; worst loss ratio {worst:.4f}"

    ad_times, ad_res, ad_note = run_adaptdl(data, quick, args.optimize_only)
    rounds = args.rounds or (5 if quick else 9)
    sbs = side_by_side({"sweep": (sweep, 1), "scalar": (scalar, 50)}, rounds, 0.1 if quick else 0.3)
    ratios: dict = {}
    for name, row in (("sweep", ROWS[0][0]), ("scalar", ROWS[1][0])):
        if name in sbs:
            v = sbs[name]
            jx[row] = float(np.median(v["jax"]))
            ad_times[row] = float(np.median(v["adaptdl"]))
            ratios[row] = float(np.median(v["ratios"]))
    if ad_res:
        g = ad_res["sweep"]
        diff = np.max(np.abs(sweep_out[0] / np.where(g > 0, g, 1) - (g > 0)))
        same = 100 * np.mean(sweep_out[1] == ad_res["sweep_bsz"])
        checks[ROWS[0][0]] = (
            f"vs AdaptDL: max rel goodput diff {diff:.1e}, atomic_bsz equal {same:.1f}%"
        )
        a = ad_res["scalar"]
        g0, b0, s0 = scalar_out
        checks[ROWS[1][0]] = (
            f"vs AdaptDL: ({g0:.2f}, {b0}, {s0}) vs ({a[0]:.2f}, {int(a[1])}, {int(a[2])})"
        )
    else:
        checks.setdefault(ROWS[0][0], "")
        checks.setdefault(ROWS[1][0], "")

    def fmt(t):
        if t is None:
            return "n/a"
        if t < 1e-3:
            return f"{t * 1e6:.1f} us"
        if t < 1:
            return f"{t * 1e3:.2f} ms"
        return f"{t:.2f} s"

    dev = jax.devices()[0]
    print(f"# goodput_jax model benchmark ({'quick' if quick else 'full'})")
    print(
        f"# device: {dev.platform} {getattr(dev, 'device_kind', '')} x{jax.device_count()}; cpu: {platform.processor() or platform.machine()}, {os.cpu_count()} cores"
    )
    print(
        f"# jax {jax.__version__}, numpy {np.__version__}, python {platform.python_version()}; {ad_note}"
    )
    header = [
        "benchmark",
        "target",
        "JAX warm",
        "compile",
        "numpy ref",
        "np/JAX",
        "AdaptDL",
        "AdaptDL/JAX",
        "target x",
        "met",
        "check",
    ]
    rows = []
    for name, target, target_x in ROWS:
        if name not in jx:
            continue
        t = jx[name]
        ad = ad_times.get(name)
        ratio = ratios.get(name, None if ad is None else ad / t)
        met_t = t < target
        met_x = True if target_x is None or ratio is None else ratio >= target_x
        met = ("yes" if met_t and met_x else "NO") + (
            "" if target_x is None or ratio is not None else " (x: n/a)"
        )
        rows.append(
            [
                name,
                "< " + fmt(target),
                fmt(t),
                fmt(max(comp[name], 0.0)),
                fmt(npref[name]),
                "n/a" if npref[name] is None else f"{npref[name] / t:.1f}x",
                fmt(ad),
                "n/a" if ratio is None else f"{ratio:.0f}x",
                "-" if target_x is None else f">= {target_x}x",
                met,
                checks.get(name, ""),
            ]
        )
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |"
    print(line(header))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print(line(r))
    for name, row in (("sweep", ROWS[0][0]), ("scalar", ROWS[1][0])):
        if name in sbs:
            v = sbs[name]
            print(f"# {row}: {len(v['ratios'])} alternating rounds, AdaptDL/JAX per round "
                  + " ".join(f"{x:.1f}x" for x in v["ratios"])
                  + f" (JAX {fmt(min(v['jax']))}-{fmt(max(v['jax']))},"
                  f" AdaptDL {fmt(min(v['adaptdl']))}-{fmt(max(v['adaptdl']))});"
                  f" CPU time per call JAX {fmt(float(np.median(v['jax_cpu'])))} (all threads),"
                  f" AdaptDL {fmt(float(np.median(v['adaptdl_cpu'])))}: CPU ratio per round "
                  + " ".join(f"{x:.1f}x" for x in v["cpu_ratios"]))
    print(f"# load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
