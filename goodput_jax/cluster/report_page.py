"""The cluster report's page: the allocation chart (inline SVG), the tables and the HTML.

Draws a :class:`~goodput_jax.cluster.report_timeline.ClusterTimeline`; no I/O but the
page it writes, no script, no matplotlib.
"""

from __future__ import annotations

import datetime
import html
import math
import os

from goodput_jax.cluster.report_timeline import ClusterNode, ClusterTimeline, alloc_text
from goodput_jax.report.labels import plural

__all__ = ["gantt_svg", "headline", "page_title", "render_html"]

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7",
           "#9c755f", "#e15759", "#bab0ac")
_CSS = """
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 0 auto;
       max-width: 1280px; padding: 12px 20px; color: #222; line-height: 1.4; }
h1 { font-size: 1.5em; margin: 0.3em 0; } h2 { font-size: 1.2em; margin-top: 1.4em; }
.meta, .explain { color: #555; font-size: 0.92em; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { padding: 3px 8px; border-bottom: 1px solid #ddd; text-align: right;
         white-space: nowrap; }
th { background: #f4f4f4; white-space: normal; max-width: 8em; vertical-align: bottom; }
td.l, th.l { text-align: left; }
.gantt-narrow { display: none; }
@media (max-width: 820px) { .gantt-wide { display: none; } .gantt-narrow { display: block; }
  body { padding: 8px 10px; } table { font-size: 0.8em; } th, td { padding: 3px 4px; } }
svg { display: block; }
.swatch { display: inline-block; width: 0.9em; height: 0.9em; border-radius: 2px;
          vertical-align: -0.1em; margin-right: 4px; }
.legend span.item { margin-right: 14px; white-space: nowrap; }
details { margin: 4px 0; } summary { cursor: pointer; }
td.note { white-space: normal; min-width: 12em; }
@media (max-width: 820px) {
  table.reflow, table.reflow tbody, table.reflow tr, table.reflow td { display: block; }
  table.reflow tr.head { display: none; }
  table.reflow tr { border: 1px solid #ddd; border-radius: 4px; margin: 6px 0; }
  table.reflow td { display: flex; justify-content: space-between; gap: 12px;
                    border-bottom: 1px solid #f0f0f0; white-space: normal; text-align: right;
                    padding: 2px 8px; min-width: 0; }
  table.reflow td::before { content: attr(data-label); color: #555; text-align: left; }
}
"""


def _table(cls: str, head: list[tuple[str, bool]], rows: list[tuple[str, list[str]]]) -> str:
    """A table that reflows into one card per row below 820 px: ``head`` is (label,
    left-aligned) per column; each row is (its ``<tr>`` attributes, one cell's HTML per
    column, already escaped; a cell may start with ``<td ...>`` to set its own attributes)."""
    left_th = " class='l'"
    ths = "".join(f"<th{left_th if left else ''}>{html.escape(label)}</th>"
                  for label, left in head)
    body = []
    for attrs, cells in rows:
        tds = []
        for (label, left), cell in zip(head, cells):
            extra = " class='l'" if left else ""
            if cell.startswith("<td"):
                tag, _, rest = cell.partition(">")
                tds.append(f"{tag} data-label='{html.escape(label)}'>{rest}")
            else:
                tds.append(f"<td{extra} data-label='{html.escape(label)}'>{cell}</td>")
        body.append(f"<tr {attrs}>{''.join(tds)}</tr>" if attrs else f"<tr>{''.join(tds)}</tr>")
    return f"<table class='{cls} reflow'><tr class='head'>{ths}</tr>{''.join(body)}</table>"


def _s(x: float | None, digits: int = 1) -> str:
    return "\u2013" if x is None else f"{x:.{digits}f}"


def _color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _device_rows(tl: ClusterTimeline) -> tuple[list[tuple[ClusterNode, int]],
                                               dict[tuple[str, int, str], list[int]]]:
    """One row per device of each node; each launch's devices on a node assigned to
    rows (first free row at its start)."""
    rows: list[tuple[ClusterNode, int]] = []
    slots: dict[tuple[str, int, str], list[int]] = {}
    launches = sorted((la for j in tl.jobs for la in j.launches), key=lambda la: la.start)
    for node in tl.nodes:
        busy_until: list[float] = []
        for la in launches:
            need = la.allocation.count(node.label)
            if not need:
                continue
            end = la.end if la.end is not None else tl.end
            got: list[int] = []
            for i, until in enumerate(busy_until):
                if len(got) < need and until <= la.start:
                    got.append(i)
            while len(got) < need:
                busy_until.append(-math.inf)
                got.append(len(busy_until) - 1)
            for i in got:
                busy_until[i] = end
            slots[(la.job, la.attempt, node.label)] = got
        for d in range(max(node.devices, len(busy_until), 1)):
            rows.append((node, d))
    return rows, slots


