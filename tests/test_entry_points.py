"""One loop through every entry point, the same facts read back from the store (issue 43, 5).

The same small loop (a jitted step on the CPU, a data-loading span before each step, one
Orbax checkpoint save) runs through each door a user composes:

* ``GoodputHooks`` alone, and ``GoodputHooks(..., steps=StepRecorder)``;
* ``StepRecorder.wrap`` and ``steps(step, fn, ...)``;
* the NNX helpers (``integrations.nnx``: an ``nnx.jit`` step returning ``stats_summary``)
  through the hooks;
* Google's drop-in recorder (``goodput_jax.goodput.GoodputRecorder``) with the runtime
  capture, and MaxText's wrapper helpers (``compat.maxtext``) with it;
* Google's README calls as they stand and MaxText's loop as it stands (a step start per
  step, no runtime capture): they never hand the recorder the step's outputs or function,
  so they record every fact but the device's (no device ends, no program cost: host-timed,
  program goodput and MFU "n/a"), and the calculator's report says why and names the door
  that records the rest (``HOST_TIMED`` below; ``test_host_timed_doors_say_how_to_record_
  the_device_facts``). The migration page's replacement of the README's two step lines
  (``docs/migrating-from-ml-goodput-measurement.md``, run here as written) records them all.

Each door writes to its own SQLite store; the facts are read back through the store's
``read_events`` and the calculator (``GoodputCalculator``): one job start and one job end,
every step's start and device end, a program cost (the same FLOPs as the other doors: one
program), every data-loading span, the checkpoint save, one run, device-timed, and program
goodput (MFU) that is a number. A door that records less fails with the facts it lacks.

The cluster job context (``goodput_jax.cluster``) is the cluster room's door: add it as a
function ``door(tmp_path) -> (store, job)`` to ``DOORS`` below (it runs the same ``_loop``
through the context's recorder), and it is compared like the others.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from goodput_jax import goodput, runtime
from goodput_jax.integrations.hooks import GoodputHooks
from goodput_jax.integrations.orbax import instrument
from goodput_jax.measure.calculator import BadputType, GoodputCalculator
from goodput_jax.measure.events import EventKind
from goodput_jax.measure.recorder import GoodputRecorder
from goodput_jax.measure.stores.sqlite import SQLiteStore

N = 5
CKPT_STEP = 2


@jax.jit
def train_step(w, x):
    """One program for every door: a small matmul step and its loss."""
    w = w - 0.01 * (x.T @ (x @ w))
    return w, jnp.mean(w * w)


def _batch(i: int) -> jax.Array:
    return jnp.asarray(np.random.default_rng(i).normal(size=(16, 8)), jnp.float32)


def _manager(tmp_path, rec: Any) -> Any:
    import orbax.checkpoint as ocp

    return instrument(ocp.CheckpointManager(tmp_path / "ckpt"), rec)


def _save(mngr: Any, step: int, w: jax.Array) -> None:
    import orbax.checkpoint as ocp

    assert mngr.save(step, args=ocp.args.StandardSave({"w": w}), force=True)
    mngr.wait_until_finished()


def _recorder(tmp_path, job: str, cls: type = GoodputRecorder) -> tuple[Any, SQLiteStore]:
    store = SQLiteStore(str(tmp_path / f"{job}.db"))
    return cls(job, f"goodput_{job}", True, store=store), store


def _loop(rec: Any, mngr: Any, step: Callable[[int, Any, Any], Any]) -> None:
    """The one loop: load (a data-loading span), step, and a checkpoint at ``CKPT_STEP``;
    the manager is closed at the end (inside the job: its wait is save time)."""
    w = jnp.ones((8, 4), jnp.float32)
    for i in range(N):
        with rec.data_loading():
            x = _batch(i)
        w, loss = step(i, w, x)
        if i == CKPT_STEP:
            _save(mngr, i, w)
    float(loss)
    mngr.close()


# ------------------------------------------------------------------------------- the doors
def door_hooks(tmp_path):
    rec, store = _recorder(tmp_path, "hooks")
    hooks = GoodputHooks("hooks", init_batch_size=16, recorder=rec, is_primary=False,
                         num_replicas=1, num_nodes=1)
    mngr = _manager(tmp_path, rec)
    with hooks.job():
        _loop(rec, mngr, lambda i, w, x: hooks.step(i, train_step, w, x))
    hooks.close()
    rec.close()
    return store, "hooks"


def door_hooks_with_steps(tmp_path):
    rec, store = _recorder(tmp_path, "hooks-steps")
    steps = runtime.StepRecorder(rec)
    hooks = GoodputHooks("hooks-steps", init_batch_size=16, steps=steps, is_primary=False,
                         num_replicas=1, num_nodes=1)
    mngr = _manager(tmp_path, rec)
    with hooks.job():
        _loop(rec, mngr, lambda i, w, x: hooks.step(i, train_step, w, x))
    steps.close()
    hooks.close()
    rec.close()
    return store, "hooks-steps"


def door_wrap(tmp_path):
    rec, store = _recorder(tmp_path, "wrap")
    steps = runtime.StepRecorder(rec)
    recorded = steps.wrap(train_step)
    mngr = _manager(tmp_path, rec)
    rec.record_job_start_time()
    _loop(rec, mngr, recorded)
    steps.close()
    rec.record_job_end_time()
    rec.close()
    return store, "wrap"


def door_call(tmp_path):
    rec, store = _recorder(tmp_path, "call")
    steps = runtime.StepRecorder(rec)
    mngr = _manager(tmp_path, rec)
    with rec.job():
        _loop(rec, mngr, lambda i, w, x: steps(i, train_step, w, x))
        steps.close()
    rec.close()
    return store, "call"


def door_google_with_runtime(tmp_path):
    rec, store = _recorder(tmp_path, "google", goodput.GoodputRecorder)
    steps = runtime.StepRecorder(rec)
    recorded = steps.wrap(train_step)
    mngr = _manager(tmp_path, rec)
    rec.record_job_start_time()
    _loop(rec, mngr, recorded)
    steps.close()
    rec.record_job_end_time()
    rec.close()
    return store, "google"


def door_maxtext_with_runtime(tmp_path):
    from goodput_jax.compat import maxtext as mt

    store = SQLiteStore(str(tmp_path / "maxtext.db"))
    config = {"run_name": "maxtext", "enable_goodput_recording": True, "monitor_goodput": False}
    rec = mt.create_goodput_recorder(config, process_index=0, store=store)
    steps = runtime.StepRecorder(rec)
    recorded = steps.wrap(train_step)
    mngr = mt.maybe_instrument_checkpoint_manager(_manager(tmp_path, rec).manager, rec)
    with mt.maybe_record_goodput(rec, mt.GoodputEvent.JOB):
        _loop(rec, mngr, recorded)
        steps.close()
    rec.close()
    return store, "maxtext"


def door_nnx(tmp_path):
    import optax
    from flax import nnx

    from goodput_jax.integrations import nnx as gnnx
    from goodput_jax.model import gradstats as gs

    rec, store = _recorder(tmp_path, "nnx")
    model = nnx.Linear(8, 4, rngs=nnx.Rngs(0))
    opt = nnx.Optimizer(model, optax.chain(gs.gradient_noise_scale(16), optax.sgd(1e-2)),
                        wrt=nnx.Param)

    def loss_fn(m, x):
        return jnp.mean(m(x) ** 2)

    @nnx.jit
    def nnx_step(m, o, x):
        loss, grads, sq = gnnx.grads_and_stats(loss_fn, m, o, x, 2)
        o.update(m, grads, grad_sqnorms=sq)
        return loss, gnnx.stats_summary(o)

    hooks = GoodputHooks("nnx", init_batch_size=16, recorder=rec, is_primary=False,
                         num_replicas=1, num_nodes=1)
    mngr = _manager(tmp_path, rec)

    def step(i, w, x):
        loss, _summary = hooks.step(i, nnx_step, model, opt, x)
        return w, loss

    with hooks.job():
        _loop(rec, mngr, step)
    hooks.close()
    rec.close()
    return store, "nnx"


def door_google_readme(tmp_path):
    """Google's README loop as it stands: ``record_step_start_time`` per step."""
    rec, store = _recorder(tmp_path, "readme", goodput.GoodputRecorder)
    mngr = _manager(tmp_path, rec)
    rec.record_job_start_time()

    def step(i, w, x):
        rec.record_step_start_time(i)
        return train_step(w, x)

    _loop(rec, mngr, step)
    rec.record_job_end_time()
    rec.close()
    return store, "readme"


