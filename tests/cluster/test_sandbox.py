"""The loopback-only sandbox: nothing started in it outlives the process that started it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from goodput_jax.cluster.local import sandbox_command, sandbox_problem


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"  # a zombie has exited
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_a_sandbox_dies_with_the_caller_killed_by_sigkill(tmp_path):
    problem = sandbox_problem()
    if problem:
        pytest.skip(f"no loopback-only sandbox here: {problem}")
    if "setpriv" not in " ".join(sandbox_command(["x"])):
        pytest.skip("util-linux setpriv is not installed: no parent-death guard")
    marker = tmp_path / "pid"
    # inside the sandbox: a process and a child of its own that would sleep for ten minutes,
    # found from the host by a unique argument (the PID namespace hides their host PIDs
    # from themselves)
    tag = f"gj-sandbox-orphan-{os.getpid()}-{time.monotonic_ns()}"
    script = tmp_path / "sleeper.py"
    script.write_text(textwrap.dedent(f"""
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "{tag}"])
        open({str(marker)!r}, "w").write("up")
        time.sleep(600)
    """))
    caller = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import subprocess, sys
        from goodput_jax.cluster.local import sandbox_command
        subprocess.run(sandbox_command([{str(script)!r}, "{tag}"]))
    """)], env={**os.environ, "PYTHONPATH": os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", "")})
    def tagged() -> list[int]:
        out = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    if tag.encode() in fh.read() and _alive(int(pid)):
                        out.append(int(pid))
            except OSError:
                continue
        return out

    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert time.monotonic() < deadline, "the sandboxed script did not start"
            assert caller.poll() is None, caller.returncode
            time.sleep(0.1)

        deadline = time.monotonic() + 60
        while len(tagged()) < 2:  # the script and its grandchild
            assert time.monotonic() < deadline, tagged()
            time.sleep(0.1)
        caller.send_signal(signal.SIGKILL)
        caller.wait()
        deadline = time.monotonic() + 60
        while tagged():
            assert time.monotonic() < deadline, f"outlived their caller: {tagged()}"
            time.sleep(0.1)
    finally:
        if caller.poll() is None:
            caller.kill()
            caller.wait()
        for pid in tagged():  # what a failure left behind
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
