"""Tests of goodput_jax.model.goodput: seed invariants, numpy parity, traces, bad input."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from goodput_jax.model import goodput as G
from goodput_jax.model.goodput import (
    GoodputFunction,
    GradParams,
    PerfParams,
    efficiency_fn,
    goodput_fn,
    optimize_fn,
    throughput_fn,
)
from tests.model import numpy_reference as ref

# Same draws as AdaptDL's own test module: gamma(2, 2) parameters.
_RNG = np.random.RandomState(0)
PERF_PARAMS = [PerfParams(*_RNG.gamma(2.0, 2.0, [7])) for _ in range(10)]
GRAD_PARAMS = [GradParams(*_RNG.gamma(2.0, 2.0, [2])) for _ in range(10)]
COMBOS = list(itertools.product(range(10), range(10)))
REALISTIC = PerfParams(0.121, 0.00568, 0.0236, 0.00634, 0.0118, 0.00317, 1.14)
REALISTIC_GRAD = GradParams(sqr=0.00136, var=0.000502)


def _groupby_indices(*keys):
    _, inverse = np.unique(np.stack(keys, axis=1), axis=0, return_inverse=True)
    return [np.flatnonzero(inverse.ravel() == k) for k in range(inverse.max() + 1)]


def _evaluate_invariants(perf, grad, x64: bool):
    m0 = 16
    fun = GoodputFunction(perf, grad, m0)
    n, r, b, s = map(
        np.array,
        zip(*itertools.product([1, 2, 3, 4], [1, 2, 4, 8], [8, 12, 16, 20, 24], [0, 1, 2, 3, 4])),
    )
    valid = (n <= r) & (m0 <= r * b * s)
    n, r, b, s = n[valid], r[valid], b[valid], s[valid]
    goodput = fun(n, r, b, s)
    thr = fun.throughput(n, r, b, s)
    eff = fun.efficiency(r * b * (s + 1))
    # float32 rounding can break exact monotonicity comparisons by an ulp.
    tol = 0.0 if x64 else 1e-5
    assert np.all(0 <= thr)
    assert np.all(0 <= eff) and np.all(eff <= 1 + tol)
    assert np.allclose(goodput, thr * eff, rtol=1e-5)
    batch = r * b * (s + 1)
    order = np.argsort(batch, kind="stable")
    assert np.all(np.diff(eff[order]) <= tol * eff[order][1:])
    for idx in _groupby_indices(n, r, s):
        order = np.argsort(b[idx])
        assert np.all(np.diff(thr[idx][order]) >= -tol * thr[idx][order][1:])
        if len(idx) > 1:
            dx = np.diff(b[idx][order])
            dy = np.diff(thr[idx][order])
            assert np.all(
                dx[:-1] * dy[1:] - dx[1:] * dy[:-1] <= tol * np.max(thr[idx]) * np.max(dx)
            )
    for idx in _groupby_indices(n, b, s):
        scal = thr / r
        order = np.argsort(r[idx])
        assert np.all(np.diff(scal[idx][order]) <= tol * scal[idx][order][:-1])


@pytest.mark.parametrize("pi,gi", COMBOS)
def test_evaluate(pi, gi):
    with jax.enable_x64(True):
        _evaluate_invariants(PERF_PARAMS[pi], GRAD_PARAMS[gi], x64=True)
    _evaluate_invariants(PERF_PARAMS[pi], GRAD_PARAMS[gi], x64=False)


@pytest.mark.parametrize("pi,gi", COMBOS)
def test_optimize_no_bounds(pi, gi):
    fun = GoodputFunction(PERF_PARAMS[pi], GRAD_PARAMS[gi], 128)
    goodput, bsz, steps = fun.optimize(1, 3)
    assert bsz == 128 // 3 + 1
    assert isinstance(goodput, float) and isinstance(bsz, int) and isinstance(steps, int)
    replicas = np.asarray([1, 2, 3, 4, 5])
    for nodes in (np.ones_like(replicas), replicas):
        goodput, bsz, steps = fun.optimize(nodes, replicas)
        assert bsz.shape == (5,) and goodput.shape == (5,)
        assert np.all(bsz == np.ceil(128 / replicas).astype(int))
        assert bsz[0] == 128
        assert np.all(steps == 0)


@pytest.mark.parametrize("pi,gi", COMBOS)
def test_optimize_local_bounds(pi, gi):
    fun = GoodputFunction(PERF_PARAMS[pi], GRAD_PARAMS[gi], 128)
    goodput, bsz, steps = fun.optimize(1, 1, atomic_bsz_range=(64, 256))
    assert bsz == 128
    assert isinstance(goodput, float)
    replicas = np.asarray(range(1, 100))
    for nodes in (np.ones_like(replicas), replicas):
        goodput, bsz, steps = fun.optimize(nodes, replicas, atomic_bsz_range=(64, 256))
        assert np.all(bsz >= np.ceil(128 / replicas).astype(int))
        assert np.all((bsz >= 64) | (goodput == 0.0))
        assert np.all(bsz <= 256)
        assert np.all(bsz * replicas <= 100 * 128)
        assert bsz[0] == 128
        assert np.all(steps == 0)


@pytest.mark.parametrize("pi,gi", COMBOS)
def test_optimize_max_bounds(pi, gi):
    fun = GoodputFunction(PERF_PARAMS[pi], GRAD_PARAMS[gi], 128)
    goodput, bsz, steps = fun.optimize(1, 1, max_batch_size=1280)
    assert bsz == 128
    assert isinstance(goodput, float)
    replicas = np.asarray(range(1, 100))
    for nodes in (np.ones_like(replicas), replicas):
        goodput, bsz, steps = fun.optimize(nodes, replicas, max_batch_size=1280)
        assert np.all(bsz >= np.ceil(128 / replicas).astype(int))
        assert np.all(bsz * replicas <= 1280 + replicas)
        assert bsz[0] == 128
        assert np.all(steps == 0)


@pytest.mark.parametrize("pi,gi", COMBOS)
def test_optimize_accumulation(pi, gi):
    fun = GoodputFunction(PERF_PARAMS[pi], GRAD_PARAMS[gi], 128)
    goodput, bsz, steps = fun.optimize(
        1, 1, max_batch_size=1280, atomic_bsz_range=(64, 256), accumulation=True
    )
    assert isinstance(goodput, float)
    replicas = np.asarray(range(1, 20))
    for multi_node in (False, True):
        nodes = replicas if multi_node else np.ones_like(replicas)
        goodput, bsz, steps = fun.optimize(
            nodes, replicas, max_batch_size=1280, atomic_bsz_range=(64, 256), accumulation=True
        )
        zero = goodput == 0.0
        assert np.all((bsz >= np.ceil(128 / replicas).astype(int)) | zero)
        assert np.all((bsz >= 64) | zero)
        assert np.all(bsz <= 256)
        assert np.all((bsz * replicas * (steps + 1) < 1280 + replicas * (steps + 1)) | zero)
        assert np.all(steps <= 15)
        assert np.all(steps >= 0)
        if multi_node:
            assert np.all((steps * bsz >= 256) | (steps == 0))
        else:
            assert np.all((replicas > 1) | (bsz == 128) | (steps > 0))


@pytest.mark.parametrize("pi,gi", COMBOS)
def test_one_replica_accumulation(pi, gi):
    fun = GoodputFunction(PERF_PARAMS[pi], GRAD_PARAMS[gi], 128)
    replicas = np.asarray([1])
    # As in the seed: optimise with max_batch_size=1280, check against each bound.
    goodput, bsz, steps = fun.optimize(
        np.ones_like(replicas),
        replicas,
        max_batch_size=1280,
        atomic_bsz_range=(64, 256),
        accumulation=True,
    )
    for max_batch_size in range(128, 128 * 20, 128):
        assert np.all((bsz >= 64) | (goodput == 0.0))
        assert np.all(bsz <= 256)
        assert np.all((bsz * (steps + 1) <= max_batch_size) | (goodput == 0.0))
        assert np.all((bsz >= np.ceil(128 / replicas).astype(int)) | (goodput == 0.0))
        assert np.all((bsz * (steps + 1) != 128) | (steps == 0))
    # And with the bound actually passed in (ceil may overshoot by < s + 1).
    for max_batch_size in range(128, 128 * 20, 128):
        goodput, bsz, steps = fun.optimize(
            1, 1, max_batch_size=max_batch_size, atomic_bsz_range=(64, 256), accumulation=True
        )
        assert 64 <= bsz <= 256 or goodput == 0.0
        assert bsz * (steps + 1) < max_batch_size + steps + 1
        assert bsz * (steps + 1) != 128 or steps == 0


# --------------------------------------------------------------------------- #
# Parity with the independent numpy float64 reference
# --------------------------------------------------------------------------- #


def _grid(rng, k=400):
    n = rng.integers(1, 5, k)
    r = n * rng.integers(1, 9, k)
    b = rng.integers(1, 300, k)
    s = rng.integers(0, 6, k)
    return n, r, b, s


@pytest.mark.parametrize("x64,rtol", [(True, 1e-6), (False, 1e-4)])
def test_parity_evaluate(x64, rtol):
    rng = np.random.default_rng(1)
    n, r, b, s = _grid(rng)
    for pi, gi in [(0, 0), (3, 7), (9, 2)]:
        perf, grad = PERF_PARAMS[pi], GRAD_PARAMS[gi]
        for p, gp in [(perf, grad), (REALISTIC, REALISTIC_GRAD)]:
            m0 = 4
            with jax.enable_x64(x64):
                thr = np.asarray(throughput_fn(p, n, r, b, s))
                eff = np.asarray(efficiency_fn(gp, m0, r * b * (s + 1)))
                good = np.asarray(goodput_fn(p, gp, m0, n, r, b, s))
                assert good.dtype == (np.float64 if x64 else np.float32)
            np.testing.assert_allclose(thr, ref.throughput(p, n, r, b, s), rtol=rtol)
            np.testing.assert_allclose(eff, ref.efficiency(gp, m0, r * b * (s + 1)), rtol=rtol)
            np.testing.assert_allclose(good, ref.goodput(p, gp, m0, n, r, b, s), rtol=rtol)


@pytest.mark.parametrize("accumulation", [False, True])
@pytest.mark.parametrize("x64", [True, False])
def test_parity_optimize(accumulation, x64):
    replicas = np.arange(1, 65)
    cases = [(None, None), (1280, (64, 256)), (4096, (None, 100)), (2000, (32, None))]
    rtol = 1e-6 if x64 else 1e-4
    for (pi, gi), (max_bs, rng_) in itertools.product([(0, 0), (5, 5), (8, 1)], cases):
        for p, gp in [(PERF_PARAMS[pi], GRAD_PARAMS[gi]), (REALISTIC, REALISTIC_GRAD)]:
            fun = GoodputFunction(p, gp, 128)
            for nodes in (np.ones_like(replicas), np.minimum(replicas, 4)):
                with jax.enable_x64(x64):
                    g, b, s = fun.optimize(nodes, replicas, max_bs, rng_, accumulation)
                rg, rb, rs = ref.optimize(p, gp, 128, nodes, replicas, max_bs, rng_, accumulation)
                # The best goodput must agree; in float32 near-ties may pick a
                # neighbouring candidate, so the argmax is compared only in x64.
                np.testing.assert_allclose(g, rg, rtol=rtol, atol=1e-30)
                if x64:
                    np.testing.assert_array_equal(b, rb)
                    np.testing.assert_array_equal(s, rs)
                else:
                    np.testing.assert_allclose(fun(nodes, replicas, b, s) * (g > 0), g, rtol=1e-4)


def test_efficiency_zero_denominator():
    fun = GoodputFunction(REALISTIC, GradParams(0.0, 0.0), 16)
    assert fun.efficiency(32) == pytest.approx(0.5)  # gain = 1 -> 1 / scale
    fun = GoodputFunction(REALISTIC, GradParams(0.0, 1.0), 16)
    assert fun.efficiency(64) == pytest.approx(1.0)


# --------------------------------------------------------------------------- #
# Pure functions under jit / vmap / broadcasting; traces
# --------------------------------------------------------------------------- #


def _stack(params):
    return type(params[0])(*(jnp.asarray(np.array(x, np.float32)) for x in zip(*params)))


def test_optimize_fn_vmap_matches_class():
    perfs = _stack(PERF_PARAMS)
    grads = _stack(GRAD_PARAMS)
    m0 = jnp.array([128.0] * 5 + [64.0] * 5)
    max_bs = jnp.array([1280.0] * 5 + [64.0] * 5)  # second half: no max batch size
    lo = jnp.array([64.0] * 5 + [1.0] * 5)
    hi = jnp.array([256.0] * 5 + [jnp.inf] * 5)
    replicas = jnp.arange(1, 17)
    nodes = jnp.minimum(replicas, 2)
    fn = jax.vmap(
        lambda p, g, m, mb, a, z: optimize_fn(p, g, m, nodes, replicas, mb, a, z, accumulation=True)
    )
    g, b, s = fn(perfs, grads, m0, max_bs, lo, hi)
    assert g.shape == b.shape == s.shape == (10, 16)
    assert b.dtype == jnp.int32
    for j in range(10):
        fun = GoodputFunction(PERF_PARAMS[j], GRAD_PARAMS[j], float(m0[j]))
        rng_ = (64, 256) if j < 5 else None
        mb = 1280 if j < 5 else None
        eg, eb, es = fun.optimize(
            np.asarray(nodes), np.asarray(replicas), mb, rng_, accumulation=True
        )
        np.testing.assert_allclose(np.asarray(g[j]), eg, rtol=1e-5)
        np.testing.assert_array_equal(np.asarray(b[j]), eb)
        np.testing.assert_array_equal(np.asarray(s[j]), es)
    # Broadcasting instead of vmap: params [J, 1] against replicas [R].
    pb = PerfParams(*(x[:, None] for x in perfs))
    gb = GradParams(*(x[:, None] for x in grads))
    g2, b2, _s2 = optimize_fn(
        pb,
        gb,
        m0[:, None],
        nodes,
        replicas,
        max_bs[:, None],
        lo[:, None],
        hi[:, None],
        accumulation=True,
    )
    np.testing.assert_allclose(np.asarray(g2), np.asarray(g), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(b2), np.asarray(b))


def test_no_recompile_on_new_values():
    traces = []

    def counted(perf, grad, m0, n, r, mb, lo, hi):
        traces.append(1)
        return optimize_fn(perf, grad, m0, n, r, mb, lo, hi, accumulation=False)

    f = jax.jit(counted)
    r = np.arange(1, 9)
    for k in range(4):
        perf = PerfParams(*np.float32(PERF_PARAMS[k]))
        grad = GradParams(*np.float32(GRAD_PARAMS[k]))
        f(
            perf,
            grad,
            np.float32(64 + k),
            np.ones(8, np.int32),
            r.astype(np.int32),
            np.float32(640 + k),
            np.float32(1 + k),
            np.float32(300),
        )
    assert len(traces) == 1
    # The class methods reuse one compiled kernel per shape and flag.
    before = G._optimize_packed._cache_size()
    for k in range(5):
        fun = GoodputFunction(PERF_PARAMS[k], GRAD_PARAMS[k], 100 + k)
        fun.optimize(1, 2 + k, 1000 + k, (k + 1, 300))
        fun.optimize(np.ones(20, int), np.arange(1, 21), 1000 + k, (k + 1, 300))
    after = G._optimize_packed._cache_size()
    assert 1 <= after - before <= 2  # 20 configurations: the kernel, compiled once
    before = G._evaluate_packed._cache_size()
    for k in range(5):
        GoodputFunction(PERF_PARAMS[k], GRAD_PARAMS[k], 1)(1, 2 + k, 3 + k, k)
    assert G._evaluate_packed._cache_size() - before <= 1


def test_kept_bounds_follow_each_call():
    """The kernel's parameters are kept on the device per bounds and dtype: alternating
    bounds, and float32 and x64 calls, each get their own answer."""
    fun = GoodputFunction(REALISTIC, REALISTIC_GRAD, 128)
    nodes, replicas = np.ones(40, int), np.arange(1, 41)
    calls = [(1280, (64, 256), True), (4096, (None, 100), False), (2000, (32, None), True)]
    first = [fun.optimize(nodes, replicas, *c) for c in calls]
    for c, want in zip(calls * 2, first * 2):
        got = fun.optimize(nodes, replicas, *c)
        fresh = GoodputFunction(REALISTIC, REALISTIC_GRAD, 128).optimize(nodes, replicas, *c)
        for g, w, f in zip(got, want, fresh):
            np.testing.assert_array_equal(g, w)
            np.testing.assert_array_equal(g, f)
    with jax.enable_x64(True):
        g64 = fun.optimize(nodes, replicas, *calls[0])
    assert g64[0].dtype == np.float64
    np.testing.assert_allclose(g64[0], first[0][0], rtol=1e-5)
    np.testing.assert_array_equal(fun.optimize(nodes, replicas, *calls[0])[0], first[0][0])


def test_class_kernel_equals_optimize_fn():
    """GoodputFunction's kernel (its own XLA options, one stacked config array, bounds kept
    on the device) gives optimize_fn's answers (default compilation)."""
    fun = GoodputFunction(REALISTIC, REALISTIC_GRAD, 128)
    replicas = np.arange(1, 201)
    nodes = np.ceil(replicas / 4)
    for accumulation in (True, False):
        g, b, s = fun.optimize(nodes, replicas, 65536, (32, 256), accumulation)
        kg, kb, ks = optimize_fn(REALISTIC, REALISTIC_GRAD, 128, nodes, replicas, 65536, 32, 256,
                                 accumulation=accumulation)
        np.testing.assert_array_equal(b, np.asarray(kb))
        np.testing.assert_array_equal(s, np.asarray(ks))
        np.testing.assert_allclose(g, np.asarray(kg), rtol=1e-6)


