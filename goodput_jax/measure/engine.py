"""The one attribution engine: turns a job's events into time per bucket.

The incremental calculator, its cold (columnar) path and the report's timeline
all feed this engine; the rules live here only (see ``docs/semantics.md``).

Default rules are ml-goodput-measurement 0.2.3's, where both libraries measure
the same thing:

* A *stream* is the events of one ``(run_id, host)``. A new stream, or a
  repeated ``JOB_START`` in the same stream, starts a new *run*; if the previous
  run had no ``JOB_END`` it crashed: its in-flight step and the downtime until
  the new run's first event are infrastructure recovery.
* A step lasts from its start to the next step's start (or ``JOB_END``); a
  host-side ``STEP_END`` does not end it. A ``STEP_START`` whose number is <= a
  live step rolls back: the redone steps are wasted progress, and a new
  *segment* begins.
* Program startup is inferred per segment (first step time minus the mean of
  the segment's other steps, the step closed by ``JOB_END`` excluded), unless
  the run recorded ``COMPILATION`` events: then measured compile time
  (``recompile=False``) is program startup and ``recompile=True`` compiles are
  ``RECOMPILATION``; both are taken out of the time they fell in.
* Data loading: the first load of each run and of each segment is synchronous
  badput; later loads are ``DATA_LOADING_ASYNC`` (reported, not subtracted).
* When a stream records ``STEP_DEVICE_END``, a step is the device's busy
  interval: from ``max(start_N, device_end_{N-1})`` to ``device_end_N``. One
  rule for every span kind: while the device still runs a step, that time is
  the step's, whatever badput span is open (a data load, a checkpoint save or
  restore waiting for the device, a custom span); only the device's idle time
  goes to the open badput span (data loading is then synchronous) or ``OTHER``.
* Within a stream the time between two consecutive events goes to the
  innermost open badput span, else the device's open step, else ``OTHER``; so
  goodput plus all badput buckets is 100 %.

Example:
    >>> eng = Engine()
    >>> rows = [(0, 0, 0.0, None, None), (2, 0, 10.0, 0, None), (2, 0, 20.0, 1, None),
    ...         (1, 0, 30.0, None, None)]
    >>> eng.feed(rows)
    >>> productive, acc, _ = eng.totals(30.0)
    >>> productive, acc[B_OTHER]
    (20.0, 10.0)
"""

from __future__ import annotations

import json
import math
from array import array
from collections.abc import Iterable
from typing import Any

import numpy as np

from goodput_jax.measure.badput import BUCKET_NAMES, PRODUCTIVE
from goodput_jax.measure.events import KIND_CODES, EventKind

# Bucket indices of the hot loop (order = BUCKET_NAMES).
B_ACCEL, B_PREP, B_STARTUP, B_DATA, B_SAVE, B_RESTORE = 0, 1, 2, 3, 4, 5
B_WASTED, B_INFRA, B_CUSTOM, B_OTHER, B_RECOMP = 6, 7, 8, 9, 10
B_SLICE_DOWN, B_SCALE_UP, B_REINIT = 11, 12, 13
NB = 14

_K = KIND_CODES
JOB_START, JOB_END = _K[EventKind.JOB_START], _K[EventKind.JOB_END]
STEP_START, STEP_END = _K[EventKind.STEP_START], _K[EventKind.STEP_END]
HINTS, CKPT_PROGRESS = _K[EventKind.HINTS], _K[EventKind.CHECKPOINT_PROGRESS]
COMPILATION, DEVICE_END = _K[EventKind.COMPILATION], _K[EventKind.STEP_DEVICE_END]
DL_START, DL_END = _K[EventKind.DATA_LOADING_START], _K[EventKind.DATA_LOADING_END]
CUSTOM_START = _K[EventKind.CUSTOM_BADPUT_START]
CKPT_STATS, SLICE_COUNTS = _K[EventKind.CHECKPOINT_STATS], _K[EventKind.ELASTIC_SLICE_COUNTS]
EWAIT_START, REINIT_START = _K[EventKind.ELASTIC_WAIT_START], _K[EventKind.ELASTIC_REINIT_START]
_REINIT_ABSORBS = (B_ACCEL, B_PREP)  # re-initialisation time inside these is re-initialisation
#: span start code -> bucket
SPAN_START_BUCKET = {
    _K[EventKind.ACCELERATOR_INIT_START]: B_ACCEL,
    _K[EventKind.TRAINING_PREP_START]: B_PREP,
    _K[EventKind.PROGRAM_STARTUP_START]: B_STARTUP,
    DL_START: B_DATA,
    _K[EventKind.CHECKPOINT_SAVE_START]: B_SAVE,
    _K[EventKind.CHECKPOINT_RESTORE_START]: B_RESTORE,
    CUSTOM_START: B_CUSTOM,
    EWAIT_START: B_SLICE_DOWN,  # or B_SCALE_UP, by label
    REINIT_START: B_REINIT,
}
#: span end code -> its start code
SPAN_END_START = {
    _K[EventKind.ACCELERATOR_INIT_END]: _K[EventKind.ACCELERATOR_INIT_START],
    _K[EventKind.TRAINING_PREP_END]: _K[EventKind.TRAINING_PREP_START],
    _K[EventKind.PROGRAM_STARTUP_END]: _K[EventKind.PROGRAM_STARTUP_START],
    DL_END: DL_START,
    _K[EventKind.CHECKPOINT_SAVE_END]: _K[EventKind.CHECKPOINT_SAVE_START],
    _K[EventKind.CHECKPOINT_RESTORE_END]: _K[EventKind.CHECKPOINT_RESTORE_START],
    _K[EventKind.CUSTOM_BADPUT_END]: CUSTOM_START,
    _K[EventKind.ELASTIC_WAIT_END]: EWAIT_START,
    _K[EventKind.ELASTIC_REINIT_END]: REINIT_START,
}

