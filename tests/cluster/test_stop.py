"""goodput_jax.adaptive.stop.StopRequest: the cooperative checkpoint-and-stop request."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from goodput_jax.adaptive import StopRequest


def test_request_is_seen_at_the_next_checked_step_and_cleared(tmp_path):
    stop = StopRequest(tmp_path / "d" / "stop", check_every=3, multiprocess=False)
    assert not stop.requested() and stop.reason() is None
    stop.request("reallocation to 4 devices")
    assert stop.requested()
    assert [stop.should_stop(s) for s in range(1, 7)] == [False, False, True, False, False, True]
    assert stop.reason() == "reallocation to 4 devices"
    stop.clear()
    stop.clear()  # idempotent
    assert not stop.should_stop(3)
    assert not list((tmp_path / "d").iterdir())  # no temp file left behind


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match=r"^check_every \(0\) must be an int >= 1$"):
        StopRequest("x", check_every=0)
    with pytest.raises(TypeError, match=r"^path \(''\)"):
        StopRequest("")
    with pytest.raises(TypeError, match="step"):
        StopRequest("x", multiprocess=False).should_stop(1.5)


def test_signal_becomes_a_request(tmp_path):
    stop = StopRequest(tmp_path / "stop", multiprocess=False)
    stop.install_signal_handler(signal.SIGUSR1)
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        assert stop.should_stop(0) and stop.reason() == "signal SIGUSR1"
    finally:
        stop.restore_signal_handlers()
    stop.clear()
    assert not stop.requested()


def test_a_training_loop_in_another_process_stops_at_a_step_boundary(tmp_path):
    """The scheduler's side writes the file while a real loop polls it."""
    path = tmp_path / "stop"
    script = textwrap.dedent(f"""
        import sys, time
        from goodput_jax.adaptive.stop import StopRequest
        stop = StopRequest({str(path)!r}, multiprocess=False)
        step = 0
        print("ready", flush=True)
        while not stop.should_stop(step):
            time.sleep(0.01)
            step += 1
        print("stopped", step, stop.reason(), flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        StopRequest(path).request("preempted")
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    word, step, reason = out.split()
    assert word == "stopped" and int(step) >= 0 and reason == "preempted"
