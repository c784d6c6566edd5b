"""Render the report: one self-contained HTML page and one PNG sheet.

This module only lays out what the other report modules return: the timeline
(:mod:`goodput_jax.report.timeline`, from the one attribution engine), the
calculator's buckets (:mod:`goodput_jax.report.text`), the model's curves
(:mod:`goodput_jax.report.curves`), drawn by :mod:`goodput_jax.report.figures`.
It computes nothing of its own.

The page explains each plot in a sentence (what it shows, units), defines the
two meanings of "goodput", shows the hints with human names and units, keeps
legends outside the plotting area, marks where the replica curve extrapolates
beyond what was profiled, and stays readable at 700 px (images scale, tables
scroll). Needs matplotlib (the ``report`` extra); the Agg backend, no display.

Example:
    >>> from goodput_jax.report.render import render_reports          # doctest: +SKIP
    >>> render_reports(calculator, "report.html", "report.png")       # doctest: +SKIP
    {'html': 'report.html', 'png': 'report.png', 'has_model': True}
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import html
import os
import pathlib
from collections.abc import Mapping
from typing import Any

from goodput_jax.measure.calculator import GoodputCalculator, goodput_percent
from goodput_jax.measure.stragglers import Stragglers
from goodput_jax.model.hints import Hints
from goodput_jax.report.curves import ModelCurves, model_curves, parse_hints, replica_counts_run
from goodput_jax.report.figures import (
    DPI,
    EXTRAPOLATED_LABEL,
    FONT,
    compose_png,
    figure_pngs,
    text_png,
)
from goodput_jax.report.labels import HINT_LABELS, format_bounds, html_text, plural, plural_list
from goodput_jax.report.productivity import (
    ABOVE_ROOF,
    NO_PROGRAM_COST,
    STEP_COUNT_RULE,
    ProductivityPanel,
    above_roof,
    advice_lines,
    factor_rows,
    merged_programs,
    productivity_panel,
    roofline_lines,
)
from goodput_jax.report.text import (
    GOODPUT_ROW,
    badput_rows,
    format_report,
    job_details,
    measurement_note,
)
from goodput_jax.report.timeline import Timeline, build_timeline

__all__ = [
    "GOODPUT_MEANINGS",
    "accumulation_sentence",
    "json_key",
    "render_html",
    "render_png",
    "render_reports",
]

GOODPUT_MEANINGS = (
    ("Measured goodput (%)",
     ("the share of the job's wall-clock time spent in productive training steps: "
     "productive step time / total job time x 100 (Google's ML Goodput Measurement). "
     "The rest is badput, broken down by cause. The table, the timeline and the "
     "breakdown below show this one.")),
    ("Modelled goodput (samples/s)",
     ("the rate of useful training progress: throughput (samples/s) x statistical "
     "efficiency (0-1, how much each sample of a larger batch still teaches), counted "
     "in samples at the initial batch size M0 (Pollux / AdaptDL). The model curves "
     "show this one, predicted by the step-time model and gradient statistics the "
     "training hooks fitted.")),
)



# ---------------------------------------------------------------------- data
@dataclasses.dataclass
class _Data:
    calc: GoodputCalculator
    details: dict
    timeline: Timeline
    curves: ModelCurves | None
    hints: Hints | None
    no_model_reason: str
    stragglers: Stragglers | None = None
    panel: ProductivityPanel | None = None

    @property
    def programs(self) -> tuple:
        p = None if self.panel is None else self.panel.productivity
        return () if p is None else tuple(merged_programs(p.program.programs))


def _collect(calc: GoodputCalculator, now: float | None, target_step: int | None = None,
             mtbf_s: float | None = None) -> _Data:
    panel = productivity_panel(calc, target_step=target_step, mtbf_s=mtbf_s, now=now)
    details = job_details(calc)
    tl = build_timeline(calc.store, calc.job_name, now=now)
    raw = calc.get_latest_hints()
    hints, curves, reason = None, None, ""
    try:
        hints = parse_hints(raw)
        # every replica count the steps ran on, not only the two the hints prove
        prod = panel.productivity
        ran = replica_counts_run(hints, () if prod is None else prod.program.programs)
        curves = model_curves(hints, profiled_replicas=ran)
    except (TypeError, ValueError) as e:
        reason = f"The job's hints could not be read ({e}), so the model curves are not shown."
    if curves is None and not reason:
        reason = ("No model hints for this job: the modelled-goodput curves need the "
                  "step-time model and gradient statistics that GoodputHooks publishes "
                  "(perfParams, gradParams, initBatchSize).")
    st = GoodputCalculator.get_step_stragglers(calc)  # the base shape (see job_details)
    return _Data(calc, details, tl, curves, hints, reason, st if st.num_hosts > 1 else None,
                 panel)


def _pngs(data: _Data, dpi: int) -> dict[str, bytes]:
    return figure_pngs(data.timeline, data.details, data.curves, dpi, data.programs)


def _measured_goodput(details: Mapping[str, Any]) -> float:
    total = details["total_time"]
    return goodput_percent(details["productive_time"], total)


# ---------------------------------------------------------------------- PNG
def render_png(calculator: GoodputCalculator, path: str | os.PathLike, *, dpi: int = DPI,
               now: float | None = None, target_step: int | None = None,
               mtbf_s: float | None = None) -> str:
    """Write one PNG: a title, the timeline, the breakdown and the model curves, stacked.

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
    data = _collect(calculator, now, target_step, mtbf_s)
    return _write_png(calculator.job_name, path, data, _pngs(data, dpi), dpi)


