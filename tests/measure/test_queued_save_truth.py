"""A blocking save while steps are still queued: a real jitted JAX loop on CPU (issue 27, 1a).

The loop queues K steps through ``goodput_jax.runtime.StepRecorder`` (dispatched, the device
busy), then saves inside ``recorder.checkpoint_save``: ``np.asarray(w)`` blocks until the
device has finished the queued steps, then the save writes the array and waits (the device
idles). Google's rule gives the whole span to the checkpoint and the queued steps 0 s; the
engine's device-mode rule gives the span only its device-idle part.

Device truth is not goodput_jax's: the device was busy from the round's first dispatch to
the moment it finished the round's last step, and idle from then to the save's end (the
steps of a round are dependent and queued back to back). That moment is, for the plain save,
when ``np.asarray(w)`` returns (JAX's own blocking wait, on the thread that then writes);
for the Orbax save, the end of the round's last XLA execution in a ``jax.profiler`` trace of
the run (Python tracer off): a thread of the test stamping ``block_until_ready``'s return
would itself wait for the GIL while Orbax's Python runs (seen 1-10 ms late on a loaded
2-core machine, up to 1.5 pp here).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from goodput_jax import goodput, runtime
from goodput_jax.measure.calculator import BadputType, GoodputCalculator
from goodput_jax.measure.stores.sqlite import SQLiteStore
from tests.runtime._helpers import device_busy

SIZE = 512
K = 10  # steps queued before each save
ROUNDS = 3
IDLE_S = 0.1  # the save's own (device-idle) part: writing the array, then waiting
#: acceptance of issue 27: within 3 pp of the device truth (a busy 2-core machine can stall
#: the watcher thread for milliseconds; a wrong rule is off by the whole queue, ~20-40 pp)
PP = 3.0
ATTEMPTS = 3


@jax.jit
def _step(w, x):
    for _ in range(6):
        x = jnp.tanh(x @ w)
    return w * 0.999 + 1e-4 * x, jnp.mean(x)


def _loop(tmp_path, name: str, save, prepare=None, trace: bool = False) -> dict:
    """Run ROUNDS x (K queued steps, one save); returns truth (not goodput_jax's) and the store.

    ``save(rec, step, w, path) -> (t_ready or None, t_end)``; ``prepare(rec, tmp_path)`` runs
    before the job starts (building the checkpoint manager is no part of a save); with
    ``trace`` the run is traced (``jax.profiler``) and each round's device end is the end of
    its last XLA execution there."""
    w = jnp.asarray(np.random.default_rng(0).normal(size=(SIZE, SIZE)) / SIZE, jnp.float32)
    x = jnp.ones((SIZE, SIZE), jnp.float32)
    jax.block_until_ready(_step(w, x))  # compiled before the job: no program startup to guess
    db = str(tmp_path / f"{name}.db")
    rec = goodput.GoodputRecorder(name, f"goodput_{name}", True, store=f"sqlite:///{db}")
    steps = runtime.StepRecorder(rec, compile_times=False)
    if prepare is not None:
        prepare(rec, tmp_path)
    if trace:
        opts = jax.profiler.ProfileOptions()
        opts.python_tracer_level = 0  # the XLA runtime's events only: Python runs at full speed
        jax.profiler.start_trace(str(tmp_path / "trace"), profiler_options=opts)
    rounds = []
    t_job0 = time.time()
    rec.record_job_start_time(t_job0)
    step = 0
    try:
        for r in range(ROUNDS):
            t_first = time.time()
            for _ in range(K):
                w, _loss = steps(step, _step, w, x)
                step += 1
            t_save = time.time()
            t_ready, t_end = save(rec, step, w, tmp_path / f"{name}-{r}.npy")
            rounds.append([t_first, t_save, t_ready, t_end])
        steps.finish()
        t_job1 = time.time()
        rec.record_job_end_time(t_job1)
    finally:
        if trace:
            jax.profiler.stop_trace()
        rec.close()
    if trace:
        spans = device_busy(tmp_path / "trace")
        for rd in rounds:
            rd[2] = max(b for a, b in spans if rd[0] < b and a < rd[3])
    busy = sum(ready - first for first, _, ready, _ in rounds)
    waited = sum(ready - t_save for _, t_save, ready, _ in rounds)
    idle_in_save = sum(end - ready for _, _, ready, end in rounds)
    return {"busy": busy, "idle_in_save": idle_in_save, "total": t_job1 - t_job0, "waited": waited,
            "store": SQLiteStore(db, create=False), "name": name, "steps": step}


def _np_save(rec, step, w, path):
    with rec.checkpoint_save(step):
        arr = np.asarray(w)  # blocks until the queued steps are done
        t_ready = time.time()
        np.save(path, arr)
        time.sleep(IDLE_S)
        t_end = time.time()
    return t_ready, t_end


def _check(tmp_path, name, save, pp=PP, **kw):
    out = _loop(tmp_path, name, save, **kw)
    calc = GoodputCalculator(out["name"], None, store=out["store"])
    g, b, last = calc.get_job_goodput(include_badput_breakdown=True)
    total = out["total"]
    truth_g = 100.0 * out["busy"] / total
    truth_save = 100.0 * out["idle_in_save"] / total
    save_pct = b[BadputType.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME]
    dev = calc.get_step_deviation()
    assert calc.get_job_goodput_details()["device_timed_runs"] == 1  # (no host-timed note)
    out["store"].close()
    assert last == out["steps"] - 1
    # the scenario discriminates: the saves waited for queued device work far beyond the
    # tolerance (Google's rule counts that wait as checkpoint badput)
    assert 100.0 * out["waited"] / total > 3 * pp, out
    assert g == pytest.approx(truth_g, abs=pp), (g, truth_g, save_pct, truth_save)
    assert save_pct == pytest.approx(truth_save, abs=pp), (save_pct, truth_save, g, truth_g)
    # the queued steps carry their device time (Google's rule: K - 1 of every K are 0 s; a
    # device end stamped late, when the watcher waited for the GIL, can leave a few at 0 s)
    zero = int(np.count_nonzero(dev.step_times < 1e-4))
    assert zero <= out["steps"] // 4, dev.step_times.tolist()
    print(name, {k: round(v, 4) for k, v in out.items() if isinstance(v, float)})
    return g, truth_g, save_pct, truth_save


def _attempts(tmp_path, name, save, pp=PP, **kw):
    errors = []
    for i in range(ATTEMPTS):
        d = tmp_path / f"try{i}"
        d.mkdir()
        try:
            return _check(d, name, save, pp, **kw)
        except AssertionError as e:
            errors.append(str(e).splitlines()[0][:200])
            print(f"{name}: attempt {i} failed: {errors[-1]}")
    pytest.fail(f"all {ATTEMPTS} attempts failed: {errors}")


def test_blocking_save_with_queued_steps_is_badput_only_while_the_device_idles(tmp_path):
    g, truth_g, save_pct, truth_save = _attempts(tmp_path, "queued", _np_save)
    print(f"goodput {g:.1f} % (truth {truth_g:.1f}), save {save_pct:.1f} % (truth {truth_save:.1f})")


def test_orbax_save_with_queued_steps(tmp_path):
    """Orbax ``instrument()``: its blocking save copies the arrays off the device, so it waits
    for the queued steps; then the background commit, waited for (also recorded as save
    time). Truth: the round's last XLA execution's end in a ``jax.profiler`` trace (the
    device end), and the save's end stamped after ``wait_until_finished`` returns."""
    ocp = pytest.importorskip("orbax.checkpoint")
    from goodput_jax.integrations.orbax import instrument

    managers = []

    def prepare(rec, d):
        managers.append(instrument(ocp.CheckpointManager(d / "ckpt"), rec))

    def orbax_save(rec, step, w, path):
        mngr = managers[-1]
        mngr.save(step, args=ocp.args.StandardSave({"w": w}), force=True)
        mngr.wait_until_finished()
        return None, time.time()  # the device end: from the trace

    try:
        g, truth_g, save_pct, truth_save = _attempts(tmp_path, "orbax", orbax_save,
                                                     prepare=prepare, trace=True)
        print(f"orbax: goodput {g:.1f} % (truth {truth_g:.1f}), save {save_pct:.1f} % "
              f"(truth {truth_save:.1f})")
    finally:
        for m in managers:
            m.manager.close()
