"""The cluster report's input: a job-by-job timeline of a cluster's records (pure, no I/O).

:func:`build_timeline` turns the runtime's records in their JSON form (the controller's job
records, rounds and node table, each job's progress log) into a :class:`ClusterTimeline`
of frozen dataclasses: launches with the events that ended them, restarts and their cost,
queueing, JCT. :mod:`goodput_jax.cluster.report_page` draws it;
:mod:`goodput_jax.cluster.report` reads it from a state directory.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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
    "alloc_text",
    "build_timeline",
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
    #: the job's own last ``"checkpoint advice"`` progress record (what it acted on through
    #: ``ctx.should_checkpoint``: ``interval_steps``, ``save_cost_s``, ``mtbf_s``,
    #: ``predicted_goodput`` ...), None when it saved at intervals of its own
    acted_on: Mapping[str, Any] | None = None
    #: the checkpoint advice from the job's store at the cluster's MTBF (its save cost, its
    #: own interval and the goodput predicted there, the advised interval and its goodput)
    checkpoints: CheckpointAdvice | None = None


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
            v = alloc_text(v)
        parts.append(f"{k}={v}")
    return ", ".join(parts)


def alloc_text(alloc: Sequence[str]) -> str:
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
    advised = [p for p in progress if p.get("event") == "checkpoint advice"]
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
                      int(rec.get("events_dropped", 0) or 0), productivity,
                      dict(advised[-1]) if advised else None)


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
        nodes: every node of the run (``label``, ``accelerator_type``, ``devices``, and
            ``alive``: False for a node that is gone, default True); nodes only seen in
            launches are added as lost, with the devices their launches used.
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
                                         int(n.get("devices", 0)), bool(n.get("alive", True)))
            for n in nodes}
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
