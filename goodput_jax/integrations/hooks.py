"""Drop-in training hooks: measured goodput events + the Pollux model, from one object.

A Flax / MaxText-style loop adds two lines::

    hooks = GoodputHooks("my-job", init_batch_size=64, atomic_bsz=64, max_batch_size=1024)
    for i, batch in enumerate(batches):
        state = hooks.step(i, train_step, state, batch)   # was: state = train_step(state, batch)

``hooks.step`` runs the (jitted) step and returns at once (it never waits for
the step it just dispatched), and:

* records the step through a :class:`goodput_jax.runtime.StepRecorder`'s call (its
  start, its device end as soon as it happens, the program's cost) on a
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

The hooks are a facade over rooms of one job each: the options
(:mod:`~goodput_jax.integrations.options`), the runtime's StepRecorder and step timer, the
profile (:mod:`~goodput_jax.integrations.profile`), the model side
(:mod:`~goodput_jax.integrations.hooks_model`: fit, suggestion, hints, checkpoint state, on
:mod:`~goodput_jax.integrations.fit`, :mod:`~goodput_jax.integrations.search`,
:mod:`~goodput_jax.integrations.publish`, :mod:`~goodput_jax.integrations.state`); the
Pollux math is the model's (:mod:`goodput_jax.model.formulas`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterator
from typing import Any, Self, cast

import jax

from goodput_jax.integrations.checks import nonneg_int, positive_int
from goodput_jax.integrations.fit import (
    PRECOMPILE_EXIT_WAIT,
    FitSnapshot,
    RefitPool,
    precompile_fit_once,
)
from goodput_jax.integrations.hooks_model import HooksModel
from goodput_jax.integrations.options import (
    BatchLimits,
    Placement,
    ProfileOptions,
    RecordingOptions,
    RefitOptions,
    hooks_options,
)
from goodput_jax.integrations.profile import (
    PROFILE_WINDOW,
    RAW_BATCH,
    ProfileEntry,
    ProfileKey,
    StepProfile,
)
from goodput_jax.integrations.search import Suggestion, feasible_configs
from goodput_jax.integrations.stats import GradStatsReader
from goodput_jax.model.hints import max_replicas_allowed
from goodput_jax.model.types import PerfParams
from goodput_jax.runtime.contracts import HooksRecording, require
from goodput_jax.runtime.steps import StepRecorder
from goodput_jax.runtime.timer import OneStepLateTimer

__all__ = ["PRECOMPILE_EXIT_WAIT", "PROFILE_WINDOW", "BatchLimits", "GoodputHooks",
           "OneStepLateTimer", "Placement", "ProfileEntry", "ProfileOptions", "RecordingOptions",
           "RefitOptions", "Suggestion", "feasible_configs", "max_replicas_allowed",
           "precompile_fit_once"]

_log = logging.getLogger(__name__)
_wall = time.time


class GoodputHooks(HooksModel):
    """Goodput recording, step-time profiling and Pollux hints for one training loop.

    The options come as a few frozen objects (:mod:`goodput_jax.integrations.options`),
    each validated once; the earlier keywords still work (``init_batch_size=``,
    ``max_batch_size=``, ``steps=``, ``refit_interval=`` ...: each is the field of one
    object, :data:`~goodput_jax.integrations.options.KEYWORDS`), translated in one place
    (:func:`~goodput_jax.integrations.options.hooks_options`); a keyword beside its object
    is an error.

    Args:
        job_name: the job's name (as for :class:`GoodputRecorder`).
        limits: the batch sizes the job accepts (:class:`BatchLimits`; required, or
            ``init_batch_size=``).
        placement: the configuration the loop starts in (:class:`Placement`).
        profile: which step times the profile keeps (:class:`ProfileOptions`).
        refit: when and where the model is refitted (:class:`RefitOptions`).
        recording: where the steps are recorded (:class:`RecordingOptions`): every step
            runs through a :class:`goodput_jax.runtime.StepRecorder`'s call (its start,
            its device end as soon as it happens, the program's cost: the facts
            ``steps.wrap`` records), the loop's (``steps=``, which shares its recorder and
            job with the runtime capture) or one of the hooks' own.
            :meth:`step_context` records through ``start``/``track``, which cannot read
            the program (the StepRecorder says so once).
        clock: monotonic seconds for step timing (injectable for tests).
        **keywords: the earlier keywords (see above).

    Example:
        >>> hooks = GoodputHooks("doc-job", init_batch_size=32, is_primary=False)
        >>> hooks.step(0, lambda x: x + 1, 1)
        2
        >>> GoodputHooks("doc-job", limits=BatchLimits(init=32, max=64),
        ...              recording=RecordingOptions(is_primary=False)).max_batch_size
        64
    """

    def __init__(
        self,
        job_name: str,
        *,
        limits: BatchLimits | None = None,
        placement: Placement | None = None,
        profile: ProfileOptions | None = None,
        refit: RefitOptions | None = None,
        recording: RecordingOptions | None = None,
        clock: Callable[[], float] = time.perf_counter,
        **keywords: Any,
    ):
        if not isinstance(job_name, str) or not job_name:
            raise ValueError(f"job_name ({job_name!r}) must be a non-empty string")
        if not callable(clock):
            raise TypeError(f"clock ({clock!r}) must be a callable returning seconds")
        opts = hooks_options(keywords, limits=limits, placement=placement, profile=profile,
                             refit=refit, recording=recording)
        self.options = opts
        self.job_name = job_name
        lim, pl, pr, rf, rc = opts.limits, opts.placement, opts.profile, opts.refit, opts.recording
        assert lim.max is not None and lim.local_bounds is not None  # BatchLimits fills them
        self.init_batch_size, self.max_batch_size = lim.init, lim.max
        self.local_bsz_bounds, self.gradient_accumulation = lim.local_bounds, lim.accumulation
        self.num_nodes = jax.process_count() if pl.num_nodes is None else pl.num_nodes
        self.num_replicas = jax.device_count() if pl.num_replicas is None else pl.num_replicas
        if self.num_nodes > self.num_replicas:
            raise ValueError(f"num_nodes ({self.num_nodes}) > num_replicas ({self.num_replicas})")
        self.atomic_bsz = (max(1, self.init_batch_size // self.num_replicas)
                           if pl.atomic_bsz is None else pl.atomic_bsz)
        self.accum_steps = pl.accum_steps
        self.refit_interval, self.refit_tolerance = rf.interval, rf.tolerance
        self.background = (not (jax.default_backend() == "cpu" and jax.local_device_count() > 1)
                           if rf.background is None else rf.background)
        self.profile_quantile, self.profile_window = pr.quantile, pr.window
        self.warmup_steps, self.job_warmup_steps = pr.warmup_steps, pr.job_warmup_steps
        self.stats_every = pr.stats_every
        self._clock = clock
        self.is_primary = (jax.process_index() == 0) if rc.is_primary is None else rc.is_primary
        steps, recorder = rc.steps, rc.recorder
        if steps is not None and recorder is None:
            recorder = steps.recorder
        if recorder is None:
            from goodput_jax.measure.recorder import GoodputRecorder

            recorder = GoodputRecorder(job_name, f"goodput_{job_name}",
                                       logging_enabled=self.is_primary, store=rc.store)
            self._owns_recorder = True
        else:
            self._owns_recorder = False
        self.recorder: HooksRecording = require(recorder, HooksRecording)
        # ONE path to the recorder's step facts: every step of the hooks runs through a
        # StepRecorder's call (start, device end, program cost, compile times), the one
        # given (``steps=``) or one of the hooks' own
        self._owns_steps = steps is None and rc.record_device_ends
        if self._owns_steps:
            steps = StepRecorder(recorder)
        self._steps: StepRecorder | None = steps
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
        self._warned_note = False
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
        if self._owns_steps and self._steps is not None:
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
        key = cast(ProfileKey, tuple(int(k) for k in key))  # a 4-tuple by the signature
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
        key = self.config_key() if key is None else cast(ProfileKey, tuple(int(k) for k in key))
        self._drain()
        return self._prof.samples(key)

    def _drain(self) -> None:
        """Fold the timed steps into the profile (any thread); the steps the warm-up rules
        drop are taken back from the refit trigger."""
        dropped = self._prof.fold()
        if dropped:
            self._since_fit = max(self._since_fit - dropped, 0.0)

    def cost(self) -> dict[str, float]:
        """The hooks' own time: ``foreground`` (training thread) and ``background`` seconds,
        and ``recorder``: the CPU seconds of the recorder's writer thread.

        Foreground time is wall time on the training thread; it excludes the
        one-step-late wait for the device (a loop waits for its steps anyway) and the
        step's call through the StepRecorder (the dispatch with its start and hand-over:
        microseconds, ``benchmarks/step_recorder_bench.py``), and includes profiling,
        reading statistics and inline refits.
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

    # ------------------------------------------------------------------ lifecycle
    @contextlib.contextmanager
    def job(self) -> Iterator[GoodputHooks]:
        """The job around the training loop: on a normal exit, the last step, a final refit +
        hints (booked as the custom badput ``"model refit"``; a wait for the fit's first
        compile, once per machine, as ``"model fit compile"``).

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
            # the fit's program, compiling in the background since the first step (once per
            # machine: later processes load it from the cache): a wait for it is booked
            # apart ("model fit compile"), not as the refit; then the final fit, booked
            # where the report shows it (custom badput "model refit")
            waiter = precompile_fit_once()
            if waiter.is_alive():
                with self.recorder.badput("model fit compile"):
                    waiter.join()
            with self.recorder.badput("model refit"):
                self.wait_refit()
                _ = self.grad_params
                self.refit()
                self.publish()
        else:
            self.wait_refit()
        if not joined:
            if self._owns_steps and self._steps is not None:  # the hooks' own, closed
                self._steps.close()  # before the end: a late probe's cost is the job's
            elif self._steps is not None:
                self._steps.finish()
            self.recorder.record_job_end_time()

    def close(self) -> None:
        """Finish the pending step and refit; close the recorder if these hooks created it."""
        with contextlib.suppress(Exception):
            self.flush()
        self._pool.close()
        if self._owns_steps and self._steps is not None:
            self._steps.close()
        if self._owns_recorder:
            self.recorder.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
