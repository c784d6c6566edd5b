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
import json
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from goodput_jax.measure.advice import (
    CheckpointAdvice,
    FinishForecast,
    checkpoint_advice,
    finish_forecast,
)
from goodput_jax.measure.badput import BUCKET_NAMES, BadputType
from goodput_jax.measure.engine import Engine, StreamKeys
from goodput_jax.measure.engine.codes import payload
from goodput_jax.measure.events import KIND_CODES, EventKind, check_job_name, to_timestamp
from goodput_jax.measure.live import flush_writers
from goodput_jax.measure.productivity import (
    DevicePeak,
    ProductivityGoodput,
    ProgramCost,
    ProgramGoodput,
    SchedulingTimeline,
    combine_programs,
    lookup_peak,
    productivity,
    productivity_of,
    program_stats,
    timeline_from_segments,
)
from goodput_jax.measure.stores import EventStore, resolve_store
from goodput_jax.measure.stragglers import Stragglers, step_stragglers


class NoEventsError(ValueError):
    """The store holds no timeline events for the job (message names store and job)."""


#: The badput types of the engine's per-bucket seconds, in their order: ``acc[i]`` of
#: ``Engine.totals()`` is ``BUCKET_TYPES[i]`` (the seam :func:`breakdown` and the drop-ins use).
BUCKET_TYPES: tuple[BadputType, ...] = tuple(BadputType[name] for name in BUCKET_NAMES)
#: buckets of time a job outside the cluster runtime waited for its resources
_WAIT_BUCKETS = (BUCKET_TYPES.index(BadputType.ELASTIC_SLICE_DOWN),
                 BUCKET_TYPES.index(BadputType.ELASTIC_SCALE_UP))



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


