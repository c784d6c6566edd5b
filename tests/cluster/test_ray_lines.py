"""Ray's own lines stay out of the user's output (issue 45, item 6).

* ``goodput-jax cluster up``: when the controller's process is killed, the raylet's
  "A worker died ..." message (which Ray's driver prints to its stdout) goes to
  ``STATE_DIR/ray.log``, as ``docs/cluster.md`` says, not to ``up``'s output.
* A client by address (``goodput-jax cluster status --address ...`` or
  ``ClusterClient(address=...)``) in a network namespace without a route (loopback
  only) prints no "Failed to determine local IP" line; a bad address is still one line.

One sandboxed driver (this file, run as a script inside
:func:`goodput_jax.cluster.local.run_sandboxed`) starts ``up`` as the sandbox does
(``--in-sandbox``), calls the clients with a user's environment (no ``RAY_*``
variable but ``RAY_TMPDIR``), kills the controller's process, waits for Ray to
restart it and stops the cluster; the tests read what each command printed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
IP_LINE = "Failed to determine local IP"
DIED_LINE = "A worker died"
PY_CLIENT = """
import sys
from goodput_jax.cluster import ClusterClient
print(sorted(ClusterClient(address=sys.argv[1]).status()))
"""


def _user_env() -> dict[str, str]:
    """A user's environment: none of the sandbox's Ray settings, but its RAY_TMPDIR."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["RAY_TMPDIR"] = os.environ["RAY_TMPDIR"]
    return env


def _run(argv: list[str]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True,
                          env=_user_env(), timeout=180, check=False)
    return {"rc": proc.returncode, "out": proc.stdout, "err": proc.stderr}


def _controller_pids() -> list[int]:
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if b"ray::ControllerActor" in fh.read():
                    out.append(int(pid))
        except OSError:
            continue
    return out


def _wait(what: str, ok: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := ok()):
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.25)
    return value


def _drive(base: Path) -> None:
    """Inside the sandbox: up, clients, a controller kill, down; writes base/out.json."""
    state = base / "state"
    up_out, up_err = base / "up.out", base / "up.err"
    with open(up_out, "w") as o, open(up_err, "w") as e:
        up = subprocess.Popen([sys.executable, "-m", "goodput_jax.cli", "cluster", "up",
                               "--state-dir", str(state), "--nodes", "a:1", "--interval", "2",
                               "--in-sandbox"], stdout=o, stderr=e)
    info: dict[str, Any] = {}
    try:
        _wait("up's line", lambda: up.poll() is not None or "cluster up at" in
              up_out.read_text(), 180)
        assert up.poll() is None, up_err.read_text()
        address = up_out.read_text().split("cluster up at ")[1].split(":", 2)
        address = f"{address[0]}:{address[1]}"
        cli = ["-m", "goodput_jax.cli", "cluster"]
        info["status"] = _run([*cli, "status", "--address", address])
        info["python"] = _run(["-c", PY_CLIENT, address])
        info["bad"] = _run([*cli, "status", "--address", "127.0.0.1:1"])
        old = _wait("the controller's process", _controller_pids, 60)
        os.kill(old[0], signal.SIGKILL)
        _wait("the controller restarted", lambda: [p for p in _controller_pids()
                                                   if p not in old], 120)
        log = state / "ray.log"
        info["died_seen"] = True
        try:
            _wait("Ray's message about the dead worker", lambda: any(
                DIED_LINE in p.read_text() for p in (up_out, up_err, log) if p.exists()), 60)
        except TimeoutError:
            info["died_seen"] = False
        info["down"] = _run([*cli, "down", "--state-dir", str(state)])
        up.wait(timeout=120)
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
    info["up"] = {"rc": up.returncode, "out": up_out.read_text(), "err": up_err.read_text()}
    info["ray_log"] = (state / "ray.log").read_text() if (state / "ray.log").exists() else ""
    (base / "out.json").write_text(json.dumps(info))


def _scenario() -> dict[str, Any]:
    pytest.importorskip("ray")
    from goodput_jax.cluster.local import run_sandboxed, sandbox_problem

    problem = sandbox_problem()
    if problem:
        pytest.skip(f"no loopback-only sandbox for Ray here: {problem}")
    base = Path(tempfile.mkdtemp(prefix="gj-raylines-"))  # short: Unix socket paths
    try:
        (base / "ray").mkdir()
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        proc = run_sandboxed([__file__, str(base)], ray_tmpdir=str(base / "ray"), env=env,
                             timeout=480, capture_output=True, text=True, cwd=ROOT)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
        return json.loads((base / "out.json").read_text())
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def data() -> dict[str, Any]:
    return _scenario()


def test_up_keeps_rays_worker_died_line_in_the_ray_log(data: dict[str, Any]) -> None:
    """Fails where the raylet's "A worker died" reached ``up``'s stdout."""
    up = data["up"]
    assert up["rc"] == 0, up
    assert data["died_seen"], "Ray never reported the killed controller"
    assert DIED_LINE not in up["out"] and DIED_LINE not in up["err"], up
    assert DIED_LINE in data["ray_log"]
    lines = up["out"].splitlines()
    assert len(lines) == 2 and lines[0].startswith("cluster up at ") \
        and lines[1] == "cluster down", up["out"]
    assert up["err"] == "", up["err"]


def test_a_client_by_address_without_a_route_prints_no_ray_line(data: dict[str, Any]) -> None:
    """Fails where Ray's node-IP probe printed "Failed to determine local IP"."""
    status, py = data["status"], data["python"]
    assert status["rc"] == 0 and status["out"].startswith("job "), status
    assert status["err"] == "", status["err"]
    assert py["rc"] == 0 and py["out"].strip() == "[]", py
    assert py["err"] == "", py["err"]
    for what in ("status", "python", "bad", "down", "up"):
        assert IP_LINE not in json.dumps(data[what]), (what, data[what])


def test_a_bad_address_is_still_one_line(data: dict[str, Any]) -> None:
    bad = data["bad"]
    assert bad["rc"] == 2 and bad["out"] == "", bad
    assert bad["err"].count("\n") == 1 and "'127.0.0.1:1'" in bad["err"], bad["err"]


if __name__ == "__main__":  # inside the sandbox (run_sandboxed)
    _drive(Path(sys.argv[1]))
