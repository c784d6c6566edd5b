"""GradStatsReader takes the StatsSummary a step hands over (and the old 3-vector)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from goodput_jax.integrations.stats import GradStatsReader
from goodput_jax.model import gradstats as gs
from goodput_jax.model.types import GradParams


def _step_with(summary):
    def train_step():
        return None

    train_step.stats_summary = lambda: summary
    return train_step


@pytest.mark.parametrize("summary", [
    gs.StatsSummary(jnp.float32(4.0), jnp.float32(1.5), jnp.float32(6.0)),
    jnp.array([4.0, 1.5, 6.0], jnp.float32),  # a user's step of an earlier version
])
def test_a_step_s_summary_is_read_as_grad_params(summary):
    r = GradStatsReader()
    r.after_step(0, _step_with(summary), None)
    assert r.pending is summary  # a reference: nothing dispatched on the training thread
    assert r.nowait() == GradParams(1.5, 6.0) and r.count == 4.0
    assert r.noise_scale() == 4.0


def test_a_summary_before_any_sample_keeps_the_previous_statistics():
    r = GradStatsReader()
    r.set(GradParams(1.0, 2.0))
    r.after_step(0, _step_with(gs.stats_summary(gs.init_grad_stats())), None)
    assert r.grad_params == GradParams(1.0, 2.0)


def test_set_takes_a_stats_summary():
    r = GradStatsReader()
    r.set(gs.StatsSummary(2.0, 1.0, 3.0))
    assert r.grad_params == GradParams(1.0, 3.0) and r.count == 2.0


def test_observe_copies_the_state_into_a_stats_summary():
    st = gs.update_grad_stats(gs.init_grad_stats(),
                              gs.GradSqNorms(jnp.float32(5.0), jnp.float32(2.0), 4, 64), 16)
    r = GradStatsReader()
    assert r.observe({"opt": jax.device_put(st)}, wait=True)
    assert isinstance(r.pending, gs.StatsSummary)
    gp = gs.grad_params_from_stats(st)
    assert r.grad_params == GradParams(float(gp.sqr), float(gp.var)) and r.count == 1.0


@pytest.mark.parametrize("bad", [jnp.zeros(4), 3.0, {"sqr": 1.0}])
def test_a_step_returning_anything_else_is_refused_at_that_step(bad):
    r = GradStatsReader()
    fn = _step_with(bad)
    with pytest.raises(TypeError, match=r"stats_summary\(\) of 'train_step' returned .* must "
                                        r"return a StatsSummary"):
        r.after_step(0, fn, None)
    r2 = GradStatsReader()
    good = [gs.StatsSummary(1.0, 1.0, 1.0)]
    fn2 = _step_with(None)
    fn2.stats_summary = lambda: good[0]
    r2.after_step(0, fn2, None)  # taken at step 0; the next take is due at step 10
    good[0] = bad
    with pytest.raises(TypeError, match="must return a StatsSummary"):
        r2.after_step(1, fn2, None)  # a step in between: its summary is checked too


def test_the_summary_program_never_compiles_on_the_training_thread(tmp_path):
    """Issue 33 item 7: ``jit(_stats_summary)`` compiled on the training thread at the first
    read (1.5 s in the report, booked as program startup). It is now compiled once per
    process on a background thread and shared by every reader: the runtime capture (which
    books the training thread's compiles) sees no summary compile, and the statistics still
    arrive (the reads before the program is ready are skipped)."""
    import optax

    from goodput_jax import goodput, runtime
    from goodput_jax.integrations.hooks import GoodputHooks
    from goodput_jax.measure.stores.sqlite import SQLiteStore

    # JAX's own caches emptied: a summary jitted on this thread would compile again (and be
    # recorded); the background-compiled program is the reader's, and survives this
    jax.clear_caches()
    tx = optax.chain(gs.gradient_noise_scale(8), optax.sgd(0.1))

    @jax.jit
    def train_step(p, st, x):
        loss, grads, sq = gs.microbatch_grads(lambda q, b: jnp.mean((b * q - 1.0) ** 2), p, x, 2)
        updates, st = tx.update(grads, st, p, grad_sqnorms=sq)
        return optax.apply_updates(p, updates), st, loss

    store = SQLiteStore(str(tmp_path / "c.db"))
    rec = goodput.GoodputRecorder("comp", "goodput_comp", logging_enabled=True, store=store)
    runtime.start_job(rec, init=runtime.BackendInit(0.0, 0.0, 0, 1, 1, 1, "cpu"))
    p, st = jnp.float32(0.0), tx.init(jnp.float32(0.0))
    counts = []
    for name in ("a", "b"):  # two hooks instances: one program
        hooks = GoodputHooks(name, init_batch_size=8, recorder=rec, is_primary=False,
                             num_replicas=1, stats_every=5)
        for i in range(30):
            x = jnp.full((8,), 1.0 + 0.1 * (i % 3), jnp.float32)
            p, st, _ = hooks.step(i, train_step, p, st, x)
        hooks.flush()
        assert hooks.grad_params is not None
        counts.append(hooks.grad_count)
        hooks.close()
    runtime.detach(rec)
    rec.close()
    evs, _ = store.read_events("comp")
    names = [e.payload["name"] for e in evs if e.kind.value == "compilation"]
    assert "jit(train_step)" in names  # the capture records this thread's compiles
    assert not [n for n in names if "summary" in n], names
    assert all(c > 0 for c in counts), counts


def test_a_plain_step_shows_no_noise_scale_and_the_hooks_say_why_once(tmp_path):
    """The default one-device path (gradient_noise_scale first, one gradient per update):
    the hooks show no noise scale, warn once naming the helper, and publish the reason
    (on the old wiring the hooks read the biased state's averages and said nothing)."""
    import warnings

    import optax

    from goodput_jax.integrations.hooks import GoodputHooks
    from goodput_jax.measure.recorder import GoodputRecorder

    tx = optax.chain(gs.gradient_noise_scale(8), optax.sgd(0.1))
    params = {"w": jnp.ones(3)}
    st = tx.init(params)
    for i in range(3):
        _, st = tx.update({"w": jnp.full(3, 0.1 * (i + 1))}, st, params)
    rec = GoodputRecorder("plain", "l", store=f"sqlite:///{tmp_path / 'g.db'}")
    hooks = GoodputHooks("plain", init_batch_size=8, recorder=rec)
    hooks.update_grad_params(st)
    with pytest.warns(UserWarning, match=r"microbatch_grads\(") as caught:
        assert hooks.grad_params is None
    assert len([w for w in caught if "microbatch_grads" in str(w.message)]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once: the second read says nothing
        assert hooks.grad_params is None
    assert hooks.grad_stats_note == gs.NO_HELPER_NOTE
    h = hooks.hints()
    assert h["gradStatsNote"] == gs.NO_HELPER_NOTE and h["gradientNoiseScale"] is None
    rec.close()