def check_ideal(value: Any) -> float | None:
    """A ``configured_ideal_step_time``, validated: None, or a positive finite float.

    Raises:
        TypeError, ValueError: naming ``configured_ideal_step_time`` and the value.

    Example:
        >>> check_ideal(2), check_ideal(None)
        (2.0, None)
    """
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
            ``./goodput.db``). A SQLite file that does not exist is not created (the job
            reads as having no events until a recorder writes it).
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
        check_job_name(job_name)
        if clock is not None and not callable(clock):
            raise TypeError(f"clock ({clock!r}) must be a callable returning UTC seconds")
        self.job_name = job_name
        self.logger_name = logger_name
        # a reader creates no file: a store path nobody wrote to reads as empty
        self.store = resolve_store(store, reader=True)
        self._clock = clock or time.time
        self.configured_ideal_step_time = check_ideal(configured_ideal_step_time)
        self._lock = threading.RLock()
        self._engine = Engine()
        self._cursor: Any = None
        self._keys = StreamKeys()  # (run_id, host) -> engine stream key
        self._sid_keys: dict[int, int] = {}  # store stream id -> engine stream key
        self._marks = _StepMarks()  # step marks of every host, for get_step_stragglers

    # ----------------------------------------------------------------- reading
    def _now(self) -> float:
        return to_timestamp(self._clock(), name="clock()")

    def _keyed(self, cols: dict) -> dict:
        """Columns with the store's stream ids replaced by engine stream keys."""
        stream = cols["stream"]
        u, inv = np.unique(stream, return_inverse=True)
        mapped = np.empty(u.size, dtype=np.int64)
        for i, sid in enumerate(u.tolist()):
            k = self._sid_keys.get(sid)
            if k is None:
                k = self._sid_keys[sid] = self._keys.key(*self.store.stream_info(sid))
            mapped[i] = k
        return {**cols, "stream": mapped[inv]}

    def _feed_new(self, eng: Engine, cursor: Any, only: tuple[float, float] | None = None):
        """Feed ``eng`` every event newer than ``cursor``, one chunk at a time.

        ``only=(a, b)`` feeds only the events with ``a < timestamp <= b``.
        Yields ``(cursor, count)`` after each chunk has been fed. This process's live
        recorders of the job on this store write what they hold first (read your own writes).
        """
        flush_writers(self.job_name, self.store)
        while True:
            # every EventStore reads columns (stores without a fast path through
            # stores.base.RowColumns / RowStoreAdapter)
            cols, cursor, done = self.store.read_columns(self.job_name, cursor, self._CHUNK)
            n = 0
            if cols is not None:
                n = cols["kind"].size
                cols = self._keyed(cols)
                if only is not None:
                    cols = _select(cols, (cols["ts"] > only[0]) & (cols["ts"] <= only[1]))
                eng.feed_columns(cols)
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

    def timeline(self, now: Any = None) -> dict[str, Any]:
        """The job's attributed time slices, as the calculator's own engine attributes them.

        Replays the store into a fresh recording engine (the calculator's
        incremental state is left as it is) and returns the engine's
        :meth:`~goodput_jax.measure.engine.Engine.timeline`, so the slices' totals
        equal :meth:`get_job_goodput_details` to the float.

        Args:
            now: "now" for a live job, UTC seconds or an aware datetime
                (default: the calculator's clock).

        Returns:
            dict with ``segments`` (lists ``[start, end, category, run, step,
            label]``; ``category`` is ``"PRODUCTIVE"`` or a
            :data:`~goodput_jax.measure.badput.BUCKET_NAMES` entry, ``run`` an index
            into ``run_ids``), ``restarts`` and ``crashes`` (``(time, run index)``),
            ``run_ids`` (the run id strings, in order of appearance), ``first_t``
            (the first run's first event time, or None) and ``now``.

        Raises:
            NoEventsError: the store holds no events for the job.

        Example:
            >>> tl = calc.timeline(now=1_700_000_100.0)                 # doctest: +SKIP
            >>> sum(b - a for a, b, *_ in tl["segments"])               # doctest: +SKIP
            100.0
        """
        t = self._now() if now is None else to_timestamp(now, name="now")
        eng = Engine(record=True)
        with self._lock:
            for _ in self._feed_new(eng, None):
                pass
            self._require_events(eng)
            out = eng.timeline(t)
            out["run_ids"] = [self._keys.run_id(key) for key in out["run_ids"]]
        out["first_t"] = eng.first_t
        out["now"] = t
        return out

    def _require_events(self, eng: Engine) -> None:
        if eng.runs == 0:
            raise NoEventsError(
                f"no goodput events for job {self.job_name!r} in store "
                f"{self.store.url!r}"
            )

    # ----------------------------------------------------------------- results
    def _result(self, eng: Engine, now: float, include: bool, what: str):
        self._require_events(eng)
        productive, acc, _ = eng.totals(now)
        total = productive + sum(acc)
        if total <= 0:
            raise ValueError(
                f"{what} of job {self.job_name!r} has zero elapsed time; goodput is undefined"
            )
        goodput = goodput_percent(productive, total)
        last = eng.live_steps[-1] if eng.live_steps else 0
        if not include:
            return goodput, {}, last
        return goodput, breakdown(acc, total, eng.async_data_loading()), last

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
        return self._interval(ws, we)[:3]

    def _replay(self, ws: float = -math.inf, we: float = math.inf,
                exclusions: list | None = None, only: tuple[float, float] | None = None) -> Engine:
        """A fresh engine fed the whole job (window / exclusions applied); O(history).

        Runs without the calculator's lock (it touches no incremental state), so a
        long replay (an interval query) never holds up the incremental queries.
        """
        eng = Engine(ws, we, exclusions=exclusions)
        for _ in self._feed_new(eng, None, only):
            pass
        return eng

    def _interval(self, ws: float, we: float):
        eng = self._replay(ws, we)
        now = self._now()
        g, flat, last = self._result(eng, now, True, f"the interval [{ws}, {we}]")
        return g, flat, last, eng, now

    def get_job_goodput_details(self) -> dict[str, Any]:
        """Raw seconds per bucket plus bookkeeping.

        Returns:
            dict with ``productive_time``, ``badput_time`` ({BadputType: s}),
            ``custom_badput_time`` ({label: s}), ``total_time``,
            ``last_productive_step``, ``num_runs``, ``device_timed_runs`` (runs with
            device step ends from ``goodput_jax.runtime``; the others are host-timed),
            ``num_disruptions``,
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
            badput = {t: acc[i] for i, t in enumerate(BUCKET_TYPES)}
            badput[BadputType.DATA_LOADING_ASYNC] = eng.async_data_loading()
            return {
                "productive_time": productive,
                "badput_time": badput,
                "custom_badput_time": custom,
                "total_time": productive + sum(acc),
                "last_productive_step": eng.live_steps[-1] if eng.live_steps else 0,
                "num_runs": eng.runs,
                # runs timed by the device (STEP_DEVICE_END from goodput_jax.runtime); the
                # others are host-timed (Google's rules 1 and 17)
                "device_timed_runs": eng.device_runs,
                # a finished last run with a host that never recorded its job end: it died
                "num_disruptions": eng.disruptions + (1 if eng.ended and eng.open_hosts() else 0),
                "num_hosts": len(eng.run_hosts),
                "dead_hosts": eng.dead_hosts + (eng.open_hosts() if eng.ended else 0),
                "follower_events": eng.follower_events,
                "last_checkpointed_step": eng.last_ckpt_step,
                "ignored_events": eng.ignored,
                "unmatched_events": eng.unmatched,
                "out_of_order_events": eng.out_of_order,
                "num_events": eng.events,
            }

    def new_step_times(self, token: tuple[int, int] | None = None
                       ) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
        """Productive steps completed, or redone after a rollback, since ``token``.

        Costs O(new steps): only the changed tail of the live steps is copied.

        Args:
            token: what the previous call returned (None: from the start).

        Returns:
            ``(step numbers, step seconds, token)``; steps redone after a rollback
            come back again with their new times.

        Example:
            >>> steps, secs, token = calc.new_step_times()          # doctest: +SKIP
            >>> steps, secs, token = calc.new_step_times(token)     # doctest: +SKIP
        """
        with self._lock:
            self.refresh()
            eng = self._engine
            n = len(eng.live_steps)
            seen, rb = token if token is not None else (0, 0)
            low = min([seen, *eng.rollbacks[rb:]]) if rb < len(eng.rollbacks) else seen
            low = min(low, n)
            steps = np.array(eng.live_steps[low:], dtype=np.int64)
            secs = np.array(eng.live_secs[low:], dtype=np.float64)
            return steps, secs, (n, len(eng.rollbacks))

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
        ideal_cfg = check_ideal(configured_ideal_step_time) or self.configured_ideal_step_time
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

    def get_step_stragglers(self, since: Any = None) -> Stragglers:
        """Per step, which host held the step back and by how much; the slowest hosts.

        Only meaningful when several hosts of a launch record (same run id, ``host`` =
        process index); with one host there is nothing to compare (``num_hosts == 1``,
        no steps). Definitions in :mod:`goodput_jax.measure.stragglers`: a step's
        straggler is the host that arrived (``STEP_START``) or finished (device end, else
        ``STEP_END``) last, by the largest margin over the median of the other hosts; that
        margin is the step's lag, and a host's lost time is the sum of its steps' lags.
        The step marks are read incrementally (a query reads only the events appended
        since the last one); the comparison costs O(steps compared).

        Args:
            since: only marks at or after this time (UTC seconds or an aware datetime),
                e.g. a monitor's rolling window; None: the whole job.

        Returns:
            :class:`~goodput_jax.measure.stragglers.Stragglers` (``job_share`` against the
            job's total time).

        Raises:
            NoEventsError: the store holds no events for the job.

        Example:
            >>> st = calc.get_step_stragglers()                       # doctest: +SKIP
            >>> [(h.host, round(h.lost_time, 3)) for h in st.slowest(3)]  # doctest: +SKIP
            [(1, 1.204)]
        """
        t0 = None if since is None else to_timestamp(since, name="since")
        with self._lock:
            # (the base shape: the drop-ins override get_job_goodput_details with Google's)
            total = GoodputCalculator.get_job_goodput_details(self)["total_time"]
            m = self._marks
            while True:
                cols, cur, done = self.store.read_columns(self.job_name, m.cursor, self._CHUNK)
                if cols is not None and cols["kind"].size:
                    keep = np.isin(cols["kind"], _MARK_CODES)
                    stream = cols["stream"][keep]
                    u, inv = np.unique(stream, return_inverse=True)
                    rh = np.empty((u.size, 2), dtype=np.int64)
                    for i, sid in enumerate(u.tolist()):
                        if sid not in m.info:
                            run_id, host = self.store.stream_info(sid)
                            m.info[sid] = (m.runs.setdefault(run_id, len(m.runs)), int(host))
                        rh[i] = m.info[sid]
                    new = (cols["kind"][keep].astype(np.int64), rh[inv, 0], rh[inv, 1],
                           cols["ts"][keep], cols["step"][keep].astype(np.int64))
                    m.cols = tuple(np.concatenate((a, b)) for a, b in zip(m.cols, new))
                m.cursor = cur  # advanced chunk by chunk: a failed read resumes here
                if done:
                    break
            k, r, h, t, st = m.cols
            names = tuple(m.runs)
        if t0 is not None:
            sel = t >= t0
            k, r, h, t, st = k[sel], r[sel], h[sel], t[sel], st[sel]
        return step_stragglers(k, r, h, t, st, run_ids=names, job_time=total)

    # ------------------------------------------------ ML Productivity Goodput (issue 35)
    def get_program_goodput(self, peak: DevicePeak | None = None,
                            peak_table: dict[str, DevicePeak] | None = None) -> ProgramGoodput:
        """Program goodput and MFU of the productive steps, from the recorded program costs.

        Each ``PROGRAM_COST`` event (``goodput_jax.runtime.StepRecorder`` records one when a
        step call compiles a program) covers the productive steps from its step until the
        next program's; its steps' median device-true step time is measured against the
        roofline: compute time ``flops / peak FLOP/s``, memory time ``bytes / bandwidth``,
        ideal step time = the larger, program goodput = ideal / actual, MFU = compute /
        actual. A program's first step (its compile) is left out when it has others.

        Args:
            peak: the device peak to use for every program (overrides everything else).
            peak_table: entries that extend or override the published table, looked up by
                the program's ``device_kind`` before the peak the runtime recorded.

        Returns:
            :class:`~goodput_jax.measure.productivity.ProgramGoodput` (``programs`` empty and
            NaN figures when no program cost was recorded).

        Raises:
            NoEventsError: the store holds no events for the job.

        Example:
            >>> pg = calc.get_program_goodput()                         # doctest: +SKIP
            >>> pg.mfu, pg.programs[0].bound                            # doctest: +SKIP
        """
        if peak is not None and not isinstance(peak, DevicePeak):
            raise TypeError(f"peak ({peak!r}) must be a goodput_jax.measure.productivity.DevicePeak")
        with self._lock:
            self.refresh()
            eng = self._engine
            self._require_events(eng)
            rows = list(eng.programs)
            steps = np.frombuffer(eng.live_steps, dtype=np.int64).copy()
            secs = np.frombuffer(eng.live_secs, dtype=np.float64).copy()
        return _program_goodput(rows, steps, secs, peak, peak_table)

    def get_scheduling_timeline(self, now: Any = None) -> SchedulingTimeline:
        """The job's scheduling timeline derived from its own events (jobs outside the
        cluster runtime): held except elastic waits for slices and the downtime between a
        crashed run and the next one (see
        :func:`~goodput_jax.measure.productivity.timeline_from_segments`).

        Example:
            >>> calc.get_scheduling_timeline().scheduling_goodput      # doctest: +SKIP
        """
        tl = self.timeline(now)
        return timeline_from_segments(tl["segments"], tl["crashes"], tl["restarts"])

    def get_productivity_goodput(self, scheduling: SchedulingTimeline | None = None, *,
                                 peak: DevicePeak | None = None,
                                 peak_table: dict[str, DevicePeak] | None = None,
                                 now: Any = None, spans: bool = False) -> ProductivityGoodput:
        """ML Productivity Goodput = scheduling x runtime x program goodput, and ETTR.

        Args:
            scheduling: the job's :class:`~goodput_jax.measure.productivity.SchedulingTimeline`
                from the cluster runtime (queued, running, stopping, relaunching, ...);
                None derives it from the recorder's events: held is the job's time less
                its elastic waits for slices and the downtime between a crashed run and
                the next, read from the running totals (O(new events)).
            peak, peak_table: as for :meth:`get_program_goodput`.
            now: "now" for a live job (default: the calculator's clock).
            spans: with ``scheduling=None``, also replay the job for the held and waiting
                spans (:meth:`get_scheduling_timeline`, O(history)) into ``timeline``.

        Returns:
            :class:`~goodput_jax.measure.productivity.ProductivityGoodput` (fractions).
            Runtime goodput = productive time / held time; ETTR = productive time / total
            wall time (waits included).

        Example:
            >>> r = calc.get_productivity_goodput()                     # doctest: +SKIP
            >>> r.scheduling_goodput * r.runtime_goodput * r.program_goodput  # doctest: +SKIP
        """
        if scheduling is not None and not isinstance(scheduling, SchedulingTimeline):
            raise TypeError(f"scheduling ({scheduling!r}) must be a SchedulingTimeline or None")
        t = self._now() if now is None else to_timestamp(now, name="now")
        program = self.get_program_goodput(peak, peak_table)
        with self._lock:
            self.refresh()
            eng = self._engine
            productive, acc, _ = eng.totals(t)
            total = productive + sum(acc)
            held = total - sum(acc[i] for i in _WAIT_BUCKETS) - eng.downtime
        if scheduling is not None:
            return productivity(scheduling, productive, program, "timeline")
        timeline = self.get_scheduling_timeline(t) if spans else None
        return productivity_of(total, max(held, 0.0), productive, program, "events", timeline)

    def _save_marks(self) -> tuple[np.ndarray, np.ndarray]:
        """(times, steps) of the checkpoint saves' starts of each run's first host."""
        code = KIND_CODES[EventKind.CHECKPOINT_SAVE_START]
        ts: list[np.ndarray] = []
        st: list[np.ndarray] = []
        cursor = None
        while True:
            cols, cursor, done = self.store.read_columns(self.job_name, cursor, self._CHUNK)
            if cols is not None and cols["kind"].size:
                sel = cols["kind"] == code
                if sel.any():
                    hosts = np.array([self.store.stream_info(int(sid))[1]
                                      for sid in cols["stream"][sel].tolist()])
                    keep = hosts == hosts.min()
                    ts.append(cols["ts"][sel][keep])
                    st.append(cols["step"][sel][keep])
            if done:
                break
        if not ts:
            return np.zeros(0), np.zeros(0, dtype=np.int64)
        return np.concatenate(ts), np.concatenate(st).astype(np.int64)

    def get_checkpoint_advice(self, mtbf_s: float | None = None, *,
                              save_cost_s: float | None = None,
                              restart_s: float | None = None,
                              method: str = "daly") -> CheckpointAdvice:
        """How often to checkpoint: the Young/Daly interval, in steps, and its goodput.

        From the measured blocking cost of a save (checkpoint-save badput / saves), the
        observed mean time between disruptions (job time / disruptions) or ``mtbf_s``, the
        measured cost of a restart (infrastructure recovery and restore badput per
        disruption), and the median productive step time. The predicted goodput at the
        suggestion and at today's interval (the median steps between saves) come from
        Daly's expectation under Poisson failures (:mod:`goodput_jax.measure.advice`).

        Args:
            mtbf_s: mean time between failures in seconds (None: observed; a job with no
                disruption yet needs it).
            save_cost_s: override the measured save cost.
            restart_s: override the measured restart cost.
            method: ``'daly'`` (default) or ``'young'``.

        Raises:
            ValueError: no save recorded and no ``save_cost_s``; no disruption observed and
                no ``mtbf_s``; no productive step yet.

        Example:
            >>> calc.get_checkpoint_advice(mtbf_s=12 * 3600).interval_steps  # doctest: +SKIP
        """
        det = GoodputCalculator.get_job_goodput_details(self)  # the base shape (drop-in)
        dev = GoodputCalculator.get_step_deviation(self)
        if dev.num_steps == 0:
            raise ValueError(f"job {self.job_name!r} has no productive step yet: "
                             "no step time to turn an interval into steps")
        times, steps = self._save_marks()
        bad = det["badput_time"]
        if save_cost_s is None:
            if times.size == 0:
                raise ValueError(f"save_cost_s (None): job {self.job_name!r} recorded no "
                                 "checkpoint save; pass save_cost_s")
            save_cost_s = bad[BadputType.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME] / times.size
            save_cost_s = max(save_cost_s, 1e-9)
        disruptions = det["num_disruptions"]
        source = "given"
        if mtbf_s is None:
            if disruptions == 0:
                raise ValueError(f"mtbf_s (None): job {self.job_name!r} saw no disruption "
                                 "yet; pass the mean time between failures in seconds")
            mtbf_s, source = det["total_time"] / disruptions, "observed"
        if restart_s is None:
            lost = bad[BadputType.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION] \
                + bad[BadputType.UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME]
            restart_s = lost / disruptions if disruptions else 0.0
        current = None
        good = steps[steps >= 0]
        if good.size >= 2:
            gaps = np.diff(np.sort(good))
            gaps = gaps[gaps > 0]
            if gaps.size:
                current = int(np.median(gaps))
        return checkpoint_advice(save_cost_s, mtbf_s, dev.median, restart_s=restart_s,
                                 current_interval_steps=current, mtbf_source=source,
                                 method=method)

    def get_finish_forecast(self, target_step: int, now: Any = None) -> FinishForecast:
        """When the job reaches ``target_step`` at its current rates, and the badput expected
        on the way.

        Work left = steps left x the median productive step time; each productive second
        brings along today's recurring badput per productive second (every bucket except
        the one-time accelerator initialisation, training preparation and program
        startup).

        Example:
            >>> calc.get_finish_forecast(10_000).finish_time            # doctest: +SKIP
        """
        t = self._now() if now is None else to_timestamp(now, name="now")
        det = GoodputCalculator.get_job_goodput_details(self)  # the base shape (drop-in)
        dev = GoodputCalculator.get_step_deviation(self)
        if dev.num_steps == 0:
            raise ValueError(f"job {self.job_name!r} has no productive step yet: no rate to "
                             "forecast from")
        once = (BadputType.ACCELERATOR_INITIALIZATION, BadputType.TRAINING_PREP,
                BadputType.PROGRAM_STARTUP, BadputType.DATA_LOADING_ASYNC)
        recurring = {b.name: float(v) for b, v in det["badput_time"].items() if b not in once}
        return finish_forecast(target_step, det["last_productive_step"], dev.median,
                               max(det["productive_time"], 1e-12), recurring, t)

    def get_latest_hints(self) -> dict | None:
        """Payload of the latest ``HINTS`` event (from ``record_hints``), or None."""
        with self._lock:
            self.refresh()
            h = self._engine.hints
        if isinstance(h, str):
            return json.loads(h)
        return None if h is None else dict(h)


_MARK_CODES = np.array([KIND_CODES[EventKind.STEP_START], KIND_CODES[EventKind.STEP_END],
                        KIND_CODES[EventKind.STEP_DEVICE_END]], dtype=np.int64)


class _StepMarks:
    """Every host's step marks read so far (columns), with the store cursor they end at."""

    def __init__(self) -> None:
        self.cursor: Any = None
        self.runs: dict[str, int] = {}  # run id -> run index
        self.info: dict[int, tuple[int, int]] = {}  # store stream id -> (run index, host)
        e = np.empty(0, dtype=np.int64)
        self.cols: tuple = (e, e, e, np.empty(0, dtype=np.float64), e)


