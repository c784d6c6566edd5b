"""SiaPolicy: configurations, Sia's objective, exactness against milp, constraints, placement."""

import numpy as np
import pytest

from goodput_jax.model.goodput import GoodputFunction
from goodput_jax.model.types import GradParams, PerfParams
from goodput_jax.sched.sia import (
    SiaPolicy,
    place,
    realloc_factor,
    sia_configs,
    solve_assignment,
)
from goodput_jax.sched.speedup import SpeedupFunction, goodput_matrix
from goodput_jax.sched.types import JobInfo, NodeInfo
from tests.sched.sia_check import exact_choice, random_problem, solve_problem

SIA64 = {"aws": (6, 4), "rtx": (3, 8), "dgx-ext": (2, 8)}


def sia_nodes(cluster=SIA64):
    nodes, i = {}, 0
    for t, (n, g) in cluster.items():
        for _ in range(n):
            nodes[f"{t}-{i}"] = NodeInfo({"gpu": g}, False, t)
            i += 1
    return nodes


def concave(speed, a):
    return lambda n, r: speed * np.asarray(r, float) ** a


def test_configs_of_the_paper_cluster():
    c = sia_configs(SIA64)
    labels = [c.label(k) for k in range(len(c))]
    assert labels == ["aws:1", "aws:2", "aws:4", "aws:8", "aws:12", "aws:16", "aws:20", "aws:24",
                      "rtx:1", "rtx:2", "rtx:4", "rtx:8", "rtx:16", "rtx:24",
                      "dgx-ext:1", "dgx-ext:2", "dgx-ext:4", "dgx-ext:8", "dgx-ext:16"]
    assert c.nodes[labels.index("aws:12")] == 3 and c.nodes[labels.index("rtx:4")] == 1
    assert c.capacity.tolist() == [24.0, 24.0, 16.0]
    with pytest.raises(ValueError, match="cluster"):
        sia_configs({"aws": (0, 4)})


def test_realloc_factor_and_arguments():
    assert realloc_factor(10.0, 3, 30.0) == 1.0  # young jobs are not penalised
    assert realloc_factor(300.0, 1, 30.0) == pytest.approx(270.0 / 330.0)
    with pytest.raises(ValueError, match="p must be"):
        SiaPolicy(p=0.5)
    with pytest.raises(ValueError, match="lambda_n"):
        SiaPolicy(lambda_n=-1.0)
    with pytest.raises(TypeError, match="accelerator_type"):
        NodeInfo({"gpu": 4}, False, accelerator_type=3)
    nodes = {"n": NodeInfo({"gpu": 4}, False, "t4")}
    two = {"j": JobInfo({"gpu": 2}, lambda n, r: r, 0.0, 0, 4)}
    with pytest.raises(ValueError, match="one accelerator per replica"):
        SiaPolicy(resource="gpu").optimize(two, nodes, {})
    with pytest.raises(ValueError, match="no node offers the resource 'tpu'"):
        SiaPolicy(resource="tpu").optimize({"j": JobInfo({}, lambda n, r: r, 0.0, 0, 4)},
                                           nodes, {})


def test_gap_to_exact_optimum_on_small_instances():
    # The acceptance run (200 instances) is `benchmarks/policy_bench.py --hetero --gap`.
    gaps = []
    for seed in range(24):
        prob = random_problem(seed)
        opt, _ = exact_choice(prob)
        ours = prob.objective(solve_problem(prob))
        assert np.isfinite(ours), f"seed {seed}: capacity broken"
        gaps.append((ours - opt) / opt)
    gaps = np.array(gaps)
    assert gaps.min() >= -1e-6  # never better than the optimum (the checker is right)
    assert np.mean(gaps <= 0.02) >= 0.95, gaps


