"""The quickstart's complete loop (section 4: runtime capture + GoodputHooks on one recorder),
copied from docs/quickstart.md as it stands and run in a fresh process; and the composition
rules it rests on (``hooks.job()`` joins a started job, ``steps=`` shares the recorder).

The loop's goodput and data-loading badput are checked against independent timers of the
same run: the prelude's loader times itself with ``time.time()`` and, before loading, waits
for the step in flight (``jax.block_until_ready`` on the loop's ``loss``), so each step's
device interval is ``[end of the previous load, the next load's wait returned]`` and the
device idles for the rest of each load. Issue 33: with ``with hooks.job()`` around the
runtime snippet the report showed 2 runs, a disruption and 0.002 s of data loading against
1.73 s timed.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import statistics
import subprocess
import sys

import pytest

from goodput_jax import goodput, runtime
from goodput_jax.integrations.hooks import GoodputHooks
from goodput_jax.measure.calculator import BadputType, GoodputCalculator
from goodput_jax.measure.events import EventKind
from goodput_jax.measure.stores.sqlite import SQLiteStore

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "quickstart.md"


def complete_loop() -> str:
    """The python block right after ``<!-- complete-loop -->`` in the quickstart."""
    m = re.search(r"<!-- complete-loop -->\s*```python\n(.*?)```", DOC.read_text(), re.DOTALL)
    assert m, "docs/quickstart.md lost its complete loop (<!-- complete-loop -->)"
    return m.group(1)


#: What the loop leaves to the user (``init_params``, ``loss_fn``, ``data``, ``num_steps``),
#: with the independent timers. The only JAX work here is the device's peak probe (run once
#: per process at the first step's program-cost read on a CPU, 0.3-2 s on its own thread,
#: which the timers below would count as step 0): probed here, before the job.
PRELUDE = '''
import json, time
import numpy as np
import jax
import jax.numpy as jnp
import optax
import goodput_jax.integrations.hooks, goodput_jax.model.gradstats  # imports: not job time

NUM_STEPS, LOAD_S, WIDTH = {num_steps}, {load_s}, {width}
num_steps = NUM_STEPS

def init_params():
    k = np.random.default_rng(1)
    return {{"w1": jnp.asarray(k.normal(size=(32, WIDTH)) / 6, jnp.float32),
            "w2": jnp.asarray(k.normal(size=(WIDTH, WIDTH)) / WIDTH ** 0.5, jnp.float32),
            "w3": jnp.asarray(k.normal(size=(WIDTH, 1)) / WIDTH ** 0.5, jnp.float32)}}

def loss_fn(p, batch):
    h = jnp.tanh(batch["x"] @ p["w1"])
    h = jnp.tanh(h @ p["w2"])
    return jnp.mean(((h @ p["w3"])[:, 0] - batch["y"]) ** 2)

_rng = np.random.default_rng(0)
_w = _rng.normal(size=32).astype(np.float32)
_pool = []
for _ in range(4):
    _x = _rng.normal(size=(256, 32)).astype(np.float32)
    _pool.append({{"x": _x, "y": np.sin(_x @ _w).astype(np.float32)}})
LOADS = []  # (t0, device_end_of_the_step_in_flight, t_end), time.time()

def _batches():
    i = 0
    while True:
        t0 = time.time()
        g = globals()
        if "loss" in g:
            jax.block_until_ready(g["loss"])  # the step in flight: the device is busy until now
        t1 = time.time()
        time.sleep(LOAD_S)
        batch = _pool[i % 4]
        LOADS.append((t0, t1, time.time()))
        yield batch
        i += 1

data = _batches()

# JAX's own compile timers (jax.monitoring, not goodput_jax): what the training thread
# spent tracing, lowering and compiling, to take out of step 0
import threading
_MAIN = threading.get_ident()
COMPILES = []

def _on_duration(event, duration, **_kw):
    if event.startswith("/jax/core/compile/") and threading.get_ident() == _MAIN:
        COMPILES.append((time.time(), float(duration)))

jax.monitoring.register_event_duration_secs_listener(_on_duration)
T_BEGIN = time.time()
'''

EPILOGUE = '''
T_END = time.time()
recorder.close()
print("RESULT " + json.dumps({"begin": T_BEGIN, "end": T_END, "loads": LOADS,
                              "compiles": COMPILES,
                              "suggest": None if hooks.suggest() is None else
                              hooks.suggest().batch_size,
                              "grad_count": hooks.grad_count}))
'''


def _run_loop(tmp_path, num_steps: int, load_s: float, width: int = 512) -> tuple[dict, str]:
    db = tmp_path / "quick.db"
    script = tmp_path / "loop.py"
    script.write_text(PRELUDE.format(num_steps=num_steps, load_s=repr(load_s), width=width)
                      + complete_loop() + EPILOGUE)
    env = dict(os.environ, GOODPUT_JAX_STORE=f"sqlite:///{db}", JAX_PLATFORMS="cpu",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("XLA_FLAGS", None)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=300, env=env, check=False, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):]), str(db)


def independent(res: dict) -> tuple[float, float]:
    """``(goodput %, data loading %)`` from the prelude's own timers.

    Step ``i``'s device time: from the end of load ``i`` (the loop dispatches it at once)
    to when load ``i + 1``'s wait for it returned; step 0's less the training thread's
    tracing, lowering and compiling inside it (JAX's own ``jax.monitoring`` durations). The
    last step is not followed by a load: it counts as the median step. Data loading: the
    part of each load after the step in flight had finished (the first load: all of it).

    The loader sees a step's end no earlier than the loop reaches it (after the hooks'
    work following the dispatch), so these step times are upper bounds: a step that
    finished earlier is seen ready at once, and its end is taken as the loader's start.
    """
    loads = res["loads"]
    steps = [loads[i + 1][1] - loads[i][2] for i in range(len(loads) - 1)]
    a, b = loads[0][2], loads[1][1]
    steps[0] -= sum(d for t, d in res["compiles"] if a <= t <= b)
    med = statistics.median(steps[1:])
    productive = sum(steps) + med
    idle = sum(t2 - t1 for _t0, t1, t2 in loads)
    wall = res["end"] - res["begin"]
    return 100.0 * productive / wall, 100.0 * idle / wall


def test_quickstart_complete_loop_as_it_stands_agrees_with_independent_timers(tmp_path):
    """Issue 33 acceptance: the section 4 loop gives goodput and data loading within 3 pp of
    independent timers; one run, one job start, no disruption, every step device-timed.

    Measured here (2 cores, load average 4): goodput 41.89 % recorded vs 42.63 % timed,
    data loading 39.46 % vs 38.60 %; again 41.51 vs 42.07 and 34.67 vs 33.79. Two attempts:
    on a machine loaded beyond its cores a thread woken late moves a few ms between a step
    and the gap after it."""
    errors = []
    for i in range(2):
        d = tmp_path / f"try{i}"
        d.mkdir()
        try:
            return _check_loop(d)
        except AssertionError as e:
            errors.append(str(e).splitlines()[0])
    pytest.fail(f"both attempts failed: {errors}")


def _check_loop(tmp_path):
    # the job runs ~10 s on 2 cores. Steps of ~12 ms (width 512): the loader's timer sees a
    # step's end only if the step is still running when the loop reaches it; with ~5 ms
    # steps 10 % had finished before (their ends then taken late: 3 pp), here < 1 %
    n = int(os.environ.get("QUICKSTART_LOOP_STEPS", "300"))
    res, db = _run_loop(tmp_path, n, load_s=0.012, width=512)
    store = SQLiteStore(db, create=False)
    evs, _ = store.read_events("run1")
    kinds = [e.kind for e in evs]
    assert kinds.count(EventKind.JOB_START) == 1 and kinds.count(EventKind.JOB_END) == 1
    assert kinds.count(EventKind.STEP_START) == n
    assert kinds.count(EventKind.STEP_DEVICE_END) == n  # each step's device end, once
    assert kinds.count(EventKind.HINTS) >= 1  # the hooks' final refit published the model
    calc = GoodputCalculator("run1", "goodput_run1", store=store)
    det = calc.get_job_goodput_details()
    assert det["num_runs"] == 1 and det["num_disruptions"] == 0
    assert det["device_timed_runs"] == 1 and det["ignored_events"] == 0
    total = det["total_time"]
    rec_goodput = 100.0 * det["productive_time"] / total
    rec_loading = 100.0 * det["badput_time"][BadputType.DATA_LOADING] / total
    ind_goodput, ind_loading = independent(res)
    print(f"goodput: recorded {rec_goodput:.2f}% vs timers {ind_goodput:.2f}%; data loading: "
          f"recorded {rec_loading:.2f}% vs timers {ind_loading:.2f}% "
          f"(job {total:.2f} s, timers {res['end'] - res['begin']:.2f} s)")
    assert rec_loading > 5.0  # the loader really kept the device idle
    assert rec_goodput == pytest.approx(ind_goodput, abs=3.0)
    assert rec_loading == pytest.approx(ind_loading, abs=3.0)
    assert res["grad_count"] > 0 and res["suggest"] is not None  # the model side worked
    store.close()


# ---------------------------------------------------------------- composition rules


def _kinds(store, job):
    evs, _ = store.read_events(job)
    return [e.kind for e in evs]


def test_hooks_job_joins_a_started_job(tmp_path):
    """``runtime.start_job`` + ``with hooks.job()``: one job start, and the job end stays the
    starter's (issue 33: a second job start made the report show 2 runs, 1 disruption)."""
    store = SQLiteStore(str(tmp_path / "j.db"))
    rec = goodput.GoodputRecorder("join", "goodput_join", logging_enabled=True, store=store)
    rec.record_job_start_time()
    assert rec.job_started
    hooks = GoodputHooks("join", init_batch_size=8, recorder=rec, is_primary=False,
                         num_replicas=1, num_nodes=1)
    with hooks.job():
        for i in range(3):
            hooks.step(i, lambda x: x + 1, 1.0)
    assert rec.job_started  # not ended by the hooks
    rec.record_job_end_time()
    assert not rec.job_started
    rec.close()
    kinds = _kinds(store, "join")
    assert kinds.count(EventKind.JOB_START) == 1 and kinds.count(EventKind.JOB_END) == 1
    assert kinds[-1] == EventKind.JOB_END
    calc = GoodputCalculator("join", "goodput_join", store=store)
    det = calc.get_job_goodput_details()
    assert det["num_runs"] == 1 and det["num_disruptions"] == 0


