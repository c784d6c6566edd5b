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

The training thread pays for one ``record_step_start_time``, at most one readiness poll and
one queue put per step (a few microseconds; ``benchmarks/step_recorder_bench.py``);
everything else (finding the array to watch, waiting, recording the device end)
happens on the watcher thread.

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
from collections.abc import Callable
from typing import Any, Self

from goodput_jax.runtime.compile import attach

logger = logging.getLogger(__name__)

__all__ = ["StepRecorder"]

_STOP = object()


class _Marker:
    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = threading.Event()


class _Item:
    """One tracked step: its outputs, a cheap probe leaf, and when it was seen ready."""

    __slots__ = ("outputs", "probe", "step", "t")

    def __init__(self, step: int, outputs: Any):
        self.step = step
        self.outputs = outputs
        self.probe = _probe(outputs)
        self.t: float | None = None  # claimed: 1.0 recorded, -1.0 unobservable


def _wait_ready(outputs: Any, leaves_of: Callable, is_array: type) -> bool:
    """Block until every live array of ``outputs`` is ready; False when none could be watched."""
    watched = False
    for leaf in leaves_of(outputs):
        if not isinstance(leaf, is_array) or leaf.is_deleted():
            continue
        try:
            leaf.block_until_ready()
            watched = True
        except Exception:  # noqa: BLE001, S112 - deleted (donated) meanwhile: try the next
            continue
    return watched


def _probe(out: Any) -> Any:
    """A leaf to poll on the training thread: the array itself, else the last element of a
    tuple / list / dict, a few levels deep (``(state, {"loss": loss})`` -> ``loss``), else None."""
    depth = 0
    while depth < 6:
        t = type(out)
        if t is tuple or t is list:
            if not out:
                return None
            out = out[-1]
        elif t is dict:
            if not out:
                return None
            out = next(reversed(out.values()))
        else:
            return out if hasattr(out, "is_ready") else None
        depth += 1
    return None