def _write_png(job: str, path: str | os.PathLike, data: _Data, imgs: dict[str, bytes],
               dpi: int) -> str:
    g = _measured_goodput(data.details)
    subtitle = (f"measured goodput {g:.1f}% of {data.details['total_time']:.1f} s (productive "
                "step time / job time); model curves: samples/s of useful progress")
    title = [(f"goodput-jax report: job {job!r}", 14, "bold"),
             (subtitle, FONT, "normal")]
    rows = [[text_png(title, dpi=dpi)], [imgs["timeline"]], [imgs["breakdown"]]]
    if data.curves is not None:
        rows.append([imgs["batch"], imgs["replicas"]])
    else:
        rows.append([text_png([(data.no_model_reason, FONT - 1, "normal")], dpi=dpi)])
    if "roofline" in imgs:
        rows.append([imgs["roofline"]])
    return compose_png(path, rows)
# ---------------------------------------------------------------------- HTML
def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}"
    if v is None:
        return "-"
    return str(v)


def _hint_value(name: str, value: Any) -> str:
    if name == "perf_params":
        p = value
        return (f"compute {p.alpha_c * 1e3:.4g} ms + {p.beta_c * 1e3:.4g} ms/sample; "
                f"network within a node {p.alpha_r * 1e3:.4g} ms + {p.beta_r * 1e3:.4g} ms/replica; "
                f"across nodes {p.alpha_n * 1e3:.4g} ms + {p.beta_n * 1e3:.4g} ms/replica; "
                f"overlap gamma {p.gamma:.3g}")
    if name == "grad_params":
        return f"|G|^2 (norm) {value.sqr:.4g}; tr(Sigma)/M0 (var) {value.var:.4g}"
    if name == "local_bsz_bounds":
        return format_bounds(value)
    if name == "perf_params_by_type":
        return "; ".join(f"{k}: gamma {v.gamma:.3g}, compute {v.alpha_c * 1e3:.4g} ms + "
                         f"{v.beta_c * 1e3:.4g} ms/sample" for k, v in value.items())
    if name == "min_throughput_by_type":
        return "; ".join(f"{k}: {v:.4g}" for k, v in value.items())
    if name == "predicted_speedup" and value is not None:
        return f"{value:.3g}"
    return _fmt(value)


