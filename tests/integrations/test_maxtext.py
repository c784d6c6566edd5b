"""MaxText drop-in: the hook sites of MaxText's train.py / goodput_utils.py, with
``from goodput_jax import goodput`` as the only change, on a real (tiny) Flax/optax run.

MaxText's sites, mimicked below:

* ``main``: create the recorder (``enable_goodput_recording``), record the job
  start, run the monitor on process 0 (``monitor_goodput``,
  ``goodput_upload_interval_seconds``, ``monitor_step_time_deviation``,
  ``step_deviation_interval_seconds``), train, record the job end on a clean
  exit only;
* ``train_loop``: accelerator init and training preparation as context
  managers, a data-loading context per batch, a step context per iteration.
"""

from __future__ import annotations

import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import linen as nn
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from goodput_jax import goodput  # was: from ml_goodput_measurement import goodput
from goodput_jax.measure.events import EventKind
from goodput_jax.measure.stores.sqlite import SQLiteStore

GoodputEvent = goodput.GoodputEvent
maybe_record_goodput = goodput.maybe_record_goodput


@pytest.fixture(autouse=True)
def _no_metadata_server(monkeypatch):
    """MaxText's monitor asks the GCE metadata server for the project and zone: point it
    at a closed loopback port, so no test here reaches beyond 127.0.0.1 (even on GCE)."""
    from tests.measure._gce_metadata_server import closed_port

    monkeypatch.setenv("GCE_METADATA_HOST", f"127.0.0.1:{closed_port()}")


class _MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(1)(nn.relu(nn.Dense(16)(x)))


_MODEL = _MLP()
_TX = optax.adamw(1e-2)


def _loss(params, batch):
    return jnp.mean((_MODEL.apply(params, batch["x"]) - batch["y"]) ** 2)


@jax.jit
def _train_step(state, batch):
    params, opt_state = state
    loss, grads = jax.value_and_grad(_loss)(params, batch)
    updates, opt_state = _TX.update(grads, opt_state, params)
    return (optax.apply_updates(params, updates), opt_state), {"loss": loss}


class _Crash(RuntimeError):
    pass


def _config(tmp_path, **kw):
    cfg = {"run_name": "maxtext-run", "enable_goodput_recording": True, "monitor_goodput": True,
               "tensorboard_dir": str(tmp_path / "tb"), "goodput_upload_interval_seconds": 3600,
               "monitor_step_time_deviation": True, "step_deviation_interval_seconds": 3600,
               "enable_pathways_goodput": False, "steps": 6}
    cfg.update(kw)
    return types.SimpleNamespace(**cfg)  # MaxText's config is an attribute object


def train_loop(config, recorder, crash_at=None):
    """MaxText's train_loop hook sites."""
    with maybe_record_goodput(recorder, GoodputEvent.TPU_INIT):
        devices = jax.devices()[:2]
        mesh = Mesh(np.array(devices), ("data",))
    with maybe_record_goodput(recorder, GoodputEvent.TRAINING_PREPARATION):
        params = _MODEL.init(jax.random.key(0), jnp.ones((1, 4)))
        state = (params, _TX.init(params))
        data_sharding = NamedSharding(mesh, P("data"))
        rng = np.random.default_rng(0)
        w = rng.normal(size=(4, 1)).astype(np.float32)

        def batches():
            while True:
                x = rng.normal(size=(8, 4)).astype(np.float32)
                yield jax.device_put({"x": x, "y": x @ w}, data_sharding)

        data_iterator = batches()
    losses = []
    for step in range(config.steps):
        with maybe_record_goodput(recorder, GoodputEvent.DATA_LOADING):
            batch = next(data_iterator)
        with maybe_record_goodput(recorder, GoodputEvent.STEP, step):
            if step == crash_at:
                raise _Crash(f"preempted in step {step}")
            state, metrics = _train_step(state, batch)
            losses.append(float(metrics["loss"]))  # blocks, as MaxText's metric logging does
    return losses


def main(config, store, process_index=0, crash_at=None):
    """MaxText's main hook sites (recording and monitoring only on process 0)."""
    recorder = goodput.create_goodput_recorder(config, process_index=process_index, store=store)
    if recorder is not None:
        recorder.record_job_start_time()
    try:
        with goodput.maybe_monitor_goodput(config, process_index=process_index, store=store):
            losses = train_loop(config, recorder, crash_at=crash_at)
            if recorder is not None:
                recorder.record_job_end_time()  # a clean exit only: a crash skips it
    finally:
        if recorder is not None:
            recorder.close()  # = the process exiting: the recorder's atexit hook flushes
    return losses


