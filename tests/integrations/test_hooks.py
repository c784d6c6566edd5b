"""GoodputHooks: profiling semantics with an injected clock, and a real Flax/optax run end to end."""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from goodput_jax.integrations import GoodputHooks
from goodput_jax.measure.events import EventKind
from goodput_jax.measure.recorder import GoodputRecorder
from goodput_jax.measure.stores.sqlite import SQLiteStore
from goodput_jax.model import gradstats as gs
from goodput_jax.model.types import GradParams, PerfParams

HINT_KEYS = {"perfParams", "gradParams", "initBatchSize", "maxBatchSize", "localBszBounds",
             "gradientAccumulation", "maxProfiledReplicas"}


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t

    def work(self, seconds):
        """A 'train step' that takes ``seconds`` of fake time."""
        def fn():
            self.t += seconds
            return seconds
        return fn


def _store(tmp_path):
    """A store URL inside the test's temporary directory (never ./goodput.db)."""
    return "sqlite:///" + str(tmp_path / "goodput.db")


def _events(store, job):
    return store.read_events(job)[0]


def test_profile_split_first_step_excluded_and_refit_interval(tmp_path):
    store = SQLiteStore(str(tmp_path / "g.db"))
    clock = FakeClock()
    rec = GoodputRecorder("prof", "l", logging_enabled=True, store=store)
    hooks = GoodputHooks("prof", job_warmup_steps=0, init_batch_size=16, atomic_bsz=16, num_nodes=1, num_replicas=1,
                         max_batch_size=128, recorder=rec, refit_interval=1.0, clock=clock,
                         is_primary=True, warmup_steps=1, background=False)
    # Synthetic step times from a known model: t = 0.05 + 0.01 * bsz (one replica).
    step = 0
    for bsz in (8, 16, 32):
        hooks.set_config(atomic_bsz=bsz)
        for _ in range(3):
            hooks.step(step, clock.work(0.05 + 0.01 * bsz))
            step += 1
    e = hooks.profile[(1, 1, 16, 0)]
    assert (e.optim_count, e.accum_count) == (2, 0)  # first step of each config dropped
    assert e.optim_time == pytest.approx(2 * 0.21)
    # Fused accumulation: T = 0.6 with 2 extra micro-steps -> 3 parts of 0.2.
    hooks.set_config(atomic_bsz=16, accum_steps=2)
    for _ in range(2):
        hooks.step(step, clock.work(0.6))
        step += 1
    e = hooks.profile[(1, 1, 16, 2)]
    assert (e.accum_count, e.optim_count) == (2, 1)
    assert e.accum_time == pytest.approx(0.4) and e.optim_time == pytest.approx(0.2)
    # Separate micro-steps (mode (c)): accum_step times accumulation, step the optimizer.
    hooks.set_config(atomic_bsz=8, accum_steps=1)
    for _ in range(2):
        hooks.accum_step(clock.work(0.13))
        hooks.step(step, clock.work(0.15))
        step += 1
    e = hooks.profile[(1, 1, 8, 1)]
    assert (e.accum_count, e.optim_count) == (1, 1)
    assert e.accum_time == pytest.approx(0.13) and e.optim_time == pytest.approx(0.15)
    # ~1.9 s of profiled time with a 1 s interval: refit at least once, not every step.
    assert 1 <= hooks.fit_count < step
    p = hooks.perf_params
    assert isinstance(p, PerfParams)
    assert p.beta_c == pytest.approx(0.01, rel=0.3)
    # No gradient statistics yet: no suggestion, hints without gradParams.
    assert hooks.suggest() is None
    h = hooks.hints()
    assert HINT_KEYS <= set(h) and h["gradParams"] is None and h["maxProfiledReplicas"] == 1
    rec.flush()
    kinds = [ev.kind for ev in _events(store, "prof")]
    assert kinds.count(EventKind.STEP_START) == step and EventKind.HINTS in kinds
    rec.close()
    store.close()


