"""Adam's ``nu`` is rescaled at a batch-size switch (issue 33).

After a switch up from small batches, Adam's second moment still holds the small batches'
noisier gradients for ~``1 / (1 - b2)`` steps, so the update at the new batch size is
smaller than the ``adam`` scaling rule assumes: on ``adaptive_bench.py``'s MLP with AdamW,
175 steps at 32 before 2048 cost 499 steps at 2048 to the target against 293-317 from a
fresh state, and 327 with ``nu`` divided by 64 (docs/adaptive.md). At a switch the
controller scales ``nu`` by ``(1 + phi / M_new) / (1 + phi / M_old)``
(``gradstats.nu_switch_factor``, ``gradstats.rescale_nu``).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from goodput_jax.adaptive import AdaptiveBatchSize, adaptive_optimizer, data_mesh, make_train_step
from goodput_jax.integrations.hooks import GoodputHooks
from goodput_jax.model import gradstats as gs
from goodput_jax.model.types import GradParams

from tests.adaptive._fake import fake_controller

PARAMS = {"a": jnp.ones((3, 2)), "b": jnp.ones((2,))}
GRADS = {"a": jnp.arange(6.0).reshape(3, 2) - 2.5, "b": jnp.array([0.5, -1.5])}


def _updated(tx):
    """``tx``'s state after two updates (nu and mu nonzero)."""
    st = tx.init(PARAMS)
    for k in (1.0, 0.5):
        st = tx.update(jax.tree.map(lambda g, k=k: k * g, GRADS), st, PARAMS)[1]
    return st


def _adam_states(st):
    like = (optax.ScaleByAdamState, optax.ScaleByAmsgradState)
    return [x for x in jax.tree.leaves(st, is_leaf=lambda x: isinstance(x, like))
            if isinstance(x, like)]


OPTIMIZERS = {
    # the adaptive chain: gradient_noise_scale first, the base, scale_by_rule
    "adaptive-adamw": lambda: adaptive_optimizer(optax.adamw(1e-3), 32, rule="sqrt"),
    "adaptive-inject": lambda: adaptive_optimizer(
        optax.inject_hyperparams(optax.adamw)(learning_rate=1e-3, b2=0.99), 32, rule="sqrt"),
    "multisteps": lambda: optax.MultiSteps(optax.chain(optax.clip(1.0), optax.adam(1e-3)), 1),
    "amsgrad": lambda: optax.amsgrad(1e-3),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_rescale_finds_nu_and_applies_exactly_the_factor(name):
    tx = OPTIMIZERS[name]()
    st = _updated(tx)
    factor = 0.3
    new = gs.rescale_nu(st, factor)
    old_adam, new_adam = _adam_states(st), _adam_states(new)
    assert len(old_adam) == len(new_adam) == 1
    o, n = old_adam[0], new_adam[0]
    fields = ("nu", "nu_max") if isinstance(o, optax.ScaleByAmsgradState) else ("nu",)
    for f in fields:
        for a, b in zip(jax.tree.leaves(getattr(o, f)), jax.tree.leaves(getattr(n, f))):
            assert float(jnp.min(a)) > 0
            np.testing.assert_array_equal(np.asarray(b), np.asarray(a * np.float32(factor)))
            assert b.dtype == a.dtype
    # mu, count and every other leaf of the state (the gradient statistics, the rule's
    # progress, the hyperparameters) are the same arrays
    scaled = {id(x) for f in fields for x in jax.tree.leaves(getattr(o, f))}
    rest_old = [x for x in jax.tree.leaves(st) if id(x) not in scaled]
    rest_new = [x for x in jax.tree.leaves(new) if not any(
        x is y for f in fields for y in jax.tree.leaves(getattr(n, f)))]
    assert len(rest_old) == len(rest_new) and all(a is b for a, b in zip(rest_old, rest_new))
    assert n.mu is o.mu and n.count is o.count
    assert jax.tree.structure(new) == jax.tree.structure(st)


def test_rescale_keeps_dtype_and_runs_under_jit():
    st = optax.adam(1e-3).init({"w": jnp.zeros(4, jnp.bfloat16)})
    st = (st[0]._replace(nu={"w": jnp.full(4, 2.0, jnp.bfloat16)}),) + tuple(st[1:])
    out = jax.jit(gs.rescale_nu)(st, jnp.float32(0.25))
    assert out[0].nu["w"].dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(out[0].nu["w"], np.float32), 0.5)


def test_rescale_skips_sgd():
    st = _updated(optax.chain(optax.clip(1.0), optax.sgd(0.1, momentum=0.9)))
    assert gs.rescale_nu(st, 0.5) is st
    st = _updated(adaptive_optimizer(optax.sgd(0.1, momentum=0.9), 32, rule="sqrt"))
    assert gs.rescale_nu(st, 0.5) is st


