"""StepRecorder acceptance: the quickstart loop, dispatched asynchronously, reports the device's
step time and the device's idle time; a synchronous loop reports what the plain recorder does."""

from __future__ import annotations

import contextlib
import logging
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from goodput_jax import goodput, runtime
from goodput_jax.measure.calculator import BadputType, GoodputCalculator
from goodput_jax.measure.stores.sqlite import SQLiteStore
from tests.runtime._helpers import (
    CpuBurner,
    device_busy,
    events,
    overlap,
    py_load,
    queued_step,
    run_snippet,
    synced_loop_truth,
    trace_options,
    true_step_time,
)

SIZE = 320  # a ~5-10 ms step on a CPU core
#: timing checks run up to this many times and pass on the first clean attempt: a shared
#: 2-core machine can stall any thread for milliseconds; a wrong measurement fails them all
ATTEMPTS = 3


def _attempts(check, tmp_path):
    errors = []
    for i in range(ATTEMPTS):
        d = tmp_path / f"try{i}"
        d.mkdir()
        try:
            return check(d)
        except AssertionError as e:
            errors.append(str(e).splitlines()[0])
    pytest.fail(f"all {ATTEMPTS} attempts failed: {errors}")


def _truth(ns) -> float:
    """True device step time of the snippet's step, measured the plain way (block_until_ready)."""
    batch = np.random.default_rng(0).normal(size=(SIZE, SIZE)).astype("float32")
    return true_step_time(ns["train_step"], ns["state"], batch)


def _device_gaps(ns) -> tuple[dict, dict]:
    starts = {e.step: e.timestamp for e in events(ns, "step_start")}
    ends = {e.step: e.timestamp for e in events(ns, "step_device_end")}
    return starts, ends


def test_async_quickstart_loop_reports_device_step_time(tmp_path):
    """Loading overlaps the step (the host runs ahead): step time = device time.

    The truth is a ``jax.profiler`` trace of the same run (the XLA runtime's execution
    events, not goodput_jax): the recorded steps 1..n-1 add up to the device's busy time
    between step 0's device end and the last step's, and each step's share of it is the
    device's step time (so a shared, loaded CPU slows both alike)."""
    _attempts(_check_async, tmp_path)


def _check_async(tmp_path):
    n = 60
    trace = tmp_path / "trace"
    jax.profiler.start_trace(str(trace))
    try:
        ns = run_snippet(tmp_path, size=SIZE, load_s=0.0, num_steps=n, name="async")
    finally:
        jax.profiler.stop_trace()
    busy = device_busy(trace)
    starts, ends = _device_gaps(ns)
    assert sorted(ends) == list(range(n)) and ns["steps"].observed == n
    # the host did not wait for the device: most steps were dispatched while the previous one
    # was still running
    ahead = [starts[i] < ends[i - 1] for i in range(2, n)]
    assert sum(ahead) > 0.6 * len(ahead), ahead
    calc = GoodputCalculator("run1", "goodput_run1", store=ns["_store"])
    dev = calc.get_step_deviation()
    recorded = float(np.sum(dev.step_times[dev.steps >= 1]))  # step 0 is the compile
    device = overlap(busy, ends[0], ends[n - 1])
    # readiness is observed with some jitter, which moves time between neighbouring steps but
    # not out of them; margin: 10 %, plus 0.2 ms a step for the runtime's hand-over from one
    # execution to the next queued one (idle in the trace, the dispatched step's for the
    # recorder). Host-timed steps (dispatch) would be a few percent of it.
    assert recorded == pytest.approx(device, rel=0.10, abs=2e-4 * n), (recorded, device)


@pytest.mark.parametrize("factor", [8.0, 0.5])
def test_data_loading_badput_is_the_device_idle_time(tmp_path, factor):
    """Data-loading badput is the time the device sat idle in loading spans, as a
    ``jax.profiler`` trace of the same run shows it (not goodput_jax: the XLA runtime's own
    execution events). A loader that blocks 8x the step: the device idles ~7 steps per step.
    A loader at half the step overlaps it: near-zero badput on a quiet machine; on a loaded
    one the device idles whenever the host was held up, and the trace says how long."""
    _attempts(lambda d: _check_loading(d, factor), tmp_path)


