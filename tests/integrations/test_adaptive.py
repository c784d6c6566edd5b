"""goodput_jax.adaptive: bounded recompiles, exact accumulation, LR rules, the controller's decisions."""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from goodput_jax.adaptive import (
    AdaptiveBatchSize,
    ArraySource,
    IterableSource,
    adaptive_optimizer,
    make_train_step,
    progress_of,
    slots_for,
)
from goodput_jax.integrations.hooks import GoodputHooks
from goodput_jax.model.types import GradParams


def _loss(p, b):
    return jnp.mean((b["x"] @ p["w"] + p["c"] - b["y"]) ** 2)


M0 = 8
R = jax.device_count()


@pytest.fixture(scope="module")
def linear_step():
    tx = adaptive_optimizer(optax.sgd(0.1), M0, rule="linear")
    return tx, make_train_step(_loss, tx, donate=False)


def _batch(rng, slots, per_slot, fill=None):
    x = rng.normal(size=(slots, per_slot, 3)).astype(np.float32)
    y = rng.normal(size=(slots, per_slot)).astype(np.float32)
    if fill is not None:
        x[fill:] = np.nan  # padded slots must never be read
        y[fill:] = np.nan
    return {"x": x, "y": y}


def test_accumulation_is_exact_ignores_padding_and_scales_lr(linear_step):
    tx, step = linear_step
    rng = np.random.default_rng(0)
    p = {"w": jnp.array([0.1, -0.2, 0.3]), "c": jnp.float32(0.5)}
    st = tx.init(p)
    b = 4 * R
    batch = _batch(rng, 4, b, fill=3)  # 3 microbatches in 4 slots
    new_p, st2, loss = step(p, st, batch, np.int32(3))
    flat = {k: v[:3].reshape((3 * b,) + v.shape[2:]) for k, v in batch.items()}
    want_loss, g = jax.value_and_grad(_loss)(p, flat)
    scale = 3 * b / M0  # linear rule: lr * M / M0
    for k, v in p.items():
        np.testing.assert_allclose(new_p[k], v - 0.1 * scale * g[k], rtol=2e-5, atol=1e-6)
    assert float(loss) == pytest.approx(float(want_loss), rel=1e-5)
    # Progress counts scale-invariant steps (the AdaScale gain, <= scale).
    assert 1.0 <= float(progress_of(st2)) <= scale + 1e-5
    # Gradient statistics: with several replicas the parts are the replicas' accumulated
    # gradients (R parts of 3 * 4 examples; device d holds rows d*4:(d+1)*4 of every slot).
    from goodput_jax.model import gradstats

    if R > 1:
        parts = [jax.grad(_loss)(p, {k: v[:3, d * 4:(d + 1) * 4].reshape((12,) + v.shape[2:])
                                     for k, v in batch.items()}) for d in range(R)]
        sqn = [sum(float(jnp.sum(x ** 2)) for x in jax.tree.leaves(gp)) for gp in parts]
        S, T = np.mean(sqn), sum(float(jnp.sum(x ** 2)) for x in jax.tree.leaves(g))
        big, small = 3 * b, 12
        want_sqr = (big * T - small * S) / (big - small)
        want_var = (S - T) / (1 / small - 1 / big) / M0
        got = gradstats.get_grad_params(st2)
        assert float(got.sqr) == pytest.approx(max(want_sqr, 0.0), rel=1e-3, abs=1e-6)
        assert float(got.var) == pytest.approx(want_var, rel=1e-3)


def test_changing_accumulation_does_not_recompile_atomic_sizes_do_once(linear_step):
    tx, step = linear_step
    rng = np.random.default_rng(1)
    p = {"w": jnp.zeros(3), "c": jnp.float32(0.0)}
    st = tx.init(p)
    before = step.traces()
    for n in (3, 4, 3, 4):  # slots 4: one compile for all four
        p, st, _ = step(p, st, _batch(rng, slots_for(n), 2 * R), np.int32(n))
    assert step.traces() - before == 1
    for n in (5, 8, 6):  # slots 8: one more
        p, st, _ = step(p, st, _batch(rng, slots_for(n), 2 * R), np.int32(n))
    assert step.traces() - before == 2
    p, st, _ = step(p, st, _batch(rng, 4, 3 * R), np.int32(2))  # new atomic size: one more
    p, st, _ = step(p, st, _batch(rng, 4, 2 * R), np.int32(4))  # back to an old shape: none
    assert step.traces() - before == 3


