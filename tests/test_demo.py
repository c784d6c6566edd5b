"""`goodput-jax demo --quick` end to end: real Flax training, restart, checkpoint, stall,
gradient noise, fitted model, suggestion, TensorBoard logs, and the HTML/PNG report of it."""

from __future__ import annotations

import io
import os
import pathlib
import re
import subprocess
import sys

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from goodput_jax.demo import DemoConfig, ProgressBar, _configurations

ROWS = ["GOODPUT (productive step time)", "accelerator initialization",
        "training preparation", "program startup (compile)", "data loading (sync)",
        "checkpoint save", "checkpoint restore", "wasted progress (disruption)",
        "infrastructure recovery", "custom badput events", "other (unaccounted, hangs)"]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("demo")
    out, cwd = tmp / "demo-out", tmp / "cwd"
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    r = subprocess.run(
        [sys.executable, "-m", "goodput_jax.cli", "demo", "--dir", str(out), "--quick",
         "--no-progress", "--devices", "2"],
        cwd=cwd, capture_output=True, text=True, timeout=300, check=False, env=env,
    )
    return r, out, cwd


def _pct(text, label):
    m = re.search(rf"^\s*{re.escape(label)}\s+([\d.]+)\s+([\d.]+)\s*$", text, re.MULTILINE)
    assert m, label
    return float(m.group(2))


def test_demo_quick_measures_the_job(demo_run):
    r, out, cwd = demo_run
    assert r.returncode == 0, r.stderr
    text = r.stdout
    assert "Goodput report for job 'demo'" in text
    assert "runs: 2  disruptions: 1" in text
    # both goodputs are defined, one line each, with a pointer to the concepts page
    assert "Two goodputs (see docs/concepts.md):" in text
    assert re.search(r"^  measured goodput = productive step time / total job time \(%\)", text, re.MULTILINE)
    assert re.search(r"^  modelled goodput = samples/s of useful progress", text, re.MULTILINE)
    assert (pathlib.Path(__file__).parents[1] / "docs" / "concepts.md").is_file()
    # crash at 70, checkpoints every 25 steps -> run 2 resumes after the step-49 checkpoint
    assert "run 1 crashed at step 70 (last checkpoint: step 49)" in text
    assert "run 2 resumed at step 50" in text and "on 2 devices" in text
    values = {row: _pct(text, row) for row in ROWS}
    assert abs(sum(values.values()) - 100.0) < 0.1
    # every incident shows up in its bucket (read exactly from the store: some are milliseconds)
    from goodput_jax.measure.calculator import BadputType as B
    from goodput_jax.measure.calculator import GoodputCalculator
    from goodput_jax.measure.stores.sqlite import SQLiteStore

    store = SQLiteStore(str(out / "goodput.db"), create=False)
    d = GoodputCalculator("demo", None, store=store).get_job_goodput_details()
    store.close()
    assert d["productive_time"] > 0
    for bt in (B.TRAINING_PREP, B.PROGRAM_STARTUP, B.DATA_LOADING,
               B.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME, B.UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME,
               B.WASTED_PROGRESS_FROM_DISRUPTION, B.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION,
               B.CUSTOM_BADPUT_EVENTS):
        assert d["badput_time"][bt] > 0, bt
    assert d["badput_time"][B.DATA_LOADING] >= 0.3  # the injected stall
    # measured, not guessed: JAX's backend start-up, compile times, Orbax's blocking saves
    store = SQLiteStore(str(out / "goodput.db"), create=False)
    evs, _ = store.read_events("demo")
    store.close()
    init = [e.timestamp for e in evs if e.kind.value.startswith("accelerator_init")]
    assert len(init) == 2 and init[1] > init[0]  # recorded once per process: run 1
    assert d["badput_time"][B.ACCELERATOR_INITIALIZATION] == pytest.approx(init[1] - init[0])
    assert re.search(r"^\s*accelerator initialization\s+0\.(0*[1-9])", text, re.MULTILINE)
    comps = [e.payload for e in evs if e.kind.value == "compilation"]
    assert any(c["name"].startswith("jit(") and c["duration_s"] > 0 for c in comps)
    assert not any(c["recompile"] for c in comps)  # every configuration compiled up front
    saves = [e for e in evs if e.kind.value == "checkpoint_save_start"]
    assert len(saves) >= 4  # run 1: steps 24, 49; run 2: 74, 99 (+ run 2's final close)
    assert d["badput_time"][B.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION] >= 0.3  # restart delay
    # the fits are accounted for (a wait for the fit's first compile, once per machine, is
    # booked apart; so is a wait for the peak probe in a job shorter than it)
    custom = set(d["custom_badput_time"])
    assert "model refit" in custom and custom <= {"model refit", "model fit compile",
                                                  "peak probe"}, custom
    # writes only inside --dir (no stray goodput.db or TensorBoard logs in the cwd)
    assert os.listdir(cwd) == []
    assert {"checkpoints", "goodput.db", "tensorboard"} <= set(os.listdir(out))
    # Orbax step directories (max_to_keep=2 of run 2's saves after steps 74 and 99)
    assert {"74", "99"} <= set(os.listdir(out / "checkpoints"))
    assert r.stderr.strip() == "" or "Traceback" not in r.stderr