def test_suggestion_from_known_params_and_hint_values():
    hooks = GoodputHooks("s", init_batch_size=32, atomic_bsz=32, num_nodes=1, num_replicas=2,
                         max_batch_size=512, local_bsz_bounds=(8, 128), gradient_accumulation=True,
                         is_primary=False)
    hooks.perf_params = PerfParams(0.121, 0.00568, 0.0236, 0.00634, 0.0118, 0.00317, 1.14)
    hooks.update_grad_params(GradParams(sqr=0.00136, var=0.000502))
    sug = hooks.suggest(tolerance=0.0)  # the argmax
    fn = hooks.goodput_function()
    g, b, s = fn.optimize(1, 2, max_batch_size=512, atomic_bsz_range=(8, 128), accumulation=True)
    assert (sug.atomic_bsz, sug.accum_steps) == (b, s)
    assert sug.batch_size == 2 * b * (s + 1) <= 512
    assert sug.predicted_speedup == pytest.approx(g / fn.evaluate(1, 2, 32, 0), rel=1e-6)
    assert sug.predicted_speedup >= 1.0 - 1e-9
    h = hooks.hints()
    assert h["gradParams"] == {"norm": pytest.approx(0.00136), "var": pytest.approx(0.000502)}
    assert h["gradientNoiseScale"] == pytest.approx(32 * 0.000502 / 0.00136)
    assert h["suggestedBatchSize"] == hooks.suggest().batch_size
    assert h["perfParams"]["gamma"] == pytest.approx(1.14)
    assert h["localBszBounds"] == [8, 128] and h["gradientAccumulation"] is True
    assert h["efficiency"] == pytest.approx(fn.efficiency(64))


def test_numpy_twins_match_the_goodput_function():
    from goodput_jax.model.formulas import efficiency_np as _efficiency_np
    from goodput_jax.model.formulas import throughput_np as _throughput_np

    rng = np.random.default_rng(0)
    for _ in range(5):
        p = PerfParams(*rng.uniform(1e-3, 0.1, 6), rng.uniform(1.0, 3.0))
        g = GradParams(*rng.uniform(1e-4, 1.0, 2))
        fn = GoodputHooks("t", init_batch_size=32, is_primary=False, num_replicas=1)
        fn.perf_params = p
        fn.update_grad_params(g)
        f = fn.goodput_function()
        n, r = rng.integers(1, 3, 8), rng.integers(2, 9, 8)
        b, s = rng.integers(8, 512, 8), rng.integers(0, 4, 8)
        np.testing.assert_allclose(_throughput_np(p, n, r, b, s), f.throughput(n, r, b, s),
                                   rtol=1e-5)
        batch = r * b * (s + 1)
        np.testing.assert_allclose(_efficiency_np(g, 32, batch), f.efficiency(batch), rtol=1e-5)


def _flat_goodput_hooks(name: str, atomic_bsz: int) -> GoodputHooks:
    """4 replicas, M0 = 64, batches up to 8192: compute-light steps and a large noise scale,
    so goodput keeps rising, flatly, to the cap."""
    hooks = GoodputHooks(name, init_batch_size=64, atomic_bsz=atomic_bsz, num_nodes=1,
                         num_replicas=4, max_batch_size=8192, local_bsz_bounds=(8, 512),
                         gradient_accumulation=True, is_primary=False)
    hooks.perf_params = PerfParams(0.003, 2e-6, 0.001, 1e-4, 0.0005, 1e-4, 2.0)
    hooks.update_grad_params(GradParams(sqr=1.0, var=40.0))
    return hooks


def test_suggest_is_the_smallest_batch_within_tolerance_of_the_optimum():
    hooks = _flat_goodput_hooks("tol", 64)
    fn = hooks.goodput_function()
    best = hooks.suggest(tolerance=0.0)
    for tol in (0.05, 0.2):
        sug = hooks.suggest(tolerance=tol)
        assert sug.best_batch_size == best.batch_size and sug.best_goodput == best.goodput
        assert sug.goodput >= (1 - tol) * best.goodput
        assert sug.batch_size < best.batch_size
        # nothing 2% smaller reaches the target (the bisection resolves the cap to 1%)
        g, _, _ = fn.optimize(1, 4, max_batch_size=int(0.98 * sug.batch_size),
                              atomic_bsz_range=(8, 512), accumulation=True)
        assert g < (1 - tol) * best.goodput
    assert hooks.suggest(tolerance=0.2).batch_size < hooks.suggest(tolerance=0.05).batch_size
    with pytest.raises(ValueError, match=r"tolerance \(1\.0\)"):
        hooks.suggest(tolerance=1.0)


