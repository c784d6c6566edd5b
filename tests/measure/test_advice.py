"""Checkpoint-interval advice against a simulated job (issue 35, Build 4).

A synthetic job: steps of a fixed time, a save every ``k`` steps that blocks for a known
cost, failures as a Poisson process (known mean time between them) at any moment (work,
save or restart), each failure losing the work since the last completed save and paying a
restart that can itself be hit. The simulation draws every failure time (seeded, vectorised
numpy) and measures the share of wall time that went into kept work; the advice's
prediction at its suggested interval must be within 1 pp of it, and no other interval on a
wide grid may simulate better by more than 1 pp.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from goodput_jax.measure.advice import (
    checkpoint_advice,
    daly_interval,
    expected_goodput,
    finish_forecast,
)

PP = 0.01


def _failures(rng, n: int, length: float, mtbf_s: float) -> tuple[np.ndarray, np.ndarray]:
    """For ``n`` tries at a stretch of ``length`` seconds under Poisson failures (mean
    ``mtbf_s``), each retried from its start after a failure: the failures of each (drawn
    as a geometric count) and the seconds each failed attempt lost (its failure time,
    drawn from the exponential truncated at ``length``), summed per try."""
    p_ok = math.exp(-length / mtbf_s)
    fails = rng.geometric(p_ok, size=n) - 1
    total = int(fails.sum())
    u = rng.random(total)
    lost = -mtbf_s * np.log1p(-u * -math.expm1(-length / mtbf_s))  # X | X < length
    per_try = np.bincount(np.repeat(np.arange(n), fails), weights=lost, minlength=n)
    return fails, per_try


def simulate(k_steps: np.ndarray, step_s: float, save_s: float, mtbf_s: float,
             restart_s: float, seed: int) -> np.ndarray:
    """Simulated goodput (kept work / wall time) of a job saving every ``k`` steps, for each
    ``k`` in ``k_steps``: segments of ``k`` steps and a save, each retried after a failure
    until it completes (up to 200,000 segments, or about 400,000 failures: the share is
    known to ~0.1 pp); every failure pays a restart that a failure can interrupt too
    (retried the same way)."""
    rng = np.random.default_rng(seed)
    out = np.empty(len(k_steps))
    for i, k in enumerate(k_steps):
        seg = k * step_s + save_s  # one segment: k steps and the save that keeps them
        per_seg = math.expm1(seg / mtbf_s)  # expected failures per segment
        segments = int(min(max(4e5 / per_seg, 2000), 200_000))
        fails, lost = _failures(rng, segments, seg, mtbf_s)
        wall = segments * seg + lost.sum()
        nf = int(fails.sum())
        if restart_s > 0 and nf:
            _, rlost = _failures(rng, nf, restart_s, mtbf_s)
            wall += nf * restart_s + rlost.sum()
        out[i] = segments * k * step_s / wall
    return out


CASES = [
    # step_s, save_s, mtbf_s, restart_s: two disruptions a day with a 1-min save; a short
    # MTBF with a save that is not small against it (where Young's first-order form is off)
    (2.0, 60.0, 43200.0, 300.0),
    (1.0, 120.0, 1800.0, 60.0),
    (0.5, 5.0, 3600.0, 30.0),
]


@pytest.mark.parametrize("step_s,save_s,mtbf_s,restart_s", CASES)
def test_advice_holds_in_simulation(step_s, save_s, mtbf_s, restart_s):
    adv = checkpoint_advice(save_s, mtbf_s, step_s, restart_s=restart_s,
                            current_interval_steps=10)
    best_k = adv.interval_steps
    grid = np.unique(np.round(np.geomspace(max(best_k / 20, 1), best_k * 20, 41)).astype(int))
    sim = simulate(np.concatenate([[best_k], grid]), step_s, save_s, mtbf_s, restart_s,
                   seed=35)
    at_best, others = sim[0], sim[1:]
    assert abs(adv.predicted_goodput - at_best) <= PP, (adv, at_best)
    assert others.max() <= at_best + PP, (grid[others.argmax()], others.max(), at_best)
    # and the interval matters: a tenth or ten times the suggestion is clearly worse
    far = simulate(np.array([max(best_k // 10, 1), best_k * 10]), step_s, save_s, mtbf_s,
                   restart_s, seed=36)
    assert far.max() < at_best - PP
    # today's interval's prediction, simulated
    today = simulate(np.array([10]), step_s, save_s, mtbf_s, restart_s, seed=37)[0]
    assert abs(adv.current_predicted_goodput - today) <= PP


def test_expected_goodput_matches_simulation_across_intervals():
    ks = np.array([5, 50, 300, 2000])
    sim = simulate(ks, 1.0, 120.0, 1800.0, 60.0, seed=7)
    pred = np.array([expected_goodput(k, 120.0, 1800.0, 60.0) for k in ks])
    np.testing.assert_allclose(pred, sim, atol=PP)


def test_young_and_daly_forms():
    assert daly_interval(50.0, 10000.0, "young") == pytest.approx(1000.0)
    # Daly's form is Young's plus higher-order terms minus the save cost
    d = daly_interval(50.0, 10000.0)
    assert d == pytest.approx(1000.0 * (1 + math.sqrt(50 / 20000) / 3 + 50 / 180000) - 50)
    assert daly_interval(5000.0, 1000.0) == 1000.0  # save >= 2 MTBF: checkpoint every MTBF
    with pytest.raises(ValueError, match="mtbf_s"):
        daly_interval(1.0, 0.0)
    with pytest.raises(ValueError, match="method"):
        daly_interval(1.0, 1.0, "other")


def test_finish_forecast_by_hand():
    f = finish_forecast(1000, 400, 0.5, 200.0, {"DATA_LOADING": 20.0, "OTHER": 10.0}, now=100.0)
    assert f.steps_left == 600 and f.work_s == 300.0
    assert f.expected_badput == {"DATA_LOADING": 30.0, "OTHER": 15.0}
    assert f.seconds_left == 345.0 and f.finish_time == 445.0
    assert finish_forecast(10, 20, 1.0, 1.0, {}, now=0.0).steps_left == 0
    with pytest.raises(ValueError, match="target_step"):
        finish_forecast(-1, 0, 1.0, 1.0, {}, now=0.0)