def test_demo_quick_prints_the_model(demo_run):
    r, out, _ = demo_run
    text = r.stdout
    m = re.search(r"gradient noise scale B_noise = tr\(Sigma\) / \|G\|\^2 = ([\d.e+]+) samples",
                  text)
    assert m and float(m.group(1)) > 0
    assert re.search(r"statistical efficiency at batch 64: 1\.000", text)  # M0 = 2 x 32
    assert "step-time model fitted to 3 profiled configurations" in text
    assert re.search(r"compute\s+T_c\(b\) = [\d.]+ (s|ms|us|ns) \+ [\d.]+ (s|ms|us|ns) \* b", text)
    assert len(re.findall(r"profiled r=\d b=\d+\s+measured", text)) == 3
    m = re.search(r"suggested for 2 replicas: batch (\d+) \(atomic (\d+) x (\d+) micro-steps", text)
    assert m and int(m.group(1)) == 2 * int(m.group(2)) * int(m.group(3)) >= 64
    m = re.search(r"predicted speedup ([\d.]+)x", text)
    assert m and float(m.group(1)) >= 0.99
    # the same model on the controller's buckets: a listed micro-batch size, 1-8 micro-steps
    m = re.search(r"on AdaptiveBatchSize's buckets \(micro-batches ([\d, ]+), 1-8 micro-steps"
                  r"[^\n]*\n\s+batch (\d+) \(atomic (\d+) x (\d+) micro-steps x 2 replicas\)",
                  text)
    assert m, text
    sizes = [int(x) for x in m.group(1).split(", ")]
    batch, atomic, micro = int(m.group(2)), int(m.group(3)), int(m.group(4))
    assert atomic in sizes and 1 <= micro <= 8 and batch == 2 * atomic * micro >= 64
    assert f"tensorboard --logdir {out / 'tensorboard'}" in text


NU_LINES = re.compile(
    r"^Adam's nu rescaled at (\d+) batch-size switch(?:es)? by nu_switch_factor\(noise scale\): "
    r"x([\d.e+-]+) to x([\d.e+-]+)\n  first: step (\d+), batch (\d+) -> (\d+), "
    r"B_noise = ([\d.e+]+) samples, nu x ([\d.e+-]+)$", re.MULTILINE)


def test_demo_rescales_adam_nu_at_its_switches(demo_run):
    """Run 2 switches configurations by hand (hooks.set_config); at each change of the batch
    size Adam's nu follows (issue 33), by nu_switch_factor of the hooks' noise scale."""
    from goodput_jax.model import gradstats

    r, _, _ = demo_run
    assert r.returncode == 0, r.stderr
    m = NU_LINES.search(r.stdout)
    assert m, r.stdout
    n, lo, hi, step, old, new, phi, factor = m.groups()
    # run 2 resumes at step 50 with the checkpoint's batch (2 x 32) and starts on its first
    # profiled configuration (2 x 64): the first switch, with run 1's statistics
    assert (int(step), int(old), int(new)) == (50, 64, 128)
    assert float(factor) == pytest.approx(
        gradstats.nu_switch_factor(float(phi), 64, 128), rel=1e-4)
    assert 0 < float(factor) < 1  # a switch up lowers nu
    # the batch-size changes of run 2's plan: 64 -> 128 -> 64 (-> 64 on 2 x 32: no change)
    cfg = DemoConfig.from_args(quick=True)
    from goodput_jax.demo import _plan

    sizes = [64] + [a * b for a, b in _plan(_configurations(cfg, 2), cfg.profile_steps, 70)]
    changes = sum(1 for a, b in zip(sizes, sizes[1:]) if a != b)
    assert changes == 4 and 1 <= int(n) <= changes
    assert float(lo) < 1 < float(hi)  # switches up and down


