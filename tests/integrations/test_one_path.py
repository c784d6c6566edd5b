"""Every door of the hooks records the same facts as ``steps(...)`` / ``steps.wrap``.

Issue 43, composition 1: a loop through ``GoodputHooks(..., steps=StepRecorder)`` recorded
no program cost (the hooks drove the StepRecorder through ``start``/``track``, which never
sees the step function), so program goodput and MFU showed "n/a"; the same loop written
with ``steps.wrap`` recorded them. Jobs whose hooks have no ``steps=`` (the cluster
runtime's example) recorded none either.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from goodput_jax import goodput, runtime
from goodput_jax.integrations.hooks import GoodputHooks
from goodput_jax.measure.events import EventKind
from goodput_jax.measure.stores.sqlite import SQLiteStore


@jax.jit
def _step(x):
    return x * 1.5 + 1.0


def _kinds(store: SQLiteStore, job: str) -> list[EventKind]:
    events, _ = store.read_events(job)
    return [e.kind for e in events]


def _loop(tmp_path, job: str, *, with_steps: bool) -> list[EventKind]:
    store = SQLiteStore(str(tmp_path / f"{job}.db"))
    rec = goodput.GoodputRecorder(job, f"goodput_{job}", logging_enabled=True, store=store)
    steps = runtime.StepRecorder(rec) if with_steps else None
    hooks = GoodputHooks(job, init_batch_size=8, recorder=rec, steps=steps, is_primary=False,
                         num_replicas=1, num_nodes=1)
    x = jnp.ones(8)
    with hooks.job():
        for i in range(4):
            x = hooks.step(i, _step, x)
    if steps is not None:
        steps.close()
    hooks.close()
    rec.close()
    return _kinds(store, job)


def test_hooks_with_a_step_recorder_record_the_program_cost(tmp_path):
    kinds = _loop(tmp_path, "hooks-steps", with_steps=True)
    assert kinds.count(EventKind.PROGRAM_COST) >= 1, kinds
    assert kinds.count(EventKind.STEP_START) == 4
    assert kinds.count(EventKind.STEP_DEVICE_END) == 4


def test_hooks_without_a_step_recorder_record_the_program_cost(tmp_path):
    kinds = _loop(tmp_path, "hooks-plain", with_steps=False)
    assert kinds.count(EventKind.PROGRAM_COST) >= 1, kinds
    assert kinds.count(EventKind.STEP_START) == 4
    assert kinds.count(EventKind.STEP_DEVICE_END) == 4
    assert kinds.count(EventKind.STEP_END) == 0


def test_start_track_door_says_it_cannot_read_the_program(tmp_path, caplog):
    store = SQLiteStore(str(tmp_path / "t.db"))
    rec = goodput.GoodputRecorder("tr", "goodput_tr", logging_enabled=True, store=store)
    steps = runtime.StepRecorder(rec)
    x = jnp.ones(8)
    with caplog.at_level("WARNING", logger="goodput_jax.runtime"):
        for i in range(3):
            steps.start(i)
            x = _step(x + i)  # a new program at the first step: compiled inside the step
            steps.track(i, x)
    steps.close()
    rec.close()
    msgs = [r.getMessage() for r in caplog.records if "program cost" in r.getMessage()]
    assert len(msgs) == 1, msgs
    assert "steps(step, fn" in msgs[0]