def _select(cols: dict, mask: np.ndarray) -> dict:
    """The rows of a columnar chunk where ``mask`` holds (labels re-indexed)."""
    if mask.all():
        return cols
    idx = np.flatnonzero(mask)
    pos = {int(i): j for j, i in enumerate(idx)}
    labels = {pos[i]: v for i, v in cols["labels"].items() if i in pos}
    return {"kind": cols["kind"][idx], "stream": cols["stream"][idx], "ts": cols["ts"][idx],
            "step": cols["step"][idx], "labels": labels}


def _program_goodput(rows: list, steps: np.ndarray, secs: np.ndarray, peak: DevicePeak | None,
                     peak_table: dict[str, DevicePeak] | None) -> ProgramGoodput:
    """Each recorded program's stats over its productive steps (see
    ``GoodputCalculator.get_program_goodput``)."""
    progs = []
    for t, step, label in rows:
        p = payload(label)
        try:
            cost = ProgramCost.from_payload(p)
        except (KeyError, TypeError, ValueError):
            continue
        first = int(step) if step is not None and int(step) >= 0 else None
        progs.append((first, t, cost))
    known = [x for x in progs if x[0] is not None]
    known.sort(key=lambda x: x[0])
    out = []
    for i, (first, _t, cost) in enumerate(known):
        nxt = known[i + 1][0] if i + 1 < len(known) else None
        sel = steps >= first
        if nxt is not None:
            sel &= steps < nxt
        times = secs[sel]
        if times.size > 1 and steps[sel][0] == first:
            times = times[1:]  # the program's first step holds its compile
        # the caller's peak, then the caller's table, then what the runtime recorded, then
        # the published table
        pk = peak
        if pk is None and peak_table:
            pk = lookup_peak(cost.device_kind, peak_table)
        if pk is None:
            pk = cost.peak if cost.peak is not None else lookup_peak(cost.device_kind)
        if pk is None:
            continue
        out.append(program_stats(cost, pk, times, first))
    return combine_programs(out)