def test_suggest_on_listed_micro_batch_sizes_is_the_best_of_that_grid():
    from goodput_jax.adaptive import default_atomic_sizes

    hooks = _flat_goodput_hooks("grid", 16)
    sizes = default_atomic_sizes(hooks)
    assert sizes == [8, 16, 32, 64, 128, 256, 512]
    fn = hooks.goodput_function()
    # brute force over the grid, through the jitted goodput function (not the numpy twins)
    grid = {(b, s): float(fn.evaluate(1, 4, b, s)) for b in sizes for s in range(8)
            if 64 <= 4 * b * (s + 1) <= 8192}
    for tol in (0.0, 0.05, 0.2):
        sug = hooks.suggest(tolerance=tol, atomic_sizes=sizes)
        best = max(grid, key=grid.get)
        assert sug.best_batch_size == 4 * best[0] * (best[1] + 1)
        assert sug.best_goodput == pytest.approx(grid[best], rel=1e-5)
        ok = [k for k, g in grid.items() if g >= (1 - tol - 1e-6) * grid[best]]
        smallest = min(4 * b * (s + 1) for b, s in ok)
        assert sug.batch_size == smallest and sug.atomic_bsz in sizes and sug.accum_steps <= 7
        assert sug.goodput == pytest.approx(
            max(grid[k] for k in ok if 4 * k[0] * (k[1] + 1) == smallest), rel=1e-5)
    # the grid's answer is never better than the continuous optimum
    assert hooks.suggest(tolerance=0.0, atomic_sizes=sizes).goodput <= (
        hooks.suggest(tolerance=0.0).goodput * (1 + 1e-6))
    # one size, no accumulation: that size, whatever the model says
    one = hooks.suggest(atomic_sizes=[32], max_accum_steps=0)
    assert (one.atomic_bsz, one.accum_steps, one.batch_size) == (32, 0, 128)
    with pytest.raises(ValueError, match=r"atomic_sizes \(\[0, 8\]\)"):
        hooks.suggest(atomic_sizes=[0, 8])
    with pytest.raises(ValueError, match=r"atomic_sizes \(\[4\]\).*local_bsz_bounds"):
        hooks.suggest(atomic_sizes=[4])
    with pytest.raises(ValueError, match=r"max_accum_steps \(-1\)"):
        hooks.suggest(atomic_sizes=[8], max_accum_steps=-1)


def test_periodic_refits_only_when_the_profile_changed_materially(tmp_path):
    clock = FakeClock()
    hooks = GoodputHooks("mat", job_warmup_steps=0, init_batch_size=8, atomic_bsz=8, num_nodes=1, num_replicas=1,
                         max_batch_size=64, clock=clock, is_primary=True, refit_interval=0.5,
                         store=_store(tmp_path),
                         warmup_steps=0, background=False, refit_tolerance=0.05)
    step = 0

    def run(n, seconds):
        nonlocal step
        for _ in range(n):
            hooks.step(step, clock.work(seconds))
            step += 1

    run(6, 0.1)
    assert hooks.fit_count == 1
    run(30, 0.1)  # same times: every later periodic refit is skipped
    assert hooks.fit_count == 1 and hooks.refits_skipped >= 4
    hooks.set_config(atomic_bsz=16)  # a new configuration: refit
    run(6, 0.15)
    assert hooks.fit_count == 2
    hooks.set_config(atomic_bsz=8)
    run(70, 0.13)  # the median of a known configuration moved by 30%: refit
    assert hooks.fit_count >= 3
    assert hooks.refit() is hooks.perf_params  # an explicit refit always fits
    with pytest.raises(ValueError, match=r"refit_tolerance \(-1\)"):
        GoodputHooks("j", init_batch_size=8, num_replicas=1, is_primary=False, refit_tolerance=-1)


