"""StatsSummary: the NamedTuple ``(count, sqr, var)`` a step hands over, and its reading."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from goodput_jax.model import gradstats as gs


def _state(n=3):
    st = gs.init_grad_stats()
    for i in range(n):
        st = gs.update_grad_stats(st, gs.GradSqNorms(jnp.float32(5.0 + i), jnp.float32(2.0), 4, 64),
                                  16)
    return st


def test_stats_summary_is_a_named_tuple_of_float32_scalars_equal_to_the_read_outs():
    st = _state()
    s = jax.jit(gs.stats_summary)(st)
    assert isinstance(s, gs.StatsSummary) and s._fields == ("count", "sqr", "var")
    assert all(x.shape == () and x.dtype == jnp.float32 for x in s)
    gp = gs.grad_params_from_stats(st)
    assert gs.as_stats_summary(s) == gs.StatsSummary(3.0, float(gp.sqr), float(gp.var))
    before = gs.as_stats_summary(gs.stats_summary(gs.init_grad_stats()))
    assert before.count == 0.0 and before.sqr == 0.0 and before.var == pytest.approx(gs.MIN_VAR)


@pytest.mark.parametrize("value", [
    jnp.array([3.0, 1.0, 2.0], jnp.float32),  # the vector of earlier versions, on the device
    np.array([3.0, 1.0, 2.0]),
    [3.0, 1.0, 2.0],
    gs.StatsSummary(jnp.float32(3.0), jnp.float32(1.0), jnp.float32(2.0)),
    gs.StatsSummary(3, 1.0, np.float32(2.0)),
])
def test_as_stats_summary_reads_a_summary_or_the_old_vector(value):
    assert gs.is_stats_summary(value)
    got = gs.as_stats_summary(value)
    assert got == gs.StatsSummary(3.0, 1.0, 2.0) and all(type(x) is float for x in got)


@pytest.mark.parametrize("value", [jnp.zeros(4), np.zeros((1, 3)), 3.0, "abc", None,
                                   {"count": 1, "sqr": 2, "var": 3}, (1.0, 2.0)])
def test_anything_else_is_refused_naming_the_argument_and_the_value(value):
    assert not gs.is_stats_summary(value)
    with pytest.raises(TypeError, match=r"^my_arg \(.*\) must be a StatsSummary"):
        gs.as_stats_summary(value, "my_arg")
