"""The report's figures, drawn with matplotlib (Agg backend, no display needed).

Each ``draw_*`` function draws one thing another report module returned (the
timeline, the calculator's buckets, the model's curves) on a matplotlib Axes;
legends sit under the axes, never over the data. Figures are sized to be shown
at about their drawn width (<= 800 px), so their text stays readable at 700 px.

Example:
    >>> from goodput_jax.report.figures import figure, png_bytes       # doctest: +SKIP
    >>> png = png_bytes(figure("replicas", curves=model_curves(hints)))  # doctest: +SKIP
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from goodput_jax.measure.calculator import goodput_percent
from goodput_jax.report.curves import ModelCurves
from goodput_jax.report.labels import BUCKET_LABELS, plural
from goodput_jax.report.text import badput_rows
from goodput_jax.report.timeline import CATEGORY_NAMES, Timeline

__all__ = [
    "ACCUMULATION_OFF_LABEL",
    "COLORS",
    "DPI",
    "EXTRAPOLATED_LABEL",
    "FONT",
    "compose_png",
    "draw_batch_curve",
    "draw_breakdown",
    "draw_replica_curve",
    "draw_roofline",
    "draw_timeline",
    "figure",
    "figure_pngs",
    "png_bytes",
    "profiled_label",
    "text_png",
]

_T = TypeVar("_T")

#: category -> colour of the timeline and the breakdown
COLORS: dict[str, str] = {
    "PRODUCTIVE": "#2ca02c",
    "ACCELERATOR_INITIALIZATION": "#9467bd",
    "TRAINING_PREP": "#8c564b",
    "PROGRAM_STARTUP": "#e377c2",
    "DATA_LOADING": "#ff7f0e",
    "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME": "#1f77b4",
    "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME": "#17becf",
    "WASTED_PROGRESS_FROM_DISRUPTION": "#d62728",
    "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION": "#7f7f7f",
    "CUSTOM_BADPUT_EVENTS": "#bcbd22",
    "OTHER": "#c7c7c7",
    "RECOMPILATION": "#f7b6d2",
    "ELASTIC_SLICE_DOWN": "#aec7e8",
    "ELASTIC_SCALE_UP": "#ffbb78",
    "ELASTIC_REINITIALIZATION": "#98df8a",
}

#: legend entry of the replica curve's extrapolated part
EXTRAPOLATED_LABEL = "extrapolated beyond profiled"

#: legend entry of the batch curve with gradient accumulation, for a job that does not allow it
ACCUMULATION_OFF_LABEL = "with gradient accumulation (off for this job)"

FONT = 11  # points; figures are drawn at about the width they are shown (<= 800 px)
DPI = 100

# ---------------------------------------------------------------------- matplotlib
def _plt():
    import matplotlib

    if matplotlib.get_backend().lower() != "agg":
        matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _merge(segs, min_width: float) -> list[tuple[float, float, str]]:
    """Merge touching same-category segments (slivers below ``min_width`` join them)."""
    out: list[list] = []
    for s in sorted(segs, key=lambda s: s.start):
        if out and out[-1][2] == s.category and s.start - out[-1][1] <= min_width:
            out[-1][1] = max(out[-1][1], s.end)
        else:
            out.append([s.start, s.end, s.category])
    return [(a, b, c) for a, b, c in out]


def _legend_below(ax: Any, handles: list, labels: list | None = None, ncol: int = 2) -> None:
    """A legend under the axes (never over the data)."""
    kw = {} if labels is None else {"labels": labels}
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=ncol,
              fontsize=FONT - 1, frameon=False, **kw)


def _samples_per_s(ax: Any) -> None:
    """y ticks like 250k (the axis label carries the unit)."""
    from matplotlib.ticker import EngFormatter

    ax.yaxis.set_major_formatter(EngFormatter(sep=""))


def draw_timeline(ax: Any, tl: Timeline) -> None:
    """Draw the job's timeline on ``ax``: one lane per run, one colour per bucket.

    Example:
        >>> fig, ax = plt.subplots(); draw_timeline(ax, build_timeline(store, "j"))  # doctest: +SKIP
    """
    import matplotlib.lines as mlines
    import matplotlib.patches as mpatches

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
            ax.broken_barh(by_cat[c], (y - lane_h / 2, lane_h), facecolors=COLORS[c],
                           edgecolor="none")
            used.add(c)
    for t, _run in tl.restarts:
        ax.axvline(t - tl.t0, color="black", linestyle="--", linewidth=1)
    for t, run in tl.crashes:
        ax.plot([t - tl.t0], [nrun - 1 - run], marker="x", color="black", markersize=9,
                markeredgewidth=2)
    ax.set_yticks(range(nrun))
    ax.set_yticklabels([f"run {nrun - i}" for i in range(nrun)], fontsize=FONT)
    ax.set_ylim(-0.6, nrun - 0.4)
    ax.set_xlim(0, span * 1.01)
    ax.set_xlabel("seconds since the job's first event", fontsize=FONT)
    ax.set_title("Timeline: the bucket each second of the job went to", fontsize=FONT + 1)
    ax.tick_params(labelsize=FONT - 1)
    handles: list = [mpatches.Patch(color=COLORS[c], label=BUCKET_LABELS[c])
                     for c in CATEGORY_NAMES if c in used]
    if tl.restarts:
        handles.append(mlines.Line2D([], [], color="black", linestyle="--", label="restart"))
    if tl.crashes:
        handles.append(mlines.Line2D([], [], color="black", marker="x", linestyle="none",
                                     markeredgewidth=2, label="crash (last event of a run)"))
    # under the x label: a fixed 0.6 inch below the axes, whatever their height
    height_in = ax.get_position().height * ax.figure.get_figheight()
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.6 / height_in),
              ncol=3, fontsize=FONT - 1, frameon=False)


def _breakdown_rows(details: Mapping[str, Any]) -> list[tuple[str, str, float]]:
    rows = [("PRODUCTIVE", "goodput (productive steps)", float(details["productive_time"]))]
    return rows + badput_rows(details)


def draw_breakdown(ax: Any, details: Mapping[str, Any]) -> None:
    """Horizontal bars: goodput and each badput bucket in seconds, labelled with their %.

    Args:
        ax: a matplotlib Axes.
        details: ``GoodputCalculator.get_job_goodput_details()``.
    """
    total = details["total_time"]
    rows = _breakdown_rows(details)[::-1]
    labels = [r[1] for r in rows]
    vals = [r[2] for r in rows]
    bars = ax.barh(labels, vals, color=[COLORS.get(r[0], "#c7c7c7") for r in rows])
    vmax = max(vals) if vals and max(vals) > 0 else 1.0
    for b, v in zip(bars, vals, strict=True):
        pct = 100.0 * v / total if total > 0 else 0.0
        ax.text(b.get_width() + vmax * 0.01, b.get_y() + b.get_height() / 2,
                f"{v:.2f} s ({pct:.1f}%)", va="center", fontsize=FONT - 1)
    ax.set_xlim(0, vmax * 1.35)
    ax.set_xlabel("seconds (label: % of the total job time)", fontsize=FONT)
    g = goodput_percent(details["productive_time"], total)
    ax.set_title(f"Measured goodput {g:.1f}% and badput by cause (total {total:.1f} s)",
                 fontsize=FONT + 1)
    ax.tick_params(axis="y", labelsize=FONT)
    ax.tick_params(axis="x", labelsize=FONT - 1)


def draw_batch_curve(ax: Any, mc: ModelCurves) -> None:
    """Modelled goodput and efficiency vs total batch size; current and suggested marked."""
    style = "-" if len(mc.batch_sizes) > 1 else "s"  # one replica, no accumulation: M0 only
    h1 = ax.plot(mc.batch_sizes, mc.goodput_vs_batch, style, color="#1f77b4",
                 label="modelled goodput (left axis)"
                 + ("" if mc.accumulation else ", this job's limits"))
    ax.set_xscale("log", base=2)
    if mc.goodput_with_accumulation:
        h1 += ax.plot(mc.batch_sizes_with_accumulation, mc.goodput_with_accumulation, "--",
                      color="#1f77b4", alpha=0.6, label=ACCUMULATION_OFF_LABEL)
    b, r, g = mc.current
    h1 += ax.plot([b], [g], "o", color="black", markersize=8, label=f"current: batch {b}")
    if mc.suggested is not None:
        sb, _, sg = mc.suggested
        gain = f" ({sg / g:.2f}x)" if g > 0 else ""
        h1 += ax.plot([sb], [sg], "*", color="#d62728", markersize=15,
                      label=f"suggested: batch {sb}{gain}")
    if mc.accumulation_star is not None:  # the caption names it only then
        ab, _, ag = mc.accumulation_star
        gain = f" ({ag / g:.2f}x)" if g > 0 else ""
        h1 += ax.plot([ab], [ag], "*", markerfacecolor="none", markeredgecolor="#d62728",
                      markersize=15, label=f"with accumulation: batch {ab}{gain}")
    ax.set_xlabel("total batch size (samples, log scale)", fontsize=FONT)
    ax.set_title(f"Modelled goodput vs batch size ({plural(r, 'replica')})", fontsize=FONT + 1)
    ax.set_ylabel("modelled goodput (samples/s)", fontsize=FONT)
    # goodput peaks at 80% of the height, under the efficiency line (near 1.0 of 1.1)
    ax.set_ylim(0, max([*mc.goodput_vs_batch, *mc.goodput_with_accumulation, g]) * 1.25 or 1.0)
    _samples_per_s(ax)
    ax.tick_params(labelsize=FONT - 1)
    ax2 = ax.twinx()
    eff_x = mc.batch_sizes_with_accumulation or mc.batch_sizes
    eff_y = mc.efficiency_with_accumulation or mc.efficiency_vs_batch
    h2 = ax2.plot(eff_x, eff_y, color="#ff7f0e", linestyle=":",
                  linewidth=2, label="statistical efficiency (right axis)")
    ax2.set_ylim(0, 1.1)
    ax2.set_ylabel("statistical efficiency (0-1)", color="#ff7f0e", fontsize=FONT)
    ax2.tick_params(labelsize=FONT - 1)
    _legend_below(ax, h1 + h2)


def profiled_label(counts: tuple[int, ...]) -> str:
    """The legend entry of the profiled replica counts.

    Example:
        >>> profiled_label((2, 4))
        'profiled: 2, 4 replicas'
    """
    return f"profiled: {', '.join(map(str, counts))} replica{'s' if counts != (1,) else ''}"


def draw_replica_curve(ax: Any, mc: ModelCurves) -> None:
    """Best modelled goodput per replica count: the model as a line, a marker at each replica
    count actually profiled, the extrapolation beyond the largest one shaded."""
    p = mc.profiled_replicas
    curve = dict(zip(mc.replicas, mc.goodput_vs_replicas, strict=True))
    inside = [(r, g) for r, g in curve.items() if r <= p]
    beyond = [(r, g) for r, g in curve.items() if r >= p]
    handles = []
    if inside:
        handles += ax.plot(*zip(*inside, strict=True), "-", color="#1f77b4", linewidth=1.5,
                           label=f"model, within the profiled range (up to {p})")
    marked = tuple(r for r in mc.profiled_replica_counts if r in curve)
    if marked:
        handles += ax.plot(list(marked), [curve[r] for r in marked], "o", color="#1f77b4",
                           markersize=6, linestyle="none", label=profiled_label(marked))
    if len(beyond) > 1:
        handles += ax.plot(*zip(*beyond, strict=True), "--", color="#1f77b4", linewidth=1.5,
                           label="model only")
        handles.append(ax.axvspan(p, mc.replicas[-1] + 0.5, color="#999999", alpha=0.18,
                                  linewidth=0, label=f"{EXTRAPOLATED_LABEL} (> {p} replicas)"))
    own = mc.own_limit_points  # the caption names them only when there are some
    if own:
        handles += ax.plot(*zip(*own, strict=True), "v", color="#1f77b4",
                           markerfacecolor="none", markersize=8, linestyle="none",
                           label="this job's limits (no accumulation)")
    b, r, g = mc.current
    handles += ax.plot([r], [g], "o", color="black", markersize=8,
                       label=f"current: batch {b}")
    if mc.suggested is not None:
        sb, sr, sg = mc.suggested
        handles += ax.plot([sr], [sg], "*", color="#d62728", markersize=15,
                           label=f"suggested: batch {sb}")
    top = max([*mc.goodput_vs_replicas, g]) * 1.15 or 1.0
    if mc.goodput_vs_replicas and mc.goodput_vs_replicas[0] > 0:
        g1 = mc.goodput_vs_replicas[0]
        handles += ax.plot(mc.replicas, [g1 * x for x in mc.replicas], ":", color="gray",
                           label="linear scaling from 1 replica")
    ax.set_ylim(0, top)
    ax.set_xlim(0.5, mc.replicas[-1] + 0.5)
    ax.set_xlabel("replicas (devices)", fontsize=FONT)
    ax.set_title("Modelled goodput vs replicas (best batch each)", fontsize=FONT + 1)
    ax.set_ylabel("best modelled goodput (samples/s)", fontsize=FONT)
    _samples_per_s(ax)
    ax.tick_params(labelsize=FONT - 1)
    _legend_below(ax, handles)


def draw_roofline(ax: Any, programs: Any) -> None:
    """Each compiled step program on its device's roofline (log-log): x its arithmetic
    intensity (FLOPs per byte accessed), y the FLOP/s it achieved (FLOPs per step / the
    device-true step time); the roof is ``min(peak FLOP/s, intensity x bandwidth)``.

    Args:
        ax: a matplotlib Axes.
        programs: :class:`~goodput_jax.measure.productivity.ProgramStats` of the job.
    """
    import numpy as np

    progs = [p for p in programs if p.step_time_s > 0 and p.arithmetic_intensity > 0]
    handles = []
    roofs: dict[tuple[float, float], Any] = {}
    raised = set()
    for p in progs:
        roofs.setdefault((p.peak.flops_per_s, p.peak.bytes_per_s), p.peak)
        if p.raised_from is not None:
            raised.add((p.peak.flops_per_s, p.peak.bytes_per_s))
    xs = [p.arithmetic_intensity for p in progs] + [pk.ridge_point for pk in roofs.values()]
    lo, hi = (min(xs) / 8, max(xs) * 8) if xs else (0.1, 1000.0)
    grid = np.geomspace(lo, hi, 200)
    for i, (key, pk) in enumerate(roofs.items()):
        how = f"{pk.source} peak" + (", raised: a step beat it" if key in raised else "")
        handles += ax.plot(grid, np.minimum(pk.flops_per_s, grid * pk.bytes_per_s), "-",
                           color="#444444" if i == 0 else "#999999", linewidth=1.5,
                           label=f"roofline: {pk.device_kind} ({how})")
        ax.axvline(pk.ridge_point, color="#bbbbbb", linestyle=":", linewidth=1)
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"]
    for i, p in enumerate(progs):
        achieved = p.cost.flops / p.step_time_s
        handles += ax.plot([p.arithmetic_intensity], [achieved], "o", markersize=8,
                           color=colors[i % len(colors)],
                           label=f"{p.cost.name or 'program'}: {p.verdict}, "
                                 f"MFU {100 * p.mfu:.1f}%")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs per byte accessed, log)", fontsize=FONT)
    ax.set_ylabel("FLOP/s per device (log)", fontsize=FONT)
    ax.set_title("Roofline: where each step program runs", fontsize=FONT + 1)
    ax.tick_params(labelsize=FONT - 1)
    ax.yaxis.set_major_formatter(_eng_flops())
    _legend_below(ax, handles, ncol=1)


def _eng_flops():
    from matplotlib.ticker import EngFormatter

    return EngFormatter(sep="")


def figure(which: str, *, timeline: Timeline | None = None,
           details: Mapping[str, Any] | None = None, curves: ModelCurves | None = None,
           programs: Any = None):
    """One of the report's figures: ``timeline``, ``breakdown``, ``batch``, ``replicas`` or
    ``roofline`` (``programs``: the job's ``ProgramStats``).

    Example:
        >>> fig = figure("breakdown", details=calc.get_job_goodput_details())  # doctest: +SKIP
    """
    plt = _plt()
    if which == "timeline":
        timeline = _given(timeline, "timeline", which)
        nrun = max(1, len(timeline.run_ids))
        fig, ax = plt.subplots(figsize=(8, 1.0 + 0.55 * nrun))
        draw_timeline(ax, timeline)
    elif which == "breakdown":
        details = _given(details, "details", which)
        n = len(_breakdown_rows(details))
        fig, ax = plt.subplots(figsize=(7.5, 0.8 + 0.32 * n))
        draw_breakdown(ax, details)
    elif which == "batch":
        curves = _given(curves, "curves", which)
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        draw_batch_curve(ax, curves)
    elif which == "replicas":
        curves = _given(curves, "curves", which)
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        draw_replica_curve(ax, curves)
    elif which == "roofline":
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        draw_roofline(ax, programs or ())
    else:
        raise ValueError(f"which ({which!r}) must be timeline, breakdown, batch, replicas "
                         "or roofline")
    return fig


def _given(value: _T | None, name: str, which: str) -> _T:
    """``value``, which figure ``which`` needs: a one-line error naming it when None."""
    if value is None:
        raise ValueError(f"{name} (None) is needed for figure {which!r}")
    return value


def png_bytes(fig: Any, dpi: int = DPI) -> bytes:
    """The figure as PNG bytes (tight, white background); closes it."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight", pad_inches=0.15,
                facecolor="white")
    _plt().close(fig)
    return buf.getvalue()