@pytest.mark.parametrize("phi", [math.inf, math.nan, 0.0, -5.0])
def test_no_factor_without_a_finite_positive_noise_scale(phi):
    assert gs.nu_switch_factor(phi, 32, 64) is None


def test_factor_is_the_expected_change_of_the_squared_gradient():
    # E|g|^2 = |G|^2 (1 + phi / M): from 32 to 2048 at phi = 300
    assert gs.nu_switch_factor(300.0, 32, 2048) == pytest.approx((1 + 300 / 2048) / (1 + 300 / 32))
    assert gs.nu_switch_factor(1e12, 32, 2048) == pytest.approx(32 / 2048)  # noise dominates
    assert gs.nu_switch_factor(1e-9, 32, 2048) == pytest.approx(1.0)  # no noise
    assert gs.nu_switch_factor(300.0, 256, 128) > 1.0  # a switch down raises nu


# ------------------------------------------------------------------ through the controller


def _run(tmp_path, name, tx, steps=300, noise_scale=300.0, **kw):
    """The controller on injected step times (``0.002 + 1e-5 * b`` s, as in
    ``test_stable_stats.py``: at a noise scale of 300 it climbs from 32 to 256) and a
    constant noise scale; the fake step records the optimizer state it is given and returns
    it unchanged, so any change of ``nu`` between steps is the controller's."""
    clock, hooks, ctl = fake_controller(tmp_path, name, **kw)
    seen = []

    def fake_step(params, opt_state, batch, n):
        if len(seen) % 10 == 0:
            hooks.update_grad_params(GradParams(sqr=1.0, var=noise_scale / 32))
        clock.t += 0.002 + 1e-5 * batch["x"].shape[1]
        seen.append((ctl.steps - 1, opt_state))  # next_batch counted this step
        return params, opt_state, 0.0

    st = _updated(tx)
    for i in range(steps):
        _, st, _ = ctl.step(i, fake_step, None, st)
    return ctl, seen


def _nu(st):
    return np.asarray(_adam_states(st)[0].nu["a"])


def test_a_switch_rescales_nu_once(tmp_path):
    ctl, seen = _run(tmp_path, "adam", OPTIMIZERS["adaptive-adamw"]())
    assert len(ctl.switches) >= 2, ctl.switches
    # a switch decided after step k (rec["step"] == k + 1 steps done) reaches step k + 1
    switched_after = {rec["step"]: rec for rec in ctl.switches}
    # every switch's factor, from the noise scale it was decided on
    sizes = [32] + [s["batch_size"] for s in ctl.switches]
    for rec, m_old, m_new in zip(ctl.switches, sizes, sizes[1:]):
        assert rec["nu_scale"] == pytest.approx((1 + 300 / m_new) / (1 + 300 / m_old))
        assert rec["nu_scale"] < 1
    # nu changes between steps exactly once per switch, by its factor, into the next step
    for (_, a), (k1, b) in zip(seen, seen[1:]):
        rec = switched_after.get(k1)
        if rec is None:
            np.testing.assert_array_equal(_nu(b), _nu(a))
        else:
            np.testing.assert_allclose(_nu(b) / _nu(a), rec["nu_scale"], rtol=1e-6)
    total = np.prod([r["nu_scale"] for r in ctl.switches])
    np.testing.assert_allclose(_nu(seen[-1][1]) / _nu(seen[0][1]), total, rtol=1e-5)
    assert ctl.pending_nu_scale is None or seen[-1][0] == ctl.steps - 1


def test_rescale_off_and_sgd_leave_the_state_alone(tmp_path):
    ctl, seen = _run(tmp_path, "off", OPTIMIZERS["adaptive-adamw"](), rescale_nu=False)
    assert ctl.switches and all(s["nu_scale"] is None for s in ctl.switches)
    assert all(st is seen[0][1] for _, st in seen)
    sgd = adaptive_optimizer(optax.sgd(0.1, momentum=0.9), 32, rule="sqrt")
    ctl, seen = _run(tmp_path, "sgd", sgd)
    assert ctl.switches and all(s["nu_scale"] is None for s in ctl.switches)
    assert all(st is seen[0][1] for _, st in seen)


def test_pending_rescale_survives_a_checkpoint(tmp_path):
    hooks = GoodputHooks("ckpt", init_batch_size=8, num_replicas=1, num_nodes=1,
                         is_primary=False, store="sqlite:///" + str(tmp_path / "c.db"))
    a = AdaptiveBatchSize(hooks, {"x": np.arange(100.0)})
    a.pending_nu_scale = (0.25, None)
    b = AdaptiveBatchSize(hooks, {"x": np.arange(100.0)})
    b.load_state_dict(a.state_dict())
    st = _updated(optax.adam(1e-3))
    np.testing.assert_allclose(_nu(b.prepare_opt_state(st)), 0.25 * _nu(st))
    assert b.pending_nu_scale is None and b.prepare_opt_state(st) is st


