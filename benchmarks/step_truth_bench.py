"""StepRecorder against a profiler's truth, loop shape by loop shape, quiet and beside a burner.

Each loop shape runs a real jitted step recorded with ``steps.wrap`` (a GoodputRecorder
writing to SQLite) under a ``jax.profiler`` trace (the XLA runtime's events, no Python
tracer). The truth is the SAME recorded events with each ``STEP_DEVICE_END`` replaced by the
trace's end of that step's execution (the ``ThunkExecutor::Execute`` completion event of
the step program's k-th run, by ``run_id``), read by the same calculator: the difference is
only the recorder's observation of the device ends (the spans and the step starts are the
loop's own). Reported per shape: goodput error (pp), step-time error (% of the mean step
time, steps >= 1), and the recorded device end minus the trace's (median and mean over the
steps, in us: how late the recorder saw each step; the goodput error is about the mean lag
over the loop's step period).

The statistic: each shape runs ``--repeats`` times per arm (3 by default; the arms
interleaved, so the arms of one repeat meet the same machine load), and the table shows the
MEDIAN over the repeats of each figure, with the range of the goodput error: one run's error
moves by 1-3 pp from a single observation delayed by milliseconds on a shared machine (a
thread waiting for a CPU), which a median of 3 keeps out and the range still shows. The
targets are read on the medians.

Shapes (``SHAPES``): Python work per batch holding the GIL (1, 6, 15 ms) with
``float(loss)`` right after the step; the sync after 1 ms of bookkeeping, the sync of the
previous step's loss (lagged), no sync (queued steps); a sizeable numpy batch copied to
the device in the loop (``jnp.asarray``); short (~2 ms) and long (~20 ms) steps; a stalling
loader (``time.sleep`` stalls, queued); a checkpoint-like save (``device_get`` of the
state + Python) with queued steps; a scanned program (``lax.scan`` of 4 layers), queued.
The lagged sync (the step ends while the loader's Python holds the GIL: the shape issue 44
item 6 is about) in every variation: 3, 6 and 15 ms of Python, without a span, with the
host-to-device copy, with short and long steps; and its control, ``sleep6-lagged``: the
same loop with a loader that sleeps 6 ms (I/O: the GIL released), which separates the GIL
hand-over from a thread's wake-up.

Beside each row, in brackets: how many steps were seen more than 1 ms late (median over the
repeats) and how much of the goodput error they make (the recorded goodput minus the same
with only those ends replaced by the trace's: a late end of a step the device followed at
once with a queued one moves no time, and shows as +0.00), and how long the watcher thread
was runnable without a CPU per step (Linux's schedstat run delay over the loop, every wait
of the watcher's counted: its wake-ups for the GIL too; on 2 cores XLA's compute threads and
the training thread take both).

The loaded arms run the same shapes beside ``python -c "while True: pass"`` started here and
killed after. The plain arms record with the default ``StepRecorder`` (the switch interval
at 0.01 ms from a badput span's start while a step is in flight to the next step call); the
``-none`` arms with ``span_switch_interval=None`` (the interval left alone: what the
default replaces); the ``-si`` arms with ``switch_interval=SI`` (held while the watcher
runs, opt-in), side by side in the same run.
``-ssi`` arms: ``span_switch_interval=SSI`` (``--ssi``, 1e-4 by default: the default until
issue 44's last round).
``--switch S`` sets ``sys.setswitchinterval(S)`` for the whole run (a diagnostic of the GIL
hand-over only). The ``-sig`` arms are the default recorder plus a diagnostic that records
nothing: the training thread itself polls the newest step by ``SIGALRM`` every ``--sig``
seconds inside the spans and notes when it first saw it ready (printed beside the row):
what an observer that needs no GIL hand-over and no other thread's wake-up would see.

Targets (issue 44): goodput within 1 pp and step time within 3 % of the truth.

Usage:
    python benchmarks/step_truth_bench.py [--quick] [--steps N] [--repeats R]
        [--only NAME,...] [--arms quiet,loaded,quiet-none,loaded-none,quiet-si,loaded-si,
        quiet-ssi,loaded-ssi,quiet-sig,loaded-sig] [--si SI] [--ssi SSI] [--sig SIG]
        [--switch S] [--per-step]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import glob
import os
import platform
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Shape:
    """One loop shape: ``py_ms`` of Python per batch holding the GIL; ``sync``: "after"
    (``float(loss)`` right after the step), "late" (after ``post_ms`` of Python
    bookkeeping), "lagged" (the previous step's loss after the dispatch), "none" (queued
    steps, one wait at the end); ``h2d``: a numpy batch copied in the loop; ``step_ms``;
    ``stall_every``/``stall_ms``: a ``time.sleep`` stall; ``save_every``: a checkpoint-like
    save; ``scan``: the step is a ``lax.scan`` of its layers; ``span``: the loader inside
    ``with rec.data_loading():`` (False: the loop tells the recorder only its steps)."""

    name: str
    py_ms: float = 6.0
    sync: str = "after"
    post_ms: float = 0.0
    h2d: bool = False
    step_ms: float = 5.0
    stall_every: int = 0
    stall_ms: float = 0.0
    save_every: int = 0
    scan: bool = False
    span: bool = True


SHAPES = (
    Shape(name="py1-sync", py_ms=1.0),
    Shape(name="py6-sync", py_ms=6.0),
    Shape(name="py15-sync", py_ms=15.0),
    Shape(name="py6-sync-late", py_ms=6.0, sync="late", post_ms=1.0),
    Shape(name="py6-sync-nospan", py_ms=6.0, span=False),
    Shape(name="py6-lagged", py_ms=6.0, sync="lagged"),
    Shape(name="py15-lagged", py_ms=15.0, sync="lagged"),
    Shape(name="py3-lagged", py_ms=3.0, sync="lagged"),
    Shape(name="py6-lagged-nospan", py_ms=6.0, sync="lagged", span=False),
    Shape(name="py6-lagged-h2d", py_ms=6.0, sync="lagged", h2d=True),
    Shape(name="short2-py6-lagged", py_ms=6.0, sync="lagged", step_ms=2.0),
    Shape(name="long20-py6-lagged", py_ms=6.0, sync="lagged", step_ms=20.0),
    # the control: the same loop with a loader that sleeps (I/O: the GIL released)
    Shape(name="sleep6-lagged", py_ms=0.2, sync="lagged", stall_every=1, stall_ms=6.0),
    Shape(name="py6-queued", py_ms=3.0, sync="none"),
    Shape(name="py6-h2d-sync", py_ms=6.0, h2d=True),
    Shape(name="short2-py6-sync", py_ms=6.0, step_ms=2.0),
    Shape(name="long20-py6-sync", py_ms=6.0, step_ms=20.0),
    Shape(name="stall-queued", py_ms=0.5, sync="none", stall_every=5, stall_ms=20.0),
    Shape(name="save-queued", py_ms=1.0, sync="none", save_every=10),
    Shape(name="scan-queued", py_ms=1.0, sync="none", scan=True),
)


def make_step(size: int, scan: bool):
    import jax
    import jax.numpy as jnp

    if scan:
        @jax.jit
        def train_step(w, x):
            def layer(h, wl):
                return jnp.tanh(h @ wl), None

            h, _ = jax.lax.scan(layer, x, w)
            loss = jnp.mean(h ** 2)
            return w - 1e-3 * loss * w, {"loss": loss}
    else:
        @jax.jit
        def train_step(w, x):
            h = x
            for _ in range(4):
                h = jnp.tanh(h @ w)
            loss = jnp.mean(h ** 2)
            return w - 1e-3 * loss * w, {"loss": loss}
    return train_step


def init_state(size: int, scan: bool):
    import jax.numpy as jnp

    w = jnp.eye(size, dtype=jnp.float32) * 0.5
    return jnp.stack([w] * 4) if scan else w


def pick_size(step_ms: float, scan: bool = False) -> int:
    """The matrix size (a multiple of 32) whose step takes about ``step_ms`` here."""
    import jax
    import numpy as np

    size = 256
    for _ in range(3):
        step = make_step(size, scan)
        w = init_state(size, scan)
        x = np.random.default_rng(0).normal(size=(size, size)).astype("float32")
        jax.block_until_ready(step(w, x))
        t = time.perf_counter()
        for _ in range(6):
            w, _m = step(w, x)
        jax.block_until_ready(w)
        dt = (time.perf_counter() - t) / 6
        size = max(32, round(size * (step_ms / 1e3 / dt) ** (1 / 3) / 32) * 32)
    return size


def trace_step_ends(trace_dir: str, n: int, dispatch: list[float]) -> list[float]:
    """The trace's end of each of the ``n`` step executions (UTC seconds): the completion
    events (``ThunkExecutor::Execute (wait for completion)``, zero-length marks) grouped by
    program run, the group of ``n`` runs that each end after their step's dispatch and last
    longest after it."""
    from jax.profiler import ProfileData

    paths = glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True)
    pd = ProfileData.from_file(paths[0])
    t0 = None
    marks: list[tuple[int, float]] = []
    for plane in pd.planes:
        if plane.name == "Task Environment":
            t0 = dict(plane.stats)["profile_start_time"]
    for plane in pd.planes:
        if plane.name.startswith("/host:CPU") or plane.name.startswith("/device:"):
            for line in plane.lines:
                for e in line.events:
                    if e.name.startswith("ThunkExecutor::Execute"):
                        rid = dict(e.stats).get("run_id")
                        marks.append((rid, (t0 + e.start_ns + e.duration_ns) / 1e9))
    groups: dict[Any, list[tuple[int, float]]] = {}
    # run ids of one program count up by one per run: a program's runs form a run of ids
    for rid, t in sorted(marks):
        for g in groups.values():
            if g[-1][0] == rid - 1:
                g.append((rid, t))
                break
        else:
            groups[rid] = [(rid, t)]
    best, best_score = None, -1.0
    for g in groups.values():
        if len(g) < n:
            continue
        ends = [t for _, t in g[-n:]]
        if any(e < d for e, d in zip(ends, dispatch, strict=True)):
            continue
        score = sum(e - d for e, d in zip(ends, dispatch, strict=True))
        if score > best_score:
            best, best_score = ends, score
    if best is None:
        raise RuntimeError(f"no program with {n} runs after their dispatch in the trace")
    return best


#: a device end seen later than this after the trace's is "late": the table shows how many
#: and how much of the goodput error they make (the recorded goodput minus the same with
#: only those ends replaced by the trace's)
LATE_S = 1e-3


def _run_delay_ns(tid: int | None) -> int | None:
    """Linux's count of the nanoseconds thread ``tid`` of this process has spent runnable
    but waiting for a CPU (``/proc/self/task/TID/schedstat``, second field); None elsewhere."""
    if tid is None:
        return None
    try:
        with open(f"/proc/self/task/{tid}/schedstat") as f:
            return int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None


def run_shape(shape: Shape, size: int, steps: int, tmp: str,
              options: dict | None = None) -> dict:
    """One shape, recorded (``StepRecorder(**options)``), under a trace; returns the errors
    against the truth."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from goodput_jax import goodput, runtime
    from goodput_jax.measure.calculator import GoodputCalculator
    from goodput_jax.measure.stores.sqlite import SQLiteStore
    from tests.runtime._helpers import py_load, trace_options

    train_step = make_step(size, shape.scan)
    w = init_state(size, shape.scan)
    rows = 4 * size if shape.h2d else size
    xb = np.random.default_rng(0).normal(size=(size, size)).astype("float32")
    big = np.random.default_rng(1).normal(size=(rows, size)).astype("float32")
    jax.block_until_ready(train_step(w, jnp.asarray(xb)))
    jax.block_until_ready(jnp.asarray(big))
    db = os.path.join(tmp, f"{shape.name}.db")
    store = SQLiteStore(db)
    rec = goodput.GoodputRecorder(shape.name, shape.name, logging_enabled=True, store=store)
    options = dict(options or {})
    sig = options.pop("_sigpoll", None)
    steps_rec = runtime.StepRecorder(rec, compile_times=False, **options)
    sig_seen: dict[int, float] = {}
    sig_out: list = [None]  # the newest step's outputs, for the diagnostic's poll
    if sig:
        # diagnostic only: the training thread polls the newest step by SIGALRM inside the
        # spans and notes when it first saw it ready (recording nothing: a handler that runs
        # between any two bytecodes must take no lock the interrupted code may hold)
        import signal

        def poll(*_: Any) -> None:
            cur = sig_out[0]
            if cur is not None and cur[0] not in sig_seen and cur[1].is_ready():
                sig_seen[cur[0]] = time.time()

        signal.signal(signal.SIGALRM, poll)
        signal.siginterrupt(signal.SIGALRM, False)
    recorded = steps_rec.wrap(train_step)
    trace_dir = os.path.join(tmp, f"trace-{shape.name}")
    now = time.time
    jax.profiler.start_trace(trace_dir, profiler_options=trace_options())
    rec.record_job_start_time()
    dispatch, returned = [], []
    prev = None
    watcher: list = [None, None]  # the watcher's thread id, its run delay at step 1
    for i in range(steps):
        if i == 1:  # the watcher runs from the first tracked step on
            import threading

            watcher[0] = next((t.native_id for t in threading.enumerate()
                               if t.name == "goodput-step-watcher"), None)
            watcher[1] = _run_delay_ns(watcher[0])
        if shape.save_every and i and i % shape.save_every == 0:
            rec.record_checkpoint_save_start_time(i)
            jax.device_get(w)  # waits for the queued steps, then copies
            py_load(0.003)
            rec.record_checkpoint_save_end_time(i)
        with rec.data_loading() if shape.span else contextlib.nullcontext():
            if sig:
                import signal

                signal.setitimer(signal.ITIMER_REAL, sig, sig)
            py_load(shape.py_ms / 1e3)
            if sig:
                signal.setitimer(signal.ITIMER_REAL, 0)
            if shape.stall_every and i % shape.stall_every == shape.stall_every - 1:
                time.sleep(shape.stall_ms / 1e3)
            batch = xb
        if shape.h2d:
            batch = jnp.asarray(big)[:size]  # the host-to-device copy of a sizeable batch
        dispatch.append(now())
        w, m = recorded(i, w, batch)
        returned.append(now())
        if sig:
            sig_out[0] = (i, m["loss"])
        if shape.sync == "after":
            float(m["loss"])
        elif shape.sync == "late":
            py_load(shape.post_ms / 1e3)
            float(m["loss"])
        elif shape.sync == "lagged":
            if prev is not None:
                float(prev["loss"])
            prev = m
    jax.block_until_ready(w)
    delay_end = _run_delay_ns(watcher[0])
    steps_rec.close()
    rec.record_job_end_time()
    jax.profiler.stop_trace()
    rec.close()
    true_end = trace_step_ends(trace_dir, steps, dispatch)
    events, _ = store.read_events(shape.name)
    seen = {e.step: e.timestamp for e in events if e.kind.value == "step_device_end"}
    lag = sorted(1e6 * (seen[i] - true_end[i]) for i in range(steps) if i in seen)
    truth_events = [dataclasses.replace(e, job_name=shape.name + "-truth",
                                        timestamp=true_end[e.step])
                    if e.kind.value == "step_device_end" else
                    dataclasses.replace(e, job_name=shape.name + "-truth") for e in events]
    # the recorded ends, except those seen over 1 ms late: the error left without them
    ontime_events = [dataclasses.replace(e, job_name=shape.name + "-ontime",
                                         timestamp=true_end[e.step])
                     if e.kind.value == "step_device_end"
                     and e.timestamp - true_end[e.step] > LATE_S else
                     dataclasses.replace(e, job_name=shape.name + "-ontime") for e in events]
    store.append(truth_events + ontime_events)
    out = {}
    for arm, job in (("rec", shape.name), ("truth", shape.name + "-truth"),
                     ("ontime", shape.name + "-ontime")):
        calc = GoodputCalculator(job, job, store=store)
        det = calc.get_job_goodput_details()
        dev = calc.get_step_deviation()
        later = dev.step_times[dev.steps >= 1]
        out[arm] = (100 * det["productive_time"] / det["total_time"], float(np.mean(later)))
    store.close()
    (g, st), (tg, tst) = out["rec"], out["truth"]
    if sig:
        import signal

        signal.signal(signal.SIGALRM, signal.SIG_DFL)
    sig_lags = sorted(1e6 * (sig_seen[i] - true_end[i]) for i in sig_seen)
    lags = [seen[i] - true_end[i] for i in range(steps) if i in seen]
    late = [x for x in lags if x > LATE_S]
    cpu_wait = (None if delay_end is None or watcher[1] is None
                else (delay_end - watcher[1]) / 1e3 / (steps - 1))
    return {"shape": shape.name, "goodput": g, "truth_goodput": tg, "pp": g - tg,
            "lag_mean_us": 1e6 * statistics.fmean(lags),
            "late": (len(late), g - out["ontime"][0]),
            "cpu_wait_us": cpu_wait,
            "sig": (len(sig_lags), sig_lags[len(sig_lags) // 2] if sig_lags else 0.0,
                    statistics.fmean(sig_lags) if sig_lags else 0.0),
            "step_ms": 1e3 * st, "truth_step_ms": 1e3 * tst, "step_pct": 100 * (st / tst - 1),
            "lag_med_us": lag[len(lag) // 2], "lag_p90_us": lag[int(0.9 * len(lag))],
            "lag_max_us": lag[-1], "hook": steps_rec.hook_claims,
            "ready": steps_rec.ready_claims, "span": steps_rec.span_claims,
            "observed": steps_rec.observed, "steps": steps,
            "call_us": [round(1e6 * (r - d)) for d, r in zip(dispatch, returned, strict=True)],
            "ret_lag_us": [round(1e6 * (r - e)) for r, e in zip(returned, true_end, strict=True)],
            "lags_us": [round(1e6 * (seen[i] - true_end[i])) if i in seen else None
                        for i in range(steps)]}


def run_arm(shapes, sizes: dict, steps: int, loaded: bool,
            options: dict | None = None) -> list[dict]:
    from tests.runtime._helpers import CpuBurner

    out = []
    with CpuBurner() if loaded else contextlib.nullcontext(), \
            tempfile.TemporaryDirectory() as tmp:
        for shape in shapes:
            r = run_shape(shape, sizes[(shape.step_ms, shape.scan)], steps, tmp, options)
            r["load"] = os.getloadavg()[0]
            out.append(r)
    return out


def _med(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def print_table(runs: dict[str, list[dict]], where: str) -> None:
    """One line per shape: the median over the repeats of each figure (the statistic the
    targets are read on: one run's error moves by 1-3 pp with a single late observation on
    a shared machine), and the spread of the goodput error over the repeats."""
    n = max(len(v) for v in runs.values())
    print(f"{where} (median of {n} repeat(s); err pp range = min..max over the repeats):")
    print(f"{'shape':<19}{'goodput':>8}{'truth':>7}{'err pp':>8}{'range':>14}{'step ms':>8}"
          f"{'err %':>7}{'lag med/mean us':>16}{'rdy/hook/span':>14}{'load':>5}")
    for name, rows in runs.items():
        pp, pct = _med(rows, "pp"), _med(rows, "step_pct")
        rng = f"{min(r['pp'] for r in rows):+.2f}..{max(r['pp'] for r in rows):+.2f}"
        lag = f"{_med(rows, 'lag_med_us'):.0f}/{_med(rows, 'lag_mean_us'):.0f}"
        claims = "/".join(str(round(_med(rows, k))) for k in ("ready", "hook", "span"))
        flag = " *" if abs(pp) > 1 or abs(pct) > 3 else ""
        if rows[0]["sig"][0]:
            flag += (f"  [SIGALRM poll saw {rows[0]['sig'][0]} steps ready, lag med/mean "
                     f"{statistics.median(r['sig'][1] for r in rows):.0f}/"
                     f"{statistics.median(r['sig'][2] for r in rows):.0f} us]")
        late = statistics.median(r["late"][0] for r in rows)
        flag += (f"  [{late:.0f} steps >1 ms late: "
                 f"{statistics.median(r['late'][1] for r in rows):+.2f} pp of it")
        waits = [r["cpu_wait_us"] for r in rows if r["cpu_wait_us"] is not None]
        if waits:
            flag += f"; watcher runnable, no CPU: {statistics.median(waits):.0f} us/step"
        flag += "]"
        print(f"{name:<19}{_med(rows, 'goodput'):>8.2f}{_med(rows, 'truth_goodput'):>7.2f}"
              f"{pp:>+8.2f}{rng:>14}{_med(rows, 'step_ms'):>8.3f}{pct:>+7.1f}{lag:>16}"
              f"{claims:>14}{_med(rows, 'load'):>5.1f}{flag}")


ARMS_HELP = ("quiet / loaded (beside a CPU burner): the default StepRecorder; -none: "
             "span_switch_interval=None (the interval left alone); -ssi: "
             "span_switch_interval=SSI; -si: switch_interval=SI (held while the watcher runs); "
             "-sig: the default, and a diagnostic (the training thread polls the newest step "
             "by SIGALRM every SIG s inside the spans and notes when it saw it ready; "
             "records nothing)")


def arm_options(arm: str, si: float, ssi: float, sig: float = 1e-4) -> tuple[dict, str]:
    if arm.endswith("-si"):
        return {"switch_interval": si}, f"StepRecorder(switch_interval={si:g})"
    if arm.endswith("-sig"):
        return ({"_sigpoll": sig}, f"the default, and a diagnostic: the training thread "
                f"polls the newest step by SIGALRM every {sig:g} s inside the spans")
    if arm.endswith("-ssi"):
        return {"span_switch_interval": ssi}, f"StepRecorder(span_switch_interval={ssi:g})"
    if arm.endswith("-none"):
        return ({"span_switch_interval": None},
                "StepRecorder(span_switch_interval=None) (the interval left alone)")
    return {}, "StepRecorder() (the default)"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="30 steps per shape, 1 repeat")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--repeats", type=int, default=None,
                   help="runs of each shape per arm (default 3; the arms interleaved)")
    p.add_argument("--only", default="", help="comma-separated shape names")
    p.add_argument("--arms", default="quiet,loaded,quiet-none,loaded-none", help=ARMS_HELP)
    p.add_argument("--si", type=float, default=1e-4,
                   help="the switch_interval of the -si arms (seconds)")
    p.add_argument("--ssi", type=float, default=1e-4,
                   help="the span_switch_interval of the -ssi arms (seconds)")
    p.add_argument("--sig", type=float, default=1e-4,
                   help="the -sig arms' SIGALRM period inside the spans (seconds; diagnostic)")
    p.add_argument("--per-step", action="store_true",
                   help="print each step's recorded device end minus the trace's (us)")
    p.add_argument("--switch", type=float, default=None,
                   help="sys.setswitchinterval for the run (diagnostic only)")
    args = p.parse_args(argv)
    import jax

    if args.switch is not None:
        sys.setswitchinterval(args.switch)
    steps = args.steps or (30 if args.quick else 120)
    repeats = args.repeats or (1 if args.quick else 3)
    only = {s for s in args.only.split(",") if s}
    shapes = [s for s in SHAPES if not only or s.name in only]
    sizes = {key: pick_size(*key) for key in {(s.step_ms, s.scan) for s in shapes}}
    print(f"StepRecorder against a jax.profiler truth: jax {jax.__version__}, "
          f"{jax.devices()[0].device_kind} ({jax.default_backend()}), Python "
          f"{platform.python_version()}, {os.cpu_count()} CPUs, {steps} steps per shape, "
          f"{repeats} repeat(s), switch interval {sys.getswitchinterval() * 1e3:g} ms; sizes "
          + ", ".join(f"{k[0]:g} ms{' scan' if k[1] else ''}: {v}" for k, v in sizes.items()))
    print("err pp: recorded goodput - truth (the device ends from the trace); err %: mean step "
          "time against the truth's (steps >= 1); lag: recorded device end - the trace's "
          "(median, mean over the steps)")
    arms = args.arms.split(",")
    runs: dict[str, dict[str, list[dict]]] = {a: {s.name: [] for s in shapes} for a in arms}
    for _ in range(repeats):
        for arm in arms:  # interleaved: the arms of one repeat meet the same load
            options, _label = arm_options(arm, args.si, args.ssi, args.sig)
            for r in run_arm(shapes, sizes, steps, arm.startswith("loaded"), options):
                runs[arm][r["shape"]].append(r)
    for arm in arms:
        _opts, label = arm_options(arm, args.si, args.ssi, args.sig)
        print_table(runs[arm], ("quiet" if arm.startswith("quiet") else "beside a CPU burner")
                    + ", " + label)
        if args.per_step:
            for name, rows in runs[arm].items():
                print(f"  {name}: {rows[-1]['lags_us']}")
        meds = [(_med(rows, "pp"), _med(rows, "step_pct"), _med(rows, "lag_med_us"))
                for rows in runs[arm].values()]
        print(f"{arm}: worst |goodput error| {max(abs(m[0]) for m in meds):.2f} pp "
              f"(target 1), worst |step time error| {max(abs(m[1]) for m in meds):.1f} % "
              f"(target 3), medians over the repeats; median lag "
              f"{statistics.median(m[2] for m in meds):.0f} us", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
