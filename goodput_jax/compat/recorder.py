"""``GoodputRecorder`` with ml-goodput-measurement's constructor (and MaxText's flag).

Example:
    >>> rec = GoodputRecorder("j", "goodput_j", True, enable_goodput_recording=False)
    >>> rec.logging_enabled
    False
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from goodput_jax.compat.enums import BadputType
from goodput_jax.compat.options import check_flag, local_time, recorder_options
from goodput_jax.measure.badput import BadputType as _BaseBadputType
from goodput_jax.measure.events import TimeLike
from goodput_jax.measure.live import flush_job
from goodput_jax.measure.recorder import GoodputRecorder as _BaseRecorder

__all__ = ["GoodputRecorder", "flush_live_recorders"]

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
        background_batch_size: validated and accepted (the writer batches by its own
            ``batch_size``).
        background_max_latency_s: seconds an event may wait before it is written.
        enable_goodput_recording: MaxText's flag; when False nothing is
            recorded whatever ``logging_enabled`` says. None = not given.
        **kwargs: the base recorder's extras (``store``, ``options``, ``clock``,
            ``rerun``, ...); all of these are translated in one place,
            :func:`goodput_jax.compat.options.recorder_options`.

    Example:
        >>> GoodputRecorder("j", "goodput_j", logging_enabled=False).logging_enabled
        False
    """

    def __init__(self, job_name: str, logger_name: str | None = None,
                 logging_enabled: bool = False, cloud_logger: Any = None, *,
                 background_grace_period_s: float = 5.0, background_batch_size: int = 100,
                 background_max_latency_s: float = 2.0,
                 enable_goodput_recording: bool | None = None, **kwargs: Any):
        """``Any``: Google's or MaxText's objects (a ``google.cloud.logging`` logger, a MaxText
        config, an orbax manager) from libraries without type information, duck-typed as their
        code does.
        """
        flag = check_flag("enable_goodput_recording", enable_goodput_recording)
        self.enable_goodput_recording = True if flag is None else flag
        enabled = bool(logging_enabled) and (flag is not False)
        store, options, self.background_grace_period_s = recorder_options(
            enabled=enabled, cloud_logger=cloud_logger,
            background_grace_period_s=background_grace_period_s,
            background_batch_size=background_batch_size,
            background_max_latency_s=background_max_latency_s, extras=kwargs)
        super().__init__(job_name, logger_name, enabled, store=store, options=options)
        self.cloud_logger = cloud_logger

    def close(self, timeout: float | None = None) -> None:
        """Flush (at most ``background_grace_period_s`` by default) and stop writing."""
        super().close(self.background_grace_period_s if timeout is None else timeout)

    # Google's recorder takes naive datetimes as local time (its README records
    # ``record_job_start_time(datetime.datetime.now())``); so does the drop-in. The
    # base recorder refuses them.
    def record_step_start_time(self, step: int, start_time: TimeLike | None = None) -> None:
        """Record the start of step ``step`` (a naive ``start_time`` is local time)."""
        super().record_step_start_time(step, None if start_time is None
                                       else local_time(start_time))

    def record_step_end_time(self, step: int, end_time: TimeLike | None = None) -> None:
        """Record the end of step ``step`` (a naive ``end_time`` is local time)."""
        super().record_step_end_time(step, local_time(end_time))

    def record_job_start_time(self, start_time: TimeLike | None = None) -> None:
        """Record the job's (this run's) start (a naive ``start_time`` is local time)."""
        super().record_job_start_time(local_time(start_time))

    def record_job_end_time(self, end_time: TimeLike | None = None) -> None:
        """Record the job's end (a naive ``end_time`` is local time)."""
        super().record_job_end_time(local_time(end_time))

    def record_tpu_init_start_time(self, start_time: TimeLike | None = None) -> None:
        """Record the start of accelerator initialization (naive = local time)."""
        super().record_tpu_init_start_time(local_time(start_time))

    def record_tpu_init_end_time(self, end_time: TimeLike | None = None) -> None:
        """Record the end of accelerator initialization (naive = local time)."""
        super().record_tpu_init_end_time(local_time(end_time))

    def record_training_preparation_start_time(self, start_time: TimeLike | None = None) -> None:
        """Record the start of training preparation (naive = local time)."""
        super().record_training_preparation_start_time(local_time(start_time))

    def record_training_preparation_end_time(self, end_time: TimeLike | None = None) -> None:
        """Record the end of training preparation (naive = local time)."""
        super().record_training_preparation_end_time(local_time(end_time))

    def record_program_startup_start_time(self, start_time: TimeLike | None = None) -> None:
        """Record the start of program startup (naive = local time)."""
        super().record_program_startup_start_time(local_time(start_time))

    def record_program_startup_end_time(self, end_time: TimeLike | None = None) -> None:
        """Record the end of program startup (naive = local time)."""
        super().record_program_startup_end_time(local_time(end_time))

    def record_data_loading_start_time(self, start_time: TimeLike | None = None) -> None:
        """Record the start of synchronous data loading (naive = local time)."""
        super().record_data_loading_start_time(local_time(start_time))

    def record_data_loading_end_time(self, end_time: TimeLike | None = None) -> None:
        """Record the end of synchronous data loading (naive = local time)."""
        super().record_data_loading_end_time(local_time(end_time))

    def record_checkpoint_save_start_time(self, step: int | None = None,
                                          start_time: TimeLike | None = None) -> None:
        """Record the start of a blocking checkpoint save (naive = local time)."""
        super().record_checkpoint_save_start_time(step, local_time(start_time))

    def record_checkpoint_save_end_time(self, step: int | None = None,
                                        end_time: TimeLike | None = None) -> None:
        """Record the end of a blocking checkpoint save (naive = local time)."""
        super().record_checkpoint_save_end_time(step, local_time(end_time))

    def record_checkpoint_restore_start_time(self, step: int | None = None,
                                             start_time: TimeLike | None = None) -> None:
        """Record the start of a checkpoint restore (naive = local time)."""
        super().record_checkpoint_restore_start_time(step, local_time(start_time))

    def record_checkpoint_restore_end_time(self, step: int | None = None,
                                           end_time: TimeLike | None = None) -> None:
        """Record the end of a checkpoint restore (naive = local time)."""
        super().record_checkpoint_restore_end_time(step, local_time(end_time))

    def record_custom_badput_event_start_time(
            self, start_time: TimeLike | None = None,
            custom_badput_event_type: str = "unknown") -> None:
        """Record the start of a custom badput event (naive = local time)."""
        super().record_custom_badput_event_start_time(local_time(start_time),
                                                      custom_badput_event_type)

    def record_custom_badput_event_end_time(
            self, end_time: TimeLike | None = None,
            custom_badput_event_type: str = "unknown") -> None:
        """Record the end of a custom badput event (naive = local time)."""
        super().record_custom_badput_event_end_time(local_time(end_time),
                                                    custom_badput_event_type)

    def record_checkpoint_progress(self, step: int, checkpoint_start_time: TimeLike) -> None:
        """Record checkpoint progress up to ``step`` (naive = local time)."""
        super().record_checkpoint_progress(step, local_time(checkpoint_start_time))

    def badput(self, kind: BadputType | _BaseBadputType | str) -> AbstractContextManager[None]:
        """``with rec.badput(BadputType.DATA_LOADING_SYNC):`` (Google's members too) or
        ``with rec.badput("eval"):``, as the base recorder."""
        return super().badput(kind.measure if isinstance(kind, BadputType) else kind)


def flush_live_recorders(job_name: str, timeout: float | None) -> None:
    """Make this process's open drop-in recorders of ``job_name`` write what they hold.

    The drop-in monitor calls it before each final upload, so that an event
    recorded just before (MaxText's job end) is counted.

    Example:
        >>> flush_live_recorders("no-such-job", 1.0)
    """
    flush_job(job_name, timeout)  # every enabled recorder registers (measure.live)
