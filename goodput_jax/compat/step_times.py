"""Google's step times and step deviation, read incrementally from the store.

ml-goodput-measurement times a step by the gap between its start and the next step's
start, for every step whose next recorded start is step + 1 (in the order the starts
were recorded, so a rerun after a restart replaces the earlier value), and measures the
deviation from the ideal step time (the configured one, or
:func:`~goodput_jax.compat.utils.compute_ideal_step_time`) as an absolute value. The
engine's productive step times (``GoodputCalculator.get_step_statistics``) are another
quantity: device-timed where the runtime recorded device ends, cut at a job end, with
signed deviations from a median.

Example:
    >>> from goodput_jax.measure.stores.sqlite import SQLiteStore
    >>> starts = StepStarts(SQLiteStore(":memory:"), "job")
    >>> starts.update()
    {}
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from goodput_jax.compat.utils import compute_ideal_step_time
from goodput_jax.measure.events import KIND_CODES, EventKind
from goodput_jax.measure.stores.base import EventStore

__all__ = ["StepStarts", "StepTimes", "google_step_deviation"]

_STEP_START = KIND_CODES[EventKind.STEP_START]


class StepTimes:
    """Google's step-time rule, written once: fed step starts in record order, a step's
    time is the gap to the next start when that start is of step + 1 (a rerun after a
    restart replaces the earlier value).

    :class:`StepStarts` feeds it from the store; the drop-in calculator's
    ``_get_step_times(entries)`` (Google's private helper) from Google's entry dicts.

    Example:
        >>> times = StepTimes()
        >>> times.add([(0, 10.0), (1, 13.0), (2, 15.0), (5, 30.0), (6, 31.5)])
        >>> times.times, times.last_step
        ({0: 3.0, 1: 2.0, 5: 1.5}, 6)
    """

    def __init__(self) -> None:
        self._prev: tuple[int, float] | None = None
        #: ``{step: seconds to the next step's start}``
        self.times: dict[int, float] = {}

    @property
    def last_step(self) -> int | None:
        """The step number of the last start fed (None before the first)."""
        return None if self._prev is None else self._prev[0]

    def add(self, starts: Iterable[tuple[int, float]]) -> None:
        """Feed ``(step, start time)`` pairs, in the order they were recorded."""
        for step, t in starts:
            if self._prev is not None and step == self._prev[0] + 1:
                self.times[self._prev[0]] = t - self._prev[1]
            self._prev = (step, t)


class StepStarts:
    """``{step: seconds to the next step's start}``, Google's way (:class:`StepTimes`),
    O(new events) a call.

    Args:
        store: the job's event store (read through its public columnar read).
        job_name: the job.
    """

    _CHUNK = 250_000

    def __init__(self, store: EventStore, job_name: str):
        self._store = store
        self._job = job_name
        self._lock = threading.Lock()
        self._cursor: Any = None
        self._times = StepTimes()

    @property
    def last_step(self) -> int | None:
        """The step number of the last step start read (None before the first)."""
        return self._times.last_step

    def update(self) -> dict[int, float]:
        """Read the step starts recorded since the last call; returns a copy of the times."""
        with self._lock:
            while True:
                cols, self._cursor, done = self._store.read_columns(self._job, self._cursor,
                                                                    self._CHUNK)
                if cols is not None:
                    sel = cols["kind"] == _STEP_START
                    self._times.add(zip(cols["step"][sel].tolist(), cols["ts"][sel].tolist(),
                                        strict=True))
                if done:
                    return dict(self._times.times)


def google_step_deviation(step_times: dict[int, float], configured_ideal_step_time: float | None
                          ) -> tuple[float, dict[int, float]]:
    """``(ideal step time, {step: |step time - ideal|})`` as ml-goodput-measurement computes it.

    Raises:
        ValueError: no step times, or no ideal step time (every step under 1 s and none
            configured), with Google's messages.

    Example:
        >>> google_step_deviation({0: 3.0, 1: 2.0, 2: 15.0, 3: 2.0}, None)[1][2]
        12.666666666666666
    """
    if not step_times:
        raise ValueError("No step times available and no previous step deviations found.")
    ideal = (configured_ideal_step_time if configured_ideal_step_time is not None
             else compute_ideal_step_time(list(step_times.values())))
    if not ideal:
        raise ValueError("No ideal step time available and no previous step deviations found.")
    return float(ideal), {s: abs(t - ideal) for s, t in step_times.items()}