@pytest.mark.parametrize("rule", ["adascale", "adam", "sqrt", "legw"])
def test_every_rule_runs_without_recompiling_on_batch_changes(rule):
    kw = {"base_warmup_epochs": 1.0, "data_size": 256} if rule == "legw" else {}
    base = optax.adam(1e-2) if rule == "adam" else optax.sgd(0.05)
    tx = adaptive_optimizer(base, M0, rule=rule, **kw)
    step = make_train_step(_loss, tx, donate=False)
    rng = np.random.default_rng(2)
    p = {"w": jnp.zeros(3), "c": jnp.float32(0.0)}
    st = tx.init(p)
    for n in (1, 2, 1, 2):
        p, st, loss = step(p, st, _batch(rng, 2, 2 * R), np.int32(n))
    assert step.traces() == 1 and np.isfinite(float(loss))
    assert float(progress_of(st)) > 0


def test_sources_positions_restore():
    src = ArraySource({"x": np.arange(10)}, seed=3)
    first = src.take(7)["x"]
    st = src.state_dict()
    nxt = src.take(6)["x"]
    assert sorted(np.concatenate([first, nxt[:3]]).tolist()) == list(range(10))  # an epoch
    other = ArraySource({"x": np.arange(10)}, seed=0)
    other.load_state_dict(st)
    assert other.take(6)["x"].tolist() == nxt.tolist()
    it = IterableSource(lambda: ({"v": np.float32(i)} for i in range(5)))
    it.take(3)
    s = it.state_dict()
    again = IterableSource(lambda: ({"v": np.float32(i)} for i in range(5)))
    again.load_state_dict(s)
    assert again.take(4)["v"].tolist() == [3.0, 4.0, 0.0, 1.0]
    with pytest.raises(ValueError, match="leading size"):
        ArraySource({"x": np.zeros(3), "y": np.zeros(4)})


def _store(tmp_path, *tag) -> str:
    """A store URL inside the test's temporary directory (never ./goodput.db), one per run."""
    name = "-".join(str(t) for t in tag) or "goodput"
    return "sqlite:///" + str(tmp_path / f"{name}.db")


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_controller_explores_step_by_step_with_hysteresis(tmp_path):
    """A noisy job whose step time is 0.01 + 0.001 * b per replica: bigger batches pay off.

    The controller must climb at most ``explore_factor`` x the largest profiled
    batch per switch, wait for ``patience`` agreeing checks, use only the
    atomic-size set, and stop at the goodput optimum.
    """
    def run(immediate_gain):
        clock = FakeClock()
        hooks = GoodputHooks("ctl", init_batch_size=16, atomic_bsz=16, num_nodes=1,
                             num_replicas=1, max_batch_size=512, local_bsz_bounds=(8, 128),
                             gradient_accumulation=True, clock=clock, is_primary=True,
                             refit_interval=1e9, warmup_steps=1, background=False,
                             store=_store(tmp_path, immediate_gain))
        # Gradient noise scale ~ 16 * 1.0 / 0.002 = 8000 samples: large batches stay efficient.
        hooks.update_grad_params(GradParams(sqr=0.002, var=1.0))
        ctl = AdaptiveBatchSize(hooks, {"x": np.zeros((4096, 1), np.float32)}, adapt_every=5,
                                patience=2, min_samples=4, immediate_gain=immediate_gain)

        def fake_step(params, opt_state, batch, n):
            b = batch["x"].shape[1]
            clock.t += int(n) * (0.01 + 0.001 * b)
            return params, opt_state, 0.0

        for i in range(400):
            ctl.step(i, fake_step, None, None)
        return hooks, ctl

    # A large predicted gain from a larger batch switches at the first check: the climb
    # to 128 takes fewer steps than with patience on every switch (tested below).
    _, fast = run(1.25)
    hooks, ctl = run(math.inf)
    first = [next(sw["step"] for sw in c.switches if sw["batch_size"] >= 128)
             for c in (fast, ctl)]
    assert first[0] < first[1], first
    assert ctl.switches, "never switched"
    prev = 16
    for sw in ctl.switches:
        assert sw["batch_size"] <= 2 * prev + 1e-9  # step-by-step exploration
        assert sw["speedup"] > 1.05
        prev = max(prev, sw["batch_size"])
    assert set(ctl.atomic_sizes) <= {8, 16, 32, 64, 128}
    assert ctl.batch_size >= 128  # climbed towards the large optimum
    assert hooks.model_error < 0.05
    # Hysteresis: no switch right after another (patience x adapt_every steps at least).
    steps = [sw["step"] for sw in ctl.switches]
    assert all(b - a >= 10 for a, b in itertools.pairwise(steps))
    # The state round-trips (JSON) and maps the batch onto another replica count.
    import json

    st = json.loads(json.dumps(ctl.state_dict()))
    h2 = GoodputHooks("ctl2", init_batch_size=16, num_nodes=1, num_replicas=2, is_primary=False,
                      max_batch_size=512, local_bsz_bounds=(8, 128), gradient_accumulation=True)
    c2 = AdaptiveBatchSize(h2, {"x": np.zeros((4096, 1), np.float32)})
    c2.load_state_dict(st)
    assert c2.batch_size == ctl.batch_size and c2.accum_steps == ctl.accum_steps
    assert h2.perf_params == hooks.perf_params