def figure_pngs(timeline: Timeline, details: Mapping[str, Any], curves: ModelCurves | None,
                dpi: int = DPI, programs: Any = ()) -> dict[str, bytes]:
    """Every figure of the report as PNG bytes (the model's two only when there are curves,
    the roofline only when program costs were recorded)."""
    which = (["timeline", "breakdown"] + (["batch", "replicas"] if curves else [])
             + (["roofline"] if programs else []))
    return {w: png_bytes(figure(w, timeline=timeline, details=details, curves=curves,
                                programs=programs), dpi)
            for w in which}


def compose_png(path: str | os.PathLike, rows: list[list[bytes]]) -> str:
    """Stack rows of PNG images (side by side within a row) into one PNG file.

    Example:
        >>> compose_png("r.png", [[title], [timeline], [batch, replicas]])  # doctest: +SKIP
        'r.png'
    """
    import numpy as np
    from matplotlib import image as mimage

    def rgb(b: bytes):
        a = mimage.imread(io.BytesIO(b), format="png")[..., :3]
        return np.asarray(a, dtype=np.float32)

    def pad(a, h=None, w=None):
        h = a.shape[0] if h is None else h
        w = a.shape[1] if w is None else w
        out = np.ones((h, w, 3), dtype=np.float32)
        out[: a.shape[0], : a.shape[1]] = a
        return out

    lines = []
    for row in rows:
        arrs = [rgb(b) for b in row]
        hmax = max(a.shape[0] for a in arrs)
        lines.append(np.concatenate([pad(a, h=hmax) for a in arrs], axis=1))
    width = max(a.shape[1] for a in lines)
    sheet = np.concatenate([pad(a, w=width) for a in lines], axis=0)
    mimage.imsave(os.fspath(path), sheet, format="png")
    return os.fspath(path)


def text_png(lines: Sequence[tuple[str, float, str]], width: float = 9.0, dpi: int = DPI) -> bytes:
    """A strip of text lines ``(text, fontsize, weight)`` as PNG bytes (titles, notes)."""
    plt = _plt()
    fig = plt.figure(figsize=(width, 0.2 + 0.32 * len(lines)))
    for i, (text, size, weight) in enumerate(lines):
        fig.text(0.01, 1 - (i + 0.8) / (len(lines) + 0.3), text, fontsize=size, weight=weight,
                 wrap=True)
    return png_bytes(fig, dpi)
