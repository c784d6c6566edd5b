"""GradStatsReader takes the StatsSummary a step hands over (and the old 3-vector)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from goodput_jax.integrations.stats import GradStatsReader
from goodput_jax.model import gradstats as gs
from goodput_jax.model.types import GradParams


def _step_with(summary):
    def train_step():
        return None

    train_step.stats_summary = lambda: summary
    return train_step


@pytest.mark.parametrize("summary", [
    gs.StatsSummary(jnp.float32(4.0), jnp.float32(1.5), jnp.float32(6.0)),
    jnp.array([4.0, 1.5, 6.0], jnp.float32),  # a user's step of an earlier version
])
def test_a_step_s_summary_is_read_as_grad_params(summary):
    r = GradStatsReader()
    r.after_step(0, _step_with(summary), None)
    assert r.pending is summary  # a reference: nothing dispatched on the training thread
    assert r.nowait() == GradParams(1.5, 6.0) and r.count == 4.0
    assert r.noise_scale() == 4.0


def test_a_summary_before_any_sample_keeps_the_previous_statistics():
    r = GradStatsReader()
    r.set(GradParams(1.0, 2.0))
    r.after_step(0, _step_with(gs.stats_summary(gs.init_grad_stats())), None)
    assert r.grad_params == GradParams(1.0, 2.0)


def test_set_takes_a_stats_summary():
    r = GradStatsReader()
    r.set(gs.StatsSummary(2.0, 1.0, 3.0))
    assert r.grad_params == GradParams(1.0, 3.0) and r.count == 2.0


def test_observe_copies_the_state_into_a_stats_summary():
    st = gs.update_grad_stats(gs.init_grad_stats(),
                              gs.GradSqNorms(jnp.float32(5.0), jnp.float32(2.0), 4, 64), 16)
    r = GradStatsReader()
    r.observe({"opt": jax.device_put(st)})
    assert isinstance(r.pending, gs.StatsSummary)
    gp = gs.grad_params_from_stats(st)
    assert r.grad_params == GradParams(float(gp.sqr), float(gp.var)) and r.count == 1.0


@pytest.mark.parametrize("bad", [jnp.zeros(4), 3.0, {"sqr": 1.0}])
def test_a_step_returning_anything_else_is_refused_at_that_step(bad):
    r = GradStatsReader()
    fn = _step_with(bad)
    with pytest.raises(TypeError, match=r"stats_summary\(\) of 'train_step' returned .* must "
                                        r"return a StatsSummary"):
        r.after_step(0, fn, None)
    r2 = GradStatsReader()
    good = [gs.StatsSummary(1.0, 1.0, 1.0)]
    fn2 = _step_with(None)
    fn2.stats_summary = lambda: good[0]
    r2.after_step(0, fn2, None)  # taken at step 0; the next take is due at step 10
    good[0] = bad
    with pytest.raises(TypeError, match="must return a StatsSummary"):
        r2.after_step(1, fn2, None)  # a step in between: its summary is checked too