def _spans(events, start, end):
    """Sum of end - start over matched pairs, per run (no nesting of the same kind)."""
    total, open_t = 0.0, {}
    for ev in events:
        if ev.kind == start:
            open_t[ev.run_id] = ev.timestamp
        elif ev.kind == end and ev.run_id in open_t:
            total += ev.timestamp - open_t.pop(ev.run_id)
    return total


def test_maxtext_hook_sites_measure_a_real_run(tmp_path):
    store = SQLiteStore(str(tmp_path / "goodput.db"))
    config = _config(tmp_path)
    losses = main(config, store)
    assert len(losses) == 6 and np.all(np.isfinite(losses))
    events, _ = store.read_events("maxtext-run")
    kinds = [e.kind for e in events]
    assert kinds[0] == EventKind.JOB_START and kinds[-1] == EventKind.JOB_END
    assert kinds.count(EventKind.STEP_START) == 6 and kinds.count(EventKind.DATA_LOADING_START) == 6
    calc = goodput.GoodputCalculator("maxtext-run", "goodput_maxtext-run", store=store)
    gp, badput, last_step = calc.get_job_goodput(include_badput_breakdown=True)
    d = calc.get_job_goodput_details()
    assert last_step == 5
    # Google's shape: custom badput is a {TYPE: %} dict; async loading is not subtracted
    assert gp + sum(v if isinstance(v, float) else sum(v.values()) for k, v in badput.items()
                    if k is not goodput.BadputType.DATA_LOADING_ASYNC) == pytest.approx(100.0)
    # the calculator's buckets are exactly the recorded spans (Google's rules: the first
    # data load is synchronous, later ones overlap the device's previous step)
    k = EventKind
    first_load = [e.timestamp for e in events if e.kind in (k.DATA_LOADING_START,
                                                             k.DATA_LOADING_END)][:2]
    assert d["badput_time"][goodput.BadputType.TPU_INITIALIZATION] == pytest.approx(
        _spans(events, k.ACCELERATOR_INIT_START, k.ACCELERATOR_INIT_END))
    assert d["badput_time"][goodput.BadputType.TRAINING_PREP] == pytest.approx(
        _spans(events, k.TRAINING_PREP_START, k.TRAINING_PREP_END))
    assert d["badput_time"][goodput.BadputType.DATA_LOADING_SYNC] == pytest.approx(
        first_load[1] - first_load[0])
    assert d["badput_time"][goodput.BadputType.DATA_LOADING_ASYNC] == pytest.approx(
        _spans(events, k.DATA_LOADING_START, k.DATA_LOADING_END) - (first_load[1] - first_load[0]))
    assert d["total_time"] == pytest.approx(events[-1].timestamp - events[0].timestamp)
    assert d["productive_time"] > 0 and d["badput_time"][goodput.BadputType.TRAINING_PREP] > 0
    # TensorBoard: the monitor's final upload (at the end of maybe_monitor_goodput) saw the job end
    # the reference's layout: <tensorboard_dir>/goodput/ with its tag names
    acc = EventAccumulator(str(tmp_path / "tb" / "goodput"), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"goodput/goodput", "badput/tpu_initialization", "badput/training_prep",
            "badput/data_loading_sync", "badput/data_loading_async", "badput/program_startup",
            "step_time/median"} <= tags
    # Google's step_deviation needs an ideal step time, which Google's rule takes only from
    # steps of 1 s or more: with these sub-second steps and none configured, Google's monitor
    # writes no step_deviation (its get_step_deviation raises), and neither does the drop-in
    with pytest.raises(ValueError, match="No ideal step time"):
        calc.get_step_deviation()
    assert "step_deviation" not in tags
    final = acc.Scalars("goodput/goodput")[-1]
    assert final.step == 5
    assert final.value == pytest.approx(gp, rel=1e-4)
    assert acc.Scalars("goodput/total_time")[-1].value == pytest.approx(d["total_time"], rel=1e-4)
    store.close()


