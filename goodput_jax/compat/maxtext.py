"""MaxText's goodput config flags and wrapper helpers.

MaxText (``maxtext/common/goodput.py`` and the older ``goodput_utils``) builds its
recorder and monitor from its config and wraps each event in
``maybe_record_goodput``; these are the same helpers on goodput_jax's drop-ins,
re-exported by ``goodput_jax.goodput``.

Example:
    >>> get_goodput_job_name({"run_name": "r", "goodput_job_name": ""})
    'r'
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import numbers
from collections.abc import Iterator, Mapping
from typing import Any

from goodput_jax.compat.monitor import GoodputMonitor
from goodput_jax.compat.options import GCPOptions
from goodput_jax.compat.recorder import GoodputRecorder

__all__ = [
    "GoodputEvent",
    "MaxTextGoodput",
    "create_goodput_monitor",
    "create_goodput_recorder",
    "from_maxtext_config",
    "get_goodput_job_name",
    "maybe_instrument_checkpoint_manager",
    "maybe_monitor_goodput",
    "maybe_record_goodput",
    "record_goodput",
]

_MISSING = object()


def _get(config: Any, name: str, default: Any = _MISSING) -> Any:
    if isinstance(config, Mapping):
        value = config.get(name, default)
    else:
        value = getattr(config, name, default)
    if value is _MISSING:
        raise ValueError(f"config.{name} is required (MaxText config {type(config).__name__})")
    return value


def _process_index(process_index: int | None) -> int:
    if process_index is not None:
        if isinstance(process_index, bool) or not isinstance(process_index, numbers.Integral) \
                or process_index < 0:
            raise ValueError(f"process_index ({process_index!r}) must be a non-negative int")
        return int(process_index)
    import jax

    return jax.process_index()


def get_goodput_job_name(config: Any) -> str:
    """MaxText's job name for goodput: ``config.goodput_job_name or config.run_name``.

    Example:
        >>> get_goodput_job_name({"run_name": "r", "goodput_job_name": ""})
        'r'
        >>> get_goodput_job_name({"run_name": "r", "goodput_job_name": "llama-pre-r"})
        'llama-pre-r'

    ``Any``: Google's or MaxText's objects (a ``google.cloud.logging`` logger, a MaxText config,
    an orbax manager) from libraries without type information, duck-typed as their code does.
    """
    name = _get(config, "goodput_job_name", None)
    if name is not None and not isinstance(name, str):
        raise ValueError(f"config.goodput_job_name ({name!r}) must be a string")
    return name or _get(config, "run_name")


def create_goodput_recorder(config: Any, *, process_index: int | None = None,
                            **kwargs: Any) -> GoodputRecorder | None:
    """MaxText's ``create_goodput_recorder``: a recorder when ``enable_goodput_recording``.

    Records on process 0 only, for the job :func:`get_goodput_job_name` names.
    ``kwargs`` go to :class:`GoodputRecorder` (e.g. ``store=``).

    Example:
        >>> create_goodput_recorder({"run_name": "r", "enable_goodput_recording": False}) is None
        True

    ``Any``: Google's or MaxText's objects (a ``google.cloud.logging`` logger, a MaxText config,
    an orbax manager) from libraries without type information, duck-typed as their code does.
    """
    if not _get(config, "enable_goodput_recording", False):
        return None
    run = get_goodput_job_name(config)
    return GoodputRecorder(run, f"goodput_{run}", _process_index(process_index) == 0,
                           enable_goodput_recording=True, **kwargs)


def create_goodput_monitor(config: Any, *, process_index: int | None = None,
                           **kwargs: Any) -> GoodputMonitor | None:
    """A :class:`GoodputMonitor` on process 0 when ``config.monitor_goodput``, else None.

    As MaxText's ``maybe_monitor_goodput``: the job is :func:`get_goodput_job_name`;
    reads ``tensorboard_dir``, ``goodput_upload_interval_seconds``,
    ``monitor_step_time_deviation``, ``step_deviation_interval_seconds`` and
    (optionally) ``enable_pathways_goodput``; ``GCPOptions`` carry only
    ``enable_gcp_goodput_metrics`` / ``enable_gcp_step_deviation_metrics`` (default
    True; the latter off with ``report_performance_metric_for_gcp_monitoring``), so
    the project, zone and accelerator come from the metadata server; with
    ``enable_rolling_window_goodput`` the monitor also runs the rolling windows
    ``rolling_windows_seconds``. goodput_jax's own key ``goodput_hang_threshold_seconds``
    sets the hang threshold. ``kwargs`` go to :class:`GoodputMonitor` and win.

    Example:
        >>> create_goodput_monitor({"run_name": "r", "monitor_goodput": False}) is None
        True

    ``Any``: Google's or MaxText's objects (a ``google.cloud.logging`` logger, a MaxText config,
    an orbax manager) from libraries without type information, duck-typed as their code does.
    """
    if not _get(config, "monitor_goodput", False) or _process_index(process_index) != 0:
        return None
    run = get_goodput_job_name(config)
    step_dev_gcp = bool(_get(config, "enable_gcp_step_deviation_metrics", True))
    if _get(config, "report_performance_metric_for_gcp_monitoring", False):
        step_dev_gcp = False  # MaxText sends its own performance metric then
    kwargs.setdefault("gcp_options", GCPOptions(
        enable_gcp_goodput_metrics=bool(_get(config, "enable_gcp_goodput_metrics", True)),
        enable_gcp_step_deviation_metrics=step_dev_gcp))
    if _get(config, "enable_rolling_window_goodput", False):
        windows = _get(config, "rolling_windows_seconds", None)
        if windows is None:
            raise ValueError("config.rolling_windows_seconds is required with "
                             "enable_rolling_window_goodput")
        kwargs.setdefault("rolling_windows_seconds", windows)
    hang = _get(config, "goodput_hang_threshold_seconds", None)
    if hang is not None:
        kwargs.setdefault("hang_threshold_seconds", hang)
    return GoodputMonitor(
        run, f"goodput_{run}", _get(config, "tensorboard_dir"),
        pathway_enabled=bool(_get(config, "enable_pathways_goodput", False)),
        include_badput_breakdown=True,  # as MaxText's wrapper
        step_deviation_interval_seconds=_get(config, "step_deviation_interval_seconds", None),
        monitor_goodput=True,
        goodput_upload_interval_seconds=_get(config, "goodput_upload_interval_seconds", 30),
        monitor_step_time_deviation=bool(_get(config, "monitor_step_time_deviation", False)),
        **kwargs,
    )


def maybe_instrument_checkpoint_manager(checkpoint_manager: Any, recorder: Any) -> Any:
    """Record a MaxText checkpoint manager's saves and restores as checkpoint badput.

    MaxText no longer sets up Orbax's checkpoint cloud logger, so this is where its
    checkpoint badput comes from: wrap the manager right where MaxText's
    ``setup_train_loop`` creates it (it has the recorder at hand)::

        checkpoint_manager = create_checkpoint_manager(config, mesh, init_state_fn)
        checkpoint_manager = goodput.maybe_instrument_checkpoint_manager(
            checkpoint_manager, recorder)

    MaxText's ``save_checkpoint`` / ``maybe_save_checkpoint`` /
    ``load_state_if_possible`` / ``wait_until_finished`` then go through
    :func:`goodput_jax.integrations.orbax.instrument`: the blocking part of each
    save, every wait for a background commit and each restore are recorded.

    Returns:
        The manager unchanged when it or the recorder is None or recording is off
        (MaxText's "checkpointing disabled" and "recording disabled"); else a
        :class:`~goodput_jax.integrations.orbax.RecordedCheckpointManager`.

    Example:
        >>> maybe_instrument_checkpoint_manager(None, None) is None
        True

    ``Any``: Google's or MaxText's objects (a ``google.cloud.logging`` logger, a MaxText config,
    an orbax manager) from libraries without type information, duck-typed as their code does.
    """
    if checkpoint_manager is None or not recorder or not getattr(recorder, "logging_enabled",
                                                                  False):
        return checkpoint_manager
    from goodput_jax.integrations.orbax import instrument

    return instrument(checkpoint_manager, recorder)


@dataclasses.dataclass
class MaxTextGoodput:
    """What :func:`from_maxtext_config` builds: the recorder and monitor (either may be None)."""

    recorder: GoodputRecorder | None
    monitor: GoodputMonitor | None
    job_name: str

    def close(self) -> None:
        """Stop the monitor (final upload) and flush/close the recorder."""
        if self.monitor is not None:
            self.monitor.stop()
            self.monitor.close()
        if self.recorder is not None:
            self.recorder.close()


def from_maxtext_config(config: Any, *, process_index: int | None = None, store: Any = None,
                        **monitor_kwargs: Any) -> MaxTextGoodput:
    """Recorder and monitor from a MaxText config, with MaxText's flags mapped.

    Args:
        config: object (``config.run_name``) or mapping with MaxText's keys:
            ``run_name``, ``enable_goodput_recording``, ``monitor_goodput``,
            ``tensorboard_dir`` (when monitoring), ``goodput_upload_interval_seconds``,
            ``monitor_step_time_deviation``, ``step_deviation_interval_seconds``.
        process_index: this process (default ``jax.process_index()``); records
            and monitors on 0 only.
        store: store (or URL) shared by the recorder and the monitor.
        **monitor_kwargs: extra :class:`GoodputMonitor` arguments (``clock`` ...).

    Returns:
        :class:`MaxTextGoodput`; call ``.monitor.start()`` on process 0.

    Example:
        >>> gp = from_maxtext_config({"run_name": "r", "enable_goodput_recording": False,
        ...                           "monitor_goodput": False}, process_index=0)
        >>> gp.recorder is None and gp.monitor is None
        True

    ``Any``: Google's or MaxText's objects (a ``google.cloud.logging`` logger, a MaxText config,
    an orbax manager) from libraries without type information, duck-typed as their code does.
    """
    kw = {} if store is None else {"store": store}
    rec = create_goodput_recorder(config, process_index=process_index, **kw)
    mon = create_goodput_monitor(config, process_index=process_index, **kw, **monitor_kwargs)
    return MaxTextGoodput(rec, mon, get_goodput_job_name(config))


class GoodputEvent(enum.Enum):
    """MaxText's goodput event names (``record_<value>_start_time`` / ``_end_time``)."""

    JOB = "job"
    TPU_INIT = "tpu_init"
    TRAINING_PREPARATION = "training_preparation"
    DATA_LOADING = "data_loading"
    STEP = "step"


@contextlib.contextmanager
def maybe_record_goodput(recorder: Any, event: GoodputEvent, *args: Any) -> Iterator[None]:
    """MaxText's ``maybe_record_goodput``: start/end of ``event`` around the block.

    As MaxText's wrapper: a no-op when ``recorder`` is None; each call goes through
    :func:`record_goodput` (a recorder without the method is skipped); the end is
    recorded only when the block completes (an exception, e.g. a preemption, leaves
    the event open, and the run's missing job end marks it crashed).

    Example:
        >>> with maybe_record_goodput(None, GoodputEvent.STEP, 3):
        ...     pass

    ``Any``: Google's or MaxText's objects (a ``google.cloud.logging`` logger, a MaxText config,
    an orbax manager) from libraries without type information, duck-typed as their code does.
    """
    if not isinstance(event, GoodputEvent):
        raise TypeError(f"event ({event!r}) must be a GoodputEvent")
    record_goodput(recorder, f"record_{event.value}_start_time", *args)
    completed = False
    try:
        yield
        completed = True
    finally:
        if completed:
            record_goodput(recorder, f"record_{event.value}_end_time", *args)


def record_goodput(recorder: Any, event_name: str, *args: Any) -> None:
    """MaxText's ``record_goodput``: call ``recorder.<event_name>(*args)`` if it has one.

    Example:
        >>> record_goodput(None, "record_job_start_time")

    ``Any``: Google's or MaxText's objects (a ``google.cloud.logging`` logger, a MaxText config,
    an orbax manager) from libraries without type information, duck-typed as their code does.
    """
    if recorder:
        fn = getattr(recorder, event_name, None)
        if fn:
            fn(*args)


@contextlib.contextmanager
def maybe_monitor_goodput(config: Any, *, process_index: int | None = None,
                          **kwargs: Any) -> Iterator[GoodputMonitor | None]:
    """MaxText's ``maybe_monitor_goodput``: monitor uploads for the block, on process 0.

    Yields the monitor (or None when ``monitor_goodput`` is off or this is not
    process 0); on exit stops the uploaders (each with a final upload).

    Example:
        >>> with maybe_monitor_goodput({"monitor_goodput": False}) as m:
        ...     m is None
        True

    ``Any``: Google's or MaxText's objects (a ``google.cloud.logging`` logger, a MaxText config,
    an orbax manager) from libraries without type information, duck-typed as their code does.
    """
    mon = create_goodput_monitor(config, process_index=process_index, **kwargs)
    if mon is None:
        yield None
        return
    try:
        mon.start()
        yield mon
    finally:
        mon.stop()
        mon.close()
