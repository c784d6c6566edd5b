"""`goodput-jax demo`'s pieces without a training run: the model summary text it prints
(from real GoodputHooks, the noise scale through gradstats) and its front door (the extras it
needs, checked before anything is written)."""

from __future__ import annotations

import math
import re
import sys

import pytest

from goodput_jax.demo import format_model_summary
from goodput_jax.integrations.hooks import GoodputHooks
from goodput_jax.model import gradstats
from goodput_jax.model.types import GradParams

NOISE = re.compile(r"gradient noise scale B_noise = M0 \* tr\(Sigma\) / \|G\|\^2 = (\S+) samples")


def _hooks(**kw) -> GoodputHooks:
    return GoodputHooks("demo-summary", init_batch_size=32, is_primary=False, num_replicas=1,
                        num_nodes=1, warmup_steps=0, job_warmup_steps=0, **kw)


@pytest.mark.parametrize("sqr, var", [(2.0, 6.0), (0.5, 40.0), (0.0, 6.0)])
def test_noise_scale_line_is_gradstats(sqr, var):
    h = _hooks()
    h.update_grad_params(GradParams(sqr, var))
    text = format_model_summary(h)
    want = float(gradstats.noise_scale(GradParams(sqr, var), 32))
    got = float(NOISE.search(text).group(1))
    if math.isinf(want):
        assert math.isinf(got)
    else:
        assert got == pytest.approx(want, rel=1e-3)  # printed to 4 significant digits
    assert got == pytest.approx(32 * var / sqr if sqr else math.inf, rel=1e-3)
    assert "step-time model: not fitted (no profiled steps)" in text
    assert "suggestion: none yet" in text


def test_no_statistics_no_fit():
    text = format_model_summary(_hooks())
    assert "gradient noise: no statistics collected" in text
    assert not NOISE.search(text) and "statistical efficiency" not in text


def test_fitted_model_lines_match_the_profile():
    h = _hooks()
    h.update_grad_params(GradParams(2.0, 6.0))
    times = {(1, 32): 0.010, (1, 64): 0.016, (2, 32): 0.012, (2, 64): 0.019}
    for (r, b), t in times.items():
        h.set_config(num_replicas=r, atomic_bsz=b)
        for _ in range(5):
            h.observe_step_time(t)
    h.set_config(num_replicas=2, atomic_bsz=32)  # running: total batch 64
    h.refit()
    text = format_model_summary(h)
    assert "step-time model fitted to 4 profiled configurations:" in text
    rows = re.findall(r"profiled r=(\d) b=(\d+)\s+measured\s+([\d.]+) ms \(median\)\s+model\s+"
                      r"([\d.]+) ms\s+\((\d+) steps\)", text)
    assert {(int(r), int(b)): float(m) for r, b, m, _, _ in rows} == {
        k: pytest.approx(v * 1e3) for k, v in times.items()}
    assert all(int(n) == 5 for *_, n in rows)
    # the model column is the fit's prediction: close to these consistent times
    assert all(abs(float(mod) - float(m)) / float(m) < 0.25 for _, _, m, mod, _ in rows)
    eff = re.search(r"statistical efficiency at batch 64: ([\d.]+) \(at 4x: ([\d.]+)\)", text)
    fn = h.goodput_function()
    assert float(eff.group(1)) == pytest.approx(float(fn.efficiency(64)), abs=1e-3)
    assert float(eff.group(2)) == pytest.approx(float(fn.efficiency(256)), abs=1e-3)
    assert re.search(r"suggested for 2 replicas: batch \d+", text)
    assert "on AdaptiveBatchSize's buckets" in text


@pytest.mark.parametrize("module", ["orbax.checkpoint", "optax"])
def test_demo_needs_its_extra_before_writing(tmp_path, capsys, monkeypatch, module):
    from goodput_jax.cli import main

    monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    out = tmp_path / "d"
    assert main(["demo", "--dir", str(out), "--quick", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "demo" in err and module in err, err
    assert not out.exists()