def accumulation_sentence(mc: ModelCurves) -> str | None:
    """What gradient accumulation, which the job does not allow, would give (>5% more), or None.

    Example:
        >>> accumulation_sentence(model_curves(hints))  # doctest: +SKIP
        'Gradient accumulation is off for this job: ...'
    """
    if mc.accumulation or mc.suggested_with_accumulation is None:
        return None
    ab, r, ag = mc.suggested_with_accumulation
    ref = mc.suggested[2] if mc.suggested is not None else mc.current[2]
    if not ag > 1.05 * ref:
        return None
    gc = mc.current[2]
    why = ("the per-replica batch is held within its bounds "
           f"({format_bounds(mc.hints.local_bsz_bounds, 'samples')})")
    gain = f" ({ag / gc:.2f}x the running configuration)" if gc > 0 else ""
    return (f"Gradient accumulation is off for this job (gradientAccumulation: no): {why}. "
            f"With it, the model predicts batch {ab} at {ag:,.0f} samples/s{gain}; "
            "allow it with GoodputHooks(..., gradient_accumulation=True).")


def json_key(field_name: str) -> str:
    """The camelCase JSON key of a :class:`Hints` field (shown as a tooltip).

    Example:
        >>> json_key("local_bsz_bounds")
        'localBszBounds'
    """
    head, *rest = field_name.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


def _hints_table(h: Hints) -> str:
    rows = []
    for name, lab in HINT_LABELS.items():
        value = getattr(h, name)
        if value is None or (isinstance(value, Mapping) and not value):
            continue
        unit = html.escape(lab.unit) if lab.unit else ""
        rows.append(
            f'<tr><td title="{json_key(name)}">'
            f"{html.escape(lab.name)}</td><td>{html.escape(_hint_value(name, value))}</td>"
            f"<td>{unit}</td><td>{html.escape(lab.meaning)}</td></tr>")
    return ("<tr><th>hint</th><th>value</th><th>unit</th><th>meaning</th></tr>\n"
            + "\n".join(rows))


def _buckets_table(details: Mapping[str, Any]) -> str:
    total = details["total_time"]

    def pct(s: float) -> str:
        return f"{100.0 * s / total:.2f}" if total > 0 else "n/a"

    good = details["productive_time"]
    rows = [f'<tr class="good"><td>{GOODPUT_ROW}</td><td>{good:.3f}</td><td>{pct(good)}</td></tr>']
    for name, label, s in badput_rows(details):
        rows.append(f"<tr><td>{html.escape(label)}</td><td>{s:.3f}</td><td>{pct(s)}</td></tr>")
        if name == "CUSTOM_BADPUT_EVENTS":
            for cname, cs in sorted(details["custom_badput_time"].items()):
                rows.append(f'<tr class="sub"><td>{html.escape(cname)}</td><td>{cs:.3f}</td>'
                            f"<td>{pct(cs)}</td></tr>")
    rows.append(f'<tr class="total"><td>total job time</td><td>{total:.3f}</td>'
                f'<td>{"100.00" if total > 0 else "n/a"}</td></tr>')
    return ("<tr><th>bucket</th><th>seconds</th><th>% of job time</th></tr>\n"
            + "\n".join(rows))


