"""The hooks' rooms: profile (update/compute/reset), fit, state, publish, and the runtime timer."""

from __future__ import annotations

import math
import subprocess
import sys
import threading

import numpy as np
import pytest

from goodput_jax.integrations.fit import RefitPool, model_errors
from goodput_jax.integrations.profile import StepProfile
from goodput_jax.integrations.publish import make_hints
from goodput_jax.integrations.state import parse_state_dict, to_state_dict
from goodput_jax.model.formulas import predict_optim_time_np
from goodput_jax.model.types import GradParams, PerfParams


def test_profile_update_compute_reset_with_the_warm_up_rules():
    p = StepProfile(warmup_steps=1, job_warmup_steps=1, window=3, quantile=0.5)
    for t in (5.0, 4.0, 0.1, 0.0, 0.2, 0.3, 0.4):  # 5.0: config warm-up, 4.0: job warm-up
        p.update((1, 2, 8, 0, 0), t)
    assert len(p.pending) == 7 and p.entries == {}  # the training thread only appends
    assert p.fold() == pytest.approx(9.0)  # the dropped seconds (a zero time drops too)
    assert p.compute() == {(1, 2, 8): (0.3, 0.3, 4)}  # median of the newest 3
    p.update((1, 2, 8, 1, 0), 0.6)  # a fused accumulation step: two halves
    p.update((1, 2, 8, 1, 0), 0.8)
    p.fold()
    e = p.entries[(1, 2, 8, 1)]
    assert (e.accum_count, e.optim_count, e.optim_time) == (1, 1, pytest.approx(0.4))
    assert p.max_replicas() == 2 and p.samples((1, 2, 8, 0)) == [0.2, 0.3, 0.4]
    p.reset((1, 2, 8, 0))
    assert (1, 2, 8, 0) not in p.entries and (1, 2, 8, 0) not in p.seen
    p.update((1, 2, 8, 0, 0), 0.7)  # measured afresh: its warm-up step drops again
    assert p.fold() == pytest.approx(0.7)
    p.reset()
    assert p.compute() == {} and not p.has_optim()


def test_profile_folds_every_step_once_under_concurrent_readers():
    p = StepProfile(warmup_steps=0, job_warmup_steps=0, window=10_000)
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            p.compute()

    th = threading.Thread(target=reader)
    th.start()
    for i in range(5000):
        p.update((1, 1, 8, 0, 0), 1e-3 * (i + 1))
    stop.set()
    th.join()
    p.fold()
    assert list(p.entries[(1, 1, 8, 0)].optim_samples) == [1e-3 * (i + 1) for i in range(5000)]


def test_model_errors_are_the_relative_errors_of_the_model_twin():
    params = PerfParams(0.01, 1e-3, 0.02, 1e-4, 0.005, 1e-4, 1.3)
    table = {(1, 1, 8): (0.02, 0.021, 9), (1, 4, 16): (0.03, 0.05, 9), (2, 8, 32): (0.1, 0.2, 3)}
    want = {k: abs(predict_optim_time_np(params, *k) - v[1]) / v[1] for k, v in table.items()}
    got = model_errors(params, table)
    assert got.keys() == want.keys()
    assert all(got[k] == pytest.approx(want[k], rel=1e-12) for k in want)
    # the closed form the hooks had (hi * ((acc/hi)**g + (net/hi)**g)**(1/g)): same numbers
    n, r, b = (np.array([k[i] for k in table], float) for i in range(3))
    acc = params.alpha_c + params.beta_c * b
    net = np.where(n > 1, params.alpha_n + params.beta_n * np.maximum(r - 2, 1e-8),
                   np.where(r > 1, params.alpha_r + params.beta_r * np.maximum(r - 2, 1e-8),
                            1e-8 + 1e-8 * 1e-8))
    hi, g = np.maximum(acc, net), params.gamma
    np.testing.assert_allclose(predict_optim_time_np(params, n, r, b),
                               hi * ((acc / hi) ** g + (net / hi) ** g) ** (1 / g), rtol=1e-12)


def test_refit_pool_runs_one_at_a_time_and_reraises():
    pool = RefitPool()
    gate = threading.Event()
    assert pool.submit(gate.wait) and pool.busy()
    assert not pool.submit(lambda: None)  # one in flight: nothing started
    gate.set()
    pool.wait(30)
    assert not pool.busy()

    def boom():
        raise RuntimeError("fit failed")

    assert pool.submit(boom)
    with pytest.raises(RuntimeError, match="fit failed"):
        pool.wait(30)
    pool.close()


def test_state_round_trip():
    prof = StepProfile(warmup_steps=0, job_warmup_steps=0)
    for t in (0.1, 0.2):
        prof.update((1, 1, 8, 0, 0), t)
    st = to_state_dict(prof, perf_params=PerfParams(*range(1, 8)), grad_params=GradParams(1, 2),
                       grad_count=5, model_error=0.1, atomic_bsz=8, accum_steps=0,
                       num_replicas=1, num_nodes=1)
    back = parse_state_dict(st)
    assert back.perf_params == PerfParams(*map(float, range(1, 8)))
    assert back.grad_params == GradParams(1.0, 2.0) and back.grad_count == 5.0
    other = StepProfile()
    other.load_json(back.profile, back.seen)
    assert other.samples((1, 1, 8, 0)) == [0.1, 0.2] and other.seen == {(1, 1, 8, 0): 2}
    empty = parse_state_dict({**st, "perf_params": None, "grad_count": None,
                              "model_error": None})
    assert empty.perf_params is None and empty.grad_count == math.inf
    assert math.isnan(empty.model_error)


def test_make_hints_only_claims_what_is_known():
    kw = {"init_batch_size": 8, "max_batch_size": 64, "local_bsz_bounds": (None, None),
              "gradient_accumulation": False, "max_profiled_replicas": 1, "num_nodes": 1,
              "num_replicas": 1, "atomic_bsz": 16, "accum_steps": 0}
    from goodput_jax.model.hints import Hints

    h = make_hints(Hints(perf_params=None, grad_params=None, **kw))
    assert h["gradientNoiseScale"] is None and h["efficiency"] is None
    assert h["gradStatsNote"] is None
    h = make_hints(Hints(perf_params=PerfParams(0.01, 1e-3, 0, 0, 0, 0, 1.0),
                         grad_params=GradParams(1.0, 1.0), grad_stats_note=None, **kw))
    assert h["efficiency"] == pytest.approx(2 / 3) and h["suggestedBatchSize"] is None


def test_the_step_timer_lives_in_runtime_and_importing_runtime_loads_no_jax():
    from goodput_jax.integrations import hooks
    from goodput_jax.runtime import OneStepLateTimer

    assert hooks.OneStepLateTimer is OneStepLateTimer
    code = ("import sys, goodput_jax.runtime as r; r.OneStepLateTimer; "
            "print('jax' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == "False", out.stderr