def test_hooks_job_starts_and_ends_a_job_of_its_own(tmp_path):
    store = SQLiteStore(str(tmp_path / "o.db"))
    rec = goodput.GoodputRecorder("own", "goodput_own", logging_enabled=True, store=store)
    hooks = GoodputHooks("own", init_batch_size=8, recorder=rec, is_primary=False,
                         num_replicas=1, num_nodes=1)
    with hooks.job():
        assert rec.job_started
        hooks.step(0, lambda x: x + 1, 1.0)
    assert not rec.job_started
    rec.close()
    kinds = _kinds(store, "own")
    assert kinds[0] == EventKind.JOB_START and kinds[-1] == EventKind.JOB_END
    assert kinds.count(EventKind.JOB_START) == 1


def test_steps_share_the_recorder_and_record_one_device_end_per_step(tmp_path):
    import jax.numpy as jnp

    store = SQLiteStore(str(tmp_path / "s.db"))
    rec = goodput.GoodputRecorder("share", "goodput_share", logging_enabled=True, store=store)
    steps = runtime.StepRecorder(rec, compile_times=False)
    other = goodput.GoodputRecorder("other", "goodput_other")
    with pytest.raises(ValueError, match="another recorder"):
        GoodputHooks("share", init_batch_size=8, recorder=other, steps=steps, is_primary=False)
    with pytest.raises(TypeError, match=r"steps \(3\) must be"):
        GoodputHooks("share", init_batch_size=8, steps=3, is_primary=False)
    hooks = GoodputHooks("share", init_batch_size=8, steps=steps, is_primary=False,
                         num_replicas=1, num_nodes=1)
    assert hooks.recorder is rec
    x = jnp.ones(4)
    with hooks.job():  # no job started: the hooks start it, and end it after the device ends
        for i in range(5):
            x = hooks.step(i, lambda v: v * 1.5, x)
        for i in range(5, 8):  # the context-manager form records through the steps too
            with hooks.step_context(i) as done:
                x = x * 1.5
                done(x)
    steps.close()
    rec.close()
    kinds = _kinds(store, "share")
    assert kinds.count(EventKind.STEP_START) == 8
    assert kinds.count(EventKind.STEP_DEVICE_END) == 8
    assert kinds.count(EventKind.STEP_END) == 0
    assert kinds[-1] == EventKind.JOB_END
