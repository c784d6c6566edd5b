"""PolluxPolicy: the AdaptDL seed tests, invariants after every cycle, utilisation,
search quality, reproducibility and fixed-shape reuse."""

import copy
import random
from collections import Counter
from datetime import datetime, timedelta

import numpy as np
import pytest

from goodput_jax.model.goodput import GoodputFunction
from goodput_jax.model.types import GradParams, PerfParams
from goodput_jax.sched import pollux as pollux_mod
from goodput_jax.sched.pollux import PolluxPolicy
from goodput_jax.sched.speedup import SpeedupFunction
from goodput_jax.sched.types import JobInfo, NodeInfo

PERF = PerfParams(0.121, 0.00568, 0.0236, 0.00634, 0.0118, 0.00317, 1.14)
GRAD = GradParams(sqr=0.00136, var=0.000502)
GPU = "nvidia.com/gpu"


@pytest.fixture(scope="module")
def speedup_fn():
    return SpeedupFunction(GoodputFunction(PERF, GRAD, 128), max_batch_size=1280,
                           atomic_bsz_range=(64, 256))


@pytest.fixture(scope="module")
def policy():
    # One policy object for the module: same bucket shapes -> compiled search reused.
    return PolluxPolicy(population=16, generations=16, seed=0)


def check_invariants(jobs, nodes, allocations, prev_allocs=None):
    """Capacity (every resource), min/max replicas, pinned kept, one distributed job per node."""
    assert set(allocations) == set(jobs)
    used = {k: Counter() for k in nodes}
    distributed = Counter()
    for key, placement in allocations.items():
        job = jobs[key]
        assert len(placement) <= job.max_replicas
        if placement:
            assert len(placement) >= job.min_replicas
        for node_key in placement:
            for name, amount in job.resources.items():
                used[node_key][name] += amount
        if len(set(placement)) > 1:
            for node_key in set(placement):
                distributed[node_key] += 1
        if prev_allocs and not job.preemptible and prev_allocs.get(key):
            assert sorted(placement, key=str) == sorted(prev_allocs[key], key=str)
    for node_key, usage in used.items():
        for name, amount in usage.items():
            assert amount <= nodes[node_key].resources.get(name, 0) + 1e-9, (node_key, name)
    assert all(count <= 1 for count in distributed.values()), distributed


def simple_greedy(jobs, nodes):
    """Baseline: in creation order, first-fit max(min_replicas, 1) replicas on one node."""
    free = {k: dict(n.resources) for k, n in nodes.items()}
    out = {}
    for key in sorted(jobs, key=lambda k: jobs[k].creation_time):
        job = jobs[key]
        want = max(job.min_replicas, 1)
        out[key] = []
        for node_key in sorted(nodes, key=lambda k: (nodes[k].preemptible, str(k))):
            if all(free[node_key].get(r, 0) >= v * want for r, v in job.resources.items()):
                for r, v in job.resources.items():
                    free[node_key][r] -= v * want
                out[key] = [node_key] * want
                break
    return out


def test_allocate_job(speedup_fn):
    nodes = {
        "0": NodeInfo({"gpu": 1, "cpu": 500, "pods": 32}, preemptible=False),
        "1": NodeInfo({"gpu": 2, "cpu": 2000, "pods": 32}, preemptible=False),
        "2": NodeInfo({"gpu": 2, "cpu": 3000, "pods": 32}, preemptible=True),
    }
    now = datetime.now()
    job_1 = JobInfo({"gpu": 1, "cpu": 500, "pods": 1}, speedup_fn, now, 0, max_replicas=1)
    job_2 = JobInfo({"gpu": 1, "cpu": 1000, "pods": 1}, speedup_fn,
                    now + timedelta(minutes=1), 0, max_replicas=1)
    job_3 = JobInfo({"gpu": 1, "cpu": 1000, "pods": 1}, speedup_fn,
                    now + timedelta(minutes=1), 2, max_replicas=2)
    job_4 = JobInfo({"gpu": 1, "cpu": 2000, "pods": 1}, speedup_fn,
                    now + timedelta(minutes=1), 2, max_replicas=2)
    policy = PolluxPolicy()
    assert policy.allocate_job(job_1, nodes) == ["0"]
    assert policy.allocate_job(job_2, nodes) == ["1"]
    assert policy.allocate_job(job_3, nodes) == ["1", "1"]
    assert policy.allocate_job(job_4, nodes) == []
    # Non-preemptible nodes come first even when listed last.
    nodes2 = {"p": NodeInfo({"gpu": 4}, preemptible=True), "q": NodeInfo({"gpu": 4}, False)}
    assert policy.allocate_job(JobInfo({"gpu": 1}, speedup_fn, now, 0, 1), nodes2) == ["q"]


