"""Job spec + published hints -> JobInfo, with AdaptDL's _get_job_info rules."""

import copy
from datetime import UTC, datetime

import numpy as np
import pytest

from goodput_jax.model.goodput import GoodputFunction
from goodput_jax.model.types import GradParams, PerfParams
from goodput_jax.sched.hints import (
    job_info_from_hints,
    speedup_fns_by_type,
    linear_speedup,
    parse_quantity,
    pod_requests,
)
from goodput_jax.sched.speedup import SpeedupFunction

PERF = {"alpha_c": 0.121, "beta_c": 0.00568, "alpha_n": 0.0236, "beta_n": 0.00634, "alpha_r": 0.0118,
            "beta_r": 0.00317, "gamma": 1.14}


def make_job(hints=None, **spec):
    base = {
        "metadata": {"creationTimestamp": "2024-03-01T10:00:00Z"},
        "spec": {"template": {"spec": {"containers": [
            {"resources": {"requests": {"nvidia.com/gpu": 1, "cpu": "1500m", "memory": "2Gi"}}},
            {"resources": {"limits": {"cpu": 1}}},
        ]}}, **spec},
    }
    if hints is not None:
        base["status"] = {"train": hints}
    return base


FULL = {"perfParams": PERF, "initBatchSize": 128, "maxBatchSize": 1280,
        "localBszBounds": [64, 256], "gradParams": {"norm": 0.00136, "var": 0.000502},
        "maxProfiledReplicas": 4, "gradientAccumulation": False}


def test_resources_and_timestamp():
    info = job_info_from_hints(make_job())
    assert info.resources == {"nvidia.com/gpu": 1.0, "cpu": 2.5, "memory": 2.0 * 2 ** 30,
                              "pods": 1.0}
    assert info.creation_timestamp == datetime(2024, 3, 1, 10, tzinfo=UTC)
    assert parse_quantity("1.5k") == 1500.0
    assert pod_requests({"containers": []}) == {"pods": 1.0}


def test_no_hints_gives_linear_speedup_and_one_replica():
    info = job_info_from_hints(make_job())
    assert info.speedup_fn is linear_speedup and info.speedup_fn(2, 5) == 5
    assert (info.min_replicas, info.max_replicas, info.preemptible) == (0, 1, True)


def test_max_replicas_rules():
    # 2 * maxProfiledReplicas, capped by spec.maxReplicas, raised to minReplicas.
    assert job_info_from_hints(make_job({"maxProfiledReplicas": 3})).max_replicas == 6
    assert job_info_from_hints(make_job({"maxProfiledReplicas": 3}, maxReplicas=4)).max_replicas == 4
    info = job_info_from_hints(make_job({"maxProfiledReplicas": 1}, minReplicas=5))
    assert (info.min_replicas, info.max_replicas) == (5, 5)
    # localBszBounds: max_batch_size / max_replicas >= min local batch.
    hints = dict(FULL, maxProfiledReplicas=16)
    assert job_info_from_hints(make_job(hints)).max_replicas == 1280 // 64
    hints = dict(FULL, maxProfiledReplicas=16, maxBatchSize=None)
    assert job_info_from_hints(make_job(hints)).max_replicas == 128 // 64


def test_model_speedup_from_hints():
    info = job_info_from_hints(make_job(FULL))
    assert isinstance(info.speedup_fn, SpeedupFunction)
    assert info.max_replicas == 8
    ref = SpeedupFunction(GoodputFunction(PerfParams(*PERF.values()), GradParams(0.00136, 0.000502),
                                          128), 1280, (64, 256), False)
    n, r = np.array([1, 1, 2]), np.array([1, 4, 8])
    np.testing.assert_allclose(info.speedup_fn(n, r), ref(n, r), rtol=1e-6)
    # Identical hints share one memoised SpeedupFunction across cycles.
    assert job_info_from_hints(make_job(copy.deepcopy(FULL))).speedup_fn is info.speedup_fn


