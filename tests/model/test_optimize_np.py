"""The optimizer's host path (float64 numpy, small calls) gives the kernel's answers."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest

from goodput_jax.model import optimize_np as H
from goodput_jax.model.goodput import GoodputFunction, GradParams, PerfParams, optimize_fn

_RNG = np.random.RandomState(0)
PERF_PARAMS = [PerfParams(*_RNG.gamma(2.0, 2.0, [7])) for _ in range(10)]
GRAD_PARAMS = [GradParams(*_RNG.gamma(2.0, 2.0, [2])) for _ in range(10)]
REALISTIC = PerfParams(0.121, 0.00568, 0.0236, 0.00634, 0.0118, 0.00317, 1.14)
REALISTIC_GRAD = GradParams(sqr=0.00136, var=0.000502)
NODES = np.array([1, 1, 1, 2, 3, 4, 8])
REPLICAS = np.array([1, 2, 7, 2, 9, 64, 100])
BOUNDS = [(None, None), (1280, (64, 256)), (4096, (None, 100)), (2000, (32, None)),
          (128, (200, 300))]
PARAMS = [
    (PERF_PARAMS[0], GRAD_PARAMS[0]),
    (PERF_PARAMS[4], GRAD_PARAMS[6]),
    (REALISTIC, REALISTIC_GRAD),
    (REALISTIC, GradParams(0.0, 0.0)),  # the gain's denominator 0: gain 1
    (REALISTIC, GradParams(1e-3, -2e-3)),  # a negative variance: denominator <= 0 for small M
]


def _kernel(fun, nodes, replicas, max_bs, rng_, accumulation, single):
    """The jitted kernel in float64, with the bounds encoded as optimize() does."""
    m0 = fun.init_batch_size
    lo, hi = rng_ if rng_ is not None else (None, None)
    with jax.enable_x64(True):
        g, b, s = optimize_fn(fun.perf_params, fun.grad_params, m0, nodes, replicas,
                              m0 if max_bs is None else max_bs, lo or 1, hi or math.inf,
                              accumulation=accumulation, adaptdl_single_replica=single)
        return np.asarray(g), np.asarray(b), np.asarray(s)


@pytest.mark.parametrize("single", [True, False])
@pytest.mark.parametrize("accumulation", [False, True])
def test_host_path_matches_kernel(accumulation, single):
    """Scalar calls and small arrays (the host path) equal the float64 kernel: the batch
    plan exactly, the goodput to float64 rounding."""
    checked = 0
    for p, gp in PARAMS:
        fun = GoodputFunction(p, gp, 128)
        for max_bs, rng_ in BOUNDS:
            kg, kb, ks = _kernel(fun, NODES, REPLICAS, max_bs, rng_, accumulation, single)
            g, b, s = fun.optimize(NODES, REPLICAS, max_bs, rng_, accumulation,
                                   adaptdl_single_replica=single)
            assert g.dtype == np.float64 and b.dtype == s.dtype == np.int64
            np.testing.assert_array_equal(b, kb)
            np.testing.assert_array_equal(s, ks)
            np.testing.assert_allclose(g, kg, rtol=1e-9, atol=1e-300)
            for k in range(len(NODES)):
                sg, sb, ss = fun.optimize(int(NODES[k]), int(REPLICAS[k]), max_bs, rng_,
                                          accumulation, adaptdl_single_replica=single)
                assert isinstance(sg, float) and isinstance(sb, int) and isinstance(ss, int)
                assert (sb, ss) == (kb[k], ks[k])
                assert sg == pytest.approx(float(kg[k]), rel=1e-9, abs=1e-300)
                checked += 1
    assert checked == len(PARAMS) * len(BOUNDS) * len(NODES)


def test_host_path_broadcasts_like_the_kernel():
    fun = GoodputFunction(REALISTIC, REALISTIC_GRAD, 128)
    nodes, replicas = np.array([[1], [2]]), np.array([2, 4, 8])  # [2, 3]
    g, b, s = fun.optimize(nodes, replicas, 1280, (32, 256), True)
    kg, kb, ks = _kernel(fun, nodes, replicas, 1280, (32, 256), True, True)
    assert g.shape == b.shape == s.shape == (2, 3)
    np.testing.assert_array_equal(b, kb)
    np.testing.assert_allclose(g, kg, rtol=1e-9)


def test_path_chosen_by_size():
    """Up to HOST_MAX_CONFIGS configurations run on the host (float64); more in the
    jitted kernel (float32 unless x64), with the same answers."""
    fun = GoodputFunction(REALISTIC, REALISTIC_GRAD, 128)
    k = H.HOST_MAX_CONFIGS
    replicas = np.arange(1, k + 2)
    nodes = np.ceil(replicas / 4)
    small = fun.optimize(nodes[:k], replicas[:k], 4096, (32, 256), True)
    large = fun.optimize(nodes, replicas, 4096, (32, 256), True)
    assert small[0].dtype == np.float64
    assert large[0].dtype == np.float32
    np.testing.assert_array_equal(small[1], large[1][:k])
    np.testing.assert_array_equal(small[2], large[2][:k])
    np.testing.assert_allclose(small[0], large[0][:k], rtol=1e-5)


@pytest.mark.parametrize("alpha_c", [-1.0, -10.0])
def test_nan_row_gives_the_first_candidate(alpha_c):
    """A NaN among the candidates (a negative compute time to a fractional power, for the
    small batches; or all): the kernel's rule, the first candidate, on the host too."""
    perf = PerfParams(alpha_c, 0.01, 0.0, 0.0, 0.0, 0.0, 1.5)
    grad = GradParams(1.0, 1.0)
    g, b, s = H.optimize_np(perf, grad, 16.0, 1.0, 2.0, 1024.0, 1.0, math.inf, False)
    with jax.enable_x64(True):
        kg, kb, ks = optimize_fn(perf, grad, 16.0, 1.0, 2.0, 1024.0, 1.0, math.inf)
    assert math.isnan(g) and math.isnan(float(kg))
    assert (b, s) == (int(kb), int(ks)) == (8, 0)


