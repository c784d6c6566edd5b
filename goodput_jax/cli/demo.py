"""``goodput-jax demo``: a small real training job, measured and modelled end to end.

Example:
    $ goodput-jax demo --quick --dir /tmp/goodput-demo
"""

from __future__ import annotations

import argparse
import os

from goodput_jax.cli._common import UserError, require_extra
from goodput_jax.demo import MAX_DEVICES  # imports no JAX (that starts in demo.main)


def device_count(text: str) -> int:
    """argparse type: fake CPU devices, an integer from 1 to :data:`MAX_DEVICES`.

    Example:
        >>> device_count("4")
        4
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 1 <= value <= MAX_DEVICES:
        raise argparse.ArgumentTypeError(f"{text!r} must be an integer from 1 to {MAX_DEVICES}")
    return value


def _nonempty(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is empty")
    return text

HELP = "run a small real Flax training job with goodput recording (needs the 'demo' extra)"

DESCRIPTION = """\
Train a small Flax MLP data parallel over fake CPU devices, with the goodput
recorder, the in-step gradient statistics and a TensorBoard monitor wired in.
Run 1 has a data-loading stall and crashes; run 2 restores the last checkpoint,
profiles a few configurations and finishes. The command then prints both
goodputs (see docs/concepts.md):

  measured goodput  productive step time / total job time (%), with the lost
                    time broken down by cause;
  modelled goodput  samples/s of useful progress = throughput x statistical
                    efficiency, and the batch size that maximises it.

Everything is written inside --dir (store goodput.db, checkpoints/, tensorboard/);
the directory's previous demo files are replaced.

It takes about a minute on two CPU cores, --quick too: most of it is compiling
(about 20 s of CPU time; 43 to 85 s measured on two cores shared with other work)."""


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``demo`` on the top-level parser's subparsers."""
    from goodput_jax.cli._common import HelpFormatter

    p = subparsers.add_parser("demo", help=HELP, description=DESCRIPTION,
                              formatter_class=HelpFormatter)
    p.add_argument("--dir", default="goodput-demo", type=_nonempty,
                   help="output directory: store, checkpoints and TensorBoard logs")
    p.add_argument("--steps", type=int, default=None,
                   help="optimizer steps of the whole job (>= 8; default: 1200, or 120 with "
                        "--quick); the crash and checkpoints scale with it")
    p.add_argument("--job", default="demo", type=_nonempty, help="job name recorded in the store")
    p.add_argument("--devices", type=device_count, default=4,
                   help=f"fake CPU devices for data parallelism, 1 to {MAX_DEVICES}")
    p.add_argument("--quick", action="store_true",
                   help="120 steps with tiny sizes, for tests; it still compiles every "
                        "program, so it is not much shorter than the full demo")
    p.add_argument("--no-progress", action="store_true", help="do not draw the progress bar")
    p.set_defaults(run=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Adapter: the parsed arguments -> :func:`demo`."""
    if os.path.exists(args.dir) and not os.path.isdir(args.dir):
        raise UserError(f"--dir ({args.dir!r}) exists and is not a directory")
    if args.steps is not None and args.steps < 8:
        raise UserError(f"--steps ({args.steps!r}) must be an integer >= 8")
    return demo(directory=args.dir, steps=args.steps, job=args.job, devices=args.devices,
                quick=args.quick, progress=not args.no_progress)


def demo(*, directory: str, steps: int | None, job: str, devices: int, quick: bool,
         progress: bool) -> int:
    """Run the demo job; returns the exit code.

    Args:
        directory: output directory (created; previous demo files in it are replaced).
        steps: optimizer steps of the job, or None for the default.
        job: job name.
        devices: fake CPU devices (only effective if JAX has not started yet).
        quick: 120 steps with tiny sizes (still compiles every program: about as long).
        progress: draw a progress bar on a terminal.

    Example:
        >>> demo(directory="/tmp/d", steps=None, job="demo", devices=2, quick=True,
        ...      progress=False)  # doctest: +SKIP
        0
    """
    require_extra("demo", ("flax", "jax", "optax", "orbax.checkpoint"), "goodput-jax demo")
    import goodput_jax.demo as demo_lib

    return int(demo_lib.main(directory=directory, steps=steps, job=job, devices=devices,
                             quick=quick, progress=progress) or 0)
