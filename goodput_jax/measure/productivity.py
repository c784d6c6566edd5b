"""ML Productivity Goodput: scheduling x runtime x program goodput, as typed records.

Light core: plain numbers in, frozen dataclasses out; no JAX. The runtime capture
(``goodput_jax.runtime``) reads each compiled step's cost from XLA and hands it here as
a :class:`ProgramCost`; the cluster runtime (or the recorder's elastic/disruption events)
hands a :class:`SchedulingTimeline`.

Definitions (see docs/productivity.md for the sources):

* scheduling goodput = time the job held all its resources / total wall time;
* runtime goodput = productive time / time held (today's goodput, over the held time);
* program goodput = roofline ideal step time / device-true step time;
* ML Productivity Goodput = scheduling x runtime x program;
* ETTR (Meta) = productive time / total wall time including scheduling waits.

Example:
    >>> tl = SchedulingTimeline.of([
    ...     SchedulingSpan(0.0, 30.0, held=False, reason="queued"),
    ...     SchedulingSpan(30.0, 100.0, held=True, reason="running"),
    ... ])
    >>> tl.total_s, tl.held_s, round(tl.scheduling_goodput, 2)
    (100.0, 70.0, 0.7)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable

# program goodput's roofline (split out; its names stay importable from here)
from goodput_jax.measure.roofline import (  # noqa: F401
    PEAK_TABLE,
    RIDGE_BAND,
    DevicePeak,
    ProgramCost,
    ProgramGoodput,
    ProgramStats,
    _finite,
    combine_programs,
    lookup_peak,
    program_stats,
)

#: the reasons a span may carry; any other non-empty string is accepted too (free text
#: from a source that knows better), these are the ones the package itself writes.
HELD_REASONS = ("running",)
WAIT_REASONS = ("submitted", "queued", "pending", "stopping", "relaunching",
                "elastic_wait", "elastic_reinit", "disrupted", "restarting")


@dataclasses.dataclass(frozen=True, slots=True)
class SchedulingSpan:
    """One stretch of a job's wall time, with or without its full allocation.

    Attributes:
        start: UTC seconds since the epoch (or any common clock) where the span begins.
        end: where it ends (``end >= start``).
        held: True while the job held every resource it needs (running with its full
            allocation); False while it waited (queued, stopping, relaunching, ...).
        reason: what the job was doing: ``'queued'``, ``'running'``, ``'stopping'``,
            ``'relaunching'``, ``'elastic_wait'``, ... (free text; see ``WAIT_REASONS``).

    Example:
        >>> SchedulingSpan(0.0, 5.0, held=False, reason="queued").duration
        5.0
    """

    start: float
    end: float
    held: bool
    reason: str

    def __post_init__(self) -> None:
        start = _finite(self.start, "start")
        end = _finite(self.end, "end")
        if end < start:
            raise ValueError(f"end ({self.end!r}) must be >= start ({self.start!r})")
        if not isinstance(self.held, bool):
            raise ValueError(f"held ({self.held!r}) must be a bool")
        if not isinstance(self.reason, str) or not self.reason:
            raise ValueError(f"reason ({self.reason!r}) must be a non-empty string")
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "end", end)

    @property
    def duration(self) -> float:
        """``end - start`` in seconds."""
        return self.end - self.start


@dataclasses.dataclass(frozen=True, slots=True)
class SchedulingTimeline:
    """A job's wall time as ordered, non-overlapping :class:`SchedulingSpan` s.

    Gaps between spans are allowed (time nobody accounted for counts in neither the
    held nor the total time); overlaps are refused.

    Example:
        >>> tl = SchedulingTimeline.of([SchedulingSpan(0, 10, True, "running")])
        >>> tl.scheduling_goodput
        1.0
    """

    spans: tuple[SchedulingSpan, ...] = ()

    def __post_init__(self) -> None:
        spans = tuple(self.spans)
        for i, s in enumerate(spans):
            if not isinstance(s, SchedulingSpan):
                raise ValueError(f"spans[{i}] ({s!r}) must be a SchedulingSpan")
        for i in range(1, len(spans)):
            if spans[i].start < spans[i - 1].end - 1e-9:
                raise ValueError(
                    f"spans[{i}] (start {spans[i].start!r}) overlaps spans[{i - 1}] "
                    f"(end {spans[i - 1].end!r}); sort them and remove overlaps")
        object.__setattr__(self, "spans", spans)

    @classmethod
    def of(cls, spans: Iterable[SchedulingSpan]) -> SchedulingTimeline:
        """A timeline from spans in any order (sorted by start)."""
        return cls(tuple(sorted(spans, key=lambda s: (s.start, s.end))))

    @property
    def start(self) -> float | None:
        """The first span's start (None when empty)."""
        return self.spans[0].start if self.spans else None

    @property
    def end(self) -> float | None:
        """The last span's end (None when empty)."""
        return self.spans[-1].end if self.spans else None

    @property
    def total_s(self) -> float:
        """Seconds covered by spans."""
        return float(sum(s.duration for s in self.spans))

    @property
    def held_s(self) -> float:
        """Seconds covered by held spans."""
        return float(sum(s.duration for s in self.spans if s.held))

    @property
    def scheduling_goodput(self) -> float:
        """``held_s / total_s`` as a fraction (1.0 for an empty timeline)."""
        total = self.total_s
        return self.held_s / total if total > 0 else 1.0

    def by_reason(self) -> dict[str, float]:
        """Seconds per reason."""
        out: dict[str, float] = {}
        for s in self.spans:
            out[s.reason] = out.get(s.reason, 0.0) + s.duration
        return out

    def held_windows(self) -> tuple[tuple[float, float], ...]:
        """The held spans as ``(start, end)`` pairs, adjacent ones merged."""
        out: list[list[float]] = []
        for s in self.spans:
            if not s.held:
                continue
            if out and s.start <= out[-1][1] + 1e-9:
                out[-1][1] = max(out[-1][1], s.end)
            else:
                out.append([s.start, s.end])
        return tuple((a, b) for a, b in out)


