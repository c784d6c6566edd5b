"""The monitor's straggler log: the slowest host, logged when it changes.

:class:`SlowestHostLog` reads each goodput upload's
:class:`~goodput_jax.measure.stragglers.Stragglers` and logs the slowest host when it
changes, else at most once every ``log_every`` uploads (the tags themselves are
:func:`~goodput_jax.measure.tags.straggler_scalars`).

Example:
    >>> log = SlowestHostLog("job", window_seconds=None, log_every=0)
    >>> log.slowest_host is None
    True
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from goodput_jax.measure.stragglers import Stragglers

__all__ = ["SlowestHostLog"]

_log = logging.getLogger("goodput_jax.measure.monitor")


class SlowestHostLog:
    """Logs the slowest host of a job's straggler uploads.

    Args:
        job_name: the job (named in the log lines).
        window_seconds: the straggler window (None: the whole job).
        log_every: log at most once every this many uploads when nothing changes
            (0: only when the slowest host changes).
    """

    def __init__(self, job_name: str, window_seconds: float | None, log_every: int):
        self.job_name = job_name
        self.window_seconds = window_seconds
        self.log_every = log_every
        #: the slowest host of the last upload (None: none yet, or no host held one back)
        self.slowest_host: int | None = None
        self._uploads = 0

    def update(self, st: Stragglers) -> None:
        """Take one upload's stragglers; log when due."""
        self._uploads += 1
        top = st.slowest(1)
        slowest = top[0].host if top else None
        changed = slowest != self.slowest_host
        self.slowest_host = slowest
        every = self.log_every
        if not (changed or (every and self._uploads >= every)):
            return
        self._uploads = 0
        span = ("the whole job" if self.window_seconds is None
                else f"the last {self.window_seconds:g}s")
        if not top:
            _log.info("goodput monitor: job %r: no host held a step back (%d hosts, %d steps "
                      "compared, %s)", self.job_name, st.num_hosts, st.steps.size, span)
            return
        h = top[0]
        # (the job share is against the whole job's time: shown for a whole-job query only)
        job = (f", {100 * h.job_share:.1f}% of job time"
               if self.window_seconds is None and math.isfinite(h.job_share) else "")
        _log.info("goodput monitor: job %r: slowest host %d held back %d of %d steps, "
                  "%.3fs lost (%.1f%% of straggler time%s; %d hosts, %s)", self.job_name,
                  h.host, h.steps_last, st.steps.size, h.lost_time, 100 * h.share, job,
                  st.num_hosts, span)
