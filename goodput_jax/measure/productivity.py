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

#: the reasons a span may carry; any other non-empty string is accepted too (free text
#: from a source that knows better), these are the ones the package itself writes.
HELD_REASONS = ("running",)
WAIT_REASONS = ("submitted", "queued", "pending", "stopping", "relaunching",
                "elastic_wait", "elastic_reinit", "disrupted", "restarting")


def _finite(value, name: str) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{name} ({value!r}) must be a finite number")
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} ({value!r}) must be a finite number") from None
    if not math.isfinite(out):
        raise ValueError(f"{name} ({value!r}) must be a finite number")
    return out


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