# ----------------------------------------------------------------------------- the product
@dataclasses.dataclass(frozen=True, slots=True)
class ProductivityGoodput:
    """ML Productivity Goodput and its three factors (fractions in [0, 1]).

    Attributes:
        scheduling_goodput: ``held_s / total_s``.
        runtime_goodput: ``productive_s / held_s``.
        program_goodput: roofline ideal / device-true step time (NaN when no program cost
            was recorded; the product is then NaN too).
        ml_productivity_goodput: the product of the three.
        ettr: Meta's effective training time ratio, ``productive_s / total_s``.
        mfu: model FLOPs utilisation of the productive steps.
        total_s: wall time of the job, waits included.
        held_s: time the job held all its resources.
        productive_s: productive step time.
        scheduling_source: ``'timeline'`` (a given :class:`SchedulingTimeline`, e.g. the
            cluster runtime's) or ``'events'`` (derived from the recorder's events).
        timeline: the scheduling timeline used (None when the factors came from the
            calculator's running totals; ``get_scheduling_timeline()`` gives the spans).
        program: the :class:`ProgramGoodput` behind ``program_goodput``.
    """

    scheduling_goodput: float
    runtime_goodput: float
    program_goodput: float
    ml_productivity_goodput: float
    ettr: float
    mfu: float
    total_s: float
    held_s: float
    productive_s: float
    scheduling_source: str
    timeline: SchedulingTimeline | None
    program: ProgramGoodput

    def as_dict(self) -> dict:
        """The scalars as a flat JSON-ready dict (what a report row or a monitor writes).

        Example:
            >>> tl = SchedulingTimeline.of([SchedulingSpan(0, 10, True, "running")])
            >>> productivity(tl, 5.0, ProgramGoodput((), 0.5, 0.4, 1)).as_dict()["ettr"]
            0.5
        """
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in ("timeline", "program")}


def productivity(timeline: SchedulingTimeline, productive_s: float, program: ProgramGoodput,
                 source: str = "timeline") -> ProductivityGoodput:
    """Combine a scheduling timeline, productive time and program goodput.

    Productive time above the held time (a timeline that missed some held time) is
    clipped, so runtime goodput stays <= 1; so are program goodput and MFU above 1 (a
    :class:`ProgramGoodput` made by hand: :func:`combine_programs` raises the peak a step
    beat instead, and records it), so no factor above 100% reaches a report, a TensorBoard
    tag or a metric.

    Example:
        >>> tl = SchedulingTimeline.of([SchedulingSpan(0, 20, False, "queued"),
        ...                             SchedulingSpan(20, 100, True, "running")])
        >>> pg = ProgramGoodput((), 0.5, 0.4, 10)
        >>> r = productivity(tl, 60.0, pg)
        >>> r.scheduling_goodput, r.runtime_goodput, round(r.ml_productivity_goodput, 6), r.ettr
        (0.8, 0.75, 0.3, 0.6)
    """
    return productivity_of(timeline.total_s, timeline.held_s, productive_s, program, source,
                           timeline)