def _check_loading(tmp_path, factor):
    probe = run_snippet(tmp_path, size=SIZE, load_s=0.0, num_steps=3, name="probe")
    load = factor * _truth(probe)
    n = 25
    trace = tmp_path / "trace"
    jax.profiler.start_trace(str(trace))
    try:
        ns = run_snippet(tmp_path, size=SIZE, load_s=load, num_steps=n, name=f"load{factor}")
    finally:
        jax.profiler.stop_trace()
    busy = device_busy(trace)
    calc = GoodputCalculator("run1", "goodput_run1", store=ns["_store"])
    bad = calc.get_job_goodput_details()["badput_time"]
    evs, _ = ns["_store"].read_events("run1")
    dl = [e.timestamp for e in evs if e.kind.value.startswith("data_loading")]
    spans = list(zip(dl[::2], dl[1::2], strict=True))
    loads = sum(b - a for a, b in spans[1:])
    # the first batch is loaded before step 0 (device idle): counted, but not part of the test
    measured = bad[BadputType.DATA_LOADING] - (spans[0][1] - spans[0][0])
    idle = sum((b - a) - overlap(busy, a, b) for a, b in spans[1:])
    if factor > 1:
        assert idle > 0.5 * loads  # the loader really kept the device idle
    # margin: 20 % of the loading, plus 1 ms a step: a device end is seen when a host thread
    # runs, and on a loaded machine a woken thread waits for a CPU (up to ~6 ms a step at a
    # load average of 13 on 2 cores); the trace also counts the runtime's hand-over from one
    # execution to the next queued one as idle. A wrong rule is off by most of the loading:
    # all of it (0.5: loads taken as idle) or ~7/8 of it (8: loads taken as overlapped).
    assert measured == pytest.approx(idle, abs=0.20 * loads + 1e-3 * n), (measured, idle, loads)


def test_synchronous_loop_numbers_unchanged(tmp_path):
    """A loop that syncs every step (``float(loss)``): the StepRecorder's loading badput is the
    host's loading time, and its step times lie between the device's busy time in each step
    (a ``jax.profiler`` trace of the same run) and what the host measured around each call
    (which adds the dispatch, the wake-up after the device finished, and on a loaded machine
    any time the host thread waited for a CPU)."""
    _attempts(_check_sync, tmp_path)


def _check_sync(tmp_path):
    host_store, dev_store = SQLiteStore(str(tmp_path / "a.db")), SQLiteStore(str(tmp_path / "b.db"))
    a = goodput.GoodputRecorder("s", "s", logging_enabled=True, store=host_store)
    b = goodput.GoodputRecorder("s", "s", logging_enabled=True, store=dev_store)
    steps = runtime.StepRecorder(b, compile_times=False)
    ns = run_snippet(tmp_path, size=SIZE, load_s=0.0, num_steps=2, name="warm")  # compiled step
    train_step, state = ns["train_step"], ns["state"]
    x = np.random.default_rng(1).normal(size=(SIZE, SIZE)).astype("float32")
    t = true_step_time(train_step, state, x)
    a.record_job_start_time()
    b.record_job_start_time()
    jax.profiler.start_trace(str(tmp_path / "trace"))
    try:
        for step in range(25):
            with a.data_loading(), b.data_loading():
                time.sleep(t)
                batch = x
            with a.step(step):  # host-side start and end around a synchronous step
                state, metrics = steps(step, train_step, state, batch)
                float(metrics["loss"])  # the loop synchronises every step
        steps.finish()
    finally:
        jax.profiler.stop_trace()
    busy = device_busy(tmp_path / "trace")
    a.record_job_end_time()
    b.record_job_end_time()
    a.close()
    b.close()
    evs, _ = host_store.read_events("s")
    st = {e.step: e.timestamp for e in evs if e.kind.value == "step_start"}
    en = {e.step: e.timestamp for e in evs if e.kind.value == "step_end"}
    host_steps = [en[i] - st[i] for i in range(25)]
    dl_starts = [e.timestamp for e in evs if e.kind.value == "data_loading_start"]
    dl_ends = [e.timestamp for e in evs if e.kind.value == "data_loading_end"]
    loading = sum(e - s for s, e in zip(dl_starts, dl_ends, strict=True))
    device = sum(overlap(busy, st[i], en[i]) for i in range(25))
    cb = GoodputCalculator("s", "s", store=dev_store)
    db_ = cb.get_job_goodput_details()
    # 5 % slack on the host side for the clock reads between the two recorders' events; 10 %
    # on the device side for the hand-over from the dispatch to the execution
    assert 0.9 * device <= db_["productive_time"] <= 1.05 * sum(host_steps), (
        device, db_["productive_time"], sum(host_steps))
    med = cb.get_step_deviation().median
    assert med <= 1.05 * statistics.median(host_steps), (med, statistics.median(host_steps))
    # the device was idle through every load (the host had waited for the step before it)
    assert db_["badput_time"][BadputType.DATA_LOADING] == pytest.approx(loading, rel=0.10)


