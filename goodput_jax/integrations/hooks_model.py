"""The hooks' model side: the step-time fit and its refits, the gradient statistics read
back, the predictions, the suggestion, the scheduler hints and the checkpoint state (a mixin of
:class:`~goodput_jax.integrations.hooks.GoodputHooks`, on the profile and statistics the
hooks' timing side keeps; the Pollux math is :mod:`goodput_jax.model.formulas`)."""

from __future__ import annotations

import logging
import numbers
import time
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from goodput_jax.integrations.checks import nonneg_int, positive_int
from goodput_jax.integrations.fit import FitSnapshot, RefitPool, fit_profile, model_errors
from goodput_jax.integrations.publish import make_hints
from goodput_jax.integrations.search import SearchLimits, Suggestion, search
from goodput_jax.integrations.state import parse_state_dict, to_state_dict
from goodput_jax.model.formulas import efficiency_np, throughput_np
from goodput_jax.model.hints import Hints, max_replicas_allowed
from goodput_jax.model.types import GradParams, PerfParams

if TYPE_CHECKING:
    from goodput_jax.integrations.profile import StepProfile
    from goodput_jax.integrations.stats import GradStatsReader
    from goodput_jax.runtime.contracts import HooksRecording

__all__ = ["HooksModel"]

_log = logging.getLogger("goodput_jax.integrations.hooks")


class HooksModel:
    """The model side of :class:`~goodput_jax.integrations.hooks.GoodputHooks` (a mixin: the
    hooks' constructor sets the state below)."""

    # set by GoodputHooks.__init__
    job_name: str
    _warned_missing: bool
    _warned_note: bool
    recorder: HooksRecording
    is_primary: bool
    background: bool
    init_batch_size: int
    max_batch_size: int
    local_bsz_bounds: tuple[int | None, int | None]
    gradient_accumulation: bool
    num_nodes: int
    num_replicas: int
    atomic_bsz: int
    accum_steps: int
    refit_interval: float
    refit_tolerance: float
    profile_window: int
    perf_params: PerfParams | None
    model_error: float
    model_errors: dict[tuple[int, int, int], float]
    fit_count: int
    refits_skipped: int
    last_hints: dict | None
    background_seconds: float
    inline_refit_seconds: float
    _prof: StepProfile
    _stats: GradStatsReader
    _pool: RefitPool
    _fitted: FitSnapshot | None
    _since_fit: float

    def observe_outputs(self, outputs: Any) -> None:
        """Take the gradient statistics from any :class:`GradStatsState` in ``outputs``.

        Dispatches an on-device copy (the step may donate the original on its
        next call) and reads it back only when the statistics are needed.
        """
        self._stats.observe(outputs, wait=True)

    def update_grad_params(self, grad_params: Any) -> None:
        """Set the gradient statistics directly (``GradParams``, ``StatsSummary``, opt state)."""
        self._stats.set(grad_params)

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

    def _drain(self) -> None:
        raise NotImplementedError  # GoodputHooks folds the timed steps

    def config_key(self) -> tuple[int, int, int, int]:
        raise NotImplementedError  # GoodputHooks: the running configuration

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
        """Current smoothed :class:`GradParams` as floats, or None before any sample (and
        None, with a warning once naming the helper, when the steps' updates bring one
        gradient each: :attr:`grad_stats_note`)."""
        gp = self._stats.grad_params
        note = self._stats.note
        if note is not None and not self._warned_note:
            self._warned_note = True
            warnings.warn(f"GoodputHooks({self.job_name!r}): {note}", UserWarning, stacklevel=2)
        return gp

    @property
    def grad_stats_note(self) -> str | None:
        """Why the hooks show no gradient noise statistics (one line naming the helper that
        fixes it), or None (:func:`goodput_jax.model.gradstats.stats_note`)."""
        return self._stats.note

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
            >>> from goodput_jax.integrations.hooks import GoodputHooks
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
            >>> from goodput_jax.integrations.hooks import GoodputHooks
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
            >>> from goodput_jax.integrations.hooks import GoodputHooks
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
            >>> from goodput_jax.integrations.hooks import GoodputHooks
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
            >>> from goodput_jax.integrations.hooks import GoodputHooks
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
        limits = SearchLimits(max_batch_size=cap, local_bsz_bounds=self.local_bsz_bounds,
                              gradient_accumulation=self.gradient_accumulation,
                              tolerance=tolerance, atomic_sizes=atomic_sizes,
                              max_accum_steps=max_accum_steps)
        return search(fn, limits, num_nodes=nodes, num_replicas=reps, current=self.config_key(),
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
        return make_hints(Hints(
            perf_params=self.perf_params, grad_params=gp, init_batch_size=self.init_batch_size,
            max_batch_size=self.max_batch_size, local_bsz_bounds=self.local_bsz_bounds,
            gradient_accumulation=self.gradient_accumulation,
            max_profiled_replicas=self.max_profiled_replicas(), num_nodes=self.num_nodes,
            num_replicas=self.num_replicas, atomic_bsz=self.atomic_bsz,
            accum_steps=self.accum_steps, grad_stats_note=self.grad_stats_note), sug)

    def publish(self) -> dict:
        """Store :meth:`hints` with the job's events (``recorder.record_hints``); returns them."""
        h = self.hints()
        self.last_hints = h
        if self.is_primary:
            self.recorder.record_hints(h)
        return h

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """JSON-safe state (profile, fit, statistics, configuration) for checkpoints.

        Example:
            >>> from goodput_jax.integrations.hooks import GoodputHooks
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