def test_fixed_arm_never_switches():
    clock = FakeClock()
    hooks = GoodputHooks("fixed", init_batch_size=16, num_nodes=1, num_replicas=1,
                         max_batch_size=256, clock=clock, is_primary=False, warmup_steps=0)
    ctl = AdaptiveBatchSize(hooks, {"x": np.zeros((64, 1))}, adaptive=False, adapt_every=1)

    def fake_step(params, opt_state, batch, n):
        clock.t += 0.01
        return params, opt_state, 0.0

    for i in range(20):
        ctl.step(i, fake_step, None, None)
    assert ctl.batch_size == 16 and not ctl.switches
    with pytest.raises(ValueError, match="speedup_threshold"):
        AdaptiveBatchSize(hooks, {"x": np.zeros(4)}, speedup_threshold=0.5)


def test_switch_waits_for_a_background_compile_then_costs_no_trace():
    """A new batch shape is compiled ahead on a background thread; the switch happens after."""
    clock = FakeClock()
    tx = adaptive_optimizer(optax.sgd(0.05), M0, rule="adascale")
    step = make_train_step(_loss, tx)
    hooks = GoodputHooks("aot", init_batch_size=M0 * R, num_nodes=1, num_replicas=R,
                         atomic_bsz=M0, max_batch_size=64 * R, is_primary=False, warmup_steps=0)
    rng = np.random.default_rng(5)
    data = {"x": rng.normal(size=(4096, 3)).astype(np.float32),
            "y": rng.normal(size=4096).astype(np.float32)}
    ctl = AdaptiveBatchSize(hooks, data, batch_sharding=step.batch_sharding)
    p = {"w": jnp.zeros(3), "c": jnp.float32(0.0)}
    st = tx.init(p)
    p, st, _ = ctl.step(0, step, p, st)
    ctl._step_ref = (step, p, st)
    target = (2 * M0, 0)
    assert not ctl._ready(target)  # starts the background compile
    like = ctl.batch_like(*target)
    fut = step.precompile(p, st, like)
    fut.result(timeout=120)
    assert ctl._ready(target) and step.is_compiled(like)
    traces = step.traces()
    ctl.set_config(*target)
    p, st, loss = ctl.step(1, step, p, st)
    assert step.traces() == traces and np.isfinite(float(loss))  # the AOT executable ran
    assert jax.tree.leaves(ctl.next_batch()[0])[0].shape[1] == 2 * M0 * R
    del clock