@pytest.mark.parametrize("burner", [False, True], ids=["quiet", "cpu-burner"])
def test_python_heavy_loader_synced_every_step(tmp_path, burner):
    """A loader that runs ~6 ms of Python holding the GIL, and ``float(loss)`` after every
    step (issue 27, scenario 2), on a quiet machine and beside a process burning a core.

    The host waited for each step before it loaded the next batch, so: each device end lies
    before the next load starts; every load is device-idle time (data-loading badput = the
    loads); and a step lasts at most what the host waited for it (dispatch to ``float``'s
    return). These follow from the loop's order, whatever the machine's load. Without the
    training thread's readiness hook, about half the device ends were stamped at the next
    step's start (the watcher thread got the GIL or a CPU only then): a third to two thirds
    of the loading counted as step time, steps +30-100 %.

    Against a ``jax.profiler`` trace of the same run (issue 35's acceptance): goodput within
    1 pp and the mean step time within 3 % of the device's. Before, the steps the CPU client
    ran before its dispatch returned were recorded only after the training thread woke the
    watcher (``test_a_step_ready_when_its_call_returns_is_recorded_then``): +3-12 % step time
    at a load average of 9."""
    _attempts(lambda d: _check_python_heavy(d, burner), tmp_path)


def _check_python_heavy(tmp_path, burner):
    n, load = 30, 0.006
    warm = run_snippet(tmp_path, size=SIZE, load_s=0.0, num_steps=2, name="warm")
    train_step, state = warm["train_step"], warm["state"]
    x = np.random.default_rng(2).normal(size=(SIZE, SIZE)).astype("float32")
    store = SQLiteStore(str(tmp_path / "py.db"))
    rec = goodput.GoodputRecorder("py", "py", logging_enabled=True, store=store)
    host, dispatch, synced, loads = [], [], [], []
    with CpuBurner() if burner else contextlib.nullcontext():
        jax.profiler.start_trace(str(tmp_path / "trace"), profiler_options=trace_options())
        try:
            rec.record_job_start_time()
            t_start = time.time()
            steps = runtime.StepRecorder(rec, compile_times=False)
            recorded = steps.wrap(train_step)
            for i in range(n):
                a = time.time()
                with rec.data_loading():
                    py_load(load)
                    batch = x
                b = time.time()
                state, metrics = recorded(i, state, batch)
                float(metrics["loss"])  # the host syncs every step
                synced.append(time.time())
                host.append(synced[-1] - b)
                dispatch.append(b)
                loads.append((a, b))
            steps.close()
            rec.record_job_end_time()
            t_end = time.time()
        finally:
            jax.profiler.stop_trace()
    rec.close()
    evs, _ = store.read_events("py")
    ends = {e.step: e.timestamp for e in evs if e.kind.value == "step_device_end"}
    dl_starts = [e.timestamp for e in evs if e.kind.value == "data_loading_start"]
    dl_ends = [e.timestamp for e in evs if e.kind.value == "data_loading_end"]
    assert sorted(ends) == list(range(n)) and len(dl_starts) == n
    # a step whose readiness hook was off (it backs off after a step it did not see ready
    # before the next start) may be stamped late: allow one in ten
    late = [i for i in range(n - 1) if ends[i] > dl_starts[i + 1]]
    assert len(late) <= (n - 1) // 10, (late, steps.hook_claims)
    loads_s = sum(e - s for s, e in zip(dl_starts, dl_ends, strict=True))
    calc = GoodputCalculator("py", "py", store=store)
    det = calc.get_job_goodput_details()
    assert det["badput_time"][BadputType.DATA_LOADING] == pytest.approx(loads_s, rel=0.10)
    dev = calc.get_step_deviation()
    # 5 % over the host's waits for clock reads between the loop's timer and the recorder's,
    # beyond what the late stamps allowed above reach into the next load (each one up to a
    # whole load: three of them were +10 % in one CI run)
    into_load = sum(min(ends[i], dl_ends[i + 1]) - dl_starts[i + 1] for i in late)
    assert float(np.sum(dev.step_times)) - into_load <= 1.05 * sum(host), \
        (dev.step_times, host, late)
    # ... and most of each wait was the device's work (dispatch and wake-up are microseconds;
    # a preempted host only makes the wait longer)
    assert float(np.sum(dev.step_times)) >= 0.3 * sum(host)
    store.close()
    truth = synced_loop_truth(device_busy(tmp_path / "trace"), dispatch, synced, loads,
                              t_end - t_start)
    goodput_pct = 100 * det["productive_time"] / det["total_time"]
    step_s = float(np.mean(dev.step_times[dev.steps >= 1]))
    # plus the host's stalls: the time no host thread ran after the device's end beyond
    # the usual wake-up (0 on a quiet machine, and beside one burner; 10-20 pp of goodput
    # in a full-suite run at a load average of 10-20 on 2 cores)
    stall = truth["host_stall_s"]
    tol = 1.0 + 100 * stall / (t_end - t_start)
    assert goodput_pct == pytest.approx(truth["goodput"], abs=tol), \
        (goodput_pct, truth["goodput"], stall)
    assert abs(step_s - truth["step_s"]) <= 0.03 * truth["step_s"] + stall / (n - 1), \
        (step_s, truth["step_s"], stall)


