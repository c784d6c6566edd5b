"""A StepRecorder's lifetime: what it attaches it detaches (at ``close()``, or when a loop
drops it without closing), so a compile after the loop is not booked to the job, and a
dropped StepRecorder leaves no watcher thread or compile listener behind."""

from __future__ import annotations

import gc
import threading

import jax
import jax.numpy as jnp
import numpy as np

from goodput_jax import goodput, runtime
from goodput_jax.measure.events import EventKind
from goodput_jax.measure.stores.sqlite import SQLiteStore


def _watchers() -> int:
    return sum(t.name == "goodput-step-watcher" and t.is_alive() for t in threading.enumerate())


def test_close_detaches_the_attachment_it_made(tmp_path):
    store = SQLiteStore(str(tmp_path / "a.db"))
    rec = goodput.GoodputRecorder("a", "goodput_a", logging_enabled=True, store=store)
    assert runtime.attached(rec) is None
    steps = runtime.StepRecorder(rec)
    assert runtime.attached(rec) is not None
    f = jax.jit(lambda x: jnp.cos(x) + 2.0)
    rec.record_job_start_time()
    for i in range(3):
        steps(i, f, jnp.ones(4))
    steps.close()
    rec.record_job_end_time()
    assert runtime.attached(rec) is None
    jax.jit(lambda x: jnp.tan(x) - 1.0)(np.ones(6, np.float32)).block_until_ready()
    rec.close()
    kinds = [e.kind for e in store.read_events("a")[0]]
    assert kinds[-1] == EventKind.JOB_END, kinds[-4:]  # no compile booked after the job
    store.close()


def test_a_shared_attachment_stays(tmp_path):
    rec = goodput.GoodputRecorder("s", "goodput_s", logging_enabled=True,
                                  store=SQLiteStore(str(tmp_path / "s.db")))
    att = runtime.attach(rec)  # e.g. runtime.start_job(rec)
    steps = runtime.StepRecorder(rec)
    steps(0, lambda x: x + 1, jnp.ones(2))
    steps.close()
    assert runtime.attached(rec) is att
    att.detach()
    rec.close()


def test_a_dropped_step_recorder_stops_its_watcher_and_detaches(tmp_path):
    gc.collect()
    before = _watchers()
    rec = goodput.GoodputRecorder("d", "goodput_d", logging_enabled=True,
                                  store=SQLiteStore(str(tmp_path / "d.db")))
    steps = runtime.StepRecorder(rec)
    for i in range(4):
        steps(i, lambda x: x * 2, jnp.ones(2))
    assert steps.finish(10.0)
    assert _watchers() == before + 1
    th = steps._thread
    del steps
    gc.collect()
    th.join(10.0)
    assert not th.is_alive()
    assert runtime.attached(rec) is None
    rec.close()


def test_a_finished_job_stays_finished(tmp_path, caplog):
    """Issue 43, composition 3: a compile after ``record_job_end_time()`` (e.g. reading the
    statistics after the loop) recorded new events, so the job's total time grew with the
    wall clock. With the attachment ``runtime.start_job`` made (shared: it outlives the
    loop's StepRecorder), the compile after the end is not recorded, with a warning once."""
    store = SQLiteStore(str(tmp_path / "f.db"))
    rec = goodput.GoodputRecorder("f", "goodput_f", logging_enabled=True, store=store)
    att = runtime.start_job(rec)
    steps = runtime.StepRecorder(rec)
    f = steps.wrap(jax.jit(lambda x: jnp.sinh(x) * 0.5))
    for i in range(3):
        f(i, jnp.ones(5))
    steps.close()
    rec.record_job_end_time()
    assert runtime.attached(rec) is att  # shared: still attached
    with caplog.at_level("WARNING", logger="goodput_jax.runtime"):
        for n in (7, 9):  # two new programs after the end
            jax.jit(lambda x: jnp.arcsinh(x) + 3.0)(np.ones(n, np.float32)).block_until_ready()
    assert sum("after the job's end" in r.getMessage() for r in caplog.records) == 1
    rec.close()
    kinds = [e.kind for e in store.read_events("f")[0]]
    assert kinds[-1] == EventKind.JOB_END, kinds[-4:]
    att.detach()
    store.close()