def test_solver_respects_capacity_fixed_and_masks():
    rng = np.random.default_rng(0)
    c = sia_configs(SIA64)
    gain = rng.uniform(0.2, 1.0, (16, 1)) * np.log1p(c.gpus)[None, :]  # more GPUs, more gain
    gain[:, c.gpus > 8] = -np.inf  # nobody may use more than 8 GPUs
    fixed = np.full(16, -1)
    fixed[3] = int(np.nonzero(c.gpus == 16)[0][0])  # a restarting job keeps 16 GPUs
    choice = solve_assignment(gain, c.ctype, c.gpus, c.capacity, fixed)
    assert choice[3] == fixed[3]
    used = np.zeros(3)
    for j, k in enumerate(choice):
        if k >= 0:
            used[c.ctype[k]] += c.gpus[k]
            assert j == 3 or c.gpus[k] <= 8
    assert np.all(used <= c.capacity)
    assert used.sum() >= 56  # 16 jobs of up to 8 GPUs (one of 16): the cluster fills up


def test_policy_places_one_type_per_job_within_node_capacity():
    nodes = sia_nodes()
    rng = np.random.default_rng(1)
    jobs = {}
    for k in range(12):
        fns = {t: concave(s * rng.uniform(0.7, 1.3), rng.uniform(0.4, 0.95))
               for t, s in (("aws", 1.0), ("rtx", 1.6), ("dgx-ext", 4.0))}
        jobs[f"j{k}"] = JobInfo({"gpu": 1}, lambda n, r: r, 0.0, 0, 32, goodput_fns=fns,
                                age=1000.0)
    policy = SiaPolicy(resource="gpu")
    alloc = policy.optimize(jobs, nodes, {})
    assert set(alloc) == set(jobs)
    used = {}
    c = sia_configs(SIA64)
    counts = {(c.types[c.ctype[k]], int(c.gpus[k])) for k in range(len(c))}
    for key, placement in alloc.items():
        for n in placement:
            used[n] = used.get(n, 0) + 1
        if placement:
            types = {nodes[n].accelerator_type for n in placement}
            assert len(types) == 1, (key, placement)
            assert (types.pop(), len(placement)) in counts
    assert all(used[n] <= nodes[n].resources["gpu"] for n in used)
    assert all(alloc[k] for k in jobs)  # 12 jobs, 64 GPUs: everyone runs
    stats = policy.last_stats
    assert len(stats.start_gains) == 6 and max(stats.start_gains) > 0
    assert len(stats.prices) == 3 and stats.seconds >= stats.solve_seconds > 0
    # Same inputs, previous allocation = this one: nothing moves (lambda_a, realloc factor).
    again = policy.optimize(jobs, nodes, alloc)
    assert again == alloc


def test_restarting_job_keeps_its_allocation():
    nodes = sia_nodes()
    fast = {"aws": concave(1.0, 0.9), "rtx": concave(2.0, 0.9), "dgx-ext": concave(8.0, 0.9)}
    prev = {"r": ["aws-0"]}  # on the slowest type
    jobs = {"r": JobInfo({"gpu": 1}, lambda n, r: r, 0.0, 0, 16, goodput_fns=fast,
                         restarting=True, age=5000.0)}
    assert SiaPolicy(resource="gpu").optimize(jobs, nodes, prev) == prev
    jobs["r"].restarting = False
    moved = SiaPolicy(resource="gpu").optimize(jobs, nodes, prev)["r"]
    assert {nodes[n].accelerator_type for n in moved} == {"dgx-ext"}


def test_unprofiled_jobs_get_one_gpu_and_unallocated_penalty():
    nodes = sia_nodes({"aws": (1, 4), "rtx": (1, 2)})
    jobs = {k: JobInfo({"gpu": 1}, lambda n, r: r, 0.0, 0, 8) for k in range(8)}
    policy = SiaPolicy(resource="gpu")
    alloc = policy.optimize(jobs, nodes, {})
    assert sorted(len(v) for v in alloc.values()) == [0, 0, 1, 1, 1, 1, 1, 1]
    # objective: 6 jobs at normalised goodput 1 (cost 1) + 2 unallocated (lambda_n each)
    assert policy.last_stats.objective == pytest.approx(6 * 1.0 + 2 * 1.1)