def test_maxtext_crash_then_restart_and_other_processes(tmp_path):
    store = SQLiteStore(str(tmp_path / "goodput.db"))
    config = _config(tmp_path, monitor_goodput=False, steps=4)
    with pytest.raises(_Crash):
        main(config, store, crash_at=2)  # no job end
    # a worker that is not process 0 records nothing and runs no monitor
    assert main(_config(tmp_path, run_name="other", steps=2), store, process_index=1)
    main(config, store)  # the restart runs all 4 steps again
    events, _ = store.read_events("maxtext-run")
    assert [e.kind for e in events].count(EventKind.JOB_END) == 1
    assert store.read_events("other")[0] == []
    calc = goodput.GoodputCalculator("maxtext-run", None, store=store)
    d = calc.get_job_goodput_details()
    assert d["num_runs"] == 2 and d["num_disruptions"] == 1
    assert d["badput_time"][goodput.BadputType.WASTED_PROGRESS_FROM_DISRUPTION] > 0
    assert d["badput_time"][goodput.BadputType.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION] > 0
    assert d["last_productive_step"] == 3
    # recording switched off by MaxText's flag: nothing is written
    off = _config(tmp_path, run_name="off", enable_goodput_recording=False, monitor_goodput=False,
                  steps=1)
    main(off, store)
    assert "off" not in store.list_jobs()
    store.close()


def test_maxtext_flag_mapping(tmp_path):
    tb = str(tmp_path / "tb")
    m = goodput.GoodputMonitor("j", "goodput_j", tb, goodput_upload_interval_seconds=45,
                               monitor_goodput=True, monitor_step_time_deviation=False,
                               store=":memory:")
    assert (m.upload_interval, m.monitoring_enabled, m.include_step_deviation) == (45.0, True, False)
    m.close()
    m = goodput.GoodputMonitor("j", "goodput_j", tb, 30, True, monitor_goodput=False,
                               store=":memory:")
    assert m.monitoring_enabled is False and m.start() is False
    m.close()
    with pytest.raises(ValueError, match="goodput_upload_interval_seconds"):
        goodput.GoodputMonitor("j", "l", tb, 30, goodput_upload_interval_seconds=60, store=":memory:")
    with pytest.raises(ValueError, match="monitor_step_time_deviation"):
        goodput.GoodputMonitor("j", "l", tb, 30, include_step_deviation=True,
                               monitor_step_time_deviation=False, store=":memory:")
    with pytest.raises(ValueError, match="upload_interval"):
        goodput.GoodputMonitor("j", "l", tb, goodput_upload_interval_seconds=0, store=":memory:")
    with pytest.raises(TypeError, match="enable_goodput_recording"):
        goodput.GoodputRecorder("j", "l", True, enable_goodput_recording="yes")
    cfg = _config(tmp_path, goodput_upload_interval_seconds=12, step_deviation_interval_seconds=7)
    gp = goodput.from_maxtext_config(cfg, process_index=0, store=":memory:")
    assert gp.job_name == "maxtext-run" and gp.recorder.logging_enabled
    assert gp.recorder.logger_name == "goodput_maxtext-run"
    assert (gp.monitor.upload_interval, gp.monitor.step_deviation_interval_seconds) == (12.0, 7.0)
    assert gp.monitor.monitor_step_time_deviation and gp.monitor.include_step_deviation
    assert gp.monitor.tensorboard_dir == cfg.tensorboard_dir
    gp.close()
    worker = goodput.from_maxtext_config(vars(cfg), process_index=3, store=":memory:")  # a mapping
    assert worker.monitor is None and not worker.recorder.logging_enabled
    with pytest.raises(ValueError, match="config.run_name"):
        goodput.create_goodput_recorder({"enable_goodput_recording": True}, process_index=0)
    with pytest.raises(ValueError, match="process_index"):
        goodput.create_goodput_recorder(cfg, process_index=-1)
    with pytest.raises(TypeError, match="GoodputEvent"), goodput.maybe_record_goodput(None, "step"):
        pass
    # GCPOptions is accepted (MaxText passes it) and kept
    m = goodput.GoodputMonitor("j", "l", tb, 30, gcp_options=goodput.GCPOptions(project_id="p"),
                               store=":memory:")
    assert m.gcp_options.project_id == "p"
    m.close()


