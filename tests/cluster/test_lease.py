"""Launches that fence themselves (issue 45 item 4): a process that cannot reach its
raylet (or the head) for longer than its lease logs why and ends; one that can goes on.

The raylet here is a real listening socket on 127.0.0.1 that the test closes (as a
killed raylet's port refuses connections); the job is a real process run by the
runtime's own :func:`~goodput_jax.cluster.runner.run_replica`.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from goodput_jax.cluster.context import JobContext
from goodput_jax.cluster.lease import EXIT_CODE, Lease, reachable

JOB = """
import subprocess, sys, time
from goodput_jax.cluster import job_context
ctx = job_context()
# a child, as a data loader's worker: it idles until killed
child = subprocess.Popen([sys.executable, "-c", "import time\\nwhile True: time.sleep(0.5)"])
with open(sys.argv[1], "w") as fh:
    fh.write(str(child.pid))
step = 0
deadline = time.time() + 60
while time.time() < deadline:
    step += 1
    ctx.log_progress(event="step", step=step)
    time.sleep(0.05)
"""

RUN = """
import json, sys
from goodput_jax.cluster.runner import run_replica
print(json.dumps(run_replica(json.loads(sys.argv[1]), sys.argv[2], sys.argv[3])))
"""


def _context(tmp_path, lease: float, raylet: str, args: tuple = ()) -> dict:
    return JobContext(job="j", attempt=0, rank=0, num_processes=1, coordinator=None,
                      local_devices=1, accelerator_type="a", nodes=("n0",),
                      checkpoint_dir=str(tmp_path / "ckpt"), store="",
                      stop_path=str(tmp_path / "stop"),
                      progress_path=str(tmp_path / "progress.jsonl"), lease=lease,
                      raylet=raylet, args=args).to_json()


def _ended(pid: int) -> bool:
    """Gone, or a zombie (nobody reaped it yet)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _records(tmp_path) -> list[dict]:
    path = tmp_path / "progress.jsonl"
    return [json.loads(ln) for ln in path.read_text().splitlines()] if path.exists() else []


def test_a_process_that_loses_its_raylet_stops_itself_within_the_lease(tmp_path):
    raylet = socket.socket()
    raylet.bind(("127.0.0.1", 0))
    raylet.listen(16)
    address = f"127.0.0.1:{raylet.getsockname()[1]}"
    script = tmp_path / "job.py"
    script.write_text(JOB)
    log = tmp_path / "job.log"
    lease = 1.0
    child_pid = tmp_path / "child.pid"
    proc = subprocess.Popen([sys.executable, "-c", RUN,
                             json.dumps(_context(tmp_path, lease, address, (str(child_pid),))), str(script),
                             str(log)])
    try:
        deadline = time.monotonic() + 60
        while len(_records(tmp_path)) < 5:  # training, its lease held
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        assert proc.poll() is None
        raylet.close()  # the raylet is gone: its port refuses connections
        t_kill = time.time()
        rc = proc.wait(timeout=60)
        t_gone = time.time()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == EXIT_CODE
    # its processes with it: the child it started is gone too
    child = int(child_pid.read_text())
    deadline = time.monotonic() + 10
    while not _ended(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _ended(child), f"the launch's child {child} outlived its lease"
    lines = [ln for ln in log.read_text().splitlines() if ln.strip()]
    assert "lease expired" in lines[-1] and address in lines[-1], lines[-3:]
    after = [r for r in _records(tmp_path) if r["t"] > t_kill]
    # it trained on for at most the lease and one check period (a quarter of it), plus
    # what a loaded machine adds; nothing after it was gone
    assert all(r["t"] <= t_gone for r in after)
    assert after and after[-1]["t"] - t_kill < lease * 1.25 + 10.0, after[-1]["t"] - t_kill


def test_a_reachable_raylet_keeps_the_lease():
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(16)
        address = f"127.0.0.1:{srv.getsockname()[1]}"
        assert reachable(address)
        t = [0.0]
        lease = Lease([address], 2.0, clock=lambda: t[0])
        for t[0] in (1.0, 3.0, 5.0, 7.0):  # reached at every check: never expires
            assert lease.check() is None
    assert not reachable(address, timeout=0.5)
    t[0] = 9.5  # 2.5 s after the last contact
    assert lease.check() == f"{address} unreachable for 2.5 s (lease 2 s)"


def test_no_lease_without_targets_or_with_lease_zero():
    with pytest.raises(ValueError, match=r"^lease \(0\) must be > 0 seconds$"):
        Lease(["127.0.0.1:1"], 0)
    from goodput_jax.cluster.runner import _hold_lease

    ctx = JobContext.from_json({**_context_dummy(), "lease": 0.0})
    assert _hold_lease(ctx) is None


def _context_dummy() -> dict:
    return JobContext(job="j", attempt=0, rank=0, num_processes=1, coordinator=None,
                      local_devices=1, accelerator_type="a", nodes=("n0",), checkpoint_dir="",
                      store="", stop_path="/nonexistent/stop",
                      progress_path="/nonexistent/p.jsonl", raylet="127.0.0.1:1").to_json()


def test_a_probe_that_times_out_counts_against_the_lease():
    """A partition that drops packets (no refusal) makes each probe wait for its timeout:
    that wait counts, so the lease expires at the first probe that ends past it (it
    expired one probe later, a timeout past that, when the time was read before it)."""
    t = [0.0]

    def slow_refusal(address: str) -> bool:
        t[0] += 1.0  # the probe's 1 s timeout
        return False

    lease = Lease(["10.0.0.1:1"], 2.0, reach=slow_refusal, clock=lambda: t[0])
    results = [lease.check() for _ in range(3)]
    assert results == [None, None, "10.0.0.1:1 unreachable for 3.0 s (lease 2 s)"]
