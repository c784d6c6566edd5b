"""Flax NNX as a first-class loop (issue 33 item 3): the quickstart's NNX block runs as it
stands, the statistics readers and the hooks take an ``nnx.Optimizer``, a step without
statistics warns once naming the fix, and the adaptive step trains an NNX model through
``integrations.nnx.split_loss``."""

from __future__ import annotations

import pathlib
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from goodput_jax.adaptive import adaptive_optimizer, make_train_step
from goodput_jax.integrations import nnx as gnnx
from goodput_jax.integrations.hooks import GoodputHooks
from goodput_jax.model import gradstats as gs

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "quickstart.md"


def nnx_block() -> str:
    m = re.search(r"<!-- nnx-loop -->\s*```python\n(.*?)```", DOC.read_text(), re.DOTALL)
    assert m, "docs/quickstart.md lost its NNX loop (<!-- nnx-loop -->)"
    return m.group(1)


class Tiny(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.lin = nnx.Linear(4, 1, rngs=rngs)

    def __call__(self, x):
        return self.lin(x)[:, 0]


def tiny_loss(model, batch):
    return jnp.mean((model(batch["x"]) - batch["y"]) ** 2)


def _batch(i, n=16):
    r = np.random.default_rng(i)
    x = r.normal(size=(n, 4)).astype(np.float32)
    return {"x": x, "y": (x @ np.arange(1, 5, dtype=np.float32)
                          + r.normal(size=n).astype(np.float32))}


def _tiny(tx):
    model = Tiny(nnx.Rngs(0))
    return model, nnx.Optimizer(model, tx, wrt=nnx.Param)


@nnx.jit
def _step_with_stats(model, optimizer, batch):
    loss, grads, sq = gnnx.grads_and_stats(tiny_loss, model, optimizer, batch, 4)
    optimizer.update(model, grads, grad_sqnorms=sq)
    return loss, gnnx.stats_summary(optimizer)


@nnx.jit
def _step_loss_only(model, optimizer, batch):
    loss, grads, sq = gnnx.grads_and_stats(tiny_loss, model, optimizer, batch, 4)
    optimizer.update(model, grads, grad_sqnorms=sq)
    return loss


def test_the_quickstart_nnx_block_runs_as_it_stands(tmp_path, monkeypatch):
    monkeypatch.setenv("GOODPUT_JAX_STORE", f"sqlite:///{tmp_path / 'nnx.db'}")
    ns: dict = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(nnx_block(), "<quickstart nnx>", "exec"), ns)  # noqa: S102
    assert not [w for w in caught if "no gradient statistics" in str(w.message)]
    hooks = ns["hooks"]
    assert hooks.grad_count > 0 and hooks.suggest() is not None
    # the hooks read the optimizer's own statistics (the last step's, at the job's end)
    np.testing.assert_allclose(hooks.grad_params, gnnx.get_grad_params(ns["optimizer"]),
                               rtol=1e-5)
    hooks.close()


def test_readers_take_an_nnx_optimizer():
    model, opt = _tiny(optax.chain(gs.gradient_noise_scale(16), optax.adamw(1e-2)))
    for i in range(30):
        _step_with_stats(model, opt, _batch(i))
    gp = gnnx.get_grad_params(opt)
    ref = gs.get_grad_params(nnx.as_pure(opt.opt_state))
    assert gp.sqr > 0 and gp == (float(ref.sqr), float(ref.var))
    # the base readers take the nnx.Optimizer's boxed state as it stands (issue 33: TypeError
    # "'>' not supported between instances of 'OptArray' and 'int'")
    boxed = gs.get_grad_params(opt.opt_state)
    assert (float(boxed.sqr), float(boxed.var)) == gp
    assert int(gnnx.get_grad_stats(opt).count) > 0
    # the hooks take the optimizer (its statistics sit in OptArray boxes) directly
    hooks = GoodputHooks("nnx-set", init_batch_size=16, is_primary=False, num_replicas=1)
    hooks.update_grad_params(opt)
    assert hooks.grad_params == pytest.approx(gp, rel=1e-6)
    with pytest.raises(ValueError, match="holds no gradient statistics"):
        hooks.update_grad_params({"w": jnp.ones(2)})
    hooks.close()


def test_a_step_without_statistics_warns_once_naming_the_fix():
    """Issue 33: an NNX step that returns only the loss left suggest() None, silently."""
    model, opt = _tiny(optax.chain(gs.gradient_noise_scale(16), optax.adamw(1e-2)))
    hooks = GoodputHooks("nnx-loss", init_batch_size=16, is_primary=False, num_replicas=1,
                         stats_every=5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(25):
            hooks.step(i, _step_loss_only, model, opt, _batch(i))
        hooks.flush()
    msgs = [str(w.message) for w in caught if issubclass(w.category, UserWarning)
            and "no gradient statistics" in str(w.message)]
    assert len(msgs) == 1, msgs
    assert "integrations.nnx.stats_summary(optimizer)" in msgs[0]
    assert "gradient_noise_scale" in msgs[0]
    assert hooks.grad_params is None and hooks.suggest() is None
    # the same loop returning the summary: statistics, and no warning
    hooks2 = GoodputHooks("nnx-ok", init_batch_size=16, is_primary=False, num_replicas=1,
                          stats_every=5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(25, 50):
            hooks2.step(i, _step_with_stats, model, opt, _batch(i))
        hooks2.flush()
    assert not [w for w in caught if "no gradient statistics" in str(w.message)]
    assert hooks2.grad_params is not None and hooks2.grad_count > 0
    hooks.close()
    hooks2.close()


def test_the_adaptive_step_trains_an_nnx_model_through_split_loss():
    model = Tiny(nnx.Rngs(1))
    loss_fn, params = gnnx.split_loss(tiny_loss, model)
    tx = adaptive_optimizer(optax.adamw(5e-2), init_batch_size=16, rule="adam")
    step = make_train_step(loss_fn, tx, donate=False)
    opt_state = tx.init(params)
    r = len(jax.devices())
    losses = []
    for i in range(40):
        b = _batch(i, 16 * r)
        batch = jax.tree.map(lambda v: v[None], b)  # one microbatch slot
        params, opt_state, loss = step(params, opt_state, batch, jnp.int32(1))
        losses.append(float(loss))
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])
    assert int(gs.get_grad_stats(opt_state).count) > 0
    nnx.update(model, params)  # the trained parameters, back in the module
    b = _batch(99)
    assert float(tiny_loss(model, b)) == pytest.approx(float(loss_fn(params, b)), rel=1e-6)
    with pytest.raises(TypeError, match="must be a flax.nnx.Module"):
        gnnx.split_loss(tiny_loss, {"w": 1.0})
