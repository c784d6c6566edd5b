"""``goodput-jax demo``: a real Flax training job, measured and modelled end to end.

It trains a small Flax MLP with optax (Adam) on synthetic regression data,
data parallel over fake CPU devices (``jax.shard_map``), and wires in the
whole package:

* :class:`~goodput_jax.integrations.hooks.GoodputHooks` records every step
  through a :class:`GoodputRecorder`, profiles the step time per
  configuration and refits the Pollux step-time model;
* the gradient noise statistics come for free inside the jitted step
  (:func:`~goodput_jax.model.gradstats.data_parallel_grads` +
  :func:`~goodput_jax.gradient_noise_scale`, Adam-preconditioned);
* a :class:`GoodputMonitor` uploads goodput, badput and the model read-outs
  to TensorBoard in the background.

The job has the incidents a real one has:

1. run 1: accelerator init (JAX's backend start-up, timed by
   :func:`goodput_jax.runtime.init_backend`), training prep, compilation
   (every compile timed by ``jax.monitoring`` through
   :func:`goodput_jax.runtime.start_job`), steps with a data-loading stall and
   periodic checkpoints through :mod:`goodput_jax.adaptive.checkpoint` (Orbax,
   asynchronous saves of the parameters, the optimizer state and the hooks'
   profile, recorded by :func:`goodput_jax.integrations.orbax.instrument`),
   then a simulated crash (no job end);
2. a restart delay (infrastructure recovery);
3. run 2 (a new run id): restores the last checkpoint inside training prep,
   compiles a few batch-size / replica configurations and takes turns over
   them until the job ends (the profiling AdaptDL does; every configuration is
   measured over the same stretch of the job), redoes the steps after the
   checkpoint (wasted progress) and finishes the job; at each switch of the batch
   size Adam's second moment ``nu`` is rescaled by hand
   (:func:`~goodput_jax.model.gradstats.nu_switch_factor` of the hooks' noise scale,
   :func:`~goodput_jax.model.gradstats.rescale_nu`), as
   :class:`~goodput_jax.adaptive.AdaptiveBatchSize` does at its own switches;
4. prints the goodput report, the gradient noise scale and statistical
   efficiency, the fitted step-time model, the suggested batch size with its
   predicted speedup, and where to point TensorBoard.

Everything is written inside ``--dir``: the store ``goodput.db``, the
checkpoints under ``checkpoints/`` and the TensorBoard logs under
``tensorboard/``.

Example:
    $ goodput-jax demo --dir /tmp/goodput-demo --quick
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import shutil
import sys
import time
from typing import Any

from goodput_jax._progress import ProgressBar
from goodput_jax.demo_summary import format_model_summary, format_nu_rescales
from goodput_jax.measure.calculator import GoodputCalculator
from goodput_jax.measure.recorder import GoodputRecorder
from goodput_jax.measure.stores.sqlite import SQLiteStore
from goodput_jax.report.text import format_report

__all__ = ["MAX_DEVICES", "DemoConfig", "ProgressBar", "configure_devices", "main"]

#: The most fake CPU devices the demo runs on: run 2 profiles total batches up to 8 x the
#: per-replica batch on every device, which must fit its 16384-sample data pool (at the
#: default per-replica batch of 64: 32 devices); beyond a few dozen, fake devices on a
#: handful of cores only measure the host's thread scheduling.
MAX_DEVICES = 32


@dataclasses.dataclass(frozen=True)
class DemoConfig:
    """Sizes and the simulated incidents of one demo job.

    Attributes:
        steps: optimizer steps of the whole job.
        crash_at: run 1 dies when it reaches this step.
        checkpoint_every: save a checkpoint after every this many steps.
        stall_at: run 1 has a data-loading stall at this step.
        stall_seconds: length of the stall.
        restart_delay: downtime between the crash and run 2.
        atomic_bsz: per-device batch size of the default configuration.
        profile_steps: steps run 2 spends on each profiled configuration per round:
            run 2 cycles through all of them (the default one last) until the job
            ends, so a burst of load on a shared machine, a checkpoint save or a
            refit hits every configuration's samples alike, and every
            configuration is measured over the same stretch of the job.
        extra_configs: how many (replicas, batch size) configurations besides the
            default one run 2 profiles (each costs one compilation).
        features, hidden: model sizes.
        learning_rate: Adam learning rate.
        noise: label noise of the synthetic data (drives the gradient noise).
        refit_every: run 2 also refits the model every this many steps, once every
            configuration has been profiled.
        monitor_interval: seconds between TensorBoard uploads.
    """

    steps: int = 1200
    crash_at: int = 500
    checkpoint_every: int = 150
    stall_at: int = 120
    stall_seconds: float = 1.0
    restart_delay: float = 1.0
    atomic_bsz: int = 64
    profile_steps: int = 12
    extra_configs: int = 4
    features: int = 32
    hidden: int = 128
    learning_rate: float = 3e-3
    noise: float = 1.0
    refit_every: int = 300
    monitor_interval: float = 2.0

    @classmethod
    def from_args(cls, *, quick: bool = False, steps: int | None = None) -> DemoConfig:
        """Defaults or the ``quick`` sizes, resized to ``steps`` (incidents scale with it).

        Args:
            quick: 120 steps with tiny sizes (it still compiles every program, so it is not
                much shorter: about a minute on two cores, as the full demo).
            steps: optimizer steps of the whole job (>= 8), or None for the default.

        Raises:
            ValueError: ``steps`` is not an integer >= 8 (the message names it).

        Example:
            >>> DemoConfig.from_args(quick=True).steps
            120
            >>> DemoConfig.from_args(steps=240).crash_at
            100
        """
        if not isinstance(quick, bool):
            raise TypeError(f"quick ({quick!r}) must be a bool")
        if quick:
            cfg = cls(steps=120, crash_at=70, checkpoint_every=25, stall_at=10, stall_seconds=0.3,
                      restart_delay=0.3, atomic_bsz=32, profile_steps=8,
                      extra_configs=2, hidden=64, refit_every=10**9, monitor_interval=1.0)
        else:
            cfg = cls()
        if steps is not None:
            if isinstance(steps, bool) or not isinstance(steps, int) or steps < 8:
                raise ValueError(f"steps ({steps!r}) must be an integer >= 8")
            cfg = dataclasses.replace(
                cfg, steps=steps, crash_at=max(3, (5 * steps) // 12),
                checkpoint_every=max(1, steps // 8),
                stall_at=max(1, min(cfg.stall_at, steps // 10)),
                profile_steps=max(3, min(cfg.profile_steps, steps // 100)))
        return cfg


# ---------------------------------------------------------------------- JAX setup
def configure_devices(n: int) -> None:
    """Ask XLA for ``n`` fake CPU devices; only effective before JAX is imported.

    Example:
        >>> configure_devices(4)  # doctest: +SKIP
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"devices ({n!r}) must be an integer >= 1")
    if "jax" in sys.modules:
        return
    flags = re.sub(r"--xla_force_host_platform_device_count=\S+", "",
                   os.environ.get("XLA_FLAGS", ""))
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={n}".strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")


