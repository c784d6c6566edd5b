"""No factor above 100%: program goodput, MFU and ML Productivity Goodput over repeated runs.

Issue 44 (acceptance): "No program goodput, MFU or ML Productivity Goodput above 100% in 10
runs on a loaded machine; the verdict is stable or marked near the ridge." A measured peak
swings from run to run on a shared CPU; before the peak bounded the steps, a 2-layer MLP read
MFU 117.9% and a large add program goodput 138.7%.

Each run is a fresh process (``--child``) with its OWN empty ``GOODPUT_JAX_CACHE_DIR``, so the
peak is probed again every run (no cached peak smooths the swing; ``--shared-cache`` keeps one
cache for all runs instead, as a machine does). It runs three held-out programs, each through
``runtime.StepRecorder(recorder).wrap`` into its own SQLite store, the job closed as the
quickstart closes it:

* ``mlp``: a 2-layer tanh MLP's training step, backward pass and SGD update included;
* ``add``: a large elementwise add (memory-bound);
* ``scan``: four matmul + tanh layers as one ``lax.scan``.

It then reads back, through the public calculator only, each program's MFU, program goodput
and verdict, the job's ML Productivity Goodput and its factors, and the largest percentage
in the text report (``report.format_report``, what ``goodput-jax report`` prints) on a line
naming goodput or MFU. The parent starts ``--burners`` processes that each spin a core
(``while True: pass``) for the loaded arm (default 2 on a 2-core machine: load > 2 on top of
whatever else runs) and stops them at the end; the load average is printed beside each run.

Usage:
    python benchmarks/factor_bound_bench.py [--runs 10] [--burn 2] [--steps 30] [--shared-cache]
        [--programs mlp,add,scan,mm]

Each run prints, under its figures, what its verdict rests on: the program's intensity, the
ridge it was measured against (the peak, raised where a step beat it), its memory time over
its compute time and the peak's spreads (FLOP/s, bandwidth, the ridge's own); a second table
gives their ranges per program.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

PROGRAMS = ("mlp", "add", "scan")
#: ``--programs`` may add ``mm``: one 1024 x 1024 float32 matmul (170 FLOP/byte, several
#: times the CPU's ridge): what the band costs a program well off the ridge under load
EXTRA = ("mm",)


def _program(kind: str):
    """``(step, args)``: a jitted step and its arguments; the step returns its new state first."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(0)
    if kind == "mlp":
        n = 256
        ws = tuple(jnp.asarray(rng.standard_normal((n, n)) / np.sqrt(n), jnp.float32)
                   for _ in range(2))
        x = jnp.asarray(rng.standard_normal((512, n)), jnp.float32)

        def loss(ws, x):
            h = x
            for w in ws:
                h = jnp.tanh(h @ w)
            return jnp.mean(h)

        @jax.jit
        def train(ws, x):
            value, grads = jax.value_and_grad(loss)(ws, x)
            return tuple(w - 1e-3 * g for w, g in zip(ws, grads, strict=True)), value

        return train, (ws, x)
    if kind == "add":
        a = jnp.asarray(rng.standard_normal(4_000_000), jnp.float32)
        b = jnp.asarray(rng.standard_normal(4_000_000), jnp.float32)

        @jax.jit
        def add(a, b):
            return a + b, b

        return add, (a, b)
    if kind == "mm":
        m = jnp.asarray(rng.standard_normal((1024, 1024)) / 32, jnp.float32)

        @jax.jit
        def mm(a, b):
            return a, a @ b

        return mm, (m, m)
    n = 192
    ws = jnp.asarray(rng.standard_normal((4, n, n)) / np.sqrt(n), jnp.float32)
    x = jnp.asarray(rng.standard_normal((n, n)), jnp.float32)

    @jax.jit
    def scanned(ws, x):
        h, _ = jax.lax.scan(lambda h, w: (jnp.tanh(h @ w), None), x, ws)
        return ws, h

    return scanned, (ws, x)


def _pct_max(text: str) -> float:
    """The largest ``N%`` on the report's lines that name goodput or MFU."""
    best = 0.0
    for line in text.splitlines():
        if re.search(r"goodput|mfu", line, re.IGNORECASE):
            for m in re.finditer(r"(\d+(?:\.\d+)?)\s*%", line):
                best = max(best, float(m.group(1)))
    return best


def child(kind: str, tmp: str, steps: int) -> dict:
    """One program's job, recorded and read back; a JSON-ready row."""
    import jax

    from goodput_jax import goodput, runtime
    from goodput_jax.measure import GoodputCalculator
    from goodput_jax.report import format_report

    store = f"sqlite:///{os.path.join(tmp, kind + '.db')}"  # the drop-in's GOODPUT_JAX_STORE
    rec = goodput.GoodputRecorder(job_name=kind, logger_name=kind, logging_enabled=True)
    runtime.start_job(rec)
    steps_rec = runtime.StepRecorder(rec)
    fn, args = _program(kind)
    recorded = steps_rec.wrap(fn)
    state, other = args
    for i in range(steps):
        state, out = recorded(i, state, other)
        if kind == "scan":
            other = out
    jax.block_until_ready(state)
    steps_rec.close()
    rec.record_job_end_time()
    rec.close()
    calc = GoodputCalculator(job_name=kind, logger_name=kind, store=store)
    prog = calc.get_program_goodput()
    prod = calc.get_productivity_goodput()
    text = format_report(calc)
    p = prog.programs[0]
    pk = p.peak
    return {"program": kind, "mfu": prog.mfu, "program_goodput": prog.program_goodput,
            "verdict": p.verdict, "raised": p.raised_from is not None,
            "intensity": p.arithmetic_intensity, "ridge": pk.ridge_point,
            "mem_over_comp": p.memory_time_s / p.compute_time_s,
            "gflops": pk.flops_per_s / 1e9, "gbps": pk.bytes_per_s / 1e9,
            "spreads": [pk.flops_spread, pk.bytes_spread, pk.ridge_spread],
            "ml_productivity": prod.ml_productivity_goodput,
            "runtime": prod.runtime_goodput, "report_max_pct": _pct_max(text)}


