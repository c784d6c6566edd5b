"""Program goodput and MFU of a matmul chain, against a jax.profiler trace and the device's peak.

Issue 35's accelerator check ("where a GPU is at hand: program goodput and MFU of a bf16
matmul chain against the profiler and the device's published peak"); it runs on any backend
(on a CPU with float32 and the measured peak, small sizes: a dry run of the same code).

The step: ``layers`` chained ``n x n`` matmuls (``h = h @ w_i``, each weight scaled so values
stay bounded) and a sum; analytically ``2 * layers * n**3`` FLOPs plus ``n**2`` adds. The
loop records through ``runtime.StepRecorder`` (``steps.wrap(step)`` as in the quickstart)
into SQLite while ``jax.profiler`` traces the same run (no Python tracer). Two loops:

- synced: each step waits for its loss (``float(loss)``), then 2 ms of host work, so the
  trace shows each step apart; the profiler's execution time of a step is the span of the
  device's busy intervals inside the step's host window (first start to last end).
- queued: the host dispatches ahead and waits every 8 steps (as training with an input
  pipeline that keeps up); the profiler's step time is the device's busy time in the run
  divided by its steps (the device never waits inside a block: a mean, against the
  calculator's median).

The device planes' line names of the traces are printed last (on the H200: the compute
stream and the copy streams).

Printed against the profiler: the calculator's median device-true step time and MFU
(``GoodputCalculator.get_program_goodput``) with the table's peak where the device has one,
the same MFU against one ``n x n x n`` matmul timed on the host here (best of 10, dispatch
and sync included, so a floor under the device's rate; goodput_jax's measured peak beside
it), program goodput, the verdict (and the peak's raise, where a step beat it), and the cost
analysis' FLOPs against the formula; the compiles counted with the cost read on and off
(equal), and the time of one cost read. Device truth is ``tests.runtime._helpers.device_busy``
(the ``/device:*`` planes of the trace on a GPU/TPU; the XLA runtime threads on a CPU).

``--step scan`` makes the layers one ``lax.scan`` (tanh after each product), ``--step mlp``
an MLP's training step with its backward pass (issue 44's held-out shapes: MFU within 5% of
the profiler's; the first cost read of a scanned program).

Usage:
    python benchmarks/program_goodput_bench.py [--size N] [--layers L] [--steps S] [--dtype D]
        [--step chain|scan|mlp]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _make(n: int, layers: int, dtype, kind: str = "chain"):
    """The step and its arguments, and its FLOPs by the formula (matrix products, plus the
    ``n**2`` adds of the sum for ``chain`` and ``scan``).

    * ``chain``: ``layers`` chained matmuls, unrolled;
    * ``scan``: ``layers`` matmul + tanh layers as one ``lax.scan`` over stacked weights (a
      loop XLA's analysis counts once: ``program_cost`` counts each iteration);
    * ``mlp``: a ``layers``-deep tanh MLP's training step, its backward pass included (the
      gradient of each weight and of each hidden input but the first: ``3 layers - 1``
      products), and the SGD update.
    """
    import jax
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(0)
    ws = tuple(jnp.asarray(rng.standard_normal((n, n)) / np.sqrt(n), dtype) for _ in range(layers))
    x = jnp.asarray(rng.standard_normal((n, n)), dtype)
    if kind == "scan":
        stacked = jnp.stack(ws)

        @jax.jit
        def scanned(ws, x):
            h, _ = jax.lax.scan(lambda h, w: (jnp.tanh(h @ w), None), x, ws)
            return h, jnp.sum(h.astype(jnp.float32))

        return scanned, stacked, x, 2 * layers * n ** 3 + n * n
    if kind == "mlp":
        def loss(ws, x):
            h = x
            for w in ws:
                h = jnp.tanh(h @ w)
            return jnp.mean(h.astype(jnp.float32))

        @jax.jit
        def train(ws, x):
            value, grads = jax.value_and_grad(loss)(ws, x)
            return tuple(w - 1e-3 * g for w, g in zip(ws, grads, strict=True)), value

        return train, ws, x, 2 * (3 * layers - 1) * n ** 3

    @jax.jit
    def step(ws, x):
        h = x
        for w in ws:
            h = h @ w
        return h, jnp.sum(h.astype(jnp.float32))

    return step, ws, x, 2 * layers * n ** 3 + n * n


def _ceiling(n: int, dtype) -> float:
    """FLOP/s of one ``n x n x n`` matmul on this device: best of 10 calls, each timed on the
    host from the call to ``block_until_ready`` (dispatch and the sync included: a floor
    under the device's own rate, which the profiler shows)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(1)
    a = jnp.asarray(rng.standard_normal((n, n)), dtype)
    b = jnp.asarray(rng.standard_normal((n, n)), dtype)
    f = jax.jit(lambda a, b: a @ b)
    jax.block_until_ready(f(a, b))
    best = float("inf")
    for _ in range(10):
        t = time.perf_counter()
        jax.block_until_ready(f(a, b))
        best = min(best, time.perf_counter() - t)
    return 2 * n ** 3 / best


_LINES: set = set()  # the device planes' line names seen (printed: what the truth rests on)


def _device_lines(trace: str) -> None:
    """Note the line names of the trace's ``/device:*`` planes (a GPU's streams)."""
    import glob

    from jax.profiler import ProfileData

    (path,) = glob.glob(os.path.join(trace, "**", "*.xplane.pb"), recursive=True)
    _LINES.update(f"{p.name}:{line.name}" for p in ProfileData.from_file(path).planes
                  if p.name.startswith("/device:") for line in p.lines)


def _loop(tmp: str, name: str, step, ws, x, num_steps: int, synced: bool) -> dict:
    import jax

    from goodput_jax import goodput, runtime
    from goodput_jax.measure.calculator import GoodputCalculator
    from goodput_jax.measure.stores.sqlite import SQLiteStore
    from tests.runtime._helpers import device_busy, overlap, step_executions, traced_job

    db = os.path.join(tmp, f"{name}.db")
    rec = goodput.GoodputRecorder(name, "bench", True, store=f"sqlite:///{db}")
    steps = runtime.StepRecorder(rec)
    recorded = steps.wrap(step)
    trace = os.path.join(tmp, f"trace-{name}")
    marks = []
    t_queued = t_end = 0.0
    with traced_job(trace, rec, steps):
        for i in range(num_steps):
            t0 = time.time()
            h, loss = recorded(i, ws, x)
            if synced:
                float(loss)
                marks.append((t0, time.time()))
                time.sleep(0.002)
            elif i % 8 == 7 or i == 0:
                float(loss)
                if i == 0:  # the compile: left out below
                    t_queued = time.time()
        jax.block_until_ready(h)
        t_end = time.time()
    busy = device_busy(trace)
    if synced:
        truth = statistics.median(step_executions(busy, marks[1:]))
    else:
        truth = overlap(busy, t_queued, t_end) / (num_steps - 1)
    _device_lines(trace)
    calc = GoodputCalculator(name, store=SQLiteStore(db, create=False))
    pg = calc.get_program_goodput()
    calc.store.close()
    return {"pg": pg, "truth_s": truth}


def _compiles(tmp: str, arrays: list, costs: bool) -> tuple[int, int]:
    """Compiles counted by the attachment over 3 distinct shapes (``arrays``, made before)
    with the cost read on/off (each arm its own jitted function), and the number of program
    costs recorded."""
    import jax
    import jax.numpy as jnp

    from goodput_jax import goodput, runtime
    from goodput_jax.measure.calculator import GoodputCalculator

    @jax.jit
    def f(w, x):
        return jnp.tanh(x @ w), jnp.sum(x)

    db = os.path.join(tmp, f"c{costs}.db")
    rec = goodput.GoodputRecorder(f"c{costs}", "bench", True, store=f"sqlite:///{db}")
    steps = runtime.StepRecorder(rec, program_costs=costs)
    for i, w in enumerate(arrays):
        jax.block_until_ready(steps(i, f, w, w))
    steps.finish()
    count = runtime.attached(rec).compilations
    steps.close()
    rec.close()
    calc = GoodputCalculator(f"c{costs}", store=f"sqlite:///{db}")
    programs = len(calc.get_program_goodput().programs)
    calc.store.close()
    return count, programs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=None, help="matrix size (8192 on a GPU/TPU, 768 on a CPU)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--steps", type=int, default=None, help="steps per loop (40 on a GPU/TPU, 12 on a CPU)")
    p.add_argument("--dtype", default=None, help="bfloat16 on a GPU/TPU, float32 on a CPU")
    p.add_argument("--step", choices=("chain", "scan", "mlp"), default="chain",
                   help="the step: chained matmuls, a lax.scan of matmul+tanh layers, or an "
                        "MLP's training step with its backward pass")
    args = p.parse_args(argv)
    import jax
    import jax.numpy as jnp

    from goodput_jax.runtime.program import device_peak, measured_peak, program_cost

    cpu = jax.default_backend() == "cpu"
    n = args.size or (768 if cpu else 8192)
    num_steps = args.steps or (12 if cpu else 40)
    dtype = jnp.dtype(args.dtype or ("float32" if cpu else "bfloat16"))
    if n < 32 or args.layers < 1 or num_steps < 4:
        raise SystemExit(f"--size ({n}) >= 32, --layers ({args.layers}) >= 1, --steps ({num_steps}) >= 4")
    step, ws, x, formula = _make(n, args.layers, dtype, args.step)
    jax.block_until_ready(step(ws, x))  # compiled, as when a StepRecorder reads the cost
    t = time.perf_counter()
    cost = program_cost(step, ws, x)
    first_read = time.perf_counter() - t
    reads = []
    for _ in range(5):
        t = time.perf_counter()
        program_cost(step, ws, x)
        reads.append(time.perf_counter() - t)
    table = device_peak(measure=False)
    t = time.perf_counter()
    mpeak = measured_peak()
    probe_s = time.perf_counter() - t
    ceil = _ceiling(n, dtype)
    peak = table or mpeak
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for synced in (True, False):
            r = _loop(tmp, "synced" if synced else "queued", step, ws, x, num_steps, synced)
            rows.append(("synced (float(loss) each step)" if synced else "queued (wait every 8)", r))
        arrays = [jnp.ones((m, m), dtype) for m in (n // 4, n // 2, n)]
        c_off, _ = _compiles(tmp, arrays, False)
        c_on, programs = _compiles(tmp, arrays, True)
    dev = jax.devices()[0]
    print(f"Program goodput bench: jax {jax.__version__}, {dev.device_kind} ({jax.default_backend()}),"
          f" Python {platform.python_version()}, {os.cpu_count()} CPUs; {args.layers} x {n}^2 "
          f"{dtype.name} layers per step ({args.step}), {num_steps} steps per loop")
    print(f"peak used: {peak.flops_per_s / 1e12:.1f} TFLOP/s, {peak.bytes_per_s / 1e9:.0f} GB/s "
          f"({peak.source}); goodput_jax's measured peak: {mpeak.flops_per_s / 1e12:.1f} TFLOP/s, "
          f"{mpeak.bytes_per_s / 1e9:.0f} GB/s (probe {probe_s:.2f} s); one {n}^3 "
          f"{dtype.name} matmul timed on the host (dispatch and sync in): {ceil / 1e12:.1f} TFLOP/s")
    print(f"{'measure':<46}{'value':>14}{'reference':>14}{'ratio':>8}")
    print(f"{'cost analysis FLOPs per step (formula)':<46}{cost.flops:>14.4g}{formula:>14.4g}"
          f"{cost.flops / formula:>8.4f}")
    print(f"{'cost analysis bytes per step':<46}{cost.bytes_accessed:>14.4g}")
    print(f"{'one cost read after the compile: first / median':<46}{1e3 * first_read:>14.3f}"
          f"{1e3 * statistics.median(reads):>14.3f}  ms")
    print(f"{'compiles, 3 shapes, cost read off / on':<46}{c_off:>14d}{c_on:>14d}")
    print(f"{'program costs recorded (3 shapes)':<46}{programs:>14d}")
    for label, r in rows:
        pg, truth = r["pg"], r["truth_s"]
        ps = pg.programs[0]
        # against the peak the calculator used: the one given, raised where a step beat it
        mfu_truth = min(ps.cost.flops / (truth * ps.peak.flops_per_s), 1.0)
        print(f"{label}: calculator vs jax.profiler trace")
        if not ps.step_time_s > 0:
            # a loaded machine: the queued steps' ends were seen together (one observer, late),
            # so most of them last 0 s and so does their median; no MFU to compare
            print(f"{'  step time (ms; calculator median)':<46}{0.0:>14.3f}{1e3 * truth:>14.3f}"
                  "  (the steps' ends were seen together: no ratio)")
            continue
        print(f"{'  step time (ms; calculator median)':<46}{1e3 * ps.step_time_s:>14.3f}"
              f"{1e3 * truth:>14.3f}{ps.step_time_s / truth:>8.4f}")
        print(f"{'  MFU vs ' + ps.peak.source + ' peak (%)':<46}{100 * ps.mfu:>14.2f}"
              f"{100 * mfu_truth:>14.2f}{ps.mfu / mfu_truth:>8.4f}")
        print(f"{'  MFU vs the host-timed matmul (%)':<46}"
              f"{100 * ps.compute_time_s * peak.flops_per_s / ceil / ps.step_time_s:>14.2f}"
              f"{100 * ps.cost.flops / ceil / truth:>14.2f}")
        print(f"{'  program goodput (%), verdict':<46}{100 * ps.program_goodput:>14.2f}"
              f"{ps.verdict:>16}")
        if ps.raised_from is not None:
            print(f"{'  peak raised from (TFLOP/s, GB/s)':<46}"
                  f"{ps.raised_from.flops_per_s / 1e12:>14.4f}{ps.raised_from.bytes_per_s / 1e9:>14.2f}"
                  f"  to {ps.peak.flops_per_s / 1e12:.4f}, {ps.peak.bytes_per_s / 1e9:.2f}")
        print(f"{'  steps attributed':<46}{ps.num_steps:>14d}")
    if _LINES:
        print("trace lines of the device planes:", ", ".join(sorted(_LINES)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
