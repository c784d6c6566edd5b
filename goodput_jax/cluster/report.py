"""The cluster report: who held which device when, and what it cost.

One self-contained HTML page (inline SVG and CSS, no script, no matplotlib) with

* a Gantt chart of every node's devices over time (a wide and a narrow drawing; CSS
  shows the one that fits the window, so its text stays readable at 700 px): one row per device, one bar per
  launch of a job on it (colour by job), nodes that are gone marked lost, a red line
  where a node was lost and a tick for every policy round that changed something;
* per job: its queueing (before its first launch and between launches), launches,
  restarts and what they cost, its job completion time (JCT) and measured goodput;
* per job, ML Productivity Goodput: scheduling goodput from the runtime's own timeline
  of the job (:func:`goodput_jax.cluster.record.scheduling_timeline`: queued, running,
  stopping, relaunching), runtime and program goodput from its goodput store, their
  product, ETTR and MFU (``GoodputCalculator.get_productivity_goodput(scheduling=...)``);
* every restart: its cause (a policy stop, a node loss, a crash, a controller
  restart), when it was asked for, relaunched, and the first step logged after it;
* the policy's decisions: each round that changed an allocation, old -> new.

The input is a :class:`ClusterTimeline` (frozen dataclasses). :func:`build_timeline`
makes one from the runtime's records in their JSON form (pure, no I/O);
:func:`timeline_from_state` reads them from a cluster's state directory
(``controller.json`` through :func:`goodput_jax.cluster.record.read_state`,
``cluster.json``, each job's ``progress.jsonl`` and goodput store). :func:`render_html` writes the page; :func:`write_cluster_report` does both
(what ``goodput-jax cluster report --state-dir D --html OUT`` calls).

Example:
    >>> jobs = {"j": {"status": "finished", "submitted": 0.0, "finished": 9.0, "restarts": 0,
    ...     "failures": 0, "events": [{"t": 0.0, "what": "submitted"},
    ...         {"t": 1.0, "what": "launched", "attempt": 0, "reason": "allocated"},
    ...         {"t": 9.0, "what": "finished"}],
    ...     "launches": [{"t": 1.0, "attempt": 0, "reason": "allocated",
    ...                   "allocation": ["n0", "n0"], "type": "a"}]}}
    >>> tl = build_timeline(jobs, nodes=[{"label": "n0", "accelerator_type": "a", "devices": 2}],
    ...                     now=10.0)
    >>> job = tl.jobs[0]
    >>> job.queued_before_start, job.jct, job.launches[0].end, job.launches[0].ended_by
    (1.0, 9.0, 9.0, 'finished')
"""

from __future__ import annotations

import dataclasses
import datetime
import html
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from goodput_jax.measure.productivity import ProductivityGoodput
from goodput_jax.report.labels import plural

__all__ = [
    "ClusterNode",
    "ClusterTimeline",
    "JobEvent",
    "JobSummary",
    "Launch",
    "PolicyRound",
    "Restart",
    "build_timeline",
    "render_html",
    "timeline_from_state",
    "write_cluster_report",
]

#: Events that end a running launch.
LAUNCH_ENDS = ("stopped", "stop forced", "node lost", "crashed", "finished", "cancelled",
               "failed", "controller restarted")
#: Events that start a restart (the first after a launch began).
RESTART_CAUSES = ("stop requested", "node lost", "crashed", "controller restarted",
                  "stop forced")


# ---------------------------------------------------------------------- the input
@dataclass(frozen=True)
class ClusterNode:
    """One node that held devices (``alive``: in the node table at the report's end)."""

    label: str
    accelerator_type: str | None
    devices: int
    alive: bool = True


@dataclass(frozen=True)
class Launch:
    """One launch of a job: ``allocation`` (node labels, one per device) from ``start``
    to ``end`` (None: still running), ended by the event ``ended_by``."""

    job: str
    attempt: int
    start: float
    end: float | None
    allocation: tuple[str, ...]
    accelerator_type: str | None
    reason: str
    ended_by: str | None = None

    def __post_init__(self) -> None:
        if self.end is not None and self.end < self.start:
            raise ValueError(f"launch {self.job}#{self.attempt}: end ({self.end}) < start "
                             f"({self.start})")


