"""Shared pieces of the runtime tests: run the quickstart snippet in this process."""

from __future__ import annotations

import contextlib
import statistics
import time

from goodput_jax.measure.stores.sqlite import SQLiteStore
from tests.runtime._snippet import prelude, quickstart_snippet


def run_snippet(tmp_path, *, size: int = 256, load_s: float = 0.0, num_steps: int = 30,
                shapes: str = "lambda i: N", name: str = "snip",
                truth_every: int = 0) -> dict:
    """Exec prelude + the quickstart's snippet with a store in ``tmp_path``; returns its namespace.

    The snippet's recorder writes to ``$GOODPUT_JAX_STORE`` (the default store), set here.
    """
    import os

    db = tmp_path / f"{name}.db"
    old = os.environ.get("GOODPUT_JAX_STORE")
    os.environ["GOODPUT_JAX_STORE"] = f"sqlite:///{db}"
    try:
        ns: dict = {}
        exec(compile(prelude(size, load_s, num_steps, shapes, truth_every), "<prelude>", "exec"), ns)  # noqa: S102
        t0 = time.time()
        exec(compile(quickstart_snippet(), "<quickstart>", "exec"), ns)  # noqa: S102
        ns["_wall"] = (t0, time.time())
        ns["recorder"].close()
    finally:
        if old is None:
            os.environ.pop("GOODPUT_JAX_STORE", None)
        else:
            os.environ["GOODPUT_JAX_STORE"] = old
    ns["_store"] = SQLiteStore(str(db), create=False)
    return ns


def queued_step(size: int = 256, depth: int = 4):
    """A compiled jitted step of ``depth`` ``tanh(x @ w)`` layers on ``size`` x ``size``
    arrays (a few ms on a CPU core), for loops that queue steps ahead of the device: returns
    ``(step_fn, w, x)``; ``step_fn(w, x) -> (new_w, mean)``."""
    import jax
    import jax.numpy as jnp

    @jax.jit
    def step_fn(w, x):
        for _ in range(depth):
            x = jnp.tanh(x @ w)
        return w * 0.999 + 1e-4 * x, jnp.mean(x)

    w = jnp.full((size, size), 1.0 / size)
    x = jnp.ones((size, size))
    jax.block_until_ready(step_fn(w, x))
    return step_fn, w, x


def events(ns: dict, kind: str) -> list:
    evs, _ = ns["_store"].read_events("run1")
    return [e for e in evs if e.kind.value == kind]


def true_step_time(train_step, state, batch, reps: int = 5, k: int = 4) -> float:
    """Device step time measured the plain way: ``k`` dependent steps dispatched,
    ``block_until_ready``, time / k (the host's per-call dispatch and wake-up are not device
    time); median of reps. ``train_step(state, batch) -> (state, metrics)``."""
    import jax

    jax.block_until_ready(train_step(state, batch))
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        s = state
        for _ in range(k):
            s, _m = train_step(s, batch)
        jax.block_until_ready(s)
        ts.append((time.perf_counter() - t) / k)
    return statistics.median(ts)


def device_busy(trace_dir) -> list[tuple[float, float]]:
    """The device's busy intervals (UTC seconds, merged) from a ``jax.profiler`` trace written
    to ``trace_dir``: device truth that does not come from goodput_jax. On a GPU/TPU the
    events of the ``/device:*`` planes; on CPU the XLA runtime's threads' events (the
    ``tf_XLA*`` lines of ``/host:CPU``: each execution's thunks, on the client's and the
    intra-op threads; zero-length markers left out)."""
    import glob
    import os

    from jax.profiler import ProfileData

    paths = glob.glob(os.path.join(str(trace_dir), "**", "*.xplane.pb"), recursive=True)
    if len(paths) != 1:
        raise RuntimeError(f"expected one trace in {trace_dir}, found {paths}")
    pd = ProfileData.from_file(paths[0])
    t0 = None
    spans = []
    for plane in pd.planes:
        if plane.name == "Task Environment":
            t0 = dict(plane.stats)["profile_start_time"]  # ns since the epoch
    devices = [p for p in pd.planes if p.name.startswith("/device:")]
    for plane in devices or [p for p in pd.planes if p.name == "/host:CPU"]:
        for line in plane.lines:
            if not devices and not line.name.startswith("tf_XLA"):
                continue
            for e in line.events:
                if e.duration_ns > 0 and not e.name.startswith("ThreadpoolListener"):
                    spans.append((e.start_ns, e.start_ns + e.duration_ns))
    if t0 is None or not spans:
        raise RuntimeError(f"no device events in the trace {paths[0]}")
    spans.sort()
    merged = [list(spans[0])]
    for a, b in spans[1:]:
        if a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [((t0 + a) / 1e9, (t0 + b) / 1e9) for a, b in merged]