def _child_main(args) -> None:
    rows = []
    for kind in args.programs.split(","):
        os.environ["GOODPUT_JAX_STORE"] = f"sqlite:///{os.path.join(args.tmp, kind + '.db')}"
        rows.append(child(kind, args.tmp, args.steps))
    print("ROWS " + json.dumps(rows))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--burners", "--burn", type=int, default=2,
                   help="processes spinning a core beside the runs (0: quiet)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--shared-cache", action="store_true", help="one peak cache for all runs")
    p.add_argument("--programs", default=",".join(PROGRAMS),
                   help=f"comma-separated, of {', '.join(PROGRAMS + EXTRA)}")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--tmp", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        _child_main(args)
        return

    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
               for _ in range(args.burners)]
    rows: list[dict] = []
    try:
        with tempfile.TemporaryDirectory(prefix="factor-bound-") as top:
            shared = os.path.join(top, "cache")
            for run in range(args.runs):
                tmp = os.path.join(top, f"run{run}")
                os.makedirs(tmp)
                env = dict(os.environ, PYTHONPATH=ROOT,
                           GOODPUT_JAX_CACHE_DIR=shared if args.shared_cache
                           else os.path.join(tmp, "cache"))
                load = os.getloadavg()[0]
                out = subprocess.run([sys.executable, __file__, "--child", "--tmp", tmp,
                                      "--steps", str(args.steps), "--programs", args.programs],
                                     env=env, capture_output=True, text=True, timeout=600)
                line = [ln for ln in out.stdout.splitlines() if ln.startswith("ROWS ")]
                if out.returncode or not line:
                    print(out.stdout[-2000:], out.stderr[-4000:], file=sys.stderr)
                    raise SystemExit(f"run {run} failed (rc {out.returncode})")
                for r in json.loads(line[0][5:]):
                    r.update(run=run, load=load)
                    rows.append(r)
                    print(f"run {run:2d} load {load:5.1f}  {r['program']:<5} MFU "
                          f"{100 * r['mfu']:6.1f}%  program goodput "
                          f"{100 * r['program_goodput']:6.1f}%"
                          f"  ML productivity {100 * r['ml_productivity']:6.1f}%  report max "
                          f"{r['report_max_pct']:6.1f}%  {r['verdict']}"
                          f"{'  (peak raised)' if r['raised'] else ''}", flush=True)
                    fs, bs, rs = r["spreads"]
                    print(f"        {r['intensity']:7.2f} FLOP/B, ridge {r['ridge']:6.1f} "
                          f"({r['gflops']:.0f} GFLOP/s, {r['gbps']:.2f} GB/s), memory/compute "
                          f"{r['mem_over_comp']:6.2f}x, spreads F {fs:.2f} B {bs:.2f} "
                          f"ridge {rs:.2f}", flush=True)
    finally:
        for b in burners:
            b.kill()
            b.wait()

    import jax

    print()
    kinds = args.programs.split(",")
    print(f"# factor bound: {args.runs} runs x {len(kinds)} programs, {args.burners} burners, "
          f"{'shared' if args.shared_cache else 'fresh'} peak cache per run; "
          f"jax {jax.__version__}, {os.cpu_count()} cores")
    print("| program | max MFU | max program goodput | max ML productivity | max % in report "
          "| runs > 100% | verdicts | peak raised |")
    print("|---|---|---|---|---|---|---|---|")
    worst = 0
    for kind in kinds:
        rs = [r for r in rows if r["program"] == kind]
        over = sum(1 for r in rs if max(r["mfu"], r["program_goodput"], r["ml_productivity"],
                                        r["report_max_pct"] / 100) > 1.0 + 1e-9)
        worst += over
        verdicts = ", ".join(f"{v} x{sum(1 for r in rs if r['verdict'] == v)}"
                             for v in sorted({r["verdict"] for r in rs}))
        print(f"| {kind} | {100 * max(r['mfu'] for r in rs):.1f}% "
              f"| {100 * max(r['program_goodput'] for r in rs):.1f}% "
              f"| {100 * max(r['ml_productivity'] for r in rs):.1f}% "
              f"| {max(r['report_max_pct'] for r in rs):.1f}% | {over} | {verdicts} "
              f"| {sum(1 for r in rs if r['raised'])} |")
    print()
    print("| program | intensity (FLOP/B) | ridge | memory/compute | ridge spread |")
    print("|---|---|---|---|---|")
    for kind in kinds:
        rs = [r for r in rows if r["program"] == kind]

        def span(key: str, fmt: str, rs=rs) -> str:
            vals = [r[key] if key != "rs" else r["spreads"][2] for r in rs]
            return f"{min(vals):{fmt}}-{max(vals):{fmt}}"

        print(f"| {kind} | {span('intensity', '.2f')} | {span('ridge', '.1f')} "
              f"| {span('mem_over_comp', '.2f')}x | {span('rs', '.2f')} |")
    loads = [r["load"] for r in rows]
    print(f"load average (1 min) at run starts: {min(loads):.1f}-{max(loads):.1f}")
    print("met" if worst == 0 else f"NOT met: {worst} program-runs above 100%")


if __name__ == "__main__":
    main()
