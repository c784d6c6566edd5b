"""make_train_step builds on gradstats: Adam statistics equal the hooks' path, sampling, cost.

The hooks' path is a hand-written gradstats step (as ``goodput_jax.demo`` and the
GoodputHooks docs write it): ``data_parallel_grads(..., preconditioner=
auto_preconditioner(opt_state))`` inside ``jax.shard_map``, then ``tx.update``.
"""

from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from goodput_jax.adaptive import adaptive_optimizer, data_mesh, make_train_step
from goodput_jax.integrations.stats import GradStatsReader
from goodput_jax.model import gradstats as gs

M0 = 8
B = 2  # atomic batch per replica
#: the mechanics below compare a few steps sample by sample: the preconditioned statistics
#: from Adam's first update on (AdaptDL's rule, min_count=1), not after the default warm-up
PRE = functools.partial(gs.auto_preconditioner, min_count=1)


def _loss(p, b):
    return jnp.mean((jnp.tanh(b["x"] @ p["a"]) @ p["b"] - b["y"]) ** 2)


def _params():
    ka, kb = jax.random.split(jax.random.key(0))
    return {"a": 0.3 * jax.random.normal(ka, (6, 8)), "b": 0.3 * jax.random.normal(kb, (8,))}


def _batches(steps, slots, per_slot, seed=0):
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(size=(slots, per_slot, 6)).astype(np.float32),
             "y": rng.normal(size=(slots, per_slot)).astype(np.float32)} for _ in range(steps)]


def _mesh(devices):
    if jax.device_count() < devices:
        pytest.skip(f"needs {devices} devices")
    return data_mesh(jax.devices()[:devices])


def _hooks_path_step(tx, mesh, num_micro, parts="microbatch"):
    """The gradstats step a hooks user writes (the demo's), on the first num_micro slots."""

    def step(p, st, flat):
        pre = PRE(st)
        loss, g, sq = gs.data_parallel_grads(_loss, p, flat, "data", num_microbatches=num_micro,
                                             preconditioner=pre, parts=parts)
        u, st = tx.update(g, st, p, grad_sqnorms=sq, grad_params=gs.get_grad_params(st),
                          preconditioner=pre, batch_size=sq.batch_size)
        return optax.apply_updates(p, u), st, loss

    sm = jax.shard_map(step, mesh=mesh, in_specs=(P(), P(), P("data")), out_specs=(P(), P(), P()))
    return jax.jit(sm)


def _flat_for(batch, num_micro, devices):
    """[S, R * b, ...] slots -> each device's first num_micro slots, flat, device-major."""
    out = {}
    for k, v in batch.items():
        v = v[:num_micro]  # [n, R * b, ...]
        per_dev = v.reshape((num_micro, devices, -1) + v.shape[2:]).swapaxes(0, 1)
        out[k] = per_dev.reshape((-1,) + v.shape[2:])  # device d: its n slots, slot-major
    return out


def _run_both(devices, slots, num_micro, parts, steps=4):
    mesh = _mesh(devices)
    tx = adaptive_optimizer(optax.adam(1e-2), M0, rule="adam")
    adaptive = make_train_step(_loss, tx, mesh=mesh, donate=False, preconditioner=PRE)
    ref = _hooks_path_step(tx, mesh, num_micro, parts)
    p_a = p_r = _params()
    st_a = st_r = tx.init(p_a)
    sharding = NamedSharding(mesh, P("data"))
    for batch in _batches(steps, slots, devices * B):
        p_a, st_a, loss_a = adaptive(p_a, st_a, batch, np.int32(num_micro))
        flat = jax.device_put(_flat_for(batch, num_micro, devices), sharding)
        p_r, st_r, loss_r = ref(p_r, st_r, flat)
        np.testing.assert_allclose(loss_a, loss_r, rtol=1e-5)
    return (p_a, st_a), (p_r, st_r), adaptive


