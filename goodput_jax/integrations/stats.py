"""The gradient statistics a training loop's steps produce, read without stalling it.

:class:`GradStatsReader` holds the newest statistics the hooks took from a step (a
:class:`goodput_jax.model.gradstats.GradStatsState` in its outputs, or the
``stats_summary()`` of a :func:`goodput_jax.adaptive.make_train_step` step) as an
on-device :class:`~goodput_jax.model.gradstats.StatsSummary` ``(count, |G|^2, tr(Sigma))``
(a user's step function may still hand over the ``[count, sqr, var]`` vector of
earlier versions), and turns them into
:class:`GradParams` only when asked: :attr:`GradStatsReader.grad_params` reads the
summary back (one small transfer), :meth:`GradStatsReader.nowait` does not wait for a
step still running.
"""

from __future__ import annotations

import math
import threading
from typing import Any, Protocol, runtime_checkable

import jax
import numpy as np

from goodput_jax.model import gradstats
from goodput_jax.model.types import GradParams

__all__ = ["GradStatsReader", "summary_program"]


@jax.jit
def _stats_summary(st: Any) -> Any:
    """The :class:`~goodput_jax.model.gradstats.StatsSummary` of a :class:`GradStatsState`
    in ONE device program.

    It reads the state before the next step can donate it, and reading the
    result back later is one small transfer (no per-field ``device_get``, no
    eager ops on the host).
    """
    return gradstats.stats_summary(st)


#: Compiled summary programs, per (device, field types), shared by every reader in the
#: process: a Compiled, or None while its compile runs on a background thread.
_SUMMARY_PROGRAMS: dict[tuple, Any] = {}
_SUMMARY_THREADS: dict[tuple, threading.Thread] = {}
_SUMMARY_LOCK = threading.Lock()


def _summary_key(st: Any) -> tuple | None:
    """The program key of a :class:`GradStatsState` of single-device arrays on one device
    (None otherwise: such a state takes the jitted summary on the calling thread)."""
    leaves = jax.tree.leaves(st)
    shardings = {x.sharding for x in leaves}
    if len(shardings) != 1:
        return None
    (sh,) = shardings
    if not isinstance(sh, jax.sharding.SingleDeviceSharding):
        return None
    return (sh, tuple((x.shape, str(x.dtype), bool(x.weak_type)) for x in leaves))


def summary_program(st: Any, *, wait: bool = False) -> Any:
    """The compiled summary program for ``st`` (a :class:`GradStatsState` of device arrays),
    compiled once per process on a background thread.

    The first request for a kind of state starts the compile on a (non-daemon) thread and
    returns None (``wait=True``: waits for it): the training thread never compiles it, so
    the hooks add no compile to the job's program startup, and every
    :class:`GradStatsReader` (every :class:`GoodputHooks`) in the process shares it. A
    state that is not on one device (sharded fields) gets the jitted summary, compiled on
    the calling thread.

    Example:
        >>> import jax
        >>> st = jax.device_put(gradstats.init_grad_stats(), jax.devices()[0])
        >>> prog = summary_program(st, wait=True)
        >>> int(prog(st).count), summary_program(st) is prog
        (0, True)
    """
    key = _summary_key(st)
    if key is None:
        return _stats_summary
    with _SUMMARY_LOCK:
        if key in _SUMMARY_PROGRAMS:
            prog = _SUMMARY_PROGRAMS[key]
            thread = _SUMMARY_THREADS.get(key)
        else:
            prog = None
            _SUMMARY_PROGRAMS[key] = None
            specs = jax.tree.map(lambda x: jax.ShapeDtypeStruct(
                x.shape, x.dtype, sharding=x.sharding, weak_type=x.weak_type), st)

            def compile_it() -> None:
                exe: Any  # the compiled summary, or the jitted one where compiling failed
                try:
                    exe = _stats_summary.lower(specs).compile()
                except Exception:  # noqa: BLE001 - the jitted summary serves instead
                    exe = _stats_summary
                with _SUMMARY_LOCK:
                    _SUMMARY_PROGRAMS[key] = exe

            # not a daemon: an interpreter that exits while XLA compiles on a daemon
            # thread aborts (see integrations.fit.precompile_fit_once)
            thread = threading.Thread(target=compile_it, name="goodput-summary-compile")
            _SUMMARY_THREADS[key] = thread
            thread.start()
    if prog is None and wait and thread is not None:
        thread.join()
        with _SUMMARY_LOCK:
            prog = _SUMMARY_PROGRAMS[key]
    return prog


