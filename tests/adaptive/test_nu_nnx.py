"""Adam's ``nu`` rescale on a Flax NNX loop that keeps an ``nnx.Optimizer`` (issue 33).

``gradstats.rescale_nu`` takes the ``nnx.Optimizer`` (or its boxed ``opt_state``) and
rescales it in place: the optax-state path would hand back a copy that the NNX loop never
sees. A real small CNN + MLP head trained with ``optax.adamw`` by an ``nnx.jit`` step: after
the rescale every ``nu`` leaf is exactly ``f`` times what it was, ``mu`` and the step count
are untouched, and the same compiled step (one trace) runs on, from the rescaled ``nu``.
The docs' NNX example (``<!-- nu-rescale-nnx -->`` in docs/adaptive.md) runs as it stands.
"""

from __future__ import annotations

import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from goodput_jax.adaptive import AdaptiveBatchSize
from goodput_jax.integrations.hooks import GoodputHooks
from goodput_jax.model import gradstats as gs

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "adaptive.md"
B2 = 0.999


class SmallCNN(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.conv = nnx.Conv(1, 4, kernel_size=(3, 3), rngs=rngs)
        self.head = nnx.Linear(4 * 6 * 6, 3, rngs=rngs)

    def __call__(self, x):
        h = nnx.relu(self.conv(x))
        return self.head(h.reshape(h.shape[0], -1))


def loss_fn(model, batch):
    logits = model(batch["x"])
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"]).mean()


TRACES = []


@nnx.jit
def train_step(model, optimizer, batch):
    TRACES.append(1)  # runs once per trace
    loss, grads = nnx.value_and_grad(loss_fn)(model, batch)
    optimizer.update(model, grads)
    return loss


def _batch(i, n=16):
    r = np.random.default_rng(i)
    return {"x": r.normal(size=(n, 6, 6, 1)).astype(np.float32),
            "y": r.integers(0, 3, size=n).astype(np.int32)}


def _moments(optimizer, name):
    """``name`` ("mu" or "nu") of the optimizer's Adam state: the boxes and their arrays."""
    adam = gs.find_adam_state(optimizer)
    boxes = jax.tree.leaves(getattr(adam, name), is_leaf=lambda x: isinstance(x, nnx.Variable))
    assert boxes and all(isinstance(v, nnx.Variable) for v in boxes)
    return boxes, [v.get_value() for v in boxes]


def _trained(steps=4):
    model = SmallCNN(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adamw(1e-2, b2=B2), wrt=nnx.Param)
    for i in range(steps):
        train_step(model, optimizer, _batch(i))
    return model, optimizer


def test_rescale_nu_takes_an_nnx_optimizer_in_place_and_the_step_runs_on():
    model, optimizer = _trained()
    traces = len(TRACES)
    nu_boxes, nu_before = _moments(optimizer, "nu")
    mu_boxes, mu_before = _moments(optimizer, "mu")
    count = int(gs.find_adam_state(optimizer).count.get_value())
    assert count == 4 and all(float(jnp.max(a)) > 0 for a in nu_before)
    f = 0.37
    assert gs.rescale_nu(optimizer, f) is optimizer  # in place: the optimizer itself
    nu_boxes2, nu_after = _moments(optimizer, "nu")
    assert all(a is b for a, b in zip(nu_boxes, nu_boxes2))  # the same boxes, new arrays
    for a, b in zip(nu_before, nu_after):
        assert b.dtype == a.dtype and b.shape == a.shape
        np.testing.assert_array_equal(np.asarray(b), np.asarray(a) * np.float32(f))
    mu_boxes2, mu_after = _moments(optimizer, "mu")
    assert all(a is b for a, b in zip(mu_boxes, mu_boxes2))
    assert all(a is b for a, b in zip(mu_before, mu_after))  # mu untouched
    assert int(gs.find_adam_state(optimizer).count.get_value()) == count
    # the jitted NNX step runs on the rescaled state with no retrace, and its Adam update
    # starts from nu x f: nu' = b2 * (f * nu) + (1 - b2) * g**2
    batch = _batch(99)
    grads = nnx.grad(loss_fn)(model, batch)
    g = jax.tree.leaves(nnx.state(grads, nnx.Param))
    train_step(model, optimizer, batch)
    assert len(TRACES) == traces  # the same compiled program
    _, nu_next = _moments(optimizer, "nu")
    for n0, gi, n1 in zip(nu_after, g, nu_next):
        np.testing.assert_allclose(np.asarray(n1), B2 * np.asarray(n0)
                                   + (1 - B2) * np.square(np.asarray(gi)), rtol=2e-5,
                                   atol=1e-12)
    assert int(gs.find_adam_state(optimizer).count.get_value()) == count + 1


def test_rescale_nu_takes_the_boxed_state_and_runs_inside_nnx_jit():
    model, optimizer = _trained(3)
    _, before = _moments(optimizer, "nu")
    assert gs.rescale_nu(optimizer.opt_state, 0.5) is optimizer.opt_state
    _, half = _moments(optimizer, "nu")
    for a, b in zip(before, half):
        np.testing.assert_array_equal(np.asarray(b), np.asarray(a) * np.float32(0.5))

    @nnx.jit
    def rescale(opt, factor):  # a traced factor, inside the NNX transform
        gs.rescale_nu(opt, factor)

    rescale(optimizer, jnp.float32(4.0))
    _, after = _moments(optimizer, "nu")
    for a, b in zip(half, after):
        np.testing.assert_array_equal(np.asarray(b), np.asarray(a) * np.float32(4.0))
    # an NNX optimizer without an Adam-like part: nothing to rescale, nothing changed
    sgd = nnx.Optimizer(model, optax.sgd(0.1, momentum=0.9), wrt=nnx.Param)
    train_step(model, sgd, _batch(5))
    trace = [np.asarray(x) for x in jax.tree.leaves(nnx.state(sgd))]
    assert gs.rescale_nu(sgd, 0.5) is sgd
    assert all(np.array_equal(a, np.asarray(b))
               for a, b in zip(trace, jax.tree.leaves(nnx.state(sgd))))


def test_prepare_opt_state_takes_an_nnx_optimizer(tmp_path):
    """A hand loop with ``nnx.Optimizer``, ``hooks.step`` and ``adaptive.adapt()``: the
    pending switch factor goes into the optimizer, in place, once."""
    _, optimizer = _trained(2)
    hooks = GoodputHooks("nnx-prep", init_batch_size=16, num_replicas=1, num_nodes=1,
                         is_primary=False, store="sqlite:///" + str(tmp_path / "p.db"))
    ctl = AdaptiveBatchSize(hooks, {"x": np.zeros((64, 6, 6, 1), np.float32)})
    ctl.pending_nu_scale = (0.25, None)
    _, before = _moments(optimizer, "nu")
    assert ctl.prepare_opt_state(optimizer) is optimizer
    _, after = _moments(optimizer, "nu")
    for a, b in zip(before, after):
        np.testing.assert_array_equal(np.asarray(b), np.asarray(a) * np.float32(0.25))
    assert ctl.pending_nu_scale is None and ctl.prepare_opt_state(optimizer) is optimizer
    _, again = _moments(optimizer, "nu")
    assert all(a is b for a, b in zip(after, again))
    hooks.close()


def doc_block(name: str) -> str:
    m = re.search(rf"<!-- {name} -->\s*```python\n(.*?)```", DOC.read_text(), re.DOTALL)
    assert m, f"docs/adaptive.md lost its block <!-- {name} -->"
    return m.group(1)


def test_the_docs_nnx_rescale_example_runs_as_it_stands(capsys):
    ns: dict = {}
    code = compile(doc_block("nu-rescale-nnx"), "docs/adaptive.md nu-rescale-nnx", "exec")
    exec(code, ns)  # noqa: S102
    phi, factor = ns["phi"], ns["factor"]
    assert factor == gs.nu_switch_factor(phi, 32, 128) and 0 < factor < 1  # a switch up
    # the box the example holds was rescaled in place, by exactly the factor
    np.testing.assert_array_equal(np.asarray(ns["nu"][...]),
                                  np.asarray(ns["before"]) * np.float32(factor))
    assert gs.find_adam_state(ns["optimizer"]).nu["kernel"] is ns["nu"]
    assert capsys.readouterr().out == f"noise scale {phi:.0f} samples: nu x {factor:.3f}\n"
