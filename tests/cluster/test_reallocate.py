"""Controller.reallocate (no Ray): what a move by hand did depends on where the job stood,
and the caller is told (a round may have asked the job to stop a moment before)."""

import pytest

from goodput_jax.cluster.controller import Controller
from goodput_jax.cluster.plan import NodeRecord
from goodput_jax.cluster.record import JobStatus
from goodput_jax.cluster.spec import JobSpec
from goodput_jax.cluster.state import StateDir


def _controller(root, status):
    sd = StateDir(root)
    spec = JobSpec("j", "m:f", min_replicas=1, max_replicas=4,
                   store="sqlite:///" + str(root / "j.db"))
    job = {"spec": spec.to_json(), "status": status, "allocation": ["n0", "n0"],
           "next_allocation": None, "attempt": 0, "restarts": 0, "failures": 0,
           "submitted": 100.0, "events": [], "launches": [], "error": None, "retry_at": 0.0}
    sd.write_json(sd.controller_path, {"jobs": {"j": job}})
    ctl = Controller(str(root), nodes=lambda: [], clock=lambda: 1000.0)
    # as saved (the constructor rebuilds a running job: it relaunches from its checkpoint)
    rec = ctl.jobs["j"]
    rec.status, rec.events, rec.restarts, rec.allocation = JobStatus(status), [], 0, ["n0", "n0"]
    rec.retry_at = 0.0
    ctl.alive = [NodeRecord("n0", "a", 2), NodeRecord("n1", "a", 2)]
    return ctl, sd


def test_a_running_job_is_asked_to_stop_then_a_second_move_retargets(tmp_path):
    ctl, _ = _controller(tmp_path, "running")
    assert ctl.reallocate("j", ["n1"]) == "stop requested"
    job = ctl.jobs["j"]
    assert job.status == "stopping" and job.next_allocation == ["n1"]
    assert [e["what"] for e in job.events] == ["stop requested"]
    # already stopping (here for the first move; in a cluster, often for a round): the
    # restart goes to the new place, with no second stop request
    assert ctl.reallocate("j", ["n1", "n1"]) == "retargeted"
    assert job.next_allocation == ["n1", "n1"]
    assert [e["what"] for e in job.events] == ["stop requested", "retargeted"]
    assert job.events[-1]["to"] == ["n1", "n1"] and job.restarts == 1
    assert ctl.reallocate("j", ["n1", "n1"]) == "unchanged"  # where it goes already: no event
    assert len(job.events) == 2


def test_a_retrying_job_retries_on_the_new_place(tmp_path):
    ctl, _ = _controller(tmp_path, "retrying")
    assert ctl.reallocate("j", ["n1"]) == "retry moved"
    assert ctl.jobs["j"].allocation == ["n1"] and ctl.jobs["j"].status == "retrying"
    assert ctl.reallocate("j", []) == "retry moved"
    assert ctl.jobs["j"].status == "queued"
    assert ctl.reallocate("j", []) == "unchanged"


@pytest.mark.parametrize("status", ["finished", "failed"])
def test_moves_of_inactive_jobs_and_to_unknown_nodes_are_refused(tmp_path, status):
    ctl, _ = _controller(tmp_path, status)
    with pytest.raises(ValueError, match=rf"job \('j'\) is {status}, not active"):
        ctl.reallocate("j", ["n1"])
    ctl.jobs["j"].status = JobStatus.RUNNING
    with pytest.raises(ValueError, match=r"allocation: unknown node 'n9'"):
        ctl.reallocate("j", ["n1", "n9"])
    with pytest.raises(KeyError):
        ctl.reallocate("nope", ["n1"])