def test_default_grad_params_and_non_preemptible():
    hints = {k: v for k, v in FULL.items() if k != "gradParams"}
    info = job_info_from_hints(make_job(hints))
    assert info.speedup_fn.goodput_fn.grad_params == GradParams(0.0, 1.0)
    info = job_info_from_hints(make_job(FULL, preemptible=False))
    assert info.speedup_fn is linear_speedup and not info.preemptible


@pytest.mark.parametrize("patch, error, match", [
    ({"perfParams": {k: v for k, v in PERF.items() if k != "gamma"}}, ValueError, "'gamma'"),
    ({"perfParams": dict(PERF, beta_c="fast")}, TypeError, "'beta_c'"),
    ({"gradParams": {"norm": 1.0}}, ValueError, "'var'"),
    ({"initBatchSize": -4}, ValueError, "'initBatchSize'"),
    ({"maxBatchSize": 64}, ValueError, "'maxBatchSize'"),
    ({"localBszBounds": [64]}, ValueError, "'localBszBounds'"),
    ({"localBszBounds": [256, 64]}, ValueError, "'localBszBounds'"),
    ({"maxProfiledReplicas": 2.5}, ValueError, "'maxProfiledReplicas'"),
    ({"gradientAccumulation": "yes"}, TypeError, "'gradientAccumulation'"),
])
def test_malformed_hints_name_the_key(patch, error, match):
    with pytest.raises(error, match=match):
        job_info_from_hints(make_job(dict(FULL, **patch)))


def test_malformed_spec_names_the_key():
    with pytest.raises(ValueError, match="creationTimestamp"):
        job = make_job()
        job["metadata"]["creationTimestamp"] = "last tuesday"
        job_info_from_hints(job)
    with pytest.raises(ValueError, match="spec.minReplicas"):
        job_info_from_hints(make_job(minReplicas=-1))
    with pytest.raises(ValueError, match="cpu"):
        job = make_job()
        job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
        job_info_from_hints(job)
    with pytest.raises(TypeError, match="spec"):
        job_info_from_hints({"metadata": {}})


def test_speedup_functions_per_accelerator_type():
    # Fitted on a100; t4 bootstrapped by the 1-GPU throughput ratio; v100 unknown.
    hints = dict(FULL, perfParamsByType={"a100": PERF},
                 minThroughputByType={"a100": 400.0, "t4": 100.0})
    fns = speedup_fns_by_type(hints, ["a100", "t4", "v100"])
    assert sorted(fns) == ["a100", "t4"]
    assert fns["a100"].base_goodput == pytest.approx(4 * fns["t4"].base_goodput, rel=1e-4)
    # same scaling shape: the bootstrap scales every time term alike
    np.testing.assert_allclose(fns["a100"](np.array([1, 2]), np.array([4, 8])),
                               fns["t4"](np.array([1, 2]), np.array([4, 8])), rtol=1e-4)
    assert speedup_fns_by_type({"maxProfiledReplicas": 2}, ["a100"]) == {}
    with pytest.raises(ValueError, match="unknown hint"):
        speedup_fns_by_type(dict(FULL, speed=3), ["a100"])


# --- the typed route: Hints + JobFacts -> JobInfo ------------------------------------------

from goodput_jax.model.hints import Hints  # noqa: E402
from goodput_jax.sched.hints import JobFacts, build_job_info, no_goodput  # noqa: E402


def test_build_job_info_carries_every_fact():
    facts = JobFacts(100.0, {"gj_accel": 1}, min_replicas=1, max_replicas=3, age=40.0,
                     num_restarts=2, restarting=True, restart_penalty=12.0)
    info = build_job_info(Hints.from_json(FULL), facts)
    assert (info.min_replicas, info.max_replicas, info.preemptible) == (1, 3, True)
    assert (info.age, info.num_restarts, info.restarting, info.restart_penalty) == \
        (40.0, 2, True, 12.0)
    assert info.creation_time == 100.0 and info.resources == {"gj_accel": 1}
    assert isinstance(info.speedup_fn, SpeedupFunction) and info.goodput_fns is None
    # the JSON form and the typed record give the same (memoised) model
    assert build_job_info(FULL, facts).speedup_fn is info.speedup_fn