def test_non_primary_does_not_fit_or_publish():
    clock = FakeClock()
    hooks = GoodputHooks("np", job_warmup_steps=0, init_batch_size=8, num_replicas=1, num_nodes=1, refit_interval=0.0,
                         clock=clock, is_primary=False, warmup_steps=1)
    for i in range(4):
        hooks.step(i, clock.work(0.1))
    assert hooks.fit_count == 0 and hooks.perf_params is None and hooks.last_hints is None
    assert hooks.profile[(1, 1, 8, 0)].optim_count == 3


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"init_batch_size \(0\)"):
        GoodputHooks("j", init_batch_size=0, is_primary=False)
    with pytest.raises(ValueError, match=r"num_nodes \(2\) > num_replicas \(1\)"):
        GoodputHooks("j", init_batch_size=8, num_nodes=2, num_replicas=1, is_primary=False)
    with pytest.raises(ValueError, match=r"max_batch_size \(4\) < init_batch_size \(8\)"):
        GoodputHooks("j", init_batch_size=8, max_batch_size=4, num_replicas=1, is_primary=False)
    with pytest.raises(ValueError, match="local_bsz_bounds"):
        GoodputHooks("j", init_batch_size=8, local_bsz_bounds=(9, 3), num_replicas=1,
                     is_primary=False)
    h = GoodputHooks("j", init_batch_size=8, num_replicas=1, is_primary=False)
    with pytest.raises(ValueError, match=r"accum_steps \(-1\)"):
        h.set_config(accum_steps=-1)


# ----------------------------------------------------------------------------- end to end


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(1)(nn.relu(nn.Dense(32)(x)))[..., 0]


M0 = 16


def test_real_flax_training_run_end_to_end(tmp_path):
    model = MLP()
    key = jax.random.key(0)
    w_true = jax.random.normal(key, (8,))
    params = model.init(key, jnp.ones((1, 8)))
    tx = optax.chain(gs.gradient_noise_scale(M0), optax.adam(1e-2))
    opt_state = tx.init(params)

    def loss_fn(p, batch):
        return jnp.mean((model.apply(p, batch["x"]) - batch["y"]) ** 2)

    @functools.partial(jax.jit, donate_argnums=(0, 1))  # donated state: hooks must copy stats
    def train_step(params, opt_state, batch):
        pre = gs.auto_preconditioner(opt_state)
        loss, grads, sq = gs.microbatch_grads(loss_fn, params, batch, 2, preconditioner=pre)
        updates, opt_state = tx.update(grads, opt_state, params, grad_sqnorms=sq)
        return optax.apply_updates(params, updates), opt_state, loss

    store = SQLiteStore(str(tmp_path / "e2e.db"))
    hooks = GoodputHooks("e2e", init_batch_size=M0, atomic_bsz=M0, num_nodes=1, num_replicas=1,
                         max_batch_size=256, local_bsz_bounds=(4, 128), gradient_accumulation=True,
                         store=store, refit_interval=1e9, is_primary=True)
    step = 0
    with hooks.job():
        for bsz in (8, 16, 32):
            hooks.set_config(atomic_bsz=bsz)
            for _ in range(10):  # Adam: the statistics start once nu rests on ~20 steps
                k = jax.random.fold_in(key, step)
                x = jax.random.normal(k, (bsz, 8))
                batch = {"x": x, "y": x @ w_true + 0.5 * jax.random.normal(k, (bsz,))}
                params, opt_state, loss = hooks.step(step, train_step, params, opt_state, batch)
                step += 1
    assert np.isfinite(float(loss))
    assert hooks.fit_count == 1  # the final refit on leaving job()
    assert isinstance(hooks.perf_params, PerfParams)
    assert all(np.isfinite(v) and v > 0 for v in hooks.perf_params)
    gp = hooks.grad_params
    assert gp is not None and gp.var >= 1e-6 and gp.sqr >= 0.0
    np.testing.assert_allclose(gp, [float(v) for v in gs.get_grad_params(opt_state)], rtol=1e-6)
    sug = hooks.suggest()
    assert sug is not None
    assert 4 <= sug.atomic_bsz <= 128 and sug.batch_size <= 256 and sug.predicted_speedup > 0
    hooks.close()
    events = _events(store, "e2e")
    hints = [ev.payload for ev in events if ev.kind == EventKind.HINTS]
    assert hints and HINT_KEYS <= set(hints[-1])
    assert hints[-1]["gradParams"]["norm"] == pytest.approx(gp.sqr, rel=1e-6)
    assert hints[-1]["suggestedAtomicBsz"] == sug.atomic_bsz
    kinds = [ev.kind for ev in events]
    assert kinds[0] == EventKind.JOB_START and kinds[-1] == EventKind.JOB_END
    assert kinds.count(EventKind.STEP_START) == step
    store.close()


