"""Plots of a job's goodput: timeline, badput breakdown and the model's curves.

Used by ``goodput-jax report --html out.html`` / ``--png out.png``. Everything
is drawn with matplotlib's Agg backend (no display needed):

* **timeline** of the job: productive steps, each badput bucket (time spans
  attributed exactly like :class:`GoodputCalculator` does, see
  ``docs/semantics.md``), restarts marked;
* **badput breakdown** bar (seconds and % of the job time);
* **goodput vs batch size** and **goodput vs replicas** curves of the Pollux
  model fitted by the training hooks (from the latest hints stored with the
  job: ``perfParams``, ``gradParams``, ``initBatchSize`` ...), with the
  current and the suggested configuration marked. Without hints the report
  says so and shows the measurement plots only.

Example:
    >>> from goodput_jax.measure.report_render import render_png  # doctest: +SKIP
    >>> render_png(calculator, "report.png")                      # doctest: +SKIP
"""

from __future__ import annotations

import base64
import dataclasses
import html
import io
import math
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from goodput_jax.measure.calculator import GoodputCalculator
from goodput_jax.measure.engine import Engine, StreamKeys
from goodput_jax.measure.events import KIND_CODES, Event, EventKind

__all__ = [
    "CATEGORIES",
    "ModelCurves",
    "Segment",
    "Timeline",
    "build_timeline",
    "model_curves",
    "render_html",
    "render_png",
    "render_reports",
]

#: timeline categories: key -> (label, colour). "productive" and the BadputType names.
CATEGORIES: dict[str, tuple[str, str]] = {
    "PRODUCTIVE": ("productive steps", "#2ca02c"),
    "ACCELERATOR_INITIALIZATION": ("accelerator init", "#9467bd"),
    "TRAINING_PREP": ("training prep", "#8c564b"),
    "PROGRAM_STARTUP": ("program startup (compile)", "#e377c2"),
    "DATA_LOADING": ("data loading", "#ff7f0e"),
    "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME": ("checkpoint save", "#1f77b4"),
    "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME": ("checkpoint restore", "#17becf"),
    "WASTED_PROGRESS_FROM_DISRUPTION": ("wasted progress", "#d62728"),
    "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION": ("infrastructure recovery", "#7f7f7f"),
    "CUSTOM_BADPUT_EVENTS": ("custom badput", "#bcbd22"),
    "OTHER": ("other / unaccounted", "#c7c7c7"),
    "RECOMPILATION": ("recompilation", "#f7b6d2"),
    "ELASTIC_SLICE_DOWN": ("elastic: slice down", "#aec7e8"),
    "ELASTIC_SCALE_UP": ("elastic: scale up", "#ffbb78"),
    "ELASTIC_REINITIALIZATION": ("elastic: re-initialisation", "#98df8a"),
}

@dataclasses.dataclass
class Segment:
    """One attributed slice of job time ``[start, end)`` (UTC seconds)."""

    start: float
    end: float
    category: str
    run: int
    step: int | None = None
    label: str | None = None

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclasses.dataclass
class Timeline:
    """A job's time, cut into attributed segments.

    Attributes:
        segments: in time order (within a run); ``category`` is a key of :data:`CATEGORIES`.
        restarts: ``(time, run index)`` where a new run (process launch) began.
        crashes: ``(time, run index)`` of the last event of runs that ended without a job end.
        t0: the job's first event time (the plots' origin).
        run_ids: run ids in order of appearance.
    """

    segments: list[Segment]
    restarts: list[tuple[float, int]]
    crashes: list[tuple[float, int]]
    t0: float
    run_ids: list[str]

    def totals(self) -> dict[str, float]:
        """Seconds per category (equal to the calculator's buckets)."""
        out = dict.fromkeys(CATEGORIES, 0.0)
        for s in self.segments:
            out[s.category] += s.seconds
        return out


def _events(store: Any, job: str, chunk: int = 100_000) -> list[Event]:
    out: list[Event] = []
    cursor = None
    while True:
        evs, cursor = store.read_events(job, cursor, chunk)
        out.extend(evs)
        if len(evs) < chunk:
            return out


