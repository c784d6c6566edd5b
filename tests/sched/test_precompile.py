"""Compile counts of the policies: a job count in a bucket already compiled does not compile
again, precompiling does not change decisions, and padding changes no allocation.

Counts compilations (``jax.monitoring``, :class:`CompileCounter`), never wall time.
"""

import jax
import numpy as np
import pytest

from goodput_jax.sched import pollux as pollux_mod
from goodput_jax.sched import pollux_problem
from goodput_jax.sched.pollux import PolluxPolicy
from goodput_jax.sched.sia import SiaPolicy, solve_assignment
from goodput_jax.sched.types import JobInfo, NodeInfo
from goodput_jax.sched.warmup import CompileCounter, enable_compilation_cache, repeat_jobs

GPU = "gpu"


def concave(speed, a):
    return lambda n, r: speed * np.asarray(r, float) ** a


def pollux_jobs(count, seed=0, max_replicas=(2, 4, 6)):
    rng = np.random.default_rng(seed)
    return {f"j{i}": JobInfo({GPU: 1}, concave(1.0, float(rng.uniform(0.5, 0.9))), float(i),
                             int(rng.choice([0, 1])), int(rng.choice(max_replicas)), age=600.0)
            for i in range(count)}


def sia_jobs(count, seed=0):
    rng = np.random.default_rng(seed)
    jobs = {}
    for i in range(count):
        a = float(rng.uniform(0.5, 0.9))
        fns = {"t4": concave(1.0, a), "a100": concave(float(rng.uniform(2, 4)), a)}
        jobs[f"j{i}"] = JobInfo({GPU: 1}, concave(1.0, a), float(i), 0,
                                int(rng.choice([2, 4, 8])), goodput_fns=fns, age=600.0)
    return jobs


NODES = {f"n{i}": NodeInfo({GPU: 4}, False, "t4") for i in range(8)}
MIXED = {**{f"t{i}": NodeInfo({GPU: 4}, False, "t4") for i in range(4)},
         **{f"a{i}": NodeInfo({GPU: 8}, False, "a100") for i in range(2)}}
TEMPLATE = NodeInfo({GPU: 4}, False, "t4")


def test_pollux_second_job_count_in_the_bucket_does_not_compile():
    jax.clear_caches()  # earlier tests of the session may have compiled this bucket
    policy = PolluxPolicy(population=8, generations=4, autoscale=False, clock=lambda: 0.0)
    with CompileCounter() as first:
        policy.optimize(pollux_jobs(20), NODES, {}, TEMPLATE)
    assert first.compiles > 0
    # 27 jobs, other max_replicas (another greedy step bound): the same 32-job bucket.
    other = pollux_jobs(27, seed=1, max_replicas=(1, 3, 8))
    with CompileCounter() as second:
        alloc, _ = PolluxPolicy(population=8, generations=4, autoscale=False,
                                clock=lambda: 0.0).optimize(other, NODES, {}, TEMPLATE)
    assert second.compiles == 0
    assert sum(map(len, alloc.values())) > 0


def test_sia_second_job_count_in_the_bucket_does_not_compile():
    jax.clear_caches()  # earlier tests of the session may have compiled this bucket
    with CompileCounter() as first:
        SiaPolicy(resource=GPU, clock=lambda: 0.0).optimize(sia_jobs(9), MIXED, {})
    assert first.compiles > 0
    with CompileCounter() as second:  # 9 and 15 jobs: one 16-job bucket (other move caps)
        alloc = SiaPolicy(resource=GPU, clock=lambda: 0.0).optimize(sia_jobs(15, 1), MIXED, {})
    assert second.compiles == 0
    assert sum(map(len, alloc.values())) > 0


