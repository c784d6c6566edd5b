"""``goodput-jax demo``: a small real training job with goodput recording.

It trains a 2-layer MLP with optax (plain JAX, data parallel over fake CPU
devices) on synthetic regression data and records every phase with a
:class:`GoodputRecorder`:

1. run 1: accelerator init, training prep, compilation, steps with a data
   loading stall and periodic checkpoints, then a simulated crash (no job end);
2. run 2 (a new run id): restores the last checkpoint inside training prep,
   redoes the steps after it (wasted progress) and finishes the job;
3. prints the goodput report of the job.

Everything is written inside ``--dir`` (the store ``goodput.db`` and the
checkpoints under ``checkpoints/``).

Example:
    $ goodput-jax demo --dir /tmp/goodput-demo --quick
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
import time
from typing import Any

from goodput_jax.measure.calculator import GoodputCalculator
from goodput_jax.measure.recorder import GoodputRecorder
from goodput_jax.measure.report import format_report
from goodput_jax.measure.stores.sqlite import SQLiteStore


@dataclasses.dataclass(frozen=True)
class DemoConfig:
    """Sizes and the simulated incidents of one demo job."""

    steps: int = 1000
    crash_at: int = 640  # run 1 dies when it reaches this step
    checkpoint_every: int = 150
    stall_at: int = 100  # a data-loading stall at this step
    stall_seconds: float = 0.5
    restart_delay: float = 0.5  # downtime between the crash and run 2
    batch: int = 1024
    features: int = 64
    hidden: int = 512
    learning_rate: float = 1e-2

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> DemoConfig:
        cfg = cls(steps=40, crash_at=27, checkpoint_every=10, stall_at=5, stall_seconds=0.2,
                  restart_delay=0.2, batch=64, features=32, hidden=64) if args.quick else cls()
        if args.steps is not None:
            if args.steps < 4:
                raise ValueError(f"--steps ({args.steps}) must be at least 4")
            s = args.steps
            cfg = dataclasses.replace(
                cfg, steps=s, crash_at=max(2, (2 * s) // 3),
                checkpoint_every=max(1, s // 6), stall_at=min(cfg.stall_at, s // 4))
        return cfg


# ---------------------------------------------------------------------- JAX setup
def configure_devices(n: int) -> None:
    """Ask XLA for ``n`` CPU devices (only effective before JAX initialises)."""
    if n < 1:
        raise ValueError(f"--devices ({n}) must be >= 1")
    if "jax" in sys.modules:
        return
    flags = re.sub(r"--xla_force_host_platform_device_count=\S+", "", os.environ.get("XLA_FLAGS", ""))
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={n}".strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")


def init_params(cfg: DemoConfig, seed: int = 0) -> dict:
    import jax
    import jax.numpy as jnp

    k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
    return {
        "w1": jax.random.normal(k1, (cfg.features, cfg.hidden)) / jnp.sqrt(cfg.features),
        "b1": jnp.zeros((cfg.hidden,)),
        "w2": jax.random.normal(k2, (cfg.hidden, 1)) / jnp.sqrt(cfg.hidden),
        "b2": jnp.zeros((1,)),
    }


def make_train_step(optimizer):
    """A jitted SGD step: (params, opt_state, x, y) -> (params, opt_state, loss)."""
    import jax
    import jax.numpy as jnp
    import optax

    def loss_fn(params, x, y):
        h = jax.nn.relu(x @ params["w1"] + params["b1"])
        pred = h @ params["w2"] + params["b2"]
        return jnp.mean((pred - y) ** 2)

    @jax.jit
    def train_step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return train_step


class SyntheticData:
    """Synthetic regression batches ``y = relu(x @ a) @ b + noise``.

    A small pool of host batches is generated up front; ``batch(step)`` picks
    one and copies it to the devices (the "data loading" of the demo).
    """

    def __init__(self, cfg: DemoConfig, sharding, pool: int = 8):
        import numpy as np

        self.cfg, self.sharding = cfg, sharding
        rng = np.random.default_rng(1234)
        a = rng.normal(size=(cfg.features, 8)).astype("float32")
        b = rng.normal(size=(8, 1)).astype("float32")
        self.pool = []
        for _ in range(pool):
            x = rng.normal(size=(cfg.batch, cfg.features)).astype("float32")
            y = (np.maximum(x @ a, 0) @ b + 0.1 * rng.normal(size=(cfg.batch, 1))).astype("float32")
            self.pool.append((x, y))

    def batch(self, step: int):
        import jax

        x, y = self.pool[step % len(self.pool)]
        return jax.device_put(x, self.sharding), jax.device_put(y, self.sharding)


# ---------------------------------------------------------------------- checkpoints
def save_checkpoint(ckpt_dir: str, step: int, params: dict, opt_state: Any) -> str:
    """Save params and optimizer state after ``step`` as one .npz file."""
    import jax
    import numpy as np

    leaves = jax.tree_util.tree_leaves((params, opt_state))
    path = os.path.join(ckpt_dir, f"step_{step:06d}.npz")
    tmp = path + ".tmp.npz"
    np.savez(tmp, *[np.asarray(x) for x in leaves])
    os.replace(tmp, path)
    return path


def latest_checkpoint(ckpt_dir: str) -> int | None:
    steps = [int(f[5:11]) for f in os.listdir(ckpt_dir) if f.startswith("step_") and f.endswith(".npz")
             and ".tmp" not in f]
    return max(steps) if steps else None


def restore_checkpoint(ckpt_dir: str, step: int, like: tuple) -> tuple:
    """Load the checkpoint of ``step`` into the structure of ``like`` (params, opt_state)."""
    import jax
    import numpy as np

    treedef = jax.tree_util.tree_structure(like)
    with np.load(os.path.join(ckpt_dir, f"step_{step:06d}.npz")) as z:
        leaves = [z[f"arr_{i}"] for i in range(len(z.files))]
    return jax.tree_util.tree_unflatten(treedef, leaves)


# ---------------------------------------------------------------------- one run
def run_training(rec: GoodputRecorder, cfg: DemoConfig, ckpt_dir: str, *, crash: bool,
                 progress: bool) -> dict:
    """One process launch: init, (restore), compile, train; returns a small summary."""
    rec.record_job_start_time()
    with rec.accelerator_init():
        import jax
        from jax.sharding import Mesh, NamedSharding
        from jax.sharding import PartitionSpec as P

        devices = jax.devices()
        mesh = Mesh(devices, ("data",))
        data_sharding = NamedSharding(mesh, P("data"))
        replicated = NamedSharding(mesh, P())
    with rec.training_prep():
        import optax

        optimizer = optax.adam(cfg.learning_rate)
        params = jax.device_put(init_params(cfg), replicated)
        opt_state = optimizer.init(params)
        data = SyntheticData(cfg, data_sharding)
        train_step = make_train_step(optimizer)
        start = 0
        restored = latest_checkpoint(ckpt_dir)
        if restored is not None:
            with rec.checkpoint_restore(step=restored):
                params, opt_state = restore_checkpoint(ckpt_dir, restored, (params, opt_state))
                params, opt_state = jax.device_put((params, opt_state), replicated)
            start = restored + 1
    with rec.program_startup():
        x, y = data.batch(start)
        compiled = train_step.lower(params, opt_state, x, y).compile()
    stop = cfg.crash_at if crash else cfg.steps
    loss = float("nan")
    for step in range(start, stop):
        rec.record_step_start_time(step)
        with rec.data_loading():
            if step == cfg.stall_at and crash:
                time.sleep(cfg.stall_seconds)  # a slow input pipeline
            x, y = data.batch(step)
        params, opt_state, loss_arr = compiled(params, opt_state, x, y)
        loss = float(loss_arr)  # blocks until the step is done
        if (step + 1) % cfg.checkpoint_every == 0:
            with rec.checkpoint_save(step=step):
                save_checkpoint(ckpt_dir, step, params, opt_state)
            rec.record_checkpoint_progress(step, time.time())
        if progress and (step % max(1, cfg.steps // 10) == 0 or step == stop - 1):
            print(f"  run {rec.run_id[-6:]} step {step:>5} loss {loss:.4f}", flush=True)
    if crash:
        # Simulated crash: the process dies mid-step, no job end is ever recorded.
        rec.record_step_start_time(stop)
    else:
        rec.record_job_end_time()
    return {"start": start, "stop": stop, "loss": loss, "devices": len(devices)}


def main(args: argparse.Namespace) -> int:
    """Entry point of ``goodput-jax demo``."""
    cfg = DemoConfig.from_args(args)
    configure_devices(args.devices)
    out = os.path.abspath(args.dir)
    os.makedirs(out, exist_ok=True)
    ckpt_dir = os.path.join(out, "checkpoints")
    os.makedirs(ckpt_dir, exist_ok=True)
    for f in os.listdir(ckpt_dir):  # a fresh job every time the demo runs
        if f.startswith("step_") and f.endswith(".npz"):
            os.remove(os.path.join(ckpt_dir, f))
    db = os.path.join(out, "goodput.db")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(db + suffix):
            os.remove(db + suffix)
    store = SQLiteStore(db)
    progress = not args.no_progress
    t0 = time.time()
    try:
        print(f"goodput-jax demo: job {args.job!r}, {cfg.steps} steps, store {store.url}")
        rec1 = GoodputRecorder(args.job, f"goodput_{args.job}", logging_enabled=True, store=store)
        s1 = run_training(rec1, cfg, ckpt_dir, crash=True, progress=progress)
        rec1.close()  # the "crashed" process's flushed events survive
        print(f"run 1 crashed at step {s1['stop']} (last checkpoint: step "
              f"{latest_checkpoint(ckpt_dir)}); restarting after {cfg.restart_delay}s")
        time.sleep(cfg.restart_delay)  # infrastructure recovery
        rec2 = GoodputRecorder(args.job, f"goodput_{args.job}", logging_enabled=True, store=store)
        s2 = run_training(rec2, cfg, ckpt_dir, crash=False, progress=progress)
        rec2.close()
        print(f"run 2 resumed at step {s2['start']} and finished step {s2['stop'] - 1} "
              f"on {s2['devices']} devices, final loss {s2['loss']:.4f} "
              f"({time.time() - t0:.1f}s)\n")
        calc = GoodputCalculator(args.job, f"goodput_{args.job}", store=store)
        print(format_report(calc))
        print(f"\nreproduce: goodput-jax report --job {args.job} --store sqlite:///{db}")
    finally:
        store.close()
    return 0