def test_placement_keeps_unchanged_jobs_and_packs():
    c = sia_configs({"rtx": (2, 8)})
    k = {int(g): i for i, g in enumerate(c.gpus)}
    prev = {"a": ["n1"] * 4}
    out = place({"a": k[4], "b": k[8], "c": k[2], "d": k[2]}, c, {"rtx": ["n0", "n1"]},
                {"n0": 8, "n1": 8}, prev)
    assert out["a"] == ["n1"] * 4 and out["b"] == ["n0"] * 8
    assert out["c"] == ["n1"] * 2 and out["d"] == ["n1"] * 2


def test_placement_moves_the_fewest_small_jobs_for_a_whole_node_job():
    c = sia_configs({"rtx": (2, 8)})
    k = {int(g): i for i, g in enumerate(c.gpus)}
    prev = {"a": ["n0"] * 2, "b": ["n1"] * 4, "d": ["n1"] * 2}
    out = place({"a": k[2], "b": k[4], "d": k[2], "c": k[8]}, c, {"rtx": ["n0", "n1"]},
                {"n0": 8, "n1": 8}, prev)
    assert out["c"] == ["n0"] * 8  # n0 was the least used node
    assert out["b"] == prev["b"] and out["d"] == prev["d"]  # untouched
    assert out["a"] == ["n1"] * 2  # the only job that moved


def test_goodput_matrix_batches_speedup_functions():
    perf = PerfParams(0.121, 0.00568, 0.0236, 0.00634, 0.0118, 0.00317, 1.14)
    fns = []
    for scale in (1.0, 0.5, 0.25):
        p = PerfParams(*(v * scale for v in perf[:6]), perf.gamma)
        fns.append(SpeedupFunction(GoodputFunction(p, GradParams(0.00136, 0.000502), 128),
                                   1280, (64, 256)))
    c = sia_configs({"slow": (2, 4), "fast": (1, 8)})
    table = goodput_matrix([{"slow": fns[0], "fast": fns[1]}, {"slow": fns[1]}, None],
                           c.types, c.ctype, c.nodes, c.gpus)
    for k in range(len(c)):
        n, g = int(c.nodes[k]), int(c.gpus[k])
        want = fns[0] if c.types[c.ctype[k]] == "slow" else fns[1]
        np.testing.assert_allclose(table[0, k], want.goodput(n, g), rtol=1e-5)
    assert np.all(table[1, c.ctype == c.types.index("fast")] == 0)
    assert np.all(table[2] == 0)
    # a 2x faster step time is (about) 2x the goodput at one GPU
    assert table[0, list(c.gpus).index(1) + 0] * 2 == pytest.approx(
        fns[1].goodput(1, 1), rel=1e-4)


def _pinning_problem(preemptible):
    # a0 is the fast type; the non-preemptible job "np" holds one a0 GPU and would gain
    # from more, and "big" (allowed only on a) wants both a0 GPUs.
    nodes = {"a0": NodeInfo({"gpu": 2}, False, "a"), "b0": NodeInfo({"gpu": 2}, False, "b"),
             "b1": NodeInfo({"gpu": 2}, False, "b")}
    jobs = {
        "np": JobInfo({"gpu": 1}, lambda n, r: r, 0.0, 1, 4, preemptible=preemptible,
                      goodput_fns={"a": concave(1.0, 0.9), "b": concave(1.0, 0.9)}, age=1e4),
        "big": JobInfo({"gpu": 1}, lambda n, r: r, 0.0, 2, 2, age=1e4,
                       goodput_fns={"a": concave(10.0, 1.0)}),
    }
    return nodes, jobs, {"np": ["a0"], "big": []}


def test_non_preemptible_job_keeps_its_allocation():
    nodes, jobs, prev = _pinning_problem(preemptible=True)
    moved = SiaPolicy(resource="gpu").optimize(jobs, nodes, prev)
    assert moved["np"] != ["a0"]  # a preemptible job is moved (the test has teeth)
    nodes, jobs, prev = _pinning_problem(preemptible=False)
    policy = SiaPolicy(resource="gpu")
    alloc = prev
    for _ in range(3):  # every round
        alloc = policy.optimize(jobs, nodes, alloc)
        assert alloc["np"] == ["a0"]
        assert alloc["big"] == []  # only one a0 GPU is free: "big" needs two
        assert policy.last_stats.objective == pytest.approx(1.1)  # "big" unallocated


