"""When :class:`~goodput_jax.adaptive.AdaptiveBatchSize` switches: the rules of a check.

At step boundaries the controller switches configuration when the model predicts a
worthwhile gain (the thresholds are :class:`~goodput_jax.adaptive.options.SwitchPolicy`'s,
the schedule :class:`~goodput_jax.adaptive.options.CheckSchedule`'s):

* candidates are atomic sizes from a small set (powers of two within
  ``local_bsz_bounds``, plus the initial size) x accumulation steps, so a job
  compiles at most ``len(atomic_sizes) x log2(max slots)`` step variants
  (accumulation uses the step's traced microbatch count, see
  :func:`goodput_jax.adaptive.step.make_train_step`);
* the best candidate by predicted goodput must beat the running configuration
  by ``max(speedup_threshold, 1 + model error)`` (AdaptDL: 1.05; the model
  error is its median relative error on the profiled configurations), or, for a
  larger batch not profiled yet, by ``explore_threshold`` (1.0), at
  ``patience`` consecutive checks (hysteresis; a larger batch predicted at
  least ``immediate_gain`` faster switches at the first check), and the
  current configuration must have ``min_samples`` profiled steps inside the
  last fit (a new configuration is refitted at its first check);
* a configuration is left for a smaller batch only once it has
  ``settle_samples`` kept steps and its step time has stopped falling (the
  newer half of them no more than ``speedup_threshold`` faster than all of
  them): the first steps after a switch often run slower than the
  configuration settles to (before leaving, the fit is refreshed if the
  profile moved materially since it);
* a step down needs evidence that survives a re-measurement: the running
  configuration's window of step times must be no more than
  ``speedup_threshold`` slower than its previous window (:meth:`confirmed`);
  otherwise (a first visit, or a window slower than the last one: perhaps a
  load spike) its times are dropped, it is measured afresh and the check
  decides again on the new window;
* a configuration the controller switches back to is measured afresh: its old
  step times are dropped (their statistic kept as its previous window), so no
  decision compares a time measured now with one measured under other
  conditions long ago;
* exploration is step by step as in AdaptDL: the total batch may grow to at
  most ``explore_factor`` times the largest batch profiled on this replica
  count, never further than the profile supports;
* re-probing by age: a larger configuration left at least ``reprobe_steps``
  steps ago is tried again at ``explore_threshold`` when the fit predicts a
  gain, and, whatever the fit predicts (it may rest on the stale time), once
  the job has run ``reprobe_steps`` steps in its current configuration (the
  smallest such larger batch). A probe the job keeps chains the next one; a
  probe left again for a smaller batch within ``reprobe_steps`` doubles that
  configuration's interval (up to 16x), so a configuration that is really
  slower costs a few steps ever more rarely;
* the learning rate follows the rule of the optimizer built by
  :func:`goodput_jax.adaptive.step.adaptive_optimizer`, in the step, with no
  recompile;
* at a switch from ``M_old`` to ``M_new`` total examples, Adam's second moment
  ``nu`` (which still holds the old batch size's gradients for ~``1 / (1 - b2)``
  steps) is scaled by the expected change of ``E[g**2]``,
  ``(1 + phi / M_new) / (1 + phi / M_old)`` with ``phi`` the noise scale the switch
  was decided on (``rescale_nu``, on by default; see
  :func:`goodput_jax.model.gradstats.rescale_nu`): :meth:`AdaptiveBatchSize.step`
  applies it to the optimizer state it is given next, once
  (:meth:`AdaptiveBatchSize.prepare_opt_state`).

This module holds those rules as a base class of the controller (:class:`SwitchDecisions`);
the controller itself (:mod:`goodput_jax.adaptive.controller`) holds the configuration, the
data, the step and the checkpointed state.
"""

from __future__ import annotations

import concurrent.futures
import math
from typing import Any, Protocol, runtime_checkable

import numpy as np

from goodput_jax.integrations.search import feasible_configs

__all__ = ["PrecompilingStep", "SwitchDecisions"]


