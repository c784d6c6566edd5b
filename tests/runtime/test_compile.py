"""Compile time from jax.monitoring: recorded per compilation, recompiles flagged, listener idle
without a recorder."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from goodput_jax import goodput, runtime
from goodput_jax.measure.calculator import BadputType, GoodputCalculator
from goodput_jax.measure.stores.sqlite import SQLiteStore
from goodput_jax.runtime.compile import (
    BACKEND_COMPILE_EVENT,
    LOWER_EVENT,
    TRACE_EVENT,
    chain_duration,
)
from tests.runtime._helpers import events, run_snippet


def test_chain_duration_hand_computed():
    # trace [1.0, 1.2] with a nested trace, lowering [1.21, 1.3], compile [1.3, 2.0]
    pend = [(1.0, 1.2), (1.05, 1.1), (1.21, 1.3)]
    assert chain_duration(pend, 1.3, 2.0) == pytest.approx(1.0)
    # an eval_shape trace long before is not part of this compile
    assert chain_duration([(0.0, 0.1), *pend], 1.3, 2.0) == pytest.approx(1.0)
    assert chain_duration([], 5.0, 5.25) == pytest.approx(0.25)


def test_recompile_at_the_shape_change_matches_jax_monitoring(tmp_path):
    """The quickstart loop, batch rows halve at step k=6: one recompile at step 6."""
    k = 6
    reported: list[tuple[str, float, float, float, str]] = []

    def spy(event, start, end, **kw):
        if event in (TRACE_EVENT, LOWER_EVENT, BACKEND_COMPILE_EVENT):
            reported.append((event, start, end, end - start, str(kw.get("fun_name", ""))))

    jax.monitoring.register_event_time_span_listener(spy)
    try:
        ns = run_snippet(tmp_path, size=128, num_steps=10, shapes=f"lambda i: N if i < {k} else N // 2")
    finally:
        jax.monitoring.unregister_event_time_span_listener(spy)
    comps = events(ns, "compilation")
    starts = {e.step: e.timestamp for e in events(ns, "step_start")}
    dev_end = {e.step: e.timestamp for e in events(ns, "step_device_end")}
    step_comps = [e for e in comps if e.payload["name"] == "jit(train_step)"]
    assert [e.payload["recompile"] for e in step_comps] == [False, True]
    first, re = step_comps
    assert starts[0] <= first.timestamp <= dev_end[0]
    assert starts[k] <= re.timestamp <= dev_end[k]  # the recompile happened in step k
    assert [e for e in comps if e.payload["recompile"]] == [re]  # and it is the only one
    # what jax.monitoring itself reported for that recompile: trace + lowering + compile
    in_k = [r for r in reported if starts[k] <= r[1] and r[2] <= re.timestamp + 1e-6]
    assert {r[0] for r in in_k} == {TRACE_EVENT, LOWER_EVENT, BACKEND_COMPILE_EVENT}
    # the time those spans cover: a union, since the step's trace nests the traces, lowerings
    # and compiles of the small programs it runs eagerly (convert_element_type): a sum of
    # their durations counts those twice (under load they grow, and the sum ran 25% over)
    covered, reach = 0.0, -float("inf")
    for _event, start, end, _d, _name in sorted(in_k, key=lambda r: r[1]):
        covered += max(0.0, end - max(start, reach))
        reach = max(reach, end)
    # at least that, at most from the step function's trace to the compile's end (the host's
    # work between the phases counts: it is the same jit call; it grows under load)
    trace_start = min(r[1] for r in in_k if r[0] == TRACE_EVENT and r[4] == "train_step")
    assert covered - 1e-3 <= re.payload["duration_s"] <= re.timestamp - trace_start + 1e-3
    assert ns["steps"]._att.recompilations == 1

    # the calculator: measured compiles are program startup, the recompile its own bucket,
    # taken out of step k's device time: the part of the compile while the device still ran
    # step k-1 (dispatched ahead) was not lost
    calc = GoodputCalculator("run1", "goodput_run1", store=ns["_store"])
    bad = calc.get_job_goodput_details()["badput_time"]
    lost = min(re.payload["duration_s"], re.timestamp - max(starts[k], dev_end[k - 1]))
    assert bad[BadputType.RECOMPILATION] == pytest.approx(lost, rel=0.05)
    # the first step's compile; the eager ops compiled inside training_prep stay training prep
    assert bad[BadputType.PROGRAM_STARTUP] == pytest.approx(first.payload["duration_s"], rel=0.05)


def test_listener_idle_without_a_recorder_and_detach(tmp_path):
    import gc

    gc.collect()  # step recorders earlier tests dropped without close() detach when collected
    store = SQLiteStore(str(tmp_path / "c.db"))
    rec = goodput.GoodputRecorder("c", "c", logging_enabled=True, store=store)
    f = jax.jit(lambda x: jnp.sin(x) * 3)
    att = runtime.attach(rec)
    lst = runtime.listener()
    assert lst.installed and runtime.attached(rec) is att and runtime.attach(rec) is att
    f(np.ones(3, np.float32)).block_until_ready()
    assert att.compilations >= 1
    att.detach()
    seen = lst.events_seen
    n = att.compilations
    f(np.ones(5, np.float32)).block_until_ready()  # compiles again, nobody attached
    assert lst.events_seen == seen and att.compilations == n
    rec.close()
    evs, _ = store.read_events("c")
    assert sum(e.kind.value == "compilation" for e in evs) == n
    store.close()


def test_attach_checks_its_argument_and_skips_disabled_recorders():
    with pytest.raises(TypeError, match=r"recorder \(42\) must be a GoodputRecorder"):
        runtime.attach(42)
    off = goodput.GoodputRecorder("off", "off")
    att = runtime.attach(off)
    assert runtime.attached(off) is None and att.compilations == 0


def test_compile_callbacks_run_after_each_recorded_compile_until_removed(tmp_path):
    """A callback runs once per compile the attachment records (on the compiling thread,
    after the compilation is counted), not for another thread's compile, and not once
    removed; a callback that is not callable is refused."""
    import threading

    rec = goodput.GoodputRecorder("cb", "cb", logging_enabled=True, store=f"sqlite:///{tmp_path / 'cb.db'}")
    att = runtime.attach(rec)
    seen = []

    def callback():
        seen.append((threading.get_ident(), att.compilations))

    with pytest.raises(TypeError, match=r"callback \(3\) must be callable"):
        att.add_compile_callback(3)
    att.add_compile_callback(callback)
    assert att.compile_callbacks == (callback,)
    jax.jit(lambda x: jnp.sin(x) * 3)(np.ones(5, np.float32)).block_until_ready()
    th = threading.Thread(target=lambda: jax.jit(lambda x: jnp.sin(x) * 4)(
        np.ones(5, np.float32)).block_until_ready())
    th.start()
    th.join()
    assert seen == [(threading.get_ident(), 1)]
    att.remove_compile_callback(callback)
    att.remove_compile_callback(callback)  # idempotent
    jax.jit(lambda x: jnp.sin(x) * 5)(np.ones(5, np.float32)).block_until_ready()
    assert len(seen) == 1 and att.compilations == 2
    att.detach()
    rec.close()


def test_only_the_attaching_threads_compiles_by_default(tmp_path):
    import threading

    store = SQLiteStore(str(tmp_path / "t.db"))
    rec = goodput.GoodputRecorder("t", "t", logging_enabled=True, store=store)
    rec_all = goodput.GoodputRecorder("t", "t", logging_enabled=True, store=store)
    main_only, everywhere = runtime.attach(rec), runtime.attach(rec_all, all_threads=True)
    bg = jax.jit(lambda x: jnp.cos(x) - 1)
    th = threading.Thread(target=lambda: bg(np.ones(7, np.float32)).block_until_ready())
    th.start()
    th.join()
    # a background compile (e.g. a model fit on a worker thread) does not stall training
    assert main_only.compilations == 0 and everywhere.compilations == 1
    jax.jit(lambda x: jnp.cos(x) + 2)(np.ones(7, np.float32)).block_until_ready()
    assert main_only.compilations == 1 and everywhere.compilations == 2
    main_only.detach()
    everywhere.detach()
    rec.close()
    rec_all.close()
    store.close()


def test_unknown_events_and_missing_fields_are_harmless(tmp_path):
    """Events a JAX version renames or adds are ignored; a compile event without its
    ``fun_name`` still counts (emitted here through jax.monitoring's public API)."""
    store = SQLiteStore(str(tmp_path / "u.db"))
    rec = goodput.GoodputRecorder("u", "u", logging_enabled=True, store=store)
    with runtime.attach(rec) as att:
        jax.monitoring.record_event_time_span("/jax/core/compile/some_future_event", 1.0, 2.0)
        jax.monitoring.record_event_duration_secs("/jax/core/compile/some_future_event", 1.0)
        assert att.compilations == 0
        jax.monitoring.record_event_time_span(TRACE_EVENT, 100.0, 100.2, fun_name="f")
        jax.monitoring.record_event_time_span(BACKEND_COMPILE_EVENT, 100.21, 100.5)
        assert att.compilations == 1 and att.compile_seconds == pytest.approx(0.5)
    rec.close()
    evs, _ = store.read_events("u")
    (c,) = [e for e in evs if e.kind.value == "compilation"]
    assert c.payload == {"duration_s": pytest.approx(0.5), "recompile": False, "name": "<unknown>"}
    assert c.timestamp == pytest.approx(100.5)
    store.close()


@pytest.mark.parametrize("stall", [False, True], ids=["cpu-burner", "stalled-between-phases"])
def test_compile_time_is_the_first_calls_host_time_under_load(tmp_path, stall):
    """The first call of a new program returns after tracing, lowering and compiling it (and
    dispatching it): the recorded compile time is that host time, beside a process burning a
    CPU core; and also when the host is held up between tracing and lowering (here a
    jax.monitoring listener that sleeps 0.12 s when the trace ends: what load does, or a
    large program's processing: 0.18 s between the phases at 1,000 ops). A chain cut at a
    50 ms gap lost the whole trace there (0.385 s recorded against 0.515 s of host time)."""
    import time

    from tests.runtime._helpers import CpuBurner

    def compile_probe(v):
        for _ in range(6):
            v = jnp.tanh(v @ v.T) + jnp.sin(v)
        return v.sum()

    def held_up(event, start, end, **kw):
        if event == TRACE_EVENT and kw.get("fun_name") == "compile_probe":
            time.sleep(0.12)

    store = SQLiteStore(str(tmp_path / "l.db"))
    rec = goodput.GoodputRecorder("l", "l", logging_enabled=True, store=store)
    f = jax.jit(compile_probe)
    x = np.ones((64, 64), np.float32)
    if stall:
        jax.monitoring.register_event_time_span_listener(held_up)
    try:
        with CpuBurner(), runtime.attach(rec):
            t0 = time.time()
            out = f(x)
            host = time.time() - t0
            out.block_until_ready()
    finally:
        if stall:
            jax.monitoring.unregister_event_time_span_listener(held_up)
    rec.close()
    evs, _ = store.read_events("l")
    (c,) = [e for e in evs if e.kind.value == "compilation" and e.payload["name"] == "jit(compile_probe)"]
    recorded = c.payload["duration_s"]
    # the call's own work before the trace and after the compile (argument handling, the
    # executable's wrapper, the dispatch) is the rest: milliseconds, more under load
    assert host - max(0.03, 0.1 * host) <= recorded <= host + 1e-3, (recorded, host)
    store.close()