def test_unusable_node(speedup_fn, policy):
    nodes = {
        0: NodeInfo({"gpu": 1, "cpu": 500, "pods": 32}, preemptible=False),
        1: NodeInfo({"gpu": 1, "cpu": 8000, "pods": 32}, preemptible=False),
        2: NodeInfo({"gpu": 1, "cpu": 8000, "pods": 32}, preemptible=False),
    }
    template = NodeInfo({"gpu": 1, "cpu": 8000, "pods": 32}, preemptible=True)
    now = datetime.now()
    jobs = {i: JobInfo({"gpu": 1, "cpu": 1000, "pods": 1}, speedup_fn,
                       now + timedelta(minutes=i), 0, max_replicas=1) for i in range(3)}
    allocations, desired_nodes = policy.optimize(jobs, nodes, {}, template)
    assert desired_nodes > 3
    assert max(len(alloc) for alloc in allocations.values()) == 1
    assert sum(len(alloc) for alloc in allocations.values()) == 2
    assert all(0 not in alloc for alloc in allocations.values())
    check_invariants(jobs, nodes, allocations)


def test_autoscale_off_reports_the_fixed_cluster(speedup_fn, policy):
    """autoscale=False: the same allocation search, desired_nodes = the real node count."""
    nodes = {i: NodeInfo({"gpu": 1, "cpu": 8000, "pods": 32}, preemptible=False)
             for i in range(3)}
    template = NodeInfo({"gpu": 1, "cpu": 8000, "pods": 32}, preemptible=True)
    now = datetime.now()
    jobs = {i: JobInfo({"gpu": 1, "cpu": 1000, "pods": 1}, speedup_fn,
                       now + timedelta(minutes=i), 0, max_replicas=1) for i in range(5)}
    fixed = PolluxPolicy(seed=policy.seed, autoscale=False)
    allocations, desired_nodes = fixed.optimize(jobs, nodes, {}, template)
    assert desired_nodes == 3
    assert sum(len(alloc) for alloc in allocations.values()) == 3
    check_invariants(jobs, nodes, allocations)
    _, desired_auto = PolluxPolicy(seed=policy.seed).optimize(jobs, nodes, {}, template)
    assert desired_auto > 3


@pytest.mark.parametrize("num_nodes", [1, 2, 4, 8, 16])
def test_optimize(num_nodes, speedup_fn, policy, total_devices=16):
    num_devices = total_devices // num_nodes
    now = datetime.now()
    jobs = {}
    for i in range(16):
        creation_timestamp = now + timedelta(minutes=len(jobs)),  # 1-tuple, as in the seed
        jobs[len(jobs)] = JobInfo({GPU: 1, "pods": 1}, speedup_fn, creation_timestamp, 0, 8)
    node_resources = {GPU: num_devices, "pods": 32}
    nodes = {i: NodeInfo(node_resources, preemptible=False) for i in range(num_nodes)}
    node_template = NodeInfo(node_resources, preemptible=True)
    prev_allocs = {}
    for _ in range(3):
        allocations, desired_nodes = policy.optimize(jobs, nodes, prev_allocs, node_template)
        check_invariants(jobs, nodes, allocations, prev_allocs)
        # 16 jobs, 16 GPUs: every GPU is used and every job runs.
        assert sum(map(len, allocations.values())) == total_devices
        assert all(allocations.values())
        assert desired_nodes >= 1
        prev_allocs = allocations


