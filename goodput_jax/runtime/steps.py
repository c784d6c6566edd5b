"""StepRecorder: device step times under asynchronous dispatch, without stalling.

A jitted step returns as soon as it is *dispatched*; the device works on it
later. A recorder that timestamps the host's loop therefore measures dispatch
(microseconds), and the host's data loading looks like a stall even when the
device is busy with earlier steps. ``StepRecorder`` records, for each step,
the start on the host (``record_step_start_time``) and the moment the device
finished it (``record_step_device_end_time``): a watcher thread blocks on the
step's outputs off the training thread and timestamps their readiness, so the
host keeps dispatching ahead. The calculator then counts step N's productive
time as the device's busy interval ``[max(start_N, device_end_{N-1}),
device_end_N]``, and a data-loading span as lost only while the device sat idle.

The training thread pays for one ``record_step_start_time`` and one queue put
per step (a few microseconds; ``benchmarks/step_recorder_bench.py``).

Example:
    >>> import jax, jax.numpy as jnp  # doctest: +SKIP
    >>> from goodput_jax import goodput, runtime  # doctest: +SKIP
    >>> rec = goodput.GoodputRecorder("run1", "goodput_run1", logging_enabled=True)  # doctest: +SKIP
    >>> steps = runtime.StepRecorder(rec)  # doctest: +SKIP
    >>> for step in range(100):  # doctest: +SKIP
    ...     state, loss = steps(step, train_step, state, batch)
    >>> steps.finish()  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from goodput_jax.runtime.compile import attach

logger = logging.getLogger(__name__)

__all__ = ["StepRecorder"]

_STOP = object()


class _Marker:
    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = threading.Event()


class StepRecorder:
    """Records step starts on the host and step ends on the device, one step late.

    Args:
        recorder: the :class:`~goodput_jax.measure.recorder.GoodputRecorder`
            written to (a disabled one makes every call a plain function call).
        compile_times: also attach the recorder for compile times (the
            attachment then knows when training started: compiles before and
            within the first step are program startup, later repeats are
            recompiles).
        clock: UTC seconds for the device-end timestamps (default ``time.time``,
            the recorder's default clock and JAX's).

    Attributes:
        tracked: steps handed to the watcher.
        observed: steps whose device end was recorded.
        unobserved: steps whose outputs could not be watched (every array was
            donated to a later step before the watcher reached it, or none was
            a JAX array).

    Example:
        >>> from goodput_jax import goodput, runtime
        >>> steps = runtime.StepRecorder(goodput.GoodputRecorder("j", "l"))  # disabled
        >>> steps(0, lambda x: x + 1, 1)
        2
        >>> steps.finish()
        True
    """

    def __init__(self, recorder: Any, *, compile_times: bool = True,
                 clock: Callable[[], float] | None = None):
        if not callable(getattr(recorder, "record_step_device_end_time", None)):
            raise TypeError(f"recorder ({recorder!r}) must be a GoodputRecorder "
                            "(it has no record_step_device_end_time method)")
        if clock is not None and not callable(clock):
            raise TypeError(f"clock ({clock!r}) must be a callable returning UTC seconds")
        self.recorder = recorder
        self._enabled = bool(getattr(recorder, "logging_enabled", True))
        self._clock = clock or time.time
        self._att = attach(recorder) if compile_times and self._enabled else None
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_step = recorder.record_step_start_time
        self.tracked = 0
        self.observed = 0
        self.unobserved = 0
        self._warned = False

    # ------------------------------------------------------------ hot path
    def start(self, step: int) -> None:
        """Record the host-side start of ``step`` (before fetching nothing: right before dispatch).

        Example:
            >>> from goodput_jax import goodput, runtime
            >>> runtime.StepRecorder(goodput.GoodputRecorder("j", "l")).start(0)
        """
        if not self._enabled:
            return
        self._start_step(step)
        att = self._att
        if att is not None:
            att._step_started()

    def track(self, step: int, outputs: Any) -> None:
        """Hand ``step``'s outputs to the watcher; returns at once.

        The device end of ``step`` is recorded when every JAX array among
        ``outputs`` is ready. Pass outputs that the next step does not donate
        (the loss, the metrics): a donated array cannot be watched after the
        next step is dispatched (such arrays are skipped).

        Example:
            >>> from goodput_jax import goodput, runtime
            >>> runtime.StepRecorder(goodput.GoodputRecorder("j", "l")).track(0, None)
        """
        if not self._enabled:
            return
        if self._thread is None:
            self._start_thread()
        self.tracked += 1
        self._q.put((step, outputs))

    def __call__(self, step: int, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``start(step)``, ``out = fn(*args, **kwargs)``, ``track(step, out)``; returns ``out``.

        Example:
            >>> from goodput_jax import goodput, runtime
            >>> runtime.StepRecorder(goodput.GoodputRecorder("j", "l"))(3, max, 1, 2)
            2
        """
        if not self._enabled:
            return fn(*args, **kwargs)
        self._start_step(step)
        att = self._att
        if att is not None:
            att._step_started()
        out = fn(*args, **kwargs)
        if self._thread is None:
            self._start_thread()
        self.tracked += 1
        self._q.put((step, out))
        return out

    # ------------------------------------------------------------- watcher
    def _start_thread(self) -> None:
        self._thread = threading.Thread(target=self._watch, name="goodput-step-watcher",
                                        daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        import jax

        get, clock = self._q.get, self._clock
        is_array = jax.Array
        leaves_of = jax.tree_util.tree_leaves
        record = self.recorder.record_step_device_end_time
        while True:
            item = get()
            if item is _STOP:
                return
            if isinstance(item, _Marker):
                item.done.set()
                continue
            step, outputs = item
            watched = False
            for leaf in leaves_of(outputs):
                if not isinstance(leaf, is_array) or leaf.is_deleted():
                    continue
                try:
                    leaf.block_until_ready()
                    watched = True
                except Exception:  # noqa: BLE001 - deleted (donated) meanwhile: try the next
                    continue
            if watched:
                try:
                    record(step, clock())
                    self.observed += 1
                except Exception:  # noqa: BLE001 - never crash the watcher
                    logger.exception("goodput StepRecorder: recording step %r failed", step)
            else:
                self.unobserved += 1
                if not self._warned:
                    self._warned = True
                    logger.warning(
                        "goodput StepRecorder: step %r's outputs had no live JAX array to watch "
                        "(donated to the next step?); track the loss or metrics instead", step)

    # ------------------------------------------------------------- control
    def finish(self, timeout: float | None = None) -> bool:
        """Wait until every tracked step's device end is recorded (call before the job end).

        Args:
            timeout: seconds to wait at most (None: until done).

        Returns:
            True when the watcher caught up.

        Example:
            >>> from goodput_jax import goodput, runtime
            >>> runtime.StepRecorder(goodput.GoodputRecorder("j", "l")).finish()
            True
        """
        if self._thread is None:
            return True
        m = _Marker()
        self._q.put(m)
        return m.done.wait(timeout)

    def close(self, timeout: float | None = 10.0) -> None:
        """:meth:`finish`, then stop the watcher thread (idempotent)."""
        if self._thread is None:
            return
        self.finish(timeout)
        self._q.put(_STOP)
        self._thread.join(timeout)
        self._thread = None

    def __enter__(self) -> StepRecorder:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