def build_timeline(store: Any, job_name: str, now: float | None = None) -> Timeline:
    """The job's attributed time slices, as the calculator's engine attributes them.

    Reads the store read-only (``store.read_events``) and feeds the one
    attribution engine (:class:`goodput_jax.measure.engine.Engine`, the same
    one the calculator uses) in recording mode; the report draws what it
    returns, so the timeline's totals equal the calculator's buckets.

    Args:
        store: an EventStore.
        job_name: the job.
        now: "now" in UTC seconds for a live job (default ``time.time()``).

    Returns:
        A :class:`Timeline`.

    Raises:
        ValueError: the job has no events.

    Example:
        >>> tl = build_timeline(store, "demo")            # doctest: +SKIP
        >>> round(tl.totals()["PRODUCTIVE"], 3)          # doctest: +SKIP
    """
    events = [e for e in _events(store, job_name)
              if e.kind not in (EventKind.HINTS, EventKind.CHECKPOINT_PROGRESS)]
    if not events:
        raise ValueError(f"job_name ({job_name!r}) has no goodput events in the store")
    now = time.time() if now is None else float(now)
    eng = Engine(record=True)
    keys = StreamKeys()
    eng.feed((KIND_CODES[e.kind], keys.key(e.run_id, e.host), e.timestamp, e.step,
              e.payload if e.payload is not None else e.label) for e in events)
    out = eng.timeline(now)
    segs = [Segment(a, b, cat, run, step, label)
            for a, b, cat, run, step, label in out["segments"] if b > a]
    return Timeline(segs, out["restarts"], out["crashes"], events[0].timestamp,
                    [keys.run_id(key) for key in out["run_ids"]])


# ---------------------------------------------------------------------- model curves
@dataclasses.dataclass
class ModelCurves:
    """Goodput curves of the fitted model (from a job's hints).

    Attributes:
        batch_sizes, goodput_vs_batch, efficiency_vs_batch: the batch-size
            curve at the current replicas (best accumulation for each batch).
        replicas, goodput_vs_replicas: best goodput per replica count.
        current: ``(batch_size, replicas, goodput)`` of the running configuration.
        suggested: ``(batch_size, replicas, goodput)`` of the suggestion, or None.
        hints: the hints they came from.
    """

    batch_sizes: list[float]
    goodput_vs_batch: list[float]
    efficiency_vs_batch: list[float]
    replicas: list[int]
    goodput_vs_replicas: list[float]
    current: tuple[int, int, float]
    suggested: tuple[int, int, float] | None
    hints: dict


def _goodput_function(hints: dict):
    from goodput_jax.model.goodput import GoodputFunction
    from goodput_jax.model.types import GradParams, PerfParams

    perf, grad, m0 = hints.get("perfParams"), hints.get("gradParams"), hints.get("initBatchSize")
    if not perf or not grad or not m0:
        return None
    try:
        p = PerfParams(*(float(perf[f]) for f in PerfParams._fields))
        g = GradParams(float(grad["norm"]), float(grad["var"]))
        return GoodputFunction(p, g, m0)
    except (KeyError, TypeError, ValueError):
        return None