def door_maxtext_loop(tmp_path):
    """MaxText's train loop as it stands: ``record_goodput(recorder, "record_step_start_time",
    step)`` before each ``p_train_step``."""
    from goodput_jax.compat import maxtext as mt

    store = SQLiteStore(str(tmp_path / "mtloop.db"))
    config = {"run_name": "mtloop", "enable_goodput_recording": True, "monitor_goodput": False}
    rec = mt.create_goodput_recorder(config, process_index=0, store=store)
    mngr = mt.maybe_instrument_checkpoint_manager(_manager(tmp_path, rec).manager, rec)

    def step(i, w, x):
        mt.record_goodput(rec, "record_step_start_time", i)
        return train_step(w, x)

    with mt.maybe_record_goodput(rec, mt.GoodputEvent.JOB):
        _loop(rec, mngr, step)
    rec.close()
    return store, "mtloop"


#: ``name -> door``; each returns ``(store, job)`` after running ``_loop`` once. The cluster
#: job context joins here (see the module docstring).
DOORS: dict[str, Any] = {
    "hooks": door_hooks,
    "hooks+steps": door_hooks_with_steps,
    "wrap": door_wrap,
    "call": door_call,
    "nnx": door_nnx,
    "google+runtime": door_google_with_runtime,
    "maxtext+runtime": door_maxtext_with_runtime,
    "google-readme": door_google_readme,
    "maxtext-loop": door_maxtext_loop,
}

