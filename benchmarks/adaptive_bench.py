"""Adaptive batch size vs fixed batch sizes: wall time to a target accuracy.

A small MLP classifies a synthetic, reproducible dataset (a noisy teacher
network labels Gaussian inputs; generated from the seed, nothing downloaded),
data parallel over 4 fake CPU devices. Arms, each from the same initial
parameters per seed:

* ``fixed-M0``: the user's initial batch size, fixed (arm a);
* ``fixed-<B>``: every batch size of a sweep, fixed (arm b);
* ``adaptive``: :class:`goodput_jax.adaptive.AdaptiveBatchSize` starting at M0 (arm c).

Every arm uses the same optimizer (SGD + momentum tuned at M0) with the
AdaScale learning-rate rule, so the fixed large-batch arms are not handicapped
by an unscaled learning rate.

Protocol (robust to evaluation noise, long enough to amortise exploration):

* 300k training examples (a job that does not overfit within the budget) and a
  20k held-out set (accuracy standard error ~0.003);
* the held-out accuracy is evaluated every ``--eval-every`` seconds of training
  time, and an arm stops when the mean of the last ``--smooth`` (3) evaluations
  reaches ``--target`` (0.75): one lucky evaluation does not end a run;
* the time to target reported is when that moving average, centred on its
  evaluations' times, crossed the target, interpolated between evaluations
  (:func:`crossing_time`): not quantised to the 0.5 s evaluation interval (5-7%
  of a run here, close to the 10% being judged) and without the smoothing lag
  every arm shares (which would pull the ratios towards 1). The stopping time is
  printed beside it;
* the target is far past the point where small batches stop improving (their
  gradient noise limits the accuracy): on this CPU the best fixed arm needs
  ~9-10 s, so the adaptive arm's exploration from ``M0`` (a few dozen steps)
  is a small part of its run, as in AdaptDL's experiments;
* every arm uses the same learning-rate decay in scale-invariant iterations
  (``--half-life``), so a larger batch advances the schedule by its AdaScale
  gain per step (a constant rate would leave each batch size at its own noise
  floor, and the target would measure the floor, not the speed);
* evaluation time is excluded from the wall time (the clock is paused once the
  step in flight has finished, so that no training is hidden in the pause);
  compilation of every batch shape happens once before the arms, the adaptive
  arm's exploration, checks and refits are included;
* the arms of a seed take turns (``--interleave``, the default): each trains for
  a ``--slice`` (1 s) of training time, its last step finished, then the next
  one, so that every arm meets the same machine (this one's speed drifts 10-40%
  over the minutes a seed takes, which, arm after arm, moved whole arms); each
  arm keeps its own clock, parameters, hooks and controller. A turn ends by
  draining the arm's pipeline and the next starts by filling it: a turn's first
  two steps at 2048 took a median 20 ms against 7.7 ms for the rest, up to 10%
  of a 0.25 s turn, a cost that grows with the step; 1 s turns keep it under
  2.5%;
* a sweep arm that has trained ``--censor`` (1.5) times as long as the first
  fixed arm of its seed to reach the target is stopped and reported as ``>t``
  (it cannot be the best); ``fixed-M0`` and the adaptive arm run to the target
  or ``--max-time``. ``--no-interleave`` runs the arms one after another (sweep
  from the largest batch down), the protocol of the earlier runs.

The step-time model's fit is compiled once before the arms (a process-wide,
one-off cost, reported separately).

It also measures the machinery's own cost: the ``fixed-M0`` step through
hooks + controller vs the same jitted step in a plain loop (``overhead``), and
``hooks.cost()`` of the adaptive arm.

Usage::

    python benchmarks/adaptive_bench.py            # 3 seeds, full sweep
    python benchmarks/adaptive_bench.py --quick    # 1 seed, sweep 512-2048 (~2 min)
    python benchmarks/adaptive_bench.py --overhead-only --overhead-steps 600
    python benchmarks/adaptive_bench.py --demo-runs 3   # the demo's suggestion, 3 runs
    python benchmarks/adaptive_bench.py --opt adamw --nu-check 175   # Adam's nu at a switch

Timings on a shared machine are noisy: compare ratios within one run.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from goodput_jax.adaptive import AdaptiveBatchSize, adaptive_optimizer, make_train_step
from goodput_jax.integrations.hooks import GoodputHooks


class MLP(nn.Module):
    hidden: int = 128
    classes: int = 10

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(self.hidden)(x))
        x = nn.relu(nn.Dense(self.hidden)(x))
        return nn.Dense(self.classes)(x)


def make_data(seed: int, n_train: int = 300_000, n_test: int = 20_000, dim: int = 32,
              classes: int = 10,
              label_noise: float = 0.1):
    """Teacher-labelled Gaussian inputs with ``label_noise`` of the labels resampled.

    The teacher (the task) is the same for every seed; the seed draws the examples
    (and, in :func:`run_arm`, the initial parameters and the shuffling).
    """
    teacher = np.random.default_rng(1000)
    w1 = teacher.normal(size=(dim, 64)) / np.sqrt(dim)
    w2 = teacher.normal(size=(64, classes)) / 8.0
    rng = np.random.default_rng(2000 + seed)
    x = rng.normal(size=(n_train + n_test, dim)).astype(np.float32)
    y = np.argmax(np.tanh(x @ w1) @ w2, axis=1)
    flip = rng.random(len(y)) < label_noise
    y[flip] = rng.integers(0, classes, flip.sum())
    y = y.astype(np.int32)
    return (x[:n_train], y[:n_train]), (x[n_train:], y[n_train:])


class PatchConv(nn.Module):
    """A 3x3 'SAME' convolution as patches times a dense kernel (im2col): the same
    function as ``nn.Conv``, whose gradient runs 10-100x slower per example on XLA's CPU
    backend at large batches (884 ms a step at 2048 against 3.7 ms at 32 here), which
    would leave no throughput to gain from a larger batch, unlike on an accelerator."""
    features: int
    stride: int = 1

    @nn.compact
    def __call__(self, x):
        h, w = x.shape[1], x.shape[2]
        xp = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
        s = self.stride
        patches = jnp.concatenate([xp[:, i:i + h:s, j:j + w:s, :] for i in range(3)
                                   for j in range(3)], axis=-1)
        return nn.Dense(self.features)(patches)


class CNN(nn.Module):
    """A small convnet for the ``--task cnn`` images (8x8, one channel): two 3x3
    convolutions (8 and 16 channels, the second with stride 2), global average
    pooling, a 64-unit dense layer; about as many multiply-adds per example as the MLP."""
    classes: int = 10

    @nn.compact
    def __call__(self, x):
        x = nn.relu(PatchConv(8, stride=1)(x))
        x = nn.relu(PatchConv(16, stride=2)(x))
        x = jnp.mean(x, axis=(1, 2))  # global average pool: the templates move
        x = nn.relu(nn.Dense(64)(x))
        return nn.Dense(self.classes)(x)


def make_images(seed: int, n_train: int = 200_000, n_test: int = 20_000, size: int = 8,
                classes: int = 10, pixel_noise: float = 1.0, label_noise: float = 0.05):
    """``--task cnn``: 8x8 one-channel images of 10 smooth random class templates.

    Each example crops its class's 12x12 template at a random offset (a shift of up
    to 4 pixels each way), scales it by an amplitude in [0.5, 1.5] and adds Gaussian
    pixel noise (``pixel_noise``, about the templates' own pixel spread); 5% of the
    labels are resampled. The templates are the same for every seed; the seed draws
    the examples. A different model, input, noise and label-noise level from the MLP
    task that the controller's defaults were developed on.
    """
    teacher = np.random.default_rng(3000)
    big = size + 4
    t = teacher.normal(size=(classes, big + 2, big + 2))
    t = sum(t[:, i:i + big, j:j + big] for i in range(3) for j in range(3)) / 3.0  # blur
    t = (t - t.mean()) / t.std()
    rng = np.random.default_rng(4000 + seed)
    n = n_train + n_test
    y = rng.integers(0, classes, n)
    dx, dy = rng.integers(0, 5, n), rng.integers(0, 5, n)
    rows = dx[:, None] + np.arange(size)[None, :]
    cols = dy[:, None] + np.arange(size)[None, :]
    x = t[y[:, None, None], rows[:, :, None], cols[:, None, :]]
    x = x * rng.uniform(0.5, 1.5, (n, 1, 1)) + pixel_noise * rng.normal(size=x.shape)
    x = x[..., None].astype(np.float32)
    flip = rng.random(n) < label_noise
    y[flip] = rng.integers(0, classes, flip.sum())
    y = y.astype(np.int32)
    return (x[:n_train], y[:n_train]), (x[n_train:], y[n_train:])


def task_data(args, seed: int, n_train: int | None = None, n_test: int | None = None):
    """The ``--task``'s dataset for ``seed`` (default sizes: the task's own)."""
    kw = {k: v for k, v in (("n_train", n_train), ("n_test", n_test)) if v is not None}
    return make_images(seed, **kw) if args.task == "cnn" else make_data(seed, **kw)


def make_tx(args) -> optax.GradientTransformation:
    """SGD + momentum tuned at M0, AdaScale, and a learning-rate decay in scale-invariant
    iterations (halving every ``--half-life`` units of progress, floored at 2%): every arm
    follows the same schedule in progress, so a larger batch advances it by its AdaScale
    gain per step, and the arms differ only in how fast they make progress (Pollux's
    goodput), not in the noise floor a constant learning rate would leave them at."""
    half, floor = float(args.half_life), 0.02

    def schedule(progress):
        return jnp.maximum(0.5 ** (progress / half), floor)

    return adaptive_optimizer(base_optimizer(args), args.m0, rule=scaling_rule(args),
                              schedule=schedule if half > 0 else None)


def base_optimizer(args) -> optax.GradientTransformation:
    """The optimizer tuned at M0: SGD + momentum (default) or AdamW (``--opt adamw``)."""
    if args.opt == "adamw":
        return optax.adamw(args.lr, weight_decay=1e-4)
    return optax.sgd(args.lr, momentum=0.9)


def step_kwargs(args) -> dict:
    """``make_train_step`` options: ``--preconditioner none`` takes the gradient statistics
    of the raw gradient instead of the Adam-preconditioned one (the default, ``auto``)."""
    return {"preconditioner": None} if args.preconditioner == "none" else {}


def scaling_rule(args) -> str:
    """AdaScale for SGD; the docs' square-root rule for Adam-type optimizers."""
    return "adam" if args.opt == "adamw" else "adascale"


