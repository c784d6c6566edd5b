"""Issue 33, item 5: on one replica the suggestion, the report's batch curve, its hints table
and its star agree; the replicas plot is never superlinear; a job that does not allow
gradient accumulation is told what it would give where the model says it pays.

The hints come from real :class:`GoodputHooks` (``hooks.hints()``, what ``publish`` writes),
so the star is the hooks' own suggestion, drawn on the report's own curve.
"""

from __future__ import annotations

import pytest

from goodput_jax.integrations.hooks import GoodputHooks
from goodput_jax.measure.events import Event
from goodput_jax.model.types import GradParams, PerfParams
from goodput_jax.report.curves import model_curves
from tests.measure._timeline import K, calc_for, events, new_store

# the shape: one device, M0 64, max 1024, compute-bound, noisy gradients
PERF = PerfParams(0.121, 0.00568, 0.0236, 0.00634, 0.0118, 0.00317, 1.14)
GRAD = GradParams(0.00136, 0.05)


def _hooks(num_replicas=1, perf=PERF, grad=GRAD, **kw) -> GoodputHooks:
    kw.setdefault("atomic_bsz", 64 // num_replicas)
    h = GoodputHooks("j", init_batch_size=64, max_batch_size=kw.pop("max_batch_size", 1024),
                     is_primary=False, num_replicas=num_replicas, num_nodes=1, warmup_steps=0,
                     job_warmup_steps=0, **kw)
    h.perf_params = perf
    h.update_grad_params(grad)
    return h


def _on_curve(mc, batch: int) -> float:
    """The batch curve's goodput at ``batch`` (a point of it, or between two)."""
    xs, ys = mc.batch_sizes, mc.goodput_vs_batch
    if batch in xs:
        return ys[xs.index(batch)]
    i = max(j for j, x in enumerate(xs) if x <= batch)
    return min(ys[i], ys[i + 1]) if i + 1 < len(xs) else ys[i]


@pytest.mark.parametrize("accumulation", [False, True])
def test_one_replica_star_sits_on_the_curve_near_its_top(accumulation):
    """The old report drew a rising curve while the star sat at M0 (64) at 1.00x."""
    h = _hooks(gradient_accumulation=accumulation)
    sug = h.suggest()
    mc = model_curves(h.hints())
    assert mc.suggested[0] == sug.batch_size > 64
    assert mc.suggested[2] == pytest.approx(sug.goodput, rel=1e-4)
    # the star is on the curve, and within the suggestion's 5% (+ the grid's 2%) of its top
    assert mc.suggested[2] == pytest.approx(_on_curve(mc, sug.batch_size), rel=0.02)
    assert mc.suggested[2] >= 0.93 * max(mc.goodput_vs_batch)
    assert max(mc.goodput_vs_batch) <= sug.best_goodput * 1.02
    # the hints table says what the curve assumed
    assert mc.hints.gradient_accumulation is accumulation and mc.accumulation is accumulation


@pytest.mark.parametrize("kw", [
    {"num_replicas": 1},
    {"num_replicas": 1, "gradient_accumulation": True},
    {"num_replicas": 2, "local_bsz_bounds": (8, 64)},
    {"num_replicas": 4, "local_bsz_bounds": (8, 16), "max_batch_size": 2048,
     "perf": PerfParams(0.002, 1e-5, 0.2, 0.01, 0.1, 0.01, 1.5), "grad": GradParams(1e-3, 0.5)},
])
def test_the_replica_curve_is_never_superlinear(kw):
    """Per-replica goodput never grows with the count (the old curve: 21k samples/s on two
    replicas against 5.9k on one, when one replica was held at M0)."""
    mc = model_curves(_hooks(**kw).hints())
    g1 = mc.goodput_vs_replicas[0]
    for r, g in zip(mc.replicas, mc.goodput_vs_replicas, strict=True):
        assert g <= r * g1 * 1.01, (r, g, g1)


def test_the_old_one_replica_rule_was_superlinear():
    """AdaptDL's rule (one replica at M0, GoodputFunction.optimize's default, kept for the
    schedulers) without accumulation: what the replica curve drew before."""
    fn = _hooks().goodput_function()
    g1 = fn.optimize(1, 1, max_batch_size=1024)[0]
    g2 = fn.optimize(1, 2, max_batch_size=1024)[0]
    assert g2 > 2.05 * g1
    assert fn.optimize(1, 1, max_batch_size=1024, adaptdl_single_replica=False)[0] * 2 >= g2


def _page(tmp_path, hints: dict) -> str:
    from goodput_jax.report import render

    store = new_store()
    evs = events("j", "r1", [(K.JOB_START, 0), (K.STEP_START, 1, 0), (K.STEP_START, 2, 1),
                             (K.JOB_END, 3)])
    evs.insert(-1, Event(K.HINTS, "j", "r1", 0, 2.5, payload=hints))
    store.append(evs)
    path = tmp_path / "r.html"
    render.render_html(calc_for(store, "j", now=4.0), path, now=4.0)
    return path.read_text(encoding="utf-8")


def test_one_replica_page_says_replica_and_no_limits(tmp_path):
    """"1 replicas" and unbounded limits shown as "- to -"."""
    pytest.importorskip("matplotlib")
    text = _page(tmp_path, _hooks().hints())
    assert "1 replicas" not in text and "- to -" not in text
    assert "on 1 replica)" in text and ">no limits<" in text


def test_page_says_what_accumulation_would_give(tmp_path):
    pytest.importorskip("matplotlib")
    kw = {"num_replicas": 4, "local_bsz_bounds": (8, 16), "max_batch_size": 2048,
          "perf": PerfParams(0.002, 1e-5, 0.2, 0.01, 0.1, 0.01, 1.5),
          "grad": GradParams(1e-3, 0.5)}
    off, on = _hooks(**kw), _hooks(gradient_accumulation=True, **kw)
    mc = model_curves(off.hints())
    want = on.suggest()
    # the report's "with accumulation" star is the hooks' suggestion with accumulation on
    assert mc.suggested_with_accumulation[0] == pytest.approx(want.batch_size, rel=0.1)
    text = _page(tmp_path, off.hints())
    assert 'id="accumulation-off"' in text
    assert "Gradient accumulation is off for this job" in text
    assert f"the model predicts batch {mc.suggested_with_accumulation[0]} " in text
    assert "using gradient accumulation where" not in text  # the old caption's claim
    assert 'id="accumulation-off"' not in _page(tmp_path, on.hints())
