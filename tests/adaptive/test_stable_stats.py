"""AdaptiveBatchSize acts only on gradient statistics that have settled (issue 33).

Early in training with AdamW the hooks' noise scale swings by orders of magnitude between
reads, and ``sqr <= 0`` makes the efficiency 1 at every batch size (the batch looks free):
in ``benchmarks/adaptive_bench.py --task cnn`` the controller went from 32 to the largest
batch in 95 steps on such reads (docs/adaptive.md). Injected step times on the hooks' fake
clock, as in ``tests/integrations/test_adaptive_stale.py``: ``0.002 + 1e-5 * b`` seconds a
step; at a noise scale of 300 the best batch is 256."""

from __future__ import annotations

import numpy as np
import pytest

from goodput_jax.adaptive import AdaptiveBatchSize
from goodput_jax.integrations.hooks import GoodputHooks
from goodput_jax.model.types import GradParams

from tests.adaptive._fake import fake_controller


def _run(tmp_path, name, steps, noise_scale, **kw):
    """``noise_scale(step) -> samples`` (``0``: ``sqr = 0``), set as new statistics every 10
    steps, as the hooks read them early in a run."""
    clock, hooks, ctl = fake_controller(tmp_path, name, **kw)
    done = [0]

    def fake_step(params, opt_state, batch, n):
        if done[0] % 10 == 0:
            phi = noise_scale(done[0])
            hooks.update_grad_params(GradParams(sqr=0.0, var=1.0) if phi == 0 else
                                     GradParams(sqr=1.0, var=phi / 32))
        clock.t += 0.002 + 1e-5 * batch["x"].shape[1]
        done[0] += 1
        return params, opt_state, 0.0

    for i in range(steps):
        ctl.step(i, fake_step, None, None)
    return ctl


def _swinging(step):
    """1e5 and 30 samples in turn for 200 steps (no estimate yet), then 300."""
    return 300.0 if step >= 200 else (1e5 if (step // 10) % 2 else 30.0)


def test_no_decision_on_swinging_statistics(tmp_path, monkeypatch):
    ctl = _run(tmp_path, "swing", 600, _swinging)
    assert ctl.switches and ctl.switches[0]["step"] > 200, ctl.switches  # none while swinging
    assert ctl.batch_size == 256, ctl.switches
    assert all(s["noise_scale"] == pytest.approx(300.0) for s in ctl.switches)
    # acting on every read (the controller before this change) moves on the swings
    monkeypatch.setattr(AdaptiveBatchSize, "stats_stable", lambda self, gp: True)
    old = _run(tmp_path, "swing-old", 600, _swinging)
    assert old.switches[0]["step"] < 200, old.switches


def test_sqr_zero_does_not_make_the_batch_free(tmp_path, monkeypatch):
    ctl = _run(tmp_path, "sqr0", 300, lambda step: 0.0)
    assert ctl.switches == [] and ctl.batch_size == 32
    assert ctl.noise_scales and all(x == float("inf") for x in ctl.noise_scales)
    # the controller before this change: efficiency 1 everywhere, up to the largest batch
    monkeypatch.setattr(AdaptiveBatchSize, "stats_stable", lambda self, gp: True)
    old = _run(tmp_path, "sqr0-old", 300, lambda step: 0.0)
    assert old.batch_size == 512, old.switches


def test_stable_arguments_are_checked():
    h = GoodputHooks("args", init_batch_size=8, num_replicas=1, num_nodes=1, is_primary=False)
    for kw in ({"stable_reads": 0}, {"stable_reads": True}, {"stable_ratio": 0.5}):
        with pytest.raises(ValueError, match=next(iter(kw))):
            AdaptiveBatchSize(h, {"x": np.arange(10.0)}, **kw)
