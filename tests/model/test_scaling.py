"""Learning-rate scaling rules: exact factors, the optax multiplier, AdaScale + SGD convergence."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from goodput_jax.model import gradstats as gs
from goodput_jax.model import scaling as sc
from goodput_jax.model.types import GradParams

GP = GradParams(sqr=0.5, var=2.0)


@pytest.mark.parametrize("scale", [1.0, 2.0, 8.0, 64.0])
def test_rule_factors_exact(scale):
    gain = (2.0 + 0.5) / (2.0 / scale + 0.5)
    assert float(sc.adascale_gain(GP, scale)) == pytest.approx(gain, rel=1e-6)
    assert float(sc.adam_gain(GP, scale)) == pytest.approx(math.sqrt(gain), rel=1e-6)
    assert float(sc.linear_factor(scale)) == scale
    assert float(sc.sqrt_factor(scale)) == pytest.approx(math.sqrt(scale), rel=1e-7)
    for rule, want in [("adascale", gain), ("adam", math.sqrt(gain)), ("linear", scale),
                       ("sqrt", math.sqrt(scale))]:
        assert float(sc.rule_factor(rule, scale, grad_params=GP)) == pytest.approx(want, rel=1e-6)


def test_gain_limits_and_clamps():
    assert float(sc.adascale_gain(GradParams(sqr=1.0, var=0.0), 8.0)) == pytest.approx(1.0, abs=1e-5)
    assert float(sc.adascale_gain(GradParams(sqr=0.0, var=1.0), 8.0)) == pytest.approx(8.0)
    assert float(sc.adascale_gain(GradParams(sqr=-3.0, var=-1.0), 8.0)) == pytest.approx(8.0)
    assert float(sc.adascale_gain(GP, 1.0)) == pytest.approx(1.0)


def test_legw_exact():
    # warm-up = 2 epochs * scale 4 * 1000 samples / batch 64 = 125 iterations, peak sqrt(4) = 2
    kw = {"base_warmup_epochs": 2, "data_size": 1000, "batch_size": 64}
    assert float(sc.legw_factor(0.0, 4.0, **kw)) == 0.0
    assert float(sc.legw_factor(62.5, 4.0, **kw)) == pytest.approx(1.0)
    assert float(sc.legw_factor(125.0, 4.0, **kw)) == pytest.approx(2.0)
    assert float(sc.legw_factor(1e6, 4.0, **kw)) == pytest.approx(2.0)
    assert float(sc.rule_factor("legw", 4.0, progress=62.5, **kw)) == pytest.approx(1.0)


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"rule \('cubic'\)"):
        sc.scale_by_rule("cubic", 32)
    with pytest.raises(ValueError, match=r"init_batch_size \(0\)"):
        sc.scale_by_rule("linear", 0)
    with pytest.raises(ValueError, match="base_warmup_epochs"):
        sc.scale_by_rule("legw", 32)
    with pytest.raises(ValueError, match="needs grad_params"):
        sc.rule_factor("adascale", 2.0)
    tx = sc.scale_by_rule("adascale", 32)
    with pytest.raises(ValueError, match="needs grad_params"):
        tx.update({"w": jnp.ones(1)}, tx.init({"w": jnp.ones(1)}))


def test_scale_by_rule_multiplies_and_counts_progress():
    params = {"w": jnp.ones(2)}
    tx = sc.scale_by_rule("adascale", 16, schedule=lambda p: 1.0 / (1.0 + p))
    upd = jax.jit(tx.update)
    st = tx.init(params)
    gain = (2.0 + 0.5) / (2.0 / 4.0 + 0.5)
    u, st = upd({"w": jnp.ones(2)}, st, grad_params=GP, batch_size=64)
    np.testing.assert_allclose(u["w"], gain * 1.0, rtol=1e-6)  # schedule(0) = 1
    u, st = upd({"w": jnp.ones(2)}, st, grad_params=GP, batch_size=64)
    np.testing.assert_allclose(u["w"], gain / (1.0 + gain), rtol=1e-6)  # schedule(progress)
    assert float(st.progress) == pytest.approx(2 * gain, rel=1e-6)
    assert int(st.count) == 2 and st.count.dtype == jnp.int32
    lin = sc.scale_by_rule("linear", 16)
    u, st = lin.update({"w": jnp.ones(2)}, lin.init(params), batch_size=48)
    np.testing.assert_allclose(u["w"], 3.0)
    assert float(st.progress) == 3.0  # no statistics: perfect scaling assumed


# ----------------------------------------------------------------------------- noisy quadratic
# loss_j(w) = 0.5 sum(h w^2) + w . eps_j, eps_j ~ N(0, s^2 I): G = h w, tr(Sigma) = d s^2.

D, NOISE, M0, SCALE, STEPS, LR = 8, 1.0, 4, 8, 150, 0.1
H = jnp.linspace(0.2, 1.0, D, dtype=jnp.float32)


def quad_loss(w, batch):
    return 0.5 * jnp.sum(H * w * w) + jnp.mean(batch @ w)


def expected_loss(w):
    return 0.5 * jnp.sum(H * w * w)


@jax.jit
def _train_adascale(key):
    tx = optax.chain(gs.gradient_noise_scale(M0), optax.sgd(LR), sc.scale_by_rule("adascale", M0))
    w0 = jnp.full((D,), 3.0, jnp.float32)

    def step(carry, k):
        w, st = carry
        batch = NOISE * jax.random.normal(k, (M0 * SCALE, D), jnp.float32)
        _, g, sq = gs.microbatch_grads(quad_loss, w, batch, SCALE)
        upd, st = tx.update(g, st, w, grad_sqnorms=sq, grad_params=gs.get_grad_params(st),
                            batch_size=M0 * SCALE)
        return (optax.apply_updates(w, upd), st), (expected_loss(w), st[2].gain)

    (w, st), (losses, gains) = jax.lax.scan(step, (w0, tx.init(w0)), jax.random.split(key, STEPS))
    return w, st, losses, gains


@jax.jit
def _train_plain(key):
    """Plain SGD at the same lr and the same (8x) batch, without the AdaScale gain."""
    w = jnp.full((D,), 3.0, jnp.float32)

    def step(w, k):
        batch = NOISE * jax.random.normal(k, (M0 * SCALE, D), jnp.float32)
        return w - LR * jax.grad(quad_loss)(w, batch), expected_loss(w)

    return jax.lax.scan(step, w, jax.random.split(key, STEPS))


def test_adascale_sgd_converges_on_noisy_quadratic():
    _, st, losses, gains = _train_adascale(jax.random.key(0))
    start = float(expected_loss(jnp.full((D,), 3.0)))
    # The noise floor of SGD at step size lr*gain: ~ lr*gain*tr(Sigma)/(4 B) per coordinate.
    assert float(jnp.mean(losses[-20:])) < 0.01 * start
    gains = np.asarray(gains)
    assert np.all((gains >= 1.0 - 1e-5) & (gains <= SCALE + 1e-4))
    # Far from the optimum the gradient dominates (gain near 1); near it noise does (gain up).
    assert gains[5] < 2.0 and gains[-1] > 4.0
    progress = float(st[2].progress)
    assert progress == pytest.approx(float(np.sum(gains)), rel=1e-4)
    assert STEPS < progress < SCALE * STEPS
    # AdaScale at 8x the batch takes fewer steps than plain SGD at the same lr to
    # reach 5% of the initial loss.
    _, plain_losses = _train_plain(jax.random.key(0))
    first = lambda ls: int(np.argmax(np.asarray(ls) < 0.05 * start))
    assert first(losses) < first(plain_losses)