_PENDING = NB  # state code of "inside an open step" in the vectorised path
_N_CODES = len(KIND_CODES)
#: kind code -> bucket of a span start the fast path attributes (custom and data
#: loading excluded: the fast path sees only asynchronous loads, which are transparent)
_SPAN_START_LUT = np.full(_N_CODES, -1, dtype=np.int64)
#: kind code -> its end code for span starts (custom excluded), else -1
_SPAN_END_LUT = np.full(_N_CODES, -1, dtype=np.int64)
#: end kind code -> its start code (custom excluded), else -1
_SPAN_START_OF_END_LUT = np.full(_N_CODES, -1, dtype=np.int64)
for _end, _start in SPAN_END_START.items():
    if _start not in (CUSTOM_START, EWAIT_START, REINIT_START):
        if _start != DL_START:
            _SPAN_START_LUT[_start] = SPAN_START_BUCKET[_start]
        _SPAN_END_LUT[_start] = _end
        _SPAN_START_OF_END_LUT[_end] = _start
#: kinds the vectorised path handles
_SIMPLE_LUT = np.zeros(_N_CODES, dtype=bool)
_SIMPLE_LUT[[STEP_START, STEP_END]] = True
_SIMPLE_LUT[_SPAN_END_LUT >= 0] = True
_SIMPLE_LUT[_SPAN_START_OF_END_LUT >= 0] = True


#: an engine stream key is ``(run index << HOST_BITS) | host``: hosts of one run share a timeline
HOST_BITS = 20
HOST_MASK = (1 << HOST_BITS) - 1


class StreamKeys:
    """Maps ``(run_id, host)`` to engine stream keys and back (thread-safe, append-only).

    Example:
        >>> keys = StreamKeys()
        >>> keys.key("run-a", 0), keys.key("run-a", 1), keys.key("run-b", 0) >> HOST_BITS
        (0, 1, 1)
        >>> keys.run_id(keys.key("run-b", 3))
        'run-b'
    """

    def __init__(self) -> None:
        import threading

        self._runs: dict[str, int] = {}
        self._names: list[str] = []
        self._lock = threading.Lock()

    def key(self, run_id: str, host: int) -> int:
        """The stream key of ``host`` in run ``run_id``."""
        r = self._runs.get(run_id)
        if r is None:
            with self._lock:
                r = self._runs.get(run_id)
                if r is None:
                    r = self._runs[run_id] = len(self._names)
                    self._names.append(run_id)
        if not 0 <= host <= HOST_MASK:
            raise ValueError(f"host ({host!r}) must be in [0, {HOST_MASK}]")
        return (r << HOST_BITS) | host

    def run_id(self, key: int) -> str:
        """The run id of a stream key."""
        return self._names[key >> HOST_BITS]


def _overlap(a: float, b: float, excl: list[tuple[float, float]]) -> float:
    out = 0.0
    for s, e in excl:
        if e <= a:
            continue
        if s >= b:
            break
        out += min(b, e) - max(a, s)
    return out