# ----------------------------------------------------------------------------- new behaviour


def test_one_step_late_timer_overlaps_and_measures_device_intervals():
    """step() returns before its outputs are ready; times are device-busy intervals."""
    from goodput_jax.integrations.hooks import OneStepLateTimer

    timer = OneStepLateTimer(lambda: 9.0)
    # Host-side (already ready) outputs complete at once: [t_start, t_dispatched].
    (s0, d0, _, _), = timer.dispatched(0, None, 0.0, 0.5)
    (s1, d1, _, _), = timer.dispatched(1, None, 0.7, 1.0)
    assert (s0, s1) == (0, 1) and (d0, d1) == pytest.approx((0.5, 0.3))
    # Real JAX: a slow step is not waited for on its own call, only on the next one.
    f = jax.jit(lambda x: jnp.tanh(jnp.tanh(x @ x) @ x) @ x)
    # ~100 ms a step on 2 cores: still running when step() returns, even on a loaded host
    x = jnp.ones((1280, 1280)) / 1280
    f(x).block_until_ready()
    hooks = GoodputHooks("late", job_warmup_steps=0, init_batch_size=8, num_replicas=1, num_nodes=1, is_primary=False,
                         warmup_steps=0)
    out0 = hooks.step(0, f, x)
    assert not out0.is_ready()  # the training thread was not blocked
    out1 = hooks.step(1, f, x)
    assert out0.is_ready() and not out1.is_ready()  # waited for step 0 only
    hooks.flush()
    e = hooks.profile[(1, 1, 8, 0)]
    assert e.optim_count == 2 and all(v > 0 for v in e.optim_samples)


def test_warmup_robust_stats_weighted_fit_model_error_and_replica_limit(tmp_path):
    clock = FakeClock()
    hooks = GoodputHooks("w", job_warmup_steps=0, init_batch_size=16, atomic_bsz=16, num_nodes=1, num_replicas=1,
                         max_batch_size=256, clock=clock, is_primary=True, refit_interval=1e9,
                         store=_store(tmp_path),
                         warmup_steps=2, background=False)
    step = 0
    rng = np.random.default_rng(0)
    for bsz in (16, 32, 64):
        hooks.set_config(atomic_bsz=bsz)
        for i in range(12):
            t = 0.05 + 0.002 * bsz
            if i < 2:
                t += 5.0  # compile / warm-up: dropped
            elif i == 7:
                t *= 4.0  # one straggler: the median ignores it
            hooks.step(step, clock.work(t * (1 + 0.01 * rng.normal())))
            step += 1
    table = hooks.profile_table()
    assert set(table) == {(1, 1, 16), (1, 1, 32), (1, 1, 64)}
    for (_, _, b), (acc, opt, n) in table.items():
        assert n == 10 and opt == pytest.approx(0.05 + 0.002 * b, rel=0.03)
    hooks.refit()
    assert hooks.model_error < 0.05 and len(hooks.model_errors) == 3
    hooks.update_grad_params(GradParams(sqr=1e-3, var=1e-2))
    sug = hooks.suggest()
    assert sug.confident and sug.profiled_configs == 3 and sug.model_error == hooks.model_error
    assert sug.num_replicas == 1
    assert hooks.suggest(num_replicas=2).num_replicas == 2  # 2x the profiled replicas: allowed
    with pytest.raises(ValueError, match=r"num_replicas \(3\) > 2"):
        hooks.suggest(num_replicas=3)
    # State round trip (checkpoints): profile, fit, statistics, configuration.
    st = hooks.state_dict()
    import json

    other = GoodputHooks("w2", job_warmup_steps=0, init_batch_size=16, num_nodes=1, num_replicas=2, is_primary=False)
    other.load_state_dict(json.loads(json.dumps(st)))
    assert other.profile_table() == table and other.perf_params == hooks.perf_params
    assert other.grad_params == hooks.grad_params and other.atomic_bsz == 64
    assert other.num_replicas == 2  # the new topology stays
    assert other.model_error == pytest.approx(hooks.model_error)


