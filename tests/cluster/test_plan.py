"""The cluster runtime without Ray: job specs, submit's refusals, the controller round.

The round (:func:`goodput_jax.cluster.plan.plan_round`) must return exactly what
the policy itself returns for the same JobInfo/NodeInfo: it is the same code.
"""

from __future__ import annotations

import json

import pytest

from goodput_jax.cluster import ClusterClient, JobSpec, StateDir
from goodput_jax.cluster.controller import group_allocation
from goodput_jax.cluster.plan import (
    ACCEL,
    NodeRecord,
    capacity_of,
    job_info,
    node_infos,
    nodes_from_ray,
    plan_round,
)
from goodput_jax.model.hints import Hints
from goodput_jax.model.types import GradParams, PerfParams
from goodput_jax.sched import PolluxPolicy, SiaPolicy

EX = "goodput_jax.cluster.examples:regression"
PERF = PerfParams(0.05, 0.01, 0.02, 0.001, 0.01, 0.001, 1.2)


def _hints(profiled: int) -> Hints:
    return Hints(perf_params=PERF, grad_params=GradParams(0.5, 2.0), init_batch_size=32,
                 max_batch_size=512, local_bsz_bounds=(8, 128), max_profiled_replicas=profiled)


def _state(tmp_path, nodes):
    sd = StateDir(tmp_path / "state")
    cap = capacity_of(nodes)
    sd.write_json(sd.cluster_path, {"capacity": {t: list(v) for t, v in cap.by_type.items()}})
    return ClusterClient(sd.root)


NODES = [NodeRecord("n0", "a", 2), NodeRecord("n1", "a", 2), NodeRecord("n2", "b", 2)]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"accelerator_types": ("tpu",)},
     "accelerator_types: unknown accelerator type 'tpu' (the cluster has: a, b)"),
    ({"min_replicas": 5, "max_replicas": 5, "accelerator_types": ("a",)},
     "min_replicas (5) > the 4 devices of a"),
    ({"entry_point": "no_such_package_xyz:main"},
     "entry_point ('no_such_package_xyz:main'): module 'no_such_package_xyz' not found"),
    ({"entry_point": "missing/train.py"}, "entry_point ('missing/train.py'): no such script"),
])
def test_submit_refuses_a_spec_that_cannot_run_before_writing_anything(tmp_path, kwargs, message):
    client = _state(tmp_path, NODES)
    spec = JobSpec(**{"name": "j", "entry_point": EX, **kwargs})
    with pytest.raises(ValueError) as e:
        client.submit(spec)
    assert str(e.value) == message
    assert "\n" not in str(e.value)
    assert not (tmp_path / "state" / "inbox").exists()


def test_spec_fields_are_validated_by_name():
    with pytest.raises(ValueError, match=r"^max_replicas \(1\) must be >= min_replicas \(2\)$"):
        JobSpec("j", EX, min_replicas=2)
    with pytest.raises(ValueError, match=r"^min_replicas \(0\) must be an int >= 1$"):
        JobSpec("j", EX, min_replicas=0)
    with pytest.raises(ValueError, match=r"^name \('a b'\)"):
        JobSpec("a b", EX)
    with pytest.raises(ValueError, match="unknown job spec key 'gpus'"):
        JobSpec.from_json({"name": "j", "entry_point": EX, "gpus": 1})
    spec = JobSpec("j", EX, args=["--steps", "3"], accelerator_types="a", hooks={"x": 1})
    assert JobSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec


def test_submit_fills_defaults_and_status_cancel_logs(tmp_path):
    client = _state(tmp_path, NODES)
    assert client.submit(JobSpec("j", EX, max_replicas=2)) == "j"
    queued = json.loads((tmp_path / "state" / "inbox" / "j.json").read_text())
    assert queued["store"].startswith("sqlite:///") and queued["store"].endswith("j/goodput.db")
    assert queued["checkpoint_dir"].endswith("jobs/j/ckpt")
    assert client.status("j")["status"] == "submitted"
    with pytest.raises(ValueError, match="already submitted"):
        client.submit(JobSpec("j", EX))
    client.cancel("j")
    assert (tmp_path / "state" / "requests" / "cancel-j").exists()
    assert client.logs("j") == ""
    with pytest.raises(KeyError, match="'nope'"):
        client.status("nope")


def test_nodes_from_ray_reads_the_runtime_resources_by_label_not_ip():
    table = [
        {"Alive": True, "NodeID": "h", "NodeManagerAddress": "127.0.0.1",
         "Resources": {"CPU": 1.0, "gj_head": 1.0}},
        {"Alive": True, "NodeID": "x1", "NodeManagerAddress": "127.0.0.1",
         "Resources": {ACCEL: 2.0, "gj_type_b": 2.0, "gj_node_n1": 1.0}},
        {"Alive": False, "NodeID": "x2", "NodeManagerAddress": "127.0.0.1",
         "Resources": {ACCEL: 2.0, "gj_type_a": 2.0, "gj_node_n2": 1.0}},
        {"Alive": True, "NodeID": "x0", "NodeManagerAddress": "127.0.0.1",
         "Resources": {ACCEL: 4.0, "gj_type_a": 4.0, "gj_node_n0": 1.0}},
    ]
    recs = nodes_from_ray(table)
    assert [(r.label, r.accelerator_type, r.devices, r.node_id) for r in recs] == [
        ("n0", "a", 4, "x0"), ("n1", "b", 2, "x1")]
    assert capacity_of(recs).by_type == {"a": (1, 4), "b": (1, 2)}