class Timer:
    def __init__(self):
        self.total = 0.0
        self._t0 = None

    def start(self):
        self._t0 = time.perf_counter()

    def stop(self):
        self.total += time.perf_counter() - self._t0
        self._t0 = None


class Arm:
    """One arm's training, resumable in time slices (:meth:`advance`), so that the arms of
    a seed can take turns on the machine (``--interleave``) and share its drift."""

    def __init__(self, arm: str, batch: int | None, seed: int, data, args, model, loss_fn,
                 acc_fn, step_cache: dict):
        (xtr, ytr), self.test = data
        m0, r = args.m0, jax.device_count()
        if "step" not in step_cache:  # one jitted step per process: compiles are per shape
            tx = make_tx(args)
            step_cache["step"] = make_train_step(loss_fn, tx, **step_kwargs(args))
            step_cache["tx"] = tx
        self.step_fn, tx = step_cache["step"], step_cache["tx"]
        self.params = model.init(jax.random.key(seed), jnp.ones((1,) + xtr.shape[1:]))
        self.opt_state = tx.init(self.params)
        start_b = (batch or m0) // r
        self.hooks = GoodputHooks(
            f"bench-{arm}", init_batch_size=m0, atomic_bsz=start_b, num_nodes=1,
            num_replicas=r, max_batch_size=args.max_batch,
            local_bsz_bounds=(8, args.max_batch // r), gradient_accumulation=False,
            is_primary=True, refit_interval=args.refit_interval, warmup_steps=2,
            profile_quantile=args.profile_quantile)
        self.ctl = AdaptiveBatchSize(self.hooks, {"x": xtr, "y": ytr},
                                     batch_sharding=self.step_fn.batch_sharding,
                                     adaptive=(arm == "adaptive"),
                                     adapt_every=args.adapt_every, min_samples=3, patience=2,
                                     rescale_nu=args.rescale_nu)
        self.ctl.source.seed = seed
        self.ctl.source.load_state_dict({"epoch": 0, "index": 0, "seed": seed})
        self.arm, self.seed, self.args, self.acc_fn = arm, seed, args, acc_fn
        self.timer = Timer()
        self.step = self.samples = 0
        self.acc, self.reached, self.stopped = 0.0, None, None
        self.next_eval = args.eval_every
        self.evals: list[float] = []
        self.time_at: dict[int, float] = {}
        self.eval_t: list[float] = []
        self.done = False
        self.limit = args.max_time

    def advance(self, budget: float = math.inf, limit: float | None = None) -> None:
        """Train for ``budget`` more seconds of training time, or until the target (or
        ``limit`` seconds of training in all, then the arm is done). The slice ends once its
        last step has finished: each arm's device time stays inside its own slices."""
        args, timer, ctl, hooks = self.args, self.timer, self.ctl, self.hooks
        if limit is not None:
            self.limit = min(self.limit, limit)
        end = timer.total + budget
        loss = None
        timer.start()
        while True:
            now = timer.total + (time.perf_counter() - timer._t0)
            if now >= self.limit or now >= end:
                if loss is not None:
                    jax.block_until_ready(loss)
                timer.stop()
                self.done = self.done or now >= self.limit
                return
            b = ctl.batch_size
            t_step = time.perf_counter()
            self.params, self.opt_state, loss = ctl.step(self.step, self.step_fn, self.params,
                                                         self.opt_state)
            # training time per batch size (dispatch to dispatch: the step waits one late)
            self.time_at[b] = self.time_at.get(b, 0.0) + time.perf_counter() - t_step
            self.samples += b
            self.step += 1
            if timer.total + (time.perf_counter() - timer._t0) >= self.next_eval:
                jax.block_until_ready(loss)  # the step in flight is training, not eval, time
                timer.stop()
                hooks.flush()
                self.evals.append(float(self.acc_fn(self.params, *self.test)))
                self.eval_t.append(timer.total)
                self.acc = float(np.mean(self.evals[-args.smooth:]))
                self.next_eval = timer.total + args.eval_every
                if len(self.evals) >= args.smooth and self.acc >= args.target:
                    self.stopped = timer.total
                    self.reached = crossing_time(self.eval_t, self.evals, args.target,
                                                 args.smooth)
                    self.done = True
                    return
                timer.start()

    def result(self) -> dict:
        """Close the arm's hooks; its record."""
        hooks, ctl = self.hooks, self.ctl
        hooks.wait_refit()
        hooks.close()
        cost = hooks.cost()
        return {"arm": self.arm, "seed": self.seed, "time": self.reached, "stop": self.stopped,
                "wall": self.timer.total, "steps": self.step,
                "censored": self.reached is None and self.limit < self.args.max_time,
                "samples": self.samples, "acc": self.acc, "final_batch": ctl.batch_size,
                "switches": [(s["step"], s["batch_size"]) for s in ctl.switches],
                "nu_scales": [s["nu_scale"] for s in ctl.switches],
                "cost_fg": cost["foreground"] + ctl.adapt_seconds,
                "cost_bg": cost["background"], "cost_rec": cost["recorder"],
                "model_error": hooks.model_error, "noise_scale": noise_scale(hooks),
                "evals": list(self.evals), "eval_t": list(self.eval_t),
                "time_at": dict(self.time_at)}


def noise_scale(hooks: GoodputHooks) -> float | None:
    """The gradient noise scale the goodput model uses, ``M0 * var / sqr`` (Pollux's phi,
    in samples): the efficiency of a total batch ``B`` is ``(phi + M0) / (phi + B)``."""
    gp = hooks.grad_params
    return None if gp is None or gp.sqr <= 0 else float(hooks.init_batch_size * gp.var / gp.sqr)


def efficiency_check(rows: list[dict], seed: int) -> str | None:
    """The efficiency model against the fixed arms of one seed.

    The two fastest fixed arms that reached the target, ``b_lo < b_hi``, needed
    ``S_lo`` and ``S_hi`` samples (at their crossing times): their measured
    efficiency ratio is ``S_lo / S_hi``. Pollux's model predicts
    ``(phi + b_lo) / (phi + b_hi)`` from the noise scale ``phi``; the ``phi`` that
    reproduces the measured ratio is compared with the adaptive arm's measured one.
    """
    fixed = sorted((r for r in rows if r["seed"] == seed and r["time"] is not None
                    and r["arm"].startswith("fixed-")), key=lambda r: r["time"])
    ad = [r for r in rows if r["seed"] == seed and r["arm"] == "adaptive"]
    if len(fixed) < 2 or not ad or ad[0]["noise_scale"] is None:
        return None
    a, b = sorted(fixed[:2], key=lambda r: r["final_batch"])
    s_lo, s_hi = (r["samples"] * r["time"] / r["stop"] for r in (a, b))
    lo, hi = a["final_batch"], b["final_batch"]
    ratio = s_lo / s_hi
    implied = (ratio * hi - lo) / (1 - ratio) if ratio < 1 else math.inf
    phi = ad[0]["noise_scale"]
    return (f"efficiency check, seed {seed}: fixed-{hi} / fixed-{lo} samples to target "
            f"{s_hi / 1e6:.2f}M / {s_lo / 1e6:.2f}M: measured efficiency ratio {ratio:.3f} "
            f"(noise scale that reproduces it: {implied:.0f}); the adaptive arm's noise scale at "
            f"its target {phi:.0f} predicts {(phi + lo) / (phi + hi):.3f} (measured at the target "
            f"by fixed-{hi}: {_fmt(b['noise_scale'])}, fixed-{lo}: {_fmt(a['noise_scale'])})")


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0f}"