@dataclass(frozen=True)
class JobEvent:
    """One event of a job's history (``detail``: its extra fields, as text)."""

    t: float
    what: str
    detail: str = ""


@dataclass(frozen=True)
class Restart:
    """A restart: ``cause`` at ``requested``, relaunched (attempt ``attempt``) at
    ``launched``, its first step logged at ``first_step`` (None: none logged)."""

    job: str
    attempt: int
    cause: str
    requested: float
    launched: float
    first_step: float | None

    @property
    def cost(self) -> float:
        """Seconds from the cause to the first step after it (to the relaunch when no
        step was logged)."""
        end = self.first_step if self.first_step is not None else self.launched
        return max(end - self.requested, 0.0)


@dataclass(frozen=True)
class JobSummary:
    """One job: its status, history, restarts and measures.

    Attributes:
        queued_before_start: seconds from submission to the first launch (to the
            report's end when it never ran).
        between_launches: seconds without a running launch after the first one, before
            it finished (restarts and requeues).
        jct: submission to finish (None: not finished).
        goodput: its measured goodput in % (None: no store or no events).
        productivity: its ML Productivity Goodput (fractions): scheduling goodput from
            the runtime's timeline of the job, runtime and program goodput from its
            store (None: no store or no events).
    """

    name: str
    status: str
    submitted: float
    finished: float | None
    launches: tuple[Launch, ...]
    events: tuple[JobEvent, ...]
    restarts: tuple[Restart, ...]
    failures: int
    queued_before_start: float
    between_launches: float
    jct: float | None
    goodput: float | None
    events_dropped: int = 0
    productivity: ProductivityGoodput | None = None


@dataclass(frozen=True)
class PolicyRound:
    """A scheduling round: its policy, the jobs it changed, their new allocations and
    (where known) the ones they had before."""

    t: float
    policy: str
    changed: tuple[str, ...]
    allocations: Mapping[str, tuple[str, ...]]
    previous: Mapping[str, tuple[str, ...]]


@dataclass(frozen=True)
class ClusterTimeline:
    """Everything the page shows, from ``start`` to ``end`` (POSIX seconds)."""

    nodes: tuple[ClusterNode, ...]
    jobs: tuple[JobSummary, ...]
    rounds: tuple[PolicyRound, ...]
    start: float
    end: float
    rounds_without_change: int = 0


