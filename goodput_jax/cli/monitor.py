"""``goodput-jax monitor``: upload a job's goodput to TensorBoard, once or periodically.

Example:
    $ goodput-jax monitor --job demo --store sqlite:///goodput.db --tensorboard-dir tb --once
"""

from __future__ import annotations

import argparse
import os
import time

from goodput_jax.cli._common import (
    HelpFormatter,
    UserError,
    open_store_for_reading,
    positive_float,
    resolve_job,
    store_url,
)

HELP = "upload a job's goodput, badput and step times to TensorBoard"

DESCRIPTION = """\
Read a job's events from an existing store and write TensorBoard scalars
(goodput/total, badput/<cause>, step_time/*, model/* from the training hooks'
hints; see docs/tensorboard_tags.md) under --tensorboard-dir. The store is only
read: a missing SQLite file is an error, never created.

With --once: upload once and exit. Otherwise upload every --interval seconds
until Ctrl-C or --duration."""


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``monitor`` on the top-level parser's subparsers."""
    p = subparsers.add_parser("monitor", help=HELP, description=DESCRIPTION,
                              formatter_class=HelpFormatter)
    p.add_argument("--job", required=True, help="job name")
    p.add_argument("--store", default=None, type=store_url,
                   help="store URL: sqlite:///PATH or gcl://PROJECT/LOGGER (default: "
                        "$GOODPUT_JAX_STORE, else sqlite:///goodput.db)")
    p.add_argument("--tensorboard-dir", required=True, metavar="DIR",
                   help="directory of the TensorBoard event files (created)")
    p.add_argument("--interval", type=positive_float, default=30.0, metavar="SECONDS",
                   help="seconds between uploads")
    p.add_argument("--once", action="store_true", help="upload once and exit")
    p.add_argument("--duration", type=positive_float, default=None, metavar="SECONDS",
                   help="stop after this many seconds, > 0 (default: run until Ctrl-C; "
                        "for a single upload use --once)")
    p.set_defaults(run=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Adapter: the parsed arguments -> :func:`monitor`."""
    return monitor(job=args.job, store=args.store, tensorboard_dir=args.tensorboard_dir,
                   interval=args.interval, once=args.once, duration=args.duration)


def monitor(*, job: str, store: str | None, tensorboard_dir: str, interval: float = 30.0,
            once: bool = False, duration: float | None = None) -> int:
    """Upload ``job``'s goodput to TensorBoard; returns the exit code.

    Args:
        job: job name (with ``once``, it must be in the store).
        store: store URL, or None for ``$GOODPUT_JAX_STORE`` / ``sqlite:///goodput.db``.
        tensorboard_dir: where the event files go.
        interval: seconds between uploads.
        once: upload once and return.
        duration: stop after this many seconds (None: until Ctrl-C).

    Example:
        >>> monitor(job="demo", store="sqlite:///goodput.db", tensorboard_dir="tb",
        ...         once=True)  # doctest: +SKIP
        0
    """
    if duration is not None and not duration > 0:
        raise UserError(f"--duration ({duration!r}) must be > 0 seconds; for a single upload "
                        "use --once")
    if not interval > 0:
        raise UserError(f"--interval ({interval!r}) must be > 0 seconds")
    if not tensorboard_dir.strip():
        raise UserError(f"--tensorboard-dir ({tensorboard_dir!r}) must be a directory path")
    if os.path.exists(tensorboard_dir) and not os.path.isdir(tensorboard_dir):
        raise UserError(f"--tensorboard-dir ({tensorboard_dir!r}) exists and is not a directory")
    from goodput_jax.measure.monitor import GoodputMonitor

    event_store = open_store_for_reading(store)
    try:
        if once:
            resolve_job(event_store, job)  # an unknown job lists the known ones
        mon = GoodputMonitor(job, f"goodput_{job}", tensorboard_dir, interval,
                             monitoring_enabled=True, store=event_store)
        try:
            if once:
                values = mon.upload_goodput()
                if not values:
                    raise UserError(f"no goodput events for job {job!r} in store "
                                    f"{event_store.url!r}")
                mon.upload_step_deviation()
                print(f"goodput/total = {values['goodput/total']:.2f}% -> {mon.event_file}")
                return 0
            mon.start_goodput_uploader()
            mon.start_step_deviation_uploader()
            print(f"uploading goodput of {job!r} every {interval:g}s to {mon.tensorboard_dir} "
                  f"(Ctrl-C to stop)", flush=True)
            deadline = None if duration is None else time.monotonic() + duration
            try:
                while deadline is None or time.monotonic() < deadline:
                    left = 0.1 if deadline is None else deadline - time.monotonic()
                    time.sleep(min(0.1, max(0.0, left)))
            except KeyboardInterrupt:
                pass
            return 0
        finally:
            mon.close()
    finally:
        event_store.close()