#: the doors that never see the step's outputs or function (a step start per step, as
#: Google's README and MaxText's loop call the recorder): no device facts can be recorded
HOST_TIMED = {"readme", "mtloop"}

#: the facts that need the step's outputs (device ends) or its function (program cost)
DEVICE_FACTS = {"device ends": [], "program costs": False, "program flops": [],
                "device-timed runs": 0, "mfu is a number": False}


# ------------------------------------------------------------------------------- the facts
def facts(store: SQLiteStore, job: str) -> dict[str, Any]:
    """What the store holds for ``job``, through its public read API and the calculator."""
    events, _ = store.read_events(job)
    kinds = [e.kind for e in events]

    def steps_of(kind: EventKind) -> list[int]:
        return sorted(e.step for e in events if e.kind == kind)

    costs = [e.payload for e in events if e.kind == EventKind.PROGRAM_COST]
    calc = GoodputCalculator(job, f"goodput_{job}", store=store)
    det = calc.get_job_goodput_details()
    mfu = calc.get_program_goodput().mfu
    return {
        "job starts": kinds.count(EventKind.JOB_START),
        "job ends": kinds.count(EventKind.JOB_END),
        "ends last": kinds[-1] == EventKind.JOB_END,
        "step starts": steps_of(EventKind.STEP_START),
        "device ends": steps_of(EventKind.STEP_DEVICE_END),
        "program costs": len(costs) >= 1,
        "program flops": sorted({round(c["flops"]) for c in costs}),
        "data loading spans": kinds.count(EventKind.DATA_LOADING_END),
        "data loading badput": det["badput_time"][BadputType.DATA_LOADING] > 0,
        "checkpoint saves": sorted(set(steps_of(EventKind.CHECKPOINT_SAVE_END))),
        "checkpoint badput": det["badput_time"][BadputType.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME] > 0,
        "runs": det["num_runs"],
        "device-timed runs": det["device_timed_runs"],
        "mfu is a number": mfu is not None and math.isfinite(mfu) and mfu > 0,
    }


def expected(flops: list[int]) -> dict[str, Any]:
    return {
        "job starts": 1, "job ends": 1, "ends last": True,
        "step starts": list(range(N)), "device ends": list(range(N)),
        "program costs": True, "program flops": flops,
        "data loading spans": N, "data loading badput": True,
        "checkpoint saves": [CKPT_STEP], "checkpoint badput": True,
        "runs": 1, "device-timed runs": 1, "mfu is a number": True,
    }