class StepRecorder:
    """Records step starts on the host and step ends on the device, without blocking.

    A step's device end is the first moment its outputs are seen ready, by
    whichever comes first: the watcher thread, which waits on the step's probe
    array (the last leaf of the outputs, e.g. the loss: one program's outputs
    are ready together; every live array when there is no such leaf), prompt
    while the training thread waits (loading, blocking, a full dispatch queue);
    or the training thread itself, which polls the probe of the step the
    watcher waits on at a ``start`` when the watcher has not moved on since the
    previous one (prompt while it dispatches ahead and the watcher waits for
    the GIL). The first tracked step is waited for at the second
    ``start`` (once, usually hidden behind loading the next batch), so the store
    shows device ends before the host runs ahead.

    Args:
        recorder: the :class:`~goodput_jax.measure.recorder.GoodputRecorder`
            written to (a disabled one makes every call a plain function call).
        compile_times: also attach the recorder for compile times (the
            attachment then knows when training started: compiles before and
            within the first step are program startup, later repeats are
            recompiles).

    Attributes:
        tracked: steps handed over.
        observed: steps whose device end was recorded.
        unobserved: steps whose outputs could not be watched (every array was
            donated to a later step before it was seen ready, or none was a
            JAX array).

    Example:
        >>> from goodput_jax import goodput, runtime
        >>> steps = runtime.StepRecorder(goodput.GoodputRecorder("j", "l"))  # disabled
        >>> steps(0, lambda x: x + 1, 1)
        2
        >>> steps.finish()
        True
    """

    def __init__(self, recorder: Any, *, compile_times: bool = True):
        if not callable(getattr(recorder, "record_step_device_end_time", None)):
            raise TypeError(f"recorder ({recorder!r}) must be a GoodputRecorder "
                            "(it has no record_step_device_end_time method)")
        self.recorder = recorder
        self._enabled = bool(getattr(recorder, "logging_enabled", True))
        self._att = attach(recorder) if compile_times and self._enabled else None
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._head: _Item | None = None  # the step the watcher is waiting on
        self._polled: _Item | None = None  # the head seen at the previous start
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._start_step = recorder.record_step_start_time
        self._record_end = recorder.record_step_device_end_time
        self._first: _Item | None = None
        self.tracked = 0
        self.observed = 0
        self.unobserved = 0
        self._warned = False

    # ------------------------------------------------------------ hot path
    def _poll(self) -> None:
        """Record the device end of the step the watcher waits on, if it is ready (training
        thread): the watcher may be waiting for the GIL while this thread runs Python.

        Only when the watcher is on the same step as at the previous ``start``: while it
        keeps up, its step moves on about once per host iteration and the poll (a readiness
        query, ~10 us with the cold caches of a loop that waits on data) is skipped."""
        item = self._head
        if item is not self._polled:
            self._polled = item
            return
        if item is None or item.t is not None:
            return
        p = item.probe
        if p is None:
            return
        try:
            ready = p.is_ready()
        except Exception:  # noqa: BLE001 - deleted (donated): the watcher decides
            return
        if ready:
            self._claim(item)

    def _claim(self, item: _Item) -> None:
        """Record ``item``'s device end now (the recorder's clock), unless already recorded."""
        with self._lock:
            if item.t is not None:
                return
            item.t = 1.0
            item.outputs = None
            try:
                self._record_end(item.step)
                self.observed += 1
            except Exception:
                logger.exception("goodput StepRecorder: recording step %r failed", item.step)

    def _wait_first(self) -> None:
        """The first tracked step is waited for when the second starts: from then on the
        store shows device ends, so every later step is read as device time (one wait per
        StepRecorder, usually hidden behind the next batch's loading)."""
        import jax

        item, self._first = self._first, None
        if item.t is None and _wait_ready(item.outputs, jax.tree_util.tree_leaves, jax.Array):
            self._claim(item)

    def start(self, step: int) -> None:
        """Record the host-side start of ``step`` (right before its dispatch).

        Example:
            >>> from goodput_jax import goodput, runtime
            >>> runtime.StepRecorder(goodput.GoodputRecorder("j", "l")).start(0)
        """
        if not self._enabled:
            return
        if self._first is not None:
            self._wait_first()
        if self._head is not None:
            self._poll()
        self._start_step(step)
        att = self._att
        if att is not None:
            att.step_started()

    def track(self, step: int, outputs: Any) -> None:
        """Hand ``step``'s outputs over; returns at once.

        The device end of ``step`` is recorded when its outputs are ready.
        Pass outputs that the next step does not donate (the loss, the
        metrics, or ``(state, metrics)``): a donated array cannot be watched
        after the next step is dispatched (such arrays are skipped).

        Example:
            >>> from goodput_jax import goodput, runtime
            >>> runtime.StepRecorder(goodput.GoodputRecorder("j", "l")).track(0, None)
        """
        if not self._enabled:
            return
        if self._thread is None:
            self._start_thread()
        if self.tracked:
            self.tracked += 1
            self._q.put((step, outputs))  # the watcher builds the _Item
            return
        self.tracked = 1
        self._first = item = _Item(step, outputs)
        self._q.put(item)

    def __call__(self, step: int, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``start(step)``, ``out = fn(*args, **kwargs)``, ``track(step, out)``; returns ``out``.

        Example:
            >>> from goodput_jax import goodput, runtime
            >>> runtime.StepRecorder(goodput.GoodputRecorder("j", "l"))(3, max, 1, 2)
            2
        """
        if not self._enabled:
            return fn(*args, **kwargs)
        self.start(step)
        out = fn(*args, **kwargs)
        self.track(step, out)
        return out

    # ------------------------------------------------------------- watcher
    def _start_thread(self) -> None:
        self._thread = threading.Thread(target=self._watch, name="goodput-step-watcher",
                                        daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        import jax

        get = self._q.get
        is_array = jax.Array
        leaves_of = jax.tree_util.tree_leaves
        while True:
            item = get()
            if item is _STOP:
                return
            if type(item) is tuple:
                item = _Item(*item)
            elif isinstance(item, _Marker):
                self._head = None
                item.done.set()
                continue
            if item.t is not None:
                continue  # the training thread saw it first
            self._head = item
            p = item.probe
            if p is not None:
                try:  # one output of the step's program: all its outputs are ready together
                    p.block_until_ready()
                    self._claim(item)
                    continue
                except Exception:  # noqa: BLE001, S110 - deleted (donated): watch the other leaves
                    pass
            if _wait_ready(item.outputs, leaves_of, is_array):
                self._claim(item)
                continue
            with self._lock:
                if item.t is not None:
                    continue
                item.t = -1.0
                item.outputs = None
                self.unobserved += 1
            if not self._warned:
                self._warned = True
                logger.warning(
                    "goodput StepRecorder: step %r's outputs had no live JAX array to watch "
                    "(donated to the next step?); track the loss or metrics instead", item.step)

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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
