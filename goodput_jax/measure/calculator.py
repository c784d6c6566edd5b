"""GoodputCalculator: goodput, badput breakdown, intervals and step-time statistics.

The calculator reads a job's events from an :class:`EventStore` in insertion order and
attributes every second of the job's time to exactly one bucket: productive step time or
one :class:`BadputType`. It keeps running totals and a store cursor, so a query after K
new events costs O(K), not O(history).

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
  are ignored and counted.
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

import json
import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from goodput_jax.measure.advice import CheckpointAdvice, FinishForecast
from goodput_jax.measure.advice_inputs import (
    advice_inputs,
    checkpoint_advice_for,
    finish_forecast_for,
)
from goodput_jax.measure.badput import BadputType
from goodput_jax.measure.engine import Engine, StreamKeys
from goodput_jax.measure.events import TimeLike, check_job_name, to_timestamp
from goodput_jax.measure.live import flush_writers
from goodput_jax.measure.productivity import (
    DevicePeak,
    ProductivityGoodput,
    ProgramGoodput,
    SchedulingTimeline,
    productivity,
    productivity_of,
    timeline_from_segments,
)
from goodput_jax.measure.results import (  # the result shapes, re-exported here
    BUCKET_TYPES,
    NoEventsError,
    StepDeviation,
    breakdown,
    check_ideal,
    estimate_ideal_step_time,
    goodput_percent,
    mad_limit,
    program_goodput_of,
    step_deviation_of,
)
from goodput_jax.measure.store_reads import StepMarks, select
from goodput_jax.measure.stores import EventStore, resolve_store
from goodput_jax.measure.stragglers import Stragglers, step_stragglers

#: buckets of time a job outside the cluster runtime waited for its resources
_WAIT_BUCKETS = (BUCKET_TYPES.index(BadputType.ELASTIC_SLICE_DOWN),
                 BUCKET_TYPES.index(BadputType.ELASTIC_SCALE_UP))

__all__ = ["BUCKET_TYPES", "GoodputCalculator", "NoEventsError", "StepDeviation", "breakdown",
           "check_ideal", "estimate_ideal_step_time", "goodput_percent", "mad_limit"]


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
            :meth:`get_step_deviation`; None = robust estimate. (All methods are thread-safe.)

    Example:
        >>> calc = GoodputCalculator("my-job", "goodput_my-job",
        ...                          store="sqlite:///goodput.db")  # doctest: +SKIP
        >>> goodput, badput, last_step = calc.get_job_goodput(
        ...     include_badput_breakdown=True)  # doctest: +SKIP
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
        """``Any``: ``store`` is a URL, a path or a store object (resolved once, as
        ``resolve_store`` says) and ``clock`` returns a time in any form
        :func:`~goodput_jax.measure.events.to_timestamp` accepts.
        """
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
        self._marks = StepMarks()  # step marks of every host, for get_step_stragglers

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

    def _feed_new(self, eng: Engine, cursor: Any, only: tuple[float, float] | None = None
                  ) -> Iterator[tuple[Any, int]]:
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
                    cols = select(cols, (cols["ts"] > only[0]) & (cols["ts"] <= only[1]))
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

    def timeline(self, now: TimeLike | None = None) -> dict[str, Any]:
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

        ``Any``: the values are JSON-like (numbers, strings, lists, nested dicts), as stored or
        uploaded.
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
    def _result(self, eng: Engine, now: float, include: bool, what: str
                ) -> tuple[float, dict[BadputType, float], int]:
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
        self, interval_start: TimeLike, interval_end: TimeLike
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

    def _interval(self, ws: float, we: float
                  ) -> tuple[float, dict[BadputType, float], int, Engine, float]:
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

        ``Any``: the values are JSON-like (numbers, strings, lists, nested dicts), as stored or
        uploaded.
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

    def get_step_statistics(self, configured_ideal_step_time: float | None = None
                            ) -> StepDeviation:
        """:meth:`get_step_deviation` as the monitors read it (the drop-in's is a dict)."""
        return GoodputCalculator.get_step_deviation(self, configured_ideal_step_time)

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
        return step_deviation_of(steps, times, ideal_cfg)

    def get_step_stragglers(self, since: TimeLike | None = None) -> Stragglers:
        """Per step, which host held the step back and by how much; the slowest hosts.

        Only meaningful when several hosts of a launch record (same run id, ``host`` =
        process index); definitions in :mod:`goodput_jax.measure.stragglers`. The step
        marks are read incrementally; the comparison costs O(steps compared).

        Args:
            since: only marks at or after this time (UTC seconds or an aware datetime),
                e.g. a monitor's rolling window; None: the whole job.

        Returns:
            :class:`~goodput_jax.measure.stragglers.Stragglers` (``job_share`` against the
            job's total time). Raises ``NoEventsError`` when the store has none of the job's.

        Example:
            >>> calc.get_step_stragglers().slowest(3)  # doctest: +SKIP
        """
        t0 = None if since is None else to_timestamp(since, name="since")
        with self._lock:
            # (the base shape: the drop-ins override get_job_goodput_details with Google's)
            total = GoodputCalculator.get_job_goodput_details(self)["total_time"]
            m = self._marks
            m.read(self.store, self.job_name, self._CHUNK)
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
            raise TypeError(
                f"peak ({peak!r}) must be a goodput_jax.measure.productivity.DevicePeak")
        with self._lock:
            self.refresh()
            eng = self._engine
            self._require_events(eng)
            rows = list(eng.programs)
            steps = np.frombuffer(eng.live_steps, dtype=np.int64).copy()
            secs = np.frombuffer(eng.live_secs, dtype=np.float64).copy()
        return program_goodput_of(rows, steps, secs, peak, peak_table)

    def get_scheduling_timeline(self, now: TimeLike | None = None) -> SchedulingTimeline:
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
                                 now: TimeLike | None = None,
                                 spans: bool = False) -> ProductivityGoodput:
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

    def get_checkpoint_advice(self, mtbf_s: float | None = None, *,
                              save_cost_s: float | None = None,
                              restart_s: float | None = None,
                              method: str = "daly") -> CheckpointAdvice:
        """How often to checkpoint: the Young/Daly interval, in steps, and its goodput.

        From the measured save cost, the observed mean time between disruptions (or
        ``mtbf_s``), the measured restart cost (saves a crash cut short count in neither)
        and the mean productive step: :func:`goodput_jax.measure.advice_inputs.
        checkpoint_advice_for` (its arguments, errors and definitions); the predicted
        goodputs are Daly's expectation under Poisson failures (:mod:`.advice`).

        Example:
            >>> calc.get_checkpoint_advice(mtbf_s=12 * 3600).interval_steps  # doctest: +SKIP
        """
        x = advice_inputs(self, details=GoodputCalculator.get_job_goodput_details(self),
                          statistics=GoodputCalculator.get_step_deviation(self))  # base
        return checkpoint_advice_for(self, mtbf_s, save_cost_s=save_cost_s,
                                     restart_s=restart_s, method=method, inputs=x)

    def get_finish_forecast(self, target_step: int, now: TimeLike | None = None) -> FinishForecast:
        """When the job reaches ``target_step`` at its current rates, and the badput expected
        on the way.

        Work left = steps left x the mean productive step time; each step brings along
        today's recurring badput per productive step. Badput up to the end of the first
        step (initialisation, preparation, startup, a peak probe) is one-time: reported
        in ``one_time_badput``, not repeated (:mod:`goodput_jax.measure.advice_inputs`).

        Example:
            >>> calc.get_finish_forecast(10_000).finish_time            # doctest: +SKIP
        """
        x = advice_inputs(self, now, details=GoodputCalculator.get_job_goodput_details(self),
                          statistics=GoodputCalculator.get_step_deviation(self))
        return finish_forecast_for(self, target_step, inputs=x)

    def get_latest_hints(self) -> dict | None:
        """Payload of the latest ``HINTS`` event (from ``record_hints``), or None."""
        with self._lock:
            self.refresh()
            h = self._engine.hints
        if isinstance(h, str):
            return json.loads(h)
        return None if h is None else dict(h)