@pytest.mark.parametrize("devices,slots,num_micro,parts", [
    (4, 1, 1, "microbatch"),  # replicas are the parts either way
    (4, 4, 3, "device"),  # accumulation: the replicas' accumulated gradients are the parts
    (1, 4, 2, "microbatch"),  # one replica: the micro-steps are the parts
])
def test_adam_statistics_equal_through_the_adaptive_step_and_the_hooks_path(devices, slots,
                                                                          num_micro, parts):
    (p_a, st_a), (p_r, st_r), adaptive = _run_both(devices, slots, num_micro, parts)
    got, want = gs.get_grad_params(st_a), gs.get_grad_params(st_r)
    assert int(gs.get_grad_stats(st_a).count) == int(gs.get_grad_stats(st_r).count) == 3
    np.testing.assert_allclose(float(got.sqr), float(want.sqr), rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(float(got.var), float(want.var), rtol=1e-4)
    # what the hooks read: the adaptive step's in-step StatsSummary against the hooks' own
    # copy of the hand-written step's GradStatsState
    summary = adaptive.stats_summary()
    assert isinstance(summary, gs.StatsSummary)
    via_step, via_state = GradStatsReader(), GradStatsReader()
    via_step.after_step(0, adaptive, None)
    via_state.observe((p_r, st_r), wait=True)
    a, r = via_step.grad_params, via_state.grad_params
    assert via_step.count == via_state.count == 3
    np.testing.assert_allclose(a.sqr, r.sqr, rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(a.var, r.var, rtol=1e-4)
    for k in p_a:
        np.testing.assert_allclose(p_a[k], p_r[k], rtol=1e-5, atol=1e-7)


def test_adam_statistics_are_of_the_preconditioned_gradient():
    """Step 1's sample by hand: S and T of g / (sqrt(nu_hat) + eps), not of g (d806996), with
    ``nu`` floored at this step's share of Adam's own, ``(1 - b2) * G**2`` (issue 33: ``nu``
    before the step can be ~0 where this batch's gradient is not)."""
    mesh = _mesh(4)
    tx = adaptive_optimizer(optax.adam(1e-2), M0, rule="adam")
    step = make_train_step(_loss, tx, mesh=mesh, donate=False, preconditioner=PRE)
    p0 = _params()
    b0, b1 = _batches(2, 1, 4 * B, seed=3)
    p1, st1, _ = step(p0, tx.init(p0), b0, np.int32(1))
    assert int(gs.get_grad_stats(st1).count) == 0  # Adam's nu empty at step 0: no sample
    _, st2, _ = step(p1, st1, b1, np.int32(1))
    adam = gs.find_adam_state(st1)
    bc = 1.0 - 0.999 ** int(adam.count)
    parts = [jax.grad(_loss)(p1, {k: v[0, d * B:(d + 1) * B] for k, v in b1.items()})
             for d in range(4)]
    mean = jax.tree.map(lambda *g: sum(g) / 4, *parts)
    nu = jax.tree.map(lambda v, g: jnp.maximum(v, 0.001 * g ** 2), adam.nu, mean)
    mult = jax.tree.map(lambda v: 1.0 / (jnp.sqrt(v / bc) + 1e-8), nu)

    def sq(tree, m=None):
        return sum(float(jnp.sum(jnp.square(x if m is None else x * w)))
                   for x, w in zip(jax.tree.leaves(tree), jax.tree.leaves(m or tree)))

    s_pre, t_pre = np.mean([sq(g, mult) for g in parts]), sq(mean, mult)
    want = gs.estimate_grad_params(s_pre, t_pre, 4, 4 * B / M0)
    got = gs.get_grad_params(st2)
    assert float(got.sqr) == pytest.approx(max(float(want.sqr), 0.0), rel=1e-3, abs=1e-6)
    assert float(got.var) == pytest.approx(float(want.var), rel=1e-3)
    raw = gs.estimate_grad_params(np.mean([sq(g) for g in parts]), sq(mean), 4, 4 * B / M0)
    assert float(got.var) != pytest.approx(float(raw.var), rel=0.05)  # the raw statistics differ


def test_sampling_every_k_skips_the_norms_and_never_retraces():
    mesh = _mesh(4)
    loss = chex.assert_max_traces(_loss, n=1)  # one trace of the loss: one compile
    tx = adaptive_optimizer(optax.adam(1e-2), M0, rule="adam", every=2)
    step = make_train_step(loss, tx, mesh=mesh, donate=False, preconditioner=PRE)
    p = _params()
    st = tx.init(p)
    counts = []
    for i, batch in enumerate(_batches(6, 2, 4 * B)):
        p, st, _ = step(p, st, batch, np.int32(1 + i % 2))
        counts.append(int(gs.get_grad_stats(st).count))
    assert step.traces() == 1
    # steps 0, 2, 4 sample (step 0's is void: Adam's nu is still empty); 1, 3, 5 skip
    assert counts == [0, 0, 1, 1, 2, 2]
    assert " conditional(" in step.lower(p, st, batch, np.int32(1)).compile().as_text()


def _all_reduces(text):
    return sum(" all-reduce(" in line or " all-reduce-start(" in line for line in text.splitlines())


@pytest.mark.parametrize("base", ["sgd", "adam"])
def test_compiled_step_keeps_the_plain_steps_collectives_and_copies_no_nu(base):
    """One all-reduce (the gradients with [loss, S]), no collective for T, no conditional
    with every=1, and no copy of Adam's second moment in the donated step."""
    mesh = _mesh(4)
    opt = optax.adam(1e-2) if base == "adam" else optax.sgd(0.1)
    tx = adaptive_optimizer(opt, M0, rule="adam" if base == "adam" else "adascale")
    p = _params()
    st = tx.init(p)
    batch = _batches(1, 4, 4 * B)[0]
    text = make_train_step(_loss, tx, mesh=mesh).lower(p, st, batch, np.int32(3)).compile()
    text = text.as_text()

    def plain(p, b):
        loss, g = jax.value_and_grad(_loss)(p, {k: v[0] for k, v in b.items()})
        return jax.lax.pmean((loss, g), "data")

    plain_text = jax.jit(jax.shard_map(plain, mesh=mesh, in_specs=(P(), P(None, "data")),
                                       out_specs=P())).lower(p, batch).compile().as_text()
    # one all-reduce, as the step before it used gradstats (d806996: 1 for SGD and Adam);
    # a plain pmean step of the same loss compiles to one per leaf and the loss. Adam: one
    # more, of a scalar (S waits for the mean gradient: the preconditioner Adam applies in
    # this step, issue 33)
    extra = 1 if base == "adam" else 0
    assert _all_reduces(text) == 1 + extra
    assert 1 <= _all_reduces(plain_text)
    assert " conditional(" not in text
    entry = text.split("ENTRY")[1]
    copied = {line.split("=")[1].split("copy(")[0].strip().split("{")[0]
              for line in entry.splitlines() if " copy(" in line}
    shapes = {f"f32[{','.join(map(str, x.shape))}]" for x in jax.tree.leaves(p)}
    assert not copied & shapes, copied


def test_preconditioner_argument():
    mesh = _mesh(1)
    tx = adaptive_optimizer(optax.adam(1e-2), M0, rule="adam")
    with pytest.raises(TypeError, match="preconditioner"):
        make_train_step(_loss, tx, mesh=mesh, preconditioner="adam")
    # None: raw-gradient statistics (what the step took before it used gradstats' path)
    raw = make_train_step(_loss, tx, mesh=mesh, donate=False, preconditioner=None)
    pre = make_train_step(_loss, tx, mesh=mesh, donate=False,
                          preconditioner=functools.partial(gs.auto_preconditioner, b2=0.999))
    p = _params()
    st_raw = st_pre = tx.init(p)
    p_raw = p_pre = p
    for batch in _batches(3, 2, B):
        p_raw, st_raw, _ = raw(p_raw, st_raw, batch, np.int32(2))
        p_pre, st_pre, _ = pre(p_pre, st_pre, batch, np.int32(2))
    assert float(gs.get_grad_params(st_raw).var) != pytest.approx(
        float(gs.get_grad_params(st_pre).var), rel=0.05)


def test_stats_summary_is_the_last_step_s_statistics_as_a_named_tuple():
    mesh = _mesh(1)
    tx = adaptive_optimizer(optax.sgd(0.1), M0)
    step = make_train_step(_loss, tx, mesh=mesh, donate=False)
    assert step.stats_summary() is None  # before the first step
    p = _params()
    st = tx.init(p)
    for batch in _batches(3, 2, B):
        p, st, _ = step(p, st, batch, np.int32(2))
    s = step.stats_summary()
    assert isinstance(s, gs.StatsSummary)
    assert all(isinstance(x, jax.Array) and x.shape == () and x.dtype == jnp.float32 for x in s)
    gp = gs.get_grad_params(st)
    assert gs.as_stats_summary(s) == gs.StatsSummary(
        float(gs.get_grad_stats(st).count), float(gp.sqr), float(gp.var))
    assert s.count == 3
