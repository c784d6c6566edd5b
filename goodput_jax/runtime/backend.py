"""Accelerator initialisation measured: JAX's backend start-up, timed once per process.

JAX starts its backend (device discovery, PJRT client, and the distributed
runtime when ``jax.distributed.initialize`` is used) lazily, on the first call
that needs it: ``jax.devices()``, ``jax.process_index()``, the first array.
That first call *is* the accelerator initialisation, and a recorder built with
``logging_enabled=(jax.process_index() == 0)`` has already paid for it before it
can record anything. :func:`init_backend` makes that first call on purpose,
timed; :func:`start_job` then writes the job start and the measured
initialisation to a recorder (backfilled, as the first events of the run) and
attaches it for compile times.

Example:
    >>> import jax  # doctest: +SKIP
    >>> from goodput_jax import goodput, runtime  # doctest: +SKIP
    >>> init = runtime.init_backend()  # doctest: +SKIP
    >>> rec = goodput.GoodputRecorder("run1", "goodput_run1",
    ...                               logging_enabled=(init.process_index == 0))  # doctest: +SKIP
    >>> runtime.start_job(rec)  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

from goodput_jax.runtime.compile import Attachment, attach
from goodput_jax.runtime.contracts import JobRecording, require

__all__ = ["BackendInit", "init_backend", "measured_init", "start_job"]


@dataclasses.dataclass(frozen=True)
class BackendInit:
    """The measured start-up of this process's JAX backend.

    Attributes:
        start_time: UTC seconds when the start-up began (``time.time()``).
        end_time: UTC seconds when the devices were available.
        process_index: ``jax.process_index()``.
        process_count: ``jax.process_count()``.
        device_count: ``jax.device_count()`` (all processes).
        local_device_count: ``jax.local_device_count()``.
        platform: the default backend's platform (``cpu``, ``gpu``, ``tpu``).
        measured: False when the backend was already started before
            :func:`init_backend` ran (``jax.devices()``, an array...): the start-up was
            not measured (the times span only a lookup) and :func:`start_job` records
            no accelerator initialisation for it.

    Example:
        >>> BackendInit(10.0, 10.5, 0, 1, 8, 8, "tpu").seconds
        0.5
    """

    start_time: float
    end_time: float
    process_index: int
    process_count: int
    device_count: int
    local_device_count: int
    platform: str
    measured: bool = True

    @property
    def seconds(self) -> float:
        """Duration of the start-up."""
        return self.end_time - self.start_time


_lock = threading.Lock()
_measured: BackendInit | None = None
_init_recorded = False
_warned_late = False

#: the warning when the backend was started before init_backend (once per process)
LATE_INIT_WARNING = (
    "goodput_jax.runtime.init_backend(): JAX's backend was already started before this call "
    "(by jax.devices(), jax.process_index(), or creating an array), so its start-up cannot be "
    "measured; no accelerator initialisation is recorded. Fix: call runtime.init_backend() "
    "first, before anything touches JAX's backend (e.g. logging_enabled="
    "(runtime.init_backend().process_index == 0) instead of jax.process_index() == 0).")


def _backend_started() -> bool | None:
    """Whether JAX's backend is already up (None when this JAX cannot tell)."""
    try:
        from jax._src import xla_bridge
    except ImportError:  # pragma: no cover - a JAX without the module
        return None
    fn = getattr(xla_bridge, "backends_are_initialized", None)
    return bool(fn()) if callable(fn) else None


def init_backend(setup: Callable[[], Any] | None = None) -> BackendInit:
    """Start JAX's backend now, timed; later calls return the first measurement.

    Call it before anything else touches the backend (``jax.process_index()``,
    ``jax.devices()``, creating an array): JAX starts its backend only once,
    so a backend started earlier cannot be measured. Then it warns once
    (``RuntimeWarning``, naming the fix) and returns ``measured=False``:
    :func:`start_job` records the job start but no accelerator initialisation.

    Args:
        setup: optional callable run first, inside the timing: e.g.
            ``lambda: jax.distributed.initialize(...)`` on a multi-host job.

    Returns:
        The :class:`BackendInit` of this process.

    Raises:
        TypeError: ``setup`` is not callable.

    Example:
        >>> from goodput_jax import runtime
        >>> init = runtime.init_backend()
        >>> init.seconds >= 0 and init.device_count >= 1
        True
    """
    global _measured
    if setup is not None and not callable(setup):
        raise TypeError(f"setup ({setup!r}) must be a callable (e.g. a jax.distributed.initialize "
                        "call wrapped in a lambda) or None")
    import jax

    global _warned_late
    with _lock:
        if _measured is not None:
            return _measured
        started = _backend_started()
        t0 = time.time()
        if setup is not None:
            setup()
        jax.devices()
        t1 = time.time()
        if started is None:  # this JAX cannot say: a lookup takes microseconds, a start-up not
            started = setup is None and t1 - t0 < 1e-3
        _measured = BackendInit(
            start_time=t0, end_time=t1, process_index=jax.process_index(),
            process_count=jax.process_count(), device_count=jax.device_count(),
            local_device_count=jax.local_device_count(), platform=jax.default_backend(),
            measured=not started)
        warn = started and not _warned_late
        _warned_late = _warned_late or started
    if warn:
        warnings.warn(LATE_INIT_WARNING, RuntimeWarning, stacklevel=2)
    return _measured


def measured_init() -> BackendInit | None:
    """The measurement taken by :func:`init_backend`, or None before it ran.

    Example:
        >>> measured_init() is None or measured_init().seconds >= 0
        True
    """
    return _measured


def start_job(recorder: JobRecording, init: BackendInit | None = None, *,
              compile_times: bool = True) -> Attachment:
    """Record the job start, the measured accelerator init, and attach for compile times.

    Writes, as the first events of the run, the job start at the moment the
    backend began starting and the accelerator initialisation span
    ``[init.start_time, init.end_time]``; then :func:`~goodput_jax.runtime.attach`
    es the recorder so every JAX compilation is recorded. Use it in place of
    ``record_job_start_time()`` + ``with recorder.accelerator_init(): ...``.

    Args:
        recorder: a :class:`~goodput_jax.measure.recorder.GoodputRecorder`.
        init: the measurement to record (default: :func:`init_backend`, which
            starts and times the backend if nothing did yet). By default the
            process's start-up is recorded once: a later job in the same
            process (a second recorder) starts now, without an init span.
        compile_times: attach for compile times (default True).

    Returns:
        The :class:`~goodput_jax.runtime.Attachment` (detached when
        ``compile_times`` is False).

    Raises:
        TypeError: ``init`` is not a BackendInit, or ``recorder`` is not a recorder.

    Example:
        >>> from goodput_jax import goodput, runtime
        >>> rec = goodput.GoodputRecorder("j", "l")  # disabled: records nothing
        >>> runtime.start_job(rec).detach()
    """
    require(recorder, JobRecording)
    global _init_recorded
    if init is None:
        init = init_backend()
        with _lock:
            first, _init_recorded = not _init_recorded, True
        if not first:  # a second job in this process: its backend was already up
            recorder.record_job_start_time()
            init = None
    elif not isinstance(init, BackendInit):
        raise TypeError(f"init ({init!r}) must be a BackendInit from runtime.init_backend()")
    if init is not None:
        recorder.record_job_start_time(init.start_time)
        if init.measured:  # (a backend started before init_backend was not measured)
            recorder.record_tpu_init_start_time(init.start_time)
            recorder.record_tpu_init_end_time(init.end_time)
    att = attach(recorder)
    if not compile_times:
        att.detach()
    return att
