"""AdaptiveBatchSize: the training loop acts on its goodput model (AdaptDL's AdaptiveDataLoader).

It owns the current ``(atomic_bsz, accum_steps)``, cuts batches of that size
from the user's data, runs the step through :class:`GoodputHooks` (which
profile it and keep the model fitted in the background) and, at step
boundaries, switches configuration when the model predicts a worthwhile gain:

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

Its :meth:`state_dict` (configuration, data position, profile and fit) goes
into the Orbax checkpoint next to the model and optimizer state (which carry the
gradient statistics and the scale-invariant progress): see
:mod:`goodput_jax.adaptive.checkpoint`.

Example:
    >>> import numpy as np, optax, jax.numpy as jnp  # doctest: +SKIP
    >>> hooks = GoodputHooks("job", init_batch_size=32, max_batch_size=512)  # doctest: +SKIP
    >>> abs_ = AdaptiveBatchSize(hooks, {"x": xs, "y": ys})  # doctest: +SKIP
    >>> for i in range(1000):  # doctest: +SKIP
    ...     params, opt_state, loss = abs_.step(i, train_step, params, opt_state)
"""

from __future__ import annotations

import math
import numbers
import time
from typing import Any

import numpy as np

from goodput_jax.adaptive.data import ArraySource, IterableSource, _tree_map, as_source
from goodput_jax.adaptive.step import slots_for
from goodput_jax.integrations.search import feasible_configs

__all__ = ["AdaptiveBatchSize", "default_atomic_sizes"]


class _Spec:
    """A shape/dtype stand-in with the attributes ``jax.ShapeDtypeStruct`` reads."""

    __slots__ = ("dtype", "shape")

    def __init__(self, shape: tuple, dtype: Any):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)


def _default_sizes(init: int, lo: int | None, hi: int | None, max_local: int) -> list[int]:
    lo = 1 if lo is None else lo
    hi = max_local if hi is None else min(hi, max_local)
    sizes = {init}
    p = 1
    while p <= hi:
        if p >= lo:
            sizes.add(p)
        p *= 2
    return sorted(s for s in sizes if lo <= s <= max(hi, init))