@pytest.mark.parametrize("num_nodes", [1, 2, 4, 8, 16])
def test_optimize_non_preemptible(num_nodes, speedup_fn, policy, total_devices=16):
    rng = random.Random(num_nodes)
    order = list(range(10))
    rng.shuffle(order)
    preemptible_ids, pinned_ids = order[:5], order[5:]
    num_devices = total_devices // num_nodes
    now = datetime.now()
    node_resources = {GPU: num_devices, "pods": 32}
    nodes = {i: NodeInfo(node_resources, preemptible=False) for i in range(num_nodes)}
    node_template = NodeInfo(node_resources, preemptible=True)
    prev_allocs = {i: [] for i in order}
    for _ in range(3):
        jobs = {}
        for i in preemptible_ids:
            jobs[i] = JobInfo({GPU: 1, "pods": 1}, speedup_fn, (now + timedelta(minutes=i),),
                              min_replicas=0, max_replicas=8)
        for i in pinned_ids:
            jobs[i] = JobInfo({GPU: 1, "pods": 1}, speedup_fn, (now + timedelta(minutes=i),),
                              min_replicas=2, max_replicas=4, preemptible=False)
        allocations, _ = policy.optimize(jobs, nodes, prev_allocs, node_template)
        check_invariants(jobs, nodes, allocations, prev_allocs)
        for i in pinned_ids:
            if prev_allocs[i]:
                assert allocations[i] == prev_allocs[i]
        prev_allocs = copy.deepcopy(allocations)
        remove = rng.choice(sorted(allocations))
        (pinned_ids if remove in pinned_ids else preemptible_ids).remove(remove)
        prev_allocs.pop(remove)


@pytest.mark.parametrize("num_jobs, num_nodes", [(16, 4), (64, 16)])
def test_utilisation_and_quality(num_jobs, num_nodes, speedup_fn):
    """>= 90% of GPUs allocated when waiting jobs could use them all; the result is
    never worse than a greedy baseline or the previous allocation."""
    now = datetime.now()
    rng = np.random.default_rng(num_jobs)
    jobs = {f"job-{i}": JobInfo({GPU: 1, "pods": 1}, speedup_fn, now - timedelta(minutes=i),
                                int(rng.integers(0, 3)), 8, age=600.0 + i)
            for i in range(num_jobs)}
    nodes = {f"node-{i}": NodeInfo({GPU: 4, "pods": 32}, preemptible=False)
             for i in range(num_nodes)}
    template = NodeInfo({GPU: 4, "pods": 32}, preemptible=True)
    policy = PolluxPolicy(population=16, generations=16, seed=1)
    prev = {}
    for cycle in range(3):
        allocations, _ = policy.optimize(jobs, nodes, prev, template)
        check_invariants(jobs, nodes, allocations, prev)
        gpus = sum(map(len, allocations.values()))
        assert gpus >= 0.9 * 4 * num_nodes, (cycle, gpus)
        objective = policy.evaluate(jobs, nodes, allocations, prev)
        assert objective == pytest.approx(policy.last_stats.objective, rel=1e-4)
        baseline = simple_greedy(jobs, nodes)
        assert objective >= policy.evaluate(jobs, nodes, baseline, prev) - 1e-6
        assert objective >= policy.evaluate(jobs, nodes, prev, prev) - 1e-6
        assert objective >= policy.last_stats.greedy_objective - 1e-6
        assert objective >= policy.last_stats.previous_objective - 1e-6
        prev = allocations
        # Churn: drop two jobs, add two new ones.
        for key in sorted(jobs)[:2]:
            jobs.pop(key)
        for k in range(2):
            jobs[f"new-{cycle}-{k}"] = JobInfo({GPU: 1, "pods": 1}, speedup_fn, now, 0, 8,
                                               age=0.0)


def test_reproducible_with_fixed_seed(speedup_fn):
    now = datetime(2024, 1, 1)
    jobs = {i: JobInfo({GPU: 1, "pods": 1}, speedup_fn, now + timedelta(minutes=i), 0, 8,
                       age=1000.0) for i in range(10)}
    nodes = {i: NodeInfo({GPU: 4, "pods": 32}, preemptible=False) for i in range(4)}
    runs = []
    for _ in range(2):
        policy = PolluxPolicy(population=16, generations=16, seed=7)
        prev, out = {}, []
        for _ in range(2):
            prev, desired = policy.optimize(jobs, nodes, prev, nodes[0])
            out.append((prev, desired))
        runs.append(out)
    assert runs[0] == runs[1]


