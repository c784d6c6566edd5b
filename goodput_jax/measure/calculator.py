"""GoodputCalculator: goodput, badput breakdown, intervals and step-time statistics.

The calculator reads a job's events from an :class:`EventStore` in insertion
order and attributes every second of the job's time to exactly one bucket:
productive step time or one :class:`BadputType`. It keeps running totals and a
store cursor, so a query after K new events costs O(K), not O(history).

The rules (documented with one test each in ``docs/semantics.md``):

* The timeline unit is a *stream*: the events of one ``(run_id, host)``. Every
  duration is the difference of two timestamps of the same stream, so clocks of
  different hosts are never subtracted, except for the downtime between a crashed
  stream and the next one, which is clamped at zero.
* Within a stream, the time between two consecutive events goes to the innermost
  (most recently opened, still open) badput span; else to the open step (pending,
  productive once the step completes); else to ``OTHER``.
* A step completes at the next ``STEP_START``, its ``STEP_END`` or ``JOB_END``
  of the same stream. A ``STEP_START`` with a step number <= an earlier live step
  rolls back progress: the productive time of every live step >= it becomes
  ``WASTED_PROGRESS_FROM_DISRUPTION``. Gaps in step numbers are not an error.
* A new stream supersedes the previous one. If that one had no ``JOB_END`` it
  crashed: its in-flight step and the downtime until the new stream's first event
  are ``INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION``. If it ended cleanly, the idle
  time between the two runs is not job time. Late events of a superseded stream
  are ignored (and counted).
* While the latest stream runs, time from its last event to ``clock()`` goes to
  the open badput span, else ``OTHER``; an in-flight step is not productive until
  it completes, so a hang counts against goodput.

Example:
    >>> from goodput_jax.measure.stores.sqlite import SQLiteStore
    >>> from goodput_jax.measure.events import Event, EventKind as K
    >>> store = SQLiteStore(":memory:")
    >>> ev = lambda kind, t, step=None: Event(kind, "job", "run-1", 0, t, step=step)
    >>> store.append([ev(K.JOB_START, 0.0), ev(K.STEP_START, 10.0, 0),
    ...               ev(K.STEP_START, 20.0, 1), ev(K.JOB_END, 30.0)])
    >>> calc = GoodputCalculator("job", "logger", store=store)
    >>> goodput, badput, last_step = calc.get_job_goodput(include_badput_breakdown=True)
    >>> round(goodput, 2), round(badput[BadputType.OTHER], 2), last_step
    (66.67, 33.33, 1)
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import threading
import time
from array import array
from collections.abc import Callable
from typing import Any

import numpy as np

from goodput_jax.measure.events import KIND_CODES, EventKind, to_timestamp
from goodput_jax.measure.stores import EventStore, resolve_store


class BadputType(enum.Enum):
    """Causes of unproductive time (Google's ml-goodput-measurement categories).

    ``TPU_INITIALIZATION`` and ``DATA_LOADING_SYNC`` are aliases of
    ``ACCELERATOR_INITIALIZATION`` and ``DATA_LOADING`` (Google's names).
    ``DATA_LOADING_ASYNC`` exists for drop-in compatibility: asynchronous loading
    does not block training, so it is never badput and always reported as 0.
    """

    ACCELERATOR_INITIALIZATION = 1
    TPU_INITIALIZATION = 1  # noqa: PIE796 - Google's name, an alias
    TRAINING_PREP = 2
    PROGRAM_STARTUP = 3
    DATA_LOADING = 4
    DATA_LOADING_SYNC = 4  # noqa: PIE796 - Google's name, an alias
    DATA_LOADING_ASYNC = 5
    UNPRODUCTIVE_CHECKPOINT_SAVE_TIME = 6
    UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME = 7
    WASTED_PROGRESS_FROM_DISRUPTION = 8
    INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION = 9
    CUSTOM_BADPUT_EVENTS = 10
    OTHER = 11


class NoEventsError(ValueError):
    """The store holds no timeline events for the job (message names store and job)."""


# Bucket indices of the hot loop.
_B_ACCEL, _B_PREP, _B_STARTUP, _B_DATA, _B_SAVE, _B_RESTORE = 0, 1, 2, 3, 4, 5
_B_WASTED, _B_INFRA, _B_CUSTOM, _B_OTHER = 6, 7, 8, 9
_NB = 10
_BUCKET_TYPES = (
    BadputType.ACCELERATOR_INITIALIZATION,
    BadputType.TRAINING_PREP,
    BadputType.PROGRAM_STARTUP,
    BadputType.DATA_LOADING,
    BadputType.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME,
    BadputType.UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME,
    BadputType.WASTED_PROGRESS_FROM_DISRUPTION,
    BadputType.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION,
    BadputType.CUSTOM_BADPUT_EVENTS,
    BadputType.OTHER,
)

_K = KIND_CODES
_JOB_START, _JOB_END = _K[EventKind.JOB_START], _K[EventKind.JOB_END]
_STEP_START, _STEP_END = _K[EventKind.STEP_START], _K[EventKind.STEP_END]
_HINTS, _CKPT_PROGRESS = _K[EventKind.HINTS], _K[EventKind.CHECKPOINT_PROGRESS]
#: span start code -> bucket
_SPAN_START_BUCKET = {
    _K[EventKind.ACCELERATOR_INIT_START]: _B_ACCEL,
    _K[EventKind.TRAINING_PREP_START]: _B_PREP,
    _K[EventKind.PROGRAM_STARTUP_START]: _B_STARTUP,
    _K[EventKind.DATA_LOADING_START]: _B_DATA,
    _K[EventKind.CHECKPOINT_SAVE_START]: _B_SAVE,
    _K[EventKind.CHECKPOINT_RESTORE_START]: _B_RESTORE,
    _K[EventKind.CUSTOM_BADPUT_START]: _B_CUSTOM,
}
#: span end code -> its start code
_SPAN_END_START = {
    _K[EventKind.ACCELERATOR_INIT_END]: _K[EventKind.ACCELERATOR_INIT_START],
    _K[EventKind.TRAINING_PREP_END]: _K[EventKind.TRAINING_PREP_START],
    _K[EventKind.PROGRAM_STARTUP_END]: _K[EventKind.PROGRAM_STARTUP_START],
    _K[EventKind.DATA_LOADING_END]: _K[EventKind.DATA_LOADING_START],
    _K[EventKind.CHECKPOINT_SAVE_END]: _K[EventKind.CHECKPOINT_SAVE_START],
    _K[EventKind.CHECKPOINT_RESTORE_END]: _K[EventKind.CHECKPOINT_RESTORE_START],
    _K[EventKind.CUSTOM_BADPUT_END]: _K[EventKind.CUSTOM_BADPUT_START],
}


_PENDING = _NB  # state code of "inside an open step" in the vectorised path
_N_CODES = len(KIND_CODES)
#: kind code -> bucket of a span start (custom excluded), else -1
_SPAN_START_LUT = np.full(_N_CODES, -1, dtype=np.int64)
#: kind code -> its end code for span starts (custom excluded), else -1
_SPAN_END_LUT = np.full(_N_CODES, -1, dtype=np.int64)
#: end kind code -> its start code (custom excluded), else -1
_SPAN_START_OF_END_LUT = np.full(_N_CODES, -1, dtype=np.int64)
for _end, _start in _SPAN_END_START.items():
    if _start != _K[EventKind.CUSTOM_BADPUT_START]:
        _SPAN_START_LUT[_start] = _SPAN_START_BUCKET[_start]
        _SPAN_END_LUT[_start] = _end
        _SPAN_START_OF_END_LUT[_end] = _start
#: kinds the vectorised path handles
_SIMPLE_LUT = np.zeros(_N_CODES, dtype=bool)
_SIMPLE_LUT[[_STEP_START, _STEP_END]] = True
_SIMPLE_LUT[_SPAN_START_LUT >= 0] = True
_SIMPLE_LUT[_SPAN_START_OF_END_LUT >= 0] = True


class _Engine:
    """The attribution state machine (one pass over rows in insertion order).

    Rows are ``(kind_code, stream_key, ts, step, label_or_payload)``: the last
    column is the custom badput label, or the hints payload for HINTS rows. The
    optional window clips every attributed slice to ``[ws, we]``.
    """

    def __init__(self, ws: float = -math.inf, we: float = math.inf):
        self.ws, self.we = ws, we
        self.acc = [0.0] * _NB
        self.productive = 0.0
        self.custom: dict[str, float] = {}
        self.live_steps = array("q")
        self.live_secs = array("d")
        self.seen: set = set()
        self.cur = None  # active stream key
        self.ended = False
        self.last_t = 0.0
        self.spans: list[tuple[int, str | None, int]] = []
        self.open_step = -1
        self.pending = 0.0
        self.runs = 0
        self.disruptions = 0
        self.ignored = 0
        self.unmatched = 0
        self.out_of_order = 0
        self.events = 0
        self.hints: Any = None
        self.last_ckpt_step: int | None = None

    def feed(self, rows) -> None:
        acc = self.acc
        custom = self.custom
        live_steps, live_secs = self.live_steps, self.live_secs
        seen = self.seen
        ws, we = self.ws, self.we
        cur, ended, last_t = self.cur, self.ended, self.last_t
        spans, open_step, pending = self.spans, self.open_step, self.pending
        productive = self.productive
        span_bucket = _SPAN_START_BUCKET
        span_end = _SPAN_END_START
        n = 0
        for kind, sid, t, step, label in rows:
            n += 1
            if kind == _HINTS:
                self.hints = label  # the payload travels in the label column
                continue
            if kind == _CKPT_PROGRESS:
                # informational (its time is the checkpoint's start, usually in the past)
                self.last_ckpt_step = step if step is not None and step >= 0 else None
                continue
            if sid != cur:
                if sid in seen:
                    self.ignored += 1
                    continue
                if cur is not None and not ended:
                    # the previous stream crashed: in-flight step + downtime
                    self.disruptions += 1
                    a = last_t if last_t > ws else ws  # noqa: FURB136 - no call in the hot loop
                    b = t if t < we else we  # noqa: FURB136
                    acc[_B_INFRA] += pending + (b - a if b > a else 0.0)
                seen.add(sid)
                cur = sid
                ended = False
                last_t = t
                spans = []
                open_step = -1
                pending = 0.0
                self.runs += 1
            elif ended:
                # a cleanly ended stream that logs again: the pause is not job time
                ended = False
                last_t = t if t > last_t else last_t  # noqa: FURB136
            else:
                if t < last_t:
                    self.out_of_order += 1
                    t = last_t
                a = last_t if last_t > ws else ws  # noqa: FURB136 - no call in the hot loop
                b = t if t < we else we  # noqa: FURB136
                if b > a:
                    dt = b - a
                    if spans:
                        top = spans[-1]
                        acc[top[2]] += dt
                        if top[2] == _B_CUSTOM:
                            custom[top[1]] = custom.get(top[1], 0.0) + dt
                    elif open_step >= 0:
                        pending += dt
                    else:
                        acc[_B_OTHER] += dt
                last_t = t
            # apply the event
            if kind == _STEP_START:
                if step is None or step < 0:  # columnar reads use -1 for "no step"
                    self.unmatched += 1
                    continue
                if open_step >= 0:
                    live_steps.append(open_step)
                    live_secs.append(pending)
                    productive += pending
                while live_steps and live_steps[-1] >= step:
                    live_steps.pop()
                    s = live_secs.pop()
                    productive -= s
                    acc[_B_WASTED] += s
                open_step = step
                pending = 0.0
            elif kind in span_bucket:
                spans.append((kind, label, span_bucket[kind]))
            elif kind in span_end:
                want = span_end[kind]
                for i in range(len(spans) - 1, -1, -1):
                    if spans[i][0] == want and spans[i][1] == label:
                        del spans[i]
                        break
                else:
                    self.unmatched += 1
            elif kind == _STEP_END or kind == _JOB_END:
                if open_step >= 0:  # both close an open step
                    live_steps.append(open_step)
                    live_secs.append(pending)
                    productive += pending
                    open_step = -1
                    pending = 0.0
                elif kind == _STEP_END:
                    self.unmatched += 1
                if kind == _JOB_END:
                    spans = []
                    ended = True
            # JOB_START: only marks the stream's beginning
        self.cur, self.ended, self.last_t = cur, ended, last_t
        self.spans, self.open_step, self.pending = spans, open_step, pending
        self.productive = productive
        self.events += n

    #: shortest run worth the numpy overhead
    FAST_MIN = 128

    def feed_columns(self, cols: dict, fast: bool = True) -> None:
        """Feed a columnar chunk (see ``SQLiteStore.read_columns``).

        Runs of "simple" rows (one stream, non-decreasing time, steps that only
        go forward, non-custom spans that close on the next row, nothing else)
        are attributed with numpy in one go; everything else goes through the
        row loop :meth:`feed`. Both give the same result (tested), up to
        floating-point summation order.
        """
        kind, stream, ts, step = cols["kind"], cols["stream"], cols["ts"], cols["step"]
        n = kind.size
        labels = cols["labels"]
        if n == 0:
            return

        def slow(a: int, b: int) -> None:
            lab = [labels.get(i) for i in range(a, b)] if labels else [None] * (b - a)
            self.feed(zip(kind[a:b].tolist(), stream[a:b].tolist(), ts[a:b].tolist(),
                          step[a:b].tolist(), lab))

        if not fast or n < self.FAST_MIN:
            slow(0, n)
            return
        k = kind.astype(np.int64)
        is_ss = k == _STEP_START
        span_start = _SPAN_START_LUT[k] >= 0
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
            if start_ok[pos] and end - pos >= self.FAST_MIN:
                if slow_from >= 0:
                    slow(slow_from, pos)
                    slow_from = -1
                if (self.cur is not None and self.cur == stream[pos] and not self.ended
                        and not self.spans and ts[pos] >= self.last_t):
                    c = end
                    j = np.searchsorted(ss_idx, pos)
                    if j < ss_idx.size and ss_idx[j] < end:
                        top = self.live_steps[-1] if self.live_steps else -1
                        if step[ss_idx[j]] <= max(self.open_step, top):
                            c = int(ss_idx[j])
                    if c > pos and span_start[c - 1]:
                        c -= 1  # leave a trailing unpaired span start to the row loop
                    if c - pos >= self.FAST_MIN:
                        self._fast_run(k[pos:c], ts[pos:c], step[pos:c])
                        pos = c
                        continue
                    if c == pos:  # a rollback step: the row loop handles it
                        slow(pos, pos + 1)
                        pos += 1
                        continue
                # engine not ready (e.g. a span left open) or run too short: row loop
                slow_from = pos
                pos = end
                continue
            if slow_from < 0:
                slow_from = pos
            if end - pos >= self.FAST_MIN:
                # e.g. a span end whose start was in the previous chunk: retry from
                # the next row that can start a run
                j = np.searchsorted(start_idx, pos + 1)
                if j < start_idx.size and start_idx[j] < end:
                    pos = int(start_idx[j])
                    continue
            pos = end
        if slow_from >= 0:
            slow(slow_from, n)

    def _fast_run(self, k: np.ndarray, t: np.ndarray, s: np.ndarray) -> None:
        """Vectorised attribution of one run of simple rows (see feed_columns)."""
        m = k.size
        starts = np.empty(m)
        starts[0] = self.last_t
        starts[1:] = t[:-1]
        if self.ws == -math.inf and self.we == math.inf:
            dt = t - starts
        else:  # clip every slice to the window, like the row loop
            dt = np.maximum(np.minimum(t, self.we) - np.maximum(starts, self.ws), 0.0)
        is_ss = k == _STEP_START
        is_se = k == _STEP_END
        marker = is_ss | is_se
        engine_open = self.open_step >= 0
        last_marker = np.maximum.accumulate(np.where(marker, np.arange(m), -1))
        open_after = np.where(last_marker >= 0, is_ss[last_marker.clip(0)], engine_open)
        b_row = _SPAN_START_LUT[k]
        state = np.empty(m, dtype=np.int64)
        state[0] = _PENDING if engine_open else _B_OTHER
        state[1:] = np.where(b_row[:-1] >= 0, b_row[:-1],
                             np.where(open_after[:-1], _PENDING, _B_OTHER))
        sums = np.bincount(state, weights=dt, minlength=_NB + 1)
        acc = self.acc
        for b in range(_NB):
            if sums[b]:
                acc[b] += float(sums[b])
        ss_cum = np.cumsum(is_ss)
        n_ss = int(ss_cum[-1])
        group = np.empty(m, dtype=np.int64)
        group[0] = 0
        group[1:] = ss_cum[:-1]
        pmask = state == _PENDING
        pend = np.bincount(group[pmask], weights=dt[pmask], minlength=n_ss + 1)
        pend[0] += self.pending
        stepnum = np.empty(n_ss + 1, dtype=np.int64)
        stepnum[0] = self.open_step
        stepnum[1:] = s[is_ss]
        mk = np.flatnonzero(marker)
        if mk.size:
            open_before = np.empty(mk.size, dtype=bool)
            prev = mk - 1
            open_before[:] = np.where(prev >= 0, open_after[prev.clip(0)], engine_open)
            group_before = ss_cum[mk] - is_ss[mk]
            gp = group_before[open_before]
            self.unmatched += int(np.count_nonzero(is_se[mk] & ~open_before))
            if gp.size:
                secs = pend[gp]
                self.live_steps.frombytes(stepnum[gp].astype(np.int64).tobytes())
                self.live_secs.frombytes(secs.astype(np.float64).tobytes())
                self.productive += float(secs.sum())
        if open_after[-1]:
            self.open_step = int(stepnum[n_ss])
            self.pending = float(pend[n_ss])
        else:
            self.open_step = -1
            self.pending = 0.0
        self.last_t = float(t[-1])
        self.events += m

    def totals(self, now: float) -> tuple[float, list[float], dict[str, float]]:
        """(productive, bucket seconds, custom seconds) including the live tail up to now."""
        acc = list(self.acc)
        custom = dict(self.custom)
        if self.cur is not None and not self.ended:
            acc[_B_OTHER] += self.pending  # in-flight step: not productive yet
            a = max(self.last_t, self.ws)
            b = min(now, self.we)
            if b > a:
                dt = b - a
                if self.spans:
                    _, label, bucket = self.spans[-1]
                    acc[bucket] += dt
                    if bucket == _B_CUSTOM:
                        custom[label] = custom.get(label, 0.0) + dt
                else:
                    acc[_B_OTHER] += dt
        return max(self.productive, 0.0), acc, custom


@dataclasses.dataclass(frozen=True)
class StepDeviation:
    """Step-time statistics of the live (productive) steps.

    Attributes:
        num_steps: number of completed productive steps.
        median: median step time (s).
        p90: 90th percentile step time (s).
        mean: mean step time (s).
        ideal_step_time: the configured ideal, or a robust estimate (median of
            the steps within median + 3 MAD).
        ideal_source: ``"configured"`` or ``"estimated"``.
        steps: step numbers (int64 array).
        step_times: productive seconds of each step (float64 array).
        deviations: ``step_times - ideal_step_time`` (float64 array).
    """

    num_steps: int
    median: float
    p90: float
    mean: float
    ideal_step_time: float
    ideal_source: str
    steps: np.ndarray
    step_times: np.ndarray
    deviations: np.ndarray

    @property
    def step_deviation(self) -> dict[int, float]:
        """``{step: step_time - ideal}`` like Google's step-deviation dict."""
        return dict(zip(self.steps.tolist(), self.deviations.tolist()))

    def as_dict(self) -> dict:
        """Summary (no per-step arrays) for JSON / TensorBoard."""
        return {
            "num_steps": self.num_steps,
            "median": self.median,
            "p90": self.p90,
            "mean": self.mean,
            "ideal_step_time": self.ideal_step_time,
            "ideal_source": self.ideal_source,
            "max_abs_deviation": float(np.max(np.abs(self.deviations))) if self.num_steps else 0.0,
        }


def _check_ideal(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"configured_ideal_step_time ({value!r}) must be a positive float or None")
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"configured_ideal_step_time ({value!r}) must be a positive finite float")
    return v


class GoodputCalculator:
    """Computes a job's goodput and badput breakdown from its recorded events.

    Args:
        job_name: the job to measure.
        logger_name: kept for drop-in compatibility with ml-goodput-measurement
            (the store decides where events live).
        store: an EventStore, a store URL, or None (``$GOODPUT_JAX_STORE`` or
            ``./goodput.db``).
        clock: returns "now" as float UTC seconds (or an aware datetime); time of
            a running job counts up to now. Default ``time.time``.
        configured_ideal_step_time: ideal step time (s) for
            :meth:`get_step_deviation`; None = robust estimate.

    All methods are thread-safe.

    Example:
        >>> calc = GoodputCalculator("my-job", "goodput_my-job", store="sqlite:///goodput.db")  # doctest: +SKIP
        >>> goodput, badput, last_step = calc.get_job_goodput(include_badput_breakdown=True)  # doctest: +SKIP
    """

    _CHUNK = 250_000

    def __init__(
        self,
        job_name: str,
        logger_name: str | None = None,
        store: EventStore | str | None = None,
        clock: Callable[[], Any] | None = None,
        configured_ideal_step_time: float | None = None,
    ):
        if not isinstance(job_name, str) or not job_name:
            raise ValueError(f"job_name ({job_name!r}) must be a non-empty string")
        if clock is not None and not callable(clock):
            raise TypeError(f"clock ({clock!r}) must be a callable returning UTC seconds")
        self.job_name = job_name
        self.logger_name = logger_name
        self.store = resolve_store(store)
        self._clock = clock or time.time
        self.configured_ideal_step_time = _check_ideal(configured_ideal_step_time)
        self._lock = threading.RLock()
        self._engine = _Engine()
        self._cursor: Any = None
        self._stream_keys: dict[tuple[str, int], int] = {}
        self._columnar = callable(getattr(self.store, "read_columns", None))

    # ----------------------------------------------------------------- reading
    def _now(self) -> float:
        return to_timestamp(self._clock(), name="clock()")

    def _rows_from_events(self, events) -> list[tuple]:
        keys = self._stream_keys
        out = []
        for ev in events:
            key = (ev.run_id, ev.host)
            sid = keys.get(key)
            if sid is None:
                sid = keys[key] = len(keys)
            code = KIND_CODES[ev.kind]
            extra = ev.payload if code == _HINTS else ev.label
            out.append((code, sid, ev.timestamp, ev.step, extra))
        return out

    def _feed_new(self, eng: _Engine, cursor: Any):
        """Feed ``eng`` every event newer than ``cursor``, one chunk at a time.

        Yields ``(cursor, count)`` after each chunk has been fed.
        """
        while True:
            if self._columnar:
                cols, cursor, done = self.store.read_columns(self.job_name, cursor, self._CHUNK)
                n = 0
                if cols is not None:
                    eng.feed_columns(cols)
                    n = cols["kind"].size
            else:
                events, cursor = self.store.read_events(self.job_name, cursor, self._CHUNK)
                eng.feed(self._rows_from_events(events))
                n = len(events)
                done = len(events) < self._CHUNK
            yield cursor, n
            if done:
                return

    def refresh(self) -> int:
        """Read events appended since the last call; returns how many were new."""
        with self._lock:
            total = 0
            for cursor, n in self._feed_new(self._engine, self._cursor):
                self._cursor = cursor  # advanced chunk by chunk: a failed read resumes here
                total += n
            return total

    def _require_events(self, eng: _Engine) -> None:
        if eng.runs == 0:
            raise NoEventsError(
                f"no goodput events for job {self.job_name!r} in store "
                f"{getattr(self.store, 'url', self.store)!r}"
            )

    # ----------------------------------------------------------------- results
    def _result(self, eng: _Engine, now: float, include: bool, what: str):
        self._require_events(eng)
        productive, acc, _ = eng.totals(now)
        total = productive + sum(acc)
        if total <= 0:
            raise ValueError(
                f"{what} of job {self.job_name!r} has zero elapsed time; goodput is undefined"
            )
        goodput = 100.0 * productive / total
        last = eng.live_steps[-1] if eng.live_steps else 0
        if not include:
            return goodput, {}, last
        return goodput, _breakdown(acc, total), last

    def get_job_goodput(
        self, include_badput_breakdown: bool = False
    ) -> tuple[float, dict[BadputType, float], int]:
        """Goodput of the whole job so far.

        Returns:
            ``(goodput %, {BadputType: %} (empty unless requested), last productive step)``.
            Goodput plus all badput percentages is 100.

        Raises:
            NoEventsError: the store holds no events for the job.

        Example:
            >>> goodput, _, last_step = calc.get_job_goodput()  # doctest: +SKIP
        """
        with self._lock:
            self.refresh()
            return self._result(self._engine, self._now(), include_badput_breakdown, "the job")

    def get_job_goodput_interval(
        self, interval_start: Any, interval_end: Any
    ) -> tuple[float, dict[BadputType, float], int]:
        """Goodput within a wall-clock window ``[interval_start, interval_end]``.

        Computed with everything known now (a step inside the window that was
        later redone after a restart is wasted progress). Job time inside the
        window is the denominator; time after ``clock()`` is not counted.

        Args:
            interval_start: aware datetime or float UTC seconds.
            interval_end: aware datetime or float UTC seconds, after the start.

        Returns:
            ``(goodput %, {BadputType: %}, last productive step)``.

        Example:
            >>> calc.get_job_goodput_interval(t0, t0 + 3600)  # doctest: +SKIP
        """
        ws = to_timestamp(interval_start, name="interval_start")
        we = to_timestamp(interval_end, name="interval_end")
        if not we > ws:
            raise ValueError(
                f"interval_end ({interval_end!r}) must be after interval_start ({interval_start!r})"
            )
        with self._lock:
            eng = _Engine(ws, we)
            for _ in self._feed_new(eng, None):
                pass
            return self._result(eng, self._now(), True, f"the interval [{ws}, {we}]")

    def get_job_goodput_details(self) -> dict[str, Any]:
        """Raw seconds per bucket plus bookkeeping.

        Returns:
            dict with ``productive_time``, ``badput_time`` ({BadputType: s}),
            ``custom_badput_time`` ({label: s}), ``total_time``,
            ``last_productive_step``, ``num_runs``, ``num_disruptions``,
            ``last_checkpointed_step``, ``ignored_events``, ``unmatched_events``,
            ``out_of_order_events``, ``num_events``.

        Example:
            >>> calc.get_job_goodput_details()["badput_time"][BadputType.OTHER]  # doctest: +SKIP
        """
        with self._lock:
            self.refresh()
            eng = self._engine
            self._require_events(eng)
            productive, acc, custom = eng.totals(self._now())
            badput = {t: acc[i] for i, t in enumerate(_BUCKET_TYPES)}
            badput[BadputType.DATA_LOADING_ASYNC] = 0.0
            return {
                "productive_time": productive,
                "badput_time": badput,
                "custom_badput_time": custom,
                "total_time": productive + sum(acc),
                "last_productive_step": eng.live_steps[-1] if eng.live_steps else 0,
                "num_runs": eng.runs,
                "num_disruptions": eng.disruptions,
                "last_checkpointed_step": eng.last_ckpt_step,
                "ignored_events": eng.ignored,
                "unmatched_events": eng.unmatched,
                "out_of_order_events": eng.out_of_order,
                "num_events": eng.events,
            }

    def get_step_deviation(self, configured_ideal_step_time: float | None = None) -> StepDeviation:
        """Step-time statistics of the productive steps.

        Args:
            configured_ideal_step_time: overrides the constructor's value.

        Returns:
            :class:`StepDeviation` (median, p90, ideal step time configured or
            estimated, per-step deviations). Works for sub-second steps.

        Example:
            >>> calc.get_step_deviation().median  # doctest: +SKIP
        """
        ideal_cfg = _check_ideal(configured_ideal_step_time) or self.configured_ideal_step_time
        with self._lock:
            self.refresh()
            self._require_events(self._engine)
            steps = np.frombuffer(self._engine.live_steps, dtype=np.int64).copy()
            times = np.frombuffer(self._engine.live_secs, dtype=np.float64).copy()
        if times.size == 0:
            nan = float("nan")
            ideal = ideal_cfg if ideal_cfg is not None else nan
            return StepDeviation(0, nan, nan, nan, ideal,
                                 "configured" if ideal_cfg is not None else "estimated",
                                 steps, times, times.copy())
        med = float(np.median(times))
        if ideal_cfg is not None:
            ideal, source = ideal_cfg, "configured"
        else:
            ideal, source = estimate_ideal_step_time(times), "estimated"
        return StepDeviation(
            num_steps=int(times.size),
            median=med,
            p90=float(np.percentile(times, 90)),
            mean=float(times.mean()),
            ideal_step_time=ideal,
            ideal_source=source,
            steps=steps,
            step_times=times,
            deviations=times - ideal,
        )

    def get_latest_hints(self) -> dict | None:
        """Payload of the latest ``HINTS`` event (from ``record_hints``), or None."""
        with self._lock:
            self.refresh()
            h = self._engine.hints
        if isinstance(h, str):
            return json.loads(h)
        return None if h is None else dict(h)


def estimate_ideal_step_time(step_times: Any) -> float:
    """Robust ideal step time: median of the steps within median + 3 MAD.

    Excludes compile-heavy first steps and stragglers.

    Example:
        >>> estimate_ideal_step_time([1.0, 1.1, 0.9, 1.0, 30.0])
        1.0
    """
    x = np.asarray(step_times, dtype=np.float64)
    if x.size == 0:
        raise ValueError("step_times (empty) must contain at least one step time")
    med = np.median(x)
    mad = np.median(np.abs(x - med))
    normal = x[x <= med + 3.0 * mad] if mad > 0 else x[x <= med]
    return float(np.median(normal)) if normal.size else float(med)


def _breakdown(acc: list[float], total: float) -> dict[BadputType, float]:
    out = {t: 100.0 * acc[i] / total for i, t in enumerate(_BUCKET_TYPES)}
    out[BadputType.DATA_LOADING_ASYNC] = 0.0
    return out