def test_a_hand_switch_rescales_nu_by_the_hooks_noise_scale():
    """The demo's switch helper on a real Adam state and real hooks."""
    import jax.numpy as jnp
    import numpy as np
    import optax

    from goodput_jax.demo import _rescale_nu_at_switch
    from goodput_jax.integrations.hooks import GoodputHooks
    from goodput_jax.model.types import GradParams

    tx = optax.adam(1e-3)
    params = {"w": jnp.ones(3)}
    st = tx.update({"w": jnp.array([1.0, -2.0, 3.0])}, tx.init(params), params)[1]
    hooks = GoodputHooks("demo-nu", init_batch_size=32, atomic_bsz=32, num_replicas=1,
                         num_nodes=1, is_primary=False)
    assert _rescale_nu_at_switch(hooks, st, 96) == (st, None)  # no statistics yet
    hooks.update_grad_params(GradParams(sqr=1.0, var=3.0))  # noise scale 32 * 3 / 1 = 96
    assert _rescale_nu_at_switch(hooks, st, 32) == (st, None)  # the same batch size
    new, rec = _rescale_nu_at_switch(hooks, st, 96)
    assert rec == {"from": 32, "to": 96, "noise_scale": pytest.approx(96.0),
                   "factor": pytest.approx((1 + 96 / 96) / (1 + 96 / 32))}
    np.testing.assert_allclose(np.asarray(new[0].nu["w"]),
                               np.asarray(st[0].nu["w"]) * rec["factor"], rtol=1e-6)
    assert new[0].mu is st[0].mu
    hooks.update_grad_params(GradParams(sqr=0.0, var=3.0))  # infinite noise scale
    assert _rescale_nu_at_switch(hooks, st, 96) == (st, None)
    hooks.close()


def test_demo_checkpoints_are_the_packages(demo_run):
    """The demo's checkpoints are adaptive.checkpoint's (params, optimizer state with the
    gradient statistics, the hooks' state), restorable onto another device count."""
    import jax
    from jax.sharding import Mesh

    from goodput_jax.adaptive import checkpoint
    from goodput_jax.demo import _model_and_optimizer
    from goodput_jax.integrations.hooks import GoodputHooks
    from goodput_jax.model import gradstats

    r, out, _ = demo_run
    assert r.returncode == 0, r.stderr
    cfg = DemoConfig.from_args(quick=True)
    model, tx = _model_and_optimizer(cfg, 2 * cfg.atomic_bsz)  # M0 of the 2-device run
    params = model.init(jax.random.PRNGKey(0), jax.numpy.zeros((1, cfg.features)))
    mngr = checkpoint.manager(out / "checkpoints")
    try:
        assert mngr.latest_step() == 99
        hooks = GoodputHooks("demo", init_batch_size=2 * cfg.atomic_bsz, is_primary=False,
                             num_replicas=1, num_nodes=1)
        step, p, o = checkpoint.restore(mngr, params, tx.init(params), hooks,
                                        Mesh(jax.devices()[:1], ("data",)))
    finally:
        mngr.close()
    assert step == 99
    assert jax.tree.structure(p) == jax.tree.structure(params)
    gp = gradstats.get_grad_params(o)  # the in-step statistics travel in the optimizer state
    assert float(gp.sqr) > 0 and float(gp.var) > 0
    # the hooks' profile at step 99 holds the three configurations the summary lists
    printed = {(int(a), int(b)) for a, b in re.findall(r"profiled r=(\d) b=(\d+)", r.stdout)}
    assert {(k[1], k[2]) for k, e in hooks.profile.items() if e.optim_count} == printed
    assert hooks.grad_params is not None


