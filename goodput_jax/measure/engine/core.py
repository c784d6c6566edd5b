"""The engine's state and its row loop: one pass over rows in insertion order.

Every attribution decision is taken by :mod:`~goodput_jax.measure.engine.rules`
(the vectorised path of :mod:`~goodput_jax.measure.engine.columns` and the
query-time tail of :mod:`~goodput_jax.measure.engine.query` take the same ones);
this module applies each event to the state: runs, hosts, spans, steps, segments.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from goodput_jax.measure.badput import BUCKET_NAMES, PRODUCTIVE
from goodput_jax.measure.engine import columns, query
from goodput_jax.measure.engine.codes import (
    B_CUSTOM,
    B_DATA,
    B_INFRA,
    B_OTHER,
    B_RECOMP,
    B_SCALE_UP,
    B_SLICE_DOWN,
    B_STARTUP,
    B_WASTED,
    CKPT_PROGRESS,
    COMPILATION,
    DEVICE_END,
    DL_END,
    DL_START,
    EWAIT_START,
    HINTS,
    HOST_BITS,
    HOST_MASK,
    JOB_END,
    JOB_START,
    NB,
    PENDING,
    POINT_KINDS,
    PROGRAM_COST,
    REINIT_START,
    SLICE_COUNTS,
    SPAN_END_START,
    SPAN_START_BUCKET,
    STEP_START,
    payload,
)
from goodput_jax.measure.engine.rules import (
    LOAD_BLOCKS,
    OWNER_TABLES,
    excluded_seconds,
    window_ends,
)

_WASTED = BUCKET_NAMES[B_WASTED]
_INFRA = BUCKET_NAMES[B_INFRA]
_OTHER = BUCKET_NAMES[B_OTHER]


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
        self.windowed = ws != -math.inf or we != math.inf
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
        self.cur: int | None = None  # active stream key
        self.ended = False
        self.last_t = 0.0
        self.spans: list[tuple[int, str | None, int]] = []
        self.open_step = -1
        self.pending = 0.0
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
        self.downtime = 0.0  # seconds from crashed runs' last events to the next runs' first
        self.window_disruptions = 0  # restarts after a crash inside [ws, we]
        self.ignored = 0
        self.unmatched = 0
        self.out_of_order = 0
        self.events = 0
        self.vectorised_rows = 0  # of ``events``, those the vectorised path attributed
        self.compilations = 0
        self.device_runs = 0  # runs whose leader recorded device step ends (runtime capture)
        self.hints: Any = None
        self.programs: list[tuple[float, Any, Any]] = []  # PROGRAM_COST rows
        self.last_ckpt_step: int | None = None
        self.flat_save = 0.0  # Orbax checkpoint-manager statistics (flat seconds)
        self.flat_restore = 0.0
        self.slice_counts: list[tuple[float, int, int, int]] = []  # (t, active, available, total)
        self._set_mode(False, 0)
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
    def _set_mode(self, dev_mode: bool, reinit_open: int) -> None:
        """Set the run's device mode and open re-initialisations, and the owner table
        (:func:`~goodput_jax.measure.engine.rules.gap_owner`) the row loop reads."""
        self.dev_mode = dev_mode
        self.reinit_open = reinit_open  # open elastic re-initialisation spans
        self.owners = OWNER_TABLES[dev_mode][reinit_open > 0]

    def _new_segment(self) -> None:
        self.seg_run.append(self.runs - 1)
        self.seg_first.append(0.0)
        self.seg_has_first.append(False)
        self.seg_osum.append(0.0)
        self.seg_ocnt.append(0)
        if self.record:
            self.seg_first_segs.append([])

    def _count_steps(self, first: float, rest: float, n: int) -> bool:
        """Rule 15's bookkeeping: ``n`` counted steps of the current segment completed,
        the first taking ``first`` seconds, the others ``rest`` in all. The segment's
        first counted step is the one whose excess over the mean of the others is the
        inferred program startup. Returns whether the first of them is the segment's."""
        g = len(self.seg_run) - 1
        if not self.seg_has_first[g]:
            self.seg_has_first[g] = True
            self.seg_first[g] = first
            if n > 1:
                self.seg_osum[g] += rest
                self.seg_ocnt[g] += n - 1
            return True
        self.seg_osum[g] += first + rest
        self.seg_ocnt[g] += n
        return False

    def _complete(self, step: int, secs: float, count: bool) -> None:
        """A step finished: it becomes live (productive unless later rolled back)."""
        self.live_steps.append(step)
        self.live_secs.append(secs)
        self.live_seg.append(len(self.seg_run) - 1)
        self.productive += secs
        role = 0
        if count:
            role = 1 if self._count_steps(secs, 0.0, 1) else 2
        self.live_role.append(role)
        if self.record:
            self.live_segs.append(self.pend_segs)
            if role == 1:
                self.seg_first_segs[-1] = self.pend_segs
            self.pend_segs = []

    def _complete_many(self, steps: np.ndarray, secs: np.ndarray) -> None:
        """:meth:`_complete` of consecutive counted steps at once (the vectorised path)."""
        c = secs.size
        roles = np.full(c, 2, dtype=np.int8)
        if self._count_steps(float(secs[0]), float(secs[1:].sum()), c):
            roles[0] = 1
        self.live_steps.frombytes(steps.astype(np.int64).tobytes())
        self.live_secs.frombytes(secs.astype(np.float64).tobytes())
        self.live_seg.frombytes(np.full(c, len(self.seg_run) - 1, dtype=np.int64).tobytes())
        self.live_role.frombytes(roles.tobytes())
        self.productive += float(secs.sum())

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
            self._recategorise(self.live_segs.pop(), PRODUCTIVE, _WASTED)
        return s

    def _recategorise(self, idx: list[int], old: str, new: str) -> None:
        """Recorded slices ``idx`` that are ``old`` become ``new`` (timeline only)."""
        segs = self.segs
        for i in idx:
            if segs[i][2] == old:
                segs[i][2] = new

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
        """Seconds of ``[a, b]`` inside the window, less the exclusions (rules 11, 24)."""
        if self.windowed and not (self.ws <= a and b <= self.we):
            if b <= self.ws or a >= self.we:
                return 0.0  # (wholly outside the window)
            a, b = window_ends(a, b, self.ws, self.we)
        if b <= a:
            return 0.0
        return b - a - excluded_seconds(a, b, self.excl) if self.excl else b - a

    def _rolls_back(self, step: int) -> bool:
        """Rules 2 and 3: a step start whose number is <= a live or in-flight step
        rolls back (the steps from it on are redone)."""
        if self.live_steps and step <= self.live_steps[-1]:
            return True
        return step <= self.open_step or (bool(self.dq) and step <= max(self.dq))

    # ------------------------------------------------------------ row loop
    def feed(self, rows: Iterable[Sequence[Any]]) -> None:
        """Feed rows in insertion order (see the class docstring).

        ``Any``: a row is ``(kind code, stream key, timestamp, step or None, label or None)`` as
        the stores return them.
        """
        acc = self.acc
        custom = self.custom
        seen = self.seen
        ws, we, windowed, excl = self.ws, self.we, self.windowed, self.excl
        record = self.record
        span_bucket = SPAN_START_BUCKET
        span_end = SPAN_END_START
        n = 0
        for kind, sid, t, step, label in rows:
            n += 1
            if kind in POINT_KINDS:
                self._point(kind, t, step, label)
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
                self._new_run(sid, t)
            elif self.ended:
                # a cleanly ended stream that logs again: the pause is not job time
                self.ended = False
                self.last_t = max(self.last_t, t)
            else:
                last_t = self.last_t
                if t < last_t:
                    self.out_of_order += 1
                    t = last_t
                a, b = last_t, t
                if windowed and not (ws <= a and b <= we):  # (inside the window: whole)
                    a, b = window_ends(a, b, ws, we) if b > ws and a < we else (a, a)
                if b > a:
                    dt = b - a - excluded_seconds(a, b, excl) if excl else b - a
                    spans = self.spans
                    # the gap's owner (rules.gap_owner, tabulated for this mode)
                    o = self.owners[spans[-1][2] if spans else -1][self.open_step >= 0]
                    if o == PENDING:
                        self.pending += dt
                        if record:
                            i = self._add(a, b, PRODUCTIVE, self.open_step)
                            if not self.pend_segs or self.pend_segs[-1] != i:
                                self.pend_segs.append(i)
                    elif o == B_OTHER:
                        # (exclusions remove time from recorded activities only, as in the
                        # reference: unattributed time stays OTHER)
                        other_gap = b - a
                        acc[B_OTHER] += other_gap
                        if record:
                            self._add(a, b, _OTHER)
                    else:
                        acc[o] += dt
                        if o == B_CUSTOM:
                            key = spans[-1][1] or ""  # (as engine.query: "" for no label)
                            custom[key] = custom.get(key, 0.0) + dt
                        if record:
                            self._add(a, b, BUCKET_NAMES[o], None, spans[-1][1])
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
                    self._set_mode(self.dev_mode, self.reinit_open + 1)
                elif kind == DL_START:
                    self.dl_open = t
                    if not LOAD_BLOCKS[self.dev_mode][self.dl_first_done]:
                        continue  # an asynchronous load: transparent
                    self.dl_first_done = True
                self.spans.append((kind, label, span_bucket[kind]))
            elif kind in span_end:
                want = span_end[kind]
                found = False
                if kind == DL_END and self.dl_open is not None:
                    self.dl_total += self._clip(self.dl_open, t)
                    self.dl_open = None
                    found = True
                spans = self.spans
                for i in range(len(spans) - 1, -1, -1):
                    if spans[i][0] == want and spans[i][1] == label:
                        del spans[i]
                        if want == REINIT_START:
                            self._set_mode(self.dev_mode, self.reinit_open - 1)
                        break
                else:
                    if not found:
                        self.unmatched += 1
            elif kind == DEVICE_END:
                # rule 19: the device finished `step` (and every earlier queued step)
                if step is None or step < 0:
                    self.unmatched += 1
                    continue
                if not self.dev_mode:
                    self._set_mode(True, self.reinit_open)
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
                self._set_mode(self.dev_mode, 0)
                self.dl_open = None
                self.ended = True
                self.run_hosts[sid & HOST_MASK] = True
            elif kind == COMPILATION:
                self._compilation(payload(label), other_gap)
            # STEP_END: the host's end of a step is not the device's: no effect.
            # JOB_START: handled above (a new run).
        self.events += n

    def _new_run(self, sid: int, t: float) -> None:
        """A new stream, or a repeated JOB_START: a new run (rules 5, 8, 12, 14, 21)."""
        cur, last_t = self.cur, self.last_t
        if cur is not None and self.ended:
            # a host of the cleanly ended run never ended: it died
            dead = self.open_hosts()
            if dead:
                self.dead_hosts += dead
                self.disruptions += 1
        if cur is not None and not self.ended:
            # the previous run crashed: in-flight step + downtime
            self.disruptions += 1
            if self.ws <= t <= self.we:
                self.window_disruptions += 1
            down = self._clip(last_t, t)
            self.acc[B_INFRA] += self.pending + down
            self.downtime += down  # (scheduling: the job held nothing until the next run)
            if self.record:
                self._recategorise(self.pend_segs, PRODUCTIVE, _INFRA)  # (compile time stays)
                self.crashes.append((last_t, self.runs - 1))
                if t > last_t:
                    self._add(last_t, t, _INFRA)
        if sid != cur:
            self.seen.add(sid >> HOST_BITS)
        self.run_hosts = {sid & HOST_MASK: False}
        self.cur = sid
        self.ended = False
        self.last_t = t if (sid != cur or t > last_t) else last_t
        self.spans = []
        self._set_mode(False, 0)
        self.open_step = -1
        self.pending = 0.0
        self.dq = []
        self.dl_first_done = False
        self.dl_open = None
        self.runs += 1
        if self.first_t is None:
            self.first_t = t
        self._new_segment()
        if self.record:
            self.pend_segs = []
            self.run_ids.append(sid)
            if self.runs > 1:
                self.restarts.append((t, self.runs - 1))

    def _point(self, kind: int, t: float, step: Any, label: Any) -> None:
        """Rows that attribute no time: hints, checkpoint progress and statistics."""
        if kind == HINTS:
            self.hints = label  # the payload travels in the label column
            return
        if kind == PROGRAM_COST:
            # (time, first step, payload) of each compiled step program, in record order
            self.programs.append((t, step, label))
            return
        if kind == CKPT_PROGRESS:
            # informational (its time is the checkpoint's start, usually in the past)
            self.last_ckpt_step = step if step is not None and step >= 0 else None
            return
        if not (self.ws <= t <= self.we):
            return
        p = payload(label)
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
        if self._rolls_back(step):
            if self.dev_mode or self.open_step > step or any(s >= step for s in self.dq):
                # unfinished device work on redone steps is wasted
                self.acc[B_WASTED] += self.pending
                if self.record:
                    self._recategorise(self.pend_segs, PRODUCTIVE, _WASTED)
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

    def _compilation(self, p: dict, other_gap: float) -> None:
        """Rule 16: measured compile time is taken out of the step or OTHER gap it fell in."""
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
            where = _OTHER
        else:
            return  # compiled inside a badput span: that span keeps the time
        self.acc[bucket] += take
        if self.record and take > 0:
            # the last `take` seconds of the `where` slices become the compile's
            order = list(reversed(self.pend_segs)) if where == PRODUCTIVE \
                else range(len(self.segs) - 1, -1, -1)
            query.recategorise(self.segs, order, take, where, BUCKET_NAMES[bucket])

    # ------------------------------------------------------------ columnar path
    def feed_columns(self, cols: dict, fast: bool = True) -> None:
        """Feed a columnar chunk (see ``SQLiteStore.read_columns``).

        Runs of "simple" rows (one stream, non-decreasing time, steps that only
        go forward, non-custom spans that close on the next row, asynchronous
        loads, host step ends) are attributed with numpy in one go
        (:mod:`~goodput_jax.measure.engine.columns`, by the same rules); everything
        else goes through the row loop :meth:`feed`. Both give the same result
        (tested), up to floating-point summation order.
        """
        columns.feed_columns(self, cols, fast)

    # ------------------------------------------------------------ results
    def open_hosts(self) -> int:
        """Hosts of the current run that started and did not (yet) record their job end."""
        return sum(1 for done in self.run_hosts.values() if not done)

    def inferred_startup(self) -> list[float]:
        """Program startup inferred per segment (0 where compile time was measured)."""
        return query.inferred_startup(self)

    def totals(self, now: float) -> tuple[float, list[float], dict[str, float]]:
        """(productive, bucket seconds, custom seconds) including the live tail up to now."""
        return query.totals(self, now)

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
        return query.timeline(self, now)