def _stragglers_html(st: Stragglers | None, top: int = 5) -> str:
    """The stragglers section (a job that several hosts recorded), or nothing."""
    if st is None:
        return ""
    n = int(st.steps.size)
    rows = [("<tr><th>host</th><th>steps it was last</th><th>lost time (s)</th>"
            "<th>% of straggler time</th><th>% of job time</th><th>worst step lag (s)</th></tr>")]
    for h in st.slowest(top):
        worst = float(st.lag[st.last_host == h.host].max())
        job = f"{100 * h.job_share:.2f}" if h.job_share == h.job_share else "n/a"
        rows.append(f"<tr><td>host {h.host}</td><td>{h.steps_last} of {n}</td>"
                    f"<td>{h.lost_time:.3f}</td><td>{100 * h.share:.1f}</td><td>{job}</td>"
                    f"<td>{worst:.3f}</td></tr>")
    body = ("<p>No host held a step back.</p>" if not st.hosts else
            f'<div class="scroll"><table class="buckets" id="stragglers-table">\n'
            f'{chr(10).join(rows)}\n</table></div>')
    return f"""<h2 id="stragglers">Stragglers ({st.num_hosts} hosts)</h2>
<p class="explain">Per step, the host that started it (<code>STEP_START</code>) or finished it
(device end, else <code>STEP_END</code>) last, by how much later than the median of the other
hosts; that lag is the time the others waited for it. Lost time: the sum of those lags over
the steps the host was last ({n} steps compared); the slowest hosts first. The hosts' clocks
are compared directly (they must be synchronised).</p>
{body}"""


def _productivity_html(data: _Data, img: Any) -> str:
    """The ML Productivity Goodput panel: the three factors and their product, ETTR, MFU,
    the roofline position (figure and one line per program) and the advice."""
    panel = data.panel
    if panel is None:
        return ""
    p = panel.productivity
    head = '<h2 id="productivity">ML Productivity Goodput</h2>'
    explain = ('<p class="explain">Google\'s ML Productivity Goodput is the product of three '
               "fractions: how much of the job's time it held all its resources (scheduling), "
               "how much of that time was productive steps (runtime: the measured goodput "
               "above, over the held time) and how close each step ran to the device's limit "
               "(program: the roofline's ideal step time over the device-true one). Formulas "
               f"and sources in {_concepts_link('productivity.md')}.</p>")
    if p is None:
        body = (f'<p class="note" id="no-productivity">'
                f"{html.escape(panel.productivity_reason)}</p>")
    else:
        rows = ["<tr><th>factor</th><th>value</th><th>how it is computed</th></tr>"]
        for name, value, how in factor_rows(p):
            cls = ' class="good"' if name == "ML Productivity Goodput" else ""
            rows.append(f"<tr{cls}><td>{html.escape(name)}</td><td>{value}</td>"
                        f"<td>{html.escape(how)}</td></tr>")
        src = ("the cluster runtime's timeline" if p.scheduling_source == "timeline" else
               "the job's own events")
        held = (f'<p class="explain" id="held">Held {p.held_s:.3f} s of {p.total_s:.3f} s '
                f"(scheduling from {src}); productive {p.productive_s:.3f} s.</p>")
        body = (f'<div class="scroll"><table class="factors" id="productivity-table">\n'
                + "\n".join(rows) + "\n</table></div>\n" + held)
        if p.program.programs:
            lines = "".join(f"<li>{html.escape(x.strip())}</li>" for x in roofline_lines(p))
            body += (f'\n<figure>{img("roofline", "roofline position of each step program")}'
                     '<figcaption id="caption-roofline">Each compiled step program on its '
                     "device's roofline (log-log): x its arithmetic intensity (FLOPs per byte "
                     "accessed, from XLA's cost analysis and the compiled program's matrix "
                     "products), y the FLOP/s it achieved per device "
                     "(FLOPs per step / its median device-true step time); the line is the "
                     "roof, min(peak FLOP/s, intensity x memory bandwidth), turning at the "
                     "dotted ridge point. Left of the ridge a step is memory-bound, right of "
                     "it compute-bound, within a factor 1.5 of it (more for a noisy measured "
                     "peak) near the ridge; the gap to the roof is what program goodput "
                     "measures. A peak a step beat is raised to what that step reached. "
                     f"Below, {STEP_COUNT_RULE}.</figcaption></figure>\n"
                     f'<ul class="explain" id="roofline-programs">{lines}</ul>')
            if above_roof(p):
                body += f'\n<p class="note" id="above-roof">{html_text(ABOVE_ROOF)}.</p>'
        else:
            body += f'\n<p class="note" id="no-program-cost">{html_text(NO_PROGRAM_COST)}.</p>'
    advice = "".join(f"<li>{html.escape(x)}</li>" for x in advice_lines(panel))
    body += ('\n<h3 id="advice-heading">Advice</h3>\n<p class="explain">From the measured '
             "save cost, disruptions and step time: the Young/Daly checkpoint interval with "
             "the goodput it predicts (against today's interval), and when the job reaches "
             "its target step at today's rates.</p>\n"
             f'<ul id="advice">{advice}</ul>')
    return f"{head}\n{explain}\n{body}"


