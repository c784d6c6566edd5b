"""Gradient noise statistics: accuracy on known answers, collection modes, Adam, robustness."""

from __future__ import annotations

import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from goodput_jax.model import gradstats as gs
from goodput_jax.model.types import GradParams

# ----------------------------------------------------------------------------- linear regression
# y = x.w* + eps, x ~ N(0, I_d), eps ~ N(0, sigma^2), per-example loss 0.5 (x.w - y)^2.
# At w = w* + delta: G = delta, tr(Sigma) = (d + 1)|delta|^2 + d sigma^2 (Gaussian 4th moment).

D, SIGMA, M0, BATCH, STEPS = 10, 1.0, 8, 32, 1500
DELTA = jnp.full((D,), 1.0 / math.sqrt(D), jnp.float32)  # |delta|^2 = 1
W_STAR = jnp.linspace(-1.0, 1.0, D, dtype=jnp.float32)
TRUE_SQR = 1.0
TRUE_VAR = ((D + 1) * 1.0 + D * SIGMA**2) / M0  # tr(Sigma) at the initial batch size


def lin_loss(w, batch):
    return 0.5 * jnp.mean((batch["x"] @ w - batch["y"]) ** 2)


def lin_batch(key, n=BATCH):
    kx, ke = jax.random.split(key)
    x = jax.random.normal(kx, (n, D), jnp.float32)
    return {"x": x, "y": x @ W_STAR + SIGMA * jax.random.normal(ke, (n,), jnp.float32)}


def _run(step_fn, state0):
    keys = jax.random.split(jax.random.key(0), STEPS)

    def body(state, key):
        return step_fn(state, lin_batch(key)), None

    return jax.lax.scan(body, state0, keys)[0]