def test_a_step_ready_when_loading_starts_ends_before_the_load(tmp_path):
    """Under a profiler (the readiness hook leaves the thread alone), a Python-heavy loader
    and ``float(loss)`` every step: each step's device end still lies before the next load,
    because the StepRecorder records its ready steps at the loading span's start (the
    recorder's span-start listener). Before, the watcher thread, woken with the training
    thread at the device's end, recorded 28-31 % of them late, once the loader let go of
    the GIL (up to a switch interval, 5 ms, into the load); with a poll of the watcher's
    own step only, 7-14 % (more on CI) were still late: those the watcher had not taken up
    (580 steps each, quiet and beside CPU burners). The order checks hold whatever the
    load."""
    import sys

    def check(d):
        n = 30
        warm = run_snippet(d, size=SIZE, load_s=0.0, num_steps=2, name="warm")
        train_step, state = warm["train_step"], warm["state"]
        x = np.random.default_rng(4).normal(size=(SIZE, SIZE)).astype("float32")
        store = SQLiteStore(str(d / "prof.db"))
        rec = goodput.GoodputRecorder("prof", "prof", logging_enabled=True, store=store)
        rec.record_job_start_time()
        steps = runtime.StepRecorder(rec, compile_times=False)
        recorded = steps.wrap(train_step)
        profiled: list = []
        sys.setprofile(lambda frame, event, arg: profiled.append(event) if len(profiled) < 8 else None)
        try:
            for i in range(n):
                with rec.data_loading():
                    py_load(0.006)
                state, metrics = recorded(i, state, x)
                float(metrics["loss"])
        finally:
            sys.setprofile(None)
        steps.close()
        rec.record_job_end_time()
        rec.close()
        evs, _ = store.read_events("prof")
        store.close()
        ends = {e.step: e.timestamp for e in evs if e.kind.value == "step_device_end"}
        dl = [e.timestamp for e in evs if e.kind.value == "data_loading_start"]
        assert profiled and steps.hook_claims == 0  # the user's profiler was left in place
        assert sorted(ends) == list(range(n))
        late = [i for i in range(n - 1) if ends[i] > dl[i + 1]]
        # the span poll also records the steps the watcher has not taken up yet (a stalled
        # watcher thread on a loaded machine: CI saw 3-7 of 29 late before): 0 of 2320 late
        # in 80 runs, quiet and beside a CPU burner; one is allowed
        assert len(late) <= 1, (late, steps.span_claims)
        assert steps.span_claims >= 1, steps.span_claims

    _attempts(check, tmp_path)


