"""Options objects of sched/: validated once, one-line errors, old keywords still work."""

from __future__ import annotations

import pytest

from goodput_jax.sched.sia import SolverOptions, solve_assignment
from goodput_jax.sched.sim.options import SimOptions, WorkloadOptions, with_keywords
from goodput_jax.sched.sim.runner import SimPolicy, make_sim_policy
from goodput_jax.sched.types import JobInfo, JobOptions


@pytest.mark.parametrize("cls,kwargs,message", [
    (SimOptions, {"interval": 0}, "interval (0) must be a number > 0"),
    (SimOptions, {"num_nodes": 0}, "num_nodes (0) must be >= 1"),
    (SimOptions, {"interference": 1.0}, "interference (1.0) must be in [0, 1)"),
    (SimOptions, {"max_time": -1.0}, "max_time (-1.0) must be a number > 0"),
    (WorkloadOptions, {"max_jobs": 0}, "max_jobs (0) must be >= 1"),
    (WorkloadOptions, {"gpus_per_node": 0}, "gpus_per_node (0) must be >= 1"),
    (JobOptions, {"num_restarts": -1}, "num_restarts (-1) must be >= 0"),
    (JobOptions, {"restart_penalty": -5.0}, "restart_penalty (-5.0) must be >= 0 seconds"),
    (JobOptions, {"age": float("nan")}, "age (nan) must be a finite number of seconds"),
    (SolverOptions, {"dual_steps": 0}, "dual_steps (0) must be >= 1"),
])
def test_one_line_errors_name_the_field(cls, kwargs, message):
    with pytest.raises((ValueError, TypeError)) as info:
        cls(**kwargs)
    assert str(info.value) == message
    assert "\n" not in str(info.value)


def test_options_are_frozen_and_keyword_only():
    opts = SimOptions(interval=30.0)
    with pytest.raises(AttributeError):
        opts.interval = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        SimOptions(30.0)  # type: ignore[misc]


def test_old_keywords_are_translated_once():
    base = SimOptions(num_nodes=4)
    opts = with_keywords(SimOptions, base, {"interval": 30.0}, "simulate")
    assert (opts.num_nodes, opts.interval) == (4, 30.0)
    with pytest.raises(TypeError, match="simulate\\(\\) got an unexpected keyword argument 'nodes'"):
        with_keywords(SimOptions, None, {"nodes": 4}, "simulate")
    with pytest.raises(ValueError, match="num_nodes \\(0\\)"):
        with_keywords(SimOptions, None, {"num_nodes": 0}, "simulate")


def test_job_info_options_and_keywords_agree():
    fns = {"a100": lambda n, r: r}
    by_options = JobInfo({"gpu": 1}, lambda n, r: r, 0.0, 0, 4,
                         options=JobOptions(age=60.0, num_restarts=2, goodput_fns=fns,
                                            restarting=True, restart_penalty=10.0))
    by_keywords = JobInfo({"gpu": 1}, lambda n, r: r, 0.0, 0, 4, age=60.0, num_restarts=2,
                          goodput_fns=fns, restarting=True, restart_penalty=10.0)
    for job in (by_options, by_keywords):
        assert (job.age, job.num_restarts, job.restarting, job.restart_penalty) == (
            60.0, 2, True, 10.0)
        assert set(job.goodput_fns) == {"a100"}
    assert by_options.options == by_keywords.options
    with pytest.raises(TypeError, match="unexpected keyword argument 'restarts'"):
        JobInfo({"gpu": 1}, lambda n, r: r, 0.0, 0, 4, restarts=1)
    with pytest.raises(ValueError, match="num_restarts \\(-1\\)"):
        JobInfo({"gpu": 1}, lambda n, r: r, 0.0, 0, 4, num_restarts=-1)


def test_solver_options_change_the_search():
    import numpy as np

    g = np.array([[1.0, 3.0], [1.0, 2.5]])
    args = (g, np.array([0, 0]), np.array([1, 2]), np.array([3.0]))
    assert solve_assignment(*args).tolist() == [1, 0]
    assert solve_assignment(*args, options=SolverOptions(dual_steps=4, pair_rounds=0)
                            ).tolist() == [1, 0]


def test_make_sim_policy_is_a_named_pair():
    sim = make_sim_policy("tiresias")
    assert isinstance(sim, SimPolicy)
    assert sim.policy.name == "tiresias" and sim.model is None
    with pytest.raises(ValueError, match="policy must be one of"):
        make_sim_policy("fifo")
