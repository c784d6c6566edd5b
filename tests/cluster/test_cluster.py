"""The cluster runtime end to end: a real three-node Ray cluster, two accelerator types,
real small JAX jobs under Sia (arrivals, a finish, a two-node job, a crash retried,
a job failed after its retries, a raylet killed mid-run).

Ray runs only inside a loopback-only network + PID namespace
(:func:`goodput_jax.cluster.local.run_sandboxed`): the whole scenario is one
driver process (``tests/cluster/_driver.py``) started once per session; these
tests read what it recorded. Skipped (with the reason) where ``unshare`` is not
permitted.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from goodput_jax.cluster.local import run_sandboxed, sandbox_problem

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def scenario():
    pytest.importorskip("ray")
    problem = sandbox_problem()
    if problem:
        pytest.skip(f"no loopback-only sandbox for Ray here: {problem}")
    # Not under pytest's basetemp: a concurrent pytest session may prune it mid-run. Short,
    # because Unix socket paths under RAY_TMPDIR must stay within 107 bytes.
    base = Path(tempfile.mkdtemp(prefix="gj-cluster-test-"))
    ray_tmp = base / "ray"
    ray_tmp.mkdir()
    out = base / "out.json"
    log = base / "driver.log"
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    try:
        with open(log, "w") as fh:
            proc = run_sandboxed([str(ROOT / "tests" / "cluster" / "_driver.py"),
                                  str(base / "state"), str(out)], ray_tmpdir=str(ray_tmp),
                                 env=env, timeout=420, stdout=fh, stderr=fh, cwd=ROOT)
        # the PID namespace is gone with its first process: nothing of Ray may remain
        leftovers = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    if str(ray_tmp).encode() in fh.read():
                        leftovers.append(pid)
            except OSError:
                continue
        assert proc.returncode == 0, log.read_text()[-4000:]
        data = json.loads(out.read_text())
        keep = os.environ.get("GOODPUT_JAX_CLUSTER_TEST_KEEP")  # a path, to debug a failure
        if keep:
            shutil.copy(out, keep)
        data["leftover_pids"] = leftovers
        data["ip_probes"] = log.read_text().count("Failed to determine local IP")
        data["state_dir"] = str(base / "state")
        yield data
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _launches(data, name):
    return data["jobs"][name]["launches"]


def _steps(progress, attempt):
    return [p["step"] for p in progress if p["event"] == "step" and p["attempt"] == attempt]


def test_every_job_finishes_and_the_doomed_one_fails_with_its_error(scenario):
    assert scenario["timeout"] is None, scenario["timeout"]
    jobs = scenario["jobs"]
    for name in ("span", "flex", "late"):
        assert jobs[name]["status"] == "finished", (name, jobs[name])
    doomed = jobs["doomed"]
    assert doomed["status"] == "failed"
    assert doomed["failures"] == 2  # max_retries=1: the first try and one retry
    assert doomed["error"] == "RuntimeError: injected failure of doomed (attempt 1)"
    assert not scenario["controller"]["errors"]


def test_a_job_spans_two_nodes_as_one_multiprocess_jax_job(scenario):
    first = _launches(scenario, "span")[0]
    assert first["devices"] == 4 and sorted(first["nodes"]) == ["n0", "n1"]
    steps = [p for p in scenario["progress"]["span"] if p["event"] == "step"]
    assert steps and all(p["processes"] == 2 and p["devices"] == 4 for p in steps
                         if p["attempt"] == first["attempt"])


def test_a_crash_is_retried_from_the_checkpoint_with_backoff(scenario):
    late = scenario["jobs"]["late"]
    assert late["failures"] == 1
    crashed = [e for e in late["events"] if e["what"] == "crashed"]
    assert crashed and crashed[0]["error"].startswith("RuntimeError: injected crash at step 5")
    retry = [la for la in late["launches"] if la["reason"] == "retry"]
    assert len(retry) == 1 and retry[0]["t"] >= crashed[0]["t"] + 0.5  # after the backoff


def test_every_restart_resumes_from_its_checkpoint_and_the_loss_continues(scenario):
    restarts = 0
    for name in ("span", "flex", "late"):
        prog = scenario["progress"][name]
        attempts = sorted({p["attempt"] for p in prog})
        initial = next(p["eval"] for p in prog if p["event"] == "launch" and p["step"] == 0)
        for a in attempts:
            launch = next(p for p in prog if p["event"] == "launch" and p["attempt"] == a)
            saved_before = [p for p in prog if p["event"] == "save" and p["attempt"] < a
                            and p["t"] <= launch["t"]]
            restore = [p for p in prog if p["event"] == "restore" and p["attempt"] == a]
            if not saved_before:
                assert launch["step"] == 0 and not restore
                continue
            restarts += 1
            # it restored the newest checkpoint written before it, exactly (a process
            # killed with its node between Orbax's commit and its progress line leaves a
            # newer checkpoint than the log shows: then the steps up to it were trained)
            newest = max(saved_before, key=lambda p: p["step"])
            assert restore and restore[0]["step"] == launch["step"] >= newest["step"], name
            if restore[0]["step"] > newest["step"]:
                trained = {p["step"] for p in prog if p["event"] == "step" and p["attempt"] < a}
                assert set(range(newest["step"], restore[0]["step"])) <= trained, (name, a)
                newest = {"step": restore[0]["step"], "eval": restore[0]["eval"]}
            assert restore[0]["eval"] == pytest.approx(newest["eval"], rel=1e-5, abs=1e-6)
            steps = _steps(prog, a)
            if not steps:
                if a == attempts[-1]:  # it had finished while its controller was down
                    total = int(scenario["jobs"][name]["spec"]["args"][1])
                    assert launch["step"] == total
                else:  # stopped before its first step (its controller was killed): the
                    # next attempt starts from this very checkpoint, nothing lost
                    nxt = next(p for p in prog if p["event"] == "launch" and p["attempt"] > a)
                    assert nxt["step"] == launch["step"], (name, a)
                continue
            assert steps[0] == newest["step"] and steps == list(range(steps[0],
                                                                      steps[0] + len(steps)))
            # the loss goes on from where it was, not from the start
            if newest["step"] >= 10:
                assert restore[0]["eval"] < initial
            prev = [p for p in prog if p["attempt"] == a - 1]
            stopped = [p for p in prev if p["event"] == "stopped"]
            if stopped:  # a cooperative stop: it checkpointed at its last step, nothing lost
                assert stopped[0]["step"] == newest["step"] == max(_steps(prog, a - 1)) + 1
        last_steps = max(p["step"] for p in prog if p["event"] == "step")
        assert last_steps + 1 == next(p["step"] for p in prog if p["event"] == "finished")
    assert restarts >= 1  # at least the dead node's job


def test_the_dead_nodes_jobs_finish_elsewhere(scenario):
    killed = scenario["killed"]
    dead = killed["node"]  # n2 (type b) when a job had checkpointed there, else its node
    assert killed["victim"] in killed["jobs_on_node"]
    for name in killed["jobs_on_node"]:
        job = scenario["jobs"][name]
        lost = [e for e in job["events"] if e["what"] == "node lost"]
        assert lost and lost[0]["nodes"] == [dead]
        after = [la for la in job["launches"] if la["t"] >= lost[0]["t"]]
        assert after and all(dead not in la["nodes"] for la in after)
        assert job["status"] == "finished"
    assert all(n["label"] != dead for n in scenario["controller"]["nodes"])


def test_the_cut_off_launches_fence_themselves_within_the_lease(scenario):
    """Issue 45 item 4: the killed raylet's launch processes end on their own (or died
    with it), and the cut-off launch logs no progress past its lease."""
    cut, lease = scenario["cut_off"], scenario["lease"]
    assert scenario["killed"]["victim"] in cut, cut
    for name, c in cut.items():
        assert c["gone"], (name, c)
        after = [p for p in scenario["progress"][name]
                 if p["attempt"] == c["attempt"] and p["t"] > c["t_kill"]]
        # the lease, a check period and what a loaded machine adds (the new launch's
        # fence usually stops the old one's progress log sooner)
        assert all(p["t"] - c["t_kill"] < 2 * lease + 15.0 for p in after), after[-1:]
        if "lease expired" in c["log_tail"]:  # it outlived its raylet and fenced itself
            assert c["log_tail"].strip().splitlines()[-1].endswith(
                "this launch stops itself (a newer launch may run elsewhere)")


def test_a_reallocation_changes_a_jobs_device_count(scenario):
    counts = {n: {la["devices"] for la in _launches(scenario, n)} for n in ("flex", "late")}
    assert any(len(c) > 1 for c in counts.values()), counts


def test_restarts_show_in_the_goodput_timeline(scenario):
    from goodput_jax.measure.calculator import GoodputCalculator

    for name in ("span", "flex", "late"):
        job = scenario["jobs"][name]
        calc = GoodputCalculator(name, store=job["spec"]["store"])
        goodput, badput, last_step = calc.get_job_goodput(include_badput_breakdown=True)
        assert 0 < goodput < 100
        assert last_step == int(job["spec"]["args"][1]) - 1
        prog = scenario["progress"][name]
        if any(p["event"] == "step" and p["attempt"] > 0 for p in prog):  # restarted, trained
            lost = {str(k): v for k, v in badput.items() if v > 0}
            assert any("DISRUPTION" in k for k in lost), (name, lost)


def test_the_controller_persisted_its_rounds_and_hints_reached_it(scenario):
    state = json.loads((Path(scenario["state_dir"]) / "controller.json").read_text())
    rounds = [r for r in state["rounds"] if r["allocations"]]
    assert rounds and all(r["policy"] == "sia" for r in rounds)
    assert all(set(r["changed"]) <= set(r["allocations"]) for r in rounds)
    assert set(state["jobs"]) == {"span", "flex", "late", "doomed", "addr"}
    # a job that published hints was given more than the unprofiled maximum of 1
    assert any(la["devices"] == 2 for la in _launches(scenario, "flex")), \
        _launches(scenario, "flex")


def test_teardown_leaves_no_ray_process_and_no_listening_socket(scenario):
    assert scenario["listening_after_teardown"] == []
    assert scenario["leftover_pids"] == []


def test_a_killed_controller_is_restarted_by_ray_and_reattaches_relaunching_nothing(scenario):
    """Fails on the controller that owned its launches (they died with it, and nothing
    restarted it)."""
    restart = scenario["controller_restart"]
    st = restart["status"]
    assert st["restored"] is True
    assert restart["running"], "nothing was running when the controller died"
    assert sorted(st["reattached"]) == restart["running"], (st["reattached"], restart)
    assert st["stale_removed"] == []
    for name in restart["running"]:
        job = scenario["jobs"][name]
        attempt, n_launches = restart["before"][name]
        assert not [e for e in job["events"] if e["what"] == "controller restarted"]
        assert [e for e in job["events"] if e["what"] == "re-attached"
                and e["attempt"] == attempt and e["t"] >= restart["t"]]
        # the launch that ran through the kill went on (the old controller's launches died
        # 1.2 s after it, with nothing after their start line): progress of that very
        # attempt after the kill, and the next launch (if any) was not a rebuild
        prog = scenario["progress"][name]
        assert any(p["attempt"] == attempt and p["t"] > restart["t"] + 1.5 for p in prog), name
        later = job["launches"][n_launches:] if len(job["launches"]) > n_launches else []
        assert all(la["reason"] != "rebuilt" for la in later), later
        assert job["status"] == "finished"


def test_a_client_with_only_the_address_submits_lists_moves_reads_logs_and_cancels(scenario):
    """Fails on the client that needed the state directory."""
    out = scenario["address_client"]
    assert out["rc"] == 0, out["stderr"]
    assert out["bad_type"] == 2 and not out["bad_known"]
    assert out["submit"] == 0 and out["running"] == "running" and out["list"] == 0
    assert out["move_same"] == "unchanged"
    assert out["move_bad"] == 2 and out["move_unknown_job"] == 2
    assert "[goodput_jax.cluster] job addr attempt 0" in out["logs"]
    assert out["cancel"] == 0 and out["final"] == "cancelled"
    assert "unknown node 'n9'" in out["stderr"] and "'nope'" in out["stderr"]


def test_no_external_ip_probes(scenario):
    """Fails where Ray probed 8.8.8.8 for the node IP (a warning each time, in the sandbox)."""
    assert scenario["ip_probes"] == 0
    assert "Failed to determine local IP" not in scenario["address_client"]["stderr"]


def test_the_stores_are_checkpointed_after_shutdown(scenario):
    """Fails where events stayed in goodput.db-wal after the cluster went down."""
    assert scenario["wal_bytes"] and all(v == 0 for v in scenario["wal_bytes"].values()), \
        scenario["wal_bytes"]


def test_a_reallocation_by_the_controller_is_a_cooperative_restart(scenario):
    manual, tries = scenario["manual"], scenario["manual_tries"]
    if manual is None:
        # every move found flex already stopping for a round (it is tried 4 times): a fault
        assert "retargeted" not in tries, tries
        pytest.skip(f"flex had finished when the move was due (moves: {tries})")
    assert tries[-1] == "stop requested", tries
    flex = scenario["jobs"]["flex"]
    asked = [e for e in flex["events"] if e["what"] == "stop requested" and e["t"] >= manual["t"]]
    assert asked and asked[0]["to"] == manual["to"]
    stopped = [e for e in flex["events"] if e["what"] == "stopped" and e["t"] >= asked[0]["t"]]
    assert stopped and stopped[0]["forced"] is False
    after = [la for la in flex["launches"] if la["t"] >= stopped[0]["t"]]
    assert after[0]["allocation"] == manual["to"] and after[0]["reason"] == "reallocation"
    prog = scenario["progress"]["flex"]
    stop = [p for p in prog if p["event"] == "stopped" and p["attempt"] == after[0]["attempt"] - 1]
    restore = [p for p in prog if p["event"] == "restore" and p["attempt"] == after[0]["attempt"]]
    assert stop and restore and restore[0]["step"] == stop[0]["step"]  # no step lost
    assert restore[0]["devices"] == len(manual["to"])