def test_a_step_ready_when_its_call_returns_is_recorded_then(tmp_path):
    """A step whose call returns once the device finished it (a runtime that executes the
    program before returning: the CPU client does so for some steps, and then returns
    50-100 us after the device's end on a loaded machine) is recorded right there, before
    the training thread runs on, whoever holds the GIL next: here under a profiler (no
    readiness hook) and with Python-heavy work after the call and no span to poll at.
    Before, the watcher thread recorded it once it got the GIL (up to a switch interval,
    5 ms, into the Python that follows) or, with the hook, after waking the watcher (a
    woken thread can take the training thread's CPU first: 75 us median at a load of 9 on
    2 cores, the larger part of the step time's excess over a profiler trace)."""
    import sys

    n = 20
    warm = run_snippet(tmp_path, size=SIZE, load_s=0.0, num_steps=2, name="warm")
    train_step, state = warm["train_step"], warm["state"]
    x = np.random.default_rng(5).normal(size=(SIZE, SIZE)).astype("float32")
    store = SQLiteStore(str(tmp_path / "sync.db"))
    rec = goodput.GoodputRecorder("sync", "sync", logging_enabled=True, store=store)
    rec.record_job_start_time()
    seen: list = []

    def synchronous_step(w, xb):
        out = train_step(w, xb)
        jax.block_until_ready(out)
        seen.append(time.time())  # the device is done: its end lies before this
        return out

    steps = runtime.StepRecorder(rec, compile_times=False)
    recorded = steps.wrap(synchronous_step)
    returned = []
    sys.setprofile(lambda frame, event, arg: None)
    try:
        for i in range(n):
            state, _m = recorded(i, state, x)
            returned.append(time.time())
            py_load(0.003)  # Python holding the GIL, no badput span
    finally:
        sys.setprofile(None)
    steps.close()
    rec.record_job_end_time()
    rec.close()
    evs, _ = store.read_events("sync")
    store.close()
    ends = {e.step: e.timestamp for e in evs if e.kind.value == "step_device_end"}
    assert sorted(ends) == list(range(n))
    assert steps.ready_claims >= n - 2, (steps.ready_claims, steps.hook_claims)
    late = [i for i in range(n) if not seen[i] <= ends[i] <= returned[i]]
    assert not late, [(ends[i] - seen[i], returned[i] - seen[i]) for i in late]


def test_readiness_hook_backs_off_and_leaves_profilers_alone(tmp_path):
    """The training thread's readiness hook removes itself once its step is seen ready; a loop
    that runs ahead of the device tries it in fewer steps (1, 2, 4, ... skipped); a profile
    function the user set is left in place; close() removes a pending hook."""
    store = SQLiteStore(str(tmp_path / "h.db"))
    rec = goodput.GoodputRecorder("h", "h", logging_enabled=True, store=store)
    warm = run_snippet(tmp_path, size=SIZE, load_s=0.0, num_steps=2, name="warm")
    train_step, state = warm["train_step"], warm["state"]
    x = np.random.default_rng(3).normal(size=(SIZE, SIZE)).astype("float32")
    import sys

    with runtime.StepRecorder(rec, compile_times=False) as steps:
        step_fn = steps.wrap(train_step)
        for i in range(5):  # waits for every step: each hook ends at the sync
            state, m = step_fn(i, state, x)
            float(m["loss"])
            assert sys.getprofile() is None
        installs = 0
        for i in range(5, 45):  # dispatches ahead, never waits: the hook backs off
            state, m = step_fn(i, state, x)
            installs += steps._hooked is not None
        jax.block_until_ready(state)
        # Tries at steps 5, 7, 10, 15, 24, 41 when no step is ready at its hook; a step that
        # is (the training thread stalled while the device ran: load decides how often, and
        # CI once saw 9 installs) tries again at the next one. The exact sequence is checked
        # with gates in test_span_poll.py; here, on real arrays, that the hook backs off.
        assert installs < 40, installs
        seen: list = []

        def user_profiler(frame, event, arg):
            seen.append(event)

        sys.setprofile(user_profiler)
        try:
            for i in range(45, 48):
                state, m = step_fn(i, state, x)
                float(m["loss"])
                assert sys.getprofile() is user_profiler
        finally:
            sys.setprofile(None)
        assert seen
        state, m = step_fn(48, state, x)
        if steps._hooked is not None:
            assert sys.getprofile() is steps._hooked
    assert sys.getprofile() is None  # close() removed it
    assert steps.observed == 49
    rec.close()
    store.close()