def _concepts_link(page: str = "concepts.md") -> str:
    """docs/PAGE: a file link when the docs sit beside the package, else its name."""
    path = pathlib.Path(__file__).resolve().parents[2] / "docs" / page
    if path.is_file():
        return f'<a href="{html.escape(path.as_uri())}">docs/{page}</a>'
    return f"<code>docs/{page}</code> in the goodput-jax repository"


_CSS = """
*, *::before, *::after { box-sizing: border-box; }
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; line-height: 1.45;
       color: #222; max-width: 1100px; margin: 0 auto; padding: 0 16px 3em; }
h1 { font-size: 1.7em; margin: 0.8em 0 0.2em; overflow-wrap: anywhere; }
h2 { font-size: 1.3em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
img { max-width: 100%; height: auto; display: block; }
figure { margin: 0.6em 0 1.2em; }
figcaption, .explain { color: #444; font-size: 0.95em; margin: 0.3em 0 0.6em; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; font-size: 0.92em; }
td, th { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
table.buckets td:nth-child(n+2) { text-align: right; font-variant-numeric: tabular-nums; }
table.factors td:nth-child(2) { text-align: right; font-variant-numeric: tabular-nums;
                                white-space: nowrap; }
tr.good td { background: #e8f5e9; font-weight: bold; }
tr.total td { font-weight: bold; border-top: 2px solid #888; }
tr.sub td:first-child { padding-left: 2em; }
.meta { color: #555; font-size: 0.9em; overflow-wrap: anywhere; }
.headline { font-size: 1.15em; background: #f3f7fb; border-left: 4px solid #1f77b4;
            padding: 0.5em 0.8em; }
.defs { background: #fafafa; border: 1px solid #e3e3e3; padding: 0.6em 1em; }
.defs dt { font-weight: bold; margin-top: 0.4em; }
.defs dd { margin-left: 1.2em; }
.plots { display: flex; flex-wrap: wrap; gap: 16px; }
.plots figure { flex: 1 1 440px; min-width: 0; }
.note { background: #fff4d6; padding: 0.6em; }
pre { background: #f6f6f6; padding: 1em; overflow-x: auto; font-size: 0.85em; }
@media (max-width: 760px) {
  body { padding: 0 10px 2em; }
  h1 { font-size: 1.35em; }
  .plots figure { flex-basis: 100%; }
}
"""


def render_html(calculator: GoodputCalculator, path: str | os.PathLike, *,
                text_report: str | None = None, dpi: int = DPI, now: float | None = None,
                target_step: int | None = None, mtbf_s: float | None = None) -> str:
    """Write a self-contained HTML report (plots embedded as PNG, tables, explanations).

    Sections: what the two goodputs mean, where the time went (table), the
    timeline, the badput breakdown, the model curves (or why there are none)
    and the hints, each plot with a sentence saying what it shows and its units.

    Args:
        calculator: the job's calculator.
        path: output file.
        text_report: the plain-text table to include (default: :func:`format_report`).
        dpi: plot resolution.
        now: "now" for a live job.
        target_step: the step the job trains to (the finish forecast; None: none).
        mtbf_s: mean time between failures in seconds for the checkpoint advice
            (None: observed).

    Returns:
        The path written.

    Example:
        >>> render_html(calc, "report.html")   # doctest: +SKIP
        'report.html'
    """
    data = _collect(calculator, now, target_step, mtbf_s)
    if text_report is None:
        text_report = format_report(calculator, target_step=target_step, mtbf_s=mtbf_s)
    return _write_html(calculator, path, data, _pngs(data, dpi), text_report)


