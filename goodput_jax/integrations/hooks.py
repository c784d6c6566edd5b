"""Drop-in training hooks: measured goodput events + the Pollux model, from one object.

A Flax / MaxText-style loop adds two lines::

    hooks = GoodputHooks("my-job", init_batch_size=64, atomic_bsz=64, max_batch_size=1024)
    for i, batch in enumerate(batches):
        state = hooks.step(i, train_step, state, batch)   # was: state = train_step(state, batch)

``hooks.step`` runs the (jitted) step and returns at once (it never waits for
the step it just dispatched), and:

* records the step's start and, one step late, its device end through a
  :class:`GoodputRecorder` (created here, or the one passed in);
* profiles the step time under the current configuration
  ``(num_nodes, num_replicas, atomic_bsz, accum_steps)``. Step times come from
  ONE timing function, :class:`goodput_jax.runtime.OneStepLateTimer`: after
  dispatching step ``i`` it waits for step ``i - 1``'s outputs, so host and
  device overlap by one step; a step's time is its device-busy interval
  ``ready(i) - max(dispatch(i), ready(i - 1))``;
* drops each configuration's first ``warmup_steps`` steps (compilation,
  warm-up) and the process's first ``job_warmup_steps`` more, keeps a bounded window of samples per configuration, and fits the
  step-time model to their medians, weighted by the sample counts;
* picks up the gradient statistics that :func:`goodput_jax.gradient_noise_scale`
  keeps in the optimizer state anywhere in the step's outputs (also a Flax NNX
  ``nnx.Optimizer``'s, :mod:`goodput_jax.integrations.nnx`): every
  ``stats_every`` steps one asynchronous device program reduces them to
  a ``StatsSummary(count, sqr, var)`` (read back lazily in one device_get, never
  blocking the step; the program is compiled once per process on a background
  thread, so it adds nothing to the job's program startup), or takes a
  ``StatsSummary`` the step returns as it is. A step whose outputs hold no
  statistics makes the hooks warn once, naming the fix;
* every ``refit_interval`` seconds of profiled time, on the primary process
  only, and only when the profile changed materially (a new configuration, or
  a median or the noise scale moved by more than ``refit_tolerance``),
  refits :class:`PerfParams` on a background thread, combines them with
  the current :class:`GradParams` into a :class:`GoodputFunction` and publishes
  the scheduler hints (``recorder.record_hints``) next to the job's events.

:meth:`GoodputHooks.suggest` returns the best ``(atomic_bsz, accum_steps)`` for
the current (or a given) replica count with the predicted speedup and how far
the model can be trusted (its median error on the profiled configurations);
it refuses replica counts beyond twice the largest profiled one (AdaptDL's
allocator limit). :meth:`GoodputHooks.hints` returns the hints (AdaptDL's JSON
keys, :class:`goodput_jax.model.hints.Hints`). :meth:`GoodputHooks.cost`
reports the hooks' own time on the training thread and in the background.

Timing the accumulation split: when each micro-step is its own call, time the
non-final calls with :meth:`GoodputHooks.accum_step` and the final one with
:meth:`GoodputHooks.step` (AdaptDL's profile semantics; these block, as a
separate micro-step must be timed alone). When the accumulation is fused into
one call, the step time ``T`` with ``s`` extra micro-steps is split evenly:
``s`` accumulation samples and one optimizer sample of ``T / (s + 1)`` each.

With the JAX runtime capture, pass the loop's :class:`goodput_jax.runtime.StepRecorder`
(``GoodputHooks(..., steps=steps)``): the steps are recorded through it on its recorder,
and :meth:`GoodputHooks.job` joins the job ``runtime.start_job`` started (one recorder,
one job start; the quick start's section 4 shows the whole loop).

The hooks compose rooms of one job each: the recorder's public fast path
(:meth:`GoodputRecorder.step_sink`), the runtime's step timer, the profile
(:mod:`goodput_jax.integrations.profile`), the fit and its worker
(:mod:`~goodput_jax.integrations.fit`), the search
(:mod:`~goodput_jax.integrations.search`), the hints
(:mod:`~goodput_jax.integrations.publish`) and the checkpoint state
(:mod:`~goodput_jax.integrations.state`); the Pollux math is the model's
(:mod:`goodput_jax.model.formulas`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import numbers
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any, Self

import jax
import numpy as np

from goodput_jax.integrations.checks import check_limits, nonneg_int, nonneg_number, positive_int
from goodput_jax.integrations.fit import (
    PRECOMPILE_EXIT_WAIT,
    FitSnapshot,
    RefitPool,
    fit_profile,
    model_errors,
    precompile_fit_once,
)
from goodput_jax.integrations.profile import (
    PROFILE_WINDOW,
    RAW_BATCH,
    ProfileEntry,
    ProfileKey,
    StepProfile,
)
from goodput_jax.integrations.publish import make_hints
from goodput_jax.integrations.search import Suggestion, feasible_configs, search
from goodput_jax.integrations.state import parse_state_dict, to_state_dict
from goodput_jax.integrations.stats import GradStatsReader
from goodput_jax.model.formulas import efficiency_np, throughput_np
from goodput_jax.model.hints import max_replicas_allowed
from goodput_jax.model.types import GradParams, PerfParams
from goodput_jax.runtime.contracts import HooksRecording, require
from goodput_jax.runtime.steps import StepRecorder
from goodput_jax.runtime.timer import OneStepLateTimer

__all__ = ["PRECOMPILE_EXIT_WAIT", "PROFILE_WINDOW", "GoodputHooks", "OneStepLateTimer",
           "ProfileEntry", "Suggestion", "feasible_configs", "max_replicas_allowed",
           "precompile_fit_once"]

_log = logging.getLogger(__name__)
_wall = time.time


class GoodputHooks:
    """Goodput recording, step-time profiling and Pollux hints for one training loop.

    Args:
        job_name: the job's name (as for :class:`GoodputRecorder`).
        init_batch_size: ``M0``, the total batch size the learning rate was tuned for.
        atomic_bsz: current per-replica micro-batch size (default
            ``init_batch_size // num_replicas``).
        accum_steps: current extra accumulation steps (0 = none).
        max_batch_size: largest total batch the job accepts (default ``init_batch_size``).
        local_bsz_bounds: ``(min, max)`` per-replica batch size; either may be None.
        gradient_accumulation: whether suggestions may use accumulation.
        num_nodes: nodes in use (default ``jax.process_count()``).
        num_replicas: data-parallel replicas (default ``jax.device_count()``).
        recorder: a :class:`GoodputRecorder` to use; by default one is created
            with ``logger_name = f"goodput_{job_name}"`` and ``store``, enabled on
            the primary process.
        store: store (or URL) for the internally created recorder.
        refit_interval: seconds of profiled training time between refits.
        clock: monotonic seconds for step timing (injectable for tests).
        is_primary: whether this process fits and publishes (default
            ``jax.process_index() == 0``).
        warmup_steps: steps dropped at the start of every configuration.
        job_warmup_steps: further steps dropped at the start of the process (its
            first configuration): a process's first steps run with cold caches,
            thread pools and allocators (5-10x the steady step on the CPU backend),
            and a configuration that is not revisited would keep them in its profile.
        stats_every: read the gradient statistics every this many steps.
        background: refit on a background thread; False: inline (measured in
            :meth:`cost`). Default ``None``: background, except on the CPU
            backend with several local devices, where a JAX computation on a
            second thread can starve the in-process all-reduce of a
            multi-device step (XLA aborts after a 40 s rendezvous timeout).
        record_device_ends: record each step through a StepRecorder of the hooks' own
            (default True; its device end as soon as it happens, and the program's cost:
            the facts ``steps.wrap`` records). Pass False only when the loop's own
            :class:`goodput_jax.runtime.StepRecorder` tracks the outputs
            (``steps.track``), so each step has one device end; prefer ``steps=``.
        refit_tolerance: a periodic refit (every ``refit_interval``) runs only
            when the profile changed materially since the last fit: a new
            configuration, or a configuration's median step time or the gradient
            noise scale moved by more than this fraction. Explicit
            :meth:`refit` calls always fit.
        profile_quantile: the per-configuration statistic the fit uses: this
            quantile of the kept step times (0.5: the median). On a machine
            shared with other work, load only ever lengthens steps; a lower
            quantile (e.g. 0.25) follows the configuration's own time more
            reproducibly.
        profile_window: step times kept per configuration (the newest); the
            statistic above and the fit's sample weights use them. A window
            longer than a configuration's whole profile keeps every sample, so
            that configurations profiled in interleaved rounds are compared over
            the same stretch of the job; a shorter one follows drift.
        steps: the loop's :class:`goodput_jax.runtime.StepRecorder` (with
            ``runtime.start_job``): :meth:`step` records each step through its call,
            ``steps(step, fn, ...)`` (its start, its device end as soon as it happens,
            the program's cost), on its recorder (the default ``recorder``). This is how
            the runtime capture and the hooks share one recorder and one job.
            :meth:`step_context` records through ``start``/``track``, which cannot read
            the program (the StepRecorder says so once).

    Example:
        >>> hooks = GoodputHooks("doc-job", init_batch_size=32, is_primary=False)
        >>> hooks.step(0, lambda x: x + 1, 1)
        2
    """

    def __init__(
        self,
        job_name: str,
        *,
        init_batch_size: int,
        atomic_bsz: int | None = None,
        accum_steps: int = 0,
        max_batch_size: int | None = None,
        local_bsz_bounds: tuple[int | None, int | None] | None = None,
        gradient_accumulation: bool = False,
        num_nodes: int | None = None,
        num_replicas: int | None = None,
        recorder: HooksRecording | None = None,
        store: Any = None,
        refit_interval: float = 30.0,
        clock: Callable[[], float] = time.perf_counter,
        is_primary: bool | None = None,
        warmup_steps: int = 2,
        job_warmup_steps: int = 8,
        stats_every: int = 50,
        background: bool | None = None,
        record_device_ends: bool = True,
        refit_tolerance: float = 0.05,
        profile_quantile: float = 0.5,
        profile_window: int = PROFILE_WINDOW,
        steps: StepRecorder | None = None,
    ):
        if not isinstance(job_name, str) or not job_name:
            raise ValueError(f"job_name ({job_name!r}) must be a non-empty string")
        self.job_name = job_name
        self.init_batch_size, self.max_batch_size, self.local_bsz_bounds = check_limits(
            init_batch_size, max_batch_size, local_bsz_bounds)
        self.num_nodes = positive_int(
            jax.process_count() if num_nodes is None else num_nodes, "num_nodes"
        )
        self.num_replicas = positive_int(
            jax.device_count() if num_replicas is None else num_replicas, "num_replicas"
        )
        if self.num_nodes > self.num_replicas:
            raise ValueError(f"num_nodes ({self.num_nodes}) > num_replicas ({self.num_replicas})")
        if atomic_bsz is None:
            atomic_bsz = max(1, self.init_batch_size // self.num_replicas)
        self.atomic_bsz = positive_int(atomic_bsz, "atomic_bsz")
        self.accum_steps = nonneg_int(accum_steps, "accum_steps")
        self.gradient_accumulation = bool(gradient_accumulation)
        self.refit_interval = nonneg_number(refit_interval, "refit_interval")
        self.refit_tolerance = nonneg_number(refit_tolerance, "refit_tolerance")
        if not (isinstance(profile_quantile, numbers.Real) and 0.0 < profile_quantile <= 0.5):
            raise ValueError(f"profile_quantile ({profile_quantile!r}) must be in (0, 0.5]")
        self.profile_quantile = float(profile_quantile)
        self.profile_window = positive_int(profile_window, "profile_window")
        if not callable(clock):
            raise TypeError(f"clock ({clock!r}) must be a callable returning seconds")
        self._clock = clock
        self.warmup_steps = nonneg_int(warmup_steps, "warmup_steps")
        self.job_warmup_steps = nonneg_int(job_warmup_steps, "job_warmup_steps")
        self.stats_every = positive_int(stats_every, "stats_every")
        if background is None:
            background = not (jax.default_backend() == "cpu" and jax.local_device_count() > 1)
        self.background = bool(background)
        self.is_primary = (jax.process_index() == 0) if is_primary is None else bool(is_primary)
        if steps is not None:
            if not isinstance(steps, StepRecorder):
                raise TypeError(f"steps ({steps!r}) must be a goodput_jax.runtime.StepRecorder")
            if recorder is None:
                recorder = steps.recorder
            elif recorder is not steps.recorder:
                raise ValueError("steps (a StepRecorder) records to another recorder than "
                                 "recorder=; pass one recorder (or only steps=)")
            record_device_ends = False  # the StepRecorder records each step's device end
        if recorder is None:
            from goodput_jax.measure.recorder import GoodputRecorder

            recorder = GoodputRecorder(
                job_name, f"goodput_{job_name}", logging_enabled=self.is_primary, store=store
            )
            self._owns_recorder = True
        else:
            self._owns_recorder = False
        self.recorder: HooksRecording = require(recorder, HooksRecording)
        # ONE path to the recorder's step facts: every step of the hooks runs through a
        # StepRecorder's call (start, device end, program cost, compile times), the one
        # given (``steps=``) or one of the hooks' own
        self._owns_steps = steps is None and bool(record_device_ends)
        if self._owns_steps:
            steps = StepRecorder(recorder)
            record_device_ends = False
        self._steps = steps
        # record_device_ends=False (the loop's own StepRecorder tracks the outputs): the
        # starts go through the recorder's public fast path (its queue, in order with its
        # other events, one enqueue rule); None (disabled, synchronous, a custom clock): the
        # plain validated calls
        sink = recorder.step_sink() if steps is None else None
        self._put: Callable[..., None] | None = None if sink is None else sink.put
        self._start_code = None if sink is None else sink.START
        # The ONE timing function: the runtime's step timer.
        self._timer = OneStepLateTimer(clock)
        # Timed steps are appended to ``_raw`` on the training thread (one deque append per
        # step) and folded in batches under the profile's lock by whoever reads it.
        self._prof = StepProfile(warmup_steps=self.warmup_steps,
                                 job_warmup_steps=self.job_warmup_steps,
                                 window=self.profile_window, quantile=self.profile_quantile)
        self._raw = self._prof.pending
        self._pending_accum = 0
        self._since_fit = 0.0
        self._steps_seen = 0
        self._stats = GradStatsReader(self.stats_every)
        self._warned_missing = False
        self.perf_params: PerfParams | None = None
        self.model_error = float("nan")
        self.model_errors: dict[tuple[int, int, int], float] = {}
        self.fit_count = 0
        #: Periodic refits skipped because nothing changed materially (see ``refit_tolerance``).
        self.refits_skipped = 0
        self._fitted: FitSnapshot | None = None
        self.last_hints: dict | None = None
        self._pool = RefitPool()
        #: Seconds the hooks spent on the training thread / in the background.
        self.foreground_seconds = 0.0
        self.background_seconds = 0.0
        #: Seconds of refits + publishing run inline (``background=False``) by :meth:`maybe_refit`.
        self.inline_refit_seconds = 0.0
        # the fit's program is compiled while the first steps run (not in the first refit),
        # once per process, starting after the first step's call: the step's own compile,
        # booked as program startup, does not share the host's cores with it
        self._fit_precompiled = not self.is_primary

    # ------------------------------------------------------------------ configuration
    def config_key(self) -> ProfileKey:
        """The running configuration as a profile key ``(nodes, replicas, atomic_bsz, accum_steps)``.

        Example:
            >>> GoodputHooks("j", init_batch_size=8, is_primary=False, num_replicas=1,
            ...              num_nodes=1).config_key()
            (1, 1, 8, 0)
        """
        return (self.num_nodes, self.num_replicas, self.atomic_bsz, self.accum_steps)

    @property
    def clock(self) -> Callable[[], float]:
        """The monotonic clock that times the steps (injectable: ``clock=``)."""
        return self._clock

    def set_config(
        self,
        *,
        atomic_bsz: int | None = None,
        accum_steps: int | None = None,
        num_replicas: int | None = None,
        num_nodes: int | None = None,
    ) -> None:
        """Tell the hooks that the loop now runs another configuration.

        Waits for the pending step first, so its time is not charged with the
        next configuration's compilation.

        Example:
            >>> hooks = GoodputHooks("j", init_batch_size=8, is_primary=False, num_replicas=1)
            >>> hooks.set_config(atomic_bsz=16, accum_steps=1)
            >>> hooks.atomic_bsz, hooks.accum_steps
            (16, 1)
        """
        b = self.atomic_bsz if atomic_bsz is None else positive_int(atomic_bsz, "atomic_bsz")
        s = self.accum_steps if accum_steps is None else nonneg_int(accum_steps, "accum_steps")
        nodes = self.num_nodes if num_nodes is None else positive_int(num_nodes, "num_nodes")
        reps = self.num_replicas if num_replicas is None else positive_int(num_replicas, "num_replicas")
        if nodes > reps:
            raise ValueError(f"num_nodes ({nodes}) > num_replicas ({reps})")
        self._finish_timing(self._timer.flush())
        self._timer.reset()
        self.atomic_bsz, self.accum_steps = b, s
        self.num_nodes, self.num_replicas = nodes, reps
        self._pending_accum = 0

    @property
    def batch_size(self) -> int:
        """Current total batch size ``num_replicas * atomic_bsz * (accum_steps + 1)``."""
        return self.num_replicas * self.atomic_bsz * (self.accum_steps + 1)

    # ------------------------------------------------------------------ timing
    def accum_step(self, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        """Run and time one non-final accumulation micro-step (separate-call loops; blocks).

        Example:
            >>> hooks = GoodputHooks("j", init_batch_size=8, is_primary=False, num_replicas=1)
            >>> hooks.accum_step(lambda: 3)
            3
        """
        self._finish_timing(self._timer.flush())
        t0 = self._clock()
        out = jax.block_until_ready(fn(*args, **kwargs))
        dt = float(self._clock() - t0)
        self._timer.reset()
        if self._prof.add_accum(self.config_key(), dt):
            self._since_fit += dt
        self._pending_accum += 1
        return out

    def step(self, step: int, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        """Run one optimizer step ``fn(*args, **kwargs)``, record and profile it.

        Does not wait for the step: it waits for the previous one (one step
        late), records its device end and profiles its time. Any
        :class:`GradStatsState` in the outputs becomes the current gradient
        statistics (an asynchronous copy every ``stats_every`` steps). May start
        a refit (in the background) afterwards.

        Returns:
            ``fn``'s outputs.
        """
        fa = time.perf_counter()
        steps = self._steps
        t0 = self._clock()
        early = self._timer.before_dispatch(t0)
        fb = time.perf_counter()
        if steps is not None:
            # the StepRecorder's call: start, the step, its device end as soon as it happens
            # and the program's cost (the same facts as ``steps.wrap``)
            out = steps(step, fn, *args, **kwargs)
        else:  # record_device_ends=False: the loop's own StepRecorder tracks the outputs
            if self._put is not None and type(step) is int and step >= 0:
                self._put(self._start_code, _wall(), step)  # the recorder's sink: one call
            else:
                self.recorder.record_step_start_time(step)
            out = fn(*args, **kwargs)
        fc = time.perf_counter()
        t1 = self._clock()
        timer = self._timer
        waited0 = timer.waited
        if early:
            self._finish_timing(early)
        tag = (self.num_nodes, self.num_replicas, self.atomic_bsz, self.accum_steps,
               self._pending_accum)
        self._pending_accum = 0
        done = timer.dispatched(step, out, t0, t1, tag)
        if done:
            self._finish_timing(done)
        self._stats.after_step(self._steps_seen, fn, out)
        if self._stats.missing:
            self._warn_missing(step)
        self._steps_seen += 1
        if not self._fit_precompiled:
            self._precompile_fit()
        if self._since_fit >= self.refit_interval:
            self.maybe_refit()  # folds the timed steps in first (warm-up ones do not count)
        elif len(self._raw) >= RAW_BATCH:
            self._drain()
        waited = timer.waited - waited0
        # everything on this thread but the dispatch itself and the wait for the device
        self.foreground_seconds += max(time.perf_counter() - fc - waited, 0.0) + (fb - fa)
        return out

    def _precompile_fit(self) -> None:
        """Start compiling the fit's program in the background (once per process; the
        interpreter's exit waits for it): after the first step's call, whose compile it
        would otherwise slow down on a host with few free cores."""
        self._fit_precompiled = True
        precompile_fit_once()

    def _warn_missing(self, step: Any) -> None:
        """Warn once that the steps hand over no gradient statistics, naming the fix."""
        if self._warned_missing:
            return
        self._warned_missing = True
        warnings.warn(
            f"GoodputHooks({self.job_name!r}): step {step}'s outputs hold no gradient "
            "statistics, so suggest() and the hints' efficiency stay None; put "
            "gradient_noise_scale(M0) first in the optax chain and return the optimizer state "
            "(or gradstats.stats_summary(gradstats.get_grad_stats(opt_state)); Flax NNX: "
            "goodput_jax.integrations.nnx.stats_summary(optimizer)) from the step, or set "
            "them with hooks.update_grad_params()", UserWarning, stacklevel=3)

    def _finish_timing(self, done: list[tuple[int, float, float, Any]]) -> None:
        # the device ends are the StepRecorder's (or the loop's own one's): timing only
        for _step, seconds, _wall_end, tag in done:
            if tag is None:
                tag = (*self.config_key(), 0)
            # folded into the profile later, in a batch (:meth:`_drain`); the refit
            # trigger counts the seconds now and takes the dropped ones back then
            self._raw.append((tag, seconds))
            self._since_fit += seconds

    def flush(self) -> None:
        """Wait for the last dispatched step, record it and take its statistics.

        Call before checkpoints and at the end (``job()`` and ``close()`` do).
        """
        self._finish_timing(self._timer.flush())
        self._stats.flush()
        if self._owns_steps:
            self._steps.finish()

    @contextlib.contextmanager
    def step_context(self, step: int) -> Iterator[Callable[[Any], None]]:
        """Context-manager form: ``with hooks.step_context(i) as done: out = f(); done(out)``.

        ``done(outputs)`` hands over the outputs (timed one step late, as
        :meth:`step`); without it the time is whatever the block took.
        """
        steps = self._steps
        if steps is not None:
            steps.start(step)
        else:
            self.recorder.record_step_start_time(step)
        t0 = self._clock()
        early = self._timer.before_dispatch(t0)
        box: list = []
        yield box.append
        t1 = self._clock()
        if steps is not None:
            steps.track(step, box[0] if box else None)
        self._finish_timing(early)
        tag = (*self.config_key(), self._pending_accum)
        self._pending_accum = 0
        self._finish_timing(self._timer.dispatched(step, box[0] if box else None, t0, t1, tag))
        self._stats.after_step(self._steps_seen, None, box[0] if box else None)
        if self._stats.missing:
            self._warn_missing(step)
        self._steps_seen += 1
        if not self._fit_precompiled:
            self._precompile_fit()
        self.maybe_refit()

    def observe_step_time(self, seconds: float) -> None:
        """Add one optimizer step of ``seconds`` under the current configuration.

        Each configuration's first ``warmup_steps`` steps are dropped. With
        ``accum_steps > 0`` and no :meth:`accum_step` calls since the last step,
        the time is split evenly between the micro-steps (see module docs).
        """
        seconds = float(seconds)
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"seconds ({seconds!r}) must be a finite non-negative number")
        pending, self._pending_accum = self._pending_accum, 0
        self._raw.append(((*self.config_key(), pending), seconds))
        self._since_fit += seconds
        self._drain()

    @property
    def profile(self) -> dict[ProfileKey, ProfileEntry]:
        """Per-configuration step times, ``(nodes, replicas, atomic_bsz, accum_steps) -> entry``
        (every timed step folded in)."""
        self._drain()
        return self._prof.entries

    @profile.setter
    def profile(self, value: dict) -> None:
        self._prof.replace(value)

    def reset_profile(self, key: ProfileKey) -> None:
        """Forget configuration ``key``'s step times, so that it is measured afresh.

        ``key`` is ``(num_nodes, num_replicas, atomic_bsz, accum_steps)``. Its next
        ``warmup_steps`` steps are dropped again, and the next check refits with
        its new ones (the current fit is kept until then).
        :class:`~goodput_jax.adaptive.AdaptiveBatchSize` does this when it
        re-probes a configuration it left long ago.

        Example:
            >>> h = GoodputHooks("j", init_batch_size=8, is_primary=False, num_replicas=1,
            ...                  warmup_steps=0, job_warmup_steps=0)
            >>> h.observe_step_time(0.5)
            >>> h.reset_profile((1, 1, 8, 0))
            >>> (1, 1, 8, 0) in h.profile
            False
        """
        key = tuple(int(k) for k in key)
        self._drain()
        self._prof.reset(key)
        self.model_errors.pop(key[:3], None)
        if self._fitted is not None:  # the next refit fits its new times, whatever they are
            self._fitted.forget(key[:3])

    def step_samples(self, key: tuple[int, int, int, int] | None = None) -> list[float]:
        """The kept optimizer-step times of configuration ``key`` (default: the running one).

        The newest ``profile_window`` of them, oldest first (every timed step folded in);
        empty when the configuration has none.

        Example:
            >>> h = GoodputHooks("j", init_batch_size=8, is_primary=False, num_replicas=1,
            ...                  num_nodes=1, warmup_steps=0, job_warmup_steps=0)
            >>> for t in (0.25, 0.5):
            ...     h.observe_step_time(t)
            >>> h.step_samples(), h.step_samples((1, 1, 16, 0))
            ([0.25, 0.5], [])
        """
        key = self.config_key() if key is None else tuple(int(k) for k in key)
        self._drain()
        return self._prof.samples(key)

    def _drain(self) -> None:
        """Fold the timed steps into the profile (any thread); the steps the warm-up rules
        drop are taken back from the refit trigger."""
        dropped = self._prof.fold()
        if dropped:
            self._since_fit = max(self._since_fit - dropped, 0.0)

    def observe_outputs(self, outputs: Any) -> None:
        """Take the gradient statistics from any :class:`GradStatsState` in ``outputs``.

        Dispatches an on-device copy (the step may donate the original on its
        next call) and reads it back only when the statistics are needed.
        """
        self._stats.observe(outputs, wait=True)

    def update_grad_params(self, grad_params: Any) -> None:
        """Set the gradient statistics directly (``GradParams``, ``StatsSummary``, opt state)."""
        self._stats.set(grad_params)

    # ------------------------------------------------------------------ model
    @property
    def grad_count(self) -> float:
        """Steps folded into the current gradient statistics (0 before any; ``math.inf`` when
        they were set directly or restored): a decision on one or two steps' statistics is
        noise (the first read, at step 0, holds one sample)."""
        return self._stats.count

    def grad_params_nowait(self) -> GradParams | None:
        """:attr:`grad_params` without waiting for the device.

        The statistics the hooks took last are the output of a step that may still
        be running; reading them back would stall the host until it ends (and leave
        the device idle while the next batch loads). While they are not ready this
        returns the previous statistics (None before the first) and keeps the new
        ones for a later read. The adaptive controller's checks use it.
        """
        return self._stats.nowait()

    @property
    def grad_params(self) -> GradParams | None:
        """Current smoothed :class:`GradParams` as floats, or None before any sample."""
        return self._stats.grad_params

    def max_profiled_replicas(self) -> int:
        """Largest replica count with an optimizer-step profile (0 when none)."""
        self._drain()
        return self._prof.max_replicas()

    def profile_table(self) -> dict[tuple[int, int, int], tuple[float, float, int]]:
        """Robust per-configuration statistics: ``(nodes, replicas, atomic_bsz) -> (accum, optim, n)``.

        The ``profile_quantile`` (the median by default) of the kept samples of every
        accumulation setting of the configuration; ``accum`` falls back to ``optim``
        when no accumulation step was profiled; ``n`` is the number of optimizer-step
        samples (:meth:`goodput_jax.integrations.profile.StepProfile.compute`).

        Example:
            >>> hooks = GoodputHooks("j", init_batch_size=8, is_primary=False, num_replicas=1,
            ...                      warmup_steps=0, job_warmup_steps=0)
            >>> for t in (0.1, 0.3, 0.2):
            ...     hooks.observe_step_time(t)
            >>> hooks.profile_table()
            {(1, 1, 8): (0.2, 0.2, 3)}
        """
        self._drain()
        return self._prof.compute()

    def refit(self) -> PerfParams | None:
        """Refit :class:`PerfParams` to the profile now, on this thread (keeps the old fit on failure)."""
        table = self.profile_table()
        self._since_fit = 0.0
        if not table:
            return self.perf_params
        try:
            params, err, errs = fit_profile(table, self.profile_window)
        except Exception as e:  # noqa: BLE001 - a bad profile must not stop training
            _log.warning("goodput hooks: refitting PerfParams failed (%s); keeping the last fit", e)
            return self.perf_params
        self.perf_params, self.model_error, self.model_errors = params, err, errs
        self._fitted = FitSnapshot(table, self._stats.noise_scale())
        self.fit_count += 1
        return self.perf_params

    def _refit_and_publish(self) -> None:
        t0 = time.perf_counter()
        try:
            self.refit()
            self.publish()
        except Exception:  # noqa: BLE001 - never crash the worker
            _log.exception("goodput hooks: background refit failed")
        finally:
            if self.background:
                self.background_seconds += time.perf_counter() - t0
            else:
                self.inline_refit_seconds += time.perf_counter() - t0

    def maybe_refit(self) -> bool:
        """Start a refit + publish when ``refit_interval`` seconds of profiled time have passed.

        Only on the primary process; on a background thread unless
        ``background=False``; never two at once. Returns whether it started one.
        """
        self._drain()
        if not self.is_primary or self._since_fit < self.refit_interval:
            return False
        if self._pool.busy() or not self._prof.has_optim():
            return False
        _ = self.grad_params  # read the statistics copy here (the worker must not touch JAX state)
        self._since_fit = 0.0
        if not self._changed_materially():
            self.refits_skipped += 1
            return False
        if not self.background:
            self._refit_and_publish()  # its time counts in the caller's foreground time
            return True
        return self._pool.submit(self._refit_and_publish)

    def request_refit(self) -> bool:
        """Make a periodic refit due now and start it (:meth:`maybe_refit`, same rules).

        It still runs only on the primary process, only when the profile changed
        materially since the last fit (``refit_tolerance``), and never two at once;
        inline with ``background=False``. Returns whether it started one.
        :class:`~goodput_jax.adaptive.AdaptiveBatchSize` asks for one when the running
        configuration is not in the fit yet, and before leaving for a smaller batch.

        Example:
            >>> h = GoodputHooks("j", init_batch_size=8, is_primary=False, num_replicas=1)
            >>> h.request_refit()   # not the primary process: never fits
            False
        """
        self._since_fit = max(self._since_fit, self.refit_interval)
        return self.maybe_refit()

    def predict_throughput(self, atomic_bsz: Any, accum_steps: Any = 0, *,
                           num_nodes: int | None = None,
                           num_replicas: int | None = None) -> np.ndarray:
        """Samples per second the current fit predicts for these configurations (numpy, float64).

        ``R * b * (s + 1) / (s * T_acc + T_opt)`` for ``atomic_bsz`` ``b`` and
        ``accum_steps`` ``s`` (broadcast together), on ``num_replicas`` ``R`` and
        ``num_nodes`` (default: the running ones). No device program runs.

        Raises:
            ValueError: before the first fit (``perf_params`` is None).

        Example:
            >>> h = GoodputHooks("j", init_batch_size=8, is_primary=False, num_replicas=1)
            >>> h.perf_params = PerfParams(0.01, 1e-3, 0.0, 0.0, 0.0, 0.0, 1.0)
            >>> h.predict_throughput([8, 16]).round(1).tolist()
            [444.4, 615.4]
        """
        if self.perf_params is None:
            raise ValueError("perf_params (None): no step-time fit yet; profile some steps and "
                             "refit() first")
        n = self.num_nodes if num_nodes is None else positive_int(num_nodes, "num_nodes")
        r = self.num_replicas if num_replicas is None else positive_int(num_replicas, "num_replicas")
        return np.asarray(throughput_np(self.perf_params, n, r, atomic_bsz, accum_steps),
                          dtype=np.float64)

    def predict_efficiency(self, batch_size: Any,
                           grad_params: GradParams | None = None) -> np.ndarray:
        """Statistical efficiency of total batch sizes (numpy, float64) against ``init_batch_size``.

        Pollux's ``gain / scale`` with the given gradient statistics (default: the
        current ones, :attr:`grad_params`).

        Raises:
            ValueError: no gradient statistics yet.

        Example:
            >>> h = GoodputHooks("j", init_batch_size=8, is_primary=False, num_replicas=1)
            >>> h.update_grad_params(GradParams(1.0, 1.0))
            >>> h.predict_efficiency([8, 16]).round(3).tolist()
            [1.0, 0.667]
        """
        gp = self.grad_params if grad_params is None else grad_params
        if gp is None:
            raise ValueError("grad_params (None): no gradient statistics yet")
        return np.asarray(efficiency_np(gp, self.init_batch_size, batch_size), dtype=np.float64)

    def _changed_materially(self) -> bool:
        """Whether a periodic refit would learn anything: a configuration is new or its median
        step time moved by more than ``refit_tolerance`` since the last fit, or the gradient
        noise scale did (the published hints would change)."""
        if self.perf_params is None or self._fitted is None:
            return True
        return self._fitted.changed(self.profile_table(), self._stats.noise_scale(),
                                    self.refit_tolerance)

    def wait_refit(self, timeout: float | None = None) -> None:
        """Wait for a background refit in flight (if any)."""
        self._pool.wait(timeout)

    def goodput_function(self) -> Any:
        """A :class:`GoodputFunction` of the current fit and statistics, or None."""
        gp = self.grad_params
        if self.perf_params is None or gp is None:
            return None
        from goodput_jax.model.goodput import GoodputFunction

        return GoodputFunction(self.perf_params, gp, self.init_batch_size)

    def suggest(self, num_replicas: int | None = None, num_nodes: int | None = None,
                max_batch_size: int | None = None, tolerance: float = 0.05, *,
                atomic_sizes: Any = None, max_accum_steps: int = 7) -> Suggestion | None:
        """The smallest batch within ``tolerance`` of the best predicted goodput, with confidence.

        Goodput is flat near its optimum (throughput grows with the batch while
        the statistical efficiency falls), so the argmax moves a long way on
        small changes of the fit; goodputs within ``tolerance`` cannot be told
        apart (AdaptDL does not switch for less than 5%). The suggestion is
        therefore the smallest total batch whose best configuration reaches
        ``(1 - tolerance)`` of the optimum: stable across runs, cheaper in
        memory and closer to the profiled configurations.

        Args:
            num_replicas: replica count to plan for; at most
                :func:`max_replicas_allowed` of the largest profiled count.
            num_nodes: nodes for it (default: current, capped at ``num_replicas``).
            max_batch_size: a tighter cap than the job's (e.g. exploration).
            tolerance: fraction of the optimum goodput given up for a smaller
                batch, in ``[0, 1)``; 0 returns the argmax.
            atomic_sizes: None (default): any per-replica micro-batch within
                ``local_bsz_bounds`` (the model's continuous optimum, AdaptDL's).
                A list of sizes: only those (within the bounds), with 0 to
                ``max_accum_steps`` extra accumulation steps (0 without
                ``gradient_accumulation``): the configurations a job can run
                without new compiles, e.g. the buckets of
                :class:`~goodput_jax.adaptive.AdaptiveBatchSize`
                (:func:`goodput_jax.adaptive.controller.default_atomic_sizes`).
            max_accum_steps: the largest ``accum_steps`` with ``atomic_sizes``.

        Returns:
            A :class:`Suggestion`, or None until both a fit and gradient statistics exist.

        Raises:
            ValueError: ``num_replicas`` beyond what the profile supports, a
                ``tolerance`` outside ``[0, 1)``, or ``atomic_sizes`` with no size
                inside the bounds that reaches ``init_batch_size``.

        Example:
            >>> h = GoodputHooks("j", init_batch_size=32, max_batch_size=1024, is_primary=False,
            ...                  num_replicas=1)
            >>> h.perf_params = PerfParams(0.01, 1e-4, 0.0, 0.0, 0.0, 0.0, 1.0)
            >>> h.update_grad_params(GradParams(1.0, 4.0))
            >>> h.suggest().batch_size <= h.suggest(tolerance=0.0).batch_size
            True
        """
        if not (isinstance(tolerance, numbers.Real) and 0.0 <= tolerance < 1.0):
            raise ValueError(f"tolerance ({tolerance!r}) must be a number in [0, 1)")
        fn = self.goodput_function()
        if fn is None:
            return None
        reps = self.num_replicas if num_replicas is None else positive_int(num_replicas, "num_replicas")
        # The running replica count is always allowed (it is being profiled).
        limit = max(max_replicas_allowed(self.max_profiled_replicas()), self.num_replicas)
        if reps > limit:
            raise ValueError(
                f"num_replicas ({reps}) > {limit}: the step-time model was profiled up to "
                f"{self.max_profiled_replicas()} replica(s) and may extrapolate to at most "
                f"twice that (AdaptDL's rule); profile more replicas first")
        nodes = min(self.num_nodes if num_nodes is None else positive_int(num_nodes, "num_nodes"), reps)
        cap = self.max_batch_size if max_batch_size is None else max(
            min(int(max_batch_size), self.max_batch_size), self.init_batch_size)
        if atomic_sizes is not None and self.gradient_accumulation:
            max_accum_steps = nonneg_int(max_accum_steps, "max_accum_steps")
        return search(fn, num_nodes=nodes, num_replicas=reps, max_batch_size=cap,
                      local_bsz_bounds=self.local_bsz_bounds,
                      gradient_accumulation=self.gradient_accumulation,
                      current=self.config_key(), tolerance=tolerance,
                      atomic_sizes=atomic_sizes, max_accum_steps=max_accum_steps,
                      model_error=self.model_error, profiled_configs=len(self.model_errors))

    def hints(self) -> dict:
        """The scheduler hints as JSON (AdaptDL keys; :class:`goodput_jax.model.hints.Hints`).

        Keys: ``perfParams``, ``gradParams`` (``{"norm", "var"}``),
        ``initBatchSize``, ``maxBatchSize``, ``localBszBounds``,
        ``gradientAccumulation``, ``maxProfiledReplicas``, the current
        ``numNodes``, ``numReplicas``, ``atomicBsz``, ``accumSteps`` and, once
        known, ``gradientNoiseScale``, ``efficiency``, ``suggestedBatchSize``,
        ``suggestedAtomicBsz``, ``suggestedAccumSteps``, ``predictedSpeedup``
        (None where unknown).
        """
        gp = self.grad_params
        sug = self.suggest() if self.perf_params is not None and gp is not None else None
        return make_hints(
            perf_params=self.perf_params, grad_params=gp, init_batch_size=self.init_batch_size,
            max_batch_size=self.max_batch_size, local_bsz_bounds=self.local_bsz_bounds,
            gradient_accumulation=self.gradient_accumulation,
            max_profiled_replicas=self.max_profiled_replicas(), num_nodes=self.num_nodes,
            num_replicas=self.num_replicas, atomic_bsz=self.atomic_bsz,
            accum_steps=self.accum_steps, suggestion=sug)

    def publish(self) -> dict:
        """Store :meth:`hints` with the job's events (``recorder.record_hints``); returns them."""
        h = self.hints()
        self.last_hints = h
        if self.is_primary:
            self.recorder.record_hints(h)
        return h

    def cost(self) -> dict[str, float]:
        """The hooks' own time: ``foreground`` (training thread) and ``background`` seconds,
        and ``recorder``: the CPU seconds of the recorder's writer thread.

        Foreground time is wall time on the training thread; it excludes the
        one-step-late wait for the device (a loop waits for its steps anyway) and
        includes recording, profiling, reading statistics and inline refits.
        Background time is the wall time of refits on the hooks' worker thread.
        Where the device's work shares the host's cores (the CPU backend), the
        training thread is also descheduled inside the hooks' code, so foreground
        time is an upper bound on the CPU the hooks take.

        Example:
            >>> GoodputHooks("j", init_batch_size=8, is_primary=False, num_replicas=1).cost()
            {'foreground': 0.0, 'background': 0.0, 'recorder': 0.0}
        """
        return {"foreground": self.foreground_seconds, "background": self.background_seconds,
                "recorder": float(self.recorder.writer_cpu_seconds)}

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """JSON-safe state (profile, fit, statistics, configuration) for checkpoints.

        Example:
            >>> h = GoodputHooks("j", init_batch_size=8, is_primary=False, num_replicas=1)
            >>> sorted(h.state_dict())[:3]
            ['accum_steps', 'atomic_bsz', 'grad_count']
        """
        self._drain()
        return to_state_dict(
            self._prof, perf_params=self.perf_params, grad_params=self.grad_params,
            grad_count=self.grad_count, model_error=self.model_error,
            atomic_bsz=self.atomic_bsz, accum_steps=self.accum_steps,
            num_replicas=self.num_replicas, num_nodes=self.num_nodes)

    def load_state_dict(self, state: dict, *, keep_topology: bool = True) -> None:
        """Restore :meth:`state_dict` (profile, fit, statistics; configuration too).

        With ``keep_topology`` (default) the current ``num_nodes`` /
        ``num_replicas`` stay (a restarted job may run on another device count).
        """
        st = parse_state_dict(state)
        self._prof.load_json(st.profile, st.seen)
        self.perf_params = st.perf_params
        if st.grad_params is not None:
            self._stats.set(st.grad_params, st.grad_count)
        self.model_error = st.model_error
        if self.perf_params is not None:
            table = self.profile_table()
            if table:
                self.model_errors = model_errors(self.perf_params, table)
        self.atomic_bsz, self.accum_steps = st.atomic_bsz, st.accum_steps
        if not keep_topology:
            self.num_nodes, self.num_replicas = st.num_nodes, st.num_replicas

    # ------------------------------------------------------------------ lifecycle
    @contextlib.contextmanager
    def job(self) -> Iterator[GoodputHooks]:
        """The job around the training loop: on a normal exit, the last step, a final refit +
        hints (booked as the custom badput ``"model refit"``).

        When the recorder has not started a job, ``job()`` records the job start on enter
        and the job end on exit (after the ``steps=`` StepRecorder's last device ends).
        When it has (``runtime.start_job(recorder)``, ``recorder.record_job_start_time()``:
        :attr:`GoodputRecorder.job_started`), ``job()`` joins that job: no second job
        start, and no job end either (whoever started the job ends it, after
        ``steps.close()``).

        Example:
            >>> from goodput_jax import goodput
            >>> rec = goodput.GoodputRecorder("j", "goodput_j")
            >>> rec.record_job_start_time()       # e.g. runtime.start_job(rec)
            >>> hooks = GoodputHooks("j", init_batch_size=8, recorder=rec, is_primary=False)
            >>> with hooks.job():                 # joins: no second job start
            ...     _ = hooks.step(0, lambda x: x + 1, 1)
            >>> rec.job_started                   # the job is still the caller's to end
            True
        """
        joined = bool(self.recorder.job_started)
        if not joined:
            self.recorder.record_job_start_time()
        yield self
        self.flush()
        if self.is_primary and self._prof.has_optim():
            # the final fit, booked where the report shows it (custom badput "model refit")
            with self.recorder.badput("model refit"):
                self.wait_refit()
                # the fit's program, compiling in the background since the first step: wait
                # for it rather than compile it a second time on this thread
                precompile_fit_once().join()
                _ = self.grad_params
                self.refit()
                self.publish()
        else:
            self.wait_refit()
        if not joined:
            if self._steps is not None:
                self._steps.finish()
            self.recorder.record_job_end_time()
            if self._owns_steps:  # the hooks' own StepRecorder: a later compile is not the job's
                self._steps.close()

    def close(self) -> None:
        """Finish the pending step and refit; close the recorder if these hooks created it."""
        with contextlib.suppress(Exception):
            self.flush()
        self._pool.close()
        if self._owns_steps:
            self._steps.close()
        if self._owns_recorder:
            self.recorder.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