def run_arm(arm: str, batch: int | None, seed: int, data, args, model, loss_fn, acc_fn,
            step_cache: dict, stop_after: float | None = None) -> dict:
    """Train one arm until the smoothed held-out accuracy reaches the target, ``max_time``
    or (sweep arms) ``stop_after`` seconds of training; returns its record."""
    a = Arm(arm, batch, seed, data, args, model, loss_fn, acc_fn, step_cache)
    a.advance(limit=stop_after)
    return a.result()


def run_seed_interleaved(arms: list[tuple[str, int | None]], seed: int, data, args, model,
                         loss_fn, acc_fn, step_cache: dict) -> list[dict]:
    """All arms of a seed at once, taking turns of ``--slice`` seconds of training each.

    Run one after another, the arms of a seed meet the machine at different times,
    and this machine's speed drifts by 10-40% over minutes; taking turns, every arm
    sees the same drift. Censoring as in the sequential protocol: a sweep arm
    stops at ``--censor`` times the training time of the first arm to reach the target.
    """
    runs = [Arm(a, b, seed, data, args, model, loss_fn, acc_fn, step_cache) for a, b in arms]
    while not all(r.done for r in runs):
        done = [r.stopped for r in runs if r.stopped is not None and r.arm.startswith("fixed-")]
        for r in runs:
            if r.done:
                continue
            sweep = r.arm.startswith("fixed-") and r.arm != "fixed-M0"
            r.advance(args.slice, args.censor * min(done) if sweep and done else None)
    return [r.result() for r in runs]


def crossing_time(times: list[float], accs: list[float], target: float, smooth: int) -> float:
    """When the accuracy trend crossed ``target``: the centred moving average of ``smooth``
    evaluations (each placed at the mean of its evaluations' times), interpolated
    linearly between its last point below the target and its first at or above it.

    The stopping rule (the mean of the last ``smooth`` evaluations reaches the target) is
    unchanged; this is the time reported. It has no quantisation to the evaluation
    interval and no lag of (``smooth`` - 1) / 2 intervals, which every arm shares and
    which would pull ratios between arms towards 1.

    Example:
        >>> round(crossing_time([1.0, 2.0, 3.0, 4.0], [0.5, 0.6, 0.7, 0.8], 0.6, 2), 9)
        2.0
        >>> crossing_time([1.0, 2.0], [0.7, 0.9], 0.65, 2)   # first average already above
        1.5
    """
    n = len(accs)
    avg = [float(np.mean(accs[k - smooth + 1:k + 1])) for k in range(smooth - 1, n)]
    at = [float(np.mean(times[k - smooth + 1:k + 1])) for k in range(smooth - 1, n)]
    j = next(i for i, a in enumerate(avg) if a >= target)
    if j == 0 or avg[j] == avg[j - 1]:
        return at[j]
    w = (target - avg[j - 1]) / (avg[j] - avg[j - 1])
    return at[j - 1] + w * (at[j] - at[j - 1])