def test_demo_tensorboard_logs(demo_run):
    r, out, _ = demo_run
    assert r.returncode == 0, r.stderr
    acc = EventAccumulator(str(out / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"goodput/total", "badput/data_loading", "badput/wasted_progress_from_disruption",
            "model/gradient_noise_scale", "model/suggested_batch_size",
            "model/predicted_speedup"} <= tags
    final = acc.Scalars("goodput/total")[-1]
    assert 0 < final.value < 100
    assert final.step == 119  # the job's last productive step


def test_demo_report_html_png(demo_run, tmp_path):
    r, out, _ = demo_run
    assert r.returncode == 0, r.stderr
    html, png = tmp_path / "demo.html", tmp_path / "demo.png"
    r2 = subprocess.run(
        [sys.executable, "-m", "goodput_jax.cli", "report", "--store",
         "sqlite:///" + str(out / "goodput.db"), "--html", str(html), "--png", str(png)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert r2.returncode == 0, r2.stderr
    assert "Goodput report for job 'demo'" in r2.stdout and "no model hints" not in r2.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    doc = html.read_text()
    for section in ('id="timeline"', 'id="breakdown"', 'id="model-curves"', 'id="hints"',
                    'id="productivity"', 'id="advice"'):
        assert section in doc
    # one embedded image per plot: timeline, badput breakdown, goodput vs batch size and vs
    # replicas, and the roofline (the demo records each configuration's program cost)
    assert doc.count("data:image/png;base64,") == 5
    for which in ("timeline", "breakdown", "batch", "replicas", "roofline"):
        assert f'id="img-{which}"' in doc
    # every configuration the demo ran is on the roofline, once
    assert doc.count("<li>train_step r=") == len(_configurations(DemoConfig.from_args(
        quick=True), 2))
    assert "ML Productivity Goodput (scheduling x runtime x program goodput)" in r2.stdout


def test_config_and_progress_bar():
    cfg = DemoConfig.from_args(quick=True, steps=None)
    confs = _configurations(cfg, 4)
    assert confs[-1] == (4, cfg.atomic_bsz) and len(confs) == cfg.extra_configs + 1
    assert all(r * b >= 4 * cfg.atomic_bsz for r, b in confs)  # never below M0
    with pytest.raises(ValueError, match=r"^steps \(3\)"):
        DemoConfig.from_args(quick=False, steps=3)
    cfg = DemoConfig.from_args(steps=240)
    assert cfg.steps == 240 and cfg.crash_at < cfg.steps and cfg.stall_at < cfg.crash_at

    class TTY(io.StringIO):
        def isatty(self):
            return True

    s = TTY()
    bar = ProgressBar(4, stream=s, min_interval=0.0)
    bar.update(2, note="loss 1.0")
    bar.close()
    assert "[##############--------------]  50.0% 2/4" in s.getvalue() and s.getvalue().endswith("\n")
    quiet = io.StringIO()  # not a TTY: nothing is drawn
    bar = ProgressBar(4, stream=quiet)
    bar.update(4)
    bar.close()
    assert quiet.getvalue() == "" and bar.done == 4


def test_demo_bad_arguments(tmp_path, capsys):
    from goodput_jax.cli import main as cli_main

    f = tmp_path / "a-file"
    f.write_text("x")
    assert cli_main(["demo", "--dir", str(f), "--quick", "--no-progress"]) == 2
    assert "--dir" in capsys.readouterr().err
    assert cli_main(["demo", "--dir", str(tmp_path / "d"), "--steps", "2", "--no-progress"]) == 2
    assert "steps (2) must be an integer >= 8" in capsys.readouterr().err
    assert cli_main(["demo", "--dir", str(tmp_path / "d"), "--devices", "0", "--quick"]) == 2
    assert re.search(r"--devices\W.*\b0\b", capsys.readouterr().err)  # names the argument and value
    assert not (tmp_path / "d" / "goodput.db").exists()


# ------------------------------------------------------------------ the truth on its own task
def noise_truth(out: pathlib.Path, cfg: DemoConfig, devices: int,
                step: int | None = None) -> dict:
    """The demo's gradient statistics and suggestion against per-example truth on its own task.

    The demo's batches cycle through its synthetic data pool, so the pool is the population:
    at the parameters and Adam state of the demo's last checkpoint, the per-example gradients
    of every pool sample (``vmap(grad)``), preconditioned with the optimizer's own
    bias-corrected second moment (``auto_preconditioner``, as the in-step statistics are),
    give ``|G|^2``, ``tr(Sigma)`` and ``B = tr(Sigma) / |G|^2``. The estimate is the
    statistics the checkpointed hooks hold (what the demo printed); both suggestions use the
    hooks' own fitted step-time model and limits.
    """
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.flatten_util import ravel_pytree
    from jax.sharding import Mesh

    from goodput_jax.adaptive import checkpoint
    from goodput_jax.demo import SyntheticData, _model_and_optimizer
    from goodput_jax.integrations.hooks import GoodputHooks
    from goodput_jax.model import gradstats as gs
    from goodput_jax.model.types import GradParams

    m0 = devices * cfg.atomic_bsz
    data = SyntheticData(cfg.features, cfg.noise)
    model, tx = _model_and_optimizer(cfg, m0)
    params = model.init(jax.random.PRNGKey(0), data.x[:1])
    opt = tx.init(params)
    hooks = GoodputHooks("demo", init_batch_size=m0, atomic_bsz=cfg.atomic_bsz,
                         max_batch_size=16 * m0, local_bsz_bounds=(8, 8 * cfg.atomic_bsz),
                         gradient_accumulation=True, num_nodes=1, num_replicas=devices,
                         is_primary=False)
    mngr = checkpoint.manager(out / "checkpoints")
    step, params, opt = checkpoint.restore(mngr, params, opt, hooks,
                                           Mesh(jax.devices()[:1], ("data",)), step=step)
    mngr.close()
    pre = gs.auto_preconditioner(opt)
    scales = pre.scales() if pre is not None else jax.tree.map(jnp.ones_like, params)

    def one(p, x, y):
        return jax.grad(lambda q: jnp.mean((model.apply(q, x[None]) - y[None]) ** 2))(p)

    @jax.jit
    def sums(p, x, y):
        g = jax.vmap(one, in_axes=(None, 0, 0))(p, x, y)
        g = jax.tree.map(lambda a, s: a * s, g, scales)
        return (jax.tree.map(lambda a: jnp.sum(a, 0), g),
                sum(jnp.sum(jnp.square(a)) for a in jax.tree.leaves(g)))

    n = data.x.shape[0]
    total, sq = None, 0.0
    for k in range(0, n, 2048):
        t, s = sums(params, data.x[k:k + 2048], data.y[k:k + 2048])
        flat = np.asarray(ravel_pytree(t)[0], np.float64)
        total = flat if total is None else total + flat
        sq += float(s)
    mean = total / n
    sqr = float(mean @ mean)
    tr_sigma = sq / n - sqr
    truth = GradParams(sqr, tr_sigma / m0)
    est = hooks.grad_params
    hooks.refit()
    sug_est = hooks.suggest()
    hooks.update_grad_params(truth)  # the same hooks (fit, limits), the true statistics
    assert hooks.grad_params == pytest.approx(truth)
    sug_true = hooks.suggest()
    return {"step": step, "m0": m0, "truth_sqr": sqr, "truth_var": tr_sigma / m0,
            "truth_noise_scale": tr_sigma / sqr, "est_sqr": float(est.sqr),
            "est_var": float(est.var), "est_noise_scale": float(gs.noise_scale(est, m0)),
            "est_batch": sug_est.batch_size, "est_speedup": sug_est.predicted_speedup,
            "true_batch": sug_true.batch_size, "true_speedup": sug_true.predicted_speedup,
            # the estimate's suggestion judged by the true statistics: its share of the best
            "est_batch_true_goodput_share": float(
                hooks.goodput_function().evaluate(1, devices, sug_est.atomic_bsz,
                                                  sug_est.accum_steps) / sug_true.goodput)}


def _truth_at(model, data, params, opt, m0: int) -> tuple[float, float]:
    """``(|G|^2, tr(Sigma))`` over the demo's whole data pool at ``params``, each example's
    gradient preconditioned with ``opt``'s bias-corrected second moment (as the in-step
    statistics are)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.flatten_util import ravel_pytree

    from goodput_jax.model import gradstats as gs

    pre = gs.auto_preconditioner(opt)
    scales = pre.scales() if pre is not None else jax.tree.map(jnp.ones_like, params)
    total, sq = None, 0.0
    n = data.x.shape[0]
    for k in range(0, n, 4096):
        t, s_ = _truth_sums(model)(params, scales, data.x[k:k + 4096], data.y[k:k + 4096])
        flat = np.asarray(ravel_pytree(t)[0], np.float64)
        total = flat if total is None else total + flat
        sq += float(s_)
    mean = total / n
    sqr = float(mean @ mean)
    return sqr, sq / n - sqr


_SUMS: dict = {}


def _truth_sums(model):
    import jax
    import jax.numpy as jnp

    if id(model) not in _SUMS:
        def one(p, x, y):
            return jax.grad(lambda q: jnp.mean((model.apply(q, x[None]) - y[None]) ** 2))(p)

        def sums(p, scales, x, y):
            g = jax.vmap(one, in_axes=(None, 0, 0))(p, x, y)
            g = jax.tree.map(lambda a, sc: a * sc, g, scales)
            return (jax.tree.map(lambda a: jnp.sum(a, 0), g),
                    sum(jnp.sum(jnp.square(a)) for a in jax.tree.leaves(g)))

        _SUMS[id(model)] = (model, jax.jit(sums))
    return _SUMS[id(model)][1]


def truth_run(cfg: DemoConfig, devices: int, steps: int, checkpoints: tuple[int, ...],
              span: tuple[int, ...] = (15, 10, 5, 0)) -> list[dict]:
    """The demo's own training (its model, Adam, data pool in order, data-parallel step with
    ``gradient_noise_scale`` and ``auto_preconditioner``) in its default configuration; at
    each checkpoint ``t`` the statistics the optimizer state holds against the per-example
    truth averaged over the steps ``t - 15, t - 10, t - 5, t`` (``|G|^2`` and ``tr(Sigma)``
    averaged, then their ratio: at a single iterate the full-batch gradient of this noisy
    regression under Adam swings 4x between checkpoints a few hundred steps apart)."""
    import jax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from goodput_jax.demo import SyntheticData, _make_train_step, _model_and_optimizer
    from goodput_jax.model import gradstats as gs

    m0 = devices * cfg.atomic_bsz
    data = SyntheticData(cfg.features, cfg.noise)
    model, tx = _model_and_optimizer(cfg, m0)
    mesh = Mesh(jax.devices()[:devices], ("data",))
    rep, shard = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    fn = _make_train_step(model, tx, mesh)
    params = model.init(jax.random.PRNGKey(0), data.x[:1])
    params, opt = jax.device_put((params, tx.init(params)), rep)
    near = {c - d: c for c in checkpoints for d in span}
    seen: dict = {c: [] for c in checkpoints}
    rows = []
    for t in range(1, steps + 1):
        params, opt, _ = fn(params, opt, data.batch(t - 1, m0, shard))
        jax.block_until_ready(opt)  # one collective program in flight (busy CPUs)
        if t in near:
            seen[near[t]].append(_truth_at(model, data, params, opt, m0))
        if t in checkpoints:
            gp = gs.get_grad_params(opt)
            sqr = sum(a for a, _ in seen[t]) / len(seen[t])
            tr = sum(b for _, b in seen[t]) / len(seen[t])
            rows.append({"step": t, "m0": m0, "est_sqr": float(gp.sqr),
                         "est_var": float(gp.var),
                         "est_noise_scale": float(gs.noise_scale(gp, m0)),
                         "truth_sqr": sqr, "truth_var": tr / m0, "truth_noise_scale": tr / sqr,
                         "instant_noise_scale": seen[t][-1][1] / seen[t][-1][0]})
    return rows


# Not a test: the truth swings 3x between checkpoints on this task (Adam at a constant
# learning rate on a noisy regression), so a 2x bound at a few points is either loose or
# flaky, and 1200 steps with 32 truth evaluations take 1-4 minutes on two busy cores.
# Measured (4 devices, committed df1d355 statistics, est / truth at 150..1200 every 150):
# 1.71, 2.15, 1.71, 0.59, 0.47, 0.64, 1.48, 0.61.
if __name__ == "__main__":  # python tests/test_demo.py DIR [--quick] [--devices N]
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--step", type=int, default=None, help="a kept checkpoint (default: last)")
    ap.add_argument("--run", type=int, default=0,
                    help="instead: train the demo's task this many steps, truth every 150")
    a = ap.parse_args()
    if a.run:
        cps = tuple(range(150, a.run + 1, 150))
        for row in truth_run(DemoConfig.from_args(quick=a.quick), a.devices, a.run, cps):
            print({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()})
        sys.exit(0)
    for k, v in noise_truth(pathlib.Path(a.dir), DemoConfig.from_args(quick=a.quick),
                            a.devices, a.step).items():
        print(f"{k:>28}: {v}")