# ------------------------------------------------ MaxText's wrapper vs the reference
def _fixture():
    import json
    import os

    path = os.path.join(os.path.dirname(__file__), "..", "measure", "data", "reference_0_2_3.json")
    with open(path) as f:
        return json.load(f)["scenarios"]["maxtext_wrapper"]


def _maxtext_monitor(monitoring_mod, cls, tb, store, clock, **extra):
    """MaxText's maybe_monitor_goodput: its keyword arguments (plus our store and clock)."""
    kwargs = {
        "job_name": "maxtext", "logger_name": "goodput_maxtext", "tensorboard_dir": tb,
        "upload_interval": 3600, "monitoring_enabled": True, "include_badput_breakdown": True,
        "include_step_deviation": True, "step_deviation_interval_seconds": 3600,
        "gcp_options": monitoring_mod.GCPOptions(enable_gcp_goodput_metrics=False,
                                                 enable_gcp_step_deviation_metrics=False),
        **extra,
    }
    return cls(**kwargs, store=store, clock=clock)


def test_maxtext_wrapper_replay_matches_the_reference_and_its_tensorboard_layout(tmp_path):
    """MaxText's wrapper calls (20 steps, checkpoints, a crash in step 14, a restart from
    step 10) through the drop-in: goodput within 1 pp of ml-goodput-measurement 0.2.3 on the
    same calls (recorded by benchmarks/reference_diff.py), the reference's TensorBoard
    directory and tags."""
    from goodput_jax import monitoring
    from tests.measure.reference_scenarios import breakdown_pct, maxtext_calls, replay_maxtext

    now = [0.0]
    clock = lambda: now[0]
    store = SQLiteStore(str(tmp_path / "goodput.db"))
    calls = maxtext_calls()
    replay_maxtext(goodput, calls, "maxtext", lambda t: now.__setitem__(0, t), store=store,
                   clock=clock)
    # host-side step ends were recorded (our recorder has the method) and change nothing
    evs, _ = store.read_events("maxtext")
    assert sum(e.kind is EventKind.STEP_END for e in evs) == 14 + 10
    calc = goodput.GoodputCalculator("maxtext", "goodput_maxtext", store=store, clock=clock)
    g, badput, last = calc.get_job_goodput(include_badput_breakdown=True)
    ours, ref = breakdown_pct(g, badput), _fixture()
    assert ours["goodput"] == pytest.approx(ref["goodput"], abs=1.0)
    for k in set(ref["badput"]) & set(ours["badput"]):
        assert ours["badput"][k] == pytest.approx(ref["badput"][k], abs=1.0), k
    assert last == 19
    tb = str(tmp_path / "tb")
    mon = _maxtext_monitor(monitoring, monitoring.GoodputMonitor, tb, store, clock,
                           pathway_enabled=False)
    assert mon.start_goodput_uploader()
    mon.stop_goodput_uploader()  # the final upload
    mon.close()
    acc = EventAccumulator(str(tmp_path / "tb" / "goodput"), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"goodput/goodput", "badput/tpu_initialization", "badput/data_loading_sync",
            "badput/training_prep", "badput/program_startup", "badput/data_loading_async",
            "badput/wasted_progress_from_disruption",
            "badput/infrastructure_recovery_from_disruption", "badput/other"} <= tags
    assert acc.Scalars("goodput/goodput")[-1].value == pytest.approx(g, rel=1e-5)
    assert acc.Scalars("badput/tpu_initialization")[-1].value == pytest.approx(
        badput[goodput.BadputType.TPU_INITIALIZATION], rel=1e-5)
    store.close()