def gantt_svg(tl: ClusterTimeline, width: int = 960, svg_id: str = "gantt") -> str:
    """The allocation chart: one row per device, one bar per launch (inline SVG,
    ``width`` user units wide; the page scales it to its column)."""
    rows, slots = _device_rows(tl)
    colors = {j.name: _color(i) for i, j in enumerate(tl.jobs)}
    longest = max([len(n.label) + (7 if not n.alive else 0) for n in tl.nodes] + [6])
    left, right, top, row_h, gap = min(12 + 7 * longest, width // 4), 14, 34, 20, 8
    span = max(tl.end - tl.start, 1e-9)
    plot_w = width - left - right
    node_gap = {}
    y, prev = top, None
    ys = []
    per_node = {n.label: sum(1 for m, _ in rows if m.label == n.label) for n in tl.nodes}
    for node, d in rows:
        if prev is not None and node.label != prev:
            y += gap + (row_h - 6 if per_node.get(prev, 2) < 2 else 0)  # its subtitle's line
        ys.append(y)
        node_gap[(node.label, d)] = y
        y += row_h
        prev = node.label
    if prev is not None and per_node.get(prev, 2) < 2:
        y += row_h - 6
    height = y + 34

    def x(t: float) -> float:
        return left + (t - tl.start) / span * plot_w

    out = [f'<svg id="{svg_id}" xmlns="http://www.w3.org/2000/svg" '
           f'viewBox="0 0 {width} {height}" width="100%" role="img" '
           f'aria-label="device allocation over time" font-size="12" '
           f'font-family="system-ui, sans-serif">']
    # time axis (grid lines every 'step' seconds)
    step = _nice_step(span / max(plot_w // 90, 2))
    t = 0.0
    while t <= span + 1e-9:
        xx = x(tl.start + t)
        out.append(f'<line x1="{xx:.1f}" y1="{top - 4}" x2="{xx:.1f}" y2="{height - 30}" '
                   f'stroke="#e3e3e3"/>')
        out.append(f'<text x="{xx:.1f}" y="{height - 16}" text-anchor="middle" '
                   f'fill="#555">{t:g}</text>')
        t += step
    out.append(f'<text x="{left + plot_w / 2:.0f}" y="{height - 2}" text-anchor="middle" '
               f'fill="#555">seconds since the first submission</text>')
    # node labels and row bands
    prev = None
    for (node, d), yy in zip(rows, ys):
        fill = "#fafafa" if node.alive else "#fdf0f0"
        out.append(f'<rect x="{left}" y="{yy}" width="{plot_w}" height="{row_h - 2}" '
                   f'fill="{fill}"/>')
        if node.label != prev:
            name = html.escape(node.label) + ("" if node.alive else " (lost)")
            kind = html.escape(node.accelerator_type or "")
            out.append(f'<text x="{left - 6}" y="{yy + 13}" text-anchor="end" '
                       f'font-weight="600" fill="{"#222" if node.alive else "#b22"}">'
                       f'{name}</text>')
            out.append(f'<text class="node-kind" x="{left - 6}" y="{yy + 13 + row_h}" '
                       f'text-anchor="end" fill="#777" font-size="11">'
                       f'{kind} \u00b7 {node.devices} dev</text>')
        prev = node.label
    # launches
    for j in tl.jobs:
        for la in j.launches:
            end = la.end if la.end is not None else tl.end
            for node in tl.nodes:
                for d in slots.get((la.job, la.attempt, node.label), ()):
                    yy = node_gap[(node.label, d)]
                    x0, x1 = x(la.start), x(end)
                    w = max(x1 - x0, 1.5)
                    tip = (f"{j.name} attempt {la.attempt} ({la.reason}) on "
                           f"{alloc_text(la.allocation)}: {la.start - tl.start:.1f}-"
                           f"{end - tl.start:.1f} s"
                           + (f", ended: {la.ended_by}" if la.ended_by else ", running"))
                    out.append(f'<rect class="launch" data-job="{html.escape(j.name)}" '
                               f'x="{x0:.1f}" y="{yy + 1}" width="{w:.1f}" '
                               f'height="{row_h - 4}" rx="3" fill="{colors[j.name]}">'
                               f'<title>{html.escape(tip)}</title></rect>')
                    label = f"{j.name}#{la.attempt}"
                    if w > 7.2 * len(label) + 6:
                        out.append(f'<text x="{x0 + 4:.1f}" y="{yy + 13}" fill="#fff" '
                                   f'font-size="11" pointer-events="none">'
                                   f'{html.escape(label)}</text>')
    # node losses
    for j in tl.jobs:
        for e in j.events:
            if e.what != "node lost":
                continue
            for node in tl.nodes:
                if node.label in e.detail:
                    ys_node = [node_gap[k] for k in node_gap if k[0] == node.label]
                    xx = x(e.t)
                    out.append(f'<line class="node-lost" x1="{xx:.1f}" y1="{min(ys_node)}" '
                               f'x2="{xx:.1f}" y2="{max(ys_node) + row_h - 2}" stroke="#d62728" '
                               f'stroke-width="2" stroke-dasharray="4 2"><title>'
                               f'{html.escape(node.label)} lost at {e.t - tl.start:.1f} s'
                               f'</title></line>')
    # policy rounds that changed something
    for r in tl.rounds:
        xx = x(r.t)
        tip = f"round at {r.t - tl.start:.1f} s ({r.policy}): " + ", ".join(r.changed)
        out.append(f'<path class="round" d="M{xx - 5:.1f},{top - 16} L{xx + 5:.1f},{top - 16} '
                   f'L{xx:.1f},{top - 7} Z" fill="#555"><title>{html.escape(tip)}</title></path>')
    out.append(f'<text x="{left - 6}" y="{top - 8}" text-anchor="end" fill="#555" '
               f'font-size="11">rounds</text>')
    out.append("</svg>")
    return "\n".join(out)


def _nice_step(raw: float) -> float:
    if raw <= 0:
        return 1.0
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def _jobs_table(tl: ClusterTimeline) -> str:
    head = [("job", True), ("status", True), ("submitted (s)", False),
            ("queued before start (s)", False), ("between launches (s)", False),
            ("launches", False), ("restarts", False), ("restart cost (s)", False),
            ("crashes", False), ("JCT (s)", False), ("goodput (%)", False)]
    rows = []
    for i, j in enumerate(tl.jobs):
        cost = sum(r.cost for r in j.restarts)
        rows.append((f"id='job-{html.escape(j.name)}'", [
            f"<span><span class='swatch' style='background:{_color(i)}'></span>"
            f"{html.escape(j.name)}</span>",
            html.escape(j.status), f"{j.submitted - tl.start:.1f}",
            f"{j.queued_before_start:.1f}", f"{j.between_launches:.1f}", f"{len(j.launches)}",
            f"{len(j.restarts)}", f"{cost:.1f}", f"{j.failures}", _s(j.jct), _s(j.goodput)]))
    return _table("jobs", head, rows)


def _pct(x: float | None) -> str:
    return "\u2013" if x is None or not math.isfinite(x) else f"{100 * x:.1f}"


def _productivity_table(tl: ClusterTimeline) -> str:
    """Per job: scheduling, runtime and program goodput, their product, ETTR, MFU."""
    head = [("job", True), ("scheduling goodput (%)", False), ("runtime goodput (%)", False),
            ("program goodput (%)", False), ("ML Productivity Goodput (%)", False),
            ("ETTR (%)", False), ("MFU (%)", False), ("held / job time (s)", False),
            ("note", True)]
    rows = []
    for i, j in enumerate(tl.jobs):
        p = j.productivity
        if p is None:
            note = "no goodput store" if j.goodput is None else "no scheduling time"
            cells = ["\u2013"] * 7
        else:
            note = ("no program cost recorded (no MFU, no product)"
                    if not math.isfinite(p.program_goodput) else "")
            cells = [f"<td class='sched'>{_pct(p.scheduling_goodput)}",
                     f"<td class='runtime'>{_pct(p.runtime_goodput)}",
                     f"<td class='program'>{_pct(p.program_goodput)}",
                     f"<td class='product'><b>{_pct(p.ml_productivity_goodput)}</b>",
                     _pct(p.ettr), _pct(p.mfu), f"{p.held_s:.1f} / {p.total_s:.1f}"]
        cells = [c + "</td>" if c.startswith("<td") else c for c in cells]
        rows.append((f"id='productivity-{html.escape(j.name)}'", [
            f"<span><span class='swatch' style='background:{_color(i)}'></span>"
            f"{html.escape(j.name)}</span>",
            *cells, f"<td class='l note'>{html.escape(note)}</td>"]))
    return _table("productivity", head, rows)


def _checkpoints_table(tl: ClusterTimeline) -> str:
    """Per job: the interval it saved at, the advised one, the goodput Daly predicts at
    each (from its store, at the cluster's MTBF over its nodes) and its measured goodput."""
    head = [("job", True), ("saves by", True), ("interval used (steps)", False),
            ("advised interval (steps)", False), ("predicted at the interval used (%)", False),
            ("predicted at the advice (%)", False), ("measured goodput (%)", False),
            ("save cost (s)", False), ("MTBF (s)", False)]
    rows = []
    for i, j in enumerate(tl.jobs):
        a, acted = j.checkpoints, j.acted_on
        how = "the advice (ctx.should_checkpoint)" if acted else "its own interval"
        used = None if a is None else a.current_interval_steps
        if acted and used is None:
            used = acted.get("interval_steps")
        cells = [f"<span><span class='swatch' style='background:{_color(i)}'></span>"
                 f"{html.escape(j.name)}</span>", html.escape(how),
                 "\u2013" if used is None else f"{used}",
                 "\u2013" if a is None else f"{a.interval_steps}",
                 _pct(None if a is None else a.current_predicted_goodput),
                 _pct(None if a is None else a.predicted_goodput), _s(j.goodput),
                 _s(None if a is None else a.save_cost_s, 2),
                 "\u2013" if a is None else f"{a.mtbf_s:.0f}"]
        rows.append((f"id='checkpoints-{html.escape(j.name)}'", cells))
    return _table("checkpoints", head, rows)


def _restarts_table(tl: ClusterTimeline) -> str:
    rs = [r for j in tl.jobs for r in j.restarts]
    if not rs:
        return "<p class='explain' id='no-restarts'>No job restarted.</p>"
    head = [("job", True), ("new attempt", False), ("cause", True), ("at (s)", False),
            ("relaunched (s)", False), ("first step (s)", False), ("cost (s)", False)]
    rows = [("", [html.escape(r.job), f"{r.attempt}", html.escape(r.cause),
                  f"{r.requested - tl.start:.1f}", f"{r.launched - tl.start:.1f}",
                  _s(None if r.first_step is None else r.first_step - tl.start),
                  f"<b>{r.cost:.1f}</b>"])
            for r in sorted(rs, key=lambda r: r.requested)]
    return _table("restarts", head, rows)


def _rounds_table(tl: ClusterTimeline) -> str:
    if not tl.rounds:
        return "<p class='explain' id='no-rounds'>No round changed an allocation.</p>"
    head = [("at (s)", False), ("policy", True), ("changes (old \u2192 new devices)", True)]
    rows = []
    for r in tl.rounds:
        moves = "<br>".join(
            f"{html.escape(k)}: {html.escape(alloc_text(r.previous.get(k, ())))} \u2192 "
            f"{html.escape(alloc_text(r.allocations.get(k, ())))}" for k in r.changed)
        rows.append(("", [f"{r.t - tl.start:.1f}", html.escape(r.policy), moves]))
    return _table("rounds", head, rows)


def _events_html(tl: ClusterTimeline) -> str:
    out = []
    for j in tl.jobs:
        items = "".join(f"<tr><td>{e.t - tl.start:.1f}</td><td class='l'>{html.escape(e.what)}"
                        f"</td><td class='l'>{html.escape(e.detail)}</td></tr>"
                        for e in j.events)
        dropped = (f"<p class='explain'>{j.events_dropped} older events were dropped.</p>"
                   if j.events_dropped else "")
        out.append(f"<details><summary>{html.escape(j.name)}: "
                   f"{plural(len(j.events), 'event')}</summary>{dropped}<div class='scroll'>"
                   f"<table><tr><th>at (s)</th><th class='l'>event</th>"
                   f"<th class='l'>details</th></tr>{items}</table></div></details>")
    return "\n".join(out)


def page_title(tl: ClusterTimeline) -> str:
    """The page's title: its jobs by name (the first three, then how many more).

    Example:
        >>> page_title(ClusterTimeline((), (), (), 0.0, 0.0))
        'no jobs'
    """
    names = [j.name for j in tl.jobs]
    if not names:
        return "no jobs"
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return ", ".join(names[:3]) + more


def headline(tl: ClusterTimeline) -> str:
    """One sentence: jobs, every node of the run (lost ones counted, and said), restarts,
    mean JCT."""
    alive = [n for n in tl.nodes if n.alive]
    lost = len(tl.nodes) - len(alive)
    devices = sum(n.devices for n in tl.nodes)
    nodes = f"{plural(len(tl.nodes), 'node')} ({plural(devices, 'device')}"
    nodes += f"; {lost} lost during the run, {len(alive)} at its end)" if lost else ")"
    done = [j for j in tl.jobs if j.jct is not None]
    restarts = [r for j in tl.jobs for r in j.restarts]
    head = (f"{plural(len(tl.jobs), 'job')} ({len(done)} finished) on {nodes}"
            f" over {tl.end - tl.start:.1f} s; {plural(len(restarts), 'restart')} costing "
            f"{sum(r.cost for r in restarts):.1f} s in all")
    if done:
        head += f"; mean JCT {sum(j.jct or 0.0 for j in done) / len(done):.1f} s"
    return head


def render_html(tl: ClusterTimeline, path: str | os.PathLike, *, title: str | None = None,
                source: str | None = None) -> str:
    """Write the cluster report page for ``tl`` to ``path``; returns the path.

    Args:
        tl: what the page shows.
        path: the page to write (its directory must exist).
        title: the page's title after "Cluster report: " (default: its jobs' names).
        source: where the records came from (the state directory), shown under the title.
    """
    if not isinstance(tl, ClusterTimeline):
        raise TypeError(f"tl must be a ClusterTimeline, got {type(tl).__name__}")
    if title is None:
        title = page_title(tl)
    stamp = datetime.datetime.fromtimestamp(tl.start, datetime.UTC).strftime(
        "%Y-%m-%d %H:%M:%S UTC")
    head = headline(tl)
    where = f"; records from {html.escape(source)}" if source else ""
    legend = "".join(f"<span class='item'><span class='swatch' style='background:{_color(i)}'>"
                     f"</span>{html.escape(j.name)}</span>" for i, j in enumerate(tl.jobs))
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Cluster report: {html.escape(title)}</title>
<style>{_CSS}</style></head>
<body>
<h1>Cluster report: {html.escape(title)}</h1>
<p class="meta">from {stamp} (time 0) to {tl.end - tl.start:.1f} s{where}</p>
<p id="headline">{html.escape(head)}.</p>
<h2 id="allocation">Who held which device when</h2>
<p class="explain">One row per device of each node (grouped by node, with its accelerator
type); each bar is one launch of a job on that device, from its launch to the event that
ended it (hover for details). Red dashed line: the node was lost; a node that is gone is
marked "(lost)". Triangles on top: scheduling rounds that changed an allocation.</p>
<p class="legend">{legend}</p>
<div class="scroll gantt-wide">{gantt_svg(tl, 960, "gantt")}</div>
<div class="scroll gantt-narrow">{gantt_svg(tl, 600, "gantt-narrow")}</div>
<h2 id="jobs">Jobs</h2>
<p class="explain">Queued before start: submission to first launch. Between launches: time
without a running launch after the first (stops, relaunches, requeues). Restart cost: from
the restart's cause to the first step logged after it. JCT: submission to finish. Goodput:
the job's measured goodput (productive step time / job time, from its goodput store).</p>
<div class="scroll">{_jobs_table(tl)}</div>
<h2 id="productivity">ML Productivity Goodput per job</h2>
<p class="explain">Scheduling goodput: the share of the job's time (submission to finish, or
to the report's end) during which a launch held its full allocation, from the runtime's own
record of the job (queued, running, stopping, relaunching). Runtime goodput: productive step
time / that held time, from the job's goodput store. Program goodput: the roofline's ideal
step time / the device-true step time of its compiled step programs (MFU is the FLOP side).
ML Productivity Goodput is the product of the three; ETTR is productive time / job time.
See docs/productivity.md.</p>
<div class="scroll">{_productivity_table(tl)}</div>
<h2 id="checkpoints">Checkpoint intervals</h2>
<p class="explain">The interval each job saved at (steps between its saves, from its goodput
store) beside the goodput-optimal one (Young/Daly from its measured save cost and the
cluster's observed time between node losses over the job's nodes), and the goodput Daly's
model predicts at each, next to the goodput measured. A job that saves through
<code>ctx.should_checkpoint(step)</code> follows the advice as it is measured.</p>
<div class="scroll">{_checkpoints_table(tl)}</div>
<h2 id="restarts">Restarts and their cost</h2>
<div class="scroll">{_restarts_table(tl)}</div>
<h2 id="rounds">The policy's decisions</h2>
<p class="explain">Each round that changed an allocation, with each moved job's devices before
and after ({plural(tl.rounds_without_change, 'other round')} changed nothing).</p>
<div class="scroll">{_rounds_table(tl)}</div>
<h2 id="events">Events</h2>
{_events_html(tl)}
</body></html>
"""
    path = os.fspath(path)
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ValueError(f"path ({path!r}): directory {parent!r} does not exist")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(page)
    return path