def _write_html(calculator: GoodputCalculator, path: str | os.PathLike, data: _Data,
                imgs: dict[str, bytes], text_report: str) -> str:

    def img(which: str, alt: str) -> str:
        b64 = base64.b64encode(imgs[which]).decode("ascii")
        return f'<img id="img-{which}" alt="{html.escape(alt)}" src="data:image/png;base64,{b64}">'

    d = data.details
    job = html.escape(calculator.job_name)
    g = _measured_goodput(d)
    store = html.escape(str(calculator.store.url))
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    headline = (f"Measured goodput: <b>{g:.1f}%</b> of {d['total_time']:.1f} s of job time "
                f"was productive training steps.")
    mc = data.curves
    if mc is not None:
        b, r, gc = mc.current
        headline += (f"<br>Modelled goodput now: <b>{gc:,.0f} samples/s</b> "
                     f"(batch {b} on {plural(r, 'replica')})")
        if mc.suggested is not None:
            sb, _, sg = mc.suggested
            gain = f", {sg / gc:.2f}x" if gc > 0 else ""
            headline += f"; suggested batch {sb}: <b>{sg:,.0f} samples/s</b>{gain}"
        headline += "."
        note = accumulation_sentence(mc)
        if note:
            headline += f'<br><span id="accumulation-off">{html.escape(note)}</span>'

    defs = "\n".join(f"<dt>{html.escape(t)}</dt><dd>{html.escape(x)}</dd>"
                     for t, x in GOODPUT_MEANINGS)
    nrun = len(data.timeline.run_ids)
    if mc is None:
        model_html = f'<p class="note" id="no-model">{html.escape(data.no_model_reason)}</p>'
    else:
        b, r, _ = mc.current
        named = plural_list(mc.profiled_replica_counts or (mc.profiled_replicas,), "replica")
        upto = plural(mc.profiled_replicas, "replica")
        ext = f" Dots: the replica counts profiled ({named})." + (
            f" The step-time model was profiled on up to {upto}; beyond that (dashed line, "
            f"grey band, legend \"{EXTRAPOLATED_LABEL}\") the curve is an extrapolation of "
            "the fitted model, not a measurement."
            if mc.extrapolated_replicas else
            f" Every replica count shown was within the profiled range (up to {upto}).")
        if mc.accumulation:
            batch_how = ("using gradient accumulation where the per-replica batch would "
                         "exceed its limit")
            acc_star, own = "", ""
        else:
            bounds = format_bounds(mc.hints.local_bsz_bounds, "samples")
            batch_how = ("within this job's limits: no gradient accumulation, per-replica "
                         f"batch {bounds}"
                         + ("; the dashed line is the same model with accumulation, which "
                            "would pay here" if mc.goodput_with_accumulation else
                            "; accumulation would not pay here (not 5% more)"))
            acc_star = (", hollow star: the suggestion with accumulation"
                        if mc.accumulation_star is not None else "")
            own = (" Hollow triangles: this job's own limits (no accumulation) where they "
                   "give less." if mc.own_limit_points else "")
        model_html = f"""<p class="explain">Both plots show <b>modelled goodput</b> in samples/s
of useful progress (M0 = {mc.hints.init_batch_size} samples), predicted from the fitted
step-time model and gradient statistics; they are predictions, not measurements.</p>
<div class="plots" id="model-curves">
<figure>{img("batch", "modelled goodput vs total batch size")}
<figcaption id="caption-batch">Modelled goodput (samples/s, left axis, blue) against the total
batch size (samples, log scale) on the current {plural(r, "replica")}, {batch_how}; the dotted
orange line is the statistical efficiency (0-1, right axis). Black dot: the running
configuration (batch {b}); red star: the model's suggestion{acc_star}.</figcaption></figure>
<figure>{img("replicas", "best modelled goodput vs replicas")}
<figcaption id="caption-replicas">Best modelled goodput (samples/s) for each number of replicas
(devices), each at its best batch size, with gradient accumulation allowed (so one replica
can run any batch more replicas run, and the curve cannot rise faster than linearly); the
dotted grey line is perfect linear scaling from one replica.{own}{ext}</figcaption></figure>
</div>"""
    hints_html = ""
    if data.hints is not None:
        hints_html = (f'<h2 id="hints">Model hints (latest)</h2>\n<p class="explain">What the '
                      "training hooks last published for the scheduler and this report "
                      "(hover a name for its JSON key).</p>\n"
                      f'<div class="scroll"><table class="hints">\n{_hints_table(data.hints)}'
                      "\n</table></div>")
    note = measurement_note(d)
    timing_html = ("" if note is None else
                   f'<p class="note" id="host-timed">{html.escape(note)}</p>')
    doc = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>goodput-jax report: {job}</title>