def test_restart_penalty_and_fair_share():
    """Objective with p=1 on one job: x = speedup * penalty / fair-share speedup."""
    nodes = {"n": NodeInfo({"gpu": 2}, preemptible=False)}
    job = JobInfo({"gpu": 1}, lambda n, r: r, 0.0, 0, 2, age=90.0, num_restarts=1)
    policy = PolluxPolicy(p=1.0, restart_penalty=30.0)
    # Fair share = all 2 GPUs -> fair speedup 2. Unchanged allocation: 2 / 2.
    assert policy.evaluate({"j": job}, nodes, {"j": ["n", "n"]}, {"j": ["n", "n"]}) == \
        pytest.approx(1.0)
    # Changed: (90 - 1 * 30) / (90 + 30) = 0.5 penalty -> 1 * 0.5 / 2.
    assert policy.evaluate({"j": job}, nodes, {"j": ["n"]}, {"j": ["n", "n"]}) == \
        pytest.approx(0.25)
    # Starting a waiting job is not a restart.
    assert policy.evaluate({"j": job}, nodes, {"j": ["n"]}, {}) == pytest.approx(0.5)


def test_one_distributed_job_per_node_and_multi_resource():
    """Jobs that need more than one node: never two of them sharing a node."""
    nodes = {i: NodeInfo({"gpu": 4, "cpu": 16}, preemptible=False) for i in range(4)}
    jobs = {i: JobInfo({"gpu": 1, "cpu": 2 + 2 * (i % 2)}, lambda n, r: r ** 0.9, float(i),
                       6, 8, age=1e4) for i in range(4)}
    policy = PolluxPolicy(population=16, generations=16)
    allocations, _ = policy.optimize(jobs, nodes, {}, nodes[0])
    check_invariants(jobs, nodes, allocations)
    assert sum(1 for a in allocations.values() if a) >= 2


def test_autoscale_shrinks_idle_cluster():
    nodes = {i: NodeInfo({"gpu": 4}, preemptible=False) for i in range(8)}
    jobs = {0: JobInfo({"gpu": 1}, lambda n, r: r, 0.0, 0, 2, age=1e4)}
    allocations, desired = PolluxPolicy(population=16, generations=16).optimize(
        jobs, nodes, {}, nodes[0])
    assert len(allocations[0]) == 2
    assert desired == 1


def test_no_recompile_within_bucket(speedup_fn, policy):
    nodes = {i: NodeInfo({GPU: 4, "pods": 32}, preemptible=False) for i in range(4)}
    make = lambda n: {i: JobInfo({GPU: 1, "pods": 1}, speedup_fn, float(i), 0, 8)
                      for i in range(n)}
    policy.optimize(make(9), nodes, {}, nodes[0])
    size = pollux_mod._search._cache_size()
    for n in (10, 12, 16):
        policy.optimize(make(n), nodes, {}, nodes[0])
    assert pollux_mod._search._cache_size() == size


def test_empty_cases_and_errors(speedup_fn):
    policy = PolluxPolicy(population=16, generations=16)
    nodes = {0: NodeInfo({"gpu": 1}, preemptible=False)}
    assert policy.optimize({}, nodes, {}, nodes[0]) == ({}, 1)
    job = JobInfo({"gpu": 1}, speedup_fn, 0.0, 0, 1)
    alloc, desired = PolluxPolicy(population=16, generations=16).optimize({0: job}, {}, {}, nodes[0])
    assert alloc == {0: []} and desired >= 1
    with pytest.raises(TypeError, match="node_template"):
        policy.optimize({0: job}, nodes, {}, {"gpu": 1})
    with pytest.raises(TypeError, match="jobs\\[0\\]"):
        policy.optimize({0: "job"}, nodes, {}, nodes[0])
    with pytest.raises(ValueError, match="population"):
        PolluxPolicy(population=2)
    with pytest.raises(ValueError, match="unknown node"):
        policy.evaluate({0: job}, nodes, {0: ["nope"]})


def test_genetic_search_improves_on_its_seeds():
    """Mixed GPU/CPU requests and min_replicas on uneven nodes: the genetic search finds a
    strictly better allocation than both greedy seeds (and never a worse one)."""
    nodes = {i: NodeInfo({"gpu": g, "cpu": 32}, preemptible=False)
             for i, g in enumerate([4, 8, 8, 2])}
    fns = [SpeedupFunction(GoodputFunction(PERF, GradParams(0.00136, 0.000502 * s), 128),
                           max_batch_size=2560, atomic_bsz_range=(32, 256))
           for s in (0.2, 1.0, 5.0, 30.0)]
    specs = [(2, 8, 0, 0, 16, 829.4), (1, 2, 1, 2, 8, 37.3), (2, 8, 3, 2, 16, 790.5),
             (1, 2, 1, 0, 8, 142.7), (1, 4, 3, 0, 8, 752.9)]
    jobs = {i: JobInfo({"gpu": g, "cpu": c}, fns[f], float(i), lo, hi, age=age)
            for i, (g, c, f, lo, hi, age) in enumerate(specs)}
    policy = PolluxPolicy(population=16, generations=16, seed=0)
    allocations, _ = policy.optimize(jobs, nodes, {}, nodes[0])
    check_invariants(jobs, nodes, allocations)
    stats = policy.last_stats
    best_seed = max(stats.greedy_objective, stats.grown_objective, stats.previous_objective)
    assert stats.objective > best_seed * 1.02, stats


