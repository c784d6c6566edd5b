"""StepRecorder overhead, side by side in one run: a JAX training loop with and without it.

All measurements use the same jitted step (a chain of matmuls; its size is chosen at start so
that one step takes ``--step-ms``, 5 ms by default, on this machine), dispatched
asynchronously as in training, each step after a 0.4-step "load" (``time.sleep``: an input
pipeline that keeps up, so the host stays ahead of the device), in rounds of K steps that
alternate between the arms and end with ``block_until_ready``:

- the same loop overhead with each load a data-loading span (``with rec.data_loading():``),
  with ``time.sleep`` loads, with Python loads holding the GIL (``py_load``: the watcher
  then contends for the GIL inside the span) and with that Python split over 2 threads (a
  threaded loader: a short interval costs its threads hand-overs), for the default
  ``span_switch_interval``, ``1e-4``, ``1e-5``, ``None`` and ``switch_interval=1e-4``, side
  by side.
- loop overhead: rounds without recording (``state, m = train_step(state, x)``) and with it
  (``state, m = recorded_step(i, state, x)``, ``recorded_step = steps.wrap(train_step)`` as in
  the quickstart, a real GoodputRecorder writing to SQLite in the background). The overhead
  is the median over rounds of (recorded / plain - 1). Target: < 1 %.
- cost of recording a step, in each of its three forms against its baseline: the
  quickstart's ``recorded_step(i, s, x)`` (``steps.wrap(timed)``) against ``timed(s, x)``
  called directly; ``steps(i, timed, s, x)`` (the object called: Python's generic
  ``__call__`` slot, keyword arguments allowed) against a plain forwarding call; the separate
  ``start(i)`` / ``track(i, out)`` calls (timed one by one) against two no-op functions. Each
  call's time is minus the dispatch timed inside ``timed``. The two calls of a form alternate
  step by step in ONE loop (the order swapped every pair, each after its own load), so a
  pair meets the same caches, machine load and device queue: the cost is the median of the
  pairs' differences (and its p90), not a difference of two medians of separate runs. This
  is the recorder's own work on the training thread, with the caches as a training loop
  leaves them (cold after each load). Target: < 5 us. Beside it, measured the same way, the
  floor of any Python wrapper: ``forward(i, s, x)`` that only calls ``timed(s, x)``
  (cold, a Python call alone costs microseconds).
- the difference of the median call times of the overhead rounds (recorded call minus plain
  dispatch, median over rounds) and of the training thread's CPU time
  (``time.thread_time``): side by side, but noisier (the dispatch itself varies by tens of
  microseconds from round to round).
- worst case: microseconds per ``steps(i, fn, x)`` call beyond the plain ``fn(x)``
  call, for a trivial ``fn`` whose output is already ready (every call then also
  records the previous step's device end on the training thread). Median over batches.

- a loop that waits for every step (``float(loss)``): the training thread's CPU time and the
  loop's wall time per step, recorded minus plain (the readiness hook's profile events run
  while the host waits for the device).
- a badput span's start where a StepRecorder polls a step still running (its span-start
  listener's worst case): microseconds per ``with rec.data_loading(): pass`` beyond the same
  on a recorder no StepRecorder watches. Target: < 5 us.
- program cost: compiles with and without reading each compiled step's cost (equal), and
  the time of one read per distinct program (target <= 1 ms); the measured peak's probe.
- truth: a Python-heavy loader (6 ms of Python holding the GIL) and ``float(loss)`` each
  step, recorded, against the device's truth from a ``jax.profiler`` trace of the same run
  (goodput, data-loading badput against the device's idle time in the loads, step time;
  ``tests/runtime/_helpers.synced_loop_truth``; the trace without the Python tracer, which
  slows the recorder's own observation), on a quiet machine and beside a process that burns
  a core. Targets (issue 35): goodput within 1 pp, step time within 3 %. The load average is
  printed beside each: on a shared machine "quiet" is only as quiet as the others let it be.
  The same comparison over the loop shapes that matter (Python per batch, the sync point, a
  host-to-device copy, step length, stalls, a save, a scanned step; with and without
  ``StepRecorder(switch_interval=...)``): ``benchmarks/step_truth_bench.py``.

Prints one table with the device and versions. Absolute times depend on the machine and
on other load; the ratios are measured side by side.

Usage:
    python benchmarks/step_recorder_bench.py [--quick] [--rounds R] [--steps K] [--step-ms MS]
        [--size N]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _make_step(size: int):
    import jax
    import jax.numpy as jnp

    @jax.jit
    def train_step(w, x):
        h = x
        for _ in range(4):
            h = jnp.tanh(h @ w)
        loss = jnp.mean(h ** 2)
        return w - 1e-3 * loss * w, {"loss": loss}

    return train_step


def _calibrate(train_step, w, x, target_s: float) -> float:
    import jax

    jax.block_until_ready(train_step(w, x))
    t = time.perf_counter()
    s = w
    for _ in range(10):
        s, _m = train_step(s, x)
    jax.block_until_ready(s)
    return (time.perf_counter() - t) / 10


def pick_size(step_ms: float) -> int:
    """The matrix size (a multiple of 32) whose chained step takes about ``step_ms``."""
    import jax.numpy as jnp
    import numpy as np

    size = 256
    for _ in range(3):
        x = jnp.asarray(np.random.default_rng(0).normal(size=(size, size)).astype("float32"))
        t = _calibrate(_make_step(size), jnp.eye(size, dtype=jnp.float32) * 0.5, x, 0.0)
        size = max(32, round(size * (step_ms / 1e3 / t) ** (1 / 3) / 32) * 32)
    return size


def loop_overhead(size: int, rounds: int, steps_per_round: int) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from goodput_jax import goodput, runtime
    from goodput_jax.measure.stores.sqlite import SQLiteStore

    train_step = _make_step(size)
    w = jnp.eye(size, dtype=jnp.float32) * 0.5
    x = jnp.asarray(np.random.default_rng(0).normal(size=(size, size)).astype("float32"))
    step_s = _calibrate(train_step, w, x, 0.005)
    load_s = 0.4 * step_s  # an input pipeline that keeps up: the host stays ahead
    tmp = tempfile.mkdtemp()
    store = SQLiteStore(os.path.join(tmp, "bench.db"))
    rec = goodput.GoodputRecorder("bench", "bench", logging_enabled=True, store=store)
    steps = runtime.StepRecorder(rec, compile_times=False)
    i = 0
    perf = time.perf_counter

    cpu = time.thread_time

    def plain(calls: list) -> float:
        s = w
        c = 0.0
        for _ in range(steps_per_round):
            time.sleep(load_s)
            a, ca = perf(), cpu()
            s, _m = train_step(s, x)
            c += cpu() - ca
            calls.append(perf() - a)
        jax.block_until_ready(s)
        return c

    loop_step = steps.wrap(train_step)  # the quickstart's form

    def recorded(calls: list) -> float:
        nonlocal i
        s = w
        c = 0.0
        for _ in range(steps_per_round):
            time.sleep(load_s)
            a, ca = perf(), cpu()
            s, _m = loop_step(i, s, x)
            c += cpu() - ca
            calls.append(perf() - a)
            i += 1
        jax.block_until_ready(s)
        steps.finish()
        return c

    def noop_start(step: int) -> None:
        pass

    def noop_track(step: int, out: object) -> None:
        pass

    inner: list = []

    def timed_step(s, xb):
        a = ns()
        out = train_step(s, xb)
        inner.append(ns() - a)
        return out

    def noop_call(step: int, fn, *args):
        return fn(*args)

    recorded_step = steps.wrap(timed_step)

    # Each form of the recording is timed against its baseline in ONE loop, the two calls
    # alternating step by step (the order swapped every pair), each after its own load: a
    # pair's two calls meet the same caches, the same load on the machine, the same queue on
    # the device; the cost is the median of the pairs' differences (not the difference of
    # two medians of separate runs, which drift apart by microseconds on a shared machine).
    # Each call's time is minus the dispatch timed inside ``timed_step``.
    def call_wrap(s, i):  # the quickstart's form: ``steps.wrap(fn)(i, ...)``
        a = ns()
        out = recorded_step(i, s, x)
        return out, ns() - a - inner[-1]

    def call_direct(s, i):  # the step called directly
        a = ns()
        out = timed_step(s, x)
        return out, ns() - a - inner[-1]

    def forward(step: int, *args):  # what any wrapper costs: a Python call that forwards
        return timed_step(*args)

    def call_forward_only(s, i):  # the floor: ``forward(i, ...)``, a wrapper that records nothing
        a = ns()
        out = forward(i, s, x)
        return out, ns() - a - inner[-1]

    def call_steps(s, i):  # the object called: ``steps(i, fn, ...)``
        a = ns()
        out = steps(i, timed_step, s, x)
        return out, ns() - a - inner[-1]

    def call_forward(s, i):  # a plain Python call forwarding to the step
        a = ns()
        out = noop_call(i, timed_step, s, x)
        return out, ns() - a - inner[-1]

    def brackets(start, track):  # the separate ``start(i)`` / ``track(i, out)`` calls
        def call(s, i):
            a = ns()
            start(i)
            b = ns()
            out = train_step(s, x)
            c = ns()
            track(i, out)
            return out, (b - a) + (ns() - c)
        return call

    call_start_track = brackets(steps.start, steps.track)
    call_noop_brackets = brackets(noop_start, noop_track)

    def paired(rec_call, base_call, diffs: list, rec_t: list, base_t: list) -> None:
        nonlocal i
        s = w
        for k in range(max(1, steps_per_round // 2)):
            pair = {}
            for arm in ((rec_call, base_call) if k % 2 == 0 else (base_call, rec_call)):
                time.sleep(load_s)
                out, pair[arm] = arm(s, i)
                s, _m = out  # after the clock: frees the previous step's arrays
                i += 1
            diffs.append(pair[rec_call] - pair[base_call])
            rec_t.append(pair[rec_call])
            base_t.append(pair[base_call])
        jax.block_until_ready(s)
        steps.finish()

    ns = time.perf_counter_ns
    ratios, t_plain, t_rec, c_plain, c_rec, cpu_cost, d_call = [], [], [], [], [], [], []
    forms = {name: ([], [], []) for name in ("wrap", "steps", "brackets", "floor")}
    arms = {"wrap": (call_wrap, call_direct), "steps": (call_steps, call_forward),
            "brackets": (call_start_track, call_noop_brackets),
            "floor": (call_forward_only, call_direct)}
    for r in range(rounds):
        for name, (rec_call, base_call) in arms.items():
            paired(rec_call, base_call, *forms[name])
        order = (plain, recorded) if r % 2 == 0 else (recorded, plain)
        t, c = {}, {}
        for fn in order:
            a = perf()
            c[fn] = fn(c_plain if fn is plain else c_rec)
            t[fn] = perf() - a
        cpu_cost.append((c[recorded] - c[plain]) / steps_per_round)
        ratios.append(t[recorded] / t[plain])
        t_plain.append(t[plain] / steps_per_round)
        t_rec.append(t[recorded] / steps_per_round)
        d_call.append(statistics.median(c_rec[-steps_per_round:])
                      - statistics.median(c_plain[-steps_per_round:]))
    med = statistics.median
    cost = {name: {"us": med(d) / 1e3, "p90_us": sorted(d)[int(0.9 * len(d))] / 1e3,
                   "rec_us": med(rt) / 1e3, "base_us": med(bt) / 1e3}
            for name, (d, rt, bt) in forms.items()}
    steps.close()
    rec.close()
    store.close()
    return {"step_ms": step_s * 1e3, "load_ms": load_s * 1e3,
            "plain_ms": statistics.median(t_plain) * 1e3,
            "rec_ms": statistics.median(t_rec) * 1e3,
            "overhead_pct": (statistics.median(ratios) - 1) * 100,
            "call_plain_us": statistics.median(c_plain) * 1e6,
            "call_rec_us": statistics.median(c_rec) * 1e6,
            "call_diff_us": statistics.median(d_call) * 1e6,
            "cpu_us": statistics.median(cpu_cost) * 1e6, "cost": cost,
            "recorded": steps.observed, "tracked": steps.tracked}


def py_work(n: int) -> int:
    """``n`` rounds of a tokeniser-like loop of dict updates (a fixed amount of Python work,
    holding the GIL: unlike ``py_load``, which runs for a fixed time, its time grows with
    every GIL hand-over it has to make)."""
    words = [f"tok{j}" for j in range(64)]
    acc = 0
    for _ in range(n):
        d: dict = {}
        for w in words:
            d[w] = d.get(w, 0) + len(w)
        acc += len(d)
    return acc


def _work_for(seconds: float) -> int:
    """The rounds of :func:`py_work` that take about ``seconds`` here (the best of 5)."""
    best = min(_timed(py_work, 200) for _ in range(5))
    return max(1, round(200 * seconds / best))


def _timed(fn, *args) -> float:
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


SPAN_ARMS = (("default", {}), ("1e-4", {"span_switch_interval": 1e-4}),
             ("1e-5", {"span_switch_interval": 1e-5}),
             ("None", {"span_switch_interval": None}),
             ("always", {"span_switch_interval": None, "switch_interval": 1e-4}))


def span_loop_overhead(size: int, rounds: int, steps_per_round: int,
                       python_load: bool = False, threads: int = 1) -> dict:
    """The loop overhead where each load is a badput span (``with rec.data_loading():``, as
    the quickstart's loop), against the same loop without recording, for the default
    ``span_switch_interval=1e-4`` (the switch interval short from a span's start while a
    step is in flight to the next step call), for ``None`` (left alone) and for
    ``switch_interval=1e-4`` (short while the watcher runs), each arm on its own recorder,
    the arms' rounds in rotating order: median of round ratios. ``python_load``: each load is
    a fixed amount of Python work holding the GIL (``py_work``, a Python-heavy loader: the
    watcher contends for the GIL when the step ends inside it, and every hand-over lengthens
    the load) instead of ``time.sleep``; ``threads`` > 1: that
    Python split over as many threads run together (a threaded loader: its threads contend
    for the GIL all through the span, so a short interval costs them hand-overs)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from goodput_jax import goodput, runtime
    from goodput_jax.measure.stores.sqlite import SQLiteStore

    train_step = _make_step(size)
    w = jnp.eye(size, dtype=jnp.float32) * 0.5
    x = jnp.asarray(np.random.default_rng(0).normal(size=(size, size)).astype("float32"))
    load_s = 0.4 * _calibrate(train_step, w, x, 0.005)
    load = time.sleep
    if python_load:
        import threading

        rounds_of_work = _work_for(load_s)

        def load(seconds: float) -> None:
            if threads == 1:
                py_work(rounds_of_work)
                return
            ts = [threading.Thread(target=py_work, args=(rounds_of_work // threads,))
                  for _ in range(threads)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
    tmp = tempfile.mkdtemp()
    recs = {}
    for name, opts in SPAN_ARMS:
        rec = goodput.GoodputRecorder(f"span{name}", "bench", logging_enabled=True,
                                      store=SQLiteStore(os.path.join(tmp, f"{name}.db")))
        recs[name] = (rec, runtime.StepRecorder(rec, compile_times=False, **opts))

    def plain() -> None:
        s = w
        for _ in range(steps_per_round):
            load(load_s)
            s, _m = train_step(s, x)
        jax.block_until_ready(s)

    def arm(name: str):
        rec, steps = recs[name]
        loop_step = steps.wrap(train_step)

        def run() -> None:
            s = w
            for i in range(steps_per_round):
                with rec.data_loading():
                    load(load_s)
                s, _m = loop_step(i, s, x)
            jax.block_until_ready(s)
            steps.finish()
        return run

    fns = {"plain": plain, **{name: arm(name) for name, _ in SPAN_ARMS}}
    times: dict[str, list] = {k: [] for k in fns}
    names = list(fns)
    for r in range(rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:
            a = time.perf_counter()
            fns[k]()
            times[k].append(time.perf_counter() - a)
    for rec, steps in recs.values():
        steps.close()
        rec.close()
    return {k: (statistics.median(t / p for t, p in zip(times[k], times["plain"], strict=True))
                - 1) * 100 for k, _ in SPAN_ARMS}


def sync_loop_cost(size: int, rounds: int, steps_per_round: int) -> dict:
    """A loop that waits for every step (``float(loss)``, the readiness hook's case), without
    and with recording (``steps.wrap``), in alternating rounds: the training thread's CPU time
    per step (``time.thread_time``: the recorder's work there, the hook's profile events
    included) and the loop's wall time per step; medians over rounds of the differences."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from goodput_jax import goodput, runtime
    from goodput_jax.measure.stores.sqlite import SQLiteStore

    train_step = _make_step(size)
    w = jnp.eye(size, dtype=jnp.float32) * 0.5
    x = jnp.asarray(np.random.default_rng(0).normal(size=(size, size)).astype("float32"))
    jax.block_until_ready(train_step(w, x))
    tmp = tempfile.mkdtemp()
    store = SQLiteStore(os.path.join(tmp, "sync.db"))
    rec = goodput.GoodputRecorder("sync", "sync", logging_enabled=True, store=store)
    steps = runtime.StepRecorder(rec, compile_times=False)
    recorded = steps.wrap(train_step)
    i = 0

    def arm(fn) -> tuple[float, float]:
        nonlocal i
        s = w
        c, a = time.thread_time(), time.perf_counter()
        for _ in range(steps_per_round):
            s, m = fn(i, s, x) if fn is recorded else fn(s, x)
            float(m["loss"])
            i += 1
        return ((time.thread_time() - c) / steps_per_round,
                (time.perf_counter() - a) / steps_per_round)

    d_cpu, d_wall = [], []
    for r in range(rounds):
        order = (train_step, recorded) if r % 2 == 0 else (recorded, train_step)
        res = {fn: arm(fn) for fn in order}
        d_cpu.append(res[recorded][0] - res[train_step][0])
        d_wall.append(res[recorded][1] - res[train_step][1])
    claims = getattr(steps, "hook_claims", 0)
    steps.close()
    rec.close()
    store.close()
    return {"cpu_us": statistics.median(d_cpu) * 1e6, "wall_us": statistics.median(d_wall) * 1e6,
            "hook_claims": claims, "steps": rounds * steps_per_round}


def span_cost(size: int, batches: int, spans: int) -> dict:
    """The StepRecorder's poll at each badput span's start (the recorder's span-start
    listener), where it costs most: the watcher waits on a step still running, so every
    ``with rec.data_loading(): pass`` asks the device whether it is ready. Timed in batches of
    ``spans`` spans, alternating with the same spans on a second recorder (same store type)
    that no StepRecorder watches; median over batches of the per-span difference."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from goodput_jax import goodput, runtime
    from goodput_jax.measure.stores.sqlite import SQLiteStore

    train_step = _make_step(size)
    w = jnp.eye(size, dtype=jnp.float32) * 0.5
    x = jnp.asarray(np.random.default_rng(0).normal(size=(size, size)).astype("float32"))
    jax.block_until_ready(train_step(w, x))
    tmp = tempfile.mkdtemp()
    stores = [SQLiteStore(os.path.join(tmp, f"span{k}.db")) for k in range(2)]
    watched, plain = (goodput.GoodputRecorder(f"span{k}", "span", logging_enabled=True,
                                              store=stores[k]) for k in range(2))
    steps = runtime.StepRecorder(watched, compile_times=False)
    recorded = steps.wrap(train_step)

    def timed(rec) -> float:
        a = time.perf_counter()
        for _ in range(spans):
            with rec.data_loading():
                pass
        return (time.perf_counter() - a) / spans

    i, diffs = 0, []
    for b in range(batches):
        s = w
        for _ in range(8):  # ~8 steps of device work queued: the watcher waits on the first
            s, _m = recorded(i, s, x)
            i += 1
        time.sleep(0.002)
        first, second = (watched, plain) if b % 2 == 0 else (plain, watched)
        t = {first: timed(first), second: timed(second)}
        diffs.append(t[watched] - t[plain])
        jax.block_until_ready(s)
    claims = steps.span_claims
    steps.close()
    for r in (watched, plain):
        r.close()
    for st in stores:
        st.close()
    return {"us": statistics.median(diffs) * 1e6, "claims": claims}


def per_call_cost(batches: int, calls: int) -> dict:
    import jax.numpy as jnp

    from goodput_jax import goodput, runtime
    from goodput_jax.measure.stores.sqlite import SQLiteStore

    ready = jnp.ones(4)
    ready.block_until_ready()
    out = (ready, {"loss": ready})

    def fn(v):
        return out

    tmp = tempfile.mkdtemp()
    store = SQLiteStore(os.path.join(tmp, "cost.db"))
    rec = goodput.GoodputRecorder("cost", "cost", logging_enabled=True, store=store)
    steps = runtime.StepRecorder(rec, compile_times=False)
    i = 0
    per = []
    for _ in range(batches):
        a = time.perf_counter()
        for _ in range(calls):
            fn(ready)
        base = time.perf_counter() - a
        a = time.perf_counter()
        for _ in range(calls):
            steps(i, fn, ready)
            i += 1
        per.append((time.perf_counter() - a - base) / calls)
    steps.close()
    rec.close()
    store.close()
    return {"median_us": statistics.median(per) * 1e6, "p90_us": sorted(per)[int(0.9 * len(per))] * 1e6}


def python_heavy_truth(size: int, steps: int, load_s: float, recorder_cls=None,
                       loaded: bool = False) -> dict:
    """A Python-heavy loader (``load_s`` of Python holding the GIL) and a host sync every step
    (``float(loss)``), recorded with a StepRecorder, against the device's truth from a
    ``jax.profiler`` trace of the same run (not from goodput_jax): goodput = the steps'
    device time (dispatch, timed by this loop, to the last device event of the step) over
    the job's time; device idle in loading = the loading spans (timed by this loop) minus
    the device's busy time inside them; step time = mean device time of a step. ``loaded``:
    beside a process that burns a CPU core (``python -c 'while 1: pass'``)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from goodput_jax import goodput, runtime
    from goodput_jax.measure.calculator import BadputType, GoodputCalculator
    from goodput_jax.measure.stores.sqlite import SQLiteStore
    from tests.runtime._helpers import (
        CpuBurner,
        device_busy,
        py_load,
        synced_loop_truth,
        trace_options,
    )

    cls = recorder_cls or runtime.StepRecorder
    train_step = _make_step(size)
    w = jnp.eye(size, dtype=jnp.float32) * 0.5
    x = np.random.default_rng(0).normal(size=(size, size)).astype("float32")
    jax.block_until_ready(train_step(w, x))
    tmp = tempfile.mkdtemp()
    store = SQLiteStore(os.path.join(tmp, "truth.db"))
    rec = goodput.GoodputRecorder("truth", "truth", logging_enabled=True, store=store)
    steps_rec = cls(rec, compile_times=False)
    recorded = steps_rec.wrap(train_step)
    trace_dir = os.path.join(tmp, "trace")
    now = time.time
    opts = trace_options()  # the XLA runtime's events, without the Python tracer
    burner = CpuBurner() if loaded else contextlib.nullcontext()
    with burner:
        jax.profiler.start_trace(trace_dir, profiler_options=opts)
        rec.record_job_start_time()
        t_start = now()
        dispatch, synced, loads = [], [], []
        for i in range(steps):
            a = now()
            with rec.data_loading():
                py_load(load_s)
                batch = x
            b = now()
            w, m = recorded(i, w, batch)
            float(m["loss"])  # the host syncs every step
            dispatch.append(b)
            synced.append(now())
            loads.append((a, b))
        steps_rec.close()
        rec.record_job_end_time()
        t_end = now()
        jax.profiler.stop_trace()
        rec.close()
    truth = synced_loop_truth(device_busy(trace_dir), dispatch, synced, loads, t_end - t_start)
    calc = GoodputCalculator("truth", "truth", store=store)
    det = calc.get_job_goodput_details()
    dev = calc.get_step_deviation()
    later = dev.step_times[dev.steps >= 1]
    store.close()
    return {"truth_goodput": truth["goodput"], "truth_idle_loading": truth["idle_loading"],
            "stall_ms": 1e3 * truth["host_stall_s"] / steps,
            "truth_step_ms": 1e3 * truth["step_s"],
            "goodput": 100 * det["productive_time"] / det["total_time"],
            "data_loading": 100 * det["badput_time"][BadputType.DATA_LOADING] / det["total_time"],
            "step_ms": 1e3 * float(np.mean(later)), "load_ms": 1e3 * load_s,
            "hook_claims": getattr(steps_rec, "hook_claims", 0), "observed": steps_rec.observed,
            "ready_claims": getattr(steps_rec, "ready_claims", 0), "load": os.getloadavg()[0],
            "span_claims": getattr(steps_rec, "span_claims", 0), "steps": steps}


def program_cost_cost(programs: int) -> dict:
    """Program goodput's read of the compiled step's cost (issue 35): a loop whose step is
    compiled for ``programs`` distinct shapes, recorded with ``program_costs`` off and on
    (each arm with its own jitted function, so both compile everything): the compiles the
    attachment counted in each arm (equal: the read adds none), and the time of one
    ``program_cost`` read per distinct program (median, max; JAX's caches answer). The
    measured peak's probe runs once per process (reported apart)."""
    import jax
    import jax.numpy as jnp

    from goodput_jax import goodput, runtime
    from goodput_jax.runtime.program import measured_peak, program_cost

    t = time.perf_counter()
    peak = measured_peak()
    probe_s = time.perf_counter() - t
    sizes = [32 + 16 * i for i in range(programs)]
    xs = [jnp.ones((n, n)) for n in sizes]
    out: dict = {"probe_s": probe_s, "peak": peak, "programs": programs}
    with tempfile.TemporaryDirectory() as d:
        for arm in (False, True):
            @jax.jit
            def f(x):
                return jnp.tanh(x @ x), jnp.sum(x)

            rec = goodput.GoodputRecorder(f"pc{arm}", "l", True, store=f"sqlite:///{d}/pc{arm}.db")
            steps = runtime.StepRecorder(rec, program_costs=arm)
            for i, x in enumerate(xs):
                steps(i, f, x)
            steps.finish()
            out[f"compiles_{arm}"] = runtime.attached(rec).compilations
            steps.close()
            rec.close()
            if arm:
                reads = []
                for x in xs:
                    t = time.perf_counter()
                    program_cost(f, x)
                    reads.append(time.perf_counter() - t)
                out["read_ms_median"] = 1e3 * statistics.median(reads)
                out["read_ms_max"] = 1e3 * max(reads)
                from goodput_jax.measure.calculator import GoodputCalculator

                calc = GoodputCalculator(f"pc{arm}", store=f"sqlite:///{d}/pc{arm}.db")
                out["recorded"] = len(calc.get_program_goodput().programs)
                calc.store.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer rounds (a few seconds)")
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--steps", type=int, default=50, help="steps per round")
    p.add_argument("--step-ms", type=float, default=5.0, help="device step time to size the step to")
    p.add_argument("--size", type=int, default=None, help="matrix size of the step (overrides --step-ms)")
    args = p.parse_args(argv)
    rounds = args.rounds or (10 if args.quick else 60)
    batches, calls = (20, 500) if args.quick else (100, 1000)
    import jax

    size = args.size or pick_size(args.step_ms)
    lo = loop_overhead(size, rounds, args.steps)
    pc = per_call_cost(batches, calls)
    sc = sync_loop_cost(size, rounds, args.steps)
    so = span_loop_overhead(size, rounds, args.steps)
    sop = span_loop_overhead(size, rounds, args.steps, python_load=True)
    sot = span_loop_overhead(size, rounds, args.steps, python_load=True, threads=2)
    sp = span_cost(size, 10 if args.quick else 40, 100)
    pts = [python_heavy_truth(size, 60 if args.quick else 200, 0.006, loaded=loaded)
           for loaded in (False, True)]
    pg = program_cost_cost(4 if args.quick else 12)
    print(f"StepRecorder overhead: jax {jax.__version__}, {jax.devices()[0].device_kind} "
          f"({jax.default_backend()}), Python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs (load average {os.getloadavg()[0]:.2f} at the end); {rounds} "
          f"rounds x {args.steps} steps per arm, matrix {size}")
    print(f"{'measure':<44}{'value':>12}{'target':>10}")
    print(f"{'device step time (chained, ms)':<44}{lo['step_ms']:>12.3f}{'~' + format(args.step_ms, 'g'):>10}")
    print(f"{'load before each step (sleep, ms)':<44}{lo['load_ms']:>12.3f}")
    print(f"{'loop without recording, per step (ms)':<44}{lo['plain_ms']:>12.3f}")
    print(f"{'loop with StepRecorder, per step (ms)':<44}{lo['rec_ms']:>12.3f}")
    print(f"{'loop overhead (median of round ratios, %)':<44}{lo['overhead_pct']:>12.2f}{'< 1':>10}")
    for o, what in ((so, "sleep"), (sop, "Python"), (sot, "2 Python threads")):
        for key, label in (("default", f"  loads ({what}) as spans, default"),
                           ("1e-4", "    same, span_switch_interval=1e-4"),
                           ("1e-5", "    same, span_switch_interval=1e-5"),
                           ("None", "    same, span_switch_interval=None"),
                           ("always", "    same, switch_interval=1e-4 (always)")):
            print(f"{label + ' (%)':<44}{o[key]:>12.2f}{'< 1':>10}")
    print(f"{'steps recorded / tracked':<44}{lo['recorded']:>6d} / {lo['tracked']:<4d}")
    print(f"{'one plain call (dispatch, us, median)':<44}{lo['call_plain_us']:>12.2f}")
    print(f"{'one recorded call (us, median)':<44}{lo['call_rec_us']:>12.2f}")
    print(f"{'per recorded step, training thread (us)':<44}{lo['call_diff_us']:>12.2f}")
    print(f"{'  same, training thread CPU time (us)':<44}{lo['cpu_us']:>12.2f}")
    print("cost of recording a step (median of step-by-step pairs, each call minus its dispatch):")
    for name, label, base in (("wrap", "steps.wrap(fn)(i, ...)", "fn(...) called directly"),
                              ("steps", "steps(i, fn, ...)", "a plain forwarding call"),
                              ("brackets", "start(i) + track(i, out)", "two no-op calls")):
        c = lo["cost"][name]
        print(f"{'  ' + label + ' (us, median)':<44}{c['rec_us']:>12.2f}")
        print(f"{'    against ' + base + ' (us)':<44}{c['base_us']:>12.2f}")
        print(f"{'    cost: median of pair differences (us)':<44}{c['us']:>12.2f}{'< 5':>10}")
        print(f"{'    p90 of pair differences (us)':<44}{c['p90_us']:>12.2f}")
    c = lo["cost"]["floor"]
    print(f"{'  floor: a wrapper that only forwards (us)':<44}{c['us']:>12.2f}")
    print(f"{'    (f(i, *a): return fn(*a), against fn(...))':<44}")
    print(f"{'  wrap cost beyond that floor (us)':<44}{lo['cost']['wrap']['us'] - c['us']:>12.2f}")
    print(f"{'worst case, outputs already ready (us, med)':<44}{pc['median_us']:>12.2f}")
    print(f"{'worst case, outputs already ready (us, p90)':<44}{pc['p90_us']:>12.2f}")
    print(f"{'sync loop (float(loss) each step), per step:':<44}")
    print(f"{'  training thread CPU, recorded - plain (us)':<44}{sc['cpu_us']:>12.2f}")
    print(f"{'  loop wall time, recorded - plain (us)':<44}{sc['wall_us']:>12.2f}")
    print(f"{'  device ends seen by the readiness hook':<44}{sc['hook_claims']:>6d} / {sc['steps']:<4d}")
    print(f"{'badput span start, polling a running step:':<44}")
    print(f"{'  watched recorder - plain recorder (us)':<44}{sp['us']:>12.2f}{'< 5':>10}")
    print(f"{'  device ends seen at a span start':<44}{sp['claims']:>6d}")
    for pt, where in zip(pts, ("quiet", "beside a CPU burner"), strict=True):
        print(f"Python-heavy loader ({pt['load_ms']:.0f} ms of Python holding the GIL) + "
              f"float(loss) each step, {where} (load average {pt['load']:.2f}), against a "
              "jax.profiler trace of the same run:")
        print(f"{'measure':<44}{'recorded':>12}{'device truth':>14}{'target':>10}")
        print(f"{'  goodput (%)':<44}{pt['goodput']:>12.2f}{pt['truth_goodput']:>14.2f}"
              f"{'+-1 pp':>10}")
        print(f"{'  data-loading badput / device idle (%)':<44}{pt['data_loading']:>12.2f}"
              f"{pt['truth_idle_loading']:>14.2f}")
        print(f"{'  step time (ms, mean)':<44}{pt['step_ms']:>12.3f}{pt['truth_step_ms']:>14.3f}"
              f"{'+-3 %':>10}")
        print(f"{'  host stalls after the device end (ms/step)':<44}{pt['stall_ms']:>12.3f}")
        print(f"{'  device ends seen at the call / hook / span':<44}{pt['ready_claims']:>5d} /"
              f"{pt['hook_claims']:>4d} /{pt['span_claims']:>4d} of {pt['steps']}")
    print(f"Program cost (XLA cost analysis), {pg['programs']} distinct compiled step programs:")
    print(f"{'  compiles, program_costs off / on':<44}{pg['compiles_False']:>6d} / "
          f"{pg['compiles_True']:<4d}{'equal':>8}")
    print(f"{'  one read per program (ms, median)':<44}{pg['read_ms_median']:>12.3f}{'<= 1':>10}")
    print(f"{'  one read per program (ms, max)':<44}{pg['read_ms_max']:>12.3f}{'<= 1':>10}")
    print(f"{'  programs recorded':<44}{pg['recorded']:>12d}")
    print(f"{'  peak probe, once per process (s)':<44}{pg['probe_s']:>12.3f}")
    print(f"{'  measured peak (GFLOP/s, GB/s)':<44}{pg['peak'].flops_per_s / 1e9:>12.1f}"
          f"{pg['peak'].bytes_per_s / 1e9:>10.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