def test_job_warmup_drops_the_process_first_steps_once(tmp_path):
    """A process's first steps are slow (cold caches, thread pools): beyond each
    configuration's ``warmup_steps``, the first ``job_warmup_steps`` of the process are
    dropped, once; a configuration that is not revisited does not keep them."""
    clock = FakeClock()
    hooks = GoodputHooks("jw", init_batch_size=16, atomic_bsz=16, num_nodes=1, num_replicas=1,
                         max_batch_size=256, clock=clock, is_primary=True, refit_interval=1e9,
                         store=_store(tmp_path),
                         warmup_steps=2, job_warmup_steps=8, background=False)
    assert hooks.job_warmup_steps == 8
    step = 0
    for bsz in (16, 32):
        hooks.set_config(atomic_bsz=bsz)
        for i in range(20):
            slow = bsz == 16 and i < 10  # the process warms up over its first 10 steps
            hooks.step(step, clock.work((0.05 + 0.002 * bsz) * (6.0 if slow else 1.0)))
            step += 1
    table = hooks.profile_table()
    assert table[(1, 1, 16)][2] == 10 and table[(1, 1, 32)][2] == 18
    for (_, _, b), (_acc, opt, _n) in table.items():
        assert opt == pytest.approx(0.05 + 0.002 * b, rel=1e-6)
    with pytest.raises(ValueError, match=r"job_warmup_steps \(-1\)"):
        GoodputHooks("j", init_batch_size=8, num_replicas=1, is_primary=False, job_warmup_steps=-1)


def test_background_refit_publishes_off_the_training_thread(tmp_path):
    import threading

    store = SQLiteStore(str(tmp_path / "bg.db"))
    rec = GoodputRecorder("bg", "l", logging_enabled=True, store=store)
    clock = FakeClock()
    hooks = GoodputHooks("bg", job_warmup_steps=0, init_batch_size=16, atomic_bsz=16, num_nodes=1, num_replicas=1,
                         recorder=rec, clock=clock, is_primary=True, refit_interval=0.5,
                         warmup_steps=1, background=True)
    threads = []
    orig = hooks.refit

    def spy():
        threads.append(threading.current_thread().name)
        return orig()

    hooks.refit = spy
    step = 0
    for bsz in (16, 32):
        hooks.set_config(atomic_bsz=bsz)
        for _ in range(4):
            hooks.step(step, clock.work(0.1 + 0.01 * bsz))
            step += 1
    hooks.wait_refit()
    assert threads and all(n.startswith("goodput-refit") for n in threads)
    assert hooks.fit_count >= 1 and hooks.cost()["background"] > 0
    hooks.close()
    rec.close()
    assert any(ev.kind == EventKind.HINTS for ev in _events(store, "bg"))
    store.close()