def step_executions(spans: list[tuple[float, float]], marks: list[tuple[float, float]]
                    ) -> list[float]:
    """The device's execution time of each step of a loop that waits for every step: the
    span from the first busy interval's start to the last one's end inside each host window
    ``marks[i] = (call, wait returned)`` (``spans`` from :func:`device_busy`)."""
    execs = []
    for t0, t1 in marks:
        inside = [(max(a, t0), min(b, t1)) for a, b in spans if b > t0 and a < t1]
        execs.append(max(b for _, b in inside) - min(a for a, _ in inside))
    return execs


def overlap(spans: list[tuple[float, float]], a: float, b: float) -> float:
    """Seconds of ``spans`` (merged intervals) inside ``[a, b]``."""
    return sum(max(0.0, min(e, b) - max(s, a)) for s, e in spans)


def py_load(seconds: float) -> int:
    """A Python-heavy loader: ``seconds`` of pure-Python work holding the GIL (a tokeniser-like
    loop of dict updates), as tokenisers, augmentation and Python-side batching are."""
    end = time.perf_counter() + seconds
    words = [f"tok{j}" for j in range(64)]
    acc = 0
    while time.perf_counter() < end:
        d: dict = {}
        for w in words:
            d[w] = d.get(w, 0) + len(w)
        acc += len(d)
    return acc


class CpuBurner:
    """A process that burns one CPU core while the ``with`` block runs (a loaded machine)."""

    def __enter__(self):
        import subprocess
        import sys

        self.proc = subprocess.Popen([sys.executable, "-c", "while 1: pass"])
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()


@contextlib.contextmanager
def traced_job(trace_dir, rec, steps):
    """A recorded job under a ``jax.profiler`` trace (:func:`trace_options`): the trace and
    the job start on entry; on a clean exit the steps finish and the job ends; the trace
    stops and ``steps`` and ``rec`` close in any case."""
    import jax

    jax.profiler.start_trace(str(trace_dir), profiler_options=trace_options())
    try:
        rec.record_job_start_time()
        yield
        steps.finish()
        rec.record_job_end_time()
    finally:
        jax.profiler.stop_trace()
        steps.close()
        rec.close()


def trace_options():
    """``jax.profiler`` options for a device-truth trace: the host tracer (the XLA runtime's
    own events) without the Python tracer, which times every Python call of every thread,
    the recorder's observation of a step's end included (its lag behind the device was
    2-3x longer under it in one check)."""
    import jax

    opts = jax.profiler.ProfileOptions()
    opts.python_tracer_level = 0
    return opts


def synced_loop_truth(busy, dispatch, synced, loads, total) -> dict:
    """The device's truth for a loop that waits for every step (``float(loss)``), from the
    trace's busy intervals: step ``i`` runs from its dispatch (host time) to the end of the
    last busy interval before the host saw it synced; goodput = the steps' time over
    ``total``, as the calculator counts it (with no compile recorded, the first step's
    excess over the mean of the others is program startup there: so here too);
    ``idle_loading`` = the loading spans minus the device's busy time inside them;
    ``host_stall_s``: the time the host took beyond twice its usual wake-up to return from
    its syncs (a machine so loaded that no host thread ran when the device finished)."""
    dev_end = []
    for b, e in zip(dispatch, synced, strict=True):
        ends = [hi for lo, hi in busy if b <= hi and lo <= e]
        dev_end.append(min(max(ends), e) if ends else e)
    steps = [e - b for b, e in zip(dispatch, dev_end, strict=True)]
    later = steps[1:] or steps
    startup = max(0.0, steps[0] - sum(later) / len(later))
    idle = sum((b - a) - overlap(busy, a, b) for a, b in loads)
    # the host's stalls: how much later than usual (twice the median) the training thread
    # got back from its sync after the device's end (it, and every other host thread, had
    # no CPU: no host-side observer can see the end before one runs)
    waits = sorted(s - e for s, e in zip(synced, dev_end, strict=True))
    usual = 2 * waits[len(waits) // 2]
    stall = sum(max(0.0, w - usual) for w in waits)
    return {"goodput": 100 * (sum(steps) - startup) / total,
            "idle_loading": 100 * idle / total,
            "step_s": sum(later) / len(later), "steps": steps, "dev_end": dev_end,
            "host_stall_s": stall}