def test_donated_state_and_disabled_recorder(tmp_path, caplog):
    store = SQLiteStore(str(tmp_path / "d.db"))
    rec = goodput.GoodputRecorder("d", "d", logging_enabled=True, store=store)

    @jax.jit
    def step_fn(s, x):
        s = jnp.tanh(s @ x)
        return s, jnp.sum(s)

    donating = jax.jit(step_fn, donate_argnums=0)
    s = jnp.ones((64, 64))
    x = jnp.full((64, 64), 1e-2)
    with runtime.StepRecorder(rec, compile_times=False) as steps:
        for i in range(5):
            s, _loss = steps(i, donating, s, x)  # state donated to the next step, loss is not
        assert steps.finish(timeout=30) and steps.observed == 5 and steps.unobserved == 0
        with caplog.at_level(logging.WARNING, logger="goodput_jax.runtime.steps"):
            for i in range(5, 8):
                steps.start(i)
                s, _loss = donating(s, x)
                steps.track(i, s)  # only the donated state: may become unwatchable
            s.block_until_ready()
            steps.finish(timeout=30)
        assert steps.observed + steps.unobserved == 8
        if steps.unobserved:
            assert "donated" in caplog.text
    rec.close()
    evs, _ = store.read_events("d")
    # each of the first five steps has its device end (in the store's write order the training
    # thread's readiness hook can come before the watcher's records of earlier steps; the
    # engine's rule 19 reads a device end as the end of every earlier step too)
    ends = sorted(e.step for e in evs if e.kind.value == "step_device_end")
    assert ends[:5] == list(range(5)), ends
    store.close()

    off = runtime.StepRecorder(goodput.GoodputRecorder("off", "off"))
    assert off(0, lambda v: v * 2, 3) == 6 and off.tracked == 0 and off._thread is None
    with pytest.raises(TypeError, match=r"recorder \('x'\) must be a GoodputRecorder"):
        runtime.StepRecorder("x")


def test_short_path_keeps_event_order_drops_and_errors(tmp_path):
    """After the first two steps, ``steps(i, ...)`` appends step starts straight to the
    recorder's queue: they stay in order with the training thread's other events, a full
    queue counts a dropped event, and a bad step number still raises a clear error."""
    store = SQLiteStore(str(tmp_path / "o.db"))
    rec = goodput.GoodputRecorder("o", "o", logging_enabled=True, store=store)
    fn = jax.jit(lambda v: v + 1.0)
    v = jnp.zeros(4)
    with runtime.StepRecorder(rec, compile_times=False) as steps:
        for i in range(6):
            with rec.data_loading():
                pass
            v = steps(i, fn, v)
        assert steps._sink is not None  # the short path is on
        with pytest.raises(ValueError, match=r"step \(-1\)"):
            steps(-1, fn, v)
        assert steps.finish(timeout=30) and steps.tracked == 6 and steps.observed == 6
    rec.close()
    evs, _ = store.read_events("o")
    host = [(e.kind.value, e.step) for e in evs if e.kind.value != "step_device_end"]
    want = []
    for i in range(6):
        want += [("data_loading_start", None), ("data_loading_end", None), ("step_start", i)]
    assert host == want
    ts = [e.timestamp for e in evs if e.kind.value != "step_device_end"]
    assert ts == sorted(ts)
    store.close()

    full = goodput.GoodputRecorder("f", "f", logging_enabled=True, max_queue=1, flush_interval=60,
                                   store=SQLiteStore(str(tmp_path / "f.db")))
    steps = runtime.StepRecorder(full, compile_times=False)
    steps._short_path()  # as after the first steps
    full._q.append((0, 0.0, None, None, None))  # the writer has not drained: the queue is full
    # the step start is dropped (and the device end too, when the training thread's readiness
    # hook sees the step ready before the queue drained)
    before = full.dropped_count
    steps(7, fn, v)
    assert before + 1 <= full.dropped_count <= before + 2
    before = full.dropped_count
    steps.wrap(fn)(8, v)  # the wrapper's short path too
    assert before + 1 <= full.dropped_count <= before + 2
    full._q.clear()
    steps.close()
    full.close()


