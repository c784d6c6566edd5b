"""A small real elastic job for the cluster runtime: a Flax MLP with the adaptive trainer.

``goodput_jax.cluster.examples:regression`` is an entry point (the tests, the
benchmark and ``goodput-jax cluster demo`` run it): it restores the latest
Orbax checkpoint onto this launch's devices with :mod:`goodput_jax.adaptive.checkpoint`
(parameters, optimizer state, the goodput model and the AdaptiveBatchSize
state, step), trains with :class:`~goodput_jax.adaptive.AdaptiveBatchSize`
and :class:`~goodput_jax.integrations.hooks.GoodputHooks` (which record to the
job's goodput store and publish hints there), polls the cooperative
:class:`~goodput_jax.adaptive.stop.StopRequest` at every step boundary, and
checkpoints every ``--ckpt-every`` steps (``0``: when
:meth:`~goodput_jax.cluster.context.JobContext.should_checkpoint` asks, at the
goodput-optimal interval) and when asked to stop.

Arguments (``ctx.args``)::

    --steps N         total optimizer steps (default 60)
    --ckpt-every K    checkpoint period in steps (default 20; 0: ctx.should_checkpoint)
    --step-sleep S    seconds of host work per step (default 0: as fast as it goes)
    --crash-at STEP   raise at this step, the first --crash-attempts times (default 1) a
    --crash-attempts A  launch reaches it (fault tests)
    --width W         hidden width (default 16)

Each step's loss, each save and restore (with the eval loss) and the stop go to
the job's progress log (``ctx.log_progress``), with the attempt and device count.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from goodput_jax.cluster.context import JobContext
from goodput_jax.cluster.runner import STOPPED

if TYPE_CHECKING:
    from jax.sharding import Mesh, NamedSharding

__all__ = ["Options", "TrainStep", "always_crash", "parse_args", "regression"]


@runtime_checkable
class TrainStep(Protocol):
    """What the example uses of :func:`~goodput_jax.adaptive.make_train_step`'s step: the
    jitted call and the shardings it was built for.

    ``Any``: params, optimizer state and batches are JAX pytrees, which have no static
    type.
    """

    replicated: NamedSharding
    batch_sharding: NamedSharding
    mesh: Mesh

    def __call__(self, params: Any, opt_state: Any, batch: Any, num_micro: Any) -> Any: ...


def always_crash(ctx: JobContext) -> None:
    """An entry point that fails at once (no JAX): the retry-then-fail path of the tests."""
    raise RuntimeError(f"injected failure of {ctx.job} (attempt {ctx.attempt})")


@dataclass(frozen=True)
class Options:
    """The example's arguments (see the module docstring)."""

    steps: int = 60
    ckpt_every: int = 20
    step_sleep: float = 0.0
    crash_at: int = -1
    crash_attempts: int = 1
    width: int = 16


def parse_args(args: Any) -> Options:
    """The example's arguments from ``ctx.args``.

    Example:
        >>> parse_args(["--steps", "5"]).steps
        5
    """
    p = argparse.ArgumentParser(prog="regression", exit_on_error=False)
    for f in fields(Options):
        p.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=f.default)
    return Options(**vars(p.parse_args(list(args))))