def mad_limit(step_times: Any) -> float:
    """The anomalous-step limit, median + 3 MAD (median absolute deviation), of step times.

    The one home of the rule: the calculator's ideal step time and the drop-ins'
    (Google's) ideal and anomalous-step helpers all split at this limit; a step above it
    is anomalous (with MAD 0 the limit is the median).

    Example:
        >>> round(mad_limit([1.0, 1.1, 0.9, 1.0, 30.0]), 6)
        1.3
    """
    x = np.asarray(step_times, dtype=np.float64)
    if x.size == 0:
        raise ValueError("step_times (empty) must contain at least one step time")
    med = float(np.median(x))
    return med + 3.0 * float(np.median(np.abs(x - med)))


def goodput_percent(productive: float, total: float) -> float:
    """Goodput in percent: ``100 * productive / total`` seconds (NaN when ``total`` <= 0).

    The one home of the formula, for the calculator, the drop-ins and the reports.

    Example:
        >>> goodput_percent(3.0, 4.0)
        75.0
    """
    return 100.0 * float(productive) / float(total) if total > 0 else float("nan")


def estimate_ideal_step_time(step_times: Any) -> float:
    """Robust ideal step time: median of the steps within median + 3 MAD (:func:`mad_limit`).

    Excludes compile-heavy first steps and stragglers.

    Example:
        >>> estimate_ideal_step_time([1.0, 1.1, 0.9, 1.0, 30.0])
        1.0
    """
    x = np.asarray(step_times, dtype=np.float64)
    normal = x[x <= mad_limit(x)]
    return float(np.median(normal)) if normal.size else float(np.median(x))