def test_no_decision_on_the_first_steps_gradient_statistics(tmp_path):
    """The first statistics (read at step 0) hold one step: their noise scale can be off by
    100x (adaptive_bench saw 29956 at step 0, ~500 later). The controller decides only once
    ``min_grad_steps`` steps are behind them; the hooks read them every 10 steps until then."""
    from goodput_jax.model.gradstats.estimate import GradStatsState

    clock = FakeClock()
    hooks = GoodputHooks("early", init_batch_size=16, atomic_bsz=16, num_nodes=1,
                         num_replicas=1, max_batch_size=256, clock=clock, is_primary=True,
                         refit_interval=1e9, warmup_steps=1, background=False, stats_every=50,
                         store=_store(tmp_path))
    ctl = AdaptiveBatchSize(hooks, {"x": np.zeros((4096, 1), np.float32)}, adapt_every=2,
                            min_samples=2, min_grad_steps=10)
    counts = []

    def fake_step(params, opt_state, batch, n):
        clock.t += 0.01 + 0.001 * batch["x"].shape[1]
        i = len(counts)
        counts.append(i)
        # host-side statistics with i + 1 steps behind them: a large noise scale
        st = GradStatsState(np.int32(i + 1), np.int32(0), np.bool_(False), np.float32(0.002),
                            np.float32(1.0), np.float32(1.0))
        return params, st, 0.0

    for i in range(9):
        ctl.step(i, fake_step, None, None)
    assert hooks.grad_count < 10 and ctl.last_check is None and not ctl.switches
    for i in range(9, 40):
        ctl.step(i, fake_step, None, None)
    assert hooks.grad_count >= 10 and ctl.last_check is not None
    assert ctl.switches and ctl.switches[0]["step"] >= 10
    # the hooks read the statistics at steps 0, 10, 20, 30 (not only every stats_every)
    assert hooks.grad_count == 31
    with pytest.raises(ValueError, match="min_grad_steps"):
        AdaptiveBatchSize(hooks, {"x": np.zeros(4)}, min_grad_steps=0)


def test_settled_checks_are_adapt_interval_apart_on_the_hooks_clock(tmp_path):
    """Every ``adapt_every`` steps, but after a check that found nothing better the next
    waits ``adapt_interval`` seconds of the hooks' (injected) clock: the checks' share of a
    job with short steps is bounded, and exploring is not slowed."""
    def run(interval, sqr, var):
        clock = FakeClock()
        hooks = GoodputHooks("interval", init_batch_size=16, atomic_bsz=16, num_nodes=1,
                             num_replicas=1, max_batch_size=256, local_bsz_bounds=(8, 256),
                             clock=clock, is_primary=True, refit_interval=1e9, warmup_steps=0,
                             job_warmup_steps=0, background=False,
                             store=_store(tmp_path, interval, sqr, var))
        hooks.update_grad_params(GradParams(sqr=sqr, var=var))
        ctl = AdaptiveBatchSize(hooks, {"x": np.zeros((8192, 1), np.float32)}, adapt_every=2,
                                adapt_interval=interval, min_samples=2, patience=1)
        checks = []

        def fake_step(params, opt_state, batch, n):
            clock.t += 0.01 + 0.0001 * batch["x"].shape[1]  # ~10 ms steps: 2 steps ~20 ms
            return params, opt_state, 0.0

        for i in range(120):
            ctl.step(i, fake_step, None, None)
            if ctl.last_check is not None and (not checks or ctl.last_check is not checks[-1]):
                checks.append(ctl.last_check)
        return [c["step"] for c in checks], ctl

    # tiny noise scale: larger batches never pay, every check is settled
    every, _ = run(0.0, 1.0, 1e-3)
    spaced, ctl = run(0.05, 1.0, 1e-3)
    assert not ctl.switches and len(every) >= 55
    # 0.05 s at ~10 ms per step: at most one settled check every 5 steps (6 on the grid)
    assert all(b - a >= 5 for a, b in itertools.pairwise(spaced)), spaced
    assert all(s % 2 == 0 for s in spaced) and 15 <= len(spaced) <= 22, spaced
    # large noise scale: the climb (switches, new configurations gathering samples) is
    # checked every adapt_every steps, as with no interval
    _, free = run(0.0, 0.002, 1.0)
    _, paced = run(0.05, 0.002, 1.0)
    assert paced.switches and [sw["step"] for sw in paced.switches][:3] == [
        sw["step"] for sw in free.switches][:3]
    hooks = GoodputHooks("bad", init_batch_size=16, num_nodes=1, num_replicas=1,
                         is_primary=False)
    for bad in (-1.0, math.inf, "0.1"):
        with pytest.raises(ValueError, match=r"adapt_interval \("):
            AdaptiveBatchSize(hooks, {"x": np.zeros(4)}, adapt_interval=bad)