def merge_intervals(intervals) -> list[tuple[float, float]]:
    """Sort and merge ``(start, end)`` float intervals; empty ones are dropped.

    Example:
        >>> merge_intervals([(5, 7), (0, 2), (1, 3), (4, 4)])
        [(0, 3), (5, 7)]
    """
    out: list[tuple[float, float]] = []
    for s, e in sorted((s, e) for s, e in intervals if e > s):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _payload(label: Any) -> dict:
    if isinstance(label, dict):
        return label
    if isinstance(label, str):
        try:
            out = json.loads(label)
        except ValueError:
            return {}
        return out if isinstance(out, dict) else {}
    return {}


class Engine:
    """The attribution state machine (one pass over rows in insertion order).

    Rows are ``(kind_code, stream_key, ts, step, extra)``: ``extra`` is the
    custom badput label, or the payload (dict or JSON text) of HINTS and
    COMPILATION rows. The optional window clips every attributed slice to
    ``[ws, we]``. With ``record=True`` the engine also keeps the attributed
    segments for :meth:`timeline` (row loop only).

    Example:
        >>> eng = Engine(record=True)
        >>> eng.feed([(0, 0, 0.0, None, None), (2, 0, 1.0, 0, None), (1, 0, 3.0, None, None)])
        >>> [(a, b, cat) for a, b, cat, *_ in eng.timeline(3.0)["segments"]]
        [(0.0, 1.0, 'OTHER'), (1.0, 3.0, 'PRODUCTIVE')]
    """

    #: shortest run worth the numpy overhead
    FAST_MIN = 128

    def __init__(self, ws: float = -math.inf, we: float = math.inf, record: bool = False,
                 exclusions: list[tuple[float, float]] | None = None):
        self.ws, self.we = ws, we
        #: sorted, merged (start, end) intervals whose time is removed from every bucket
        self.excl = list(exclusions or [])
        self.acc = [0.0] * NB
        self.productive = 0.0
        self.custom: dict[str, float] = {}
        self.live_steps = array("q")
        self.live_secs = array("d")
        self.live_seg = array("q")  # segment of each live step
        self.live_role = array("b")  # 0 uncounted (closed by job end), 1 first, 2 other
        self.rollbacks: list[int] = []  # live length after each rollback (for consumers)
        self.seen: set = set()
        self.cur = None  # active stream key
        self.ended = False
        self.last_t = 0.0
        self.spans: list[tuple[int, str | None, int]] = []
        self.open_step = -1
        self.pending = 0.0
        self.dev_mode = False
        self.dq: list[int] = []  # device mode: started steps queued behind the open one
        self.dl_first_done = False
        self.dl_open: float | None = None
        self.dl_total = 0.0
        # segments (program-startup inference): per segment
        self.seg_run: list[int] = []
        self.seg_first: list[float] = []
        self.seg_has_first: list[bool] = []
        self.seg_osum: list[float] = []
        self.seg_ocnt: list[int] = []
        self.run_compiled: set[int] = set()
        self.runs = 0
        self.first_t: float | None = None  # the first run's first event
        self.run_hosts: dict[int, bool] = {}  # hosts of the current run -> ended
        self.follower_events = 0
        self.dead_hosts = 0  # hosts that started a superseded run and never ended it
        self.disruptions = 0
        self.window_disruptions = 0  # restarts after a crash inside [ws, we]
        self.ignored = 0
        self.unmatched = 0
        self.out_of_order = 0
        self.events = 0
        self.compilations = 0
        self.device_runs = 0  # runs whose leader recorded device step ends (runtime capture)
        self.hints: Any = None
        self.last_ckpt_step: int | None = None
        self.flat_save = 0.0  # Orbax checkpoint-manager statistics (flat seconds)
        self.flat_restore = 0.0
        self.reinit_open = 0
        self.slice_counts: list[tuple[float, int, int, int]] = []  # (t, active, available, total)
        # timeline recording
        self.record = record
        self.segs: list[list] = []  # [a, b, category, run, step, label]
        self.pend_segs: list[int] = []
        self.live_segs: list[list[int]] = []
        self.seg_first_segs: list[list[int]] = []
        self.restarts: list[tuple[float, int]] = []
        self.crashes: list[tuple[float, int]] = []
        self.run_ids: list[Any] = []

    # ------------------------------------------------------------ helpers
    def _new_segment(self) -> None:
        self.seg_run.append(self.runs - 1)
        self.seg_first.append(0.0)
        self.seg_has_first.append(False)
        self.seg_osum.append(0.0)
        self.seg_ocnt.append(0)
        if self.record:
            self.seg_first_segs.append([])

    def _complete(self, step: int, secs: float, count: bool) -> None:
        """A step finished: it becomes live (productive unless later rolled back)."""
        g = len(self.seg_run) - 1
        self.live_steps.append(step)
        self.live_secs.append(secs)
        self.live_seg.append(g)
        self.productive += secs
        role = 0
        if count:
            if not self.seg_has_first[g]:
                self.seg_has_first[g] = True
                self.seg_first[g] = secs
                role = 1
            else:
                self.seg_osum[g] += secs
                self.seg_ocnt[g] += 1
                role = 2
        self.live_role.append(role)
        if self.record:
            self.live_segs.append(self.pend_segs)
            if role == 1:
                self.seg_first_segs[g] = self.pend_segs
            self.pend_segs = []

    def _pop_live(self) -> float:
        """Roll back the latest live step: its productive time becomes wasted progress."""
        self.live_steps.pop()
        s = self.live_secs.pop()
        g = self.live_seg.pop()
        role = self.live_role.pop()
        self.productive -= s
        self.acc[B_WASTED] += s
        if role == 1:
            self.seg_has_first[g] = False
            self.seg_first[g] = 0.0
        elif role == 2:
            self.seg_osum[g] -= s
            self.seg_ocnt[g] -= 1
        if self.record:
            for i in self.live_segs.pop():
                if self.segs[i][2] == PRODUCTIVE:
                    self.segs[i][2] = "WASTED_PROGRESS_FROM_DISRUPTION"
        return s

    def _add(self, a: float, b: float, cat: str, step: int | None = None,
             label: str | None = None) -> int:
        segs = self.segs
        if segs:
            last = segs[-1]
            # extend the previous slice when it continues it (keeps timelines small)
            if (last[1] == a and last[2] == cat and last[4] == step and last[5] == label
                    and last[3] == self.runs - 1):
                last[1] = b
                return len(segs) - 1
        segs.append([a, b, cat, self.runs - 1, step, label])
        return len(segs) - 1

    def _clip(self, a: float, b: float) -> float:
        a = max(self.ws, a)
        b = min(self.we, b)
        if b <= a:
            return 0.0
        return b - a - _overlap(a, b, self.excl) if self.excl else b - a

    # ------------------------------------------------------------ row loop
    def feed(self, rows) -> None:
        """Feed rows in insertion order (see the class docstring)."""
        acc = self.acc
        custom = self.custom
        seen = self.seen
        ws, we = self.ws, self.we
        record = self.record
        span_bucket = SPAN_START_BUCKET
        span_end = SPAN_END_START
        n = 0
        for kind, sid, t, step, label in rows:
            n += 1
            if kind == HINTS:
                self.hints = label  # the payload travels in the label column
                continue
            if kind == CKPT_PROGRESS:
                # informational (its time is the checkpoint's start, usually in the past)
                self.last_ckpt_step = step if step is not None and step >= 0 else None
                continue
            if kind == CKPT_STATS or kind == SLICE_COUNTS:
                self._point_stats(kind, t, _payload(label))
                continue
            cur = self.cur
            other_gap = 0.0
            if sid != cur and cur is not None and (sid >> HOST_BITS) == (cur >> HOST_BITS):
                # another host of the running run: one timeline, written by the run's
                # first host (its leader); the others only say whether they ended
                self.follower_events += 1
                if kind == JOB_START:
                    self.run_hosts[sid & HOST_MASK] = False
                elif kind == JOB_END:
                    self.run_hosts[sid & HOST_MASK] = True
                else:
                    self.run_hosts.setdefault(sid & HOST_MASK, False)
                continue
            if sid != cur or (kind == JOB_START and self.runs):
                if sid != cur and (sid >> HOST_BITS) in seen:
                    self.ignored += 1
                    continue
                last_t = self.last_t
                if cur is not None and self.ended:
                    # a host of the cleanly ended run never ended: it died
                    dead = sum(1 for done in self.run_hosts.values() if not done)
                    if dead:
                        self.dead_hosts += dead
                        self.disruptions += 1
                if cur is not None and not self.ended:
                    # the previous run crashed: in-flight step + downtime
                    self.disruptions += 1
                    if ws <= t <= we:
                        self.window_disruptions += 1
                    down = self._clip(last_t, t)
                    acc[B_INFRA] += self.pending + down
                    if record:
                        for i in self.pend_segs:  # (compile time carved out stays)
                            if self.segs[i][2] == PRODUCTIVE:
                                self.segs[i][2] = "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"
                        self.crashes.append((last_t, self.runs - 1))
                        if t > last_t:
                            self._add(last_t, t, "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION")
                if sid != cur:
                    seen.add(sid >> HOST_BITS)
                self.run_hosts = {sid & HOST_MASK: False}
                self.cur = sid
                self.ended = False
                self.last_t = t if (sid != cur or t > last_t) else last_t
                self.spans = []
                self.reinit_open = 0
                self.open_step = -1
                self.pending = 0.0
                self.dev_mode = False
                self.dq = []
                self.dl_first_done = False
                self.dl_open = None
                self.runs += 1
                if self.first_t is None:
                    self.first_t = t
                self._new_segment()
                if record:
                    self.pend_segs = []
                    self.run_ids.append(sid)
                    if self.runs > 1:
                        self.restarts.append((t, self.runs - 1))
            elif self.ended:
                # a cleanly ended stream that logs again: the pause is not job time
                self.ended = False
                self.last_t = max(self.last_t, t)
            else:
                last_t = self.last_t
                if t < last_t:
                    self.out_of_order += 1
                    t = last_t
                a = last_t if last_t > ws else ws  # noqa: FURB136 - no call in the hot loop
                b = t if t < we else we  # noqa: FURB136
                if b > a:
                    dt = b - a - _overlap(a, b, self.excl) if self.excl else b - a
                    # (exclusions remove time from recorded activities only, as in the
                    # reference: unattributed time stays OTHER)
                    spans = self.spans
                    if spans and not (self.dev_mode and self.open_step >= 0):
                        # (device mode: while the device runs a step, that step owns the
                        # time, whatever span is open; a span only gets the idle device)
                        top = spans[-1]
                        if self.reinit_open and top[2] in _REINIT_ABSORBS:
                            top = (top[0], top[1], B_REINIT)
                        acc[top[2]] += dt
                        if top[2] == B_CUSTOM:
                            custom[top[1]] = custom.get(top[1], 0.0) + dt
                        if record:
                            self._add(a, b, BUCKET_NAMES[top[2]], None, top[1])
                    elif self.open_step >= 0:
                        self.pending += dt
                        if record:
                            i = self._add(a, b, PRODUCTIVE, self.open_step)
                            if not self.pend_segs or self.pend_segs[-1] != i:
                                self.pend_segs.append(i)
                    else:
                        dt = b - a
                        acc[B_OTHER] += dt
                        other_gap = dt
                        if record:
                            self._add(a, b, "OTHER")
                self.last_t = t
            # apply the event
            if kind == STEP_START:
                if step is None or step < 0:  # columnar reads use -1 for "no step"
                    self.unmatched += 1
                    continue
                self._step_start(step)
            elif kind in span_bucket:
                if kind == EWAIT_START:
                    b = B_SCALE_UP if "scale_up" in str(label).lower() else B_SLICE_DOWN
                    self.spans.append((kind, label, b))
                    continue
                if kind == REINIT_START:
                    self.reinit_open += 1
                if kind == DL_START:
                    self.dl_open = t
                    if not self.dev_mode and self.dl_first_done:
                        continue  # an asynchronous load: transparent
                    self.dl_first_done = True
                self.spans.append((kind, label, span_bucket[kind]))
            elif kind in span_end:
                want = span_end[kind]
                if kind == DL_END and self.dl_open is not None:
                    self.dl_total += self._clip(self.dl_open, t)
                    self.dl_open = None
                    found = True
                else:
                    found = False
                spans = self.spans
                for i in range(len(spans) - 1, -1, -1):
                    if spans[i][0] == want and spans[i][1] == label:
                        del spans[i]
                        if want == REINIT_START:
                            self.reinit_open -= 1
                        break
                else:
                    if not found:
                        self.unmatched += 1
            elif kind == DEVICE_END:
                if step is None or step < 0:
                    self.unmatched += 1
                    continue
                if not self.dev_mode:
                    self.dev_mode = True
                    self.device_runs += 1
                    if self.dl_open is not None and not any(sp[2] == B_DATA for sp in self.spans):
                        # a load the host rule saw as asynchronous is still running: from
                        # now on it is a span (synchronous where the device idles)
                        self.spans.append((DL_START, None, B_DATA))
                while self.open_step >= 0 and self.open_step <= step:
                    self._complete(self.open_step, self.pending, True)
                    self.pending = 0.0
                    self.open_step = self.dq.pop(0) if self.dq else -1
            elif kind == JOB_END:
                if self.open_step >= 0:
                    self._complete(self.open_step, self.pending, False)
                    for s in self.dq:
                        self._complete(s, 0.0, False)
                self.open_step, self.pending, self.dq = -1, 0.0, []
                self.spans = []
                self.reinit_open = 0
                self.dl_open = None
                self.ended = True
                self.run_hosts[sid & HOST_MASK] = True
            elif kind == COMPILATION:
                self._compilation(_payload(label), other_gap, t)
            # STEP_END: the host's end of a step is not the device's: no effect.
            # JOB_START: handled above (a new run).
        self.events += n

    def _point_stats(self, kind: int, t: float, p: dict) -> None:
        if not (self.ws <= t <= self.we):
            return
        if kind == SLICE_COUNTS:
            try:
                self.slice_counts.append((t, int(p.get("active", 0)), int(p.get("available", 0)),
                                          max(int(p.get("total", 1)), 1)))
            except (TypeError, ValueError):
                self.unmatched += 1
            return
        try:
            d = float(p.get("duration_s", 0.0))
        except (TypeError, ValueError):
            return
        if not math.isfinite(d) or d <= 0:
            return
        if p.get("event_type") == "save":
            self.flat_save += d
        elif p.get("event_type") in ("restore", "emergency_restore"):
            self.flat_restore += d

    def _step_start(self, step: int) -> None:
        top = self.live_steps[-1] if self.live_steps else -1
        inflight = max(self.open_step, max(self.dq) if self.dq else -1)
        if step <= top or step <= inflight:
            # rollback: steps >= step are redone
            if self.dev_mode or self.open_step > step or any(s >= step for s in self.dq):
                # unfinished device work on redone steps is wasted
                self.acc[B_WASTED] += self.pending
                if self.record:
                    for i in self.pend_segs:
                        if self.segs[i][2] == PRODUCTIVE:
                            self.segs[i][2] = "WASTED_PROGRESS_FROM_DISRUPTION"
                    self.pend_segs = []
                self.pending, self.open_step, self.dq = 0.0, -1, []
            elif self.open_step >= 0:
                self._complete(self.open_step, self.pending, True)
                self.open_step, self.pending = -1, 0.0
            while self.live_steps and self.live_steps[-1] >= step:
                self._pop_live()
            self.rollbacks.append(len(self.live_steps))
            self._new_segment()
            self.dl_first_done = False
            self.open_step, self.pending = step, 0.0
            return
        if self.dev_mode:
            if self.open_step < 0:
                self.open_step, self.pending = step, 0.0
            else:
                self.dq.append(step)
            return
        if self.open_step >= 0:
            self._complete(self.open_step, self.pending, True)
        self.open_step, self.pending = step, 0.0

    def _compilation(self, p: dict, other_gap: float, t: float) -> None:
        try:
            d = float(p.get("duration_s", 0.0))
        except (TypeError, ValueError):
            d = 0.0
        if not math.isfinite(d) or d <= 0:
            return
        self.compilations += 1
        recompile = bool(p.get("recompile", False))
        bucket = B_RECOMP if recompile else B_STARTUP
        if not recompile:
            self.run_compiled.add(self.runs - 1)
        if self.open_step >= 0:
            take = min(d, self.pending)
            self.pending -= take
            where = PRODUCTIVE
        elif not self.spans:
            take = min(d, other_gap)
            self.acc[B_OTHER] -= take
            where = "OTHER"
        else:
            return  # compiled inside a badput span: that span keeps the time
        self.acc[bucket] += take
        if self.record and take > 0:
            self._carve_tail(take, where, BUCKET_NAMES[bucket])

    def _carve_tail(self, x: float, where: str, cat: str) -> None:
        """Recategorise the last ``x`` seconds of ``where`` slices (timeline only)."""
        segs = self.segs
        order = list(reversed(self.pend_segs)) if where == PRODUCTIVE \
            else range(len(segs) - 1, -1, -1)
        _recategorise_tail(segs, order, x, where, cat)

    # ------------------------------------------------------------ columnar path
    def feed_columns(self, cols: dict, fast: bool = True) -> None:
        """Feed a columnar chunk (see ``SQLiteStore.read_columns``).

        Runs of "simple" rows (one stream, non-decreasing time, steps that only
        go forward, non-custom spans that close on the next row, asynchronous
        loads, host step ends) are attributed with numpy in one go; everything
        else goes through the row loop :meth:`feed`. Both give the same result
        (tested), up to floating-point summation order.
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

        if not fast or self.record or self.excl or n < self.FAST_MIN:
            slow(0, n)
            return
        k = kind.astype(np.int64)
        is_ss = k == STEP_START
        span_start = _SPAN_END_LUT[k] >= 0
        span_end = _SPAN_START_OF_END_LUT[k] >= 0
        is_dl = k == DL_START
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
        dl_idx = np.flatnonzero(is_dl)
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
                        and not self.spans and not self.dev_mode and ts[pos] >= self.last_t):
                    c = end
                    if not self.dl_first_done:
                        # the run's first (synchronous) load goes through the row loop
                        j = np.searchsorted(dl_idx, pos)
                        if j < dl_idx.size and dl_idx[j] < end:
                            c = int(dl_idx[j])
                    j = np.searchsorted(ss_idx, pos)
                    if j < ss_idx.size and ss_idx[j] < c:
                        top = self.live_steps[-1] if self.live_steps else -1
                        if step[ss_idx[j]] <= max(self.open_step, top):
                            c = int(ss_idx[j])
                    if c > pos and span_start[c - 1]:
                        c -= 1  # leave a trailing unpaired span start to the row loop
                    if c - pos >= self.FAST_MIN:
                        self._fast_run(k[pos:c], ts[pos:c], step[pos:c])
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
        is_ss = k == STEP_START
        engine_open = self.open_step >= 0
        ss_cum = np.cumsum(is_ss)
        open_after = (ss_cum > 0) | engine_open
        b_row = _SPAN_START_LUT[k]
        state = np.empty(m, dtype=np.int64)
        state[0] = _PENDING if engine_open else B_OTHER
        state[1:] = np.where(b_row[:-1] >= 0, b_row[:-1],
                             np.where(open_after[:-1], _PENDING, B_OTHER))
        sums = np.bincount(state, weights=dt, minlength=NB + 1)
        acc = self.acc
        for b in range(NB):
            if sums[b]:
                acc[b] += float(sums[b])
        is_dle = k == DL_END
        if is_dle.any():
            self.dl_total += float(dt[is_dle].sum())
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
        lo = 0 if engine_open else 1
        if n_ss > lo:
            secs = pend[lo:n_ss]
            nums = stepnum[lo:n_ss]
            c = secs.size
            if c:
                g = len(self.seg_run) - 1
                roles = np.full(c, 2, dtype=np.int8)
                if not self.seg_has_first[g]:
                    self.seg_has_first[g] = True
                    self.seg_first[g] = float(secs[0])
                    roles[0] = 1
                    self.seg_osum[g] += float(secs[1:].sum())
                    self.seg_ocnt[g] += c - 1
                else:
                    self.seg_osum[g] += float(secs.sum())
                    self.seg_ocnt[g] += c
                self.live_steps.frombytes(nums.astype(np.int64).tobytes())
                self.live_secs.frombytes(secs.astype(np.float64).tobytes())
                self.live_seg.frombytes(np.full(c, g, dtype=np.int64).tobytes())
                self.live_role.frombytes(roles.tobytes())
                self.productive += float(secs.sum())
        if open_after[-1]:
            self.open_step = int(stepnum[n_ss])
            self.pending = float(pend[n_ss])
        else:
            self.open_step = -1
            self.pending = 0.0
        self.last_t = float(t[-1])
        self.events += m

    # ------------------------------------------------------------ results
    def open_hosts(self) -> int:
        """Hosts of the current run that started and did not (yet) record their job end."""
        return sum(1 for done in self.run_hosts.values() if not done)

    def inferred_startup(self) -> list[float]:
        """Program startup inferred per segment (0 where compile time was measured)."""
        out = []
        for g in range(len(self.seg_run)):
            x = 0.0
            if (self.seg_run[g] not in self.run_compiled and self.seg_has_first[g]
                    and self.seg_ocnt[g] > 0):
                x = self.seg_first[g] - self.seg_osum[g] / self.seg_ocnt[g]
            out.append(x if x > 0 else 0.0)
        return out

    def totals(self, now: float) -> tuple[float, list[float], dict[str, float]]:
        """(productive, bucket seconds, custom seconds) including the live tail up to now."""
        acc = list(self.acc)
        custom = dict(self.custom)
        productive = self.productive
        inferred = sum(self.inferred_startup())
        productive -= inferred
        acc[B_STARTUP] += inferred
        if self.cur is not None and not self.ended:
            acc[B_OTHER] += self.pending  # in-flight step: not productive yet
            a = max(self.last_t, self.ws)
            b = min(now, self.we)
            if b > a:
                dt = self._clip(a, b)
                top = self._tail_top()
                if top is not None:
                    acc[top[2]] += dt
                    if top[2] == B_CUSTOM:
                        custom[top[1]] = custom.get(top[1], 0.0) + dt
                else:
                    acc[B_OTHER] += b - a
        productive = max(productive, 0.0)
        # Orbax's checkpoint-manager statistics: blocking saves out of productive time,
        # restores out of OTHER (as the reference does), never below zero
        x = min(self.flat_save, productive)
        productive -= x
        acc[B_SAVE] += x
        x = min(self.flat_restore, acc[B_OTHER])
        acc[B_OTHER] -= x
        acc[B_RESTORE] += x
        return productive, acc, custom

    def _tail_top(self):
        """The span the live tail goes to (None: OTHER)."""
        top = self.spans[-1] if self.spans else None
        if top is None or (self.dev_mode and self.open_step >= 0):
            return None  # (device mode: the device's open step owns the time, see feed)
        if self.reinit_open and top[2] in _REINIT_ABSORBS:
            return (top[0], top[1], B_REINIT)
        return top

    def async_data_loading(self) -> float:
        """Seconds of data loading that did not block the device (not subtracted)."""
        return max(self.dl_total - self.acc[B_DATA], 0.0)

    def step_times(self) -> tuple[np.ndarray, np.ndarray]:
        """(step numbers, productive seconds) of the live steps (before inference)."""
        return (np.frombuffer(self.live_steps, dtype=np.int64).copy(),
                np.frombuffer(self.live_secs, dtype=np.float64).copy())

    def timeline(self, now: float) -> dict:
        """The attributed slices (record mode), matching :meth:`totals` to the float.

        Returns:
            dict with ``segments`` (lists ``[start, end, category, run, step,
            label]``), ``restarts``, ``crashes`` and ``run_ids``.
        """
        if not self.record:
            raise ValueError("timeline() needs an Engine(record=True)")
        segs = [list(s) for s in self.segs]
        pend = set(self.pend_segs)
        extra: list[list] = []
        # program startup inferred from each segment's first step: its head
        for g, x in enumerate(self.inferred_startup()):
            if x <= 0:
                continue
            for i in self.seg_first_segs[g]:
                s = segs[i]
                if s[2] != PRODUCTIVE:
                    continue
                d = s[1] - s[0]
                if d <= x:
                    s[2] = "PROGRAM_STARTUP"
                    x -= d
                else:
                    extra.append([s[0], s[0] + x, "PROGRAM_STARTUP", s[3], s[4], s[5]])
                    s[0] += x
                    x = 0.0
                if x <= 0:
                    break
        if self.cur is not None and not self.ended:
            for i in pend:
                if segs[i][2] == PRODUCTIVE:
                    segs[i][2] = "OTHER"  # in-flight step: not productive yet
            a = max(self.last_t, self.ws)
            b = min(now, self.we)
            if b > a:
                top = self._tail_top()
                if top is not None:
                    extra.append([a, b, BUCKET_NAMES[top[2]], self.runs - 1, None, top[1]])
                else:
                    extra.append([a, b, "OTHER", self.runs - 1, None, None])
        segs.extend(extra)
        # Orbax's flat checkpoint statistics (no time of their own): the latest
        # productive slices become save time, the latest OTHER slices restore time
        productive = sum(s[1] - s[0] for s in segs if s[2] == PRODUCTIVE)
        other = sum(s[1] - s[0] for s in segs if s[2] == "OTHER")
        for x, where, cat in ((min(self.flat_save, productive), PRODUCTIVE,
                               "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME"),
                              (min(self.flat_restore, other), "OTHER",
                               "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME")):
            segs.sort(key=lambda s: (s[3], s[0]))
            _recategorise_tail(segs, range(len(segs) - 1, -1, -1), x, where, cat)
        segs.sort(key=lambda s: (s[3], s[0]))
        return {"segments": segs, "restarts": list(self.restarts),
                "crashes": list(self.crashes), "run_ids": list(self.run_ids)}


def _recategorise_tail(segs: list, order: Iterable[int], x: float, where: str, cat: str) -> None:
    """Give the last ``x`` seconds of the ``where`` slices among ``segs[i]`` (``i`` in
    ``order``, latest first) to ``cat``, splitting one slice if needed. The split-off
    part is appended, not inserted, so stored indices stay valid (``timeline()`` sorts)."""
    for i in order:
        if x <= 0:
            return
        s = segs[i]
        if s[2] != where:
            continue
        d = s[1] - s[0]
        if d <= x:
            s[2] = cat
            x -= d
        else:
            cut = s[1] - x
            segs.append([cut, s[1], cat, s[3], s[4], s[5]])
            s[1] = cut
            x = 0.0
