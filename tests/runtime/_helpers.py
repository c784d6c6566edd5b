"""Shared pieces of the runtime tests: run the quickstart snippet in this process."""

from __future__ import annotations

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
