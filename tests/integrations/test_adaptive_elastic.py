"""Elastic replicas with real processes: 1 -> 2 -> 4 fake CPU devices, a restart between each.

Each run is a fresh Python process (``tests/integrations/adaptive_worker.py``)
with ``XLA_FLAGS=--xla_force_host_platform_device_count=N``: it restores the
previous run's Orbax checkpoint onto its own mesh, trains, and saves.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(devices: int, ckpt: Path, out: Path, steps: int, refit: bool) -> dict:
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-m", "tests.integrations.adaptive_worker", str(ckpt), str(steps),
         str(out), "1" if refit else "0"],
        check=False, cwd=out.parent, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def test_restart_on_1_2_4_devices_keeps_state_model_and_loss_curve(tmp_path):
    ckpt = tmp_path / "ckpt"
    runs = [_run(n, ckpt, tmp_path / f"run{n}.json", 12, refit=(n == 1)) for n in (1, 2, 4)]
    prev = None
    for n, run in zip((1, 2, 4), runs):
        assert run["devices"] == n
        assert f"'data': {n}" in run["param_sharding"]  # restored onto this run's mesh
        # Same total batch on every replica count: (32, 0) -> (16, 0) -> (8, 0).
        assert run["batch_size"] == 32 and run["config"] == [32 // n, 0]
        assert run["traces"] == 1  # one compile per process
        h = run["hints"]
        assert h["numReplicas"] == n and h["atomicBsz"] == 32 // n
        assert h["maxProfiledReplicas"] == n  # the profile grew with each restart
        if prev is not None:
            # The model and optimizer state continue exactly: same eval loss on both sides.
            assert run["start"] == prev["start"] + 12
            assert run["before"] == pytest.approx(prev["after"], rel=1e-6)
            assert run["progress_start"] == pytest.approx(prev["progress_end"], rel=1e-6)
            # The goodput model comes back with the checkpoint (and its old profile).
            assert run["restored_perf"] == pytest.approx(prev["perf"], rel=1e-6)
            assert [1, 1, 32, 0] in run["profile_keys"]
        prev = run
    # The loss curve keeps going down across the restarts (no reset to the initial loss).
    assert runs[2]["after"] < 0.7 * runs[0]["before"]
    assert runs[0]["after"] < 0.8 * runs[0]["before"]
