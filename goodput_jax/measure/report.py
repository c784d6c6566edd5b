"""Goodput report: ``goodput-jax report --job NAME [--store URL] [--html F] [--png F]``.

Prints the goodput / badput table; ``--html`` additionally writes a
self-contained HTML page and ``--png`` one image with the job timeline, the
badput breakdown and the fitted model's goodput curves (see
:mod:`goodput_jax.measure.report_render`).

Example:
    $ goodput-jax report --job demo --store sqlite:///goodput-demo/goodput.db --html report.html
"""

from __future__ import annotations

import argparse
import math
import os
import sys

from goodput_jax.measure.calculator import BadputType, GoodputCalculator
from goodput_jax.measure.stores import DEFAULT_STORE_URL, ENV_VAR, StoreError, open_store

#: Row order and labels of the badput table.
BADPUT_LABELS: tuple[tuple[BadputType, str], ...] = (
    (BadputType.ACCELERATOR_INITIALIZATION, "accelerator initialization"),
    (BadputType.TRAINING_PREP, "training preparation"),
    (BadputType.PROGRAM_STARTUP, "program startup (compile)"),
    (BadputType.DATA_LOADING, "data loading (sync)"),
    (BadputType.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME, "checkpoint save"),
    (BadputType.UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME, "checkpoint restore"),
    (BadputType.WASTED_PROGRESS_FROM_DISRUPTION, "wasted progress (disruption)"),
    (BadputType.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION, "infrastructure recovery"),
    (BadputType.CUSTOM_BADPUT_EVENTS, "custom badput events"),
    (BadputType.OTHER, "other (unaccounted, hangs)"),
)


def format_report(calculator: GoodputCalculator) -> str:
    """The goodput / badput table of a calculator's job as plain text.

    Args:
        calculator: a GoodputCalculator (it is refreshed from its store).

    Returns:
        A multi-line string; seconds and percentages per bucket, summing to the total.

    Example:
        >>> print(format_report(calc))  # doctest: +SKIP
    """
    d = calculator.get_job_goodput_details()
    total = d["total_time"]
    pct = (lambda s: 100.0 * s / total) if total > 0 else (lambda s: float("nan"))
    w = 36
    lines = [
        f"Goodput report for job {calculator.job_name!r}",
        f"store: {getattr(calculator.store, 'url', calculator.store)}",
        (f"runs: {d['num_runs']}  disruptions: {d['num_disruptions']}  events: {d['num_events']}"
         f"  last productive step: {d['last_productive_step']}"),
        "",
        f"{'bucket':<{w}} {'seconds':>12} {'%':>8}",
        "-" * (w + 22),
        (f"{'GOODPUT (productive step time)':<{w}} {d['productive_time']:>12.3f} "
         f"{pct(d['productive_time']):>8.2f}"),
    ]
    for bt, label in BADPUT_LABELS:
        s = d["badput_time"][bt]
        lines.append(f"{'  ' + label:<{w}} {s:>12.3f} {pct(s):>8.2f}")
        if bt is BadputType.CUSTOM_BADPUT_EVENTS:
            for name, cs in sorted(d["custom_badput_time"].items()):
                lines.append(f"{'      ' + name:<{w}} {cs:>12.3f} {pct(cs):>8.2f}")
    lines.append("-" * (w + 22))
    lines.append(f"{'total job time':<{w}} {total:>12.3f} {100.0 if total > 0 else 0.0:>8.2f}")
    dev = calculator.get_step_deviation()
    if dev.num_steps:
        lines.append("")
        lines.append(
            f"step time: median {_fmt_s(dev.median)}, p90 {_fmt_s(dev.p90)}, "
            f"ideal {_fmt_s(dev.ideal_step_time)} ({dev.ideal_source}), "
            f"{dev.num_steps} productive steps"
        )
    notes = []
    if d["last_checkpointed_step"] is not None:
        notes.append(f"last checkpointed step: {d['last_checkpointed_step']}")
    for key, what in (("ignored_events", "late events of superseded runs ignored"),
                      ("unmatched_events", "unmatched end events ignored"),
                      ("out_of_order_events", "out-of-order timestamps clamped")):
        if d[key]:
            notes.append(f"{d[key]} {what}")
    if notes:
        lines.append("; ".join(notes))
    return "\n".join(lines)


def _fmt_s(x: float) -> str:
    if not math.isfinite(x):
        return "n/a"
    return f"{x * 1e3:.2f} ms" if x < 1 else f"{x:.3f} s"


def _open(url: str | None):
    url = url or os.environ.get(ENV_VAR) or DEFAULT_STORE_URL
    kwargs = {} if url.startswith("gcl://") else {"create": False}
    return open_store(url, **kwargs)


def main(args: argparse.Namespace) -> int:
    """Entry point of ``goodput-jax report``; prints the table, returns the exit code."""
    html_path, png_path = getattr(args, "html", None), getattr(args, "png", None)
    for flag, p in (("--html", html_path), ("--png", png_path)):
        if p is not None:
            parent = os.path.dirname(os.path.abspath(p))
            if not os.path.isdir(parent):
                raise ValueError(f"{flag} ({p!r}): directory {parent!r} does not exist")
    try:
        store = _open(args.store)
    except StoreError as e:
        print(f"goodput-jax report: error: {e}", file=sys.stderr)
        return 2
    try:
        job = args.job
        if job is None:
            jobs = store.list_jobs()
            if len(jobs) != 1:
                raise ValueError(
                    f"--job is required: store {store.url!r} holds "
                    f"{len(jobs)} jobs{': ' + ', '.join(map(repr, jobs[:20])) if jobs else ''}"
                )
            job = jobs[0]
        calc = GoodputCalculator(
            job, None, store=store,
            configured_ideal_step_time=getattr(args, "ideal_step_time", None),
        )
        text = format_report(calc)
        print(text)
        if html_path or png_path:
            from goodput_jax.measure import report_render

            done = report_render.render_reports(calc, html_path, png_path, text_report=text)
            if html_path:
                print(f"wrote HTML report: {html_path}")
            if png_path:
                print(f"wrote PNG report: {png_path}")
            if not done["has_model"]:
                print("note: the job has no model hints (GoodputHooks publishes them), "
                      "so the report shows the measurement plots only")
    except StoreError as e:
        print(f"goodput-jax report: error: {e}", file=sys.stderr)
        return 2
    finally:
        store.close()
    return 0