@pytest.mark.parametrize("kind", ["pollux", "sia"])
def test_precompile_compiles_what_the_round_needs_and_changes_no_decision(kind):
    if kind == "pollux":
        make = lambda: PolluxPolicy(population=8, generations=4, clock=lambda: 0.0)
        jobs, nodes = pollux_jobs(40, seed=3), NODES
        run = lambda p, b: p.optimize(jobs, nodes, b, TEMPLATE)[0]
    else:
        make = lambda: SiaPolicy(resource=GPU, clock=lambda: 0.0)
        jobs, nodes = sia_jobs(40, seed=3), MIXED
        run = lambda p, b: p.optimize(jobs, nodes, b)
    warm = make()
    info = warm.precompile(jobs, nodes, job_counts=[40, 70])
    assert info["job_counts"] == [40, 70] and info["seconds"] > 0
    plain = make()
    base_w, base_p = {}, {}
    for cycle in range(3):
        with CompileCounter() as counter:
            got = run(warm, base_w)
        if cycle == 0:
            assert counter.compiles == 0  # precompiled: the first round compiles nothing
        want = run(plain, base_p)
        assert got == want  # the same decisions as a policy never precompiled
        base_w, base_p = got, want
    with CompileCounter() as counter:  # 70 jobs: the next bucket, precompiled too
        if kind == "pollux":
            make().optimize(repeat_jobs(jobs, 70), nodes, {}, TEMPLATE)
        else:
            make().optimize(repeat_jobs(jobs, 70), nodes, {})
    assert counter.compiles == 0


def test_pollux_padding_changes_no_allocation(monkeypatch):
    """The same problem padded to 32 and to 128 jobs and nodes: the same deterministic seeds
    (greedy from scratch, grown, previous), the same best of them, the same objective."""
    jobs = pollux_jobs(20, seed=5)
    results = []
    for minimum in (16, 128):
        real = pollux_mod._bucket

        def padded(n, minimum_=8, *, minimum=None, fine=False, m=minimum, real=real):
            least = minimum_ if minimum is None else minimum
            return real(n, max(least, m), fine=fine)

        # the problem's padding (pollux_problem) and the greedy's step bound (pollux)
        monkeypatch.setattr(pollux_problem, "_bucket", padded)
        monkeypatch.setattr(pollux_mod, "_bucket", padded)
        policy = PolluxPolicy(population=8, generations=0, clock=lambda: 0.0)
        alloc, desired = policy.optimize(jobs, NODES, {}, TEMPLATE)
        s = policy.last_stats
        assert policy._prev[2].shape[1:] == (max(32, minimum), max(16, minimum))  # the padding
        results.append((alloc, desired, s.objective, s.greedy_objective, s.grown_objective))
        monkeypatch.setattr(pollux_problem, "_bucket", real)
        monkeypatch.setattr(pollux_mod, "_bucket", real)
    (a1, d1, *o1), (a2, d2, *o2) = results
    assert a1 == a2 and d1 == d2
    assert o1 == pytest.approx(o2, rel=1e-6)


def test_sia_padding_changes_no_allocation():
    """Rows no configuration is open to are what padding is: added ones change nothing."""
    rng = np.random.default_rng(7)
    gain = rng.uniform(0.1, 1.0, (10, 6))
    gain[rng.uniform(size=gain.shape) < 0.2] = -np.inf
    ctype, gpus, cap = np.array([0, 0, 0, 1, 1, 1]), np.array([1, 2, 4, 1, 2, 8]), np.array([6., 9.])
    want = solve_assignment(gain, ctype, gpus, cap)
    padded = np.vstack([gain, np.full((5, 6), -np.inf)])  # 15 rows: the same 16-row bucket
    got = solve_assignment(padded, ctype, gpus, cap)
    assert got[:10].tolist() == want.tolist() and got[10:].tolist() == [-1] * 5


def test_persistent_cache_serves_a_cleared_process(tmp_path):
    import jax

    enable_compilation_cache(tmp_path / "cache")
    try:
        jobs = sia_jobs(5, seed=9)
        cluster = {f"x{i}": NodeInfo({GPU: 2}, False, "t4") for i in range(3)}
        want = SiaPolicy(resource=GPU, clock=lambda: 0.0).optimize(jobs, cluster, {})
        jax.clear_caches()
        with CompileCounter() as counter:
            got = SiaPolicy(resource=GPU, clock=lambda: 0.0).optimize(jobs, cluster, {})
        assert got == want
        assert counter.compiles > 0 and counter.cache_hits == counter.compiles
    finally:
        enable_compilation_cache(None)
