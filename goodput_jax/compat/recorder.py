"""``GoodputRecorder`` with ml-goodput-measurement's constructor (and MaxText's flag).

Example:
    >>> rec = GoodputRecorder("j", "goodput_j", True, enable_goodput_recording=False)
    >>> rec.logging_enabled
    False
"""

from __future__ import annotations

import weakref
from typing import Any

from goodput_jax.compat.options import check_flag, check_positive, cloud_logger_store
from goodput_jax.measure.recorder import GoodputRecorder as _BaseRecorder

__all__ = ["GoodputRecorder", "flush_live_recorders"]

#: drop-in recorders alive in this process: a monitor flushes its job's ones before
#: its final upload (MaxText records the job end right before stopping the monitor,
#: and this recorder writes in the background).
_LIVE_RECORDERS: weakref.WeakSet = weakref.WeakSet()


class GoodputRecorder(_BaseRecorder):
    """:class:`goodput_jax.measure.recorder.GoodputRecorder` with Google's constructor.

    Args:
        job_name, logger_name, logging_enabled: as in Google's library.
        cloud_logger: Google's test seam: an object with
            ``write_cloud_logging_entry`` / ``read_cloud_logging_entries``; events
            are written to it as Google's entry dicts, synchronously (a read right
            after a ``record_*`` sees it), like Google's own recorder.
        background_grace_period_s: seconds the recorder may spend flushing at
            close / interpreter exit.
        background_batch_size: events per store write.
        background_max_latency_s: seconds an event may wait before it is written.
        enable_goodput_recording: MaxText's flag; when False nothing is
            recorded whatever ``logging_enabled`` says. None = not given.
        **kwargs: the base recorder's extras (``store``, ``clock``, ...).

    Example:
        >>> GoodputRecorder("j", "goodput_j", logging_enabled=False).logging_enabled
        False
    """

    def __init__(self, job_name: str, logger_name: str | None = None,
                 logging_enabled: bool = False, cloud_logger: Any = None, *,
                 background_grace_period_s: float = 5.0, background_batch_size: int = 100,
                 background_max_latency_s: float = 2.0,
                 enable_goodput_recording: bool | None = None, **kwargs: Any):
        flag = check_flag("enable_goodput_recording", enable_goodput_recording)
        self.enable_goodput_recording = True if flag is None else flag
        self.background_grace_period_s = check_positive(
            "background_grace_period_s", background_grace_period_s)
        if isinstance(background_batch_size, bool) or not isinstance(background_batch_size, int) \
                or background_batch_size <= 0:
            raise ValueError(
                f"background_batch_size ({background_batch_size!r}) must be a positive int")
        kwargs.setdefault("flush_interval", check_positive(
            "background_max_latency_s", background_max_latency_s))
        enabled = bool(logging_enabled) and (flag is not False)
        if cloud_logger is not None and enabled:
            kwargs["store"] = cloud_logger_store(cloud_logger, kwargs.get("store"))
            kwargs.setdefault("synchronous", True)
        super().__init__(job_name, logger_name, enabled, **kwargs)
        self.cloud_logger = cloud_logger
        if self.logging_enabled:
            _LIVE_RECORDERS.add(self)

    def close(self, timeout: float | None = None) -> None:
        """Flush (at most ``background_grace_period_s`` by default) and stop writing."""
        super().close(self.background_grace_period_s if timeout is None else timeout)


def flush_live_recorders(job_name: str, timeout: float | None) -> None:
    """Make this process's open drop-in recorders of ``job_name`` write what they hold.

    The drop-in monitor calls it before each final upload, so that an event
    recorded just before (MaxText's job end) is counted.

    Example:
        >>> flush_live_recorders("no-such-job", 1.0)
    """
    for rec in list(_LIVE_RECORDERS):
        if rec.job_name == job_name and not rec.closed:
            rec.flush(timeout)
