"""What a short switch interval costs Python threads that contend for the GIL.

A ``StepRecorder`` shortens the interpreter's switch interval (``sys.setswitchinterval``,
process-wide) from a badput span's start while a step is in flight
(``span_switch_interval``, 1e-4 s by default), so that its watcher gets the GIL soon after
the device finishes (``docs/semantics.md``). Any other Python threads that run Python at
that time hand the GIL over that often too. This measures what that costs them: ``T``
threads share a fixed amount of pure-Python work (a tokeniser-like loop of dict updates,
holding the GIL), timed with the interval at Python's default (5 ms), at 1e-4 and at
1e-5. The intervals alternate round by round (the order rotated), and each figure is the
median over the rounds of (time at that interval / time at 5 ms in the same round), with
its quartiles: a ratio of neighbours in time, which machine load moves less than it
moves separate medians. One thread is the control (no other thread contends: any ratio
away from 1 there is noise).

Usage:
    python benchmarks/switch_interval_bench.py [--rounds 40] [--threads 1,2,4] [--work 3000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step_recorder_bench import py_work as work  # noqa: E402  (a tokeniser-like loop)

INTERVALS = (5e-3, 1e-4, 1e-5)


def timed_threads(threads: int, rounds_of_work: int) -> float:
    """Seconds for ``threads`` threads to do ``rounds_of_work`` rounds between them."""
    ts = [threading.Thread(target=work, args=(rounds_of_work // threads,))
          for _ in range(threads)]
    t = time.perf_counter()
    for x in ts:
        x.start()
    for x in ts:
        x.join()
    return time.perf_counter() - t


def measure(threads: int, rounds: int, rounds_of_work: int) -> dict[float, list[float]]:
    """Per round, the time at each interval over the time at 5 ms in that round."""
    old = sys.getswitchinterval()
    ratios: dict[float, list[float]] = {si: [] for si in INTERVALS[1:]}
    try:
        for r in range(rounds):
            k = r % len(INTERVALS)
            t = {}
            for si in INTERVALS[k:] + INTERVALS[:k]:
                sys.setswitchinterval(si)
                t[si] = timed_threads(threads, rounds_of_work)
            for si in INTERVALS[1:]:
                ratios[si].append(t[si] / t[INTERVALS[0]])
    finally:
        sys.setswitchinterval(old)
    return ratios


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--threads", default="1,2,4", help="comma-separated thread counts")
    p.add_argument("--work", type=int, default=3000, help="rounds of work shared per run")
    args = p.parse_args(argv)
    counts = [int(x) for x in args.threads.split(",") if x]
    print(f"Switch interval cost to Python threads contending for the GIL: Python "
          f"{sys.version.split()[0]}, {os.cpu_count()} CPUs, {args.rounds} rounds, "
          f"{args.work} rounds of work per run (load average {os.getloadavg()[0]:.2f})")
    print(f"{'threads':>7}{'interval':>10}{'time / time at 5 ms':>22}{'quartiles':>16}")
    for n in counts:
        ratios = measure(n, args.rounds, args.work)
        for si, v in ratios.items():
            q = statistics.quantiles(v, n=4)
            print(f"{n:>7}{si:>10g}{statistics.median(v):>22.3f}{q[0]:>8.3f}..{q[2]:.3f}")
    print(f"(load average {os.getloadavg()[0]:.2f} at the end; 1 thread: the control)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