def _checked(summary: Any, fn: Any) -> Any:
    """``summary`` (``fn.stats_summary()``'s value) when it is one the reader can read (or
    None); else a TypeError naming it, at the step that handed it over. Type and shape
    only: no wait for the device."""
    if summary is None or gradstats.is_stats_summary(summary):
        return summary
    raise TypeError(f"stats_summary() of {getattr(fn, '__name__', fn)!r} returned "
                    f"{summary!r:.200}: it must return a StatsSummary(count, sqr, var), a "
                    "[count, sqr, var] vector of shape (3,), or None")


@runtime_checkable
class SummarizingStep(Protocol):
    """A step function that hands over its gradient statistics itself
    (:func:`goodput_jax.adaptive.make_train_step`): ``stats_summary()`` returns the last
    call's :class:`~goodput_jax.model.gradstats.StatsSummary` (or None)."""

    def stats_summary(self) -> Any: ...


class GradStatsReader:
    """The newest gradient statistics, as :class:`GradParams` on demand.

    Args:
        every: :meth:`after_step` takes a step's statistics every this many steps (every 10
            until then: early decisions need some).

    Attributes:
        pending: statistics taken but not read back yet (a device
            :class:`~goodput_jax.model.gradstats.StatsSummary` or ``[count, sqr, var]``
            vector, a host-side :class:`GradStatsState`, or None).
        count: steps folded into the current statistics (0 before any; ``math.inf``
            when they were set directly or restored).

    Example:
        >>> r = GradStatsReader()
        >>> r.set(GradParams(1.0, 3.0)); r.grad_params, r.count, r.noise_scale()
        (GradParams(sqr=1.0, var=3.0), inf, 3.0)
    """

    def __init__(self, every: int = 50) -> None:
        self.every = int(every)
        self.pending: Any = None
        self.count: float = 0
        self._params: GradParams | None = None
        #: why no statistics are shown (:func:`goodput_jax.model.gradstats.stats_note`), or
        #: None: the steps' updates brought one gradient each (no collection helper)
        self.note: str | None = None
        self._next = 0  # the next step index whose statistics are taken
        self._summary_of: Any = None  # the step function's stats_summary, if any
        # this loop's last step's summary: the step function may also serve another loop
        # (its stats_summary() is whichever call was last)
        self._last_summary: Any = None
        self._last_out: Any = None
        #: whether the last step whose statistics were due handed over none (and none
        #: were set): :class:`GoodputHooks` warns once
        self.missing = False

    def after_step(self, index: int, fn: Any, out: Any) -> None:
        """After the loop's ``index``-th step ``fn`` returned ``out``: take its statistics when due.

        A step function with a ``stats_summary()`` (:func:`goodput_jax.adaptive.make_train_step`)
        hands over its in-step summary (a reference, no dispatch); otherwise any
        :class:`GradStatsState` in ``out`` is copied on the device (:meth:`observe`).

        Raises:
            TypeError: ``fn.stats_summary()`` returned something other than a
                :class:`~goodput_jax.model.gradstats.StatsSummary`, a ``[count, sqr, var]``
                vector or None.
        """
        self._last_out = out
        if index >= self._next:
            if isinstance(fn, SummarizingStep):
                summary = fn.stats_summary
                self._summary_of = summary
                self.pending = self._last_summary = _checked(summary(), fn)
                self.missing = False
            elif out is None:
                self.missing = self._params is None
                return
            else:
                self._summary_of = self._last_summary = None
                self.missing = not self.observe(out) and self._params is None
            every = self.every
            self._next = index + (min(10, every) if index < every else every)
        elif self._summary_of is not None:
            self._last_summary = _checked(self._summary_of(), fn)

    def flush(self) -> None:
        """Take the statistics of the last step (call once it completed)."""
        out, self._last_out = self._last_out, None
        if self._last_summary is not None:
            self.pending = self._last_summary
        elif out is not None and not any(
                isinstance(x, jax.Array) and x.is_deleted() for x in jax.tree.leaves(out)):
            self.observe(out, wait=True)

    def observe(self, outputs: Any, *, wait: bool = False) -> bool:
        """Take the statistics from ``outputs``: a
        :class:`~goodput_jax.model.gradstats.StatsSummary` in them (the step computed it:
        kept as it is, no device program), else any :class:`GradStatsState` (also inside
        an optimizer state or a Flax NNX ``nnx.Optimizer``, whose arrays sit in
        ``OptArray`` boxes).

        A :class:`GradStatsState` is reduced by one small on-device program (the step
        may donate the original on its next call); either is read back only when the
        statistics are needed. That program is compiled once per process on a background
        thread (:func:`summary_program`); until it is ready a state is skipped (the next
        read takes the statistics), unless ``wait``. Returns whether ``outputs`` held
        statistics.
        """
        kinds = (gradstats.StatsSummary, gradstats.GradStatsState)
        found = [x for x in jax.tree.leaves(outputs, is_leaf=lambda x: isinstance(x, kinds))
                 if isinstance(x, kinds)]
        summaries = [x for x in found if isinstance(x, gradstats.StatsSummary)]
        if summaries:
            self.pending = summaries[0]
            return True
        if found:
            st = found[0]
            leaves = jax.tree.leaves(st)
            if len(leaves) == len(st) and not all(
                    isinstance(f, (jax.Array, np.ndarray, np.generic, int, float, bool))
                    for f in st):
                # boxed fields (Flax NNX's OptArray): the same arrays, unboxed
                st = gradstats.GradStatsState(*leaves)
            if all(isinstance(x, jax.Array) for x in leaves):
                if all(x.sharding.is_fully_replicated for x in leaves):
                    # one device's copy: a single-device program (~30 us to dispatch on
                    # the CPU backend vs ~200 us for one replicated over every device)
                    st = jax.tree.map(lambda x: x.addressable_shards[0].data, st)
                prog = summary_program(st, wait=wait)
                if prog is None:  # compiling in the background: the next read takes them
                    return True
                self.pending = prog(st)
            else:
                self.pending = st
            return True
        return False

    def set(self, grad_params: Any, count: float = math.inf) -> None:
        """Set the statistics directly: :class:`GradParams`, a
        :class:`~goodput_jax.model.gradstats.StatsSummary`, or an optimizer state holding them."""
        if isinstance(grad_params, gradstats.StatsSummary):
            self.pending = grad_params
        elif isinstance(grad_params, GradParams):
            self.pending = None
            self._params = GradParams(float(grad_params.sqr), float(grad_params.var))
            self.count = count
        elif not self.observe(grad_params, wait=True):
            raise ValueError(f"grad_params ({grad_params!r:.80}) holds no gradient statistics: "
                             "pass GradParams, a StatsSummary, or an optimizer state (optax "
                             "or Flax NNX) built with gradient_noise_scale")

    @property
    def grad_params(self) -> GradParams | None:
        """Current smoothed :class:`GradParams` as floats (reads pending ones back), or None."""
        st, self.pending = self.pending, None
        if st is not None:
            if isinstance(st, gradstats.GradStatsState):  # host-side state: no summary program
                st = gradstats.stats_summary(st)  # (a flagged state's summary shows nothing)
            summary = gradstats.as_stats_summary(st, "the pending statistics")
            if summary.count > 0:
                self._params = GradParams(summary.sqr, summary.var)
                self.count = summary.count
            self.note = gradstats.stats_note(summary)
        return self._params

    def nowait(self) -> GradParams | None:
        """:attr:`grad_params` without waiting for a step still running (then the previous)."""
        st = self.pending
        if isinstance(st, (jax.Array, gradstats.StatsSummary)):
            try:
                leaves = st if isinstance(st, tuple) else (st,)
                # jax.Array's stub lacks is_ready (every concrete array has it)
                if not all(x.is_ready() for x in leaves  # type: ignore[attr-defined]
                           if isinstance(x, jax.Array)):
                    return self._params
            except Exception:  # noqa: BLE001, S110 - deleted: grad_params drops it
                pass
        return self.grad_params

    def noise_scale(self) -> float | None:
        """``var / sqr`` of the statistics read last (None before any, or ``sqr <= 0``)."""
        gp = self._params
        return None if gp is None or gp.sqr <= 0 else gp.var / gp.sqr