def test_maxtext_elastic_path_runs(tmp_path):
    """MaxText's elastic branch: goodput_elastic.ElasticGoodputRecorder and
    monitoring_elastic.ElasticGoodputMonitor, with slice counts, a wait for a slice and a
    re-initialisation (TPU init and training prep inside it count as re-initialisation)."""
    from goodput_jax import goodput_elastic, monitoring, monitoring_elastic

    now = [0.0]
    clock = lambda: now[0]
    store = SQLiteStore(str(tmp_path / "goodput.db"))
    rec = goodput_elastic.ElasticGoodputRecorder("maxtext", "goodput_maxtext", True,
                                                 store=store, clock=clock)

    def at(t, method, *args):
        now[0] = t
        getattr(rec, method)(*args)

    at(0, "record_job_start_time")
    at(0, "record_elastic_slice_counts", 2, 2, 2)
    at(1, "record_tpu_init_start_time")
    at(11, "record_tpu_init_end_time")
    for i in range(10):
        at(11 + i, "record_step_start_time", i)
    at(21, "record_elastic_slice_counts", 1, 2, 1)  # a slice goes down
    at(21, "record_elastic_wait_start_time", "slice_down")
    at(31, "record_elastic_wait_end_time", "slice_down")
    at(31, "record_elastic_reinit_start_time")
    at(31, "record_tpu_init_start_time")
    at(36, "record_tpu_init_end_time")
    at(41, "record_elastic_reinit_end_time")
    for i in range(10, 20):
        at(41 + (i - 10), "record_step_start_time", i)
    at(51, "record_job_end_time")
    rec.close()
    calc = goodput_elastic.ElasticGoodputCalculator("maxtext", "goodput_maxtext", store=store,
                                                    clock=clock)
    g, badput, _ = calc.get_job_goodput(include_badput_breakdown=True)
    B = goodput.BadputType
    # steps 0-8 = 9 s (step 9 runs [20,21), then [21,31) waits: slice down 10 s);
    # re-initialisation [31,41) = 10 s including the TPU init inside it; steps 10-19 = 10 s
    assert badput[B.ELASTIC_SLICE_DOWN] == pytest.approx(100 * 10 / 51)
    assert badput[B.ELASTIC_REINITIALIZATION] == pytest.approx(100 * 10 / 51)
    assert badput[B.TPU_INITIALIZATION] == pytest.approx(100 * 10 / 51)
    assert g == pytest.approx(100 * 20 / 51)
    d = calc.get_job_goodput_details()
    # stepping: 2/2 for [0,21), 1/2 for [21,51) -> (21 + 15) / 51
    assert d["stepping_slice_efficiency"] == pytest.approx(36 / 51)
    mon = _maxtext_monitor(monitoring, monitoring_elastic.ElasticGoodputMonitor,
                           str(tmp_path / "tb"), store, clock, include_slice_efficiency=True)
    assert mon.start_goodput_uploader()
    mon.stop_goodput_uploader()
    mon.close()
    acc = EventAccumulator(str(tmp_path / "tb" / "goodput"), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"goodput/goodput", "badput/elastic_slice_down", "badput/elastic_reinitialization",
            "goodput/stepping_slice_efficiency"} <= tags
    assert acc.Scalars("badput/elastic_slice_down")[-1].value == pytest.approx(100 * 10 / 51,
                                                                               rel=1e-5)
    store.close()


# ------------------------------------------------ checkpoints in MaxText's path (real Orbax)
def _maxtext_checkpoint_manager(path, period, use_async):
    """MaxText 0.2.5's create_orbax_checkpoint_manager: one "items" PyTree handler, a
    fixed-interval save policy, and no Orbax logger (MaxText no longer sets one up)."""
    import orbax.checkpoint as ocp

    return ocp.CheckpointManager(
        path, item_names=("items",),
        item_handlers={"items": ocp.PyTreeCheckpointHandler(use_ocdbt=True, use_zarr3=True)},
        options=ocp.CheckpointManagerOptions(
            create=True, enable_async_checkpointing=use_async,
            save_decision_policy=ocp.checkpoint_managers.FixedIntervalPolicy(interval=period),
            preservation_policy=ocp.checkpoint_managers.LatestN(3)),
        logger=None)


