"""The ``goodput-jax`` command.

Subcommands (each implemented in the module named beside it):

- ``demo``      real Flax training run with the recorder hooks  (goodput_jax.demo)
- ``report``    goodput / badput table, HTML or PNG report       (goodput_jax.measure.report)
- ``monitor``   upload goodput to TensorBoard                     (goodput_jax.measure.monitor)
- ``simulate``  trace-driven Pollux cluster simulation            (goodput_jax.sched.sim.cli)

Example:
    $ goodput-jax demo
    $ goodput-jax report --job demo --store sqlite:///goodput-demo/goodput.db
"""

from __future__ import annotations

import argparse
import importlib
import sys


def _build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="goodput-jax", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("demo", help="run a small real training job with goodput recording")
    d.add_argument("--dir", default="goodput-demo", help="output directory (store + TensorBoard)")
    d.add_argument("--steps", type=int, default=None, help="training steps per run")
    d.add_argument("--job", default="demo", help="job name")
    d.add_argument("--devices", type=int, default=4, help="fake CPU devices for data parallelism")
    d.add_argument("--quick", action="store_true", help="tiny settings (for tests)")
    d.add_argument("--no-progress", action="store_true", help="disable the progress bar")
    d.set_defaults(_impl="goodput_jax.demo:main")

    r = sub.add_parser("report", help="print (or render) a job's goodput report")
    r.add_argument("--job", default=None, help="job name (default: the only job in the store)")
    r.add_argument("--store", default=None, help="store URL (sqlite:///PATH or gcl://PROJECT/LOGGER)")
    r.add_argument("--html", default=None, help="write an HTML report with plots here")
    r.add_argument("--png", default=None, help="write a PNG report here")
    r.add_argument("--ideal-step-time", type=float, default=None, help="configured ideal step time (s)")
    r.set_defaults(_impl="goodput_jax.measure.report:main")

    m = sub.add_parser("monitor", help="upload a job's goodput to TensorBoard")
    m.add_argument("--job", required=True)
    m.add_argument("--store", default=None)
    m.add_argument("--tensorboard-dir", required=True)
    m.add_argument("--interval", type=float, default=30.0, help="upload interval (s)")
    m.add_argument("--once", action="store_true", help="upload once and exit")
    m.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    m.set_defaults(_impl="goodput_jax.measure.monitor:cli_main")

    s = sub.add_parser("simulate", help="trace-driven Pollux cluster simulation")
    s.add_argument("workload", nargs="?", default=None, help="workload CSV")
    s.add_argument("--policy", default="pollux", choices=["pollux", "optimus", "tiresias"])
    s.add_argument("--interval", type=float, default=60.0)
    s.add_argument("--interference", type=float, default=0.0)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--traces", default=None, help="directory of application traces")
    s.add_argument("--out", default="sim-out", help="output directory (logs, plots)")
    s.add_argument("--all", action="store_true", help="run all 8 workloads with all three policies (ignores --policy) and print the table")
    s.add_argument("--max-jobs", type=int, default=None, help="only the first N jobs")
    s.add_argument("--no-progress", action="store_true")
    s.set_defaults(_impl="goodput_jax.sched.sim.cli:main")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    module, func = args._impl.split(":")
    impl = getattr(importlib.import_module(module), func)
    try:
        return int(impl(args) or 0)
    except (ValueError, FileNotFoundError, LookupError) as e:
        print(f"goodput-jax {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