def bare_step(loss_fn, base_tx, mesh):
    """The plain data-parallel step a user without goodput_jax writes: mean gradients over the
    mesh, the base optimizer, no gradient statistics, no accumulation loop, fixed learning rate."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    def local(params, batch):
        loss, g = jax.value_and_grad(loss_fn)(params, batch)
        return jax.lax.pmean((loss, g), "data")

    sharded = jax.shard_map(local, mesh=mesh, in_specs=(P(), P("data")), out_specs=(P(), P()))

    def step(params, opt_state, batch):
        loss, g = sharded(params, batch)
        upd, opt_state = base_tx.update(g, opt_state, params)
        return optax.apply_updates(params, upd), opt_state, loss

    rep = NamedSharding(mesh, P())
    return jax.jit(step, donate_argnums=(0, 1), in_shardings=(rep, rep, NamedSharding(
        mesh, P("data"))), out_shardings=(rep, rep, rep)), NamedSharding(mesh, P("data")), rep


def plain_steps(step_fn, src, p, st, n: int):
    """``n`` steps of the adaptive step in a plain loop (one step late, as every loop here):
    batches from ``src.next_batch()``; returns the last ``(params, opt_state, loss)``."""
    prev = loss = None
    for _i in range(n):
        batch, k = src.next_batch()
        p, st, loss = step_fn(p, st, batch, np.int32(k))
        if prev is not None:
            prev.block_until_ready()
        prev = loss
    return p, st, loss


def overhead(args, data, model, loss_fn, step_cache, rounds: int) -> dict:
    """Three loops at M0 on the same data path, interleaved per round, medians over rounds:

    * ``bare``: a plain jitted data-parallel step (no gradient statistics, fixed LR);
    * ``plain``: the adaptive step (in-step statistics, traced accumulation count, LR rule)
      in a plain loop: ``plain / bare`` is the in-step cost of the statistics;
    * ``hooked``: the same step through hooks + controller (checks and refits run; the
      exploration cap keeps the shape fixed): ``hooked / plain`` is the host-side cost.

    Every loop waits one step late (an unbounded queue of multi-device programs deadlocks
    XLA's CPU all-reduce). Also returns the hooks' own training-thread time split into
    per-step work, controller checks and inline refits.
    """
    (xtr, ytr), _ = data
    m0, r = args.m0, jax.device_count()
    step_fn, tx = step_cache["step"], step_cache["tx"]
    params = model.init(jax.random.key(0), jnp.ones((1,) + xtr.shape[1:]))
    base = base_optimizer(args)
    bare_fn, bare_sh, rep = bare_step(loss_fn, base, step_fn.mesh)
    n = args.overhead_steps
    bare, plain, hooked, parts = [], [], [], []
    src = AdaptiveBatchSize(GoodputHooks("plain", init_batch_size=m0, num_nodes=1,
                                         num_replicas=r, is_primary=False),
                            {"x": xtr, "y": ytr}, batch_sharding=step_fn.batch_sharding)

    def run_bare() -> None:
        p = jax.device_put(jax.tree.map(jnp.array, params), rep)
        st = jax.device_put(base.init(p), rep)
        t0 = time.perf_counter()
        prev = None
        for _i in range(n):
            ex = src.source.take(m0)
            p, st, loss = bare_fn(p, st, jax.device_put(ex, bare_sh))
            if prev is not None:
                prev.block_until_ready()
            prev = loss
        jax.block_until_ready(loss)
        bare.append(time.perf_counter() - t0)

    def run_plain() -> None:
        p = jax.tree.map(jnp.array, params)  # fresh buffers: the step donates them
        st = tx.init(p)
        t0 = time.perf_counter()
        p, st, loss = plain_steps(step_fn, src, p, st, n)
        jax.block_until_ready(loss)
        plain.append(time.perf_counter() - t0)

    def run_hooked() -> None:
        hooks = GoodputHooks("ovh", init_batch_size=m0, num_nodes=1, num_replicas=r,
                             max_batch_size=args.max_batch, is_primary=True,
                             refit_interval=args.refit_interval)
        ctl = AdaptiveBatchSize(hooks, {"x": xtr, "y": ytr},
                                batch_sharding=step_fn.batch_sharding, adaptive=True,
                                adapt_every=args.overhead_adapt_every)
        ctl.explore_factor = 1.0 + 1e-9  # checks and refits run; no new shape is compiled
        p = jax.tree.map(jnp.array, params)
        st = tx.init(p)
        t0 = time.perf_counter()
        for i in range(n):
            p, st, loss = ctl.step(i, step_fn, p, st)
        hooks.flush()
        jax.block_until_ready(loss)
        hooked.append(time.perf_counter() - t0)
        # adapt_seconds includes the refits a check asks for (run inline on multi-device
        # CPU); foreground_seconds the periodic ones that hooks.step starts
        refits = hooks.inline_refit_seconds
        checks = ctl.adapt_seconds - ctl.adapt_refit_seconds
        per_step = hooks.foreground_seconds - (refits - ctl.adapt_refit_seconds)
        parts.append({"per_step": per_step / hooked[-1], "checks": checks / hooked[-1],
                      "refits": refits / hooked[-1], "fits": hooks.fit_count,
                      "skipped": hooks.refits_skipped,
                      "fg": (hooks.foreground_seconds + ctl.adapt_seconds) / hooked[-1]})
        hooks.close()

    # A fixed order (bare, plain, hooked) per round: the order that has run without
    # incident; a rotated order once ended in an XLA CPU all-reduce rendezvous timeout
    # (4 fake devices on 2 cores), not diagnosed yet.
    for _ in range(rounds):
        run_bare()
        run_plain()
        run_hooked()
    med = {k: float(np.median([x[k] for x in parts])) for k in parts[0]}
    return {"bare": float(np.median(bare)), "plain": float(np.median(plain)),
            "hooked": float(np.median(hooked)),
            "stats_ratio": float(np.median([a / b for a, b in zip(plain, bare)])),
            "ratio": float(np.median([h / p for h, p in zip(hooked, plain)])),
            "total_ratio": float(np.median([h / b for h, b in zip(hooked, bare)])),
            "steps": n, **med}


def overhead_paired(args, data, model, loss_fn, step_cache, rounds: int, block: int) -> dict:
    """Wall-clock cost of hooks + controller against a plain loop, in paired blocks.

    One process runs both loops on the same compiled adaptive step, in
    alternating blocks of ``block`` steps (the order flips every round), each
    block timed from its first dispatch to its last step's end. The hooks and
    the controller live across all their blocks: their checks, periodic
    refits, profiling, recording and statistics reads all fall inside the
    hooked blocks. A block pair shares the machine's state (load, clocks,
    caches), so the ratio of a pair cancels what drifts between rounds and
    processes; the result is the median over pairs, and the ratio of the summed
    times.
    """
    (xtr, ytr), _ = data
    m0, r = args.m0, jax.device_count()
    step_fn, tx = step_cache["step"], step_cache["tx"]
    params = model.init(jax.random.key(0), jnp.ones((1,) + xtr.shape[1:]))
    src = AdaptiveBatchSize(GoodputHooks("plain", init_batch_size=m0, num_nodes=1,
                                         num_replicas=r, is_primary=False),
                            {"x": xtr, "y": ytr}, batch_sharding=step_fn.batch_sharding)
    hooks = GoodputHooks("ovh-paired", init_batch_size=m0, num_nodes=1, num_replicas=r,
                         max_batch_size=args.max_batch, is_primary=True,
                         refit_interval=args.refit_interval)
    ctl = AdaptiveBatchSize(hooks, {"x": xtr, "y": ytr}, batch_sharding=step_fn.batch_sharding,
                            adaptive=True, adapt_every=args.overhead_adapt_every)
    ctl.explore_factor = 1.0 + 1e-9  # checks and refits run; no new shape is compiled
    state = {"plain": [jax.tree.map(jnp.array, params), None],
             "hooked": [jax.tree.map(jnp.array, params), None]}
    for v in state.values():
        v[1] = tx.init(v[0])
    times: dict = {"plain": [], "hooked": []}
    cpu: dict = {"plain": [], "hooked": []}  # training-thread CPU seconds per block
    step_no = [0]

    def run(arm: str) -> tuple[float, float]:
        p, st = state[arm]
        c0 = time.thread_time()
        t0 = time.perf_counter()
        if arm == "plain":
            p, st, loss = plain_steps(step_fn, src, p, st, block)
        else:
            for _i in range(block):
                p, st, loss = ctl.step(step_no[0], step_fn, p, st)
                step_no[0] += 1
        jax.block_until_ready(loss)
        dt = time.perf_counter() - t0
        state[arm] = [p, st]
        return dt, time.thread_time() - c0

    fg0 = rec0 = 0.0
    for i in range(rounds + 2):  # the first two rounds warm both loops up: not counted
        order = ("plain", "hooked") if i % 2 == 0 else ("hooked", "plain")
        if i == 2:
            fg0 = hooks.foreground_seconds + ctl.adapt_seconds
            rec0 = hooks.cost()["recorder"]
        for arm in order:
            dt, c = run(arm)
            if i >= 2:
                times[arm].append(dt)
                cpu[arm].append(c)
    hooks.flush()
    hooks.recorder.flush()
    pl, hk = np.array(times["plain"]), np.array(times["hooked"])
    cpl, chk = np.array(cpu["plain"]), np.array(cpu["hooked"])
    ratios = hk / pl
    fg = hooks.foreground_seconds + ctl.adapt_seconds - fg0
    rec = hooks.cost()["recorder"] - rec0
    # 90% bootstrap intervals over the pairs (resampled together: a pair shares its state)
    rng = np.random.default_rng(0)
    idx = rng.integers(0, ratios.size, (2000, ratios.size))
    boot_sum = hk[idx].sum(1) / pl[idx].sum(1)
    boot_med = np.median(ratios[idx], axis=1)
    boot_cpu = (chk[idx].sum(1) - cpl[idx].sum(1) + rec) / hk[idx].sum(1)
    out = {"rounds": rounds, "block": block, "median_ratio": float(np.median(ratios)),
           "q25": float(np.quantile(ratios, 0.25)), "q75": float(np.quantile(ratios, 0.75)),
           "median_ci": tuple(float(x) for x in np.quantile(boot_med, [0.05, 0.95])),
           "sum_ratio": float(hk.sum() / pl.sum()),
           "sum_ci": tuple(float(x) for x in np.quantile(boot_sum, [0.05, 0.95])),
           "plain_ms": float(pl.sum() / pl.size / block * 1e3),
           "plain_cpu_us": float(cpl.sum() / cpl.size / block * 1e6),
           "hooked_cpu_us": float(chk.sum() / chk.size / block * 1e6),
           "rec_cpu_us": float(rec / chk.size / block * 1e6),
           "cpu_share": float((chk.sum() - cpl.sum() + rec) / hk.sum()),
           "cpu_ci": tuple(float(x) for x in np.quantile(boot_cpu, [0.05, 0.95])),
           "fg": fg / hk.sum(), "fits": hooks.fit_count,
           "checks": ctl.steps // ctl.adapt_every}
    hooks.close()
    return out


def print_overhead_paired(ov: dict) -> None:
    print(f"wall-clock cost, paired blocks ({ov['rounds']} rounds x {ov['block']} steps per loop, "
          f"one process, order alternating; plain loop {ov['plain_ms']:.3f} ms/step):")
    print(f"  hooks + controller / plain loop: median of pairs x{ov['median_ratio']:.4f} "
          f"(quartiles x{ov['q25']:.4f} - x{ov['q75']:.4f}; 90% CI of the median "
          f"x{ov['median_ci'][0]:.4f} - x{ov['median_ci'][1]:.4f}), summed times "
          f"x{ov['sum_ratio']:.4f} (90% CI x{ov['sum_ci'][0]:.4f} - x{ov['sum_ci'][1]:.4f})")
    print(f"  CPU the machinery adds: training thread {ov['plain_cpu_us']:.1f} -> "
          f"{ov['hooked_cpu_us']:.1f} us/step, recorder writer thread {ov['rec_cpu_us']:.1f} "
          f"us/step: {ov['cpu_share']:.2%} of the hooked blocks' wall time (90% CI "
          f"{ov['cpu_ci'][0]:.2%} - {ov['cpu_ci'][1]:.2%}); own training-thread wall time "
          f"{ov['fg']:.2%} ({ov['fits']} fit(s))")


def print_overhead(ov: dict, args) -> None:
    print(f"overhead at M0 = {args.m0}, {ov['steps']} steps, median of interleaved rounds "
          f"(refit every {args.refit_interval} s of profiled time, checks every "
          f"{args.overhead_adapt_every} steps):")
    print(f"  bare loop (no statistics)         {ov['bare']:.3f} s  "
          f"{ov['bare'] / ov['steps'] * 1e3:.3f} ms/step")
    print(f"  adaptive step, plain loop         {ov['plain']:.3f} s  (x{ov['stats_ratio']:.3f} "
          f"vs bare: in-step statistics, accumulation loop, LR rule)")
    print(f"  adaptive step, hooks + controller {ov['hooked']:.3f} s  (x{ov['ratio']:.3f} vs plain;"
          f" x{ov['total_ratio']:.3f} vs bare)")
    print(f"  hooks + controller own time on the training thread: {ov['fg']:.2%} of the hooked "
          f"loop = per-step work {ov['per_step']:.2%} + checks {ov['checks']:.2%} + inline "
          f"refits {ov['refits']:.2%} ({ov['fits']:.0f} fit(s), {ov['skipped']:.0f} periodic "
          f"refit(s) skipped: profile unchanged)")


def demo_check(runs: int, quick: bool) -> int:
    """Run ``goodput-jax demo`` ``runs`` times: the fit's error on the profiled configurations
    (the hooks' quantile of the kept samples) and the suggestion of each run."""
    import tempfile

    from goodput_jax import demo

    captured = []
    orig = demo.format_model_summary

    def spy(hooks):
        captured.append(hooks)
        return orig(hooks)

    demo.format_model_summary = spy
    import contextlib
    import io

    for i in range(runs):
        with tempfile.TemporaryDirectory() as d, contextlib.redirect_stdout(io.StringIO()):
            demo.main(directory=d, steps=None, job=f"demo-check-{i}", devices=4, quick=quick,
                      progress=False)
    demo.format_model_summary = orig
    from goodput_jax.adaptive import default_atomic_sizes

    print(f"# demo check: {runs} runs of goodput-jax demo{' --quick' if quick else ''}")
    sugs, buckets = [], []
    for i, h in enumerate(captured):
        table = h.profile_table()
        sug = h.suggest()
        on = h.suggest(atomic_sizes=default_atomic_sizes(h)) if sug else None
        sugs.append(sug.batch_size if sug else None)
        buckets.append(on.batch_size if on else None)
        print(f"run {i}: model error (median over {len(h.model_errors)} profiled configs) "
              f"{h.model_error:.3f}; suggestion {sug.batch_size if sug else None} "
              f"(atomic {sug.atomic_bsz if sug else None}, accum {sug.accum_steps if sug else None}"
              f", confident {sug.confident if sug else None}; goodput argmax "
              f"{sug.best_batch_size if sug else None}); on the controller's buckets "
              f"{on.batch_size if on else None}")
        gp, pp = h.grad_params, h.perf_params
        if gp is not None and pp is not None:
            print(f"    gradient noise scale var/sqr {gp.var / max(gp.sqr, 1e-30):.0f} (sqr {gp.sqr:.3g}, "
                  f"var {gp.var:.3g}, {h.grad_count} samples); fit alpha_c {pp.alpha_c * 1e3:.3f} ms, "
                  f"beta_c {pp.beta_c * 1e6:.3f} us/example, alpha_r {pp.alpha_r * 1e3:.3f} ms, "
                  f"beta_r {pp.beta_r * 1e6:.3f} us")
        for k, (acc, opt, n) in table.items():
            print(f"    r={k[1]} b={k[2]:<4d} q{h.profile_quantile:.2f} {opt * 1e3:8.3f} ms ({n} steps)  "
                  f"error {h.model_errors.get(k, float('nan')):.3f}")
    for name, xs in (("suggestions", sugs), ("on the controller's buckets", buckets)):
        ok = [x for x in xs if x]
        if ok:
            print(f"{name} {xs}: spread (max/min - 1) {max(ok) / min(ok) - 1:.1%}"
                  f"{triples_within(ok, 0.10)} (target <= 10%)")
    return 0


def triples_within(xs: list, tol: float) -> str:
    """``', triples within 10%: k of n'`` over every 3 of ``xs`` (empty below 4 values).

    >>> triples_within([100, 105, 108, 130], 0.10)
    ', triples within 10%: 1 of 4'
    """
    import itertools

    if len(xs) < 4:
        return ""
    trips = list(itertools.combinations(xs, 3))
    k = sum(1 for t in trips if max(t) <= (1 + tol) * min(t))
    return f", triples within {tol:.0%}: {k} of {len(trips)}"


def nu_check(args, model, loss_fn, acc_fn, seeds: list[int]) -> None:
    """Steps at ``--nu-check-to`` (2048) to the target after ``--nu-check`` steps at M0,
    against a fresh start, with Adam's ``nu`` left as it is, rescaled by
    :func:`~goodput_jax.model.gradstats.nu_switch_factor` of the noise scale in the optimizer
    state at the switch (what :class:`AdaptiveBatchSize` does), and divided by
    ``M_new / M0`` (noise only). Counted in steps, evaluated every ``--nu-check-eval`` steps
    (target: the mean of the last ``--smooth`` evaluations), so the machine's load does not
    enter. No hooks, no controller: the bare adaptive step, batches drawn in order from a
    seeded permutation of the training set."""
    from goodput_jax.model import gradstats as gs

    big, pre = args.nu_check_to, args.nu_check
    step_fn = make_train_step(loss_fn, make_tx(args), **step_kwargs(args))
    tx = make_tx(args)
    every = args.nu_check_eval
    print(f"# nu check: {pre} steps at {args.m0}, then {big} until the smoothed score reaches "
          f"{abs(args.target)} (evaluations every {every} steps, mean of {args.smooth}); "
          f"up to {args.nu_check_max} steps at {big}")
    rows = []
    for seed in seeds:
        (xtr, ytr), test = task_data(args, seed)
        p0 = model.init(jax.random.key(seed), jnp.ones((1,) + xtr.shape[1:]))

        def batches(n_ex, start):
            order = np.random.default_rng(seed).permutation(len(xtr))
            i = start
            while True:
                idx = order[np.arange(i, i + n_ex) % len(order)]
                i += n_ex
                yield i, jax.device_put({"x": xtr[idx][None], "y": ytr[idx][None]},
                                        step_fn.batch_sharding)

        def run_big(params, st, start) -> int | None:
            evals = []
            gen = batches(big, start)
            for k in range(1, args.nu_check_max + 1):
                _, b = next(gen)
                params, st, _ = step_fn(params, st, b, np.int32(1))
                if k % every == 0:
                    evals.append(float(acc_fn(params, *test)))
                    if len(evals) >= args.smooth and np.mean(evals[-args.smooth:]) >= args.target:
                        return k
            return None

        res = {"seed": seed}
        res["fresh"] = run_big(jax.tree.map(jnp.copy, p0), tx.init(p0), 0)
        params, st = jax.tree.map(jnp.copy, p0), tx.init(p0)
        gen = batches(args.m0, 0)
        for _ in range(pre):
            pos, b = next(gen)
            params, st, _ = step_fn(params, st, b, np.int32(1))
        gp = gs.get_grad_params(st)
        sqr, var = float(gp.sqr), float(gp.var)
        phi = args.m0 * var / sqr if sqr > 0 else math.inf
        factor = gs.nu_switch_factor(phi, args.m0, big)
        res["phi"], res["factor"] = phi, factor
        for name, f in (("kept", None), ("rescaled", factor), ("noise-only", args.m0 / big)):
            p, o = jax.tree.map(jnp.copy, params), jax.tree.map(jnp.copy, st)
            if f is not None:
                o = gs.rescale_nu(o, f)
            res[name] = run_big(p, o, pos) if (f is not None or name == "kept") else None
        rows.append(res)
        print(f"seed {seed}: steps at {big} to target: fresh {res['fresh']}, after {pre} at "
              f"{args.m0}: nu kept {res['kept']}, rescaled by {_fmt3(factor)} (noise scale "
              f"{_fmt(phi)}) {res['rescaled']}, divided by {big // args.m0} {res['noise-only']}",
              flush=True)
    def med(k):
        xs = [r[k] if r[k] is not None else math.inf for r in rows]
        return float(np.median(xs))
    print(f"median steps at {big}: fresh {med('fresh'):.0f}, nu kept {med('kept'):.0f}, "
          f"rescaled {med('rescaled'):.0f}, divided by {big // args.m0} {med('noise-only'):.0f}")


def _fmt3(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 seed, short sweep, shorter budget")
    ap.add_argument("--seeds", type=int, default=None)
    ap.add_argument("--first-seed", type=int, default=0,
                    help="seeds run: first-seed .. first-seed + seeds - 1")
    ap.add_argument("--target", type=float, default=0.75,
                    help="held-out accuracy to reach (mean of the last --smooth evaluations)")
    ap.add_argument("--task", choices=("mlp", "cnn"), default="mlp",
                    help="mlp: the teacher-labelled MLP task the controller was developed on; "
                         "cnn: a small convnet on noisy shifted image templates (not tuned on)")
    ap.add_argument("--preconditioner", choices=("auto", "none"), default="auto",
                    help="gradient statistics of the Adam-preconditioned gradient (auto, "
                         "make_train_step's default) or of the raw gradient (none)")
    ap.add_argument("--target-loss", type=float, default=None,
                    help="instead of --target: the held-out loss to reach (mean of the last "
                         "--smooth evaluations)")
    ap.add_argument("--trace", action="store_true",
                    help="print every arm's evaluations (training time: score)")
    ap.add_argument("--smooth", type=int, default=3, help="evaluations averaged for the target")
    ap.add_argument("--censor", type=float, default=1.5,
                    help="stop a sweep arm after this many times the seed's best time so far")
    ap.add_argument("--m0", type=int, default=32, help="initial (user's) total batch size")
    ap.add_argument("--max-batch", type=int, default=2048)
    ap.add_argument("--opt", choices=("sgd", "adamw"), default="sgd",
                    help="the optimizer tuned at M0 (adamw: the 'adam' scaling rule)")
    ap.add_argument("--lr", type=float, default=None,
                    help="learning rate at M0 (default 0.05 for sgd, 1e-3 for adamw)")
    ap.add_argument("--half-life", type=float, default=50000.0,
                    help="learning-rate half-life in scale-invariant iterations (0: constant)")
    ap.add_argument("--max-time", type=float, default=None, help="seconds per arm")
    ap.add_argument("--eval-every", type=float, default=0.5, help="training seconds between evals")
    ap.add_argument("--interleave", action=argparse.BooleanOptionalAction, default=True,
                    help="arms of a seed take turns in --slice slices (default); "
                         "--no-interleave runs them one after another")
    ap.add_argument("--slice", type=float, default=1.0,
                    help="training seconds per turn with --interleave")
    ap.add_argument("--refit-interval", type=float, default=5.0,
                    help="profiled seconds between periodic refits (a new configuration "
                         "also triggers one once it has enough samples)")
    ap.add_argument("--adapt-every", type=int, default=5)
    ap.add_argument("--profile-quantile", type=float, default=0.5,
                    help="GoodputHooks(profile_quantile=...): the per-configuration step-time "
                         "statistic (0.5, the default: the median)")
    ap.add_argument("--sizes", type=str, default=None, help="comma-separated fixed sweep")
    ap.add_argument("--overhead-steps", type=int, default=300)
    ap.add_argument("--overhead-adapt-every", type=int, default=10,
                    help="controller checks every this many steps in the overhead loop "
                         "(AdaptiveBatchSize's default)")
    ap.add_argument("--demo-runs", type=int, default=0,
                    help="instead: run the demo N times and report the fit error and suggestions")
    ap.add_argument("--paired-rounds", type=int, default=200,
                    help="block pairs of the paired wall-clock overhead measurement")
    ap.add_argument("--paired-block", type=int, default=50,
                    help="steps per block of the paired measurement")
    ap.add_argument("--overhead", action=argparse.BooleanOptionalAction, default=True,
                    help="after the arms, the plain-loop vs hooks+controller comparison")
    ap.add_argument("--overhead-only", action="store_true",
                    help="only the plain-loop vs hooks+controller comparison")
    ap.add_argument("--rescale-nu", action=argparse.BooleanOptionalAction, default=True,
                    help="AdaptiveBatchSize(rescale_nu=...): scale Adam's nu at each switch "
                         "(default on; --no-rescale-nu: the controller before issue 33's fix)")
    ap.add_argument("--nu-check", type=int, default=0,
                    help="instead of the arms: steps at --nu-check-to to the target after this "
                         "many steps at M0, fresh / nu kept / nu rescaled (Adam)")
    ap.add_argument("--nu-check-to", type=int, default=2048)
    ap.add_argument("--nu-check-eval", type=int, default=10,
                    help="steps between evaluations in --nu-check")
    ap.add_argument("--nu-check-max", type=int, default=3000,
                    help="most steps at --nu-check-to in --nu-check")
    args = ap.parse_args(argv)
    if args.target_loss is not None:
        args.target = -args.target_loss  # the score is minus the held-out loss
    if args.lr is None:
        args.lr = 1e-3 if args.opt == "adamw" else 0.05
    if "GOODPUT_JAX_STORE" not in os.environ:  # the hooks' recorders: not ./goodput.db
        import tempfile

        os.environ["GOODPUT_JAX_STORE"] = "sqlite:///" + os.path.join(
            tempfile.mkdtemp(prefix="adaptive-bench-"), "goodput.db")
    if args.demo_runs:
        return demo_check(args.demo_runs, args.quick)
    seeds = args.seeds or (1 if args.quick else 3)
    if args.max_time is None:
        args.max_time = 30.0
    sizes = ([int(s) for s in args.sizes.split(",")] if args.sizes else
             ([512, 1024, 2048] if args.quick else [256, 512, 1024, 2048]))
    sizes = sorted(sizes, reverse=True)  # largest first: the censoring bound tightens early

    model = CNN() if args.task == "cnn" else MLP()

    def loss_fn(p, b):
        logits = model.apply(p, b["x"])
        return optax.softmax_cross_entropy_with_integer_labels(logits, b["y"]).mean()

    @jax.jit
    def acc_fn(p, x, y):
        """The score an arm must raise to ``args.target``: held-out accuracy, or minus the
        held-out loss with ``--target-loss`` (then ``args.target`` is minus that loss)."""
        logits = model.apply(p, x)
        if args.target_loss is not None:
            return -optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
        return jnp.mean(jnp.argmax(logits, -1) == y)

    # One-off: compile the step-time fit (process-wide cache) before timing any arm.
    from goodput_jax.model.perf import fit_perf_params

    t0 = time.perf_counter()
    fit_perf_params([1, 1], [4, 4], [8, 16], [0.01, 0.02], [0.011, 0.021])
    fit_compile = time.perf_counter() - t0

    if args.nu_check:
        nu_check(args, model, loss_fn, acc_fn,
                 list(range(args.first_seed, args.first_seed + seeds)))
        return 0
    target_text = (f"loss {args.target_loss}" if args.target_loss is not None
                   else f"acc {args.target}")
    print(f"# adaptive_bench  jax {jax.__version__}  devices {jax.device_count()} x "
          f"{jax.devices()[0].platform}  python {platform.python_version()}  "
          f"task {args.task} opt {args.opt} lr {args.lr}  target {target_text}"
          f"  M0 {args.m0}  seeds {seeds}  (fit compile, once: "
          f"{fit_compile:.1f} s)")
    rows = []
    step_cache: dict = {}
    if args.overhead_only:
        tx0 = make_tx(args)
        step_cache["step"] = make_train_step(loss_fn, tx0, **step_kwargs(args))
        step_cache["tx"] = tx0
        ov = overhead(args, task_data(args, 0, 60000, 16), model, loss_fn, step_cache,
                      rounds=3 if args.quick else 7)
        print_overhead(ov, args)
        ovp = overhead_paired(args, task_data(args, 0, 60000, 16), model, loss_fn, step_cache,
                              rounds=args.paired_rounds, block=args.paired_block)
        print_overhead_paired(ovp)
        return 0
    # One-off: compile the step for every batch shape any arm may use (the
    # fixed sweep and the adaptive arm's atomic sizes), so that no arm is
    # charged with another arm's compile cache. Reported, not timed.
    t0 = time.perf_counter()
    warm = task_data(args, 0, 4096, 16)
    params0 = model.init(jax.random.key(0), jnp.ones((1,) + warm[0][0].shape[1:]))
    tx0 = make_tx(args)
    step_cache["step"] = make_train_step(loss_fn, tx0, **step_kwargs(args))
    step_cache["tx"] = tx0
    r = jax.device_count()
    shapes = sorted({args.m0, *sizes, *[b * r for b in (8, 16, 32, 64, 128, 256, 512)
                                         if b * r <= args.max_batch]})
    for total in shapes:
        like = {"x": np.empty((1, total) + warm[0][0].shape[1:], np.float32),
                "y": np.empty((1, total), np.int32)}
        step_cache["step"].precompile(params0, tx0.init(params0), like).result()
    print(f"# step compiled for batch shapes {shapes} in {time.perf_counter() - t0:.1f} s "
          "(once, before the arms)")
    metric = "loss" if args.target_loss is not None else "acc"

    def report(res: dict) -> None:
        t = (f">{res['wall']:5.1f}" if res["censored"] else "   n/a" if res["time"] is None
             else f"{res['time']:6.2f} (stopped at {res['stop']:5.2f})")
        extra = (f"  model error {res['model_error']:.2f}  noise scale "
                 f"{_fmt(res['noise_scale'])}  training time per batch {{"
                 + ", ".join(f"{b}: {t_:.2f}" for b, t_ in sorted(res["time_at"].items()))
                 + "}  nu rescaled at the switches by ["
                 + ", ".join(_fmt3(x) for x in res["nu_scales"]) + "]"
                 if res["arm"] == "adaptive" else "")
        if args.trace:
            print(f"  trace {res['arm']}: " + " ".join(
                f"{t_:.1f}:{abs(v):.3f}" for t_, v in zip(res["eval_t"], res["evals"])))
        print(f"seed {res['seed']} {res['arm']:>11}: time-to-target {t} s  steps "
              f"{res['steps']:5d}  {metric} {abs(res['acc']):.3f}  final batch "
              f"{res['final_batch']:5d}  "
              f"switches {res['switches']}{extra}", flush=True)

    protocol = (f"arms take turns, {args.slice} s slices" if args.interleave
                else "arms one after another")
    print(f"# protocol: {protocol}")
    seed_list = list(range(args.first_seed, args.first_seed + seeds))
    for seed in seed_list:
        data = task_data(args, seed)
        arms = [("fixed-M0", args.m0)] + [(f"fixed-{b}", b) for b in sizes] + [("adaptive", None)]
        if args.interleave:
            for res in run_seed_interleaved(arms, seed, data, args, model, loss_fn, acc_fn,
                                            step_cache):
                rows.append(res)
                report(res)
            continue
        best = math.inf
        for arm, b in arms:
            stop = (args.censor * best if arm.startswith("fixed-") and arm != "fixed-M0"
                    and math.isfinite(best) else None)
            res = run_arm(arm, b, seed, data, args, model, loss_fn, acc_fn, step_cache, stop)
            rows.append(res)
            if res["stop"] is not None and arm.startswith("fixed-"):
                best = min(best, res["stop"])  # the censoring budget: training time run
            report(res)
    # Table: median over seeds.
    print()
    print(f"{'arm':>11} | {'time to target (s), per seed':>30} | {'median':>7} | {'steps':>6} | "
          f"{'final ' + metric:>10} | {'final batch':>11}")
    names = list(dict.fromkeys(r["arm"] for r in rows))
    med = {}
    for name in names:
        rs = [r for r in rows if r["arm"] == name]
        ts = [r["time"] if r["time"] is not None else float("inf") for r in rs]
        med[name] = float(np.median(ts))
        cells = [f">{r['wall']:5.1f}" if r["time"] is None else f"{r['time']:6.2f}" for r in rs]
        print(f"{name:>11} | {', '.join(cells):>30} | {med[name]:7.2f} | "
              f"{int(np.median([r['steps'] for r in rs])):6d} | "
              f"{abs(np.median([r['acc'] for r in rs])):10.3f} | "
              f"{int(np.median([r['final_batch'] for r in rs])):11d}")
    best_fixed = min((v, k) for k, v in med.items() if k.startswith("fixed-"))
    print()
    if math.isfinite(med["fixed-M0"]):
        print(f"adaptive vs fixed-M0: {med['fixed-M0'] / med['adaptive']:.2f}x faster "
              f"(target >= 1.25x)")
    else:
        print(f"adaptive vs fixed-M0: > {args.max_time / med['adaptive']:.2f}x faster (fixed-M0 "
              f"did not reach the target in {args.max_time:.0f} s; target >= 1.25x)")
    print(f"adaptive vs best fixed ({best_fixed[1]}): {med['adaptive'] / best_fixed[0]:.2f}x "
          f"the time (target <= 1.15x)")
    per_seed = []
    for seed in seed_list:
        t = {r["arm"]: r["time"] if r["time"] is not None else float("inf") for r in rows
             if r["seed"] == seed}
        per_seed.append(t["adaptive"] / min(v for k, v in t.items() if k.startswith("fixed-")))
    print(f"adaptive / best fixed arm of the same seed: {', '.join(f'{x:.2f}' for x in per_seed)}"
          f" (median {np.median(per_seed):.2f}x)")
    for seed in seed_list:
        line = efficiency_check(rows, seed)
        if line:
            print(line)
    ad = [r for r in rows if r["arm"] == "adaptive"]
    print(f"adaptive machinery (hooks + controller checks): training-thread {np.median([r['cost_fg'] / r['wall'] for r in ad]):.2%}"
          f", background thread {np.median([r['cost_bg'] / r['wall'] for r in ad]):.2%}, "
          f"recorder writer CPU {np.median([r['cost_rec'] / r['wall'] for r in ad]):.2%} of the "
          f"arm's wall time; model error on profiled configs (median) "
          f"{np.median([r['model_error'] for r in ad]):.3f}")
    if args.overhead:
        ov = overhead(args, task_data(args, 0, 60000, 4000), model, loss_fn, step_cache,
                      rounds=3 if args.quick else 5)
        print_overhead(ov, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
