"""data_parallel_grads with a traced microbatch count, per-device parts and an unsliced T."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from goodput_jax.model import gradstats as gs

DEV, SLOTS, BSZ = 4, 4, 2


def _loss(p, b):
    return jnp.mean((jnp.tanh(b["x"] @ p["a"]) @ p["b"] - b["y"]) ** 2)


@pytest.fixture(scope="module")
def problem():
    if jax.device_count() < DEV:
        pytest.skip(f"needs {DEV} devices")
    mesh = Mesh(np.asarray(jax.devices()[:DEV]), ("data",))
    k = jax.random.split(jax.random.key(1), 4)
    params = {"a": 0.5 * jax.random.normal(k[0], (5, 7)), "b": jax.random.normal(k[1], (7,))}
    # each device's shard: SLOTS microbatches of BSZ rows, slot-major
    batch = {"x": jax.random.normal(k[2], (DEV * SLOTS * BSZ, 5)),
             "y": jax.random.normal(k[3], (DEV * SLOTS * BSZ,))}
    adam = optax.adam(1e-2)
    st = adam.init(params)
    _, st = adam.update(jax.tree.map(jnp.ones_like, params), st, params)  # a valid nu
    return mesh, params, jax.device_put(batch, NamedSharding(mesh, P("data"))), st


def _fn(mesh, pre, **kw):
    def step(p, st, b, active):
        precond = gs.auto_preconditioner(st, min_count=1) if pre else None
        loss, g, sq = gs.data_parallel_grads(_loss, p, b, "data", num_microbatches=SLOTS,
                                             preconditioner=precond, **kw,
                                             **({"num_active": active} if active is not None
                                                else {}))
        return loss, g, (sq.local_sqr, sq.total_sqr, jnp.asarray(sq.count),
                         jnp.asarray(sq.batch_size))

    return jax.jit(jax.shard_map(step, mesh=mesh, in_specs=(P(), P(), P("data"), P()),
                                 out_specs=(P(), P(), P())))


def _first(batch, k):
    """Each device's first k microbatches (the same data the traced count uses)."""
    def cut(x):
        x = np.asarray(x).reshape((DEV, SLOTS, BSZ) + x.shape[1:])[:, :k]
        return x.reshape((-1,) + x.shape[3:])
    return jax.tree.map(cut, batch)


@pytest.mark.parametrize("pre", [False, True])
def test_traced_count_equals_the_static_path_on_the_first_microbatches(problem, pre):
    mesh, params, batch, st = problem
    traced = _fn(mesh, pre)
    for k in (1, 3, 4):
        loss, g, (s, t, count, size) = traced(params, st, batch, jnp.int32(k))
        sbatch = jax.device_put(_first(batch, k), NamedSharding(mesh, P("data")))

        def static(p, st, b, k=k):
            precond = gs.auto_preconditioner(st, min_count=1) if pre else None
            if precond is not None and k == 1:
                # one static microbatch per device takes the step's floored nu
                # (Preconditioner.updated); a traced count does not (yet): nu as given
                precond = precond._replace(b2=None)
            loss, g, sq = gs.data_parallel_grads(_loss, p, b, "data", num_microbatches=k,
                                                 preconditioner=precond)
            return loss, g, (sq.local_sqr, sq.total_sqr)

        want = jax.jit(jax.shard_map(static, mesh=mesh, in_specs=(P(), P(), P("data")),
                                     out_specs=(P(), P(), P())))(params, st, sbatch)
        assert (int(count), int(size)) == (DEV * k, DEV * k * BSZ)
        np.testing.assert_allclose(loss, want[0], rtol=1e-5)
        np.testing.assert_allclose(s, want[2][0], rtol=1e-5)
        np.testing.assert_allclose(t, want[2][1], rtol=1e-5)
        for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(want[1])):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_device_parts_and_unsliced_total(problem):
    mesh, params, batch, st = problem
    _, _, (s, t, count, _) = _fn(mesh, True, parts=gs.Parts("device", slice_total=False))(
        params, st, batch, jnp.int32(3))
    _, _, (_, t_sliced, _, _) = _fn(mesh, True, parts="device")(params, st, batch, jnp.int32(3))
    assert int(count) == DEV  # static: one part per device
    np.testing.assert_allclose(t, t_sliced, rtol=1e-5)
    pre = gs.auto_preconditioner(st, min_count=1)
    per_dev = []
    x = np.asarray(batch["x"]).reshape(DEV, SLOTS, BSZ, 5)[:, :3].reshape(DEV, -1, 5)
    y = np.asarray(batch["y"]).reshape(DEV, SLOTS, BSZ)[:, :3].reshape(DEV, -1)
    for d in range(DEV):
        per_dev.append(jax.grad(_loss)(params, {"x": x[d], "y": y[d]}))
    want_s = np.mean([float(gs.sqnorm(gd, pre)) for gd in per_dev])
    want_t = float(gs.sqnorm(jax.tree.map(lambda *a: sum(a) / DEV, *per_dev), pre))
    np.testing.assert_allclose(s, want_s, rtol=1e-4)
    np.testing.assert_allclose(t, want_t, rtol=1e-4)


def test_new_arguments_are_checked(problem):
    mesh, params, batch, st = problem
    with pytest.raises(ValueError, match="parts"):
        _fn(mesh, False, parts="replica")(params, st, batch, None)
    with pytest.raises(TypeError, match="slice_total"):
        _fn(mesh, False, parts=gs.Parts(slice_total=1))(params, st, batch, None)
    with pytest.raises(TypeError, match="num_active"):
        _fn(mesh, False)(params, st, batch, jnp.float32(2))
    def run(**kw):
        def step(p, b):
            return gs.data_parallel_grads(_loss, p, b, "data", num_microbatches=SLOTS, **kw)[0]

        return jax.jit(jax.shard_map(step, mesh=mesh, in_specs=(P(), P("data")),
                                     out_specs=P()))(params, batch)

    with pytest.raises(ValueError, match=r"num_active \(5\)"):
        run(num_active=5)
    with pytest.raises(ValueError, match="has_aux"):
        run(num_active=jnp.int32(1), has_aux=True)
    assert np.isfinite(float(run(num_active=2)))  # a Python int in range is fine
