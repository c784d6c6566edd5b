"""integrations.search: the one feasibility rule and the suggestion that never loses."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from goodput_jax.integrations.hooks import GoodputHooks
from goodput_jax.integrations.search import feasible_configs
from goodput_jax.model.formulas import goodput_np
from goodput_jax.model.types import GradParams, PerfParams


def test_feasible_configs_is_the_brute_force_rule():
    rng = np.random.default_rng(0)
    for _ in range(50):
        sizes = sorted(set(rng.integers(1, 200, rng.integers(1, 8)).tolist()))
        r, top_s = int(rng.integers(1, 9)), int(rng.integers(0, 4))
        m0, cap = int(rng.integers(1, 256)), float(rng.integers(256, 2048))
        lo = None if rng.integers(2) else int(rng.integers(1, 50))
        hi = None if rng.integers(2) else int(rng.integers(50, 200))
        want = [(b, s) for b, s in itertools.product(sizes, range(top_s + 1))
                if (lo is None or b >= lo) and (hi is None or b <= hi)
                and m0 <= r * b * (s + 1) <= cap]
        got = feasible_configs(r, sizes[::-1] + sizes, top_s, init_batch_size=m0,
                               max_batch_size=cap, local_bsz_bounds=(lo, hi))
        assert got.dtype == np.int64 and got.shape == (len(want), 2)
        assert [tuple(x) for x in got.tolist()] == want


@pytest.mark.parametrize("bad", [[], [0, 8], [8.5], ["8"], [True], None])
def test_feasible_configs_rejects_bad_sizes_naming_the_argument(bad):
    with pytest.raises(ValueError, match="atomic_sizes"):
        feasible_configs(1, bad, 0, init_batch_size=8, max_batch_size=64)


def test_suggest_and_the_adaptive_controller_share_the_feasibility_rule():
    from goodput_jax.adaptive.controller import AdaptiveBatchSize

    h = GoodputHooks("f", init_batch_size=32, atomic_bsz=32, max_batch_size=256,
                     local_bsz_bounds=(16, 128), gradient_accumulation=True, num_replicas=1,
                     num_nodes=1, is_primary=False)
    ctl = AdaptiveBatchSize(h, {"x": np.zeros((512, 2), np.float32)},
                            atomic_sizes=[8, 16, 32, 64, 128, 256], max_accum_steps=3)
    cap = min(ctl.explore_factor * h.batch_size, h.max_batch_size)
    want = feasible_configs(1, ctl.atomic_sizes, 3, init_batch_size=32, max_batch_size=cap,
                            local_bsz_bounds=(16, 128))
    np.testing.assert_array_equal(ctl.candidates(), want)


def _hooks(atomic, accumulation=False):
    h = GoodputHooks("s", init_batch_size=32, atomic_bsz=atomic, max_batch_size=1024,
                     num_replicas=1, num_nodes=1, is_primary=False,
                     gradient_accumulation=accumulation)
    h.perf_params = PerfParams(0.01, 1e-4, 0.0, 0.0, 0.0, 0.0, 1.0)
    h.update_grad_params(GradParams(1.0, 4.0))
    return h


def test_suggest_never_returns_a_configuration_predicted_slower_than_the_running_one():
    # One replica: the optimum is 115; with a 20% tolerance the smallest batch within it
    # (44) is predicted 0.8x of the running 64: the suggestion used to be that switch.
    h = _hooks(64)
    fn = h.goodput_function()
    assert fn.optimize(1, 1, max_batch_size=1024, adaptdl_single_replica=False)[1] == 115
    cur = goodput_np(fn.perf_params, fn.grad_params, 32, 1, 1, 64, 0)
    assert goodput_np(fn.perf_params, fn.grad_params, 32, 1, 1, 44, 0) < 0.9 * cur
    s = h.suggest(tolerance=0.2)
    assert (s.atomic_bsz, s.accum_steps, s.batch_size) == (64, 0, 64)
    assert s.predicted_speedup == 1.0 and s.goodput == pytest.approx(cur)
    assert s.best_batch_size == 115  # the optimum searched is still reported
    # without a tolerance the optimum itself is the suggestion (one replica grows its
    # per-replica batch like many do; AdaptDL's rule held it at the initial 32)
    s = h.suggest(tolerance=0.0)
    assert s.batch_size == 115 and s.predicted_speedup > 1.05
    # the tolerance gives up to 20% of the optimum for a smaller batch, never below the
    # running configuration: 128 is the listed optimum, 64 (running) within 20% of it
    s = _hooks(64).suggest(tolerance=0.2, atomic_sizes=[32, 64, 128, 256])
    assert s.batch_size == 64 and s.predicted_speedup == 1.0 and s.best_batch_size == 128
    s = _hooks(256).suggest(tolerance=0.2, atomic_sizes=[32, 64, 128, 256])
    assert s.batch_size == 64 and s.predicted_speedup > 1.0  # a real gain is still taken


def test_suggest_speedup_is_at_least_one_on_the_running_placement():
    rng = np.random.default_rng(1)
    for _ in range(40):
        p = PerfParams(*rng.uniform(1e-3, 0.05, 2), *rng.uniform(1e-4, 0.05, 4),
                       rng.uniform(1.0, 3.0))
        g = GradParams(*rng.uniform(1e-3, 1.0, 2))
        h = GoodputHooks("s", init_batch_size=16, atomic_bsz=int(rng.choice([16, 32, 64, 128])),
                         max_batch_size=1024, num_replicas=1, num_nodes=1, is_primary=False,
                         gradient_accumulation=bool(rng.integers(2)))
        h.perf_params = p
        h.update_grad_params(g)
        sizes = None if rng.integers(2) else [8, 16, 32, 64, 128]
        for tol in (0.0, 0.05, 0.3):
            s = h.suggest(tolerance=tol, atomic_sizes=sizes)
            assert s.predicted_speedup >= 1.0 - 1e-9, (p, g, h.config_key(), sizes, tol, s)