def _maxtext_train_with_checkpoints(config, recorder, ckpt_dir, use_async):
    """MaxText's setup_train_loop / train_loop checkpoint sites: the manager is created
    during accelerator init (and wrapped there, the one added line), restored during training
    preparation, saved through save_checkpoint's call after each due step (the state made
    ready first, as MaxText does), waited for at the end."""
    import orbax.checkpoint as ocp

    with maybe_record_goodput(recorder, GoodputEvent.TPU_INIT):
        mngr = _maxtext_checkpoint_manager(ckpt_dir, config.checkpoint_period, use_async)
        mngr = goodput.maybe_instrument_checkpoint_manager(mngr, recorder)
    with maybe_record_goodput(recorder, GoodputEvent.TRAINING_PREPARATION):
        params = _MODEL.init(jax.random.key(0), jnp.ones((1, 4)))
        state = {"params": params, "opt": _TX.init(params), "step": 0}
        start = 0
        latest = mngr.latest_step()
        if latest is not None:  # load_state_if_possible
            abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, state)
            restored = mngr.restore(latest, args=ocp.args.Composite(
                items=ocp.args.PyTreeRestore(item=abstract)))
            state, start = restored["items"], int(restored["items"]["step"]) + 1
    rng = np.random.default_rng(0)
    for step in range(start, config.steps):
        with maybe_record_goodput(recorder, GoodputEvent.DATA_LOADING):
            x = rng.normal(size=(8, 4)).astype(np.float32)
            batch = {"x": x, "y": x.sum(axis=1, keepdims=True)}
        with maybe_record_goodput(recorder, GoodputEvent.STEP, step):
            (p, o), _ = _train_step((state["params"], state["opt"]), batch)
            state = {"params": p, "opt": o, "step": step}
        if step % config.checkpoint_period == 0 and step not in mngr.all_steps():
            jax.block_until_ready(state)  # MaxText waits for the step before saving
            mngr.save(step, args=ocp.args.Composite(items=ocp.args.PyTreeSave(item=state)),
                      force=False)
    mngr.wait_until_finished()
    mngr.close()
    return mngr


@pytest.mark.filterwarnings("ignore:Sharding info not provided")
@pytest.mark.parametrize("use_async", [False, True])
def test_maxtext_checkpoints_are_checkpoint_badput_through_the_orbax_instrumentation(
        tmp_path, use_async):
    store = SQLiteStore(str(tmp_path / "goodput.db"))
    config = _config(tmp_path, goodput_job_name="ck-job", monitor_goodput=False, steps=7,
                     checkpoint_period=3)
    ckpt = tmp_path / "ckpt"
    rec = goodput.create_goodput_recorder(config, process_index=0, store=store)
    assert rec.job_name == "ck-job"  # MaxText's goodput_job_name
    rec.record_job_start_time()
    first = _maxtext_train_with_checkpoints(config, rec, ckpt, use_async)
    rec.record_job_end_time()
    rec.close()
    # the restart restores step 6 and records the restore
    config2 = _config(tmp_path, goodput_job_name="ck-job", monitor_goodput=False, steps=9,
                      checkpoint_period=3)
    rec2 = goodput.create_goodput_recorder(config2, process_index=0, store=store)
    rec2.record_job_start_time()
    second = _maxtext_train_with_checkpoints(config2, rec2, ckpt, use_async)
    rec2.record_job_end_time()
    rec2.close()
    assert sorted(first.manager.all_steps()) == [0, 3, 6] and second.restore_seconds > 0
    events, _ = store.read_events("ck-job")
    assert [e.step for e in events if e.kind is EventKind.CHECKPOINT_PROGRESS] == [0, 3, 6]
    assert sum(e.kind is EventKind.CHECKPOINT_RESTORE_START for e in events) == 1
    d = goodput.GoodputCalculator("ck-job", None, store=store).get_job_goodput_details()
    save_b = d["badput_time"][goodput.BadputType.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME]
    restore_b = d["badput_time"][goodput.BadputType.UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME]
    # what the wrapper timed around the blocking calls is what the calculator attributes
    assert save_b == pytest.approx(first.save_seconds + second.save_seconds, rel=0.02, abs=2e-3)
    assert restore_b == pytest.approx(second.restore_seconds, rel=0.02, abs=2e-3)
    assert save_b > 0 and restore_b > 0
    store.close()