@runtime_checkable
class PrecompilingStep(Protocol):
    """A step that compiles other batch shapes ahead of time
    (:func:`~goodput_jax.adaptive.step.make_train_step`'s): a switch to a shape not
    compiled yet waits for its background compile instead of compiling inline."""

    def __call__(self, *args: Any) -> Any: ...

    def precompile(self, params: Any, opt_state: Any,
                   batch_like: Any) -> concurrent.futures.Future:
        """Compile the step for ``batch_like``'s shapes in the background.

        ``Any``: params, optimizer state and batches are JAX pytrees, which have no
        static type.
        """
        ...

    def is_compiled(self, batch_like: Any) -> bool:
        """Whether a step on ``batch_like``'s shapes runs without compiling.

        ``Any``: a batch is a JAX pytree, which has no static type.
        """
        ...


class SwitchDecisions:
    """The checks and the switching rules of :class:`~goodput_jax.adaptive.AdaptiveBatchSize`
    (a base class: the state it reads and writes is the controller's, set up in its
    ``__init__``)."""

    hooks: Any
    steps: int
    atomic_sizes: list[int]
    max_accum_steps: int
    speedup_threshold: float
    explore_threshold: float
    patience: int
    immediate_gain: float
    min_samples: int
    settle_samples: int
    min_grad_steps: int
    explore_factor: float
    reprobe_steps: int
    stable_reads: int
    stable_ratio: float
    noise_scales: list[float]
    left_at: dict[tuple[int, int], int]
    arrived_at: int
    reprobe_backoff: dict[tuple[int, int], int]
    previous_window: dict[tuple[int, int, int, int], float]
    switches: list[dict]
    last_check: dict | None
    _probing: set[tuple[int, int]]
    _last_probe: float
    _votes: tuple[tuple[int, int], int] | None
    _step_ref: tuple | None
    _cache: tuple | None
    _good: tuple | None
    _last_gp: Any
    _same_reads: int

    #: Most doublings of a configuration's re-probe interval (``reprobe_steps`` x 16).
    MAX_REPROBE_DOUBLINGS = 4

    @property
    def batch_size(self) -> int:
        """Current total batch size."""
        return self.hooks.batch_size

    def batch_like(self, atomic_bsz: int, accum_steps: int) -> Any:  # the controller's
        """An abstract batch of this configuration's shapes (``Any``: a JAX pytree)."""
        raise NotImplementedError

    def set_config(self, atomic_bsz: int, accum_steps: int) -> None:  # the controller's
        raise NotImplementedError

    def _plan_nu_scale(self, rec: dict, old_batch: int) -> None:  # the controller's
        raise NotImplementedError

    def _ready(self, config: tuple[int, int]) -> bool:
        """Whether switching to ``config`` costs no compile; starts a background compile if not."""
        ref = self._step_ref
        if ref is None or not isinstance(ref[0], PrecompilingStep):
            return True
        like = self.batch_like(*config)
        if like is None:
            return True
        train_step, params, opt_state = ref
        if train_step.is_compiled(like):
            return True
        try:
            fut = train_step.precompile(params, opt_state, like)
        except Exception:  # noqa: BLE001 - cannot compile ahead: switch and compile inline
            return True
        return bool(fut.done() and fut.exception() is not None)

    # ----------------------------------------------------------------- decisions
    def _profiled(self, key: tuple) -> int:
        e = self.hooks.profile.get(key)
        return 0 if e is None else e.optim_count

    def candidates(self) -> np.ndarray:
        """Feasible ``(atomic_bsz, accum_steps)`` rows under the job's limits and the
        exploration cap."""
        h = self.hooks
        r = h.num_replicas
        profiled = [k[1] * k[2] * (k[3] + 1) for k, e in list(h.profile.items())
                    if k[1] == r and e.optim_count]
        cap = self.explore_factor * max(profiled + [self.batch_size])
        cap = min(cap, h.max_batch_size)
        return feasible_configs(r, self.atomic_sizes, self.max_accum_steps,
                                init_batch_size=h.init_batch_size, max_batch_size=cap,
                                local_bsz_bounds=h.local_bsz_bounds)

    def adapt(self) -> dict | None:
        """Check the model and switch configuration if it pays (see the module docstring).

        Returns:
            The check's record (candidate, predicted speedup, switched), or None
            when the model is not ready.
        """
        h = self.hooks
        key = h.config_key()
        n_now = self._profiled(key)
        if n_now < self.min_samples:
            return None
        if (key[0], key[1], key[2]) not in h.model_errors:
            # The running configuration is not in the fit yet: ask for a refit. An
            # inline refit (multi-device CPU) is done now: decide on it at once.
            h.request_refit()
            if (key[0], key[1], key[2]) not in h.model_errors:
                return None
        gp = h.grad_params_nowait()  # statistics of a step still running: the previous ones
        if h.perf_params is None or gp is None or h.grad_count < self.min_grad_steps:
            return None
        if not self.stats_stable(gp):
            return None
        # Throughputs depend on the fit only: evaluated (in numpy) once per fit,
        # configuration and profiled set. The statistical efficiency, which moves with
        # the gradient statistics, is one numpy expression per check: a check runs no
        # device program and costs tens of microseconds.
        sig = (h.fit_count, key, len(h.profile))
        if self._cache is None or self._cache[0] != sig:
            cand = self.candidates()
            if not len(cand):
                return None
            r = h.num_replicas
            rows = np.concatenate([cand, [[h.atomic_bsz, h.accum_steps]]])
            thr = h.predict_throughput(rows[:, 0], rows[:, 1])
            batch = r * rows[:, 0] * (rows[:, 1] + 1)
            self._cache = (sig, cand, thr, batch)
            self._good = None
        _, cand, thr, batch = self._cache
        if self._good is None or self._good[0] != gp:  # new statistics (every stats_every)
            good = thr * h.predict_efficiency(batch, gp)
            i = int(np.argmax(good[:-1]))
            # running below init_batch_size: no comparable goodput (any candidate wins)
            cur = float(good[-1]) if batch[-1] >= h.init_batch_size else 0.0
            self._good = (gp, (int(cand[i, 0]), int(cand[i, 1])), float(good[i]), cur, good)
        return self._decide(*self._good[1:4])

    def stats_stable(self, gp: Any) -> bool:
        """Whether the gradient statistics ``gp`` can be acted on (and record them).

        They can when the last ``stable_reads`` distinct statistics the checks saw
        (``gp`` included) all have a finite, positive noise scale ``M0 * var / sqr``
        within a factor ``stable_ratio`` of each other, or when ``gp`` itself (finite,
        positive) has stayed the same over ``stable_reads`` checks. Early in training the
        estimate swings by orders of magnitude between reads (AdamW's
        preconditioned statistics read 1.3e3, 1.6e8, 1.2e7 and ``sqr <= 0`` at
        steps 35-115 of ``adaptive_bench.py --task cnn``, where ~500 followed), and
        ``sqr <= 0`` makes every batch size look free (efficiency 1): a decision on
        such a read sent the arm to the largest batch in 95 steps.

        Example:
            >>> from goodput_jax.adaptive import AdaptiveBatchSize
            >>> from goodput_jax.integrations.hooks import GoodputHooks
            >>> from goodput_jax.model import GradParams
            >>> h = GoodputHooks("doc", init_batch_size=8, num_replicas=1, num_nodes=1,
            ...                  is_primary=False)
            >>> a = AdaptiveBatchSize(h, {"x": np.arange(100.0)})
            >>> [a.stats_stable(GradParams(sqr=s, var=1.0)) for s in (1.0, 0.01, 0.6, 0.5, 0.55)]
            [False, False, False, False, True]
            >>> a.stats_stable(GradParams(sqr=0.0, var=1.0))  # sqr <= 0: every batch looks free
            False

        ``Any``: ``gp`` is the model room's gradient statistics (host numbers or JAX scalars),
        read by its fields.
        """
        sqr, var = float(gp.sqr), float(gp.var)
        phi = (self.hooks.init_batch_size * var / sqr
               if sqr > 0 and math.isfinite(sqr) and math.isfinite(var) and var >= 0
               else math.inf)
        if not self.noise_scales or self._last_gp is not gp:
            self.noise_scales = (self.noise_scales + [phi])[-self.stable_reads:]
            self._last_gp, self._same_reads = gp, 0
        self._same_reads += 1
        if not (math.isfinite(phi) and phi > 0):
            return False
        # statistics that stayed the same over ``stable_reads`` checks are settled too
        # (statistics set by hand, or read rarely late in a run)
        if self._same_reads >= self.stable_reads:
            return True
        xs = self.noise_scales
        return (len(xs) >= self.stable_reads and all(math.isfinite(x) and x > 0 for x in xs)
                and max(xs) <= self.stable_ratio * min(xs))

    def _settling(self, key: tuple) -> bool:
        """Whether ``key``'s step time may still be falling: fewer than ``settle_samples``
        (and ``2 * min_samples``) kept samples, or the newer half's median more than
        ``speedup_threshold`` below the median of all of them."""
        s = self.hooks.step_samples(key)
        if len(s) < max(self.settle_samples, 2 * self.min_samples):
            return True
        return float(np.median(s[len(s) // 2:])) * self.speedup_threshold < float(np.median(s))

    def _decide(self, best: tuple[int, int], best_goodput: float, cur: float) -> dict:
        h = self.hooks
        r = h.num_replicas
        speedup = best_goodput / cur if cur > 0 else math.inf
        # The gain must also beat the model's own error on the profiled configurations.
        err = h.model_error if math.isfinite(h.model_error) else 0.0
        threshold = max(self.speedup_threshold, 1.0 + err)
        up = r * best[0] * (best[1] + 1) > h.batch_size
        # A larger batch never profiled here is an extrapolation of the fit: trying it
        # costs a few steps and settles the question, so it needs only to be predicted
        # faster (``explore_threshold``); the way back, to a profiled configuration, has
        # the full threshold (hysteresis), so each configuration is tried once.
        best_key = (h.num_nodes, r, best[0], best[1])
        cur_key = h.config_key()
        reprobe = up and self._stale(best)
        explore = up and (self._profiled(best_key) == 0 or reprobe)
        if explore:
            threshold = self.explore_threshold
        better = best != (h.atomic_bsz, h.accum_steps) and speedup > threshold
        # Leaving for a smaller batch waits while the running configuration's step time is
        # still falling (its first steps after a switch run slower than it settles to).
        settling = better and not up and self._settling(cur_key)
        if settling:
            better = False
        if better:
            votes = self._votes[1] + 1 if self._votes and self._votes[0] == best else 1
            self._votes = (best, votes)
        else:
            self._votes = None
        # Hysteresis guards marginal gains; a large predicted gain from a larger batch
        # (exploring up, the profile behind it) switches at the first check.
        need = 1 if up and speedup >= max(self.immediate_gain, threshold) else self.patience
        switched = bool(better and self._votes is not None and self._votes[1] >= need)
        confirm = False
        if switched and not up:
            # About to leave for a smaller batch: first make sure the fit holds the running
            # configuration's current statistic (a refit only if the profile moved
            # materially since the last one); on a new fit the next check decides again.
            if h.request_refit():
                switched, self._votes = False, None
            elif not self.confirmed(cur_key):
                # The evidence must survive a re-measurement: the running configuration's
                # window may be a load spike. Measure it afresh (``settle_samples`` steps)
                # and decide again on the new window.
                self._remeasure(cur_key)
                switched, self._votes, confirm = False, None, True
        probe = False
        if not switched and not confirm and self._votes is None and self._good is not None:
            # Re-probing by age, whatever the fit (which may rest on the stale time) predicts.
            aged = self._aged_candidate()
            if aged is not None:
                best, probe, reprobe, explore = aged, True, True, True
                best_key = (h.num_nodes, r, best[0], best[1])
                speedup = float(self._good[4][self._row(best)]) / cur if cur > 0 else math.inf
                switched = True
        if switched and not self._ready(best):
            switched = False  # compiling it in the background; switch at a later check
        gp = self._good[0] if self._good is not None else None
        rec = {"step": self.steps, "best": best, "speedup": speedup, "switched": switched,
               "noise_scale": (h.init_batch_size * gp.var / gp.sqr
                               if gp is not None and gp.sqr > 0 else math.inf),
               "batch_size": r * best[0] * (best[1] + 1), "model_error": h.model_error,
               "explore": explore, "settling": settling, "reprobe": bool(reprobe),
               "probe": probe, "confirm": confirm, "nu_scale": None}
        self.last_check = rec
        if switched:
            old_batch = h.batch_size
            self.switches.append(rec)
            if reprobe:
                self._probing.add(best)
                self._last_probe = self.steps
            if h.step_samples(best_key):
                self._remeasure(best_key)  # a configuration returned to is measured afresh
            self.set_config(*best)
            self._plan_nu_scale(rec, old_batch)
        return rec

    def _window(self, key: tuple) -> float | None:
        s = self.hooks.step_samples(key)
        return float(np.quantile(s, self.hooks.profile_quantile)) if s else None

    def _remeasure(self, key: tuple) -> None:
        """Drop ``key``'s kept step times (remembering their statistic) to measure it afresh."""
        now = self._window(key)
        if now is not None:
            self.previous_window[tuple(key)] = now
        self.hooks.reset_profile(key)

    def confirmed(self, key: tuple[int, int, int, int] | None = None) -> bool:
        """Whether a step-down from ``key`` (default: the running configuration) is confirmed.

        It is when the configuration's current window of step times is no more than
        ``speedup_threshold`` slower than its previous window (:attr:`previous_window`,
        taken before its times were last dropped): a slowdown seen on two windows, not
        one load spike. Without a previous window, or against a faster one, the
        controller measures the configuration afresh before deciding again.

        Example:
            >>> from goodput_jax.adaptive import AdaptiveBatchSize
            >>> from goodput_jax.integrations.hooks import GoodputHooks
            >>> h = GoodputHooks("doc", init_batch_size=8, num_replicas=1, num_nodes=1,
            ...                  is_primary=False, warmup_steps=0, job_warmup_steps=0)
            >>> a = AdaptiveBatchSize(h, {"x": np.arange(100.0)})
            >>> h.observe_step_time(0.02)
            >>> a.confirmed()  # one window only: measure it again first
            False
            >>> a.previous_window[h.config_key()] = 0.02  # as a re-measurement leaves it
            >>> a.confirmed()
            True
        """
        k: Any = self.hooks.config_key() if key is None else tuple(key)
        prev, now = self.previous_window.get(k), self._window(k)
        return prev is not None and now is not None and now <= prev * self.speedup_threshold

    def _row(self, config: tuple[int, int]) -> int:
        assert self._cache is not None  # (a check has built the candidates)
        cand = self._cache[1]
        return int(np.flatnonzero((cand[:, 0] == config[0]) & (cand[:, 1] == config[1]))[0])

    def _aged_candidate(self) -> tuple[int, int] | None:
        """The larger configuration to re-probe by age, or None.

        One left at least its re-probe interval ago (:meth:`_stale`), once the job has
        run ``reprobe_steps`` steps in the current configuration and since the last
        probe: the smallest such total batch among the candidates (ties: the higher
        predicted goodput). When the current configuration is itself a probe that the
        job keeps (it has settled and no check wants to leave it: its old time was
        wrong, and so may the larger ones' be), the next one is probed at once.
        """
        if not self.reprobe_steps or self._cache is None or self._good is None:
            return None
        h = self.hooks
        kept = ((h.atomic_bsz, h.accum_steps) in self._probing
                and not self._settling(h.config_key()))
        if not kept and self.steps - max(self.arrived_at, self._last_probe) < self.reprobe_steps:
            return None
        cand, good = self._cache[1], self._good[4]
        total = h.num_replicas * cand[:, 0] * (cand[:, 1] + 1)
        pick = None
        for i in np.argsort(total, kind="stable"):
            config = (int(cand[i, 0]), int(cand[i, 1]))
            if total[i] <= h.batch_size or not self._stale(config):
                continue
            if pick is None or total[i] == pick[0] and good[i] > pick[1]:
                pick = (total[i], good[i], config)
            elif total[i] > pick[0]:
                break
        return None if pick is None else pick[2]

    def _stale(self, config: tuple[int, int]) -> bool:
        """Whether ``config`` was left at least its re-probe interval ago: ``reprobe_steps``,
        doubled for each recent probe of it that the job left again soon."""
        left = self.left_at.get(config)
        if not self.reprobe_steps or left is None:
            return False
        wait = self.reprobe_steps * 2 ** self.reprobe_backoff.get(config, 0)
        return self.steps - left >= wait