def test_realloc_factor_is_one_rule_for_pollux_and_sia():
    """One home (sched.pollux.realloc_factor); Sia's variant spares jobs younger than a penalty."""
    from goodput_jax.sched import sia
    from goodput_jax.sched.pollux import realloc_factor

    assert sia.realloc_factor(10.0, 0, 30.0) == realloc_factor(10.0, 0, 30.0, exempt_young=True)
    assert realloc_factor(90.0, 1, 30.0) == pytest.approx(60.0 / 120.0)  # (90 - 30) / (90 + 30)
    assert realloc_factor(10.0, 0, 30.0) == pytest.approx(10.0 / 40.0)  # AdaptDL: young pays too
    assert realloc_factor(10.0, 0, 30.0, exempt_young=True) == 1.0  # Sia's artifact
    assert realloc_factor(300.0, 1, 30.0, exempt_young=True) == pytest.approx(270.0 / 330.0)
    assert realloc_factor(30.0, 5, 30.0) == 0.0  # more restarts than life: no credit
    assert realloc_factor(0.0, 0, 0.0) == 1.0  # no age and no penalty: nothing lost
    assert realloc_factor(0.0, 0, 0.0, exempt_young=True) == 1.0


def test_a_restored_carry_decides_as_the_policy_that_never_stopped():
    """PolluxCarry (cycle count and last population, through JSON) restores a policy's
    next decision; a fresh policy (cycle 0, no population) decides otherwise here, in a
    short search where the key and the carried population matter."""
    import json

    from goodput_jax.sched.pollux import PolluxCarry

    nodes = {f"n{i}": NodeInfo({GPU: 4}, preemptible=False) for i in range(4)}
    fns = [lambda n, r, e=e: r ** e / n ** 0.1 for e in (0.5, 0.7, 0.9, 0.95, 0.6, 0.8, 0.85, 0.75)]
    jobs = {f"j{k}": JobInfo({GPU: 1}, fns[k], float(k), 0, 8, age=600.0) for k in range(8)}
    kw = dict(seed=3, population=8, generations=2, autoscale=False)
    kept, saved, fresh = PolluxPolicy(**kw), PolluxPolicy(**kw), PolluxPolicy(**kw)
    first, _ = kept.optimize(jobs, nodes, {}, nodes["n0"])
    assert saved.optimize(jobs, nodes, {}, nodes["n0"])[0] == first
    restored = PolluxPolicy(**kw)
    restored.restore(PolluxCarry.from_json(json.loads(json.dumps(saved.carry().to_json()))))
    assert restored.carry() == kept.carry() and kept.carry().cycle == 1
    jobs["late"] = JobInfo({GPU: 1}, fns[2], 9.0, 0, 8, age=0.0)
    want, _ = kept.optimize(jobs, nodes, first, nodes["n0"])
    assert restored.optimize(jobs, nodes, first, nodes["n0"])[0] == want
    assert fresh.optimize(jobs, nodes, first, nodes["n0"])[0] != want


def test_pollux_carry_rejects_bad_input():
    from goodput_jax.sched.pollux import PolluxCarry

    with pytest.raises(ValueError, match="cycle"):
        PolluxCarry.from_json({"cycle": -1})
    with pytest.raises(ValueError, match="both"):
        PolluxCarry.from_json({"cycle": 1, "population": [[[1]]]})
    with pytest.raises(ValueError, match="shape"):
        PolluxCarry.from_json({"cycle": 1, "job_keys": ["a", "b"], "node_keys": ["n"],
                               "population": [[[1]]], "fitness": [0.5]})
    with pytest.raises(TypeError, match="key"):
        PolluxCarry(1, (("a", 1),), ("n",), np.zeros((1, 1, 1), np.int32),
                    np.zeros(1, np.float32)).to_json()
    with pytest.raises(TypeError, match="PolluxCarry"):
        PolluxPolicy().restore({"cycle": 1})