def test_maybe_instrument_checkpoint_manager_passes_through_when_off(tmp_path):
    import orbax.checkpoint as ocp

    from goodput_jax.integrations.orbax import RecordedCheckpointManager

    mngr = _maxtext_checkpoint_manager(tmp_path / "c", 1, False)
    on = goodput.GoodputRecorder("j", "goodput_j", True, store=":memory:")
    wrapped = goodput.maybe_instrument_checkpoint_manager(mngr, on)
    # MaxText's save_checkpoint dispatches on the manager's class: the proxy keeps it
    assert isinstance(wrapped, ocp.CheckpointManager)
    assert isinstance(wrapped, RecordedCheckpointManager) and wrapped.manager is mngr
    assert not isinstance(wrapped, ocp.checkpoint_managers.CheckpointManagerOptions)
    on.close()
    assert goodput.maybe_instrument_checkpoint_manager(mngr, None) is mngr  # recording off
    off = goodput.GoodputRecorder("j", "goodput_j", False)
    assert goodput.maybe_instrument_checkpoint_manager(mngr, off) is mngr
    assert goodput.maybe_instrument_checkpoint_manager(None, off) is None  # checkpointing off
    mngr.close()
    assert goodput.get_goodput_job_name(_config(tmp_path)) == "maxtext-run"
    assert goodput.get_goodput_job_name(_config(tmp_path, goodput_job_name="g")) == "g"
    with pytest.raises(ValueError, match=r"config.goodput_job_name \(3\)"):
        goodput.get_goodput_job_name(_config(tmp_path, goodput_job_name=3))


@pytest.mark.parametrize("run", range(3))
def test_maxtext_wrapper_with_default_settings_sends_nothing_cloud_monitoring_refuses(
        tmp_path, monkeypatch, run):
    """Acceptance (issue 35): MaxText's wrapper with its default settings (Cloud Monitoring
    on for goodput and step deviation, the step-deviation uploader running, the project
    and zone from the metadata server, the client built by goodput_jax, pointed at the
    rule-enforcing loopback MetricService by ``$GOODPUT_JAX_MONITORING_ENDPOINT``) sends
    no point the service refuses, none is dropped, the final upload is kept, no hang
    metric is created, and the badput sources are Google's. The upload intervals are
    10 ms of real time and the clock moves 0.25 s at every reading, so the uploaders
    meet the 5 s sampling period many times in a run of about a second."""
    pytest.importorskip("grpc")
    pytest.importorskip("google.cloud.monitoring_v3")
    from goodput_jax.measure import cloud_monitoring as cm
    from tests.measure._gce_metadata_server import FakeMetadataServer
    from tests.measure.test_cloud_monitoring import LoopbackMetricService, SteppingClock
    from tests.measure.test_monitoring_rules import GOOGLE_SOURCES, HANG_TYPES

    config = _config(tmp_path, steps=30, goodput_upload_interval_seconds=0.01,
                     step_deviation_interval_seconds=0.01, enable_gcp_goodput_metrics=True,
                     enable_gcp_step_deviation_metrics=True)
    store = SQLiteStore(str(tmp_path / "g.db"))
    clk = SteppingClock(step=0.25)
    with FakeMetadataServer() as md, LoopbackMetricService() as srv:
        monkeypatch.delenv("GCE_METADATA_HOST")
        monkeypatch.setenv("GCE_METADATA_ROOT", md.host)  # google-auth's older name
        monkeypatch.setenv(cm.MONITORING_ENDPOINT_ENV, f"insecure://127.0.0.1:{srv.port}")
        recorder = goodput.create_goodput_recorder(config, process_index=0, store=store,
                                                   clock=clk)
        # MaxText's run(): the monitor's context inside the job's, so the monitor stops
        # (final uploads) before the job end is recorded
        with maybe_record_goodput(recorder, GoodputEvent.JOB), \
                goodput.maybe_monitor_goodput(config, process_index=0, store=store,
                                              clock=clk) as mon:
            train_loop(config, recorder)
        recorder.close()
        exp = mon.cloud_monitoring
    assert mon.gcp_options.project_id == "fake-proj" and exp is not None
    assert srv.refused == [], srv.refused[:3]
    assert exp.errors == 0 and exp.dropped == 0 and exp.held == 0
    w = "compute.googleapis.com/workload/"
    sent = {k[0] for k in srv.points}
    assert {w + "goodput_time", w + "performance", w + "step_time_deviation"} <= sent
    assert not sent & HANG_TYPES  # no hang threshold: no hang metric, no custom metric
    sources = {dict(k[1])["badput_source"] for k in srv.points if k[0] == w + "badput_time"}
    assert sources == GOOGLE_SOURCES
    [steps] = [pts for k, pts in srv.points.items() if k[0] == w + "max_productive_steps"]
    # the final upload, after the training loop, was kept (the last step counts as
    # productive once something closes it: the job end, recorded after the monitor stops)
    assert steps[-1][1] >= config.steps - 2
    store.close()