def test_scalar_and_array_outputs():
    fun = GoodputFunction(REALISTIC, REALISTIC_GRAD, 128)
    assert isinstance(fun(1, 2, 64, 0), float)
    assert isinstance(fun.throughput(1, 2, 64, 0), float)
    assert isinstance(fun.efficiency(256), float)
    out = fun(np.array([1, 1]), np.array([2, 4]), 64, 0)
    assert isinstance(out, np.ndarray) and out.shape == (2,)
    out[0] = 0.0  # writeable
    g, b, s = fun.optimize(np.array([[1, 2]]), np.array([[2], [4]]), 1280, (64, 256))
    assert g.shape == b.shape == s.shape == (2, 2)
    assert b.dtype.kind == "i"
    assert (
        fun.perf_params == REALISTIC
        and fun.grad_params == REALISTIC_GRAD
        and fun.init_batch_size == 128
    )
    # Lists are accepted like arrays.
    np.testing.assert_allclose(
        fun.throughput([1, 1], [2, 4], 64, 0),
        fun.throughput(np.array([1, 1]), np.array([2, 4]), 64, 0),
    )
    np.testing.assert_allclose(
        fun([1, 1], [2, 4], [64, 64], [0, 0]), fun(np.array([1, 1]), np.array([2, 4]), 64, 0)
    )
    g, b, s = fun.optimize([1, 1], [2, 4], 1280, (64, 256))
    assert b.shape == (2,)
    with pytest.raises(TypeError, match="atomic_bsz must be numeric"):
        fun(1, 2, "64", 0)


