"""`goodput-jax demo --quick` end to end: real training, restart, checkpoint, report."""

from __future__ import annotations

import os
import re
import subprocess
import sys


def test_demo_quick(tmp_path):
    out = tmp_path / "demo-out"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    before = set(os.listdir(cwd))
    r = subprocess.run(
        [sys.executable, "-m", "goodput_jax.cli", "demo", "--dir", str(out), "--quick",
         "--no-progress", "--devices", "2"],
        cwd=cwd, capture_output=True, text=True, timeout=120, check=False,
    )
    assert r.returncode == 0, r.stderr
    text = r.stdout
    assert "Goodput report for job 'demo'" in text
    assert "runs: 2  disruptions: 1" in text
    assert "run 2 resumed at step 20" in text and "on 2 devices" in text

    def pct(label):
        m = re.search(rf"{re.escape(label)}\s+([\d.]+)\s+([\d.]+)", text)
        assert m, label
        return float(m.group(2))

    rows = ["GOODPUT (productive step time)", "accelerator initialization",
            "training preparation", "program startup (compile)", "data loading (sync)",
            "checkpoint save", "checkpoint restore", "wasted progress (disruption)",
            "infrastructure recovery", "custom badput events", "other (unaccounted, hangs)"]
    values = {r_: pct(r_) for r_ in rows}
    assert abs(sum(values.values()) - 100.0) < 0.1
    for must in ("GOODPUT (productive step time)", "data loading (sync)", "checkpoint restore",
                 "wasted progress (disruption)", "infrastructure recovery", "program startup (compile)"):
        assert values[must] > 0, must
    # writes only inside --dir
    assert set(os.listdir(cwd)) == before
    assert sorted(os.listdir(out)) >= ["checkpoints", "goodput.db"]
    assert any(f.endswith(".npz") for f in os.listdir(out / "checkpoints"))
    # the report command reproduces the table from the stored events
    r2 = subprocess.run(
        [sys.executable, "-m", "goodput_jax.cli", "report", "--store",
         "sqlite:///" + str(out / "goodput.db")],
        cwd=cwd, capture_output=True, text=True, timeout=60, check=False,
    )
    assert r2.returncode == 0, r2.stderr
    assert "Goodput report for job 'demo'" in r2.stdout
