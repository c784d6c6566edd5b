"""A job's time cut into attributed slices, as the one attribution engine returns them.

The report never re-derives an attribution rule: :func:`build_timeline` returns
:meth:`GoodputCalculator.timeline`, the calculator's own engine replayed in
record mode, in dataclasses. So the timeline's totals
equal :meth:`GoodputCalculator.get_job_goodput_details` to the float
(``tests/measure/test_engine.py`` checks it on live and finished jobs).

Example:
    >>> tl = build_timeline(store, "demo")                     # doctest: +SKIP
    >>> round(tl.totals()["PRODUCTIVE"], 3)                    # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from goodput_jax.measure.badput import BUCKET_NAMES, PRODUCTIVE
from goodput_jax.measure.calculator import GoodputCalculator, NoEventsError

__all__ = ["CATEGORY_NAMES", "NoEventsError", "Segment", "Timeline", "build_timeline"]

#: every timeline category: productive time, then the engine's badput buckets
CATEGORY_NAMES: tuple[str, ...] = (PRODUCTIVE, *BUCKET_NAMES)


@dataclasses.dataclass
class Segment:
    """One attributed slice of job time ``[start, end)`` (UTC seconds).

    Attributes:
        start, end: UTC seconds.
        category: one of :data:`CATEGORY_NAMES`.
        run: index of the run (process launch) in order of appearance.
        step: the step of a productive or wasted slice, else None.
        label: the custom badput label, else None.
    """

    start: float
    end: float
    category: str
    run: int
    step: int | None = None
    label: str | None = None

    @property
    def seconds(self) -> float:
        """``end - start``."""
        return self.end - self.start


@dataclasses.dataclass
class Timeline:
    """A job's time, cut into attributed segments.

    Attributes:
        segments: in time order (within a run); ``category`` is one of :data:`CATEGORY_NAMES`.
        restarts: ``(time, run index)`` where a new run (process launch) began.
        crashes: ``(time, run index)`` of the last event of runs that ended without a job end.
        t0: the job's first attributed time (the plots' origin).
        run_ids: run ids in order of appearance.
    """

    segments: list[Segment]
    restarts: list[tuple[float, int]]
    crashes: list[tuple[float, int]]
    t0: float
    run_ids: list[str]

    def totals(self) -> dict[str, float]:
        """Seconds per category (equal to the calculator's buckets)."""
        out = dict.fromkeys(CATEGORY_NAMES, 0.0)
        for s in self.segments:
            out[s.category] += s.seconds
        return out


def build_timeline(store: Any, job_name: str, now: float | None = None) -> Timeline:
    """The job's attributed time slices, exactly as the calculator's engine attributes them.

    Reads the store read-only through the public
    :meth:`GoodputCalculator.timeline` and wraps its slices in :class:`Segment`.

    Args:
        store: an EventStore.
        job_name: the job.
        now: "now" in UTC seconds for a live job (default ``time.time()``).

    Returns:
        A :class:`Timeline`.

    Raises:
        NoEventsError: (a ValueError) the job has no events; the message names the job.

    Example:
        >>> tl = build_timeline(store, "demo")            # doctest: +SKIP
        >>> sum(tl.totals().values())                    # doctest: +SKIP
        109.729
    """
    now = time.time() if now is None else float(now)
    out = GoodputCalculator(job_name, None, store=store, clock=lambda: now).timeline(now)
    segs = [Segment(a, b, cat, run, step, label)
            for a, b, cat, run, step, label in out["segments"] if b > a]
    t0 = min((s.start for s in segs), default=now)
    if out["first_t"] is not None:
        t0 = min(t0, out["first_t"])
    return Timeline(segs, out["restarts"], out["crashes"], t0, out["run_ids"])
