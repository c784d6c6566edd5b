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
from typing import Any

from goodput_jax.compat.utils import compute_ideal_step_time
from goodput_jax.measure.events import KIND_CODES, EventKind
from goodput_jax.measure.stores.base import EventStore

__all__ = ["StepStarts", "google_step_deviation"]

_STEP_START = KIND_CODES[EventKind.STEP_START]


class StepStarts:
    """``{step: seconds to the next step's start}``, Google's way, O(new events) a call.

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
        self._prev: tuple[int, float] | None = None
        self._times: dict[int, float] = {}

    def update(self) -> dict[int, float]:
        """Read the step starts recorded since the last call; returns a copy of the times."""
        with self._lock:
            while True:
                cols, self._cursor, done = self._store.read_columns(self._job, self._cursor,
                                                                    self._CHUNK)
                if cols is not None:
                    sel = cols["kind"] == _STEP_START
                    for step, t in zip(cols["step"][sel].tolist(), cols["ts"][sel].tolist(),
                                       strict=True):
                        if self._prev is not None and step == self._prev[0] + 1:
                            self._times[self._prev[0]] = t - self._prev[1]
                        self._prev = (step, t)
                if done:
                    return dict(self._times)


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
