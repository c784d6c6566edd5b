"""The engine's two paths agree: the vectorised path equals the row loop, row for row.

Without device ends, :meth:`Engine.feed_columns` attributes runs of simple rows with
numpy and hands everything else to the row loop. Here random job histories, made
mostly of the rows the vectorised path takes and sprinkled with every row that
makes it hand over (rollbacks, crashes, restarts, custom and elastic spans, nested
and unpaired spans, out-of-order times, compilations, other hosts, late events of
a superseded run, a job end and more events after it), go through both paths, in
random chunks, with and without a query window; an engine whose shortest
vectorised run (``FAST_MIN``) is small lets short histories cross the boundary
between the two paths many times. Everything a query reads must agree.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from goodput_jax.measure.engine import Engine
from goodput_jax.measure.engine.codes import B_DATA, B_STARTUP, HOST_BITS
from goodput_jax.measure.events import KIND_CODES, EventKind

K = EventKind
_SIMPLE_SPANS = [
    (K.ACCELERATOR_INIT_START, K.ACCELERATOR_INIT_END),
    (K.TRAINING_PREP_START, K.TRAINING_PREP_END),
    (K.PROGRAM_STARTUP_START, K.PROGRAM_STARTUP_END),
    (K.CHECKPOINT_SAVE_START, K.CHECKPOINT_SAVE_END),
    (K.CHECKPOINT_RESTORE_START, K.CHECKPOINT_RESTORE_END),
]
#: what the vectorised path takes (weighted: drawn more often) and what it hands over
_FAST_BLOCKS = ["step", "step", "step", "step_load", "step_load", "step_load", "step_end",
                "span", "gap"]
_SLOW_BLOCKS = ["rollback", "crash", "restart", "job_end", "custom", "elastic", "reinit",
                "nested", "open_span", "stray_end", "skew", "compile", "hints", "ckpt_stats",
                "progress", "slices", "follower", "late", "no_step"]


@st.composite
def host_timelines(draw):
    """(rows, chunk splits, window, FAST_MIN): a job history without device ends."""
    blocks = draw(st.lists(st.sampled_from(_FAST_BLOCKS * 5 + _SLOW_BLOCKS), min_size=8,
                           max_size=80))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    rows: list[tuple] = []
    run, step, t = 0, 0, 0.0

    def row(kind, dt=0.0, s=-1, label=None, host=0, r=None):
        nonlocal t
        t += dt
        rows.append((KIND_CODES[kind], ((run if r is None else r) << HOST_BITS) | host, t, s,
                     label))

    row(K.JOB_START)
    for b in blocks:
        u = float(rng.uniform(0.0, 2.0))
        if b in ("step", "step_load", "rollback"):
            if b == "rollback":
                step = max(0, step - int(rng.integers(1, 6)))
            row(K.STEP_START, u, step)
            if b == "step_load":
                row(K.DATA_LOADING_START, 0.01)
                row(K.DATA_LOADING_END, float(rng.uniform(0.0, 0.3)))
            step += 1
        elif b == "step_end":
            row(K.STEP_END, u, max(step - 1, 0))
        elif b == "gap":
            step += int(rng.integers(1, 4))  # (rule 4: not a restart)
        elif b == "span":
            start, end = _SIMPLE_SPANS[int(rng.integers(len(_SIMPLE_SPANS)))]
            row(start, u)
            row(end, float(rng.uniform(0.0, 3.0)))
        elif b == "crash":  # a new run (a new stream), rolled back a few steps
            run += 1
            step = max(0, step - int(rng.integers(0, 4)))
            row(K.JOB_START, float(rng.uniform(-2.0, 20.0)))
        elif b == "restart":
            row(K.JOB_START, u)
        elif b == "job_end":
            row(K.JOB_END, u)
        elif b == "custom":
            lab = str(rng.choice(["eval", "dump"]))
            row(K.CUSTOM_BADPUT_START, u, label=lab)
            row(K.CUSTOM_BADPUT_END, u, label=lab)
        elif b == "elastic":
            lab = str(rng.choice(["scale_up", "slice_down"]))
            row(K.ELASTIC_WAIT_START, u, label=lab)
            row(K.ELASTIC_WAIT_END, u, label=lab)
        elif b == "reinit":
            row(K.ELASTIC_REINIT_START, u)
            row(K.ACCELERATOR_INIT_START, u)
            row(K.ACCELERATOR_INIT_END, u)
            row(K.ELASTIC_REINIT_END, u)
        elif b == "nested":
            row(K.TRAINING_PREP_START, u)
            row(K.CHECKPOINT_RESTORE_START, u)
            row(K.CHECKPOINT_RESTORE_END, u)
            row(K.TRAINING_PREP_END, u)
        elif b == "open_span":  # left open: it owns the time until a matching end or a new run
            row(_SIMPLE_SPANS[int(rng.integers(len(_SIMPLE_SPANS)))][0], u)
        elif b == "stray_end":  # an end without its start (or closing an open one later)
            row(_SIMPLE_SPANS[int(rng.integers(len(_SIMPLE_SPANS)))][1], u)
        elif b == "skew":
            row(K.STEP_END, -float(rng.uniform(0.0, 3.0)), max(step - 1, 0))
        elif b == "compile":
            row(K.COMPILATION, u, label=json.dumps(
                {"duration_s": float(rng.uniform(0.0, 3.0)), "recompile": bool(rng.integers(2))}))
        elif b == "hints":
            row(K.HINTS, 0.0, label=json.dumps({"v": 1}))
        elif b == "ckpt_stats":
            row(K.CHECKPOINT_STATS, 0.0, label=json.dumps(
                {"event_type": str(rng.choice(["save", "restore"])),
                 "duration_s": float(rng.uniform(0.0, 2.0))}))
        elif b == "progress":
            row(K.CHECKPOINT_PROGRESS, 0.0, max(step - 1, 0))
        elif b == "slices":
            row(K.ELASTIC_SLICE_COUNTS, 0.0, label=json.dumps({"active": 1, "total": 2}))
        elif b == "follower":  # another host of the running run
            row(K.STEP_START if rng.integers(2) else K.JOB_END, u, step, host=1)
        elif b == "late" and run > 0:  # the superseded run logs again: ignored
            row(K.STEP_START, u, step, r=run - 1)
        elif b == "no_step":
            row(K.STEP_START, u, -1)
    splits = sorted({int(x) for x in rng.integers(1, len(rows) + 1, size=int(rng.integers(0, 4)))})
    window = None
    if draw(st.booleans()):
        span = max(t, 0.0) + 1.0
        a = float(rng.uniform(-5.0, span))
        window = (a, a + float(rng.uniform(0.0, span)))
    return rows, splits, window, draw(st.sampled_from([2, 1, 3, 4, 6, 8]))


def _columns(rows) -> dict:
    return {"kind": np.array([r[0] for r in rows], dtype=np.int8),
            "stream": np.array([r[1] for r in rows], dtype=np.int64),
            "ts": np.array([r[2] for r in rows], dtype=np.float64),
            "step": np.array([r[3] for r in rows], dtype=np.int64),
            "labels": {i: r[4] for i, r in enumerate(rows) if r[4] is not None}}


def _both(tl) -> tuple[Engine, Engine]:
    rows, splits, window, fast_min = tl

    class Eager(Engine):
        FAST_MIN = fast_min

    slow = Engine(*window) if window else Engine()
    fast = Eager(*window) if window else Eager()
    slow.feed_columns(_columns(rows), fast=False)
    for a, b in zip([0, *splits], [*splits, len(rows)]):
        if b > a:
            fast.feed_columns(_columns(rows[a:b]), fast=True)
    return slow, fast


_COUNTERS = ("runs", "disruptions", "window_disruptions", "dead_hosts", "follower_events",
             "ignored", "unmatched", "out_of_order", "events", "compilations", "device_runs",
             "cur", "ended", "open_step", "dq", "spans", "dl_first_done", "last_ckpt_step",
             "hints", "slice_counts", "rollbacks", "run_hosts", "first_t", "last_t")


def _assert_agree(slow: Engine, fast: Engine, now_values) -> None:
    approx = {"rel": 1e-9, "abs": 1e-9}
    for attr in _COUNTERS:
        assert getattr(fast, attr) == getattr(slow, attr), attr
    assert list(fast.live_steps) == list(slow.live_steps)
    np.testing.assert_allclose(fast.live_secs, slow.live_secs, rtol=1e-9, atol=1e-9)
    assert fast.pending == pytest.approx(slow.pending, **approx)
    np.testing.assert_allclose(fast.inferred_startup(), slow.inferred_startup(), atol=1e-9)
    assert fast.async_data_loading() == pytest.approx(slow.async_data_loading(), **approx)
    for now in now_values:
        ps, accs, cs = slow.totals(now)
        pf, accf, cf = fast.totals(now)
        assert pf == pytest.approx(ps, **approx), now
        np.testing.assert_allclose(accf, accs, rtol=1e-9, atol=1e-9, err_msg=str(now))
        assert cf.keys() == cs.keys()
        for k, v in cs.items():
            assert cf[k] == pytest.approx(v, **approx), k


def test_vectorised_path_equals_row_loop_on_random_histories():
    """1000 random histories; the vectorised path must carry most of the rows in most of
    them, or the comparison would test the row loop against itself."""
    shares = []

    @settings(max_examples=1000, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(host_timelines())
    def check(tl):
        slow, fast = _both(tl)
        _assert_agree(slow, fast, (0.0, slow.last_t + 7.5, 1e7))
        assert slow.vectorised_rows == 0
        shares.append(fast.vectorised_rows / max(fast.events, 1))

    check()
    assert np.mean(np.array(shares) > 0) > 0.5, "the vectorised path rarely ran"
    assert np.mean(shares) > 0.2


def test_a_long_history_goes_mostly_through_the_vectorised_path():
    """The default FAST_MIN: a long clean history is attributed by numpy, not row by row,
    and gives the row loop's numbers."""
    rows = [(KIND_CODES[K.JOB_START], 0, 0.0, -1, None)]
    t = 0.0
    for s in range(2000):
        rows += [(KIND_CODES[K.STEP_START], 0, t, s, None),
                 (KIND_CODES[K.DATA_LOADING_START], 0, t + 0.1, -1, None),
                 (KIND_CODES[K.DATA_LOADING_END], 0, t + 0.2, -1, None)]
        t += 1.0 + 0.5 * (s == 0)  # (a slow first step: inferred program startup)
    slow, fast = _both((rows, [1000, 4500], None, Engine.FAST_MIN))
    assert fast.vectorised_rows > 0.9 * len(rows)
    _assert_agree(slow, fast, (t, t + 3.0))
    productive, acc, _ = fast.totals(t)
    # steps 0..1998 completed (1999 is in flight): step 0 took 1.5 s less its synchronous
    # first load (0.1 s), the others 1 s each; its 0.4 s over the mean is program startup
    assert productive == pytest.approx(1999.0, abs=1e-6)
    assert acc[B_DATA] == pytest.approx(0.1) and acc[B_STARTUP] == pytest.approx(0.4)
    assert fast.async_data_loading() == pytest.approx(1999 * 0.1, abs=1e-6)