def test_real_step_takes_the_rescaled_state_without_retracing(tmp_path):
    """The jitted, donating adaptive step on a 2-device mesh: the rescaled state (new arrays,
    same dtypes and shardings) runs the same compiled program, and the step sees nu x factor."""
    if jax.device_count() < 2:
        pytest.skip("needs 2 devices")
    mesh = data_mesh(jax.devices()[:2])

    def loss(p, b):
        return jnp.mean((jnp.tanh(b["x"] @ p["a"]) @ p["b"] - b["y"]) ** 2)

    tx = adaptive_optimizer(optax.adamw(1e-2), 8, rule="adam")
    step = make_train_step(loss, tx, mesh=mesh)
    ref = make_train_step(loss, tx, mesh=mesh, donate=False)
    rng = np.random.default_rng(0)
    data = {"x": rng.normal(size=(4096, 3)).astype(np.float32),
            "y": rng.normal(size=(4096,)).astype(np.float32)}
    hooks = GoodputHooks("real", init_batch_size=8, atomic_bsz=4, num_nodes=1, num_replicas=2,
                         max_batch_size=64, is_primary=False, background=False,
                         store="sqlite:///" + str(tmp_path / "r.db"))
    ctl = AdaptiveBatchSize(hooks, data, batch_sharding=step.batch_sharding, adaptive=False)
    params, st = PARAMS, tx.init(PARAMS)
    for i in range(3):
        params, st, _ = ctl.step(i, step, params, st)
    assert step.traces() == 1
    # a loop that runs the step itself: prepare_opt_state, then the step (here after a
    # pending switch factor of 0.5); the reference runs the same batch from nu x 0.5
    ctl.pending_nu_scale = (0.5, None)
    batch, n = ctl.next_batch()
    want_p, want_st, _ = ref(params, gs.rescale_nu(st, 0.5), batch, np.int32(n))
    new = ctl.prepare_opt_state(st)
    assert [x.sharding for x in jax.tree.leaves(new)] == [x.sharding for x in jax.tree.leaves(st)]
    params, st, _ = step(params, new, batch, np.int32(n))
    assert step.traces() == 1  # the rescaled state runs the same compiled program
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), params, want_p)
    np.testing.assert_allclose(_nu(st), _nu(want_st), rtol=1e-6)
    assert ctl.prepare_opt_state(st) is st  # once


# ------------------------------------------------------------------ the docs' hand loop


def test_the_docs_hand_loop_runs_and_rescales_nu_at_its_hand_switch(tmp_path, monkeypatch):
    """docs/adaptive.md's ``<!-- nu-rescale-loop -->`` block as it stands: a hand loop with
    ``prepare_opt_state`` and a switch by hand that rescales nu with the hooks' noise scale.
    ``gradstats.rescale_nu`` is watched (the real function runs) to see what it was given."""
    import pathlib
    import re

    doc = pathlib.Path(__file__).resolve().parents[2] / "docs" / "adaptive.md"
    m = re.search(r"<!-- nu-rescale-loop -->\s*```python\n(.*?)```", doc.read_text(), re.DOTALL)
    assert m, "docs/adaptive.md lost its block <!-- nu-rescale-loop -->"
    monkeypatch.setenv("GOODPUT_JAX_STORE", f"sqlite:///{tmp_path / 'loop.db'}")
    monkeypatch.chdir(tmp_path)
    real, calls = gs.rescale_nu, []

    def watched(opt_state, factor):
        out = real(opt_state, factor)
        calls.append((_adam_states(opt_state)[0].nu, factor, out))
        return out

    monkeypatch.setattr(gs, "rescale_nu", watched)
    ns: dict = {}
    exec(compile(m.group(1), "docs/adaptive.md nu-rescale-loop", "exec"), ns)  # noqa: S102
    hooks, adaptive = ns["hooks"], ns["adaptive"]
    assert adaptive.steps == 150  # next_batch counts the hand loop's steps
    assert all(0 < s["step"] <= 150 for s in adaptive.switches)
    assert hooks.batch_size == 2 * ns["old_batch"]
    assert adaptive.pending_nu_scale is None  # any switch's factor went into a step
    # the hand switch: the factor of the hooks' noise scale, nu x factor, the rest as it was
    assert math.isfinite(ns["phi"]) and ns["phi"] > 0
    assert ns["factor"] == gs.nu_switch_factor(ns["phi"], ns["old_batch"], hooks.batch_size)
    assert ns["factor"] < 1  # a switch up
    nu_in, factor, out = calls[-1]
    assert factor == ns["factor"] and out is ns["opt_state"]
    for a, b in zip(jax.tree.leaves(nu_in), jax.tree.leaves(_adam_states(out)[0].nu)):
        np.testing.assert_array_equal(np.asarray(b), np.asarray(a) * np.float32(factor))
    # every switch the controller made in the loop was rescaled by its recorded factor
    assert len(calls) - 1 == sum(1 for s in adaptive.switches if s["nu_scale"] is not None)