def model_curves(hints: dict | None, points: int = 48) -> ModelCurves | None:
    """The goodput-vs-batch-size and goodput-vs-replicas curves from stored hints.

    Args:
        hints: the job's latest hints (``GoodputCalculator.get_latest_hints()``).
        points: number of batch sizes on the curve.

    Returns:
        :class:`ModelCurves`, or None when the hints lack a fitted model
        (``perfParams``, ``gradParams``, ``initBatchSize``).

    Example:
        >>> model_curves(None) is None
        True
    """
    if not hints:
        return None
    fn = _goodput_function(hints)
    if fn is None:
        return None
    import numpy as np

    m0 = int(hints["initBatchSize"])
    n = int(hints.get("numNodes") or 1)
    r = int(hints.get("numReplicas") or 1)
    atomic = int(hints.get("atomicBsz") or max(1, m0 // r))
    accum = int(hints.get("accumSteps") or 0)
    max_bs = int(hints.get("maxBatchSize") or m0)
    lo, hi = (list(hints.get("localBszBounds") or [None, None]) + [None, None])[:2]
    accumulation = bool(hints.get("gradientAccumulation"))
    hi_b = float(hi) if hi else math.inf
    top = max(max_bs, r * atomic * (accum + 1), 2 * m0)
    bs = np.unique(np.round(np.geomspace(max(m0, r * (lo or 1)), top, points)).astype(int))
    gvb, evb, keep = [], [], []
    for b in bs:
        local = b / r
        steps = max(0, math.ceil(local / hi_b) - 1) if accumulation and math.isfinite(hi_b) else 0
        a = max(1, math.ceil(local / (steps + 1)))
        if not accumulation and a > hi_b:
            continue
        if r * a * (steps + 1) < m0:
            continue
        keep.append(float(r * a * (steps + 1)))
        gvb.append(float(fn.evaluate(n, r, a, steps)))
        evb.append(float(fn.efficiency(r * a * (steps + 1))))
    cur = (r * atomic * (accum + 1), r, float(fn.evaluate(n, r, atomic, accum)))
    sug = None
    if hints.get("suggestedBatchSize"):
        sa = int(hints.get("suggestedAtomicBsz") or 0) or max(1, int(hints["suggestedBatchSize"]) // r)
        ss = int(hints.get("suggestedAccumSteps") or 0)
        sug = (r * sa * (ss + 1), r, float(fn.evaluate(n, r, sa, ss)))
    max_r = max(8, 2 * r, int(hints.get("maxProfiledReplicas") or 1) * 2)
    reps = list(range(1, max_r + 1))
    gvr = []
    for rr in reps:
        g, _b, _s = fn.optimize(min(n, rr), rr, max_batch_size=max(max_bs, rr * (lo or 1)),
                                atomic_bsz_range=(lo, hi), accumulation=accumulation)
        gvr.append(float(g))
    return ModelCurves(keep, gvb, evb, reps, gvr, cur, sug, dict(hints))


# ---------------------------------------------------------------------- figures
def _plt():
    import matplotlib

    if matplotlib.get_backend().lower() != "agg":
        matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _merge(segs: Sequence[Segment], min_width: float) -> list[tuple[float, float, str]]:
    """Merge touching same-category segments; drop slivers below ``min_width`` into neighbours."""
    out: list[list] = []
    for s in sorted(segs, key=lambda s: s.start):
        if out and out[-1][2] == s.category and s.start - out[-1][1] <= min_width:
            out[-1][1] = max(out[-1][1], s.end)
        else:
            out.append([s.start, s.end, s.category])
    return [(a, b, c) for a, b, c in out]


def draw_timeline(ax: Any, tl: Timeline) -> None:
    """Draw the job's timeline on ``ax``: one lane per run, colours per category."""
    span = max((s.end for s in tl.segments), default=tl.t0 + 1) - tl.t0
    min_w = span / 4000.0
    used = set()
    nrun = max(1, len(tl.run_ids))
    lane_h = 0.8
    # one collection per (run, category): thousands of steps draw in one call;
    # badput draws on top of the productive spans, so thin spans stay visible
    for run in range(nrun):
        merged = _merge([s for s in tl.segments if s.run == run], min_w)
        y = nrun - 1 - run
        by_cat: dict[str, list[tuple[float, float]]] = {}
        for a, b, c in merged:
            by_cat.setdefault(c, []).append((a - tl.t0, b - a))
        for c in sorted(by_cat, key=lambda c: c != "PRODUCTIVE"):
            ax.broken_barh(by_cat[c], (y - lane_h / 2, lane_h), facecolors=CATEGORIES[c][1],
                           edgecolor="none")
            used.add(c)
    for t, run in tl.restarts:
        ax.axvline(t - tl.t0, color="black", linestyle="--", linewidth=1)
        ax.annotate(f"restart (run {run + 1})", (t - tl.t0, nrun - 0.5), xytext=(3, -2),
                    textcoords="offset points", fontsize=8, va="top")
    for t, run in tl.crashes:
        ax.plot([t - tl.t0], [nrun - 1 - run], marker="x", color="black", markersize=9)
    ax.set_yticks(range(nrun))
    ax.set_yticklabels([f"run {nrun - i}\n{tl.run_ids[nrun - 1 - i][-8:]}" for i in range(nrun)],
                       fontsize=8)
    ax.set_ylim(-0.6, nrun - 0.4 + 0.3)
    ax.set_xlim(0, span * 1.01)
    ax.set_xlabel("seconds since job start")
    ax.set_title("Job timeline (x = crash, dashed = restart)")
    import matplotlib.patches as mpatches

    handles = [mpatches.Patch(color=CATEGORIES[c][1], label=CATEGORIES[c][0])
               for c in CATEGORIES if c in used]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0), ncol=1,
              fontsize=8, frameon=False)


def draw_breakdown(ax: Any, details: dict) -> None:
    """Horizontal bars: goodput and each badput bucket, seconds with % labels."""
    from goodput_jax.measure.report import BADPUT_LABELS

    total = details["total_time"]
    rows = [("GOODPUT (productive)", details["productive_time"], CATEGORIES["PRODUCTIVE"][1])]
    for bt, label in BADPUT_LABELS:
        color = CATEGORIES.get(bt.name, ("", "#c7c7c7"))[1]
        rows.append((label, details["badput_time"][bt], color))
    labels = [r[0] for r in rows][::-1]
    vals = [r[1] for r in rows][::-1]
    cols = [r[2] for r in rows][::-1]
    bars = ax.barh(labels, vals, color=cols)
    vmax = max(vals) if vals and max(vals) > 0 else 1.0
    for b, v in zip(bars, vals):
        pct = 100.0 * v / total if total > 0 else 0.0
        ax.text(b.get_width() + vmax * 0.01, b.get_y() + b.get_height() / 2,
                f"{v:.2f} s ({pct:.1f}%)", va="center", fontsize=8)
    ax.set_xlim(0, vmax * 1.3)
    ax.set_xlabel("seconds")
    ax.tick_params(axis="y", labelsize=8)
    g = 100.0 * details["productive_time"] / total if total > 0 else float("nan")
    ax.set_title(f"Goodput {g:.1f}% and badput breakdown (total {total:.1f} s)")


def draw_batch_curve(ax: Any, mc: ModelCurves) -> None:
    """Goodput (and efficiency) vs total batch size, current and suggested marked."""
    ax.plot(mc.batch_sizes, mc.goodput_vs_batch, color="#1f77b4", label="goodput (model)")
    ax.set_xscale("log", base=2)
    b, r, g = mc.current
    ax.plot([b], [g], "o", color="black", markersize=8, label=f"current: batch {b}")
    if mc.suggested is not None:
        sb, _, sg = mc.suggested
        ax.plot([sb], [sg], "*", color="#d62728", markersize=15,
                label=f"suggested: batch {sb} ({sg / g:.2f}x)" if g > 0 else f"suggested: {sb}")
    ax.set_xlabel("total batch size (log2)")
    ax.set_ylabel("goodput (M0-equivalent samples/s)")
    ax.set_title(f"Goodput vs batch size ({r} replicas)")
    ax2 = ax.twinx()
    ax2.plot(mc.batch_sizes, mc.efficiency_vs_batch, color="#ff7f0e", linestyle=":",
             label="statistical efficiency")
    ax2.set_ylim(0, 1.05)
    ax2.set_ylabel("efficiency", color="#ff7f0e")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="best")