def test_an_unprofiled_larger_batch_is_tried_on_any_predicted_gain_once(tmp_path):
    """The fit predicts the next, never-profiled batch 3% faster: below the 5% threshold,
    so only ``explore_threshold`` (1.0) tries it; once measured (slower than predicted)
    the way back takes the full threshold and the batch is not tried again."""
    def run(explore_threshold, slow32=0.0, steps=80):
        clock = FakeClock()
        hooks = GoodputHooks("explore", init_batch_size=8, atomic_bsz=8, num_nodes=1,
                             num_replicas=1, max_batch_size=32, clock=clock, is_primary=True,
                             refit_interval=1e9, warmup_steps=0, job_warmup_steps=0,
                             background=False,
                             store=_store(tmp_path, explore_threshold, slow32, steps))
        hooks.update_grad_params(GradParams(sqr=1.0, var=8.0))
        ctl = AdaptiveBatchSize(hooks, {"x": np.zeros((8192, 1), np.float32)},
                                atomic_sizes=[8, 16, 32], adapt_every=2, adapt_interval=0.0,
                                min_samples=3, patience=2, explore_threshold=explore_threshold,
                                adaptive=False)

        def fake_step(params, opt_state, batch, n):
            b = batch["x"].shape[1]
            clock.t += 0.01 + 0.001 * b + (slow32 if b == 32 else 0.0)
            return params, opt_state, 0.0

        i = 0
        for b in (8, 16):  # profile 8 and 16 by hand, then adapt from 16
            ctl.set_config(b, 0)
            for _ in range(6):
                ctl.step(i, fake_step, None, None)
                i += 1
        ctl.adaptive = True
        checks = []
        for _ in range(steps):
            ctl.step(i, fake_step, None, None)
            i += 1
            if ctl.last_check is not None and (not checks or ctl.last_check is not checks[-1]):
                checks.append(ctl.last_check)
        return ctl, checks

    held, checks = run(1.05)  # explore_threshold = speedup_threshold: the old rule
    first = checks[0]
    assert first["best"] == (32, 0) and first["explore"] and 1.0 < first["speedup"] < 1.05
    assert not held.switches and held.batch_size == 16
    tried, _ = run(1.0)
    assert [(s["batch_size"], s["explore"]) for s in tried.switches] == [(32, True)]
    assert tried.switches[0]["step"] == first["step"] + 2  # patience: two agreeing checks
    back, checks = run(1.0, slow32=0.03, steps=200)
    sizes = [s["batch_size"] for s in back.switches]
    assert sizes[0] == 32 and back.batch_size != 32 and sizes.count(32) == 1, back.switches
    assert all(s["speedup"] > 1.05 and not s["explore"] for s in back.switches[1:])
    assert not any(c["explore"] for c in checks[-5:])
    with pytest.raises(ValueError, match=r"explore_threshold \("):
        AdaptiveBatchSize(held.hooks, {"x": np.zeros(4)}, explore_threshold=1.1)


def _eight_or_sixteen(name: str, slow16: int, store: str, **kw):
    """A controller choosing batch 8 or 16 (1 replica, noise scale 24) on a fake clock, and
    its step: ``0.02 + 0.0005 * b`` s, plus 0.016 s on batch 16's first ``slow16`` steps."""
    clock = FakeClock()
    hooks = GoodputHooks(name, init_batch_size=8, atomic_bsz=8, num_nodes=1,
                         num_replicas=1, max_batch_size=16, clock=clock, is_primary=True,
                         refit_interval=1e9, warmup_steps=0, job_warmup_steps=0,
                         background=False, store=store)
    hooks.update_grad_params(GradParams(sqr=1.0, var=3.0))  # noise scale 8 * 3 = 24
    ctl = AdaptiveBatchSize(hooks, {"x": np.zeros((8192, 1), np.float32)},
                            atomic_sizes=[8, 16], adapt_every=2, adapt_interval=0.0,
                            min_samples=3, patience=2, **kw)
    seen16 = [0]

    def fake_step(params, opt_state, batch, n):
        b = batch["x"].shape[1]
        if b == 16:
            seen16[0] += 1
        clock.t += 0.02 + 0.0005 * b + (0.016 if b == 16 and seen16[0] <= slow16 else 0.0)
        return params, opt_state, 0.0

    return hooks, ctl, fake_step


