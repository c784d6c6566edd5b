"""Controller.precompile (no Ray): the first round after it compiles nothing, and
``tick(rounds=False)`` holds rounds back until allowed."""

import pytest

from goodput_jax.cluster.controller import Controller
from goodput_jax.cluster.plan import NodeRecord
from goodput_jax.cluster.spec import JobSpec
from goodput_jax.cluster.state import StateDir
from goodput_jax.sched.warmup import CompileCounter


def _state(root, n_jobs):
    sd = StateDir(root)
    jobs = {}
    for i in range(n_jobs):
        spec = JobSpec(f"j{i}", "m:f", min_replicas=1, max_replicas=4,
                       store="sqlite:///" + str(root / f"none-{i}.db"))
        jobs[spec.name] = {"spec": spec.to_json(), "status": "queued", "allocation": [],
                           "next_allocation": None, "attempt": -1, "restarts": 0, "failures": 0,
                           "submitted": 100.0 + i, "events": [], "launches": [], "error": None}
    sd.write_json(sd.controller_path, {"jobs": jobs})
    return sd


@pytest.mark.parametrize("types", [("a",), ("a", "b")])
def test_first_round_after_precompile_compiles_nothing(tmp_path, types):
    records = [NodeRecord(f"n{i}", types[i % len(types)], 4) for i in range(6)]
    _state(tmp_path, 11)
    ctl = Controller(str(tmp_path), nodes=lambda: records, clock=lambda: 1000.0)
    info = ctl.precompile()
    assert info["jobs"] == 11 and info["job_counts"] == [11]
    ctl.alive = records
    with CompileCounter() as counter:
        plan, _ = ctl.plan()
    assert counter.compiles == 0
    assert plan.policy == ("pollux" if len(types) == 1 else "sia")
    assert sum(map(len, plan.allocations.values())) > 0


def test_precompile_without_jobs_uses_a_default_job_and_rounds_wait(tmp_path):
    records = [NodeRecord("n0", "a", 2)]
    ctl = Controller(str(tmp_path), nodes=lambda: records, clock=lambda: 1000.0,
                     launcher=None)
    info = ctl.precompile(job_counts=[1, 3])
    assert info["jobs"] == 0 and info["job_counts"] == [1, 3]
    ctl.tick(rounds=False)
    assert ctl.rounds == [] and ctl.trigger
    ctl.tick()
    assert len(ctl.rounds) == 1
    no_nodes = Controller(str(tmp_path / "x"), nodes=lambda: [], clock=lambda: 0.0)
    assert no_nodes.precompile()["skipped"] == "no nodes"