def draw_replica_curve(ax: Any, mc: ModelCurves) -> None:
    """Best goodput per replica count, current and suggested marked."""
    ax.plot(mc.replicas, mc.goodput_vs_replicas, "-o", color="#1f77b4", markersize=3,
            label="best goodput (model)")
    b, r, g = mc.current
    ax.plot([r], [g], "o", color="black", markersize=8, label=f"current: {r} replicas, batch {b}")
    if mc.suggested is not None:
        sb, sr, sg = mc.suggested
        ax.plot([sr], [sg], "*", color="#d62728", markersize=15,
                label=f"suggested: batch {sb} on {sr} replicas")
    if mc.replicas and mc.goodput_vs_replicas and mc.goodput_vs_replicas[0] > 0:
        g1 = mc.goodput_vs_replicas[0]
        ax.plot(mc.replicas, [g1 * x for x in mc.replicas], ":", color="gray",
                label="linear scaling from 1 replica")
        ax.set_ylim(0, max(mc.goodput_vs_replicas) * 1.25)
    ax.set_xlabel("replicas (devices)")
    ax.set_ylabel("goodput (M0-equivalent samples/s)")
    ax.set_title("Goodput vs replicas (best batch size each)")
    ax.legend(fontsize=7, loc="lower right")


def _no_model(ax: Any, why: str) -> None:
    ax.axis("off")
    ax.text(0.5, 0.5, why, ha="center", va="center", fontsize=10, wrap=True,
            transform=ax.transAxes)


