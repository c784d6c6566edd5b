"""The vectorised path: runs of simple rows of a columnar chunk, attributed with numpy.

A run of *simple* rows (one stream, non-decreasing time, steps that only go
forward, non-custom spans that close on the next row, asynchronous loads, host
step ends, and an engine with no span open and no device ends) is what the row
loop would walk one row at a time; here the same decisions are taken for every
row at once: the owner of each gap is
:func:`~goodput_jax.measure.engine.rules.gap_owner` (its table, indexed with
arrays), a load is a span only where
:func:`~goodput_jax.measure.engine.rules.load_blocks` says, slices are clipped
by :func:`~goodput_jax.measure.engine.rules.window_ends`, a step start that
rolls back is the engine's ``_rolls_back``, and completed steps become live
through ``Engine._complete_many`` (the segment bookkeeping of the row loop's
``_complete``). Everything else goes through the row loop. Both give the same
result, up to floating-point summation order (hypothesis tests:
``tests/measure/test_calculator.py``, ``tests/measure/test_engine_paths.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from goodput_jax.measure.engine.codes import (
    CUSTOM_START,
    DL_END,
    DL_START,
    EWAIT_START,
    NB,
    PENDING,
    REINIT_START,
    SPAN_END_START,
    SPAN_START_BUCKET,
    STEP_END,
    STEP_START,
)
from goodput_jax.measure.engine.rules import OWNER_TABLES, load_blocks, window_ends
from goodput_jax.measure.events import KIND_CODES

if TYPE_CHECKING:
    from goodput_jax.measure.engine.core import Engine

_N_CODES = len(KIND_CODES)
#: gap owner by (bucket of the span the previous row opened, -1 if none; step open),
#: in the only mode the vectorised path runs in (no device ends, no re-initialisation)
_OWNER = np.array(OWNER_TABLES[False][False], dtype=np.int64)
#: kind code -> bucket of the span it opens on this path, else -1 (a later load is a
#: span only if the rule says so; this path runs after the run's first load)
_SPAN_START_LUT = np.full(_N_CODES, -1, dtype=np.int64)
#: kind code -> its end code for span starts (custom and elastic excluded), else -1
_SPAN_END_LUT = np.full(_N_CODES, -1, dtype=np.int64)
#: end kind code -> its start code (custom and elastic excluded), else -1
_SPAN_START_OF_END_LUT = np.full(_N_CODES, -1, dtype=np.int64)
for _end, _start in SPAN_END_START.items():
    if _start not in (CUSTOM_START, EWAIT_START, REINIT_START):
        if _start != DL_START or load_blocks(False, True):
            _SPAN_START_LUT[_start] = SPAN_START_BUCKET[_start]
        _SPAN_END_LUT[_start] = _end
        _SPAN_START_OF_END_LUT[_end] = _start
#: owner of the gap after a row, flat by ``2 * kind code + step open after it`` (the span
#: a row opens closes on the next row: a run starts with no span open)
_OWNER_AFTER = _OWNER[_SPAN_START_LUT].ravel()
#: kinds the vectorised path handles
_SIMPLE_LUT = np.zeros(_N_CODES, dtype=bool)
_SIMPLE_LUT[[STEP_START, STEP_END]] = True
_SIMPLE_LUT[_SPAN_END_LUT >= 0] = True
_SIMPLE_LUT[_SPAN_START_OF_END_LUT >= 0] = True


def feed_columns(eng: Engine, cols: dict, fast: bool = True) -> None:
    """:meth:`Engine.feed_columns <goodput_jax.measure.engine.Engine.feed_columns>`."""
    kind, stream, ts, step = cols["kind"], cols["stream"], cols["ts"], cols["step"]
    n = kind.size
    labels = cols["labels"]
    if n == 0:
        return

    def slow(a: int, b: int) -> None:
        lab = [labels.get(i) for i in range(a, b)] if labels else [None] * (b - a)
        eng.feed(zip(kind[a:b].tolist(), stream[a:b].tolist(), ts[a:b].tolist(),
                     step[a:b].tolist(), lab))

    fast_min = eng.FAST_MIN
    if not fast or eng.record or eng.excl or n < fast_min:
        slow(0, n)
        return
    k = kind.astype(np.int64)
    is_ss = k == STEP_START
    span_start = _SPAN_END_LUT[k] >= 0
    span_end = _SPAN_START_OF_END_LUT[k] >= 0
    simple = _SIMPLE_LUT[k] & ~(is_ss & (step < 0))
    pair_ok = np.ones(n, dtype=bool)
    if span_start.any() or span_end.any():
        nxt = np.empty(n, dtype=np.int64)
        nxt[:-1] = k[1:]
        nxt[-1] = -1
        prv = np.empty(n, dtype=np.int64)
        prv[1:] = k[:-1]
        prv[0] = -1
        pair_ok &= ~span_start | (nxt == _SPAN_END_LUT[k])
        pair_ok &= ~span_end | (_SPAN_START_OF_END_LUT[k] == prv)
    # STEP_START numbers must grow along the chunk
    ss_idx = np.flatnonzero(is_ss)
    dl_idx = np.flatnonzero(k == DL_START)
    step_ok = np.ones(n, dtype=bool)
    if ss_idx.size > 1:
        s = step[ss_idx]
        step_ok[ss_idx[1:]] = s[1:] > s[:-1]
    cont = np.zeros(n, dtype=bool)
    cont[1:] = (simple[1:] & simple[:-1] & (stream[1:] == stream[:-1])
                & (ts[1:] >= ts[:-1]) & pair_ok[1:] & step_ok[1:])
    start_ok = simple & pair_ok & ~span_end
    start_idx = np.flatnonzero(start_ok)
    breaks = np.flatnonzero(~cont)  # breaks[0] == 0
    nb = breaks.size
    pos = 0
    slow_from = -1
    bi = 0
    while pos < n:
        while bi + 1 < nb and breaks[bi + 1] <= pos:
            bi += 1
        end = int(breaks[bi + 1]) if bi + 1 < nb else n
        if start_ok[pos] and end - pos >= fast_min:
            if slow_from >= 0:
                slow(slow_from, pos)
                slow_from = -1
            if (eng.cur is not None and eng.cur == stream[pos] and not eng.ended
                    and not eng.spans and not eng.dev_mode and ts[pos] >= eng.last_t):
                c = end
                if load_blocks(eng.dev_mode, eng.dl_first_done):
                    # the run's first (synchronous) load goes through the row loop
                    j = np.searchsorted(dl_idx, pos)
                    if j < dl_idx.size and dl_idx[j] < end:
                        c = int(dl_idx[j])
                j = np.searchsorted(ss_idx, pos)
                if j < ss_idx.size and ss_idx[j] < c and eng._rolls_back(int(step[ss_idx[j]])):
                    c = int(ss_idx[j])
                if c > pos and span_start[c - 1]:
                    c -= 1  # leave a trailing unpaired span start to the row loop
                if c - pos >= fast_min:
                    _fast_run(eng, k[pos:c], ts[pos:c], step[pos:c])
                    pos = c
                    continue
                if c == pos:  # a rollback step or a first load: the row loop
                    e = pos + 1
                    if k[pos] == DL_START and e < n and k[e] == DL_END:
                        e += 1
                    slow(pos, e)
                    pos = e
                    continue
                if pos < c < end:  # a short piece before a cut: the row loop
                    slow(pos, c)
                    pos = c
                    continue
            # engine not ready (e.g. a span left open) or run too short: row loop
            slow_from = pos
            pos = end
            continue
        if slow_from < 0:
            slow_from = pos
        if end - pos >= fast_min:
            # e.g. a span end whose start was in the previous chunk: retry from
            # the next row that can start a run
            j = np.searchsorted(start_idx, pos + 1)
            if j < start_idx.size and start_idx[j] < end:
                pos = int(start_idx[j])
                continue
        pos = end
    if slow_from >= 0:
        slow(slow_from, n)


def _fast_run(eng: Engine, k: np.ndarray, t: np.ndarray, s: np.ndarray) -> None:
    """Attribute one run of simple rows (see :func:`feed_columns`)."""
    m = k.size
    starts = np.empty(m)
    starts[0] = eng.last_t
    starts[1:] = t[:-1]
    if eng.windowed:  # clip every slice to the window, like the row loop
        lo, hi = window_ends(starts, t, eng.ws, eng.we, np.maximum, np.minimum)
        dt = np.maximum(hi - lo, 0.0)
    else:
        dt = t - starts
    is_ss = k == STEP_START
    engine_open = eng.open_step >= 0
    ss_cum = np.cumsum(is_ss)
    open_after = (ss_cum > 0) | engine_open  # a step is open after row i
    # the owner of the gap before row i is the owner after row i - 1
    state = np.empty(m, dtype=np.int64)
    state[0] = _OWNER[-1, int(engine_open)]
    state[1:] = _OWNER_AFTER[2 * k[:-1] + open_after[:-1]]
    sums = np.bincount(state, weights=dt, minlength=NB + 1)
    acc = eng.acc
    for b in range(NB):
        if sums[b]:
            acc[b] += float(sums[b])
    is_dle = k == DL_END
    if is_dle.any():  # (a load's time is the gap its end closes: its start is the row before)
        eng.dl_total += float(dt[is_dle].sum())
    # pending time of each step: its start row to the next step start
    n_ss = int(ss_cum[-1])
    group = np.empty(m, dtype=np.int64)
    group[0] = 0
    group[1:] = ss_cum[:-1]
    pmask = state == PENDING
    pend = np.bincount(group[pmask], weights=dt[pmask], minlength=n_ss + 1)
    pend[0] += eng.pending
    stepnum = np.empty(n_ss + 1, dtype=np.int64)
    stepnum[0] = eng.open_step
    stepnum[1:] = s[is_ss]
    lo_step = 0 if engine_open else 1
    if n_ss > lo_step:  # every step but the last one started is complete
        eng._complete_many(stepnum[lo_step:n_ss], pend[lo_step:n_ss])
    if open_after[-1]:
        eng.open_step = int(stepnum[n_ss])
        eng.pending = float(pend[n_ss])
    else:
        eng.open_step = -1
        eng.pending = 0.0
    eng.last_t = float(t[-1])
    eng.events += m
    eng.vectorised_rows += m
