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
import os
from typing import Any, NamedTuple

from goodput_jax.cluster.report_page import gantt_svg, render_html
from goodput_jax.cluster.report_timeline import (
    LAUNCH_ENDS,
    RESTART_CAUSES,
    ClusterNode,
    ClusterTimeline,
    JobEvent,
    JobSummary,
    Launch,
    PolicyRound,
    Restart,
    build_timeline,
)
from goodput_jax.measure.advice import CheckpointAdvice
from goodput_jax.measure.productivity import ProductivityGoodput

__all__ = [
    "LAUNCH_ENDS",
    "RESTART_CAUSES",
    "ClusterNode",
    "ClusterTimeline",
    "JobEvent",
    "JobSummary",
    "Launch",
    "PolicyRound",
    "Restart",
    "build_timeline",
    "gantt_svg",
    "render_html",
    "nodes_of_run",
    "timeline_from_state",
    "write_cluster_report",
]


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
    nodes = nodes_of_run(sd.read_json(sd.cluster_path, {}) or {})
    progress = {n: sd.read_progress(n) for n in jobs}
    tl = build_timeline(jobs, state.rounds, nodes, progress=progress, now=now)
    if not goodput:
        return tl
    from goodput_jax.cluster.checkpointing import NodeLossBook, reliability_path

    node_mtbf = NodeLossBook.from_json(sd.read_json(reliability_path(sd.root))).node_mtbf_s()
    measured = []
    for j in tl.jobs:
        rec = state.jobs[j.name]
        sched = scheduling_timeline(rec, now=tl.end)
        spans = max((len(set(la.allocation)) for la in j.launches[-1:]), default=1)
        m = _measured(j.name, rec.spec.store if rec.spec is not None else None,
                      sched, tl.end, node_mtbf / max(spans, 1))
        measured.append(dataclasses.replace(j, goodput=m.goodput, productivity=m.productivity,
                                            checkpoints=m.checkpoints))
    return dataclasses.replace(tl, jobs=tuple(measured))


class Measured(NamedTuple):
    """What a job's store says (None: cannot be read): its goodput (%), ML Productivity
    Goodput, and the checkpoint advice at the cluster's MTBF over the job's nodes."""

    goodput: float | None = None
    productivity: ProductivityGoodput | None = None
    checkpoints: CheckpointAdvice | None = None


def nodes_of_run(cluster: dict[str, Any]) -> list[dict[str, Any]]:
    """Every node of the run from ``cluster.json``: its live ``nodes`` and, from
    ``nodes_seen`` (every node the controller ever saw), the ones gone since
    (``alive``: False), each with its accelerator type and devices.

    Example:
        >>> nodes_of_run({"nodes": [{"label": "n0", "accelerator_type": "a", "devices": 2}],
        ...               "nodes_seen": [{"label": "n0", "accelerator_type": "a", "devices": 2},
        ...                              {"label": "n1", "accelerator_type": "a", "devices": 2}]})
        ... # doctest: +NORMALIZE_WHITESPACE
        [{'label': 'n0', 'accelerator_type': 'a', 'devices': 2},
         {'label': 'n1', 'accelerator_type': 'a', 'devices': 2, 'alive': False}]
    """
    live = list(cluster.get("nodes") or [])
    labels = {n["label"] for n in live}
    gone = [{**n, "alive": False} for n in cluster.get("nodes_seen") or []
            if n["label"] not in labels]
    return live + gone


def _measured(name: str, store: str | None, scheduling: Any, end: float,
              mtbf_s: float) -> Measured:
    """The job's measured goodput (%), ML Productivity Goodput (with the cluster's
    scheduling timeline of it) and checkpoint advice (at ``mtbf_s``) from its store."""
    if not store:
        return Measured()
    if store.startswith("sqlite:///") and not os.path.exists(store[len("sqlite:///"):]):
        return Measured()
    from goodput_jax.measure.calculator import GoodputCalculator

    try:
        # measured to the report's end (a running job's open time ends there too)
        calc = GoodputCalculator(name, store=store, clock=lambda: end)
    except Exception:  # noqa: BLE001 - an unreachable store: no figure
        return Measured()
    try:
        try:
            score = float(calc.get_job_goodput()[0])
        except Exception:  # noqa: BLE001 - a store without this job's events: no figure
            return Measured()
        prod = advice = None
        if scheduling.total_s > 0:
            try:
                prod = calc.get_productivity_goodput(scheduling, now=end)
            except Exception:  # noqa: BLE001 - no figure rather than no report
                prod = None
        try:
            advice = calc.get_checkpoint_advice(mtbf_s=mtbf_s)
        except ValueError:  # no completed save or no step yet: no advice
            advice = None
        return Measured(score, prod, advice)
    finally:
        calc.store.close()


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
    return render_html(tl, path, source=os.path.abspath(os.fspath(state_dir)))