def default_atomic_sizes(hooks: Any) -> list[int]:
    """The per-replica micro-batch sizes :class:`AdaptiveBatchSize` uses by default.

    Powers of two within the hooks' ``local_bsz_bounds`` and up to
    ``max_batch_size / num_replicas``, plus the initial ``atomic_bsz``. Pass them
    to :meth:`GoodputHooks.suggest` (``atomic_sizes=``) for the best configuration
    the controller can run without a new compile.

    Example:
        >>> from goodput_jax.integrations.hooks import GoodputHooks
        >>> h = GoodputHooks("doc", init_batch_size=96, num_replicas=4, num_nodes=1,
        ...                  is_primary=False, max_batch_size=1024, local_bsz_bounds=(8, 128))
        >>> default_atomic_sizes(h)
        [8, 16, 24, 32, 64, 128]
    """
    lo, hi = hooks.local_bsz_bounds
    r = hooks.num_replicas
    sizes = _default_sizes(hooks.atomic_bsz, lo, hi, max(1, hooks.max_batch_size // r))
    return sorted(set(sizes) | {hooks.atomic_bsz})


class AdaptiveBatchSize:
    """Adaptive batch size, accumulation and (through the optimizer) learning rate.

    Args:
        hooks: the job's :class:`~goodput_jax.integrations.hooks.GoodputHooks`
            (its ``init_batch_size``, ``max_batch_size``, ``local_bsz_bounds``,
            ``gradient_accumulation`` and replica count are the job's limits).
        data: an :class:`ArraySource` / :class:`IterableSource`, a pytree of
            numpy arrays, or an iterable (factory) of examples.
        batch_sharding: where batches go (``train_step.batch_sharding``); None
            leaves them as numpy.
        atomic_sizes: allowed per-replica micro-batch sizes (default: powers of
            two within the bounds, plus the initial size).
        max_accum_steps: largest ``accum_steps`` considered (default 7).
        speedup_threshold: predicted goodput ratio a switch must beat.
        explore_threshold: the ratio that a switch to a *larger batch not yet
            profiled* on this replica count must beat instead (default 1.0: any
            predicted gain). Its step time is the fit's extrapolation; a few steps
            measure it, and going back to a profiled configuration takes the full
            threshold, so each configuration is tried once. With the full
            threshold, a fit that extrapolates the next batch size a little
            pessimistically keeps the job below it for thousands of steps.
        patience: consecutive checks the same better candidate must win.
        immediate_gain: a larger batch predicted at least this much faster (in
            goodput) switches at the first check (no ``patience``): exploring
            up from a small initial batch costs a few steps per doubling.
        adapt_every: steps between checks.
        adapt_interval: seconds (on the hooks' clock) after a settled check (one
            that found no better candidate) before the next: with short steps a
            check every ``adapt_every`` steps costs a fixed share of each step
            (50-100 us a check on a CPU host); spacing settled checks bounds that
            share whatever the step time, while exploring (a switch, a
            configuration still gathering samples, a candidate collecting
            ``patience`` votes) keeps checking every ``adapt_every`` steps
            (0: always every ``adapt_every`` steps).
        min_samples: profiled steps of the running configuration before a check.
        settle_samples: kept step times of the running configuration before a
            check may leave it for a smaller batch, which also waits while the
            newer half of them is faster than all of them (the step time still
            falling): a configuration's first steps after a switch can run well
            above its settled time, and a configuration left is not measured
            again. Switching up is not held back (trying costs a few steps).
        min_grad_steps: steps behind the gradient statistics before a check (the
            first statistics hold one step: their noise scale can be off by 100x).
        explore_factor: growth limit of the total batch per exploration step.
        reprobe_steps: steps after leaving a configuration before a larger one
            may be tried again: at ``explore_threshold`` when the fit predicts a
            gain, and regardless of the fit once the job has also spent this many
            steps in its current configuration (0: never). Without it a
            configuration left on a pessimistic measurement (a load spike, the
            first steps), or at an early, small noise scale, is judged for the rest
            of the job on a step time that is never measured again. Each probe
            that the job leaves again soon doubles the configuration's interval.
        rescale_nu: at each switch, scale Adam's second moment ``nu`` in the optimizer
            state by :func:`~goodput_jax.model.gradstats.nu_switch_factor` of the noise
            scale the switch was decided on (the factor goes into the switch record as
            ``nu_scale``; None where it was not applied: no finite positive noise scale,
            or no Adam-like state). :meth:`step` applies it to the next optimizer state
            it is given (:meth:`prepare_opt_state`). Without it, after a switch up from
            small batches ``nu`` still holds their noisier gradients for ~``1 / (1 - b2)``
            steps and Adam's update is smaller than the ``adam`` rule assumes: on
            ``adaptive_bench.py``'s MLP with AdamW the arm needed 30-60% more steps at
            2048 than a fresh start (docs/adaptive.md). False: the state passes unchanged.
        adaptive: False keeps the initial configuration (the fixed arm of a benchmark).

    Example:
        >>> from goodput_jax.integrations.hooks import GoodputHooks
        >>> h = GoodputHooks("doc", init_batch_size=8, num_replicas=1, num_nodes=1,
        ...                  is_primary=False, max_batch_size=64)
        >>> a = AdaptiveBatchSize(h, {"x": np.arange(100.0)})
        >>> batch, n = a.next_batch()
        >>> batch["x"].shape, n
        ((1, 8), 1)
    """

    def __init__(
        self,
        hooks: Any,
        data: Any,
        *,
        batch_sharding: Any = None,
        atomic_sizes: list[int] | None = None,
        max_accum_steps: int = 7,
        speedup_threshold: float = 1.05,
        explore_threshold: float = 1.0,
        patience: int = 2,
        immediate_gain: float = 1.25,
        adapt_every: int = 10,
        adapt_interval: float = 0.05,
        min_samples: int = 5,
        settle_samples: int = 20,
        min_grad_steps: int = 10,
        explore_factor: float = 2.0,
        reprobe_steps: int = 500,
        stable_reads: int = 3,
        stable_ratio: float = 2.0,
        rescale_nu: bool = True,
        adaptive: bool = True,
    ):
        self.hooks = hooks
        self.source: ArraySource | IterableSource = as_source(data)
        self.batch_sharding = batch_sharding
        for name, v in (("max_accum_steps", max_accum_steps), ("patience", patience),
                        ("adapt_every", adapt_every), ("min_samples", min_samples),
                        ("settle_samples", settle_samples),
                        ("min_grad_steps", min_grad_steps)):
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < (
                    0 if name == "max_accum_steps" else 1):
                raise ValueError(f"{name} ({v!r}) must be a positive integer")
        if not (isinstance(speedup_threshold, numbers.Real) and speedup_threshold >= 1.0):
            raise ValueError(f"speedup_threshold ({speedup_threshold!r}) must be >= 1")
        if not (isinstance(explore_threshold, numbers.Real)
                and 1.0 <= explore_threshold <= speedup_threshold):
            raise ValueError(f"explore_threshold ({explore_threshold!r}) must be between 1 and "
                             f"speedup_threshold ({speedup_threshold!r})")
        self.explore_threshold = float(explore_threshold)
        if not (isinstance(immediate_gain, numbers.Real) and immediate_gain >= 1.0):
            raise ValueError(f"immediate_gain ({immediate_gain!r}) must be >= 1")
        self.immediate_gain = float(immediate_gain)
        if not (isinstance(adapt_interval, numbers.Real) and math.isfinite(adapt_interval)
                and adapt_interval >= 0.0):
            raise ValueError(f"adapt_interval ({adapt_interval!r}) must be a number of seconds >= 0")
        self.adapt_interval = float(adapt_interval)
        # the hooks' step clock (injectable): no check runs before ``_next_adapt``
        self._clock = hooks.clock
        self._next_adapt = -math.inf
        if not (isinstance(explore_factor, numbers.Real) and explore_factor > 1.0):
            raise ValueError(f"explore_factor ({explore_factor!r}) must be > 1")
        self.max_accum_steps = int(max_accum_steps) if hooks.gradient_accumulation else 0
        self.speedup_threshold = float(speedup_threshold)
        self.patience = int(patience)
        self.adapt_every = int(adapt_every)
        self.min_samples = int(min_samples)
        self.settle_samples = int(settle_samples)
        self.min_grad_steps = int(min_grad_steps)
        self.explore_factor = float(explore_factor)
        if isinstance(reprobe_steps, bool) or not isinstance(reprobe_steps, numbers.Integral) \
                or reprobe_steps < 0:
            raise ValueError(f"reprobe_steps ({reprobe_steps!r}) must be an integer >= 0")
        self.reprobe_steps = int(reprobe_steps)
        if isinstance(stable_reads, bool) or not isinstance(stable_reads, numbers.Integral) \
                or stable_reads < 1:
            raise ValueError(f"stable_reads ({stable_reads!r}) must be a positive integer")
        if not (isinstance(stable_ratio, numbers.Real) and stable_ratio >= 1.0):
            raise ValueError(f"stable_ratio ({stable_ratio!r}) must be >= 1")
        self.stable_reads, self.stable_ratio = int(stable_reads), float(stable_ratio)
        #: Noise scales (``M0 * var / sqr``, samples) of the last ``stable_reads`` distinct
        #: gradient statistics the checks saw (inf when ``sqr <= 0``).
        self.noise_scales: list[float] = []
        #: ``(atomic_bsz, accum_steps)`` -> the step count when it was last left.
        self.left_at: dict[tuple[int, int], int] = {}
        #: Step count when the running configuration was entered.
        self.arrived_at = 0
        #: ``(atomic_bsz, accum_steps)`` -> doublings of its re-probe interval: each probe of
        #: it that the job left again within ``reprobe_steps`` doubles the wait for the next
        #: (at most ``2 ** MAX_REPROBE_DOUBLINGS``); a stay of ``reprobe_steps`` clears it.
        self.reprobe_backoff: dict[tuple[int, int], int] = {}
        #: profile key -> the statistic (``profile_quantile`` of its kept step times) of the
        #: configuration's previous window: what it measured before its times were last
        #: dropped to be measured afresh. A step-down needs the running configuration's
        #: current window to agree with it (see :meth:`confirmed`).
        self.previous_window: dict[tuple[int, int, int, int], float] = {}
        self._probing: set[tuple[int, int]] = set()
        self._last_probe = -math.inf
        self.adaptive = bool(adaptive)
        if not isinstance(rescale_nu, bool):
            raise ValueError(f"rescale_nu ({rescale_nu!r}) must be True or False")
        self.rescale_nu = rescale_nu
        #: ``(factor, switch record)`` of a switch whose ``nu`` rescale the next optimizer
        #: state through :meth:`prepare_opt_state` takes; None when none is due.
        self.pending_nu_scale: tuple[float, dict | None] | None = None
        if atomic_sizes is None:
            atomic_sizes = default_atomic_sizes(hooks)
        sizes = sorted({int(s) for s in atomic_sizes} | {hooks.atomic_bsz})
        if any(s < 1 for s in sizes):
            raise ValueError(f"atomic_sizes ({atomic_sizes!r}) must be positive integers")
        self.atomic_sizes = sizes
        self.steps = 0  # counted by next_batch: one a step
        self.switches: list[dict] = []
        self._votes: tuple[tuple[int, int], int] | None = None
        self.last_check: dict | None = None
        self._example: Any = None
        self._step_ref: tuple | None = None
        #: Seconds spent in :meth:`adapt` from :meth:`step` (checks, requested refits, switches).
        self.adapt_seconds = 0.0
        #: Of which: refits the checks asked for, run inline (multi-device CPU).
        self.adapt_refit_seconds = 0.0
        self._cache: tuple | None = None
        self._good: tuple | None = None
        self._last_gp: Any = None
        self._same_reads = 0

    # ----------------------------------------------------------------- configuration
    @property
    def atomic_bsz(self) -> int:
        return self.hooks.atomic_bsz

    @property
    def accum_steps(self) -> int:
        return self.hooks.accum_steps

    @property
    def num_replicas(self) -> int:
        return self.hooks.num_replicas

    @property
    def batch_size(self) -> int:
        """Current total batch size."""
        return self.hooks.batch_size

    def set_config(self, atomic_bsz: int, accum_steps: int) -> None:
        """Switch to ``(atomic_bsz, accum_steps)`` now (also what :meth:`adapt` does).

        The configuration's kept step times stay; a switch that :meth:`adapt` decides
        also drops those of the configuration it returns to (measured afresh).
        """
        if atomic_bsz not in self.atomic_sizes:
            self.atomic_sizes = sorted({*self.atomic_sizes, int(atomic_bsz)})
        old, new = (self.atomic_bsz, self.accum_steps), (int(atomic_bsz), int(accum_steps))
        self.hooks.set_config(atomic_bsz=new[0], accum_steps=new[1])
        if new != old:
            stayed = self.steps - self.arrived_at
            down = new[0] * (new[1] + 1) < old[0] * (old[1] + 1)
            if old in self._probing and down and stayed < self.reprobe_steps:
                # a probe the job left again soon for a smaller batch (the probe found
                # the old time right): wait twice as long before the next one
                self.reprobe_backoff[old] = min(self.reprobe_backoff.get(old, 0) + 1,
                                                self.MAX_REPROBE_DOUBLINGS)
            elif stayed >= self.reprobe_steps or not down:
                self.reprobe_backoff.pop(old, None)
            self._probing.discard(old)
            self.left_at[old] = self.steps
            self.arrived_at = self.steps
        self.left_at.pop(new, None)
        self._votes = None

    # ----------------------------------------------------------------- data
    def next_batch(self) -> tuple[Any, int]:
        """The next batch ``[slots, R * b, ...]`` and its microbatch count ``accum_steps + 1``.

        Each call counts one step (:attr:`steps`, the clock of the re-probe intervals and of
        each switch record's ``step``): a loop that runs the step itself calls it once per
        step, as :meth:`step` does.
        """
        self.steps += 1
        r, b, n = self.num_replicas, self.atomic_bsz, self.accum_steps + 1
        slots = slots_for(n)
        ex = self.source.take(r * b * n)

        def shape(x):
            x = np.asarray(x).reshape((n, r * b) + np.shape(x)[1:])
            if slots > n:
                x = np.concatenate([x, np.zeros((slots - n,) + x.shape[1:], x.dtype)])
            return x

        batch = _tree_map(shape, ex)
        self._example = _tree_map(lambda x: _Spec(x.shape[2:], x.dtype), batch)
        if self.batch_sharding is not None:
            import jax

            batch = jax.device_put(batch, self.batch_sharding)
        return batch, n

    def step(self, step: int, train_step: Any, params: Any, opt_state: Any) -> Any:
        """One step: next batch, ``hooks.step(step, train_step, params, opt_state, batch, n)``, adapt.

        Returns:
            ``train_step``'s outputs.
        """
        opt_state = self.prepare_opt_state(opt_state)
        batch, n = self.next_batch()
        out = self.hooks.step(step, train_step, params, opt_state, batch, np.int32(n))
        if self.adaptive and self.steps % self.adapt_every == 0:
            t0 = time.perf_counter()
            now = self._clock()
            if now < self._next_adapt:
                self.adapt_seconds += time.perf_counter() - t0
                return out
            r0 = self.hooks.inline_refit_seconds
            self._step_ref = (train_step, out[0], out[1]) if isinstance(out, tuple) and len(
                out) >= 2 else None
            rec = self.adapt()
            self._step_ref = None
            # a settled check (no better candidate in sight) spaces the next one by
            # adapt_interval; exploring, waiting for samples or counting votes does not
            if rec is not None and not rec["switched"] and self._votes is None:
                self._next_adapt = now + self.adapt_interval
            self.adapt_seconds += time.perf_counter() - t0
            self.adapt_refit_seconds += self.hooks.inline_refit_seconds - r0
        return out

    def prepare_opt_state(self, opt_state: Any) -> Any:
        """The optimizer state to hand the next step: after a switch (once), Adam's ``nu``
        rescaled (:attr:`pending_nu_scale`, see ``rescale_nu``), else ``opt_state`` itself.

        :meth:`step` calls it; a loop that runs the step itself (``next_batch``,
        ``hooks.step``, :meth:`adapt`) calls it on the optimizer state before each step.
        Between switches it costs one attribute test; at a switch, one multiply per
        ``nu`` leaf, dispatched without waiting for the device (no host sync), each leaf
        keeping its dtype and sharding, so the jitted step neither retraces nor recompiles.
        A state without an Adam-like part passes unchanged, and the switch record's
        ``nu_scale`` becomes None. A Flax NNX ``nnx.Optimizer`` (a hand loop that keeps
        one) is rescaled in place and returned itself
        (:func:`~goodput_jax.model.gradstats.rescale_nu`).

        Example:
            >>> import optax, jax.numpy as jnp
            >>> from goodput_jax.integrations.hooks import GoodputHooks
            >>> h = GoodputHooks("doc", init_batch_size=8, num_replicas=1, num_nodes=1,
            ...                  is_primary=False)
            >>> a = AdaptiveBatchSize(h, {"x": np.arange(100.0)})
            >>> st = optax.adam(1e-3).init({"w": jnp.ones(2)})
            >>> a.prepare_opt_state(st) is st   # no switch since the last step
            True
        """
        pending = self.pending_nu_scale
        if pending is None:
            return opt_state
        self.pending_nu_scale = None
        from goodput_jax.model.gradstats import find_adam_state, rescale_nu

        factor, rec = pending
        if find_adam_state(opt_state) is None:
            if rec is not None:
                rec["nu_scale"] = None  # SGD and the like: nothing to rescale
            return opt_state
        return rescale_nu(opt_state, factor)

    def _plan_nu_scale(self, rec: dict, old_batch: int) -> None:
        """At a switch: the ``nu`` factor for ``rec`` (None when not applied), pending."""
        rec["nu_scale"] = None
        if not self.rescale_nu:
            return
        from goodput_jax.model.gradstats import nu_switch_factor

        factor = nu_switch_factor(rec["noise_scale"], old_batch, self.batch_size)
        if factor is None:
            return
        if self.pending_nu_scale is not None:  # two switches before a step: compose
            factor *= self.pending_nu_scale[0]
        rec["nu_scale"] = factor
        self.pending_nu_scale = (factor, rec)

    def batch_like(self, atomic_bsz: int, accum_steps: int) -> Any:
        """Shape/dtype stand-ins of the batch of a configuration (for ahead-of-time compiles)."""
        if self._example is None:
            return None
        r, slots = self.num_replicas, slots_for(accum_steps + 1)
        return _tree_map(lambda e: _Spec((slots, r * atomic_bsz) + e.shape, e.dtype),
                         self._example)

    def _ready(self, config: tuple[int, int]) -> bool:
        """Whether switching to ``config`` costs no compile; starts a background compile if not."""
        ref = self._step_ref
        if ref is None or not hasattr(ref[0], "precompile"):
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
        """Feasible ``(atomic_bsz, accum_steps)`` rows under the job's limits and the exploration cap."""
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
            >>> from goodput_jax.integrations.hooks import GoodputHooks
            >>> from goodput_jax.model import GradParams
            >>> h = GoodputHooks("doc", init_batch_size=8, num_replicas=1, num_nodes=1,
            ...                  is_primary=False)
            >>> a = AdaptiveBatchSize(h, {"x": np.arange(100.0)})
            >>> [a.stats_stable(GradParams(sqr=s, var=1.0)) for s in (1.0, 0.01, 0.6, 0.5, 0.55)]
            [False, False, False, False, True]
            >>> a.stats_stable(GradParams(sqr=0.0, var=1.0))  # sqr <= 0: every batch looks free
            False
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
        switched = bool(better and self._votes[1] >= need)
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
        if not switched and not confirm and self._votes is None:
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

    #: Most doublings of a configuration's re-probe interval (``reprobe_steps`` x 16).
    MAX_REPROBE_DOUBLINGS = 4

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
        key = self.hooks.config_key() if key is None else tuple(key)
        prev, now = self.previous_window.get(key), self._window(key)
        return prev is not None and now is not None and now <= prev * self.speedup_threshold

    def _row(self, config: tuple[int, int]) -> int:
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

    # ----------------------------------------------------------------- state
    def state_dict(self) -> dict:
        """JSON-safe state: configuration, data position, hooks (profile + fit), switches."""
        self.hooks.flush()
        return {
            "atomic_bsz": self.atomic_bsz,
            "accum_steps": self.accum_steps,
            "num_replicas": self.num_replicas,
            "batch_size": self.batch_size,
            "steps": self.steps,
            "atomic_sizes": list(self.atomic_sizes),
            "source": self.source.state_dict(),
            "hooks": self.hooks.state_dict(),
            "switches": [dict(s, best=list(s["best"])) for s in self.switches],
            "left_at": [[b, s, n] for (b, s), n in self.left_at.items()],
            "arrived_at": self.arrived_at,
            "reprobe_backoff": [[b, s, k] for (b, s), k in self.reprobe_backoff.items()],
            "probing": [list(c) for c in sorted(self._probing)],
            "last_probe": None if self._last_probe == -math.inf else self._last_probe,
            "previous_window": [[*k, v] for k, v in self.previous_window.items()],
            # a switch's nu factor not yet applied to the optimizer state (checkpointed
            # between the switch and the next step)
            "pending_nu_scale": (None if self.pending_nu_scale is None
                                 else self.pending_nu_scale[0]),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`; on another replica count keep the total batch size.

        The profile and fit come back whole (the model keeps what it learned on
        the old replica count); the configuration is mapped to the current
        replicas: same ``accum_steps``, ``atomic_bsz = round(batch / R / (s + 1))``.
        """
        self.hooks.load_state_dict(state["hooks"], keep_topology=True)
        self.source.load_state_dict(state["source"])
        self.steps = int(state["steps"])
        self.atomic_sizes = sorted({int(s) for s in state["atomic_sizes"]})
        self.switches = [dict(s, best=tuple(s["best"])) for s in state.get("switches", [])]
        left = {(int(b), int(a)): int(n) for b, a, n in state.get("left_at", [])}
        s = int(state["accum_steps"])
        b = int(state["atomic_bsz"])
        same = int(state["num_replicas"]) == self.num_replicas
        if not same:
            b = max(1, round(int(state["batch_size"]) / self.num_replicas / (s + 1)))
        self.set_config(b, s)
        # when each configuration was left, its re-probe backoff, the probes under way (on
        # another replica count: other configurations); previous windows are keyed by
        # replica count and all kept
        self.left_at = left if same else {}
        self.arrived_at = int(state.get("arrived_at", self.steps)) if same else self.steps
        self.reprobe_backoff = {(int(b), int(a)): int(k) for b, a, k in
                                state.get("reprobe_backoff", [])} if same else {}
        self._probing = {(int(b), int(a)) for b, a in state.get("probing", [])} if same else set()
        last = state.get("last_probe")
        self._last_probe = -math.inf if last is None or not same else int(last)
        self.previous_window = {tuple(int(x) for x in row[:4]): float(row[4])
                                for row in state.get("previous_window", [])}
        pending = state.get("pending_nu_scale")
        self.pending_nu_scale = None if pending is None else (float(pending), None)