def test_nodes_need_no_resource_unique_to_them():
    """Every node of an autoscaler's node type carries the same resources: each is
    named by Ray's node label when given, else by its node id, and two that share
    the short name get their whole ids."""
    same = {"CPU": 1.0, ACCEL: 2.0, "gj_type_a": 2.0}
    table = [
        {"Alive": True, "NodeID": "ffff00001", "Resources": same},
        {"Alive": True, "NodeID": "ffff00002", "Resources": same},
        {"Alive": True, "NodeID": "aa0000000003", "Resources": same},
        {"Alive": True, "NodeID": "bb0000000003", "Resources": same},
        {"Alive": True, "NodeID": "cc", "Resources": same,
         "Labels": {"ray.io/node-id": "cc", "goodput-jax/node": "n7"}},
    ]
    recs = nodes_from_ray(table)
    assert [(r.label, r.node_id) for r in recs] == [
        ("a-aa0000000003", "aa0000000003"), ("a-bb0000000003", "bb0000000003"),
        ("a-fff00001", "ffff00001"), ("a-fff00002", "ffff00002"), ("n7", "cc")]
    with pytest.raises(ValueError, match="exactly one gj_type_"):
        nodes_from_ray([{"Alive": True, "NodeID": "x", "Resources": {ACCEL: 1.0}}])


def test_job_info_follows_adaptdl_rules_and_types():
    spec = JobSpec("j", EX, min_replicas=1, max_replicas=8, accelerator_types=("a",))
    fresh = job_info(spec, None, 0.0, types=("a", "b"))
    assert (fresh.min_replicas, fresh.max_replicas) == (1, 1)  # nothing profiled yet
    assert fresh.speedup_fn(1, 3) == 3  # linear without a model
    assert float(fresh.goodput_fns["b"](1, 2)) == 0.0  # a type it may not use
    grown = job_info(spec, _hints(2), 0.0, types=("a", "b"))
    assert grown.max_replicas == 4  # 2 x profiled, capped by the spec (8)
    assert grown.goodput_fns["a"] is grown.speedup_fn


def _jobs(types):
    spec = {"j0": JobSpec("j0", EX, min_replicas=1, max_replicas=4),
            "j1": JobSpec("j1", EX, min_replicas=2, max_replicas=4, accelerator_types=("a",)),
            "j2": JobSpec("j2", EX, min_replicas=1, max_replicas=2)}
    hints = {"j0": _hints(2), "j1": None, "j2": _hints(1)}
    return {k: job_info(s, hints[k], 100.0 * i, types=types, age=50.0)
            for i, (k, s) in enumerate(spec.items())}


def test_round_under_sia_equals_the_policys_own_output():
    nodes = node_infos(NODES)
    current = {"j0": ["n2"], "j1": [], "j2": []}
    plan = plan_round(SiaPolicy(resource=ACCEL), _jobs(("a", "b")), nodes, current)
    direct = SiaPolicy(resource=ACCEL).optimize(_jobs(("a", "b")), nodes, current)
    assert plan.policy == "sia"
    assert plan.allocations == {k: tuple(sorted(v)) for k, v in direct.items()}
    assert plan.changed == tuple(sorted(k for k in direct
                                        if sorted(direct[k]) != sorted(current[k])))
    assert set(plan.allocations["j1"]) <= {"n0", "n1"}  # its allowed type only


def test_round_under_pollux_equals_the_policys_own_output():
    recs = [NodeRecord(f"n{i}", "a", 2) for i in range(3)]
    nodes = node_infos(recs)
    current = {"j0": ["n0"], "j1": [], "j2": ["n2"]}
    plan = plan_round(PolluxPolicy(seed=3, autoscale=False), _jobs(("a",)), nodes, current)
    from goodput_jax.sched import NodeInfo

    direct, _ = PolluxPolicy(seed=3, autoscale=False).optimize(
        _jobs(("a",)), nodes, current, NodeInfo({ACCEL: 2}, False, "a"))
    assert plan.policy == "pollux"
    assert plan.allocations == {k: tuple(sorted(v)) for k, v in direct.items()}
    with pytest.raises(ValueError, match="PolluxPolicy schedules one accelerator type"):
        plan_round(PolluxPolicy(), _jobs(("a", "b")), node_infos(NODES), {})


def test_allocation_groups_put_the_first_replicas_node_first():
    assert group_allocation(["n1", "n0", "n0", "n1", "n0"]) == [("n1", 2), ("n0", 3)]
    assert group_allocation([]) == []


def test_a_superseded_launch_neither_logs_nor_counts_as_current(tmp_path):
    from goodput_jax.cluster import JobContext

    ctx = JobContext(job="j", attempt=1, rank=0, num_processes=1, coordinator=None,
                     local_devices=1, accelerator_type="a", nodes=("n0",),
                     checkpoint_dir=str(tmp_path / "ckpt"), store="sqlite:///x.db",
                     stop_path=str(tmp_path / "stop"), progress_path=str(tmp_path / "p.jsonl"))
    assert ctx.is_current()  # no fence: not started by the runtime
    (tmp_path / "attempt").write_text("1")
    ctx.log_progress(event="step", step=0)
    (tmp_path / "attempt").write_text("2")  # the runtime launched attempt 2
    assert not ctx.is_current()
    ctx.log_progress(event="step", step=1)
    lines = [json.loads(x) for x in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert [(x["attempt"], x["step"]) for x in lines] == [(1, 0)]