@functools.partial(jax.jit, static_argnames="mode")
def _linreg_stats(mode):
    w = W_STAR + DELTA
    if mode == "multi_steps":
        tx = gs.multi_steps(optax.sgd(0.0), 4, M0, BATCH // 4)

        def step(st, batch):
            for j in range(4):
                mb = jax.tree.map(lambda x, j=j: x[j * 8:(j + 1) * 8], batch)
                _, st = tx.update(jax.grad(lin_loss)(w, mb), st, w)
            return st

        st = _run(step, tx.init(w))
        return gs.grad_params_from_stats(st.stats), st.stats
    # the differenced estimator is an explicit opt-in (issue 44)
    tx = gs.gradient_noise_scale(M0, differenced=mode == "differenced")

    def step(st, batch):
        if mode == "microbatch":
            _, g, sq = gs.microbatch_grads(lin_loss, w, batch, 4)
        elif mode == "grouped":
            _, g, sq = gs.grouped_grads(lin_loss, w, batch, 4)
        else:  # differenced: one part per step
            g, sq = jax.grad(lin_loss)(w, batch), None
        return tx.update(g, st, w, grad_sqnorms=sq, batch_size=BATCH)[1]

    st = _run(step, tx.init(w))
    return gs.grad_params_from_stats(st.stats), st.stats


@pytest.mark.parametrize("mode", ["microbatch", "grouped", "multi_steps", "differenced"])
def test_linear_regression_closed_form_within_10_percent(mode):
    gp, stats = _linreg_stats(mode)
    assert int(stats.count) > 0
    assert bool(stats.biased) == (mode == "differenced")
    assert float(gp.sqr) == pytest.approx(TRUE_SQR, rel=0.10)
    assert float(gp.var) == pytest.approx(TRUE_VAR, rel=0.10)
    assert float(gs.noise_scale(gp, M0)) == pytest.approx(TRUE_VAR * M0 / TRUE_SQR, rel=0.2)


def test_linear_regression_sampled_every_4_is_unbiased_over_seeds():
    # One step in 4: k times fewer samples in the same window, so each run is
    # noisier, but the estimates stay centred on the closed form.
    w = W_STAR + DELTA
    tx = gs.gradient_noise_scale(M0, every=4)

    @jax.jit
    @jax.vmap
    def run(key):
        def body(st, key):
            _, g, sq = gs.microbatch_grads(lin_loss, w, lin_batch(key), 4,
                                           sample=gs.sample_now(st))
            return tx.update(g, st, w, grad_sqnorms=sq, batch_size=BATCH)[1], None

        st = jax.lax.scan(body, tx.init(w), jax.random.split(key, STEPS))[0]
        return gs.grad_params_from_stats(st.stats), st.stats.count

    gp, count = run(jax.random.split(jax.random.key(1), 8))
    assert np.all(np.asarray(count) == STEPS // 4)
    err_sqr = np.asarray(gp.sqr) / TRUE_SQR - 1.0
    err_var = np.asarray(gp.var) / TRUE_VAR - 1.0
    assert abs(err_sqr.mean()) < 0.05 and abs(err_var.mean()) < 0.05, (err_sqr, err_var)
    assert np.abs(err_sqr).max() < 0.3 and np.abs(err_var).max() < 0.3, (err_sqr, err_var)


# ----------------------------------------------------------------------------- pure estimators


def test_estimator_formulas_and_ema_closed_form():
    est = gs.estimate_grad_params(5.0, 2.0, 4, 4.0)
    assert (float(est.sqr), float(est.var)) == (1.0, 4.0)
    # Two samples with scales 2 and 4. Growing window (default): the second decays the
    # first by min(0.999 ** 4, (2 / (2 + 4)) ** 3) = 1 / 27.
    g = gs.init_grad_stats()
    g = gs.update_grad_stats(g, gs.GradSqNorms(5.0, 2.0, 4, 16), 8)  # sqr 1, var 2
    g = gs.update_grad_stats(g, gs.GradSqNorms(9.0, 3.0, 3, 32), 8)  # sqr 0, var 12
    np.testing.assert_allclose(gs.grad_params_from_stats(g), [1 / 27, 2 / 27 + 12 * 26 / 27],
                               rtol=1e-5)
    assert float(g.age) == 6.0 and float(g.ema_norm) == 1.0
    # AdaptDL's ("ema"): bias-corrected EMA with theta = 0.999 ** scale.
    upd_ema = functools.partial(gs.update_grad_stats, averaging="ema")
    s = gs.init_grad_stats()
    s = upd_ema(s, gs.GradSqNorms(5.0, 2.0, 4, 16), 8)  # sqr 1, var 2
    s = upd_ema(s, gs.GradSqNorms(9.0, 3.0, 3, 32), 8)  # sqr 0, var 12
    t1, t2 = 0.999**2, 0.999**4
    norm = t2 * (1 - t1) + (1 - t2)
    want_sqr = (t2 * (1 - t1) * 1.0 + (1 - t2) * 0.0) / norm
    want_var = (t2 * (1 - t1) * 2.0 + (1 - t2) * 12.0) / norm
    gp = gs.grad_params_from_stats(s)
    np.testing.assert_allclose([gp.sqr, gp.var], [want_sqr, want_var], rtol=1e-5)
    # Same under jit.
    upd = jax.jit(upd_ema, static_argnums=2)
    sj = upd(upd(gs.init_grad_stats(), gs.GradSqNorms(5.0, 2.0, 4, 16), 8),
             gs.GradSqNorms(9.0, 3.0, 3, 32), 8)
    np.testing.assert_allclose(gs.grad_params_from_stats(sj), gp, rtol=1e-6)
    assert s.count.dtype == jnp.int32 and int(s.count) == 2


def test_clamps_and_count_one_ignored():
    s = gs.update_grad_stats(gs.init_grad_stats(), gs.GradSqNorms(1.0, 5.0, 2, 8), 8)
    gp = gs.grad_params_from_stats(s)  # raw sqr = 9, var = -4 -> clamped
    assert float(gp.var) == pytest.approx(gs.MIN_VAR)
    s = gs.update_grad_stats(gs.init_grad_stats(), gs.GradSqNorms(5.0, 1.0, 2, 8), 8)
    assert float(gs.grad_params_from_stats(s).sqr) == 0.0  # raw sqr = -3
    one = gs.update_grad_stats(gs.init_grad_stats(), gs.GradSqNorms(5.0, 1.0, 1, 8), 8)
    assert int(one.count) == 0 and int(one.skipped) == 0


def test_biased_samples_reset_when_unbiased_arrive():
    s = gs.init_grad_stats()
    for _ in range(3):
        s = gs.update_grad_stats(s, gs.GradSqNorms(20.0, 2.0, 2, 16), 8, biased=True)
    assert bool(s.biased) and int(s.count) == 3
    s = gs.update_grad_stats(s, gs.GradSqNorms(5.0, 2.0, 4, 32), 8)
    assert not bool(s.biased) and int(s.count) == 1
    np.testing.assert_allclose(gs.grad_params_from_stats(s), (1.0, 4.0), rtol=1e-6)


def test_bad_arguments_name_the_value():
    with pytest.raises(ValueError, match=r"init_batch_size \(0\)"):
        gs.gradient_noise_scale(0)
    with pytest.raises(ValueError, match=r"smoothing \(1.5\)"):
        gs.gradient_noise_scale(8, smoothing=1.5)
    with pytest.raises(ValueError, match=r"not divisible by num_microbatches \(3\)"):
        gs.microbatch_grads(lin_loss, W_STAR, lin_batch(jax.random.key(1), 8), 3)
    with pytest.raises(TypeError, match="num_microbatches"):
        gs.microbatch_grads(lin_loss, W_STAR, lin_batch(jax.random.key(1), 8), 2.0)
    with pytest.raises(ValueError, match="no gradient statistics"):
        gs.get_grad_params(optax.sgd(0.1).init(W_STAR))
    with pytest.raises(ValueError, match="every_k_schedule"):
        gs.multi_steps(optax.sgd(0.1), 0, 8, 8)


# ----------------------------------------------------------------------------- MLP, brute force


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.tanh(nn.Dense(16)(x))
        return nn.Dense(1)(x)[..., 0]


_MLP = MLP()


def mlp_loss(params, batch):
    return jnp.mean((_MLP.apply(params, batch["x"]) - batch["y"]) ** 2)


@pytest.fixture(scope="module")
def mlp_problem():
    kx, ky, kp = jax.random.split(jax.random.key(42), 3)
    batch = {"x": jax.random.normal(kx, (16, 5)), "y": jax.random.normal(ky, (16,))}
    params = _MLP.init(kp, batch["x"])
    return params, batch


@functools.partial(jax.jit, static_argnums=2)
def _mb(params, batch, n):
    return gs.microbatch_grads(mlp_loss, params, batch, n)


_mlp_grad = jax.jit(jax.grad(mlp_loss))


def _flat(tree):
    return jnp.concatenate([x.reshape(-1) for x in jax.tree.leaves(tree)])


def test_mlp_matches_brute_force_per_example_gradients(mlp_problem):
    params, batch = mlp_problem
    per_ex = jax.vmap(lambda x, y: _flat(jax.grad(mlp_loss)(params, {"x": x[None], "y": y[None]})))(
        batch["x"], batch["y"]
    )  # [16, P]
    for n in (4, 16):
        parts = per_ex.reshape(n, 16 // n, -1).mean(axis=1)
        loss, g, sq = _mb(params, batch, n)
        np.testing.assert_allclose(_flat(g), per_ex.mean(0), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(sq.local_sqr, jnp.mean(jnp.sum(parts**2, -1)), rtol=1e-4)
        np.testing.assert_allclose(sq.total_sqr, jnp.sum(per_ex.mean(0) ** 2), rtol=1e-4)
        assert (sq.count, sq.batch_size) == (n, 16)
        np.testing.assert_allclose(loss, mlp_loss(params, batch), rtol=1e-5)
    # Per-example parts: var = unbiased tr(Sigma) / M0, sqr = |g|^2 - tr(Sigma)/B.
    _, g, sq = _mb(params, batch, 16)
    m0 = 4
    est = gs.estimate_grad_params(sq.local_sqr, sq.total_sqr, sq.count, sq.batch_size / m0)
    gbar = per_ex.mean(0)
    tr_sigma = jnp.sum((per_ex - gbar) ** 2) / 15.0
    np.testing.assert_allclose(est.var, tr_sigma / m0, rtol=1e-3)
    np.testing.assert_allclose(est.sqr, jnp.sum(gbar**2) - tr_sigma / 16, rtol=1e-3, atol=1e-6)


def test_has_aux_and_grouped_match_microbatch(mlp_problem):
    params, batch = mlp_problem

    def loss_aux(p, b):
        out = mlp_loss(p, b)
        return out, {"n": b["y"].shape[0]}

    (_, aux), g, sq = jax.jit(
        lambda p, b: gs.microbatch_grads(loss_aux, p, b, 4, has_aux=True))(params, batch)
    assert aux["n"].shape == (4,)
    _, g2, sq2 = jax.jit(lambda p, b: gs.grouped_grads(mlp_loss, p, b, 4))(params, batch)
    np.testing.assert_allclose(_flat(g), _flat(g2), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose([sq.local_sqr, sq.total_sqr], [sq2.local_sqr, sq2.total_sqr],
                               rtol=1e-5)


# ----------------------------------------------------------------------------- shard_map mode


def _dp_fn(mesh, n_micro, check_vma=True):
    def step(params, batch):
        return gs.data_parallel_grads(mlp_loss, params, batch, "data", num_microbatches=n_micro)

    return jax.jit(jax.shard_map(step, mesh=mesh, in_specs=(P(), P("data")),
                                 out_specs=(P(), P(), P()), check_vma=check_vma))


@pytest.mark.parametrize("devices,n_micro,check_vma", [(4, 1, True), (8, 1, True), (4, 2, True),
                                                        (8, 1, False)])
def test_shard_map_agrees_with_microbatch(mlp_problem, devices, n_micro, check_vma):
    if jax.device_count() < devices:
        pytest.skip(f"needs {devices} devices")
    params, batch = mlp_problem
    mesh = jax.make_mesh((devices,), ("data",), devices=jax.devices()[:devices])
    sbatch = jax.device_put(batch, NamedSharding(mesh, P("data")))
    loss, g, sq = _dp_fn(mesh, n_micro, check_vma)(params, sbatch)
    loss_r, g_r, sq_r = _mb(params, batch, devices * n_micro)
    assert (sq.count, sq.batch_size) == (devices * n_micro, 16)
    np.testing.assert_allclose(_flat(g), _flat(g_r), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(sq.local_sqr, sq_r.local_sqr, rtol=1e-5)
    np.testing.assert_allclose(sq.total_sqr, sq_r.total_sqr, rtol=1e-5)
    np.testing.assert_allclose(loss, loss_r, rtol=1e-5)
    # The per-device norms are true per-device norms: S > T for distinct shards
    # (a psum'ed gradient would make every "local" norm equal to devices^2 * T).
    assert float(sq.local_sqr) > float(sq.total_sqr)
    assert float(sq.local_sqr) < devices * float(sq.total_sqr) * devices


def test_shard_map_adds_one_scalar_collective_to_the_plain_step(mlp_problem):
    params, batch = mlp_problem
    mesh = jax.make_mesh((4,), ("data",), devices=jax.devices()[:4])
    sbatch = jax.device_put(batch, NamedSharding(mesh, P("data")))
    lowered = _dp_fn(mesh, 1).lower(params, sbatch)
    # The gradient psum carries [loss, S] (one psum of leaves + 1 operands) and
    # one scalar psum sums the sliced T.
    assert lowered.as_text().count("stablehlo.all_reduce") == len(jax.tree.leaves(params)) + 2

    def plain(p, b):
        loss, g = jax.value_and_grad(mlp_loss)(p, b)
        return jax.lax.pmean(loss, "data"), jax.tree.map(lambda x: x / 4, g)

    plain_c = jax.jit(jax.shard_map(plain, mesh=mesh, in_specs=(P(), P("data")),
                                    out_specs=(P(), P()))).lower(params, sbatch).compile()

    def count(compiled):
        return sum(" all-reduce(" in line for line in compiled.as_text().splitlines())

    # Compiled: the plain step's collectives plus the scalar one for T.
    assert count(lowered.compile()) == count(plain_c) + 1


# ----------------------------------------------------------------------------- Adam


def test_adam_preconditioner_auto_selected(mlp_problem):
    params, batch = mlp_problem
    tx = optax.chain(gs.gradient_noise_scale(4), optax.adam(1e-3))
    assert gs.auto_preconditioner(optax.chain(gs.gradient_noise_scale(4), optax.sgd(0.1))
                                  .init(params)) is None

    @jax.jit
    def step(params, st, batch):
        pre = gs.auto_preconditioner(st, min_count=1)  # AdaptDL's rule: from the first update
        _, g, sq = gs.microbatch_grads(mlp_loss, params, batch, 4, preconditioner=pre)
        upd, st = tx.update(g, st, params, grad_sqnorms=sq)
        return optax.apply_updates(params, upd), st, sq

    st = tx.init(params)
    # The default waits for DEFAULT_MIN_COUNT Adam updates (nu_hat on enough gradients).
    adam0 = gs.find_adam_state(st)
    for count, valid in [(1, False), (gs.DEFAULT_MIN_COUNT - 1, False),
                         (gs.DEFAULT_MIN_COUNT, True)]:
        pre_c = gs.adam_preconditioner(adam0._replace(count=jnp.int32(count)))
        assert bool(pre_c.valid) == valid, count
    p1, st, sq0 = step(params, st, batch)
    assert not bool(sq0.valid)  # Adam's second moment is empty on the first step
    assert int(gs.get_grad_stats(st).count) == 0
    adam = gs.find_adam_state(st)
    assert isinstance(adam, optax.ScaleByAdamState) and int(adam.count) == 1
    _, st2, sq = step(p1, st, batch)
    assert bool(sq.valid) and int(gs.get_grad_stats(st2).count) == 1
    # Manual preconditioned norms with nu_hat = nu / (1 - b2**count).
    pinv = jax.tree.map(lambda nu: 1.0 / (jnp.sqrt(nu / (1 - 0.999)) + 1e-8), adam.nu)
    per_mb = [_mlp_grad(p1, jax.tree.map(lambda x, i=i: x[4 * i:4 * i + 4], batch))
              for i in range(4)]
    pre_sq = [float(sum(jnp.sum((a * b) ** 2) for a, b in
                        zip(jax.tree.leaves(g), jax.tree.leaves(pinv)))) for g in per_mb]
    np.testing.assert_allclose(sq.local_sqr, np.mean(pre_sq), rtol=1e-4)
    plain = jax.jit(lambda p, b: gs.microbatch_grads(mlp_loss, p, b, 4))(p1, batch)[2]
    assert abs(float(plain.local_sqr) - float(sq.local_sqr)) > 1e-3 * float(sq.local_sqr)


def test_auto_preconditioner_reads_injected_hyperparams():
    params = {"w": jnp.ones(3)}
    st = optax.inject_hyperparams(optax.adam)(learning_rate=1e-3, b2=0.9, eps=1e-3).init(params)
    st = st._replace(inner_state=jax.tree.map(lambda x: x, st.inner_state))
    adam = gs.find_adam_state(st)
    adam = adam._replace(count=jnp.int32(1), nu={"w": jnp.full(3, 0.01)})
    pre = gs.adam_preconditioner(adam, b2=0.9, eps=1e-3, min_count=1)
    np.testing.assert_allclose(pre.scales()["w"], 1.0 / (math.sqrt(0.01 / 0.1) + 1e-3), rtol=1e-6)
    auto = gs.auto_preconditioner(st)  # count 0 -> invalid, picks b2/eps from hyperparams
    assert not bool(auto.valid)


def test_multi_steps_matches_optax_and_microbatch_with_adam(mlp_problem):
    params, batch = mlp_problem
    k = 4
    tx = gs.multi_steps(optax.adam(1e-2), k, init_batch_size=4, micro_batch_size=4,
                        precondition=gs.AutoPrecondition(min_count=1))
    ref = optax.MultiSteps(optax.adam(1e-2), k)
    st, rst = tx.init(params), ref.init(params)
    upd, rupd = jax.jit(tx.update), jax.jit(ref.update)
    mbs = [jax.tree.map(lambda x, i=i: x[4 * i:4 * i + 4], batch) for i in range(k)]
    p = params
    for _ in range(2):  # two optimizer steps; the second is preconditioned
        pre = gs.auto_preconditioner(st.inner.inner_opt_state, min_count=1)
        for mb in mbs:
            g = _mlp_grad(p, mb)
            u, st = upd(g, st, p)
            ru, rst = rupd(g, rst, p)
            np.testing.assert_allclose(_flat(u), _flat(ru), rtol=1e-5, atol=1e-8)
        want = jax.jit(lambda p, b, pre: gs.microbatch_grads(mlp_loss, p, b, k,
                                                            preconditioner=pre))(p, batch, pre)[2]
        p = optax.apply_updates(p, u)
    stats = gs.get_grad_stats(st)
    assert int(stats.count) == 1  # first window skipped: Adam state still empty
    gp = gs.grad_params_from_stats(stats)
    est = gs.estimate_grad_params(want.local_sqr, want.total_sqr, k, 16 / 4)
    np.testing.assert_allclose([gp.sqr, gp.var], [max(float(est.sqr), 0.0), float(est.var)],
                               rtol=1e-3)


# ----------------------------------------------------------------------------- robustness


def test_nan_gradients_leave_state_finite(mlp_problem):
    params, batch = mlp_problem
    tx = gs.gradient_noise_scale(4, differenced=True)
    upd = jax.jit(lambda g, st, sq: tx.update(g, st, params, grad_sqnorms=sq))
    upd1 = jax.jit(lambda g, st: tx.update(g, st, params))
    st = tx.init(params)
    _, g, sq = _mb(params, batch, 4)
    _, st = upd(g, st, sq)
    before = gs.get_grad_params(st)
    nan_g = jax.tree.map(lambda x: x.at[(0,) * x.ndim].set(jnp.nan), g)
    nan_sq = sq._replace(local_sqr=jnp.float32(jnp.nan))
    _, st = upd(nan_g, st, nan_sq)
    # Differenced path with NaN: neither the statistics nor prev_grads are poisoned.
    _, st = upd1(g, st)
    _, st = upd1(nan_g, st)
    _, st = upd1(jax.tree.map(lambda x: x * 1.1, g), st)
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(st))
    s = gs.get_grad_stats(st)
    assert int(s.skipped) >= 1
    after = gs.get_grad_params(st)
    assert np.isfinite(float(after.sqr)) and np.isfinite(float(after.var))
    assert bool(s.biased)  # the last accepted sample came from the differenced path
    del before


def test_transformation_is_identity_and_differenced_path(mlp_problem):
    params, batch = mlp_problem
    tx = optax.chain(gs.gradient_noise_scale(16, differenced=True), optax.identity())
    upd = jax.jit(tx.update, static_argnames="batch_size")
    st = tx.init(params)
    g1 = _mlp_grad(params, batch)
    g2 = jax.tree.map(lambda x: 0.5 * x + 0.01, g1)
    u, st = upd(g1, st, params)
    assert all(bool(jnp.array_equal(a, b)) for a, b in zip(jax.tree.leaves(u), jax.tree.leaves(g1)))
    assert int(gs.get_grad_stats(st).count) == 0  # no previous gradient yet
    _, st = upd(g2, st, params, batch_size=16)
    sq = gs.differenced_sqnorms(g2, g1, 16)
    est = gs.estimate_grad_params(sq.local_sqr, sq.total_sqr, 2, 32 / 16)
    gp = gs.get_grad_params(st)
    np.testing.assert_allclose([gp.sqr, gp.var],
                               [max(float(est.sqr), 0.0), max(float(est.var), 1e-6)], rtol=1e-5)
    assert bool(gs.get_grad_stats(st).biased)
    # the package shows none of it (issue 44): the summary has no number, the note says why
    shown = gs.as_stats_summary(gs.stats_summary(gs.get_grad_stats(st)))
    assert shown.count == 0 and np.isnan(shown.sqr) and np.isnan(shown.var)
    assert gs.stats_note(st) == gs.stats_note(shown) == gs.NO_HELPER_NOTE


def test_the_default_takes_no_statistics_from_one_part_and_says_why(mlp_problem):
    """Issue 44: with no helper (a plain step, or count 1) the default transformation keeps
    no previous gradient, takes no sample and flags the state; nothing is shown but the note.
    An unbiased sample afterwards restarts the averages and clears the flag."""
    params, batch = mlp_problem
    tx = optax.chain(gs.gradient_noise_scale(16), optax.identity())
    st = tx.init(params)
    assert st[0].prev_grads == ()  # no gradient-sized buffer by default
    assert gs.stats_note(st) is None  # nothing yet, nothing to say
    g = _mlp_grad(params, batch)
    one = gs.GradSqNorms(jnp.float32(1.0), jnp.float32(1.0), 1, 16)
    upd = jax.jit(tx.update)
    for sq in (None, one, one._replace(count=jnp.int32(1))):  # no helper, static, traced 1
        st1 = tx.init(params)
        for _ in range(3):
            u, st1 = upd(g, st1, params, grad_sqnorms=sq)
        assert all(bool(jnp.array_equal(a, b)) for a, b in zip(jax.tree.leaves(u),
                                                                 jax.tree.leaves(g)))
        stats = gs.get_grad_stats(st1)
        assert int(stats.count) == 0 and bool(stats.biased), sq
        assert all(np.isnan(float(v)) for v in gs.get_grad_params(st1))
        shown = gs.as_stats_summary(gs.stats_summary(stats))
        assert shown.count == 0 and np.isnan(shown.sqr) and np.isnan(shown.var)
        for value in (st1, stats, shown, gs.stats_summary(stats), jax.device_get(stats)):
            assert gs.stats_note(value) == gs.NO_HELPER_NOTE
        assert "microbatch_grads(loss_fn, params, batch, 2, preconditioner=" in gs.NO_HELPER_NOTE
        assert "\n" not in gs.NO_HELPER_NOTE
    # a helper's update that takes no sample (Adam's first updates): no number, no note
    four = gs.GradSqNorms(jnp.float32(5.0), jnp.float32(2.0), 4, 64)
    for sq in (four._replace(valid=False), four._replace(count=jnp.int32(4), valid=False)):
        _, st2 = upd(g, st1, params, grad_sqnorms=sq)
        assert int(gs.get_grad_stats(st2).count) == 0 and gs.stats_note(st2) is None
    # a helper's sample afterwards: shown, no note
    _, st1 = upd(g, st1, params, grad_sqnorms=four)
    stats = gs.get_grad_stats(st1)
    assert int(stats.count) == 1 and not bool(stats.biased)
    assert gs.as_stats_summary(gs.stats_summary(stats))[1:] == pytest.approx((1.0, 4.0))
    assert gs.stats_note(st1) is None
    # ... and a plain step after it keeps what the helper measured
    _, st1 = upd(g, st1, params)
    assert int(gs.get_grad_stats(st1).count) == 1 and gs.stats_note(st1) is None
    # multi_steps with one micro-step per window: one part too
    ms = gs.multi_steps(optax.sgd(0.1), 1, init_batch_size=16, micro_batch_size=16)
    _, mst = ms.update(g, ms.init(params))
    assert gs.stats_note(mst) == gs.NO_HELPER_NOTE


def test_noise_scale_helper():
    # var = tr(Sigma) / M0, so var / sqr is in units of initial batches: M0 is required.
    assert float(gs.noise_scale(GradParams(2.0, 6.0), 32)) == 96.0
    assert float(gs.noise_scale(GradParams(2.0, 6.0), init_batch_size=1)) == 3.0
    with pytest.raises(TypeError, match="needs init_batch_size"):
        gs.noise_scale(GradParams(2.0, 6.0))
    with pytest.raises(ValueError, match=r"init_batch_size \(0\)"):
        gs.noise_scale(GradParams(2.0, 6.0), 0)
    m0s = jnp.array([8.0, 32.0])  # arrays pass through (vmap / jit)
    np.testing.assert_allclose(jax.vmap(lambda m: gs.noise_scale(GradParams(2.0, 6.0), m))(m0s),
                               [24.0, 96.0])


def test_shard_map_preconditioned_agrees_with_microbatch(mlp_problem):
    params, batch = mlp_problem
    nu = jax.tree.map(lambda p: jnp.abs(p) * 1e-3 + 1e-6, params)
    adam = optax.ScaleByAdamState(jnp.int32(3), jax.tree.map(jnp.zeros_like, params), nu)
    pre = gs.adam_preconditioner(adam, min_count=1)
    mesh = jax.make_mesh((4,), ("data",), devices=jax.devices()[:4])
    sbatch = jax.device_put(batch, NamedSharding(mesh, P("data")))

    def step(params, pre, batch):
        return gs.data_parallel_grads(mlp_loss, params, batch, "data", preconditioner=pre)

    f = jax.jit(jax.shard_map(step, mesh=mesh, in_specs=(P(), P(), P("data")),
                              out_specs=(P(), P(), P())))
    _, grads, sq = f(params, pre, sbatch)
    # the devices' whole gradients are the parts: their norms take nu floored at this
    # step's share of Adam's own (Preconditioner.updated); the microbatch helper, given
    # that preconditioner, agrees
    after = pre.updated(grads)
    floor = jax.tree.map(lambda g: 0.001 * (1 - 1e-4) * g ** 2, grads)  # float32's 1 - b2
    assert all(bool(jnp.all(a >= f)) for a, f in zip(jax.tree.leaves(after.nu),
                                                     jax.tree.leaves(floor)))
    _, _, ref = jax.jit(lambda p, b, pre: gs.microbatch_grads(mlp_loss, p, b, 4,
                                                             preconditioner=pre))(params, batch, after)
    np.testing.assert_allclose([sq.local_sqr, sq.total_sqr], [ref.local_sqr, ref.total_sqr],
                               rtol=1e-5)
    assert bool(sq.valid)
    # without b2 (a Preconditioner built by hand): nu as given, as before
    _, _, old = f(params, pre._replace(b2=None), sbatch)
    _, _, ref = jax.jit(lambda p, b, pre: gs.microbatch_grads(mlp_loss, p, b, 4,
                                                             preconditioner=pre))(params, batch, pre)
    np.testing.assert_allclose([old.local_sqr, old.total_sqr], [ref.local_sqr, ref.total_sqr],
                               rtol=1e-5)


def test_shard_map_preconditioned_with_microbatches_agrees(mlp_problem):
    # The scan inside shard_map mixes varying gradients and the invariant nu.
    params, batch = mlp_problem
    nu = jax.tree.map(lambda p: jnp.abs(p) * 1e-3 + 1e-6, params)
    pre = gs.adam_preconditioner(optax.ScaleByAdamState(
        jnp.int32(5), jax.tree.map(jnp.zeros_like, params), nu))
    mesh = jax.make_mesh((4,), ("data",), devices=jax.devices()[:4])
    sbatch = jax.device_put(batch, NamedSharding(mesh, P("data")))

    def step(params, pre, batch):
        return gs.data_parallel_grads(mlp_loss, params, batch, "data", num_microbatches=2,
                                      preconditioner=pre)

    f = jax.jit(jax.shard_map(step, mesh=mesh, in_specs=(P(), P(), P("data")),
                              out_specs=(P(), P(), P())))
    _, _, sq = f(params, pre, sbatch)
    _, _, ref = jax.jit(lambda p, b, pre: gs.microbatch_grads(mlp_loss, p, b, 8,
                                                             preconditioner=pre))(params, batch, pre)
    scales = pre.scales()
    parts = [_mlp_grad(params, jax.tree.map(lambda x, i=i: x[2 * i:2 * i + 2], batch))
             for i in range(8)]
    manual = np.mean([float(sum(jnp.sum((a * b) ** 2) for a, b in
                                zip(jax.tree.leaves(g), jax.tree.leaves(scales)))) for g in parts])
    assert sq.count == 8
    np.testing.assert_allclose(ref.local_sqr, manual, rtol=1e-5)
    np.testing.assert_allclose([sq.local_sqr, sq.total_sqr], [ref.local_sqr, ref.total_sqr],
                               rtol=1e-5)


def test_scan_mode_adam_norms_add_no_gradient_sized_buffer():
    # XLA hoists loop-invariant work out of a scan; the Adam multipliers must not
    # become a gradient-sized buffer that lives through the accumulation loop.
    w = {"a": jnp.zeros((256, 256)), "b": jnp.zeros((256, 128))}
    grad_bytes = sum(x.size * 4 for x in jax.tree.leaves(w))
    batch = {"x": jnp.ones((8, 256))}
    pre = gs.adam_preconditioner(optax.ScaleByAdamState(
        jnp.int32(2), w, jax.tree.map(lambda x: x + 1e-4, w)))

    def loss(p, b):
        return jnp.mean(jnp.tanh(b["x"] @ p["a"]) @ p["b"])

    def peak(use_pre):
        f = jax.jit(lambda p, b, pre: gs.microbatch_grads(
            loss, p, b, 4, preconditioner=pre if use_pre else None)[2])
        m = f.lower(w, batch, pre).compile().memory_analysis()
        if m is None:
            pytest.skip("memory_analysis unavailable on this backend")
        return m.temp_size_in_bytes

    assert peak(True) - peak(False) < 0.5 * grad_bytes


def test_jitted_step_traces_once_and_matches_eager(mlp_problem):
    params, batch = mlp_problem
    tx = optax.chain(gs.gradient_noise_scale(4), optax.sgd(0.01))
    traces = []

    def step(p, st, b):
        traces.append(1)
        _, g, sq = gs.microbatch_grads(mlp_loss, p, b, 4)
        u, st = tx.update(g, st, p, grad_sqnorms=sq)
        return optax.apply_updates(p, u), st

    jstep = jax.jit(step)
    p, st = params, tx.init(params)
    pe, ste = params, tx.init(params)
    for _ in range(3):
        p, st = jstep(p, st, batch)
    pe, ste = step(pe, ste, batch)
    assert len(traces) == 2  # one trace for the jitted step, one eager call
    st1 = jax.jit(step)(params, tx.init(params), batch)[1]
    np.testing.assert_allclose(gs.get_grad_params(st1), gs.get_grad_params(ste), rtol=1e-5)
    assert int(gs.get_grad_stats(st).count) == 3


# ----------------------------------------------------------------------------- sampling, ordering


def test_update_grad_stats_steps_scales_the_decay_exactly():
    sq = gs.GradSqNorms(jnp.float32(5.0), jnp.float32(2.0), 4, 32)  # sqr 1, var 4 (scale 4)
    s = gs.update_grad_stats(gs.init_grad_stats(), sq, 8, smoothing=0.9, steps=3, averaging="ema")
    np.testing.assert_allclose(float(s.ema_norm), 1.0 - 0.9 ** 12, rtol=1e-6)
    np.testing.assert_allclose(float(s.sqr_ema), (1.0 - 0.9 ** 12) * 1.0, rtol=1e-6)
    with pytest.raises(ValueError, match=r"steps \(0\)"):
        gs.update_grad_stats(gs.init_grad_stats(), sq, 8, steps=0)


def test_every_k_samples_one_step_in_k_and_matches_every_step(mlp_problem):
    params, batch = mlp_problem
    k, steps = 3, 7
    opt = optax.adam(1e-2)
    tx_k = optax.chain(gs.gradient_noise_scale(4, every=k, differenced=False), opt)
    tx_1 = optax.chain(gs.gradient_noise_scale(4, differenced=False), opt)

    @jax.jit
    def step_k(p, st, b):
        pre = gs.auto_preconditioner(st, min_count=1)
        _, g, sq = gs.microbatch_grads(mlp_loss, p, b, 4, preconditioner=pre,
                                       sample=gs.sample_now(st))
        u, st = tx_k.update(g, st, p, grad_sqnorms=sq)
        return optax.apply_updates(p, u), st, sq

    @jax.jit
    def step_1(p, st, b):
        _, g, sq = gs.microbatch_grads(mlp_loss, p, b, 4,
                                       preconditioner=gs.auto_preconditioner(st, min_count=1))
        u, st = tx_1.update(g, st, p, grad_sqnorms=sq)
        return optax.apply_updates(p, u), st, sq

    pk, stk, p1, st1 = params, tx_k.init(params), params, tx_1.init(params)
    want = gs.init_grad_stats()
    for i in range(steps):
        b = jax.tree.map(lambda x, i=i: jnp.roll(x, i, axis=0), batch)
        assert bool(gs.sample_now(stk)) == (i % k == 0)
        pk, stk, sqk = step_k(pk, stk, b)
        p1, st1, sq1 = step_1(p1, st1, b)
        # Same training (the statistics never touch the updates) ...
        np.testing.assert_allclose(_flat(pk), _flat(p1), rtol=1e-6, atol=1e-7)
        if i % k == 0:  # ... the same norms on sampled steps ...
            np.testing.assert_allclose([sqk.local_sqr, sqk.total_sqr],
                                       [sq1.local_sqr, sq1.total_sqr], rtol=1e-5)
            want = gs.update_grad_stats(want, sq1, 4, steps=k)
        else:  # ... and none on the others.
            assert float(sqk.local_sqr) == 0.0 and float(sqk.total_sqr) == 0.0
            assert not bool(sqk.valid)
    got = gs.get_grad_stats(stk)
    # Step 0 has an empty Adam state (invalid), so samples came from steps 3 and 6.
    assert int(got.count) == len(range(k, steps, k))
    np.testing.assert_allclose([got.sqr_ema, got.var_ema, got.ema_norm],
                               [want.sqr_ema, want.var_ema, want.ema_norm], rtol=1e-5)


def test_sampling_inside_shard_map_and_grouped(mlp_problem):
    params, batch = mlp_problem
    mesh = jax.make_mesh((4,), ("data",), devices=jax.devices()[:4])
    sbatch = jax.device_put(batch, NamedSharding(mesh, P("data")))
    pre = gs.adam_preconditioner(optax.ScaleByAdamState(
        jnp.int32(3), jax.tree.map(jnp.zeros_like, params),
        jax.tree.map(lambda p: jnp.abs(p) * 1e-3 + 1e-6, params)), min_count=1)

    def step(params, pre, batch, sample):
        return gs.data_parallel_grads(mlp_loss, params, batch, "data", preconditioner=pre,
                                      num_microbatches=2, sample=sample)

    f = jax.jit(jax.shard_map(step, mesh=mesh, in_specs=(P(), P(), P("data"), P()),
                              out_specs=(P(), P(), P())))
    loss_on, g_on, on = f(params, pre, sbatch, jnp.array(True))
    loss_off, g_off, off = f(params, pre, sbatch, jnp.array(False))
    _, g_ref, ref = step_ref = jax.jit(lambda p, b, pre: gs.microbatch_grads(
        mlp_loss, p, b, 8, preconditioner=pre))(params, batch, pre)
    del step_ref
    np.testing.assert_allclose([on.local_sqr, on.total_sqr], [ref.local_sqr, ref.total_sqr],
                               rtol=1e-5)
    assert bool(on.valid) and not bool(off.valid)
    assert float(off.local_sqr) == 0.0 and float(off.total_sqr) == 0.0
    np.testing.assert_array_equal(_flat(g_on), _flat(g_off))  # gradients never change
    assert float(loss_on) == float(loss_off)
    np.testing.assert_allclose(_flat(g_on), _flat(g_ref), rtol=1e-5, atol=1e-7)

    grouped = jax.jit(lambda p, b, s: gs.grouped_grads(mlp_loss, p, b, 4, preconditioner=pre,
                                                       sample=s))
    on_g, off_g = grouped(params, batch, jnp.array(True))[2], grouped(params, batch,
                                                                      jnp.array(False))[2]
    assert bool(on_g.valid) and not bool(off_g.valid) and float(off_g.local_sqr) == 0.0
    # Python bools: True is the plain path, False skips the norms at trace time.
    assert float(gs.microbatch_grads(mlp_loss, params, batch, 4, sample=False)[2].total_sqr) == 0


def test_multi_steps_every_samples_one_window_in_k(mlp_problem):
    params, batch = mlp_problem
    tx = gs.multi_steps(optax.sgd(0.0), 2, init_batch_size=4, micro_batch_size=8, every=3)
    st = tx.init(params)
    upd = jax.jit(tx.update)
    for i in range(2 * 7):  # 7 windows: sampled windows 0, 3, 6
        half = jax.tree.map(lambda x, i=i: x[(i % 2) * 8:(i % 2) * 8 + 8], batch)
        _, st = upd(_mlp_grad(params, half), st, params)
    assert int(gs.get_grad_stats(st).count) == 3


def test_sampling_arguments_are_checked(mlp_problem):
    params, batch = mlp_problem
    with pytest.raises(TypeError, match=r"sample \('yes'\)"):
        gs.microbatch_grads(mlp_loss, params, batch, 4, sample="yes")
    with pytest.raises(TypeError, match=r"sample"):
        gs.microbatch_grads(mlp_loss, params, batch, 4, sample=jnp.ones(2, bool))
    with pytest.raises(ValueError, match=r"every \(0\)"):
        gs.gradient_noise_scale(4, every=0)
    with pytest.raises(ValueError, match=r"every \(-1\)"):
        gs.multi_steps(optax.sgd(0.1), 2, 4, 8, every=-1)
    with pytest.raises(ValueError, match="no gradient_noise_scale"):
        gs.sample_now(optax.sgd(0.1).init(params))


def test_preconditioned_gradients_are_exact_and_finite_when_T_overflows():
    # The returned gradients carry an exact zero derived from T (it orders the
    # nu read before the optimizer's in-place update); an overflowing T must
    # not leak into them.
    w = {"a": jnp.full((4,), 1e19, jnp.float32)}
    batch = {"x": jnp.ones((8, 4))}

    def loss(p, b):
        return jnp.mean(b["x"] @ p["a"])  # gradient 1 per element, times the scale below

    big = lambda p, b: 1e19 * loss(p, b)  # noqa: E731  (gradient 1e19: T overflows)
    pre = gs.adam_preconditioner(optax.ScaleByAdamState(
        jnp.int32(2), jax.tree.map(jnp.zeros_like, w), jax.tree.map(lambda x: x * 0 + 1e-30, w)))
    _, g, sq = jax.jit(lambda p, b, pre: gs.microbatch_grads(big, p, b, 2, preconditioner=pre))(
        w, batch, pre)
    _, g_plain, _ = jax.jit(lambda p, b: gs.microbatch_grads(big, p, b, 2))(w, batch)
    assert not np.isfinite(float(sq.total_sqr))
    np.testing.assert_array_equal(np.asarray(g["a"]), np.asarray(g_plain["a"]))
    assert np.all(np.isfinite(np.asarray(g["a"])))


@pytest.mark.parametrize("mode", ["shard_map", "scan"])
def test_adam_step_does_not_copy_the_second_moment(mode):
    # Regression guard: without the ordering, XLA copies every nu leaf at the
    # start of the step because the norm's read and Adam's in-place write of
    # the donated state are unordered.
    params = {"a": jnp.zeros((64, 32)), "b": jnp.zeros((32, 48))}
    batch = {"x": jnp.ones((16, 64))}

    def loss(p, b):
        return jnp.mean(jnp.tanh(b["x"] @ p["a"]) @ p["b"])

    tx = optax.chain(gs.gradient_noise_scale(4, differenced=False), optax.adam(1e-3))
    mesh = jax.make_mesh((4,), ("data",), devices=jax.devices()[:4])

    def step(p, st, b):
        pre = gs.auto_preconditioner(st)
        if mode == "shard_map":
            _, g, sq = gs.data_parallel_grads(loss, p, b, "data", preconditioner=pre)
        else:
            _, g, sq = gs.microbatch_grads(loss, p, b, 4, preconditioner=pre)
        u, st = tx.update(g, st, p, grad_sqnorms=sq)
        return optax.apply_updates(p, u), st

    if mode == "shard_map":
        step = jax.shard_map(step, mesh=mesh, in_specs=(P(), P(), P("data")),
                             out_specs=(P(), P()))
        batch = jax.device_put(batch, NamedSharding(mesh, P("data")))
    text = jax.jit(step, donate_argnums=(0, 1)).lower(params, tx.init(params),
                                                      batch).compile().as_text()
    entry = text.split("ENTRY")[1]
    copied = [line.split("=")[1].split("copy(")[0].strip() for line in entry.splitlines()
              if " copy(" in line]
    shapes = {f"f32[{','.join(map(str, x.shape))}]" for x in jax.tree.leaves(params)}
    assert not [c for c in copied if c.split("{")[0] in shapes], copied


# ----------------------------------------------------------------------------- jit boundaries


@jax.jit
def _update_across_jit(g, st, params, sq):
    # The GradSqNorms arrives as an argument of a jitted function.
    return _GNS16.update(g, st, params, grad_sqnorms=sq)[1]


_GNS16 = gs.gradient_noise_scale(16, differenced=True)


def test_grad_sqnorms_crossing_a_jit_boundary_keep_updating():
    """A static part count stays an int through jit, and a traced one still picks its estimator.

    Before the fix the count became a tracer at the boundary, the transformation took the
    unbiased path for count 1 too, and update_grad_stats ignored every sample: the
    statistics silently stopped updating.
    """
    params = {"w": jnp.ones(8), "b": jnp.zeros(2)}  # small: a few compiles, each cheap
    g1 = {"w": jnp.linspace(-1.0, 1.0, 8), "b": jnp.array([0.5, -0.25])}
    g2 = jax.tree.map(lambda x: 0.5 * x + 0.01, g1)
    one = gs.GradSqNorms(jnp.float32(1.0), jnp.float32(1.0), 1, 16)
    inside = jax.jit(lambda g, st, p: _GNS16.update(  # the GradSqNorms built inside jit
        g, st, p, grad_sqnorms=gs.GradSqNorms(jnp.float32(1.0), jnp.float32(1.0), 1, 16))[1])
    ref = _GNS16.init(params)
    for g in (g1, g2):
        ref = inside(g, ref, params)
    for count in (1, jnp.int32(1)):  # static and traced count 1: the differenced estimator
        sq = one._replace(count=count)
        st = _GNS16.init(params)
        for g in (g1, g2):
            st = _update_across_jit(g, st, params, sq)
        stats = gs.get_grad_stats(st)
        assert int(stats.count) == 1 and bool(stats.biased), count
        np.testing.assert_allclose(gs.get_grad_params(st), gs.get_grad_params(ref), rtol=1e-5)
    four = gs.GradSqNorms(jnp.float32(5.0), jnp.float32(2.0), 4, 64)
    for count in (4, jnp.int32(4)):  # count > 1: the unbiased estimator, every step
        st = _GNS16.init(params)
        for g in (g1, g2):
            st = _update_across_jit(g, st, params, four._replace(count=count))
        stats = gs.get_grad_stats(st)
        assert int(stats.count) == 2 and not bool(stats.biased), count
        np.testing.assert_allclose(gs.get_grad_params(st), [1.0, 4.0], rtol=1e-5)
    seen = []
    jax.jit(lambda sq: seen.append(type(sq.count)) or sq.local_sqr)(one)
    assert seen == [int]  # the count is pytree metadata, not a traced leaf
    assert len(jax.tree.leaves(one)) == 4


def test_grouped_grads_group_sharding_on_auto_and_explicit_meshes(mlp_problem):
    """``group_sharding`` on an Auto mesh constrains, on an Explicit one reshards (no error)."""
    from jax.sharding import AxisType

    params, batch = mlp_problem
    _, g_ref, sq_ref = jax.jit(lambda p, b: gs.grouped_grads(mlp_loss, p, b, 4))(params, batch)
    for axis_type in (AxisType.Auto, AxisType.Explicit):
        mesh = jax.make_mesh((4,), ("data",), devices=jax.devices()[:4], axis_types=(axis_type,))
        shard = NamedSharding(mesh, P("data"))
        sbatch = jax.device_put(batch, shard)
        with jax.set_mesh(mesh):
            _, g, sq = jax.jit(lambda p, b, s=shard: gs.grouped_grads(
                mlp_loss, p, b, 4, group_sharding=s))(params, sbatch)
        np.testing.assert_allclose(_flat(g), _flat(g_ref), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose([sq.local_sqr, sq.total_sqr],
                                   [sq_ref.local_sqr, sq_ref.total_sqr], rtol=1e-5)


def test_no_jax_internals_in_the_collection_helpers():
    """The helpers read no abstract-value fields and pick no API by catching an error."""
    import ast
    import inspect

    from goodput_jax.model.gradstats import collect, parts, transform

    for mod in (collect, parts, transform):
        tree = ast.parse(inspect.getsource(mod))
        attrs = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        assert not attrs & {"vma", "manual_axis_type", "Tracer", "core"}, mod.__name__
        for node in ast.walk(tree):
            if isinstance(node, ast.ExceptHandler):
                raise AssertionError(f"{mod.__name__}: try/except at line {node.lineno}")


# ----------------------------------------------------------------------------- issue 33


def test_split_grads_is_the_two_part_microbatch_estimate_on_sampled_steps(mlp_problem):
    params, batch = mlp_problem
    nu = jax.tree.map(lambda p: jnp.abs(p) * 1e-3 + 1e-6, params)
    pre = gs.adam_preconditioner(optax.ScaleByAdamState(
        jnp.int32(30), jax.tree.map(jnp.zeros_like, params), nu))
    assert bool(pre.valid)  # 30 >= DEFAULT_MIN_COUNT
    split = jax.jit(lambda p, b, s: gs.split_grads(mlp_loss, p, b, preconditioner=pre, sample=s))
    # split_grads floors Adam's nu at the step's mean gradient (Preconditioner.updated, as
    # on several devices): the reference is the two-microbatch estimate with that floor
    g_full = jax.grad(mlp_loss)(params, batch)
    _, g_ref, ref = jax.jit(lambda p, b: gs.microbatch_grads(
        mlp_loss, p, b, 2, preconditioner=pre.updated(g_full)))(params, batch)
    loss_on, g_on, on = split(params, batch, jnp.array(True))
    loss_off, g_off, off = split(params, batch, jnp.array(False))
    assert on.count == off.count == 2 and on.batch_size == 16
    np.testing.assert_allclose([on.local_sqr, on.total_sqr], [ref.local_sqr, ref.total_sqr],
                               rtol=1e-5)
    assert float(ref.total_sqr) * 2 - float(ref.local_sqr) != 0.0
    assert bool(on.valid) and not bool(off.valid) and float(off.local_sqr) == 0.0
    # Unsampled steps: the plain gradient of the whole batch (same values).
    loss, g = jax.value_and_grad(mlp_loss)(params, batch)
    np.testing.assert_allclose(_flat(g_off), _flat(g), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(_flat(g_on), _flat(g), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose([loss_on, loss_off], [loss, loss], rtol=1e-5)
    with pytest.raises(ValueError, match=r"parts \(1\)"):
        gs.split_grads(mlp_loss, params, batch, parts=1)
    with pytest.raises(ValueError, match=r"not divisible by parts \(3\)"):
        gs.split_grads(mlp_loss, params, batch, parts=3)


def test_one_device_mesh_keeps_the_preconditioner(mlp_problem):
    """A 1-device mesh used to give count 1, leaving the step to the differenced
    estimator, which never saw the preconditioner unless it was passed to tx.update too."""
    params, batch = mlp_problem
    nu = jax.tree.map(lambda p: jnp.abs(p) * 1e-3 + 1e-6, params)
    pre = gs.adam_preconditioner(optax.ScaleByAdamState(
        jnp.int32(30), jax.tree.map(jnp.zeros_like, params), nu))
    mesh = jax.make_mesh((1,), ("data",), devices=jax.devices()[:1])

    def step(params, pre, batch):
        return gs.data_parallel_grads(mlp_loss, params, batch, "data", preconditioner=pre)

    f = jax.jit(jax.shard_map(step, mesh=mesh, in_specs=(P(), P(), P("data")),
                              out_specs=(P(), P(), P())))
    _, grads, sq = f(params, pre, jax.device_put(batch, NamedSharding(mesh, P("data"))))
    _, _, ref = gs.split_grads(mlp_loss, params, batch, preconditioner=pre)
    assert sq.count == 2 and bool(sq.valid)
    np.testing.assert_allclose([sq.local_sqr, sq.total_sqr], [ref.local_sqr, ref.total_sqr],
                               rtol=1e-5)
    np.testing.assert_allclose(_flat(grads), _flat(jax.grad(mlp_loss)(params, batch)),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("traced", [True, False], ids=["num_active", "static"])
def test_one_device_accumulation_with_adam_takes_two_floored_parts(mlp_problem, traced):
    """One device accumulating 3 microbatches of 4 with Adam (issue 33): two parts, the first
    ``3 // 2`` microbatches and the rest (4 and 8 examples), with ``S = (a |G_a|^2 + b |G_b|^2)
    / (a + b)`` and ``T`` of the mean gradient, both with ``nu`` floored at the mean gradient.
    ``nu`` is 0 in some elements (a unit no earlier batch activated): the per-microbatch norms
    of before (``nu`` as it was, count 3) took those as ``g / eps``."""
    params, batch = mlp_problem
    nu = jax.tree.map(lambda p: jnp.abs(p) * 1e-3 + 1e-6, params)
    nu = jax.tree.map(lambda v: v.at[..., :2].set(0.0) if v.ndim == 2 else v, nu)  # silent
    pre = gs.adam_preconditioner(optax.ScaleByAdamState(
        jnp.int32(30), jax.tree.map(jnp.zeros_like, params), nu))
    mesh = jax.make_mesh((1,), ("data",), devices=jax.devices()[:1])
    if traced:  # the adaptive step's form: 4 slots, 3 of them used
        data = batch  # microbatch i: rows 4i to 4i + 3; the fourth is padding, never read

        def step(params, pre, batch):
            return gs.data_parallel_grads(mlp_loss, params, batch, "data", num_microbatches=4,
                                          num_active=jnp.int32(3), preconditioner=pre)
    else:
        data = {k: v[:12] for k, v in batch.items()}

        def step(params, pre, batch):
            return gs.data_parallel_grads(mlp_loss, params, batch, "data", num_microbatches=3,
                                          preconditioner=pre)

    f = jax.jit(jax.shard_map(step, mesh=mesh, in_specs=(P(), P(), P("data")),
                              out_specs=(P(), P(), P())))
    _, grads, sq = f(params, pre, jax.device_put(data, NamedSharding(mesh, P("data"))))
    micro = [jax.grad(mlp_loss)(params, {k: v[4 * i:4 * (i + 1)] for k, v in batch.items()})
             for i in range(3)]
    mean = jax.tree.map(lambda *g: sum(g) / 3, *micro)
    g_b = jax.tree.map(lambda x, y: (x + y) / 2, micro[1], micro[2])
    floored = pre.updated(mean)
    s_want = (4 * gs.sqnorm(micro[0], floored) + 8 * gs.sqnorm(g_b, floored)) / 12
    assert int(sq.count) == 2 and int(sq.batch_size) == 12 and bool(sq.valid)
    np.testing.assert_allclose([sq.local_sqr, sq.total_sqr],
                               [s_want, gs.sqnorm(mean, floored)], rtol=1e-5)
    np.testing.assert_allclose(_flat(grads), _flat(mean), rtol=1e-5, atol=1e-6)
    # nu as it was makes the silent elements g / eps: the norm is orders larger
    assert float(gs.sqnorm(micro[0], pre)) > 1e6 * float(gs.sqnorm(micro[0], floored))


def test_two_microbatches_with_adam_take_nu_floored_at_their_mean(mlp_problem):
    """microbatch_grads with 2 microbatches (the quickstart's) and an Adam preconditioner:
    both norms with nu floored at the mean gradient, as split_grads; with silent units
    (nu 0) the norms of nu as it was are orders larger."""
    params, batch = mlp_problem
    nu = jax.tree.map(lambda p: jnp.abs(p) * 1e-3 + 1e-6, params)
    nu = jax.tree.map(lambda v: v.at[..., :2].set(0.0) if v.ndim == 2 else v, nu)
    pre = gs.adam_preconditioner(optax.ScaleByAdamState(
        jnp.int32(30), jax.tree.map(jnp.zeros_like, params), nu))
    _, grads, sq = jax.jit(lambda p, b: gs.microbatch_grads(mlp_loss, p, b, 2,
                                                            preconditioner=pre))(params, batch)
    halves = [jax.grad(mlp_loss)(params, {k: v[8 * i:8 * (i + 1)] for k, v in batch.items()})
              for i in range(2)]
    mean = jax.tree.map(lambda a, b: (a + b) / 2, *halves)
    floored = pre.updated(mean)
    want = [(gs.sqnorm(halves[0], floored) + gs.sqnorm(halves[1], floored)) / 2,
            gs.sqnorm(mean, floored)]
    assert sq.count == 2 and sq.batch_size == 16
    np.testing.assert_allclose([sq.local_sqr, sq.total_sqr], want, rtol=1e-5)
    np.testing.assert_allclose(_flat(grads), _flat(mean), rtol=1e-5, atol=1e-6)
    assert float(gs.sqnorm(halves[0], pre)) > 1e6 * float(want[0])
    with pytest.raises(ValueError, match=r"num_microbatches \(2\)"):
        gs.microbatch_grads(mlp_loss, params, {k: v[:15] for k, v in batch.items()}, 2,
                            preconditioner=pre)


def test_growing_window_forgets_the_warm_up_and_ema_does_not():
    """1000 samples of (sqr 1, var 4) after 20 wild warm-up samples (sqr -50, var 1e4):
    the growing window's weight on the warm-up is (20/1020)^3 ~ 7.5e-6; AdaptDL's
    EMA (window 1000) still gives it ~1 %, 30x the var."""
    wild = gs.GradSqNorms(jnp.float32(2e4 - 50.0), jnp.float32(1e4 - 50.0), 2, 8)
    est = gs.estimate_grad_params(wild.local_sqr, wild.total_sqr, 2, 1.0)  # sqr -50, var 1e4
    good = gs.GradSqNorms(jnp.float32(9.0), jnp.float32(5.0), 2, 8)  # sqr 1, var 4 at scale 1
    out = {}
    for averaging in ("growing", "ema"):
        def body(s, i, averaging=averaging):
            return gs.update_grad_stats(s, jax.lax.cond(i < 20, lambda: wild, lambda: good), 8,
                                        averaging=averaging), None
        s = jax.lax.scan(body, gs.init_grad_stats(), jnp.arange(1020))[0]
        out[averaging] = gs.grad_params_from_stats(s)
    assert float(est.var) > 1e3  # the warm-up really is wild
    # the warm-up's weight: (20 / 1020) ** 3 = 7.5e-6, i.e. var 4 + 0.075
    np.testing.assert_allclose(out["growing"], (1.0, 4.075), rtol=2e-3)
    assert abs(float(out["ema"].var) / 4.0 - 1.0) > 0.5
    with pytest.raises(ValueError, match=r"averaging \('x'\)"):
        gs.gradient_noise_scale(8, averaging="x")


def test_one_device_traced_single_microbatch_is_split(mlp_problem):
    """The adaptive step's one-replica layout (traced num_active): one active microbatch
    gives count 2 (its halves) instead of the differenced estimator's count 1."""
    params, batch = mlp_problem
    mesh = jax.make_mesh((1,), ("data",), devices=jax.devices()[:1])

    def step(params, batch, active):
        _, g, sq = gs.data_parallel_grads(mlp_loss, params, batch, "data", num_microbatches=2,
                                          num_active=active)
        return g, (sq.local_sqr, sq.total_sqr, jnp.asarray(sq.count))

    f = jax.jit(jax.shard_map(step, mesh=mesh, in_specs=(P(), P("data"), P()),
                              out_specs=(P(), P())))
    sb = jax.device_put(batch, NamedSharding(mesh, P("data")))
    first = jax.tree.map(lambda x: x[:8], batch)
    g, (s, t, count) = f(params, sb, jnp.int32(1))
    _, g_ref, ref = gs.split_grads(mlp_loss, params, first)
    assert int(count) == 2
    np.testing.assert_allclose([s, t], [ref.local_sqr, ref.total_sqr], rtol=1e-5)
    np.testing.assert_allclose(_flat(g), _flat(g_ref), rtol=1e-5, atol=1e-7)
    _, (s2, t2, count2) = f(params, sb, jnp.int32(2))
    _, _, ref2 = gs.microbatch_grads(mlp_loss, params, batch, 2)
    assert int(count2) == 2
    np.testing.assert_allclose([s2, t2], [ref2.local_sqr, ref2.total_sqr], rtol=1e-5)
