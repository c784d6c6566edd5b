"""Accelerator init measured: the quickstart snippet, in a fresh process, records the real
start-up of JAX's backend as the run's first events, and the process-index check does not
start the backend before that."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest

from goodput_jax import goodput, runtime
from goodput_jax.measure.calculator import BadputType, GoodputCalculator
from goodput_jax.measure.stores.sqlite import SQLiteStore
from tests.runtime._snippet import prelude, quickstart_snippet

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_quickstart_snippet_in_a_fresh_process_measures_init(tmp_path):
    db = tmp_path / "fresh.db"
    script = tmp_path / "job.py"
    script.write_text(
        "import sys\n"
        + prelude(64, 0.0, 5)
        + "assert 'jax._src.xla_bridge' in sys.modules\n"  # JAX imported, backend not yet used
        + quickstart_snippet()
        + textwrap.dedent("""
            import json
            recorder.close()
            print(json.dumps({"start": init.start_time, "end": init.end_time,
                              "pi": init.process_index, "devices": init.device_count,
                              "platform": init.platform,
                              "imported_before": IMPORTED_BEFORE}))
            """))
    # a guard prepended: importing goodput_jax(.runtime) must not import JAX
    guard = ("import sys, goodput_jax, goodput_jax.runtime\n"
             "IMPORTED_BEFORE = 'jax' in sys.modules\n")
    script.write_text(guard + script.read_text())
    env = dict(os.environ, GOODPUT_JAX_STORE=f"sqlite:///{db}", JAX_PLATFORMS="cpu",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("XLA_FLAGS", None)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=180, env=env, check=False)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["imported_before"] is False
    assert out["pi"] == 0 and out["devices"] >= 1 and out["platform"] == "cpu"
    store = SQLiteStore(str(db), create=False)
    evs, _ = store.read_events("run1")
    kinds = [e.kind.value for e in evs]
    assert kinds[:3] == ["job_start", "accelerator_init_start", "accelerator_init_end"]
    assert evs[1].timestamp == pytest.approx(out["start"]) and evs[2].timestamp == pytest.approx(out["end"])
    measured = out["end"] - out["start"]
    assert measured > 1e-4  # a real start-up (PJRT CPU client), not a cached lookup
    calc = GoodputCalculator("run1", "goodput_run1", store=store)
    bad = calc.get_job_goodput_details()["badput_time"]
    assert bad[BadputType.ACCELERATOR_INITIALIZATION] == pytest.approx(measured, rel=1e-6)
    assert "compilation" in kinds and kinds.count("step_device_end") == 5
    store.close()


def test_start_job_arguments(tmp_path):
    with pytest.raises(TypeError, match=r"recorder \(1\) must be a GoodputRecorder"):
        runtime.start_job(1)
    rec = goodput.GoodputRecorder("x", "x")
    with pytest.raises(TypeError, match=r"init \('soon'\) must be a BackendInit"):
        runtime.start_job(rec, init="soon")
    with pytest.raises(TypeError, match=r"setup \(3\) must be a callable"):
        runtime.init_backend(setup=3)
    with warnings.catch_warnings():  # the backend may be up already in this process
        warnings.simplefilter("ignore", RuntimeWarning)
        init = runtime.init_backend()
    assert runtime.init_backend() is init and runtime.measured_init() is init
    # an explicit measurement is recorded as given, on a second recorder too
    store = SQLiteStore(str(tmp_path / "s.db"))
    rec2 = goodput.GoodputRecorder("y", "y", logging_enabled=True, store=store)
    fake = runtime.BackendInit(100.0, 100.25, 0, 1, 1, 1, "cpu")
    runtime.start_job(rec2, init=fake, compile_times=False)
    assert runtime.attached(rec2) is None
    rec2.close()
    evs, _ = store.read_events("y")
    assert [(e.kind.value, e.timestamp) for e in evs] == [
        ("job_start", 100.0), ("accelerator_init_start", 100.0), ("accelerator_init_end", 100.25)]
    store.close()


def test_init_backend_after_the_backend_started_warns_once_and_records_no_init(tmp_path):
    """Issue 33: ``init_backend()`` after ``jax.devices()`` recorded 0 s with no warning."""
    db = tmp_path / "late.db"
    script = tmp_path / "late.py"
    script.write_text(textwrap.dedent(f"""
        import json, warnings
        import jax
        jax.devices()  # the backend starts here, before init_backend
        from goodput_jax import goodput, runtime
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            init = runtime.init_backend()
            again = runtime.init_backend()
            rec = goodput.GoodputRecorder("late", "l", True, store="sqlite:///{db}")
            runtime.start_job(rec, compile_times=False)
            rec.record_job_end_time()
            rec.close()
        print(json.dumps({{"measured": init.measured, "same": again is init,
                          "warnings": [str(x.message) for x in w
                                       if issubclass(x.category, RuntimeWarning)]}}))
        """))
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("XLA_FLAGS", None)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=180, env=env, check=False)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["measured"] is False and out["same"] is True
    assert len(out["warnings"]) == 1, out  # once
    assert "already started" in out["warnings"][0]
    assert "call runtime.init_backend() first" in out["warnings"][0]  # names the fix
    store = SQLiteStore(str(db), create=False)
    kinds = [e.kind.value for e in store.read_events("late")[0]]
    store.close()
    assert kinds[0] == "job_start" and "accelerator_init_start" not in kinds
