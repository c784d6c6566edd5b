"""AdaptiveBatchSize: the training loop acts on its goodput model (AdaptDL's AdaptiveDataLoader).

It owns the current ``(atomic_bsz, accum_steps)``, cuts batches of that size
from the user's data, runs the step through :class:`GoodputHooks` (which
profile it and keep the model fitted in the background) and, at step
boundaries, switches configuration when the model predicts a worthwhile gain.

The rules of a check (when a switch pays, hysteresis, exploration, re-probing, the
learning rate and Adam's ``nu`` at a switch) are in :mod:`goodput_jax.adaptive.decisions`;
the options (thresholds, schedule, search space) in :mod:`goodput_jax.adaptive.options`.

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
import time
from typing import Any

import numpy as np

from goodput_jax.adaptive.data import ArraySource, IterableSource, _tree_map, as_source
from goodput_jax.adaptive.decisions import SwitchDecisions
from goodput_jax.adaptive.options import AdaptiveOptions
from goodput_jax.adaptive.step import slots_for

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

    ``Any``: ``hooks`` is a :class:`~goodput_jax.integrations.hooks.GoodputHooks` (not imported
    here: the integrations room imports this one).
    """
    lo, hi = hooks.local_bsz_bounds
    r = hooks.num_replicas
    sizes = _default_sizes(hooks.atomic_bsz, lo, hi, max(1, hooks.max_batch_size // r))
    return sorted(set(sizes) | {hooks.atomic_bsz})


class AdaptiveBatchSize(SwitchDecisions):
    """Adaptive batch size, accumulation and (through the optimizer) learning rate.

    Args:
        hooks: the job's :class:`~goodput_jax.integrations.hooks.GoodputHooks`
            (its ``init_batch_size``, ``max_batch_size``, ``local_bsz_bounds``,
            ``gradient_accumulation`` and replica count are the job's limits).
        data: an :class:`ArraySource` / :class:`IterableSource`, a pytree of
            numpy arrays, or an iterable (factory) of examples.
        options: :class:`~goodput_jax.adaptive.options.AdaptiveOptions` (the search
            space, the switch policy, the check schedule, ``rescale_nu``, ``adaptive``);
            None: the defaults.
        batch_sharding: where batches go (``train_step.batch_sharding``); None
            leaves them as numpy.
        **keywords: the options' fields by their flat names, as this constructor took
            them before the options objects (``atomic_sizes``, ``max_accum_steps``,
            ``explore_factor``; ``speedup_threshold``, ``explore_threshold``,
            ``patience``, ``immediate_gain``, ``min_samples``, ``settle_samples``,
            ``reprobe_steps``; ``adapt_every``, ``adapt_interval``, ``min_grad_steps``,
            ``stable_reads``, ``stable_ratio``; ``rescale_nu``, ``adaptive``): applied
            on top of ``options`` (:meth:`AdaptiveOptions.with_keywords`).

    ``rescale_nu`` (on by default): at each switch, Adam's second moment ``nu`` in the
    optimizer state is scaled by :func:`~goodput_jax.model.gradstats.nu_switch_factor` of
    the noise scale the switch was decided on (the factor goes into the switch record as
    ``nu_scale``; None where it was not applied: no finite positive noise scale, or no
    Adam-like state). :meth:`step` applies it to the next optimizer state it is given
    (:meth:`prepare_opt_state`). Without it, after a switch up from small batches ``nu``
    still holds their noisier gradients for ~``1 / (1 - b2)`` steps and Adam's update is
    smaller than the ``adam`` rule assumes: on ``adaptive_bench.py``'s MLP with AdamW the
    arm needed 30-60% more steps at 2048 than a fresh start (docs/adaptive.md).

    The options' fields are also attributes of the controller (``ctl.patience``,
    ``ctl.adaptive``, ...), which a benchmark or a test may change between steps.

    Example:
        >>> from goodput_jax.integrations.hooks import GoodputHooks
        >>> from goodput_jax.adaptive.options import AdaptiveOptions, CheckSchedule
        >>> h = GoodputHooks("doc", init_batch_size=8, num_replicas=1, num_nodes=1,
        ...                  is_primary=False, max_batch_size=64)
        >>> a = AdaptiveBatchSize(h, {"x": np.arange(100.0)},
        ...                       AdaptiveOptions(checks=CheckSchedule(adapt_every=5)))
        >>> batch, n = a.next_batch()
        >>> batch["x"].shape, n, a.adapt_every
        ((1, 8), 1, 5)
        >>> AdaptiveBatchSize(h, {"x": np.arange(100.0)}, patience=3).patience  # old keywords
        3
    """

    def __init__(self, hooks: Any, data: Any, options: AdaptiveOptions | None = None, *,
                 batch_sharding: Any = None, **keywords: Any):
        """``Any``: ``hooks`` is a :class:`~goodput_jax.integrations.hooks.GoodputHooks` (not
        imported here: the integrations room imports this one), ``data`` a pytree of arrays or
        an iterable of batches, ``batch_sharding`` a JAX sharding, and ``keywords`` the old
        keyword arguments, each checked as it becomes a field of :class:`AdaptiveOptions`.
        """
        if options is None:
            options = AdaptiveOptions()
        elif not isinstance(options, AdaptiveOptions):
            raise TypeError(f"options ({options!r}) must be an AdaptiveOptions or None")
        opts = options.with_keywords(**keywords) if keywords else options
        #: The options this controller was built with (old keywords applied).
        self.options = opts
        self.hooks = hooks
        self.source: ArraySource | IterableSource = as_source(data)
        self.batch_sharding = batch_sharding
        search, policy, checks = opts.search, opts.policy, opts.checks
        self.max_accum_steps = search.max_accum_steps if hooks.gradient_accumulation else 0
        self.explore_factor = float(search.explore_factor)
        self.speedup_threshold = float(policy.speedup_threshold)
        self.explore_threshold = float(policy.explore_threshold)
        self.patience = policy.patience
        self.immediate_gain = float(policy.immediate_gain)
        self.min_samples = policy.min_samples
        self.settle_samples = policy.settle_samples
        self.reprobe_steps = policy.reprobe_steps
        self.adapt_every = checks.adapt_every
        self.adapt_interval = float(checks.adapt_interval)
        self.min_grad_steps = checks.min_grad_steps
        self.stable_reads, self.stable_ratio = checks.stable_reads, float(checks.stable_ratio)
        self.adaptive = opts.adaptive
        self.rescale_nu = opts.rescale_nu
        # the hooks' step clock (injectable): no check runs before ``_next_adapt``
        self._clock = hooks.clock
        self._next_adapt = -math.inf
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
        #: ``(factor, switch record)`` of a switch whose ``nu`` rescale the next optimizer
        #: state through :meth:`prepare_opt_state` takes; None when none is due.
        self.pending_nu_scale: tuple[float, dict | None] | None = None
        sizes = (default_atomic_sizes(hooks) if search.atomic_sizes is None
                 else search.atomic_sizes)
        self.atomic_sizes = sorted({int(s) for s in sizes} | {hooks.atomic_bsz})
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

        ``Any``: params, optimizer state and batches are JAX pytrees, which have no static type.
        """
        self.steps += 1
        r, b, n = self.num_replicas, self.atomic_bsz, self.accum_steps + 1
        slots = slots_for(n)
        ex = self.source.take(r * b * n)

        def shape(x: Any) -> np.ndarray:
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
        """One step: next batch, ``hooks.step(step, train_step, params, opt_state, batch, n)``,
        adapt.

        Returns:
            ``train_step``'s outputs.

        ``Any``: params, optimizer state and batches are JAX pytrees, which have no static type.
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

        ``Any``: params, optimizer state and batches are JAX pytrees, which have no static type.
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
        """Shape/dtype stand-ins of the batch of a configuration (for ahead-of-time compiles).

        ``Any``: params, optimizer state and batches are JAX pytrees, which have no static type.
        """
        if self._example is None:
            return None
        r, slots = self.num_replicas, slots_for(accum_steps + 1)
        return _tree_map(lambda e: _Spec((slots, r * atomic_bsz) + e.shape, e.dtype),
                         self._example)

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
        self.previous_window = {(int(row[0]), int(row[1]), int(row[2]), int(row[3])):
                                float(row[4]) for row in state.get("previous_window", [])}
        pending = state.get("pending_nu_scale")
        self.pending_nu_scale = None if pending is None else (float(pending), None)
