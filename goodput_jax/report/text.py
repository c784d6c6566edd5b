"""The goodput / badput table as plain text (``goodput-jax report``'s output).

Reads only :class:`~goodput_jax.measure.calculator.GoodputCalculator`'s results;
labels come from :mod:`goodput_jax.measure.badput`.

Example:
    >>> from goodput_jax.report.text import format_report   # doctest: +SKIP
    >>> print(format_report(calculator))                     # doctest: +SKIP
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping
from typing import Any

from goodput_jax.measure.badput import BUCKET_LABELS, BUCKET_NAMES, OPTIONAL_BUCKETS, BadputType
from goodput_jax.measure.calculator import GoodputCalculator
from goodput_jax.measure.stragglers import Stragglers
from goodput_jax.report.productivity import productivity_lines, productivity_panel

__all__ = ["BADPUT_LABELS", "HOST_TIMED_NOTE", "badput_rows", "format_report", "format_seconds",
           "job_details", "measurement_note", "straggler_lines"]

#: Row order and labels of the badput table (every engine bucket).
BADPUT_LABELS: tuple[tuple[BadputType, str], ...] = tuple(
    (BadputType[name], BUCKET_LABELS[name]) for name in BUCKET_NAMES)

#: what "goodput" means in this table (the model's goodput is another quantity)
GOODPUT_ROW = "GOODPUT (productive step time)"


#: what a job recorded without the runtime capture measures (the plain drop-in)
HOST_TIMED_NOTE = (
    "Step times are host-timed: this job was recorded without goodput_jax.runtime's device "
    "step ends, so a step lasts from its host-side start to the next step's start (work the "
    "device still does after a blocking save or load counts against that span), and every "
    "data load after a run's first is assumed to overlap the device's previous step "
    "(DATA_LOADING_ASYNC: reported, not subtracted), as in Google's library. To measure the "
    "device's own step times and idle time, record the steps with "
    "goodput_jax.runtime.StepRecorder (docs/semantics.md, rules 19 and 25)."
)


def measurement_note(details: dict[str, Any]) -> str | None:
    """What the numbers measure, when some runs were recorded without the runtime capture.

    Args:
        details: ``GoodputCalculator.get_job_goodput_details()``.

    Returns:
        :data:`HOST_TIMED_NOTE` (prefixed with "k of n runs: " when only some runs
        lack device step ends), or None when every run was timed by the device.

    Example:
        >>> measurement_note({"num_runs": 2, "device_timed_runs": 2}) is None
        True
        >>> measurement_note({"num_runs": 1, "device_timed_runs": 0})[:25]
        'Step times are host-timed'
    """
    runs = int(details.get("num_runs", 0))
    dev = int(details.get("device_timed_runs", 0))
    if runs <= 0 or dev >= runs:
        return None
    if dev == 0:
        return HOST_TIMED_NOTE
    return f"{runs - dev} of {runs} runs: {HOST_TIMED_NOTE[0].lower()}{HOST_TIMED_NOTE[1:]}"


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


def badput_rows(details: Mapping[str, Any]) -> list[tuple[str, str, float]]:
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


def format_report(calculator: GoodputCalculator, *, productivity: bool = True,
                  target_step: int | None = None, mtbf_s: float | None = None) -> str:
    """The goodput / badput table of a calculator's job as plain text.

    Args:
        calculator: a GoodputCalculator (it is refreshed from its store).
        productivity: also the ML Productivity Goodput section (the three factors, MFU,
            the roofline position, the checkpoint and finish advice;
            :mod:`goodput_jax.report.productivity`).
        target_step: the step the job trains to, for the finish forecast.
        mtbf_s: mean time between failures (s) for the checkpoint advice (None: observed).

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
    st = GoodputCalculator.get_step_stragglers(calculator)  # the base shape
    if st.num_hosts > 1:
        lines.append("")
        lines.extend(straggler_lines(st))
    note = measurement_note(d)
    if note is not None:
        lines.append("")
        lines.extend(textwrap.wrap("note: " + note, 96))
    if productivity:
        panel = productivity_panel(calculator, target_step=target_step, mtbf_s=mtbf_s)
        lines.append("")
        lines.extend(productivity_lines(panel))
    return "\n".join(lines)


def straggler_lines(st: Stragglers, top: int = 3) -> list[str]:
    """The stragglers section of the text report (a job that several hosts recorded).

    Args:
        st: :meth:`GoodputCalculator.get_step_stragglers`.
        top: how many of the slowest hosts to list.

    Returns:
        Lines: a heading with the definition, then one line per slowest host (host index,
        steps it held back, lost time, share of all straggler time and of the job time).

    Example:
        >>> straggler_lines(calc.get_step_stragglers())[1]        # doctest: +SKIP
        '  host 1: last in 40 of 40 steps, lost 1.204 s (100.0 % of straggler time, ...)'
    """
    n = int(st.steps.size)
    lines = [(f"stragglers ({st.num_hosts} hosts, {n} steps compared; per step, the host that "
             "started or finished it last, against the median of the others):")]
    if not st.hosts:
        lines.append("  no host held a step back")
        return lines
    for h in st.slowest(top):
        job = f", {100 * h.job_share:.1f} % of job time" if math.isfinite(h.job_share) else ""
        lines.append(f"  host {h.host}: last in {h.steps_last} of {n} steps, lost "
                     f"{format_seconds(h.lost_time)} ({100 * h.share:.1f} % of straggler "
                     f"time{job}), worst step {format_seconds(_worst(st, h.host))}")
    if len(st.hosts) > top:
        rest = sum(h.lost_time for h in st.hosts[top:])
        lines.append(f"  {len(st.hosts) - top} more hosts: {format_seconds(rest)}")
    return lines


def _worst(st: Stragglers, host: int) -> float:
    mine = st.lag[st.last_host == host]
    return float(mine.max()) if mine.size else 0.0


def format_seconds(x: float) -> str:
    """A duration for people: milliseconds below one second.

    Example:
        >>> format_seconds(0.0123), format_seconds(2.5), format_seconds(float("nan"))
        ('12.30 ms', '2.500 s', 'n/a')
    """
    if not math.isfinite(x):
        return "n/a"
    return f"{x * 1e3:.2f} ms" if x < 1 else f"{x:.3f} s"