def test_a_fresh_configuration_is_not_left_while_its_step_time_still_falls(monkeypatch,
                                                                           tmp_path):
    """Batch 16 settles at 0.028 s a step against batch 8's 0.024 s (16 is the better
    goodput at a noise scale of 24), but its first 12 steps take 0.044 s, and on them the
    fit puts 8 ahead by 15%. Without the settling rule the controller goes back to 8 and,
    8 being profiled, never measures 16 again. With it, it holds 16 until 16 has
    ``settle_samples`` steps and its time stops falling, refreshes the fit before
    leaving, and stays."""
    runs = []

    def run():
        hooks, ctl, fake_step = _eight_or_sixteen("settle", 12, _store(tmp_path, len(runs)))
        runs.append(ctl)
        checks = []
        for i in range(200):
            ctl.step(i, fake_step, None, None)
            if ctl.last_check is not None and (not checks or ctl.last_check is not checks[-1]):
                checks.append(ctl.last_check)
        return hooks, ctl, checks

    hooks, ctl, checks = run()
    assert [s["batch_size"] for s in ctl.switches] == [16], ctl.switches
    assert ctl.batch_size == 16
    held = [c for c in checks if c["settling"]]
    assert held and all(c["best"] == (8, 0) and not c["switched"] for c in held)
    assert hooks.profile_table()[(1, 1, 16)][1] == pytest.approx(0.028)
    assert hooks.fit_count >= 3  # 8 alone, 16's first samples, refreshed before leaving
    # without the settling rule: back to 8 on the early statistic, and 16 is never retried
    monkeypatch.setattr(AdaptiveBatchSize, "_settling", lambda self, key: False)
    _, legacy, _ = run()
    assert [s["batch_size"] for s in legacy.switches] == [16, 8], legacy.switches
    with pytest.raises(ValueError, match=r"^settle_samples \(0\)"):
        AdaptiveBatchSize(hooks, {"x": np.zeros(4)}, settle_samples=0)


def test_a_configuration_left_long_ago_is_probed_again_and_measured_afresh(tmp_path):
    """Batch 16 settles at 0.028 s a step against batch 8's 0.024 s, but its first 60 steps
    take 0.044 s (a transient). At a noise scale of 24 the controller leaves 16 for 8 on
    them. The noise scale then grows to 120: on 16's stale time the fit puts it only 2.6%
    ahead, under the 5% threshold, so without re-probing the job stays at 8 for good. With
    ``reprobe_steps`` it tries 16 again (at ``explore_threshold``), drops 16's old times,
    measures 0.028 s and stays."""
    def run(reprobe_steps):
        hooks, ctl, fake_step = _eight_or_sixteen("reprobe", 60, _store(tmp_path, reprobe_steps),
                                                  reprobe_steps=reprobe_steps)
        for i in range(400):
            if i == 150:
                hooks.update_grad_params(GradParams(sqr=1.0, var=15.0))  # noise scale 120
            ctl.step(i, fake_step, None, None)
        return hooks, ctl

    hooks, stuck = run(0)
    assert [s["batch_size"] for s in stuck.switches] == [16, 8], stuck.switches
    assert stuck.batch_size == 8
    assert hooks.profile_table()[(1, 1, 16)][1] == pytest.approx(0.044)  # never re-measured
    last = stuck.last_check
    assert last["best"] == (16, 0) and 1.0 < last["speedup"] < 1.05 and not last["explore"]
    hooks, ctl = run(100)
    sizes = [(s["batch_size"], s["reprobe"]) for s in ctl.switches]
    assert sizes == [(16, False), (8, False), (16, True)], ctl.switches
    left = ctl.switches[1]["step"]
    assert ctl.switches[2]["step"] >= left + 100  # not before reprobe_steps
    assert ctl.batch_size == 16
    assert hooks.profile_table()[(1, 1, 16)][1] == pytest.approx(0.028)  # only fresh times
    # the left-at steps travel with the state (same replica count)
    c2 = AdaptiveBatchSize(GoodputHooks("reprobe2", init_batch_size=8, num_nodes=1,
                                        num_replicas=1, is_primary=False, max_batch_size=16),
                           {"x": np.zeros((8192, 1), np.float32)}, atomic_sizes=[8, 16])
    c2.load_state_dict(ctl.state_dict())
    assert c2.left_at == ctl.left_at and (8, 0) in c2.left_at
    with pytest.raises(ValueError, match=r"^reprobe_steps \(-1\)"):
        AdaptiveBatchSize(hooks, {"x": np.zeros(4)}, reprobe_steps=-1)