def breakdown(acc: list[float], total: float, async_s: float = 0.0) -> dict[BadputType, float]:
    """Badput percentages from the engine's per-bucket seconds (the calculator's rule).

    Args:
        acc: seconds per bucket in :data:`BUCKET_TYPES` order (``Engine.totals()[1]``).
        total: the job seconds the percentages are of (productive + ``sum(acc)``), > 0.
        async_s: asynchronous data-loading seconds: reported as ``DATA_LOADING_ASYNC``
            beside the others, not part of the 100 % (it did not block training).

    Returns:
        ``{BadputType: %}`` for every bucket and ``DATA_LOADING_ASYNC``.

    Raises:
        ValueError: ``acc`` has not one entry per bucket, or ``total`` is not positive.

    Example:
        >>> acc = [0.0] * len(BUCKET_TYPES)
        >>> acc[BUCKET_TYPES.index(BadputType.OTHER)] = 5.0
        >>> breakdown(acc, 20.0)[BadputType.OTHER]
        25.0
    """
    if len(acc) != len(BUCKET_TYPES):
        raise ValueError(f"acc ({len(acc)} entries) must hold one entry per bucket "
                         f"({len(BUCKET_TYPES)}, in BUCKET_TYPES order)")
    if not total > 0:
        raise ValueError(f"total ({total!r}) must be positive")
    out = {t: 100.0 * acc[i] / total for i, t in enumerate(BUCKET_TYPES)}
    # reported beside the others, not part of the 100 % (it did not block training)
    out[BadputType.DATA_LOADING_ASYNC] = 100.0 * async_s / total
    return out