# ---------------------------------------------------------------------- building
def _num(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{what} must be a finite time in seconds, got {value!r}")
    return float(value)


def _detail(event: Mapping[str, Any]) -> str:
    parts = []
    for k, v in event.items():
        if k in ("t", "what") or v is None or v == []:
            continue
        if isinstance(v, list) and all(isinstance(x, str) for x in v):
            v = _alloc_text(v)
        parts.append(f"{k}={v}")
    return ", ".join(parts)


def _alloc_text(alloc: Sequence[str]) -> str:
    """``['n0', 'n0', 'n1']`` -> ``'n0x2 n1'``; ``[]`` -> ``'none'``."""
    if not alloc:
        return "none"
    counts: dict[str, int] = {}
    for n in alloc:
        counts[n] = counts.get(n, 0) + 1
    return " ".join(f"{n}\u00d7{c}" if c > 1 else n for n, c in sorted(counts.items()))


def _job_summary(name: str, rec: Mapping[str, Any], progress: Sequence[Mapping[str, Any]],
                 goodput: float | None, end: float,
                 productivity: ProductivityGoodput | None = None) -> JobSummary:
    submitted = _num(rec.get("submitted", 0.0), f"job {name!r}: submitted")
    finished = rec.get("finished")
    finished = None if finished is None else _num(finished, f"job {name!r}: finished")
    raw_events = sorted((e for e in rec.get("events") or () if "t" in e),
                        key=lambda e: e["t"])  # stable: same-time events keep their order
    events = tuple(JobEvent(_num(e["t"], f"job {name!r}: event time"), str(e.get("what", "")),
                            _detail(e)) for e in raw_events)
    raw_launches = sorted(rec.get("launches") or (), key=lambda x: (x["t"], x.get("attempt", 0)))
    launched_at = {int(e["attempt"]): i for i, e in enumerate(raw_events)
                   if e.get("what") == "launched" and "attempt" in e}
    launches: list[Launch] = []
    for i, la in enumerate(raw_launches):
        start = _num(la["t"], f"job {name!r}: launch time")
        attempt = int(la.get("attempt", i))
        nxt = _num(raw_launches[i + 1]["t"], "launch time") if i + 1 < len(raw_launches) else None
        # the first ending event after this launch's own "launched" event (after its
        # start when that event was dropped from a bounded history)
        first = launched_at.get(attempt)
        after = (events[first + 1:] if first is not None
                 else [e for e in events if e.t > start])
        stop, by = None, None
        for e in after:
            if nxt is not None and e.t > nxt:
                break
            if e.what in LAUNCH_ENDS:
                stop, by = e.t, e.what
                break
        if stop is None and nxt is not None:
            stop, by = nxt, "relaunched"
        launches.append(Launch(name, attempt, start, stop, tuple(la.get("allocation") or ()),
                               la.get("type"), str(la.get("reason", "")), by))
    first_step: dict[int, float] = {}
    for p in progress:
        if p.get("event") == "step" and "attempt" in p and "t" in p:
            a = int(p["attempt"])
            first_step[a] = min(first_step.get(a, math.inf), float(p["t"]))
    restarts = []
    for prev, la in zip(launches, launches[1:]):
        causes = [e for e in events if prev.start <= e.t <= la.start and e.what in RESTART_CAUSES]
        cause = causes[0] if causes else None
        restarts.append(Restart(name, la.attempt, cause.what if cause else la.reason,
                                cause.t if cause else (prev.end or la.start), la.start,
                                first_step.get(la.attempt)))
    stop_at = finished if finished is not None else end
    queued = (launches[0].start if launches else stop_at) - submitted
    between = 0.0
    for prev, la in zip(launches, launches[1:]):
        between += max(la.start - (prev.end if prev.end is not None else la.start), 0.0)
    if launches and launches[-1].end is not None and finished is None:
        between += max(end - launches[-1].end, 0.0)  # ended and waiting for its next launch
    return JobSummary(name, str(rec.get("status", "")), submitted, finished, tuple(launches),
                      events, tuple(restarts), int(rec.get("failures", 0) or 0),
                      max(queued, 0.0), between,
                      None if finished is None else finished - submitted, goodput,
                      int(rec.get("events_dropped", 0) or 0), productivity)


def build_timeline(jobs: Mapping[str, Mapping[str, Any]], rounds: Sequence[Mapping[str, Any]] = (),
                   nodes: Sequence[Mapping[str, Any]] = (), *,
                   progress: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
                   goodput: Mapping[str, float | None] | None = None,
                   productivity: Mapping[str, ProductivityGoodput | None] | None = None,
                   now: float | None = None) -> ClusterTimeline:
    """A :class:`ClusterTimeline` from the runtime's records in their JSON form.

    Args:
        jobs: name -> the job's record (``ClusterClient.status()``'s form: ``status``,
            ``submitted``, ``finished``, ``failures``, ``events`` [``t``, ``what`` ...],
            ``launches`` [``t``, ``attempt``, ``reason``, ``allocation``, ``type``]).
        rounds: the controller's rounds (``t``, ``policy``, ``changed``, ``allocations``).
        nodes: the live nodes (``label``, ``accelerator_type``, ``devices``); nodes only
            seen in launches are added as lost.
        progress: name -> the job's progress log (``event``, ``attempt``, ``t``).
        goodput: name -> measured goodput in %.
        productivity: name -> the job's ML Productivity Goodput
            (``GoodputCalculator.get_productivity_goodput(scheduling=...)``).
        now: the report's end (default: the latest time in the records).

    Raises:
        ValueError: a time that is not a finite number, naming the job.
    """
    progress = progress or {}
    goodput = goodput or {}
    productivity = productivity or {}
    for n, p in productivity.items():
        if p is not None and not isinstance(p, ProductivityGoodput):
            raise TypeError(f"productivity[{n!r}] ({p!r}) must be a ProductivityGoodput or None")
    times = [_num(r["t"], "round time") for r in rounds if "t" in r]
    for name, rec in jobs.items():
        times += [_num(e["t"], f"job {name!r}: event time") for e in rec.get("events") or ()
                  if "t" in e]
        times += [_num(rec[k], f"job {name!r}: {k}") for k in ("submitted", "finished")
                  if rec.get(k) is not None]
    if now is None:
        now = max(times) if times else 0.0
    end = _num(now, "now")
    summaries = tuple(_job_summary(n, jobs[n], progress.get(n, ()), goodput.get(n), end,
                                   productivity.get(n))
                      for n in sorted(jobs))
    start = min([j.submitted for j in summaries] + times + [end])
    live = {str(n["label"]): ClusterNode(str(n["label"]), n.get("accelerator_type"),
                                         int(n.get("devices", 0)), True) for n in nodes}
    seen: dict[str, tuple[str | None, int]] = {}
    for j in summaries:
        for la in j.launches:
            for label in set(la.allocation):
                t, d = seen.get(label, (la.accelerator_type, 0))
                seen[label] = (t or la.accelerator_type, max(d, la.allocation.count(label)))
    for label, (t, d) in seen.items():
        if label not in live:
            live[label] = ClusterNode(label, t, d, False)
    previous: dict[str, tuple[str, ...]] = {}
    policy_rounds, quiet = [], 0
    for r in sorted(rounds, key=lambda r: r["t"]):
        allocs = {k: tuple(v) for k, v in (r.get("allocations") or {}).items()}
        changed = tuple(r.get("changed") or ())
        if changed:
            policy_rounds.append(PolicyRound(_num(r["t"], "round time"), str(r.get("policy", "")),
                                             changed, allocs,
                                             {k: previous.get(k, ()) for k in changed}))
        else:
            quiet += 1
        previous.update(allocs)
    order = sorted(live.values(), key=lambda n: (n.accelerator_type or "", n.label))
    return ClusterTimeline(tuple(order), summaries, tuple(policy_rounds), start, end, quiet)


def timeline_from_state(state_dir: str | os.PathLike, *, now: float | None = None,
                        goodput: bool = True) -> ClusterTimeline:
    """Read a cluster's state directory into a :class:`ClusterTimeline`.

    Reads ``controller.json`` (jobs and rounds), ``cluster.json`` (live nodes), each
    job's progress log and, with ``goodput``, each job's measured goodput and ML
    Productivity Goodput from its store (a store that cannot be read gives None): the
    job's scheduling timeline (:func:`goodput_jax.cluster.record.scheduling_timeline`,
    to the report's end while it runs) is the calculator's ``scheduling`` input.

    Raises:
        ValueError: ``state_dir`` holds no controller state.
    """
    from goodput_jax.cluster.record import read_state, scheduling_timeline
    from goodput_jax.cluster.state import StateDir

    sd = StateDir(state_dir)
    if not os.path.exists(sd.controller_path):
        raise ValueError(f"state_dir ({os.fspath(state_dir)!r}) holds no controller state "
                         f"(no controller.json)")
    state = read_state(sd.root)  # the typed records, any saved format version
    jobs = {n: rec.to_json() for n, rec in state.jobs.items()}
    nodes = (sd.read_json(sd.cluster_path, {}) or {}).get("nodes") or []
    progress = {n: sd.read_progress(n) for n in jobs}
    tl = build_timeline(jobs, state.rounds, nodes, progress=progress, now=now)
    if not goodput:
        return tl
    measured = []
    for j in tl.jobs:
        rec = state.jobs[j.name]
        sched = scheduling_timeline(rec, now=tl.end)
        score, prod = _measured(j.name, rec.spec.store if rec.spec is not None else None,
                                sched, tl.end)
        measured.append(dataclasses.replace(j, goodput=score, productivity=prod))
    return dataclasses.replace(tl, jobs=tuple(measured))


def _measured(name: str, store: str | None, scheduling: Any, end: float
              ) -> tuple[float | None, ProductivityGoodput | None]:
    """The job's measured goodput (%) and ML Productivity Goodput from its store, with
    the cluster's scheduling timeline of it (None for what cannot be read)."""
    if not store:
        return None, None
    if store.startswith("sqlite:///") and not os.path.exists(store[len("sqlite:///"):]):
        return None, None
    from goodput_jax.measure.calculator import GoodputCalculator

    try:
        # measured to the report's end (a running job's open time ends there too)
        calc = GoodputCalculator(name, store=store, clock=lambda: end)
    except Exception:  # noqa: BLE001 - an unreachable store: no figure
        return None, None
    try:
        try:
            score = float(calc.get_job_goodput()[0])
        except Exception:  # noqa: BLE001 - a store without this job's events: no figure
            return None, None
        prod = None
        if scheduling.total_s > 0:
            try:
                prod = calc.get_productivity_goodput(scheduling, now=end)
            except Exception:  # noqa: BLE001 - no figure rather than no report
                prod = None
        return score, prod
    finally:
        calc.store.close()


# ---------------------------------------------------------------------- rendering
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
"""


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
            got = []
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
    for node, d in rows:
        if prev is not None and node.label != prev:
            y += gap
        ys.append(y)
        node_gap[(node.label, d)] = y
        y += row_h
        prev = node.label
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
            out.append(f'<text x="{left - 6}" y="{yy + 13 + row_h}" text-anchor="end" '
                       f'fill="#777" font-size="11">{kind} \u00b7 {node.devices} dev</text>'
                       if node.devices > 1 else
                       f'<title>{kind}</title>')
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
                           f"{_alloc_text(la.allocation)}: {la.start - tl.start:.1f}-"
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
    head = ("<tr><th class='l'>job</th><th class='l'>status</th><th>submitted (s)</th>"
            "<th>queued before start (s)</th><th>between launches (s)</th><th>launches</th>"
            "<th>restarts</th><th>restart cost (s)</th><th>crashes</th><th>JCT (s)</th>"
            "<th>goodput (%)</th></tr>")
    rows = []
    for i, j in enumerate(tl.jobs):
        cost = sum(r.cost for r in j.restarts)
        rows.append(
            f"<tr id='job-{html.escape(j.name)}'><td class='l'><span class='swatch' "
            f"style='background:{_color(i)}'></span>{html.escape(j.name)}</td>"
            f"<td class='l'>{html.escape(j.status)}</td><td>{j.submitted - tl.start:.1f}</td>"
            f"<td>{j.queued_before_start:.1f}</td><td>{j.between_launches:.1f}</td>"
            f"<td>{len(j.launches)}</td><td>{len(j.restarts)}</td>"
            f"<td>{cost:.1f}</td><td>{j.failures}</td><td>{_s(j.jct)}</td>"
            f"<td>{_s(j.goodput)}</td></tr>")
    return f"<table class='jobs'>{head}{''.join(rows)}</table>"


def _pct(x: float | None) -> str:
    return "\u2013" if x is None or not math.isfinite(x) else f"{100 * x:.1f}"


def _productivity_table(tl: ClusterTimeline) -> str:
    """Per job: scheduling, runtime and program goodput, their product, ETTR, MFU."""
    head = ("<tr><th class='l'>job</th><th>scheduling goodput (%)</th>"
            "<th>runtime goodput (%)</th><th>program goodput (%)</th>"
            "<th>ML Productivity Goodput (%)</th><th>ETTR (%)</th><th>MFU (%)</th>"
            "<th>held / job time (s)</th><th class='l'>note</th></tr>")
    rows = []
    for i, j in enumerate(tl.jobs):
        p = j.productivity
        if p is None:
            note = "no goodput store" if j.goodput is None else "no scheduling time"
            cells = "".join("<td>\u2013</td>" for _ in range(7))
        else:
            note = ("no program cost recorded (no MFU, no product)"
                    if not math.isfinite(p.program_goodput) else "")
            cells = (f"<td class='sched'>{_pct(p.scheduling_goodput)}</td>"
                     f"<td class='runtime'>{_pct(p.runtime_goodput)}</td>"
                     f"<td class='program'>{_pct(p.program_goodput)}</td>"
                     f"<td class='product'><b>{_pct(p.ml_productivity_goodput)}</b></td>"
                     f"<td>{_pct(p.ettr)}</td><td>{_pct(p.mfu)}</td>"
                     f"<td>{p.held_s:.1f} / {p.total_s:.1f}</td>")
        rows.append(f"<tr id='productivity-{html.escape(j.name)}'><td class='l'><span "
                    f"class='swatch' style='background:{_color(i)}'></span>"
                    f"{html.escape(j.name)}</td>{cells}"
                    f"<td class='l note'>{html.escape(note)}</td></tr>")
    return f"<table class='productivity'>{head}{''.join(rows)}</table>"


def _restarts_table(tl: ClusterTimeline) -> str:
    rs = [r for j in tl.jobs for r in j.restarts]
    if not rs:
        return "<p class='explain' id='no-restarts'>No job restarted.</p>"
    rows = []
    for r in sorted(rs, key=lambda r: r.requested):
        rows.append(f"<tr><td class='l'>{html.escape(r.job)}</td><td>{r.attempt}</td>"
                    f"<td class='l'>{html.escape(r.cause)}</td>"
                    f"<td>{r.requested - tl.start:.1f}</td><td>{r.launched - tl.start:.1f}</td>"
                    f"<td>{_s(None if r.first_step is None else r.first_step - tl.start)}</td>"
                    f"<td><b>{r.cost:.1f}</b></td></tr>")
    return ("<table class='restarts'><tr><th class='l'>job</th><th>new attempt</th>"
            "<th class='l'>cause</th><th>at (s)</th><th>relaunched (s)</th>"
            "<th>first step (s)</th><th>cost (s)</th></tr>" + "".join(rows) + "</table>")


def _rounds_table(tl: ClusterTimeline) -> str:
    if not tl.rounds:
        return "<p class='explain' id='no-rounds'>No round changed an allocation.</p>"
    rows = []
    for r in tl.rounds:
        moves = "<br>".join(
            f"{html.escape(k)}: {html.escape(_alloc_text(r.previous.get(k, ())))} \u2192 "
            f"{html.escape(_alloc_text(r.allocations.get(k, ())))}" for k in r.changed)
        rows.append(f"<tr><td>{r.t - tl.start:.1f}</td><td class='l'>{html.escape(r.policy)}"
                    f"</td><td class='l'>{moves}</td></tr>")
    return ("<table class='rounds'><tr><th>at (s)</th><th class='l'>policy</th>"
            "<th class='l'>changes (old \u2192 new devices)</th></tr>" + "".join(rows)
            + "</table>")


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


def render_html(tl: ClusterTimeline, path: str | os.PathLike, *, title: str = "cluster") -> str:
    """Write the cluster report page for ``tl`` to ``path``; returns the path."""
    if not isinstance(tl, ClusterTimeline):
        raise TypeError(f"tl must be a ClusterTimeline, got {type(tl).__name__}")
    stamp = datetime.datetime.fromtimestamp(tl.start, datetime.UTC).strftime(
        "%Y-%m-%d %H:%M:%S UTC")
    devices = sum(n.devices for n in tl.nodes if n.alive)
    done = [j for j in tl.jobs if j.jct is not None]
    restarts = [r for j in tl.jobs for r in j.restarts]
    head = (f"{plural(len(tl.jobs), 'job')} ({len(done)} finished) on "
            f"{plural(sum(n.alive for n in tl.nodes), 'node')} ({plural(devices, 'device')})"
            f" over {tl.end - tl.start:.1f} s; {plural(len(restarts), 'restart')} costing "
            f"{sum(r.cost for r in restarts):.1f} s in all")
    if done:
        head += f"; mean JCT {sum(j.jct for j in done) / len(done):.1f} s"
    legend = "".join(f"<span class='item'><span class='swatch' style='background:{_color(i)}'>"
                     f"</span>{html.escape(j.name)}</span>" for i, j in enumerate(tl.jobs))
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Cluster report: {html.escape(title)}</title>
<style>{_CSS}</style></head>
<body>
<h1>Cluster report: {html.escape(title)}</h1>
<p class="meta">from {stamp} (time 0) to {tl.end - tl.start:.1f} s</p>
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


def write_cluster_report(state_dir: str | os.PathLike, path: str | os.PathLike, *,
                         now: float | None = None, goodput: bool = True) -> str:
    """Read ``state_dir`` and write its report page to ``path`` (the CLI's entry point).

    Raises:
        ValueError: no controller state there, or no directory for ``path``.
    """
    parent = os.path.dirname(os.path.abspath(os.fspath(path)))
    if not os.path.isdir(parent):
        raise ValueError(f"path ({os.fspath(path)!r}): directory {parent!r} does not exist")
    tl = timeline_from_state(state_dir, now=now, goodput=goodput)
    return render_html(tl, path, title=os.path.basename(os.path.abspath(os.fspath(state_dir))))
