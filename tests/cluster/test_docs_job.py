"""docs/cluster.md's "Writing a job" example, run as it stands (no Ray): one launch that
finishes, then one that restores that checkpoint, is asked to stop and says so.

Fails on the old snippet (it threw the restored state away, needed ``init_batch_size``
in ``hooks``, and could not tell the runtime it stopped)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

RUN = ("import json, sys; from goodput_jax.cluster.runner import run_replica; "
       "out = run_replica(json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]); "
       "open(sys.argv[4], 'w').write(json.dumps(out))")


def _example() -> str:
    text = (ROOT / "docs" / "cluster.md").read_text()
    section = text[text.index("## Writing a job"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_writing_a_job_example_runs_restores_and_stops(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(_example())

    def launch(attempt: int, steps: int, stop: bool) -> tuple[dict, str]:
        ctx = {"job": "doc", "attempt": attempt, "rank": 0, "num_processes": 1,
               "coordinator": None, "local_devices": 1, "accelerator_type": "a",
               "nodes": ["n0"], "args": [str(steps)], "checkpoint_dir": str(tmp_path / "ck"),
               "store": f"sqlite:///{tmp_path / 'goodput.db'}", "stop_path": str(tmp_path / "stop"),
               "progress_path": str(tmp_path / "progress.jsonl")}
        if stop:
            (tmp_path / "stop").write_text("reallocation")
        log, out = tmp_path / f"log-{attempt}.txt", tmp_path / f"out-{attempt}.json"
        proc = subprocess.run([sys.executable, "-c", RUN, json.dumps(ctx), str(script), str(log),
                               str(out)], capture_output=True, text=True, timeout=300,
                              env={**os.environ, "JAX_PLATFORMS": "cpu"}, cwd=tmp_path)
        assert proc.returncode == 0, log.read_text()[-3000:] + proc.stderr[-2000:]
        return json.loads(out.read_text()), log.read_text()

    first, log = launch(0, 20, stop=False)
    assert first["status"] == "finished" and "launch 0: from step 0" in log
    second, log = launch(1, 40, stop=True)
    assert second["status"] == "stopped", log
    assert "launch 1: from step 20" in log  # it kept the restored checkpoint

    from goodput_jax.measure.calculator import GoodputCalculator

    calc = GoodputCalculator("doc", store=f"sqlite:///{tmp_path / 'goodput.db'}")
    assert calc.get_latest_hints() is not None  # published for the scheduler
