"""The typed Hints record (model/hints.py) and the shared bucketing rule (model/buckets.py)."""

import json
import math

import pytest

from goodput_jax.model.buckets import bucket
from goodput_jax.model.hints import Hints, bootstrap_perf_params
from goodput_jax.model.types import GradParams, PerfParams

PERF = PerfParams(0.121, 0.00568, 0.0236, 0.00634, 0.0118, 0.00317, 1.14)
FULL = {
    "perfParams": PERF._asdict(), "gradParams": {"norm": 0.00136, "var": 0.000502},
    "initBatchSize": 128, "maxBatchSize": 1280, "localBszBounds": [64, 256],
    "gradientAccumulation": True, "maxProfiledReplicas": 4, "numNodes": 1, "numReplicas": 2,
    "atomicBsz": 64, "accumSteps": 0, "gradientNoiseScale": 47.2, "efficiency": 0.9,
    "suggestedBatchSize": 256, "suggestedAtomicBsz": 128, "suggestedAccumSteps": 0,
    "predictedSpeedup": 1.7, "acceleratorType": "t4", "gradStatsNote": "no statistics: why",
    "perfParamsByType": {"a100": PERF._asdict()}, "minThroughputByType": {"t4": 90.0, "a100": 400.0},
}


def test_json_round_trip_through_text():
    h = Hints.from_json(json.loads(json.dumps(FULL)))
    assert h.perf_params == PERF and h.grad_params == GradParams(0.00136, 0.000502)
    assert h.local_bsz_bounds == (64, 256) and h.gradient_accumulation is True
    assert h.perf_params_by_type["a100"] == PERF
    assert Hints.from_json(json.loads(json.dumps(h.to_json()))) == h
    assert set(h.to_json()) == set(FULL)
    empty = Hints.from_json({})
    assert empty.perf_params is None and empty.max_profiled_replicas == 0
    # What the hooks publish before the first fit: nulls are "unknown".
    assert Hints.from_json({"perfParams": None, "gradParams": None}).perf_params is None


@pytest.mark.parametrize("patch, error, match", [
    ({"batch": 3}, ValueError, "unknown hint 'batch'"),
    ({"initBatchSize": 0}, ValueError, "'initBatchSize' must be > 0"),
    ({"initBatchSize": 12.5}, ValueError, "'initBatchSize' must be an integer"),
    ({"maxBatchSize": 64}, ValueError, "'maxBatchSize' \\(64\\) < 'initBatchSize'"),
    ({"perfParams": dict(PERF._asdict(), gamma=0.0)}, ValueError, "'gamma' must be > 0"),
    ({"perfParams": dict(PERF._asdict(), extra=1.0)}, ValueError, "'perfParams' has unknown key"),
    ({"gradParams": {"norm": 1.0}}, ValueError, "'gradParams' is missing key 'var'"),
    ({"efficiency": math.nan}, TypeError, "'efficiency' must be a finite number"),
    ({"gradientAccumulation": 1}, TypeError, "'gradientAccumulation' must be a bool"),
    ({"acceleratorType": ""}, TypeError, "'acceleratorType'"),
    ({"perfParamsByType": {"a100": {"alpha_c": 1.0}}}, ValueError,
     "'perfParamsByType.a100' is missing key 'beta_c'"),
    ({"minThroughputByType": {"t4": -1.0}}, ValueError, "'minThroughputByType.t4' must be > 0"),
    ({"localBszBounds": [256, 64]}, ValueError, "'localBszBounds' min"),
])
def test_strict_parsing_names_the_field(patch, error, match):
    with pytest.raises(error, match=match):
        Hints.from_json(dict(FULL, **patch))


def test_frozen_and_typed_constructor():
    h = Hints(perf_params=PERF, init_batch_size=32)
    with pytest.raises(AttributeError):
        h.init_batch_size = 64
    with pytest.raises(ValueError, match="'initBatchSize'"):
        Hints(init_batch_size=-1)


def test_per_type_parameters_and_sia_bootstrap():
    h = Hints.from_json(FULL)
    assert h.perf_params_for("a100") == PERF  # fitted on that type
    assert h.perf_params_for("t4") == PERF  # the current type's own fit
    h = Hints(perf_params_by_type={"t4": PERF}, min_throughput_by_type={"t4": 100.0, "a100": 400.0})
    a100 = h.perf_params_for("a100")
    # every time term scaled by the 1-GPU throughput ratio, gamma kept
    assert a100.alpha_c == pytest.approx(PERF.alpha_c / 4) and a100.gamma == PERF.gamma
    assert h.perf_params_for("v100") is None  # no profile on that type
    assert Hints().perf_params_for("t4") is None
    with pytest.raises(ValueError, match="throughput ratio"):
        bootstrap_perf_params(PERF, 0.0, 100.0)


def test_bucket_rules():
    # coarse: powers of two (the scheduler's axes); fine: {4,5,6,7} * 2^k (the fits)
    assert [bucket(n) for n in (0, 1, 8, 9, 100)] == [8, 8, 8, 16, 128]
    assert [bucket(n, 1) for n in (1, 3, 17)] == [1, 4, 32]
    assert [bucket(n, 16, fine=True) for n in (3, 17, 21, 29, 33, 100)] == [16, 20, 24, 32, 40, 112]
    for n in range(1, 2000):
        b = bucket(n, 1, fine=True)
        assert n <= b and (n <= 4 or b <= 1.25 * n + 1)
    with pytest.raises(ValueError, match="value"):
        bucket(-1)
    with pytest.raises(ValueError, match="minimum"):
        bucket(3, 0)


def test_max_replicas_allowed_is_adaptdls_cap():
    from goodput_jax.model.hints import max_replicas_allowed

    assert [max_replicas_allowed(n) for n in (0, 1, 2, 3, 64)] == [1, 2, 4, 6, 128]
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="max_profiled_replicas"):
            max_replicas_allowed(bad)