class SyntheticData:
    """Synthetic regression ``y = teacher(x) + noise`` served in slices of a host pool.

    ``batch(step, size, sharding)`` cuts the next ``size`` samples and copies
    them to the devices: the demo's "data loading".
    """

    def __init__(self, features: int, noise: float, pool: int = 16384, seed: int = 1234):
        import numpy as np

        rng = np.random.default_rng(seed)
        a = rng.normal(size=(features, 16)).astype("float32") / math.sqrt(features)
        b = rng.normal(size=(16, 1)).astype("float32")
        self.x = rng.normal(size=(pool, features)).astype("float32")
        clean = np.tanh(self.x @ a) @ b
        self.y = (clean + noise * rng.normal(size=(pool, 1))).astype("float32")

    def batch(self, step: int, size: int, sharding: Any) -> dict:
        import jax

        n = self.x.shape[0]
        if size > n:
            raise ValueError(f"batch size ({size}) exceeds the data pool ({n})")
        start = (step * size) % (n - size + 1)
        return jax.device_put({"x": self.x[start:start + size], "y": self.y[start:start + size]},
                              sharding)


# ---------------------------------------------------------------------- model and step
def _model_and_optimizer(cfg: DemoConfig, init_batch_size: int) -> tuple[Any, Any]:
    import flax.linen as nn
    import optax

    from goodput_jax.model import gradstats as gs

    class MLP(nn.Module):
        hidden: int

        @nn.compact
        def __call__(self, x: Any) -> Any:
            x = nn.relu(nn.Dense(self.hidden)(x))
            x = nn.relu(nn.Dense(self.hidden)(x))
            return nn.Dense(1)(x)

    model = MLP(cfg.hidden)
    # Statistics first in the chain (identity on the updates), then Adam.
    tx = optax.chain(gs.gradient_noise_scale(init_batch_size), optax.adam(cfg.learning_rate))
    return model, tx