def regression(ctx: JobContext) -> str | None:
    """Train (or continue) the example job; returns :data:`STOPPED` when stopped on request."""
    t_launch = time.time()
    opts = parse_args(ctx.args)
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    from goodput_jax.adaptive import AdaptiveBatchSize, adaptive_optimizer, make_train_step
    from goodput_jax.adaptive import checkpoint as ckpt
    from goodput_jax.integrations.hooks import GoodputHooks
    from goodput_jax.measure.recorder import GoodputRecorder

    width = opts.width

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(1)(nn.tanh(nn.Dense(width)(x)))[..., 0]

    rng = np.random.default_rng(0)
    x = rng.normal(size=(2048, 8)).astype(np.float32)
    y = (np.sin(x @ rng.normal(size=8)) + 0.3 * rng.normal(size=2048)).astype(np.float32)
    model = MLP()

    def loss_fn(p, b):
        return jnp.mean((model.apply(p, b["x"]) - b["y"]) ** 2)

    eval_loss = jax.jit(lambda p: loss_fn(p, {"x": x[:512], "y": y[:512]}))
    hk = {"init_batch_size": 32, "max_batch_size": 256, "refit_interval": 1e9,
          "warmup_steps": 1, "job_warmup_steps": 2, **dict(ctx.hooks)}
    m0 = int(hk["init_batch_size"])
    tx = adaptive_optimizer(optax.sgd(0.05), m0, rule="adascale")
    step_fn = make_train_step(loss_fn, tx)
    if not isinstance(step_fn, TrainStep):
        raise TypeError(f"make_train_step returned {step_fn!r}, not a TrainStep")
    params = jax.device_put(model.init(jax.random.key(0), jnp.ones((1, 8))), step_fn.replicated)
    opt_state = jax.device_put(tx.init(params), step_fn.replicated)
    r = jax.device_count()
    hooks = GoodputHooks(ctx.job, num_replicas=r, num_nodes=ctx.num_processes,
                         atomic_bsz=max(1, m0 // r), is_primary=ctx.is_primary,
                         background=False, store=ctx.store, **hk)
    rec = hooks.recorder  # the hooks' own (no recorder given): a GoodputRecorder
    if not isinstance(rec, GoodputRecorder):
        raise TypeError(f"hooks.recorder ({rec!r}) is not a GoodputRecorder")
    ad = {"adaptive": False, **dict(ctx.adaptive)}
    adaptive = AdaptiveBatchSize(hooks, {"x": x, "y": y},
                                 batch_sharding=step_fn.batch_sharding, **ad)
    stop = ctx.stop_request()
    rec.record_job_start_time(t_launch)
    mngr = ckpt.manager(ctx.checkpoint_dir)
    start = 0
    t0 = time.time()
    with rec.checkpoint_restore():
        restored = ckpt.restore(mngr, params, opt_state, adaptive, step_fn.mesh)
    if restored is not None:
        start, params, opt_state = restored
        ctx.log_progress(event="restore", step=start, eval=float(eval_loss(params)),
                         seconds=time.time() - t0)
    ctx.log_progress(event="launch", step=start, startup=t0 - t_launch,
                     eval=float(eval_loss(params)))

    saved = [start if restored is not None else -1]

    def save(step: int, reason: str) -> None:
        if not ctx.is_current():  # a newer launch of this job exists: it owns the checkpoints
            raise RuntimeError(f"launch {ctx.attempt} of {ctx.job} was superseded")
        t = time.time()
        hooks.flush()
        if saved[0] != step:  # a stop right after a periodic save: that checkpoint serves
            with rec.checkpoint_save(step):
                ckpt.save(mngr, step, params, opt_state, adaptive)
            saved[0] = step
        if ctx.is_primary:
            # a stop is on the restart's critical path: refit only when there is no fit yet
            # (periodic saves and the final one keep the hints fresh)
            if reason == "final" or hooks.perf_params is None:
                hooks.refit()
            hooks.publish()
            rec.flush()
        ctx.log_progress(event="save", step=step, eval=float(eval_loss(params)),
                         reason=reason, seconds=time.time() - t)

    step = start
    try:
        while step < opts.steps:
            if step > start and stop.should_stop(step):
                save(step, "stop")
                ctx.log_progress(event="stopped", step=step, reason=stop.reason())
                return STOPPED
            if step == opts.crash_at:
                marker = os.path.join(os.path.dirname(ctx.progress_path), f"crashes-at-{step}")
                done = os.path.getsize(marker) if os.path.exists(marker) else 0
                if done < opts.crash_attempts:  # the first crash_attempts times it gets here
                    with open(marker, "a") as fh:
                        fh.write("x")
                    raise RuntimeError(f"injected crash at step {step} (attempt {ctx.attempt})")
            t = time.time()
            params, opt_state, loss = adaptive.step(step, step_fn, params, opt_state)
            ctx.log_progress(event="step", step=step, loss=float(loss),
                             seconds=time.time() - t)
            if opts.step_sleep:
                time.sleep(opts.step_sleep)
            step += 1
            due = ctx.should_checkpoint(step) if opts.ckpt_every <= 0 else \
                step % opts.ckpt_every == 0
            if due and step < opts.steps:
                save(step, "periodic")
        save(step, "final")
        rec.record_job_end_time()
        ctx.log_progress(event="finished", step=step)
        return None
    finally:
        hooks.close()
        rec.close()