def _train_step_flops() -> list[int]:
    cost = runtime.program_cost(train_step, jnp.ones((8, 4), jnp.float32), _batch(0))
    return [round(cost.flops)]


@pytest.mark.parametrize("door", list(DOORS.values()), ids=list(DOORS))
def test_every_door_records_the_same_facts(tmp_path, door):
    store, job = door(tmp_path)
    got = facts(store, job)
    store.close()
    want = expected(got["program flops"] if job == "nnx" else _train_step_flops())
    if job in HOST_TIMED:  # every other door's facts, less the device's
        want.update(DEVICE_FACTS)
    if job == "nnx":  # another program (the NNX step): one of them, recorded once
        assert len(got["program flops"]) == 1, got["program flops"]
    lacking = {k: (got[k], v) for k, v in want.items() if got[k] != v}
    assert not lacking, f"door {job!r} records other facts (got, want): {lacking}"


# ------------------------------------------------------- the host-timed doors' reason
@pytest.mark.parametrize("door", [door_google_readme, door_maxtext_loop],
                         ids=["google-readme", "maxtext-loop"])
def test_host_timed_doors_say_how_to_record_the_device_facts(tmp_path, door):
    """Program goodput and MFU are not available, and the public report says why and
    names the runtime's step recorder (the door of ``docs/migrating-from-ml-goodput-
    measurement.md``, "Device step times and MFU")."""
    from goodput_jax.report.productivity import (
        NO_PROGRAM_COST,
        productivity_lines,
        productivity_panel,
    )
    from goodput_jax.report.text import HOST_TIMED_NOTE, measurement_note

    store, job = door(tmp_path)
    calc = GoodputCalculator(job, f"goodput_{job}", store=store)
    pg = calc.get_program_goodput()
    assert pg.programs == () and math.isnan(pg.mfu) and math.isnan(pg.program_goodput)
    prod = calc.get_productivity_goodput()
    assert math.isnan(prod.program_goodput) and math.isnan(prod.mfu)
    assert prod.runtime_goodput > 0  # the host-timed facts are all there
    lines = productivity_lines(productivity_panel(calc))
    assert f"  {NO_PROGRAM_COST}" in lines
    assert measurement_note(calc.get_job_goodput_details()) == HOST_TIMED_NOTE
    for reason in (NO_PROGRAM_COST, HOST_TIMED_NOTE):
        assert "goodput_jax.runtime.StepRecorder" in reason, reason
    store.close()


def _doc_block(title: str) -> str:
    """The first ``python`` block under the heading ``title`` of the migration page."""
    import pathlib
    import re

    page = (pathlib.Path(__file__).parents[1] / "docs" /
            "migrating-from-ml-goodput-measurement.md").read_text(encoding="utf-8")
    section = page.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_migration_pages_door_records_the_device_facts_of_the_readme_loop(tmp_path):
    """The page's README loop with its step line replaced, run as written: every fact of
    the other doors, each step started once (not twice: a StepRecorder call after a
    ``record_step_start_time`` of the same step would read as a redo)."""
    code = _doc_block("Device step times and MFU")
    assert "steps(step, train_step, state, batch)" in code
    assert "record_step_start_time" not in code.split("for step in", 1)[1]
    ns: dict[str, Any] = {}
    exec(compile(code, "migrating-from-ml-goodput-measurement.md", "exec"), ns)
    store = SQLiteStore(ns["store"].removeprefix("sqlite:///"))
    events, _ = store.read_events(ns["run_name"])
    kinds = [e.kind for e in events]
    assert sorted(e.step for e in events if e.kind == EventKind.STEP_START) == list(range(5))
    assert sorted(e.step for e in events if e.kind == EventKind.STEP_DEVICE_END) == \
        list(range(5))
    assert kinds.count(EventKind.PROGRAM_COST) == 1
    assert ns["mfu"] > 0 and math.isfinite(ns["mfu"])
    store.close()