def test_build_job_info_rules_match_the_dict_route():
    cases = [({}, {}), ({"maxProfiledReplicas": 3}, {"maxReplicas": 4}),
             ({"maxProfiledReplicas": 1}, {"minReplicas": 5}), (FULL, {}),
             (dict(FULL, maxBatchSize=None), {"maxReplicas": 16}),
             (FULL, {"preemptible": False, "minReplicas": 2})]
    for hints, spec in cases:
        old = job_info_from_hints(make_job(hints, **spec))
        facts = JobFacts(old.creation_timestamp, old.resources,
                         min_replicas=spec.get("minReplicas", 0),
                         max_replicas=spec.get("maxReplicas"),
                         preemptible=spec.get("preemptible", True))
        new = build_job_info(hints, facts)
        assert (new.min_replicas, new.max_replicas, new.preemptible) == \
            (old.min_replicas, old.max_replicas, old.preemptible), (hints, spec)
        assert new.speedup_fn is old.speedup_fn


def test_build_job_info_goodput_per_cluster_type():
    facts = JobFacts(0.0, {"gj_accel": 1}, max_replicas=8, cluster_types=("a100", "t4", "v100"),
                     allowed_types=("a100", "t4"))
    # no per-type profile: the job's one model stands for every allowed type
    info = build_job_info(FULL, facts)
    assert info.goodput_fns["a100"] is info.speedup_fn is info.goodput_fns["t4"]
    assert info.goodput_fns["v100"] is no_goodput
    np.testing.assert_array_equal(no_goodput(np.array([1, 1]), np.array([2, 4])), [0.0, 0.0])
    # fitted on a100, t4 bootstrapped by throughput; v100 still forbidden
    hints = dict(FULL, perfParamsByType={"a100": PERF},
                 minThroughputByType={"a100": 400.0, "t4": 100.0})
    info = build_job_info(hints, facts)
    assert info.goodput_fns["a100"].base_goodput == pytest.approx(
        4 * info.goodput_fns["t4"].base_goodput, rel=1e-4)
    assert info.goodput_fns["v100"] is no_goodput
    # no model at all: linear speedup on every allowed type
    info = build_job_info(None, JobFacts(0.0, {"gj_accel": 1}, cluster_types=("a", "b")))
    assert info.goodput_fns == {"a": linear_speedup, "b": linear_speedup}


@pytest.mark.parametrize("kwargs, match", [
    ({"min_replicas": -1}, "JobFacts.min_replicas must be an integer >= 0, got -1"),
    ({"max_replicas": 0}, "JobFacts.max_replicas must be an integer >= 1, got 0"),
    ({"num_restarts": 1.5}, "JobFacts.num_restarts"),
    ({"preemptible": "no"}, "JobFacts.preemptible must be a bool, got 'no'"),
    ({"age": float("nan")}, "JobFacts.age"),
    ({"restart_penalty": -1.0}, "JobFacts.restart_penalty"),
    ({"cluster_types": "a100"}, "JobFacts.cluster_types"),
    ({"allowed_types": ("",)}, "JobFacts.allowed_types"),
    ({"created": "yesterday"}, "JobFacts.created"),
    ({"resources": 1}, "JobFacts.resources"),
])
def test_job_facts_reject_bad_values(kwargs, match):
    args = {"created": 0.0, "resources": {"gj_accel": 1}, **kwargs}
    with pytest.raises(ValueError, match=match):
        JobFacts(**args)
    with pytest.raises(TypeError, match="facts must be a JobFacts"):
        build_job_info(None, {"created": 0.0})