@dataclasses.dataclass
class _Data:
    calc: GoodputCalculator
    details: dict
    timeline: Timeline
    curves: ModelCurves | None
    hints: dict | None
    no_model_reason: str


def _collect(calc: GoodputCalculator, now: float | None) -> _Data:
    details = calc.get_job_goodput_details()
    tl = build_timeline(calc.store, calc.job_name, now=now)
    hints = calc.get_latest_hints()
    curves = model_curves(hints)
    reason = ""
    if curves is None:
        reason = ("No model hints for this job: the goodput-vs-batch-size and goodput-vs-replicas "
                  "curves need the fitted model that GoodputHooks publishes "
                  "(perfParams, gradParams, initBatchSize).")
    return _Data(calc, details, tl, curves, hints, reason)


def _save(fig: Any, path_or_buf: Any, dpi: int) -> None:
    fig.savefig(path_or_buf, format="png", dpi=dpi, bbox_inches="tight")


def _figure(data: _Data, which: str):
    plt = _plt()
    if which == "timeline":
        fig, ax = plt.subplots(figsize=(11, 1.6 + 0.5 * max(1, len(data.timeline.run_ids))))
        draw_timeline(ax, data.timeline)
    elif which == "breakdown":
        fig, ax = plt.subplots(figsize=(11, 4))
        draw_breakdown(ax, data.details)
    else:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.2))
        if data.curves is None:
            _no_model(a1, data.no_model_reason)
            _no_model(a2, "")
        else:
            draw_batch_curve(a1, data.curves)
            draw_replica_curve(a2, data.curves)
    fig.tight_layout()
    return fig


def render_png(calculator: GoodputCalculator, path: str | os.PathLike, *, dpi: int = 100,
               now: float | None = None, _data: _Data | None = None) -> str:
    """Write one PNG with the timeline, the breakdown and the model curves.

    Args:
        calculator: the job's calculator (its store is read).
        path: output file.
        dpi: resolution.
        now: "now" for a live job (default ``time.time()``).

    Returns:
        The path written.

    Example:
        >>> render_png(calc, "report.png")   # doctest: +SKIP
        'report.png'
    """
    data = _data if _data is not None else _collect(calculator, now)
    plt = _plt()
    nrun = max(1, len(data.timeline.run_ids))
    last = 1.6 if data.curves is not None else 0.35
    fig = plt.figure(figsize=(13, 8.5 + 0.4 * nrun + 2.6 * last))
    gs = fig.add_gridspec(3, 2, height_ratios=[1.2 + 0.35 * nrun, 1.6, last], hspace=0.45,
                          wspace=0.45, top=0.93)
    draw_timeline(fig.add_subplot(gs[0, :]), data.timeline)
    draw_breakdown(fig.add_subplot(gs[1, :]), data.details)
    if data.curves is None:
        _no_model(fig.add_subplot(gs[2, :]), data.no_model_reason)
    else:
        a1, a2 = fig.add_subplot(gs[2, 0]), fig.add_subplot(gs[2, 1])
        draw_batch_curve(a1, data.curves)
        draw_replica_curve(a2, data.curves)
    fig.suptitle(f"goodput-jax report: job {calculator.job_name!r}", fontsize=14)
    _save(fig, os.fspath(path), dpi)
    plt.close(fig)
    return os.fspath(path)