<style>{_CSS}</style>
</head>
<body>
<h1>Goodput report: job {job}</h1>
<p class="meta">store {store} &middot; {d['num_runs']} run(s), {d['num_disruptions']}
disruption(s), {d['num_events']} events, last productive step {d['last_productive_step']}
&middot; generated {stamp}</p>
<p class="headline" id="headline">{headline}</p>
<section id="goodput-meanings">
<h2>Two meanings of "goodput"</h2>
<dl class="defs">
{defs}
</dl>
<p class="explain">More in {_concepts_link()}.</p>
</section>
<h2 id="table">Where the time went (measured)</h2>
<p class="explain">Every second of the job's wall-clock time, from its first event to its end
(or now, for a running job), attributed to exactly one bucket; seconds and % of the total job
time, summing to 100%.</p>
{timing_html}
<div class="scroll"><table class="buckets">
{_buckets_table(d)}
</table></div>
<details><summary>plain-text table (as printed by <code>goodput-jax report</code>)</summary>
<pre>{html.escape(text_report)}</pre></details>
<h2 id="timeline">Timeline</h2>
<figure>{img("timeline", "job timeline")}
<figcaption id="caption-timeline">The job over time: x is seconds since the job's first event,
one lane per run ({nrun} here; a run is one launch of the training program); each colour is the
bucket that time was attributed to, by the same rules as the table. Dashed lines mark restarts;
a cross marks the last event of a run that crashed.</figcaption></figure>
<h2 id="breakdown">Badput breakdown</h2>
<figure>{img("breakdown", "badput breakdown")}
<figcaption id="caption-breakdown">Seconds per bucket (bar length, x axis in seconds), each
labelled with its share in % of the total job time; the green bar is measured goodput
({g:.1f}%).</figcaption></figure>
{_stragglers_html(data.stragglers)}
{_productivity_html(data, img)}
<h2 id="model">Modelled goodput: batch size and replicas</h2>
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
                   now: float | None = None, target_step: int | None = None,
                   mtbf_s: float | None = None) -> dict:
    """Write the HTML and/or PNG report, reading the store and drawing each plot once.

    Returns:
        ``{"html": path or None, "png": path or None, "has_model": bool}``.

    Example:
        >>> render_reports(calc, "r.html", "r.png")["has_model"]   # doctest: +SKIP
        True
    """
    data = _collect(calculator, now, target_step, mtbf_s)
    imgs = _pngs(data, DPI) if (html_path is not None or png_path is not None) else {}
    out: dict[str, Any] = {"html": None, "png": None, "has_model": data.curves is not None}
    if html_path is not None:
        if text_report is None:
            text_report = format_report(calculator, target_step=target_step, mtbf_s=mtbf_s)
        out["html"] = _write_html(calculator, html_path, data, imgs, text_report)
    if png_path is not None:
        out["png"] = _write_png(calculator.job_name, png_path, data, imgs, DPI)
    return out