def _make_train_step(model: Any, tx: Any, mesh: Any) -> Any:  # (jax's jitted function)
    """Jitted data-parallel step over ``mesh``:
    (params, opt_state, batch) -> (params, opt_state, loss)."""
    import jax
    import jax.numpy as jnp
    import optax
    from jax.sharding import PartitionSpec as P

    from goodput_jax.model import gradstats as gs

    def loss_fn(params: Any, batch: Any) -> Any:
        return jnp.mean((model.apply(params, batch["x"]) - batch["y"]) ** 2)

    def step(params: Any, opt_state: Any, batch: Any) -> tuple[Any, Any, Any]:
        pre = gs.auto_preconditioner(opt_state)  # Adam: precondition the norms
        loss, grads, sq = gs.data_parallel_grads(loss_fn, params, batch, "data", preconditioner=pre)
        updates, opt_state = tx.update(grads, opt_state, params, grad_sqnorms=sq)
        return optax.apply_updates(params, updates), opt_state, loss

    sm = jax.shard_map(step, mesh=mesh, in_specs=(P(), P(), P("data")), out_specs=(P(), P(), P()))
    return jax.jit(sm, donate_argnums=(0, 1))


def _configurations(cfg: DemoConfig, num_devices: int) -> list[tuple[int, int]]:
    """(replicas, atomic_bsz) that run 2 profiles; the default configuration is last.

    Every total batch is at least ``M0 = num_devices * atomic_bsz`` (the
    model's efficiency is defined from the initial batch size upwards).
    """
    b, d = cfg.atomic_bsz, num_devices
    half = max(1, d // 2)
    extra = [(d, 2 * b), (half, 2 * b), (d, 4 * b), (d, 8 * b), (half, 4 * b), (half, 8 * b)]
    out: list[tuple[int, int]] = []
    for c in extra:
        if c != (d, b) and c not in out and c[0] * c[1] >= d * b:
            out.append(c)
    return out[: cfg.extra_configs] + [(d, b)]


def _plan(configs: list[tuple[int, int]], per_config: int, steps: int) -> list[tuple[int, int]]:
    """The configuration of each of ``steps`` steps: rounds over ``configs``, ``per_config``
    steps each, for as many full rounds as fit; the rest in the last (default) one.

    Example:
        >>> _plan([(2, 8), (4, 4)], 2, 7)
        [(2, 8), (2, 8), (4, 4), (4, 4), (4, 4), (4, 4), (4, 4)]
        >>> _plan([(2, 8), (4, 4)], 2, 3)
        [(4, 4), (4, 4), (4, 4)]
    """
    rounds = steps // (len(configs) * per_config)
    plan = [c for _ in range(rounds) for c in configs for _ in range(per_config)]
    return plan + [configs[-1]] * (steps - len(plan))


def _rescale_nu_at_switch(hooks: Any, opt_state: Any,
                          new_batch_size: int) -> tuple[Any, dict | None]:
    """Adam's ``nu`` for a batch-size switch the demo makes by hand (``hooks.set_config``).

    A hand switch gets no rescale from :class:`~goodput_jax.adaptive.AdaptiveBatchSize`:
    ``nu`` is scaled by :func:`goodput_jax.model.gradstats.nu_switch_factor` of the noise
    scale the hooks hold now (``M0 * var / sqr``), from the hooks' batch size (the one
    ``opt_state`` trained at) to ``new_batch_size``. Call it before ``hooks.set_config``.

    Returns:
        ``(opt_state, record)``: the record ``{"from", "to", "noise_scale", "factor"}``,
        or ``opt_state`` itself and None when nothing is rescaled (the same batch size, no
        statistics yet, or a noise scale that is not finite and positive).
    """
    from goodput_jax.model import gradstats as gs

    old = hooks.batch_size
    gp = hooks.grad_params  # at a switch: hooks.set_config waits for the step anyway
    if gp is None or old == new_batch_size:
        return opt_state, None
    phi = float(gs.noise_scale(gp, hooks.init_batch_size))  # inf when |G|^2 <= 0
    factor = gs.nu_switch_factor(phi, old, new_batch_size)
    if factor is None:
        return opt_state, None
    return (gs.rescale_nu(opt_state, factor),
            {"from": old, "to": new_batch_size, "noise_scale": phi, "factor": factor})


# ---------------------------------------------------------------------- one run
def run_training(rec: GoodputRecorder, cfg: DemoConfig, ckpt_dir: str, *, crash: bool,
                 bar: ProgressBar, data: SyntheticData | None = None) -> dict:
    """One process launch: init, (restore), compile, train. Returns a summary dict.

    ``data`` is run 1's :class:`SyntheticData` for run 2 (the same samples; None: new).

    Run 1 (``crash=True``) trains in the default configuration and stops at
    ``cfg.crash_at`` without a job end. Run 2 cycles through the profiled
    configurations, ``cfg.profile_steps`` steps each per round, until the job
    ends (in the default one: every configuration is measured over the same
    stretch of the job, under the same load); on a clean exit the hooks refit
    the model, publish the hints and record the job end.
    """
    run = "1" if crash else "2"
    bar.update(0, note=f"run {run}: starting (JAX, model init)", force=True)
    import jax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from goodput_jax import runtime
    from goodput_jax.adaptive import checkpoint
    from goodput_jax.integrations.hooks import GoodputHooks
    from goodput_jax.integrations.orbax import instrument

    # job start + the backend start-up measured by runtime.init_backend() in main() (recorded
    # once per process: run 2, a restart inside the same process, has no start-up to show);
    # every JAX compilation from now on is recorded with its measured duration
    runtime.start_job(rec)
    devices = jax.devices()
    num_devices = len(devices)
    init_bs = num_devices * cfg.atomic_bsz
    with rec.training_prep():
        data = SyntheticData(cfg.features, cfg.noise) if data is None else data
        model, tx = _model_and_optimizer(cfg, init_bs)
        params = model.init(jax.random.PRNGKey(0), data.x[:1])
        opt_state = tx.init(params)
        hooks = GoodputHooks(
            rec.job_name, init_batch_size=init_bs, atomic_bsz=cfg.atomic_bsz,
            max_batch_size=16 * init_bs, local_bsz_bounds=(8, 8 * cfg.atomic_bsz),
            gradient_accumulation=True, num_nodes=1, num_replicas=num_devices,
            # the demo refits explicitly (below), inside a "model refit" custom badput span
            recorder=rec, refit_interval=math.inf, is_primary=True,
            # the StepRecorder below records each step's device end as it happens
            record_device_ends=False,
            # fake CPU devices share the host's cores: the lower quartile of all of each
            # configuration's samples is more reproducible than the median (they take turns
            # all through run 2: a window of the newest would compare different stretches)
            profile_quantile=0.25, profile_window=4096,
        )
        # adaptive.checkpoint's Orbax checkpoints (params, optimizer state with the gradient
        # statistics, the hooks' state), recorded as checkpoint badput by orbax.instrument
        ckpts = instrument(checkpoint.manager(ckpt_dir, max_to_keep=2), rec)
        restored = checkpoint.restore(ckpts, params, opt_state, hooks, Mesh(devices, ("data",)))
        start = 0
        if restored is not None:
            last, params, opt_state = restored
            start = last + 1
            # run 2 re-measures run 1's configuration beside the others, over the same stretch
            for key in list(hooks.profile):
                hooks.reset_profile(key)
    configs = [(num_devices, cfg.atomic_bsz)] if crash else _configurations(cfg, num_devices)
    compiled: dict[tuple[int, int], tuple[Any, Any, Any]] = {}
    bar.update(0, note=f"run {run}: compiling {len(configs)} configuration(s)", force=True)
    # GoodputHooks records the steps (start, profile); the StepRecorder watches their
    # outputs and records each step's device end the moment it happens (the hooks' own
    # one-step-late timer sees it only when the next step is dispatched)
    steps = runtime.StepRecorder(rec, compile_times=False)
    # each configuration's program cost (XLA's cost analysis, per device) against the
    # device's peak (on a CPU a measured one, probed once per process): program goodput
    peak = runtime.device_peak(devices[0])
    costs = {}
    # ahead-of-time compiles: jax.monitoring times them (program startup, measured)
    for r, a in configs:
        mesh = Mesh(devices[:r], ("data",))
        rep, shard = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
        fn = _make_train_step(model, tx, mesh)
        p, o = jax.device_put((params, opt_state), rep)
        batch = data.batch(0, r * a, shard)
        compiled[(r, a)] = (fn.lower(p, o, batch).compile(), rep, shard)
        cost = runtime.program_cost(fn, p, o, batch)  # JAX's cache: no second compile
        costs[(r, a)] = dataclasses.replace(cost, name=f"train_step r={r} b={a}", peak=peak)
    stop = cfg.crash_at if crash else cfg.steps
    plan = _plan(configs, cfg.profile_steps, stop - start)
    per_round = len(configs) * cfg.profile_steps
    current = None
    nu_rescales: list[dict] = []  # Adam's nu at each batch-size switch (_rescale_nu_at_switch)
    loss = float("nan")
    for step in range(start, stop):
        conf = plan[step - start]
        fn, rep, shard = compiled[conf]
        if conf != current:
            # a switch by hand: Adam's nu follows the batch size (no rescale on the
            # configuration restored or started with, when the batch is the same)
            opt_state, rescaled = _rescale_nu_at_switch(hooks, opt_state, conf[0] * conf[1])
            if rescaled is not None:
                nu_rescales.append({"step": step, **rescaled})
            params, opt_state = jax.device_put((params, opt_state), rep)
            hooks.set_config(num_replicas=conf[0], atomic_bsz=conf[1])
            rec.record_program_cost(costs[conf], step=step)  # the steps from here run it
            current = conf
        with rec.data_loading():
            if crash and step == cfg.stall_at:
                time.sleep(cfg.stall_seconds)  # a slow input pipeline
            batch = data.batch(step, conf[0] * conf[1], shard)
        params, opt_state, loss_arr = hooks.step(step, fn, params, opt_state, batch)
        steps.track(step, loss_arr)  # the device end of this step, as soon as it happens
        loss = float(loss_arr)
        done = step - start + 1
        if not crash and done >= per_round and done % cfg.refit_every == 0 \
                and step < stop - 1:
            bar.update(0, note="run 2: refitting the step-time model", force=True)
            with rec.badput("model refit"):
                hooks.refit()
                h = hooks.publish()
            bar.message(f"  step {step}: refit the step-time model on "
                        f"{sum(1 for e in hooks.profile.values() if e.optim_count)} configurations,"
                        f" suggested batch {h.get('suggestedBatchSize')}, hints published")
        if (step + 1) % cfg.checkpoint_every == 0:
            # asynchronous: only the blocking part counts as checkpoint save time
            checkpoint.save(ckpts, step, params, opt_state, hooks, wait=False)
        bar.update(1, note=f"run {run} step {step} loss {loss:.3f}")
    steps.close()  # the last step's device end
    if crash:
        # Simulated crash: the process dies in the next step; no job end is recorded.
        rec.record_step_start_time(stop)
        # a crashed run records nothing more: Orbax just finishes the background commit
        # so that the restart finds it (a real crash could lose it)
        ckpts.manager.close()
    else:
        if any(e.optim_count for e in hooks.profile.values()):
            bar.update(0, note="run 2: final model refit", force=True)
            with rec.badput("model refit"):  # the final fit, as GoodputHooks.job() does
                hooks.refit()
                hooks.publish()
        ckpts.close()
        rec.record_job_end_time()
    return {"start": start, "stop": stop, "loss": loss, "devices": num_devices, "hooks": hooks,
            "last_checkpoint": ckpts.latest_step(), "data": data, "nu_rescales": nu_rescales}


# ---------------------------------------------------------------------- entry point
def _clean_dir(out: str) -> tuple[str, str, str]:
    ckpt_dir = os.path.join(out, "checkpoints")
    tb_dir = os.path.join(out, "tensorboard")
    os.makedirs(ckpt_dir, exist_ok=True)
    os.makedirs(tb_dir, exist_ok=True)
    for f in os.listdir(ckpt_dir):  # a fresh job every time the demo runs
        path = os.path.join(ckpt_dir, f)
        if os.path.isdir(path) and (f.isdigit() or ".orbax-checkpoint-tmp" in f):
            shutil.rmtree(path)
    for f in os.listdir(tb_dir):
        if f.startswith("events.out.tfevents."):
            os.remove(os.path.join(tb_dir, f))
    db = os.path.join(out, "goodput.db")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(db + suffix):
            os.remove(db + suffix)
    return ckpt_dir, tb_dir, db


#: the demo's two goodputs, one line each (docs/concepts.md defines both)
GOODPUT_DEFINITIONS = """\
Two goodputs (see docs/concepts.md):
  measured goodput = productive step time / total job time (%): the table below
  modelled goodput = samples/s of useful progress (throughput x statistical efficiency): the Pollux model"""  # noqa: E501 (printed as one line)


def main(*, directory: str = "goodput-demo", steps: int | None = None, job: str = "demo",
         devices: int = 4, quick: bool = False, progress: bool = True) -> int:
    """Run the demo job (``goodput-jax demo``); returns the exit code.

    Args:
        directory: output directory (created; previous demo files in it are replaced).
        steps: optimizer steps of the whole job (>= 8), or None for the default.
        job: job name recorded in the store.
        devices: fake CPU devices, 1 to :data:`MAX_DEVICES` (only effective if JAX has
            not started yet).
        quick: 120 steps with tiny sizes (it still compiles every program, so it is not
            much shorter: about a minute on two cores, as the full demo).
        progress: draw a progress bar on a terminal.

    Raises:
        ValueError: a bad argument (the message names it and its value).

    Example:
        >>> main(directory="/tmp/goodput-demo", quick=True, progress=False)  # doctest: +SKIP
        0
    """
    cfg = DemoConfig.from_args(quick=quick, steps=steps)
    if isinstance(devices, bool) or not isinstance(devices, int) \
            or not 1 <= devices <= MAX_DEVICES:
        raise ValueError(f"devices ({devices!r}) must be an integer from 1 to {MAX_DEVICES} "
                         "(the demo's largest profiled batch must fit its data pool)")
    if not isinstance(job, str) or not job.strip():
        raise ValueError(f"job ({job!r}) must be a non-empty name")
    configure_devices(devices)
    if not isinstance(directory, (str, os.PathLike)) or not str(directory):
        raise ValueError(f"directory ({directory!r}) must be a non-empty path")
    out = os.path.abspath(directory)
    if os.path.exists(out) and not os.path.isdir(out):
        raise ValueError(f"directory ({directory!r}) exists and is not a directory")
    os.makedirs(out, exist_ok=True)
    ckpt_dir, tb_dir, db = _clean_dir(out)
    t0 = time.time()
    print(f"goodput-jax demo: job {job!r}, {cfg.steps} steps, writing to {out}", flush=True)
    from goodput_jax import runtime
    from goodput_jax.measure.monitor import GoodputMonitor

    # the first use of JAX's backend, timed: the accelerator initialisation run 1 records
    n_dev = runtime.init_backend().device_count
    if n_dev != devices:
        print(f"  note: JAX was already initialised with {n_dev} devices; using them", flush=True)
    store = SQLiteStore(db)
    logger = f"goodput_{job}"
    monitor = GoodputMonitor(job, logger, tb_dir, cfg.monitor_interval,
                             monitoring_enabled=True, store=store)
    total_bar = cfg.crash_at + (cfg.steps - (cfg.crash_at // cfg.checkpoint_every)
                                * cfg.checkpoint_every)
    bar = ProgressBar(total_bar, enabled=progress)
    recorders: list[GoodputRecorder] = []
    try:
        monitor.start_goodput_uploader()
        rec1 = GoodputRecorder(job, logger, logging_enabled=True, store=store)
        recorders.append(rec1)
        s1 = run_training(rec1, cfg, ckpt_dir, crash=True, bar=bar)
        rec1.close()  # the "crashed" process's flushed events survive
        bar.message(f"run 1 crashed at step {s1['stop']} (last checkpoint: step "
                    f"{s1['last_checkpoint']}); restarting after {cfg.restart_delay}s")
        time.sleep(cfg.restart_delay)  # infrastructure recovery
        rec2 = GoodputRecorder(job, logger, logging_enabled=True, store=store)
        recorders.append(rec2)
        s2 = run_training(rec2, cfg, ckpt_dir, crash=False, bar=bar, data=s1["data"])
        rec2.close()
        bar.close()
        monitor.close()  # stops the uploader after a final upload
        print(f"run 2 resumed at step {s2['start']} and finished step {s2['stop'] - 1} "
              f"on {s2['devices']} devices, final loss {s2['loss']:.4f} "
              f"({time.time() - t0:.1f}s)\n")
        print(format_nu_rescales(s2["nu_rescales"]) + "\n")
        calc = GoodputCalculator(job, logger, store=store)
        # the goodput table is `goodput-jax report`'s own (report.text.format_report)
        print(f"{GOODPUT_DEFINITIONS}\n\n{format_report(calc)}\n")
        print(format_model_summary(s2["hooks"]))
        print("  (fake CPU devices share the host's cores: the fitted times reflect dispatch "
              "overhead and contention, not an accelerator; the numbers show the mechanics)")
        print()
        print(f"TensorBoard:  tensorboard --logdir {tb_dir}")
        print(f"Report:       goodput-jax report --job {job} --store sqlite:///{db} "
              f"--html {os.path.join(out, 'report.html')}")
    finally:
        bar.close()
        for rec in recorders:
            rec.close()
        monitor.close()
        store.close()
    return 0