def _png_b64(fig: Any, dpi: int) -> str:
    buf = io.BytesIO()
    _save(fig, buf, dpi)
    _plt().close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _hints_rows(hints: dict) -> str:
    rows = []
    for k in sorted(hints):
        v = hints[k]
        if isinstance(v, dict):
            v = ", ".join(f"{kk}={_fmt(vv)}" for kk, vv in v.items())
        else:
            v = _fmt(v)
        rows.append(f"<tr><td>{html.escape(k)}</td><td>{html.escape(str(v))}</td></tr>")
    return "\n".join(rows)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def render_html(calculator: GoodputCalculator, path: str | os.PathLike, *,
                text_report: str | None = None, dpi: int = 100, now: float | None = None,
                format_text: Callable[[GoodputCalculator], str] | None = None,
                _data: _Data | None = None) -> str:
    """Write a self-contained HTML report (PNG plots embedded as base64, plus tables).

    Sections: the goodput table, the timeline, the badput breakdown, the model
    curves (or a note that the job has no model hints) and the hints table.

    Args:
        calculator: the job's calculator.
        path: output file.
        text_report: the plain-text table to include (default: ``format_report``).
        dpi: plot resolution.
        now: "now" for a live job.
        format_text: formatter for the text table (default ``report.format_report``).

    Returns:
        The path written.

    Example:
        >>> render_html(calc, "report.html")   # doctest: +SKIP
        'report.html'
    """
    data = _data if _data is not None else _collect(calculator, now)
    if text_report is None:
        if format_text is None:
            from goodput_jax.measure.report import format_report as format_text
        text_report = format_text(calculator)
    imgs = {w: _png_b64(_figure(data, w), dpi) for w in ("timeline", "breakdown", "model")}
    job = html.escape(calculator.job_name)
    if data.curves is None:
        model_html = f'<p class="note" id="no-model">{html.escape(data.no_model_reason)}</p>'
    else:
        model_html = (f'<img id="model-curves" alt="goodput vs batch size and replicas" '
                      f'src="data:image/png;base64,{imgs["model"]}">')
    hints_html = ""
    if data.hints:
        hints_html = ('<h2 id="hints">Model hints (latest)</h2>\n<table class="hints">\n'
                      f"<tr><th>hint</th><th>value</th></tr>\n{_hints_rows(data.hints)}\n</table>")
    doc = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>goodput-jax report: {job}</title>
<style>
body {{ font-family: sans-serif; max-width: 1200px; margin: 2em auto; color: #222; }}
pre {{ background: #f6f6f6; padding: 1em; overflow-x: auto; }}
img {{ max-width: 100%; }}
table.hints td, table.hints th {{ border: 1px solid #ccc; padding: 2px 8px; text-align: left; }}
table.hints {{ border-collapse: collapse; font-size: 90%; }}
.note {{ background: #fff4d6; padding: 0.6em; }}
</style>
</head>
<body>
<h1>Goodput report: job {job}</h1>
<h2 id="table">Goodput and badput</h2>
<pre>{html.escape(text_report)}</pre>
<h2 id="timeline">Timeline</h2>
<img alt="job timeline" src="data:image/png;base64,{imgs["timeline"]}">
<h2 id="breakdown">Badput breakdown</h2>
<img alt="badput breakdown" src="data:image/png;base64,{imgs["breakdown"]}">
<h2 id="model">Model: goodput vs batch size and replicas</h2>
{model_html}
{hints_html}
</body>
</html>
"""
    with open(os.fspath(path), "w", encoding="utf-8") as f:
        f.write(doc)
    return os.fspath(path)


def render_reports(calculator: GoodputCalculator, html_path: str | os.PathLike | None = None,
                   png_path: str | os.PathLike | None = None, *, text_report: str | None = None,
                   now: float | None = None) -> dict:
    """Write the HTML and/or PNG report, reading the store once.

    Returns:
        ``{"html": path or None, "png": path or None, "has_model": bool}``.

    Example:
        >>> render_reports(calc, "r.html", "r.png")["has_model"]   # doctest: +SKIP
        True
    """
    data = _collect(calculator, now)
    out = {"html": None, "png": None, "has_model": data.curves is not None}
    if html_path is not None:
        out["html"] = render_html(calculator, html_path, text_report=text_report, _data=data)
    if png_path is not None:
        out["png"] = render_png(calculator, png_path, _data=data)
    return out
