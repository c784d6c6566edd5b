"""The numpy twins of goodput_jax.model.formulas equal the jitted kernels; types in -> types out."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from goodput_jax.model import formulas as fm
from goodput_jax.model.goodput import efficiency_fn, goodput_fn, throughput_fn
from goodput_jax.model.perf import predict_accum_time, predict_network_time, predict_optim_time
from goodput_jax.model.scaling import adascale_gain
from goodput_jax.model.types import GradParams, PerfParams

PERF = [
    PerfParams(0.121, 0.00568, 0.0236, 0.00634, 0.0118, 0.00317, 1.14),
    PerfParams(0.3, 0.0, 0.4, 0.0, 0.0, 0.0, 1.0),  # zero betas: a zero network time
    PerfParams(2.0, 0.5, 30.0, 4.0, 1.0, 0.2, 9.5),  # large times, large gamma
]
GRAD = [GradParams(0.00136, 0.000502), GradParams(1.0, 0.0), GradParams(0.0, 0.0),
        GradParams(-1.0, 0.5)]  # the last: a denominator that crosses 0

# a grid of configurations: nodes <= replicas, atomic sizes, accumulation steps
_N, _R, _B, _S = np.meshgrid([1, 2, 4], [1, 2, 3, 8, 64], [1, 16, 100, 1024], [0, 1, 7],
                             indexing="ij")
KEEP = _N <= _R
N, R, B, S = (x[KEEP] for x in (_N, _R, _B, _S))
M0 = 16.0


@pytest.mark.parametrize("perf", PERF)
def test_step_time_twins_equal_the_jax_kernels_in_float64(perf):
    with jax.enable_x64(True):
        for twin, kernel, args in [
            (fm.predict_accum_time_np, predict_accum_time, (B,)),
            (fm.predict_network_time_np, predict_network_time, (N, R)),
            (fm.predict_optim_time_np, predict_optim_time, (N, R, B)),
            (fm.throughput_np, throughput_fn, (N, R, B, S)),
        ]:
            got = twin(perf, *args)
            assert isinstance(got, np.ndarray) and got.dtype == np.float64
            np.testing.assert_allclose(got, np.asarray(kernel(perf, *args)), rtol=1e-12)


@pytest.mark.parametrize("grad", GRAD)
def test_efficiency_and_goodput_twins_equal_the_jax_kernels(grad):
    batch = R * B * (S + 1)
    with jax.enable_x64(True):
        np.testing.assert_allclose(fm.efficiency_np(grad, M0, batch),
                                   np.asarray(efficiency_fn(grad, M0, batch)), rtol=1e-12)
        for perf in PERF:
            np.testing.assert_allclose(
                fm.goodput_np(perf, grad, M0, N, R, B, S),
                np.asarray(goodput_fn(perf, grad, M0, N, R, B, S)), rtol=1e-12)
    # and the default float32 kernels agree with the float64 twins to float32 precision
    np.testing.assert_allclose(fm.goodput_np(PERF[0], grad, M0, N, R, B, S),
                               np.asarray(goodput_fn(PERF[0], grad, M0, N, R, B, S)),
                               rtol=2e-5)


def test_the_gain_is_one_formula_for_efficiency_scaling_and_the_simulator():
    scale = np.array([0.5, 1.0, 2.0, 8.0, 1000.0])
    for grad in GRAD:
        np.testing.assert_allclose(fm.gain_np(grad, scale) / scale,
                                   fm.efficiency_np(grad, 1.0, scale), rtol=1e-15)
    # scaling.adascale_gain: the same gain on the clamped statistics (var >= 1e-6, sqr >= 0)
    for grad in GRAD:
        clamped = GradParams(max(grad.sqr, 0.0), max(grad.var, 1e-6))
        np.testing.assert_allclose(np.asarray(adascale_gain(grad, scale)),
                                   fm.gain_np(clamped, scale), rtol=1e-6)
    # the hand-computed value: (3 + 1) / (3 / 4 + 1)
    assert fm.gain_np(GradParams(sqr=1.0, var=3.0), 4.0) == pytest.approx(4.0 / 1.75, rel=1e-15)
    assert fm.gain_np(GradParams(sqr=0.0, var=0.0), 4.0) == 1.0  # 0 / 0: no gain
    assert fm.gain_np(GradParams(float("nan"), 1.0), 2.0) == 1.0


def test_scalars_in_python_floats_out_arrays_in_arrays_out():
    p, g = PERF[0], GRAD[0]
    scalar_calls = [
        fm.predict_accum_time_np(p, 64), fm.predict_network_time_np(p, 1, 2),
        fm.predict_optim_time_np(p, 1, 2, 64), fm.throughput_np(p, 1, 2, 64, 0),
        fm.gain_np(g, 2.0), fm.efficiency_np(g, 128, 256),
        fm.goodput_np(p, g, 128, 1, 2, 64, 1), fm.throughput_np(p, np.int64(1), np.float32(2),
                                                                np.array(64), 0),
    ]
    assert all(type(x) is float for x in scalar_calls), [type(x) for x in scalar_calls]
    out = fm.throughput_np(p, 1, np.array([[1], [2]]), np.array([64, 128, 256]), 0)
    assert isinstance(out, np.ndarray) and out.shape == (2, 3)
    # scalar and array evaluations are the same numbers
    assert out[1, 0] == fm.throughput_np(p, 1, 2, 64, 0)
    # parameters may be arrays too (one row per job), broadcasting with the configuration
    perf_rows = PerfParams(*(np.array([v, 2 * v]) for v in p))
    assert fm.throughput_np(perf_rows, 1, 2, 64, 0).shape == (2,)


def test_twins_never_warn_and_return_numpy():
    # a zero network time (log(0)) and 0/0 statistics: no numpy RuntimeWarning
    with np.errstate(all="raise"):
        assert fm.throughput_np(PERF[1], 2, 2, 1, 0) > 0
        assert fm.efficiency_np(GradParams(0.0, 0.0), 16, 0.0) != 0
        assert fm.gain_np(GradParams(1.0, 1.0), 0.0) == 0.0  # var / 0: infinite denominator
    # the twins run on the host: numpy in, numpy out (never a device array)
    assert not isinstance(fm.throughput_np(PERF[0], 1, 2, np.arange(1, 5), 0), jax.Array)