def test_fit_of_two_batch_sizes_fitted_exactly_by_the_line_is_not_stuck_at_its_start():
    # Regression (adaptive_bench, "model error 2.68"): two atomic sizes on 4 replicas,
    # no accumulation, so the accumulation line fits both medians up to float32 rounding.
    # The RMSE's kink at zero made every line-search trial fail and the fit stayed at its
    # start (network terms = alpha_c: 2.5-3x the measured step), blocking every switch.
    from goodput_jax.model.formulas import predict_optim_time_np as _predict_optim_np
    from goodput_jax.model.perf import fit_perf_params

    cases = []
    rng = np.random.default_rng(0)
    for _ in range(300):  # the draws of the scan that found it (20 of 300 stuck before)
        k = rng.integers(2, 5)
        bs = [8, 16, 32, 64, 128][:k]
        base, slope = rng.uniform(1e-3, 6e-3), rng.uniform(0, 4e-5)
        t = np.array([base + slope * b for b in bs]) * rng.uniform(0.7, 1.3, k)
        w = rng.integers(3, 64, k).astype(float)
        if k == 2 and t[0] < t[1] < 2 * t[0]:  # a line with alpha_c > 0 fits both exactly
            cases.append((t, w))
    assert len(cases) >= 20
    for t, w in cases:
        t = np.asarray(t)
        n, r, b = np.ones(len(t)), np.full(len(t), 4), np.array([8, 16][:len(t)])
        p = fit_perf_params(n, r, b, t, t, weights=w)
        err = np.abs(_predict_optim_np(p, n, r, b) - t) / t
        assert err.max() < 0.02, (t, w, p)


def test_profile_quantile_is_the_fit_statistic():
    h = GoodputHooks("q", job_warmup_steps=0, init_batch_size=8, is_primary=False, num_replicas=1, warmup_steps=0,
                     profile_quantile=0.25)
    for t in (0.1, 0.2, 0.3, 0.4, 0.5):
        h.observe_step_time(t)
    assert h.profile_table()[(1, 1, 8)][1] == pytest.approx(0.2)
    for bad in (0.0, 0.75, "x"):
        with pytest.raises(ValueError, match="profile_quantile"):
            GoodputHooks("q", init_batch_size=8, is_primary=False, num_replicas=1,
                         profile_quantile=bad)


def test_profile_window_keeps_the_newest_samples_and_survives_a_checkpoint():
    from goodput_jax.integrations.hooks import PROFILE_WINDOW

    times = [0.001 * (i + 1) for i in range(100)]  # 1 ms .. 100 ms, rising
    default = GoodputHooks("w", job_warmup_steps=0, init_batch_size=8, is_primary=False,
                           num_replicas=1, warmup_steps=0)
    wide = GoodputHooks("w", job_warmup_steps=0, init_batch_size=8, is_primary=False,
                        num_replicas=1, warmup_steps=0, profile_window=1000)
    for h in (default, wide):
        for t in times:
            h.observe_step_time(t)
    # the default window holds the newest 64: its median is that of 37..100 ms
    assert default.profile_table()[(1, 1, 8)] == pytest.approx(
        (np.median(times[-PROFILE_WINDOW:]),) * 2 + (100,))
    assert wide.profile_table()[(1, 1, 8)][1] == pytest.approx(np.median(times))  # all 100
    # a checkpoint restores into the restoring hooks' window
    state = wide.state_dict()
    back = GoodputHooks("w", job_warmup_steps=0, init_batch_size=8, is_primary=False,
                        num_replicas=1, warmup_steps=0, profile_window=10)
    back.load_state_dict(state)
    assert back.profile_table()[(1, 1, 8)][1] == pytest.approx(np.median(times[-10:]))
    same = GoodputHooks("w", job_warmup_steps=0, init_batch_size=8, is_primary=False,
                        num_replicas=1, warmup_steps=0, profile_window=1000)
    same.load_state_dict(state)
    assert same.profile_table() == wide.profile_table()
    for bad in (0, -3, 2.5, True, "64"):
        with pytest.raises(ValueError, match=r"^profile_window \("):
            GoodputHooks("w", init_batch_size=8, is_primary=False, num_replicas=1,
                         profile_window=bad)


