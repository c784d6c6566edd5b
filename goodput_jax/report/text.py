"""The goodput / badput table as plain text (``goodput-jax report``'s output).

Reads only :class:`~goodput_jax.measure.calculator.GoodputCalculator`'s results;
labels come from :mod:`goodput_jax.measure.badput`.

Example:
    >>> from goodput_jax.report.text import format_report   # doctest: +SKIP
    >>> print(format_report(calculator))                     # doctest: +SKIP
"""

from __future__ import annotations

import math
from typing import Any

from goodput_jax.measure.badput import BUCKET_LABELS, BUCKET_NAMES, OPTIONAL_BUCKETS, BadputType
from goodput_jax.measure.calculator import GoodputCalculator

__all__ = ["BADPUT_LABELS", "badput_rows", "format_report", "format_seconds", "job_details"]

#: Row order and labels of the badput table (every engine bucket).
BADPUT_LABELS: tuple[tuple[BadputType, str], ...] = tuple(
    (BadputType[name], BUCKET_LABELS[name]) for name in BUCKET_NAMES)

#: what "goodput" means in this table (the model's goodput is another quantity)
GOODPUT_ROW = "GOODPUT (productive step time)"


def job_details(calculator: GoodputCalculator) -> dict[str, Any]:
    """The calculator's seconds per bucket, in :class:`GoodputCalculator`'s own shape.

    The drop-in ``goodput_jax.goodput.GoodputCalculator`` overrides
    ``get_job_goodput_details`` with Google's shape (custom badput as a dict by
    type); the report reads the base contract so it works with either.

    Example:
        >>> job_details(calc)["badput_time"][BadputType.OTHER]   # doctest: +SKIP
        0.0
    """
    return GoodputCalculator.get_job_goodput_details(calculator)


def badput_rows(details: dict[str, Any]) -> list[tuple[str, str, float]]:
    """``(bucket name, label, seconds)`` for every badput row the table shows.

    Buckets in :data:`~goodput_jax.measure.badput.OPTIONAL_BUCKETS` (recompilation,
    elastic) appear only when they hold time, so the rows always sum to the total.

    Args:
        details: ``GoodputCalculator.get_job_goodput_details()``.

    Example:
        >>> d = {"badput_time": {bt: 0.0 for bt in BadputType}}
        >>> [r[0] for r in badput_rows(d)][:2]
        ['ACCELERATOR_INITIALIZATION', 'TRAINING_PREP']
    """
    rows = []
    for bt, label in BADPUT_LABELS:
        s = float(details["badput_time"].get(bt, 0.0))
        if bt.name in OPTIONAL_BUCKETS and s <= 0:
            continue
        rows.append((bt.name, label, s))
    return rows


def format_report(calculator: GoodputCalculator) -> str:
    """The goodput / badput table of a calculator's job as plain text.

    Args:
        calculator: a GoodputCalculator (it is refreshed from its store).

    Returns:
        A multi-line string; seconds and percentages per bucket, summing to the total.

    Example:
        >>> print(format_report(calc))  # doctest: +SKIP
    """
    d = job_details(calculator)
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
        f"{GOODPUT_ROW:<{w}} {d['productive_time']:>12.3f} {pct(d['productive_time']):>8.2f}",
    ]
    for name, label, s in badput_rows(d):
        lines.append(f"{'  ' + label:<{w}} {s:>12.3f} {pct(s):>8.2f}")
        if name == "CUSTOM_BADPUT_EVENTS":
            for cname, cs in sorted(d["custom_badput_time"].items()):
                lines.append(f"{'      ' + cname:<{w}} {cs:>12.3f} {pct(cs):>8.2f}")
    lines.append("-" * (w + 22))
    lines.append(f"{'total job time':<{w}} {total:>12.3f} {100.0 if total > 0 else 0.0:>8.2f}")
    dev = GoodputCalculator.get_step_deviation(calculator)  # the base shape (see job_details)
    if dev.num_steps:
        lines.append("")
        lines.append(
            f"step time: median {format_seconds(dev.median)}, p90 {format_seconds(dev.p90)}, "
            f"ideal {format_seconds(dev.ideal_step_time)} ({dev.ideal_source}), "
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


def format_seconds(x: float) -> str:
    """A duration for people: milliseconds below one second.

    Example:
        >>> format_seconds(0.0123), format_seconds(2.5), format_seconds(float("nan"))
        ('12.30 ms', '2.500 s', 'n/a')
    """
    if not math.isfinite(x):
        return "n/a"
    return f"{x * 1e3:.2f} ms" if x < 1 else f"{x:.3f} s"
