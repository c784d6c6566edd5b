"""The monitor's hang detection: how long since the job last stepped, and whether it is hung.

:class:`StepClock` reads the job's latest step, job-start and job-end times from the store
with its own cursor (incrementally); :class:`HangCheck` turns seconds-since-last-step into
the ``hang/*`` tags and logs when the job becomes hung and when it steps again.

Example:
    >>> check = HangCheck("job", threshold_seconds=60)
    >>> check.update(90.0, ended=False, stopping=False)
    {'hang/seconds_since_last_step': 90.0, 'hang/hung': 1.0}
    >>> check.hung
    True
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

import numpy as np

from goodput_jax.measure.events import KIND_CODES, EventKind

if TYPE_CHECKING:
    from goodput_jax.measure.stores import EventStore

__all__ = ["HangCheck", "StepClock"]

_log = logging.getLogger("goodput_jax.measure.monitor")

_STEP_KINDS = (EventKind.STEP_START, EventKind.STEP_END, EventKind.STEP_DEVICE_END)


class StepClock:
    """The job's latest step time, read incrementally from the store (its own cursor).

    Args:
        store: the store the job's events are in.
        job_name: the job.
    """

    def __init__(self, store: EventStore, job_name: str):
        self._store = store
        self._job = job_name
        self._cursor: object = None
        self._step_codes = [KIND_CODES[k] for k in _STEP_KINDS]
        self._start = KIND_CODES[EventKind.JOB_START]
        self._end = KIND_CODES[EventKind.JOB_END]
        self._lock = threading.Lock()
        self.last_step_t: float | None = None
        self.last_start_t: float | None = None
        self.last_end_t: float | None = None
        self.last_step = 0

    def poll(self) -> tuple[float | None, bool]:
        """``(time of the last step event or of the latest job start, ended)``."""
        with self._lock:
            while True:
                cols, self._cursor, done = self._store.read_columns(self._job, self._cursor,
                                                                    100_000)
                if cols is not None and cols["kind"].size:
                    self._take(cols["kind"], cols["ts"], cols["step"])
                if done:
                    break
            marks = [t for t in (self.last_step_t, self.last_start_t) if t is not None]
            last = max(marks) if marks else None
            ended = (self.last_end_t is not None
                     and (self.last_start_t is None or self.last_end_t >= self.last_start_t))
            return last, ended

    def _take(self, kind: np.ndarray, ts: np.ndarray, step: np.ndarray) -> None:
        steps = np.isin(kind, self._step_codes)
        if steps.any():
            i = int(np.argmax(np.where(steps, ts, -np.inf)))
            if self.last_step_t is None or ts[i] >= self.last_step_t:
                self.last_step_t = float(ts[i])
                self.last_step = max(int(step[i]), 0)
        starts, ends = ts[kind == self._start], ts[kind == self._end]
        if starts.size:
            t = float(starts.max())
            self.last_start_t = t if self.last_start_t is None else max(self.last_start_t, t)
        if ends.size:
            t = float(ends.max())
            self.last_end_t = t if self.last_end_t is None else max(self.last_end_t, t)


class HangCheck:
    """Whether a job is hung: no step for ``threshold_seconds`` and not ended.

    Args:
        job_name: the job (named in the log lines).
        threshold_seconds: the hang threshold; None = no hung flag, only the seconds.
    """

    def __init__(self, job_name: str, threshold_seconds: float | None):
        self.job_name = job_name
        self.threshold_seconds = threshold_seconds
        #: whether the last check found the job hung
        self.hung = False

    def update(self, seconds: float, *, ended: bool, stopping: bool) -> dict[str, float]:
        """The ``hang/*`` scalars for ``seconds`` since the last step; logs a change.

        A job that has ended, or whose monitor is making its final upload at stop
        (``stopping``: the process is finishing), is not hung.
        """
        values = {"hang/seconds_since_last_step": seconds}
        thr = self.threshold_seconds
        if thr is None:
            return values
        hung = not ended and not stopping and seconds >= thr
        if hung and not self.hung:
            _log.warning("goodput monitor: job %r is hung: no step for %.1fs "
                         "(hang_threshold_seconds=%g)", self.job_name, seconds, thr)
        elif self.hung and not hung:
            _log.info("goodput monitor: job %r %s", self.job_name,
                      "ended" if ended else "is finishing (monitor stopped)"
                      if stopping else "is stepping again")
        self.hung = hung
        values["hang/hung"] = 1.0 if hung else 0.0
        return values