def test_wrap_records_like_call(tmp_path):
    """``steps.wrap(fn)(i, *args)`` is ``steps(i, fn, *args)``: the same events in the same
    order (its own short path after the first steps), device ends for every step, the
    full path's errors, and a clear error for a non-callable."""
    store = SQLiteStore(str(tmp_path / "w.db"))
    rec = goodput.GoodputRecorder("w", "w", logging_enabled=True, store=store)
    fn = jax.jit(lambda v: v * 2.0)
    v = jnp.ones(4)
    with runtime.StepRecorder(rec, compile_times=False) as steps:
        step_fn = steps.wrap(fn)
        assert step_fn.__wrapped__ is fn
        for i in range(6):
            with rec.data_loading():
                pass
            v = step_fn(i, v)
        assert steps._sink is not None  # the short path is on
        with pytest.raises(ValueError, match=r"step \(-1\)"):
            step_fn(-1, v)
        assert steps.finish(timeout=30) and steps.tracked == 6 and steps.observed == 6
        with pytest.raises(TypeError, match=r"fn \(3\) must be callable"):
            steps.wrap(3)
    rec.close()
    assert float(v[0]) == 64.0
    evs, _ = store.read_events("w")
    host = [(e.kind.value, e.step) for e in evs if e.kind.value != "step_device_end"]
    want = []
    for i in range(6):
        want += [("data_loading_start", None), ("data_loading_end", None), ("step_start", i)]
    assert host == want
    ends = sorted(e.step for e in evs if e.kind.value == "step_device_end")
    assert ends == list(range(6))
    store.close()


def test_finish_steps_waits_for_the_recorders_step_recorders(tmp_path):
    """runtime.finish_steps(recorder): every step queued through a StepRecorder on that
    recorder has its device end recorded when it returns (the device done); other recorders'
    step recorders are not waited for; no StepRecorder, or a closed one: returns at once."""
    store = SQLiteStore(str(tmp_path / "f.db"))
    rec = goodput.GoodputRecorder("f", "f", logging_enabled=True, store=store)
    other = goodput.GoodputRecorder("g", "g", logging_enabled=True, store=store)
    assert runtime.finish_steps(rec) is True  # nothing records on it yet

    step_fn, w, x = queued_step()
    steps = runtime.StepRecorder(rec, compile_times=False)
    steps_other = runtime.StepRecorder(other, compile_times=False)
    for i in range(8):
        w, loss = steps(i, step_fn, w, x)  # queued: the host runs ahead
    _w2, loss_other = steps_other(0, step_fn, w, x)
    assert runtime.finish_steps(rec, timeout=60) is True
    assert loss.is_ready() and steps.observed == steps.tracked == 8 and steps.unobserved == 0
    t_after = time.time()
    steps.close()
    assert runtime.finish_steps(rec, timeout=0) is True  # closed: nothing to wait for
    loss_other.block_until_ready()
    assert steps_other.finish(timeout=30)
    steps_other.close()
    rec.close()
    other.close()
    ends = {e.step: e.timestamp for e in store.read_events("f")[0]
            if e.kind.value == "step_device_end"}
    assert sorted(ends) == list(range(8)) and max(ends.values()) <= t_after
    store.close()