def test_timed_steps_are_folded_in_batches_without_loss_or_reordering(tmp_path):
    """The training thread only appends each timed step; any reader of the profile (the
    property, profile_table, a refit, another thread) folds them in first, with the same
    warm-up drops and refit trigger as one step at a time."""
    import threading

    clock = FakeClock()
    hooks = GoodputHooks("fold", init_batch_size=8, atomic_bsz=8, num_nodes=1, num_replicas=1,
                         clock=clock, is_primary=True, refit_interval=0.35, warmup_steps=2,
                         store=_store(tmp_path),
                         job_warmup_steps=1, background=False)
    for i in range(4):  # 2 + 1 warm-up steps dropped, 0.1 s each: no refit on them
        hooks.step(i, clock.work(0.1))
    assert hooks.fit_count == 0 and len(hooks._raw) in (0, 4)
    assert hooks.profile[(1, 1, 8, 0)].optim_count == 1  # folded in by the property
    assert hooks._since_fit == pytest.approx(0.1)
    for i in range(4, 7):
        hooks.step(i, clock.work(0.1))
    assert hooks.fit_count == 1  # 0.4 s of kept steps >= refit_interval
    # a reader on another thread while the loop runs: every sample arrives exactly once
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            hooks.profile_table()

    t = threading.Thread(target=reader)
    t.start()
    hooks.refit_interval = 1e9
    for i in range(7, 2007):
        hooks.step(i, clock.work(0.001 * (1 + i % 3)))
    stop.set()
    t.join()
    e = hooks.profile[(1, 1, 8, 0)]
    assert e.optim_count == 2007 - 3
    assert e.optim_time == pytest.approx(0.4 + sum(0.001 * (1 + i % 3) for i in range(7, 2007)))
    assert list(e.optim_samples)[-3:] == pytest.approx([0.001 * (1 + i % 3) for i in (2004, 2005, 2006)])


def test_grad_params_nowait_keeps_the_previous_statistics_while_the_step_runs():
    @jax.jit
    def slow_summary(x):  # a few hundred ms of matmuls, then [count, sqr, var]
        y = jax.lax.fori_loop(0, 6, lambda _, a: jnp.tanh(a @ a), x)
        return jnp.stack([jnp.float32(5.0), 4.0 + 0.0 * y[0, 0], jnp.float32(8.0)])

    x = jnp.full((900, 900), 1e-3, jnp.float32)
    slow_summary(x).block_until_ready()  # compiled
    h = GoodputHooks("nw", init_batch_size=8, is_primary=False, num_replicas=1)
    h.update_grad_params(GradParams(1.0, 2.0))
    pending = []

    def train_step():
        return jnp.zeros(())

    def summary():
        pending.append(slow_summary(x))
        return pending[-1]

    train_step.stats_summary = summary
    h.step(0, train_step)
    out = pending[-1]
    assert not out.is_ready()  # the step that produced the statistics still runs
    assert h.grad_params_nowait() == GradParams(1.0, 2.0)  # no wait: the previous ones
    out.block_until_ready()
    assert h.grad_params_nowait() == GradParams(4.0, 8.0) and h.grad_count == 5
    assert h.grad_params == GradParams(4.0, 8.0)


def test_a_step_function_shared_by_two_loops_gives_each_its_own_statistics():
    """``stats_summary()`` is the last call's, whichever loop made it: a loop's flush (at a
    checkpoint, at the end) keeps the statistics of its own last step."""
    last = [None]

    def train_step(sqr, var):
        last[0] = jnp.array([3.0, sqr, var], jnp.float32)
        return jnp.zeros(())

    train_step.stats_summary = lambda: last[0]
    a = GoodputHooks("share-a", init_batch_size=8, is_primary=False, num_replicas=1)
    b = GoodputHooks("share-b", init_batch_size=8, is_primary=False, num_replicas=1)
    for i in range(25):  # statistics due at some steps, not at others
        a.step(i, train_step, 1.0, 10.0 + i)
        b.step(i, train_step, 2.0, 50.0 + i)
    a.flush()
    b.flush()
    assert a.grad_params == GradParams(1.0, 34.0)
    assert b.grad_params == GradParams(2.0, 74.0)