def test_non_preemptible_job_after_a_node_loss():
    nodes = {f"{t}{i}": NodeInfo({"gpu": 2}, False, t) for t in "ab" for i in range(2)}
    fns = {"a": concave(1.0, 0.9), "b": concave(1.0, 0.9)}
    # "x" runs only on type a, ten times faster than anything: it wants a0's GPUs
    other = {"x": JobInfo({"gpu": 1}, lambda n, r: r, 0.0, 1, 2, age=1e4,
                          goodput_fns={"a": concave(10.0, 1.0)}),
             "y": JobInfo({"gpu": 1}, lambda n, r: r, 0.0, 1, 4, goodput_fns=fns, age=1e4)}

    def job(min_replicas):
        return JobInfo({"gpu": 1}, lambda n, r: r, 0.0, min_replicas, 4, preemptible=False,
                       goodput_fns=fns, age=1e4)

    prev = {"np": ["a0", "a0", "a1", "a1"]}
    del nodes["a1"]  # a1 is lost: the job keeps the two surviving devices on a0
    alloc = SiaPolicy(resource="gpu").optimize({"np": job(1), **other}, nodes, prev)
    assert alloc["np"] == ["a0", "a0"]
    assert "a0" not in alloc["x"] + alloc["y"]
    # with min_replicas 4 the survivors cannot run it: it is placed again like a queued job
    alloc = SiaPolicy(resource="gpu").optimize({"np": job(4)}, nodes, prev)
    assert alloc["np"] == ["b0", "b0", "b1", "b1"]
    # its node gone entirely: placed anew, then pinned where it landed
    nodes2 = {k: v for k, v in nodes.items() if k != "a0"}
    policy = SiaPolicy(resource="gpu")
    alloc = policy.optimize({"np": job(1), **other}, nodes2, {"np": ["a0"]})
    assert alloc["np"] and "a0" not in alloc["np"]
    again = policy.optimize({"np": job(1), **other}, nodes2, alloc)
    assert again["np"] == alloc["np"]


def test_displaced_non_preemptible_job_is_placed_first():
    # a full cluster of preemptible jobs; the non-preemptible "np" ran on a1, which is gone
    nodes = {"a0": NodeInfo({"gpu": 2}, False, "a"), "b0": NodeInfo({"gpu": 2}, False, "b")}
    fns = {"a": concave(4.0, 0.9), "b": concave(4.0, 0.9)}
    jobs = {k: JobInfo({"gpu": 1}, lambda n, r: r, 0.0, 1, 2, goodput_fns=fns, age=1e4)
            for k in ("p1", "p2")}
    prev = {"p1": ["a0", "a0"], "p2": ["b0", "b0"], "np": ["a1"]}
    np_fns = {"a": concave(1.0, 0.9), "b": concave(1.0, 0.9)}
    for preemptible, placed in ((True, False), (False, True)):
        jobs["np"] = JobInfo({"gpu": 1}, lambda n, r: r, 0.0, 1, 2, preemptible=preemptible,
                             goodput_fns=np_fns, age=1e4)
        alloc = SiaPolicy(resource="gpu").optimize(jobs, nodes, prev)
        # its former size (one device); a preemptible job in its place just waits
        assert (len(alloc["np"]) == 1) is placed, (preemptible, alloc)
        used = [n for a in alloc.values() for n in a]
        assert all(used.count(n) <= 2 for n in nodes)
    # nothing fits beside pinned jobs: it waits
    pinned = {k: JobInfo({"gpu": 1}, lambda n, r: r, 0.0, 1, 2, preemptible=False,
                         goodput_fns=fns, age=1e4) for k in ("p1", "p2")}
    alloc = SiaPolicy(resource="gpu").optimize({**pinned, "np": jobs["np"]}, nodes, prev)
    assert alloc == {"p1": ["a0", "a0"], "p2": ["b0", "b0"], "np": []}
