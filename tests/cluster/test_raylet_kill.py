"""A raylet killed under a running launch (issue 45 item 4): the cut-off launch stops
within its lease, its processes end, the job trains on elsewhere, and no two launches
of it train at once for longer than the lease; a controller restart stops nothing.

One real Ray cluster (three one-device nodes) in a loopback-only network + PID
namespace, one job, a 3 s lease (``tests/cluster/_raylet_kill_driver.py`` runs it
and records what it saw). Its raylet is SIGKILLed twice, that process only: first left
unreaped (a zombie, which Ray's worker-side check takes for a live raylet: the launch
outlives its raylet as one cut off by a partition does, and only the lease stops it),
then reaped at once (Ray ends the launch itself). Times come from the records' own
stamps and the kill's; every bound is the lease, one check period and :data:`MARGIN`
(what a loaded machine adds). Skipped (with the reason) where ``unshare`` is not
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
#: seconds a loaded machine (2 cores, a CPU burner beside) may add to any bound here
MARGIN = 10.0
STOPS = "this launch stops itself (a newer launch may run elsewhere)"


@pytest.fixture(scope="module")
def run():
    pytest.importorskip("ray")
    problem = sandbox_problem()
    if problem:
        pytest.skip(f"no loopback-only sandbox for Ray here: {problem}")
    # short: Unix socket paths under RAY_TMPDIR must stay within 107 bytes
    base = Path(tempfile.mkdtemp(prefix="gj-rk-"))
    (base / "ray").mkdir()
    out, log = base / "out.json", base / "driver.log"
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    try:
        with open(log, "w") as fh:
            proc = run_sandboxed([str(ROOT / "tests" / "cluster" / "_raylet_kill_driver.py"),
                                  str(base / "state"), str(out)], ray_tmpdir=str(base / "ray"),
                                 env=env, timeout=400, stdout=fh, stderr=fh, cwd=ROOT)
        assert proc.returncode == 0, log.read_text()[-4000:]
        data = json.loads(out.read_text())
        keep = os.environ.get("GOODPUT_JAX_RAYLET_TEST_KEEP")  # a path, to debug a failure
        if keep:
            shutil.copy(out, keep)
        yield data
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _period(lease: float) -> float:
    return min(1.0, lease / 4)  # goodput_jax.cluster.lease.Lease.period


def _after(records: list[dict], attempt: int, t: float) -> list[dict]:
    return [r for r in records if r.get("attempt") == attempt and r["t"] > t]


def _last_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _check_stopped(run, cut) -> list[dict]:
    """The cut-off launch ended within the lease: its processes gone, no heartbeat past
    the lease (its own stamps against the kill's). Returns its heartbeats after the kill."""
    lease = run["lease"]
    assert all(s in ("gone", "Z") for s in cut["states"].values()), cut
    assert cut["child"] in cut["pids"] and len(cut["pids"]) >= 2
    beats = _after(run["beats"], cut["attempt"], cut["t_kill"])
    assert all(b["t"] - cut["t_kill"] < lease + _period(lease) + MARGIN for b in beats), \
        (beats[-1]["t"] - cut["t_kill"], cut)
    # the progress log (fenced once the new launch starts) has no more than what the
    # process really did
    progress = _after(run["progress"], cut["attempt"], cut["t_kill"])
    assert len(progress) <= len(beats)
    assert all(p["t"] - cut["t_kill"] < lease + _period(lease) + MARGIN for p in progress)
    return beats


def test_a_launch_that_outlives_its_raylet_fences_itself_within_the_lease(run):
    """Fails where nothing fences a launch whose raylet is gone (it trained on for 45 s,
    its processes alive at the end), or where the lease ends only the launch's own
    process (its child lived on: seen here before the fix)."""
    cut = run["cuts"][0]
    assert not cut["reap"]
    beats = _check_stopped(run, cut)
    assert beats, "it stopped at the kill: Ray ended it, the lease was not tried"
    last = _last_line(cut["log_tail"])
    assert "lease expired" in last and last.endswith(STOPS), cut["log_tail"][-600:]
    assert f"rank 0: lease expired: {cut['raylet']} unreachable for " in last


def test_a_launch_whose_raylet_is_reaped_is_ended_by_ray_or_its_lease(run):
    """Ray's worker sees its raylet gone and ends the launch's processes (child included);
    where its lease came first, the lease says so in the launch's last line."""
    cut = run["cuts"][1]
    assert cut["reap"]
    _check_stopped(run, cut)
    if "lease expired" in cut["log_tail"]:
        assert _last_line(cut["log_tail"]).endswith(STOPS)


def test_the_job_trains_on_elsewhere_after_each_kill(run):
    job = run["job"]
    assert job["status"] == "finished" and not run["controller_errors"], job
    for cut in run["cuts"]:
        new = cut["new"]
        assert new["attempt"] > cut["attempt"] and cut["node"] not in new["allocation"]
        assert new["pid"] != cut["pid"]
        assert _after(run["beats"], new["attempt"], cut["t_kill"])
        lost = [e for e in job["events"] if e["what"] == "node lost" and
                e["nodes"] == [cut["node"]]]
        assert lost, job["events"]


def test_no_two_launches_trained_at_once_for_longer_than_the_lease(run):
    lease = run["lease"]
    attempts = sorted({b["attempt"] for b in run["beats"]})
    assert len(attempts) >= 3
    for old, new in zip(attempts, attempts[1:]):
        last_old = max(b["t"] for b in run["beats"] if b["attempt"] == old)
        first_new = min(b["t"] for b in run["beats"] if b["attempt"] == new)
        assert last_old - first_new < lease + _period(lease) + MARGIN, (old, new)


def test_a_controller_restart_stops_nothing(run):
    """A controller restart, even one longer than the lease, changes neither the raylets
    nor the head: the launch trains on and is re-attached, nothing is relaunched."""
    r = run["restart"]
    assert r["state"] not in ("gone", "Z") and r["attempt_after"] == r["attempt"], r
    assert "rk" in r["reattached"]
    assert _after(run["beats"], r["attempt"], r["t_kill"] + run["lease"] + 1.0)
    # the launch that ran through the restart is the one the first raylet kill cut off
    assert run["cuts"][0]["attempt"] == r["attempt"]