def productivity_of(total_s: float, held_s: float, productive_s: float, program: ProgramGoodput,
                    source: str = "events", timeline: SchedulingTimeline | None = None
                    ) -> ProductivityGoodput:
    """:func:`productivity` from the totals (seconds of wall time, held, productive).

    Example:
        >>> productivity_of(100.0, 80.0, 60.0, ProgramGoodput((), 0.5, 0.4, 1)).ettr
        0.6
    """
    total, held = float(total_s), float(held_s)
    prod = min(max(float(productive_s), 0.0), held)
    sched = held / total if total > 0 else math.nan
    runtime = prod / held if held > 0 else math.nan
    pg = min(program.program_goodput, 1.0)  # (NaN stays NaN)
    return ProductivityGoodput(
        scheduling_goodput=sched, runtime_goodput=runtime, program_goodput=pg,
        ml_productivity_goodput=sched * runtime * pg,
        ettr=prod / total if total > 0 else math.nan, mfu=min(program.mfu, 1.0),
        total_s=total, held_s=held, productive_s=prod, scheduling_source=source,
        timeline=timeline, program=program)


#: timeline categories (the engine's) during which a job outside the cluster runtime did
#: not hold its resources: waiting for slices, and the downtime after a disruption
NOT_HELD_CATEGORIES = {
    "ELASTIC_SLICE_DOWN": "elastic_wait",
    "ELASTIC_SCALE_UP": "elastic_wait",
}


def timeline_from_segments(segments: Iterable, crashes: Iterable = (), restarts: Iterable = ()
                           ) -> SchedulingTimeline:
    """A :class:`SchedulingTimeline` from the calculator's attributed time slices.

    Held unless waiting: elastic waits for slices (``ELASTIC_SLICE_DOWN`` /
    ``ELASTIC_SCALE_UP``) and, after a crash, the downtime until the next run's first
    event (``'relaunching'``) are not held; everything else (steps, loading, saves,
    re-initialisation, compiles) is held time.

    Args:
        segments: ``[start, end, category, ...]`` slices (``GoodputCalculator.timeline``).
        crashes: ``(time, run)`` of the last event of each crashed run.
        restarts: ``(time, run)`` of the first event of each later run.

    Example:
        >>> segs = [[0, 10, "PRODUCTIVE"], [10, 14, "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"],
        ...         [14, 20, "PRODUCTIVE"]]
        >>> tl = timeline_from_segments(segs, crashes=[(10, 0)], restarts=[(14, 1)])
        >>> tl.held_s, tl.total_s
        (16.0, 20.0)
    """
    down: list[tuple[float, float]] = []
    rs = sorted(float(t) for t, _ in restarts)
    for t, _ in crashes:
        nxt = next((r for r in rs if r >= float(t)), None)
        if nxt is not None and nxt > float(t):
            down.append((float(t), nxt))
    spans: list[SchedulingSpan] = []

    def add(a: float, b: float, held: bool, reason: str) -> None:
        if b <= a:
            return
        last = spans[-1] if spans else None
        if last is not None and last.held == held and last.reason == reason \
                and abs(last.end - a) < 1e-9:
            spans[-1] = SchedulingSpan(last.start, b, held, reason)
        else:
            spans.append(SchedulingSpan(a, b, held, reason))

    for seg in sorted(segments, key=lambda s: (float(s[0]), float(s[1]))):
        a, b, cat = float(seg[0]), float(seg[1]), str(seg[2])
        if spans and a < spans[-1].end:
            a = spans[-1].end
        if cat in NOT_HELD_CATEGORIES:
            add(a, b, False, NOT_HELD_CATEGORIES[cat])
            continue
        # split the slice where it overlaps a downtime window
        pos = a
        for d0, d1 in down:
            if d1 <= pos or d0 >= b:
                continue
            add(pos, max(pos, d0), True, "running")
            add(max(pos, d0), min(b, d1), False, "relaunching")
            pos = min(b, d1)
        add(pos, b, True, "running")
    return SchedulingTimeline(tuple(spans))
