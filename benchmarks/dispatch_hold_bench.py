"""Dispatch time of a jitted step while earlier steps' outputs are still referenced.

Found on an H200 (jax 0.11.2, docs/index.md "On a GPU"): the training thread's dispatch of
a step took ~0.15 ms longer with a StepRecorder, while the recorder's own work per step
(``step_recorder_bench.py``'s pair cost) was ~6 us. This isolates the effect without
goodput_jax: the same loop (the step of ``step_recorder_bench.py`` sized to ~5 ms, a
0.4-step sleep before each call) in six arms that alternate round by round (rotated order,
18 rounds x 50 steps):

- ``plain``: ``s, m = step(s, x)``;
- ``rec``: the step through ``StepRecorder.wrap`` (a GoodputRecorder writing to SQLite);
- ``thread``: plain, and a thread that waits for each step's loss (``block_until_ready``)
  holding the step's outputs until then (what any device-end observer does);
- ``thread_probe``: the same holding only the loss;
- ``hold``: plain, keeping every step's outputs in a list until the round ends;
- ``hold_probe``: the same keeping only the loss.

Printed: median call time (dispatch, host-timed), median training-thread CPU time and the
p90 of the call time, per arm. On the 2-core CPU the arms differ by tens of us in no
consistent order (a 6-round check: -27 to +0 us against ``plain``);
on the H200 every arm that keeps an earlier step's output alive beyond the next call was
115-160 us slower than ``plain``, ``hold_probe`` (no goodput_jax, one scalar per step) too.

Usage: ``python benchmarks/dispatch_hold_bench.py [--rounds R]``
"""

from __future__ import annotations

import argparse
import collections
import os
import queue
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ARMS = ("plain", "rec", "thread", "thread_probe", "hold", "hold_probe")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=18)
    args = p.parse_args(argv)
    import jax
    import jax.numpy as jnp
    import numpy as np

    from benchmarks.step_recorder_bench import _calibrate, _make_step, pick_size
    from goodput_jax import goodput, runtime

    size = pick_size(5.0)
    train_step = _make_step(size)
    w = jnp.eye(size, dtype=jnp.float32) * 0.5
    x = jnp.asarray(np.random.default_rng(0).normal(size=(size, size)).astype("float32"))
    step_s = _calibrate(train_step, w, x, 0.005)
    load = 0.4 * step_s
    perf, cpu = time.perf_counter, time.thread_time
    pending: collections.deque = collections.deque()
    wake: queue.SimpleQueue = queue.SimpleQueue()

    def observer() -> None:  # waits for each step's loss, as a device-end observer does
        while True:
            wake.get()
            while pending:
                o = pending.popleft()
                if o is None:
                    return
                o[1]["loss"].block_until_ready()
                perf()

    th = threading.Thread(target=observer, daemon=True)
    th.start()
    stats: dict = {k: ([], []) for k in ARMS}
    with tempfile.TemporaryDirectory() as tmp:
        rec = goodput.GoodputRecorder("d", "d", True, store=f"sqlite:///{tmp}/d.db")
        steps = runtime.StepRecorder(rec, compile_times=False)
        wrapped = steps.wrap(train_step)
        i = 0

        def arm(kind: str) -> None:
            nonlocal i
            s = w
            held = []
            wall, thread_cpu = stats[kind]
            for _ in range(50):
                time.sleep(load)
                a, ca = perf(), cpu()
                if kind == "rec":
                    s, m = wrapped(i, s, x)
                    i += 1
                else:
                    s, m = train_step(s, x)
                    if kind == "thread":
                        pending.append((s, m))
                        wake.put(None)
                    elif kind == "thread_probe":
                        pending.append((None, m))
                        wake.put(None)
                    elif kind == "hold":
                        held.append((s, m))
                    elif kind == "hold_probe":
                        held.append(m["loss"])
                thread_cpu.append(cpu() - ca)
                wall.append(perf() - a)
            jax.block_until_ready(s)
            if kind == "rec":
                steps.finish()

        for r in range(args.rounds):
            k = r % len(ARMS)
            for kind in ARMS[k:] + ARMS[:k]:
                arm(kind)
        pending.append(None)
        wake.put(None)
        steps.close()
        rec.close()
    print(f"dispatch with earlier outputs held: jax {jax.__version__}, "
          f"{jax.devices()[0].device_kind} ({jax.default_backend()}); matrix {size}, step "
          f"{1e3 * step_s:.3f} ms, sleep {1e3 * load:.3f} ms, {args.rounds} rounds x 50 steps")
    print(f"{'arm':<14}{'call (us, median)':>20}{'thread CPU (us)':>18}{'call p90 (us)':>16}"
          f"{'vs plain':>10}")
    base = statistics.median(stats["plain"][0])
    for kind, (wall, thread_cpu) in stats.items():
        med = statistics.median(wall)
        print(f"{kind:<14}{1e6 * med:>20.2f}{1e6 * statistics.median(thread_cpu):>18.2f}"
              f"{1e6 * float(np.percentile(wall, 90)):>16.2f}{1e6 * (med - base):>+10.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