# --------------------------------------------------------------------------- #
# Bad input
# --------------------------------------------------------------------------- #


def test_bad_input():
    fun = GoodputFunction(REALISTIC, REALISTIC_GRAD, 128)
    with pytest.raises(ValueError, match=r"num_nodes \(3\) > num_replicas \(2\)"):
        fun.optimize(3, 2)
    with pytest.raises(ValueError, match=r"num_nodes \(3\) > num_replicas \(2\)"):
        fun.optimize(np.array([1, 3]), np.array([1, 2]))
    with pytest.raises(ValueError, match="num_nodes must be >= 1"):
        fun.optimize(0, 2)
    with pytest.raises(ValueError, match="num_nodes must be >= 1"):
        fun.throughput(np.array([0, 1]), 2, 64, 0)
    with pytest.raises(ValueError, match=r"max_batch_size \(64\) < init_batch_size \(128\)"):
        fun.optimize(1, 1, max_batch_size=64)
    with pytest.raises(ValueError, match="atomic_bsz_range"):
        fun.optimize(1, 1, atomic_bsz_range=(256, 64))
    with pytest.raises(ValueError, match="below init_batch_size"):
        fun.evaluate(1, 1, 64, 0)
    with pytest.raises(ValueError, match="below init_batch_size"):
        fun(np.array([1, 1]), np.array([2, 1]), np.array([64, 64]), 0)
    with pytest.raises(ValueError, match=r"num_nodes \(2\) > num_replicas \(1\)"):
        fun(2, 1, 256, 0)
    with pytest.raises(ValueError, match="init_batch_size"):
        GoodputFunction(REALISTIC, REALISTIC_GRAD, 0)
    with pytest.raises(ValueError, match="gamma must be finite"):
        GoodputFunction(REALISTIC._replace(gamma=float("nan")), REALISTIC_GRAD, 16)
    with pytest.raises(TypeError, match="perf_params"):
        GoodputFunction((1.0, 2.0), REALISTIC_GRAD, 16)
    with pytest.raises(ValueError, match="broadcast"):
        fun.optimize(np.ones(3, int), np.ones(4, int))