def _general(monkeypatch, *args):
    """optimize_np with the one-configuration shortcut switched off."""
    with monkeypatch.context() as m:
        m.setattr(H, "_optimize_one", lambda *a: None)
        return H.optimize_np(*args)


def test_one_configuration_shortcut_equals_the_general_path(monkeypatch):
    """The rearranged float64 search of one configuration (folded tolerances, no
    accumulation where nothing exceeds max_atomic_bsz, no mask where nothing can fall out
    of bounds) gives the general path's plan exactly and its goodput to rounding, over
    random parameters, bounds, one replica and the rules of accumulation."""
    rng = np.random.default_rng(7)
    taken = 0
    for i in range(1500):
        p = PerfParams(*rng.gamma(2.0, 2.0, 7)) if i % 2 else REALISTIC
        gp = GradParams(*rng.gamma(2.0, 2.0, 2)) if i % 3 else REALISTIC_GRAD
        m0 = float(rng.choice([1, 3, 16, 100.5, 128]))
        r = 1.0 if i % 4 == 0 else float(rng.integers(1, 200))
        n = float(rng.integers(1, r + 1))
        max_bs = float(m0 * rng.choice([1, 1.37, 2, 10, 100, 1000]))
        lo = float(rng.choice([1, 2, 7.5, 32, 64]))
        hi = float(rng.choice([math.inf, 2.5, 33.3, 64, 100, 256, 1000]))
        if lo > hi:
            continue
        acc, single = bool(rng.integers(2)), bool(rng.integers(2))
        hi_k = hi if math.isfinite(hi) else max_bs
        args = (p, gp, m0, n, r, max_bs, lo, hi, acc, single)
        fast = H._optimize_one(p, gp, m0, n, r, max_bs, lo, hi_k, acc, single)
        assert fast is not None  # ordinary values: the shortcut runs
        taken += 1
        g, b, s = _general(monkeypatch, *args)
        assert (fast[1], fast[2]) == (b, s), args
        assert fast[0] == pytest.approx(g, rel=1e-12), args
        assert isinstance(fast[0], float) and isinstance(fast[1], int) and isinstance(fast[2], int)
    assert taken > 1000


@pytest.mark.parametrize("perf,grad", [
    (PerfParams(-1.0, 0.01, 0.0, 0.0, 0.0, 0.0, 1.5), GradParams(1.0, 1.0)),  # negative time
    (REALISTIC, GradParams(1e-3, -2e-3)),  # negative variance
    (REALISTIC, GradParams(0.0, 0.0)),  # the gain's denominator 0
    (PerfParams(1e3, 1.0, 0.0, 0.0, 0.0, 0.0, 200.0), REALISTIC_GRAD),  # powers overflow
])
def test_one_configuration_shortcut_leaves_the_unusual_to_the_general_path(perf, grad):
    assert H._optimize_one(perf, grad, 16.0, 1.0, 2.0, 1024.0, 1.0, 1024.0, True, True) is None


def test_log1p_unit_is_log1p_on_the_unit_interval():
    """The optimizer's float32 log(1 + u) (a series; XLA's CPU log is slow) to a few ulp of
    float64's log1p on [0, 1], tiny u included; float64 input: log(1 + u) itself."""
    import jax.numpy as jnp

    from goodput_jax.model.formulas import log1p_unit

    u = np.concatenate([np.linspace(0, 1, 20001), np.geomspace(1e-30, 1, 2001)])
    got = np.asarray(log1p_unit(jnp, jnp.asarray(u, jnp.float32))).astype(np.float64)
    want = np.log1p(u.astype(np.float32).astype(np.float64))
    assert np.max(np.abs(got - want) / np.maximum(want, 1e-300)) < 5e-7
    np.testing.assert_array_equal(log1p_unit(np, u), np.log(1.0 + u))


@pytest.mark.parametrize("gamma", [-1.5, 0.7, 3.0])
def test_kernel_t_opt_for_any_sign_of_gamma(gamma):
    """T_opt = base * (1 + (lo/hi)**|gamma|)**(1/gamma), base hi or lo by gamma's sign, is
    (a**gamma + n**gamma)**(1/gamma): the float64 kernel equals the host's powers."""
    perf = PerfParams(0.121, 0.00568, 0.0236, 0.00634, 0.0118, 0.00317, gamma)
    fun = GoodputFunction(perf, REALISTIC_GRAD, 128)
    kg, kb, ks = _kernel(fun, NODES, REPLICAS, 4096, (32, 256), True, True)
    g, b, s = fun.optimize(NODES, REPLICAS, 4096, (32, 256), True)
    np.testing.assert_array_equal(b, kb)
    np.testing.assert_array_equal(s, ks)
    np.testing.assert_allclose(g, kg, rtol=1e-9)
