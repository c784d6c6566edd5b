"""``GoodputCalculator`` with ml-goodput-measurement's API, result shapes and interval rule.

Example:
    >>> calc = GoodputCalculator("job", "goodput_job", store=":memory:")
    >>> calc.get_interval_metric_details(0.0, 10.0)["interval_size"]
    10
"""

from __future__ import annotations

import datetime
import logging
import os
from typing import Any

from goodput_jax.compat.entries import step_starts
from goodput_jax.compat.enums import (
    BadputType,
    GoodputType,
    IntervalMetricType,
    MetricType,
    google_breakdown,
)
from goodput_jax.compat.info import GoodputInfo, LastResult, StepInfo
from goodput_jax.compat.options import LOGGER_NAME, check_flag, cloud_logger_store, to_ts
from goodput_jax.compat.step_times import StepStarts, StepTimes, google_step_deviation
from goodput_jax.measure.badput import BadputType as MeasureBadputType
from goodput_jax.measure.calculator import (
    BUCKET_TYPES,
    NoEventsError,
    breakdown,
    check_ideal,
    goodput_percent,
)
from goodput_jax.measure.calculator import GoodputCalculator as _BaseCalculator
from goodput_jax.measure.engine import Engine
from goodput_jax.measure.events import Event, TimeLike
from goodput_jax.measure.stores.cloud_logger import to_entry

__all__ = ["GoodputCalculator"]

_log = logging.getLogger(LOGGER_NAME)


class GoodputCalculator(_BaseCalculator):
    """:class:`goodput_jax.measure.calculator.GoodputCalculator` with Google's API.

    Args:
        job_name, logger_name: as in Google's library.
        cloud_logger: Google's seam (see :class:`GoodputRecorder`): entries are
            read from it.
        using_pathways: accepted (Google stores it; it changes nothing in 0.2.3's
            calculation).
        max_logs_retention_period: ``datetime.timedelta``; how far back a
            ``gcl://`` store reads (None = Google's 7 days); not used by SQLite.
        gcs_path, cache_dir: accepted and unused: the calculator is incremental
            in memory, so Google's on-disk cache (and its GCS sync) is moot.
        store, clock, configured_ideal_step_time: goodput_jax's extras.

    ``_goodput_cache`` is where Google's calculator keeps its last result (its tests read
    ``calculator._goodput_cache.get_goodput_info()``): here a
    :class:`~goodput_jax.compat.info.LastResult`, updated by :meth:`get_job_goodput` and
    :meth:`get_step_deviation` with what they computed, in Google's shapes (seconds).

    Example:
        >>> calc = GoodputCalculator("job", "goodput_job", store=":memory:")
        >>> calc.using_pathways
        False
    """

    def __init__(self, job_name: str, logger_name: str | None = None, cloud_logger: Any = None,
                 using_pathways: bool = False,
                 max_logs_retention_period: datetime.timedelta | None = None,
                 gcs_path: str | None = None, cache_dir: str | os.PathLike = "/tmp", *,
                 store: Any = None, clock: Any = None,
                 configured_ideal_step_time: float | None = None):
        """``Any``: Google's or MaxText's objects (a ``google.cloud.logging`` logger, a MaxText
        config, an orbax manager) from libraries without type information, duck-typed as their
        code does.
        """
        if max_logs_retention_period is not None and not isinstance(
                max_logs_retention_period, datetime.timedelta):
            raise TypeError(f"max_logs_retention_period ({max_logs_retention_period!r}) "
                            "must be a datetime.timedelta or None")
        if gcs_path is not None and not isinstance(gcs_path, str):
            raise TypeError(f"gcs_path ({gcs_path!r}) must be a string or None")
        if not isinstance(cache_dir, (str, os.PathLike)):
            raise TypeError(f"cache_dir ({cache_dir!r}) must be a path")
        self.using_pathways = bool(check_flag("using_pathways", using_pathways))
        self.max_logs_retention_period = max_logs_retention_period
        self.gcs_path = gcs_path
        self.cache_dir = os.fspath(cache_dir)
        self.cloud_logger = cloud_logger
        #: the last result, in Google's shapes (see the class docstring)
        self._goodput_cache = LastResult()
        super().__init__(job_name, logger_name, store=cloud_logger_store(cloud_logger, store),
                         clock=clock, configured_ideal_step_time=configured_ideal_step_time)
        self._step_starts = StepStarts(self.store, job_name)
        #: the engine of the last get_job_goodput_interval (Google's ``_interval_entries``)
        self._last_interval_engine: Engine | None = None
        #: ``_fetch_new_entries``: the store cursor, and events read but after the query time
        self._fetch_cursor: Any = None
        self._unfetched: list[Event] = []

    def sync_to_gcs(self) -> None:
        """Google syncs its on-disk cache to GCS; there is no such cache here (no-op)."""

    def get_job_goodput(self, include_badput_breakdown: bool = False,
                        configured_ideal_step_time: float | None = None
                        ) -> tuple[float, dict, int]:
        """Goodput of the job so far, in Google's shape.

        Returns:
            ``(goodput %, {BadputType: %} (custom badput as {TYPE: %}), last productive step)``.

        Example:
            >>> goodput, badput, step = calc.get_job_goodput(True)  # doctest: +SKIP
        """
        with self._lock:
            if configured_ideal_step_time is not None:
                self.configured_ideal_step_time = check_ideal(configured_ideal_step_time)
            g, flat, last = super().get_job_goodput(include_badput_breakdown)
            d = super().get_job_goodput_details()
        self._goodput_cache.update_goodput_info(GoodputInfo(
            total_productive_time=d["productive_time"], total_elapsed_time=d["total_time"],
            total_unproductive_time=self._unproductive_seconds(d),
            # goodput_jax keeps no "last recorded step" apart from the last productive one
            max_productive_step=last, last_recorded_step=last,
            number_of_disruptions=d["num_disruptions"]))
        if not include_badput_breakdown:
            return g, {}, last
        total = d["total_time"]
        return g, google_breakdown(flat, d["custom_badput_time"], 100.0 / total), last

    def _unproductive_seconds(self, details: dict[str, Any]) -> dict:
        """``{BadputType: s}`` (custom badput as ``{TYPE: s}``) of the base details."""
        return google_breakdown(details["badput_time"], details["custom_badput_time"], 1.0)

    # Google's signature: five values where the base calculator returns three
    def get_job_goodput_interval(  # type: ignore[override]
            self, interval_start: TimeLike, interval_end: TimeLike) -> tuple[float, dict, int,
            float, int]:
        """Goodput within ``(interval_start, interval_end]`` (Google's 5 values and rule).

        As in ml-goodput-measurement, only the events recorded inside the window
        count, and the window's job time runs from its first to its last event: a
        step whose next step starts after the window is not productive in it
        (the base calculator's ``get_job_goodput_interval`` instead clips the whole
        job's attribution to the window; ``docs/semantics.md`` row 11).

        Returns:
            ``(goodput %, {BadputType: %}, last productive step, job seconds inside
            the interval, disruptions inside the interval)``.

        Raises:
            ValueError: the window holds no events, or no job time.
        """
        ws, we = to_ts(interval_start, "interval_start"), to_ts(interval_end, "interval_end")
        if not we > ws:
            raise ValueError(f"interval_end ({interval_end!r}) must be after interval_start "
                             f"({interval_start!r})")
        eng = self._replay(only=(ws, we))
        if eng.runs == 0:
            raise ValueError(f"no log entries of job {self.job_name!r} within the interval "
                             f"window ({interval_start}, {interval_end}]")
        now = eng.last_t
        g, flat, last = self._result(eng, now, True, f"the interval ({ws}, {we}]")
        self._last_interval_engine = eng
        productive, acc, custom = eng.totals(now)
        total = productive + sum(acc)
        return (g, google_breakdown(flat, custom, 100.0 / total), last, total,
                eng.disruptions)

    def get_interval_metric_details(self, interval_start: TimeLike, interval_end: TimeLike) -> dict:
        """Google's interval details: goodput, badput and the interval's size (s)."""
        size = int(to_ts(interval_end, "interval_end") - to_ts(interval_start, "interval_start"))
        try:
            g, badput, _, _, _ = self.get_job_goodput_interval(interval_start, interval_end)
        except ValueError as e:
            _log.warning("Failed to get interval metric details: %s", e)
            return {IntervalMetricType.INTERVAL_GOODPUT.value: {},
                    IntervalMetricType.INTERVAL_BADPUT.value: {},
                    IntervalMetricType.INTERVAL_SIZE.value: size}
        return {IntervalMetricType.INTERVAL_GOODPUT.value: {GoodputType.TOTAL: g},
                IntervalMetricType.INTERVAL_BADPUT.value: badput,
                IntervalMetricType.INTERVAL_SIZE.value: size}

    def get_job_goodput_details(self) -> dict[str, Any]:
        """Google's ``WorkloadMetricDetails`` keys plus goodput_jax's (seconds).

        ``goodput_time`` ({GoodputType.TOTAL: s}), ``badput_time`` ({BadputType: s},
        custom as {TYPE: s}), ``max_productive_step``, ``total_elapsed_time``,
        ``disruption_count``, ``step_time_deviation``, ``ideal_step_time``,
        ``total_excluded_time``; and ``productive_time``, ``custom_badput_time``,
        ``total_time``, ``num_runs``, ... as in the base calculator.

        ``Any``: the values are JSON-like (numbers, strings, lists, nested dicts), as stored or
        uploaded.
        """
        try:
            d = super().get_job_goodput_details()
        except NoEventsError as e:
            _log.warning("Goodput information unavailable: %s", e)
            return {m.value: ({} if m in (MetricType.GOODPUT_TIME, MetricType.BADPUT_TIME,
                                          MetricType.STEP_TIME_DEVIATION)
                              else 0 if m in (MetricType.MAX_PRODUCTIVE_STEP,
                                              MetricType.DISRUPTION_COUNT) else 0.0)
                    for m in MetricType}
        try:
            ideal, dev = self._google_deviation(None)
        except ValueError:
            ideal, dev = 0.0, {}
        out = dict(d)
        out.update({
            MetricType.GOODPUT_TIME.value: {GoodputType.TOTAL: d["productive_time"]},
            MetricType.BADPUT_TIME.value: google_breakdown(d["badput_time"],
                                                            d["custom_badput_time"], 1.0),
            MetricType.MAX_PRODUCTIVE_STEP.value: d["last_productive_step"],
            MetricType.TOTAL_ELAPSED_TIME.value: d["total_time"],
            MetricType.DISRUPTION_COUNT.value: d["num_disruptions"],
            MetricType.STEP_TIME_DEVIATION.value: dev,
            MetricType.IDEAL_STEP_TIME.value: ideal,
            MetricType.TOTAL_EXCLUDED_TIME.value: 0.0,
        })
        return out

    # Google's signature: {step: deviation} where the base returns a StepDeviation
    def get_step_deviation(  # type: ignore[override]
            self, configured_ideal_step_time: float | None = None) -> dict[int, float]:
        """``{step: |step time - ideal step time|}`` as ml-goodput-measurement computes it.

        A step's time is the gap from its start to the next step's start (step + 1);
        the ideal is ``configured_ideal_step_time``, else the calculator's configured one,
        else :func:`~goodput_jax.compat.utils.compute_ideal_step_time`
        (:mod:`goodput_jax.compat.step_times`). The engine's productive step statistics
        (device-timed where recorded, signed deviations) are :meth:`get_step_statistics`.

        Raises:
            ValueError: no step times yet, or no ideal step time (Google's messages).

        Example:
            >>> calc.get_step_deviation(configured_ideal_step_time=2.0)  # doctest: +SKIP
            {0: 1.0, 1: 0.0, 2: 13.0}
        """
        return self._google_deviation(
            check_ideal(configured_ideal_step_time) if configured_ideal_step_time is not None
            else None)[1]

    def _google_deviation(self, configured: float | None) -> tuple[float, dict[int, float]]:
        self.refresh()  # this process's recorders write what they hold first
        ideal, dev = google_step_deviation(
            self._step_starts.update(),
            configured if configured is not None else self.configured_ideal_step_time)
        self._goodput_cache.update_step_info(StepInfo(ideal, dev))
        return ideal, dev

    def get_job_goodput_with_exclusions(self, exclusion_intervals: Any,
                                        include_badput_breakdown: bool = False,
                                        configured_ideal_step_time: float | None = None
                                        ) -> tuple[float, dict, int, float]:
        """Goodput with the time inside ``exclusion_intervals`` removed from every bucket.

        Args:
            exclusion_intervals: list of ``(start, end)`` aware datetimes (or UTC
                seconds); overlapping ones are merged, empty ones ignored.
            include_badput_breakdown: return the breakdown too.
            configured_ideal_step_time: accepted for compatibility.

        Returns:
            ``(goodput %, breakdown, last productive step, excluded seconds)``; the
            job time minus the excluded time is the denominator.

        Example:
            >>> calc.get_job_goodput_with_exclusions([(t0, t1)])  # doctest: +SKIP

        ``Any``: this is where the caller's value is checked (anything may come in; a one-line
        error names the argument and the value).
        """
        from goodput_jax.measure.engine import merge_intervals

        if not isinstance(exclusion_intervals, (list, tuple)):
            raise TypeError(f"exclusion_intervals ({exclusion_intervals!r}) must be a list of "
                            "(start, end) pairs")
        pairs = []
        for i, pair in enumerate(exclusion_intervals):
            try:
                a, b = pair
            except (TypeError, ValueError):
                raise TypeError(f"exclusion_intervals[{i}] ({pair!r}) must be a (start, end) "
                                "pair") from None
            pairs.append((to_ts(a, f"exclusion_intervals[{i}][0]"),
                          to_ts(b, f"exclusion_intervals[{i}][1]")))
        excl = merge_intervals(pairs)
        with self._lock:
            self.refresh()
            self._require_events(self._engine)
            now = self._now()
            p_raw, acc_raw, _ = self._engine.totals(now)
            raw_total = p_raw + sum(acc_raw)
        eng = self._replay(exclusions=excl)
        productive, acc, custom = eng.totals(now)
        total = productive + sum(acc)
        last = eng.live_steps[-1] if eng.live_steps else 0
        excluded = max(raw_total - total, 0.0)
        if total <= 0:
            return 0.0, {}, last, excluded
        g = goodput_percent(productive, total)
        if not include_badput_breakdown:
            return g, {}, last, excluded
        flat = breakdown(acc, total, eng.async_data_loading())
        return g, google_breakdown(flat, custom, 100.0 / total), last, excluded

    # --------------------------------------------- Google's private helpers (adaptors)
    # kept for Google's tests and code that calls them: Google's names and signatures,
    # goodput_jax's rules (compat/__init__'s docstring)

    def _get_step_times(self, entries: list[Any]) -> dict[int, float]:
        """Google's ``_get_step_times``: ``{step: seconds to the next step's start}`` of the
        step-start entries among ``entries`` (Google's entry dicts, in record order; anything
        else, such as a ``(timestamp, entry)`` pair, is skipped as Google's helper skips it),
        by the rule of :class:`~goodput_jax.compat.step_times.StepTimes`.

        ``Any``: Google's entries, JSON-like dicts taken as they come.

        Example:
            >>> calc = GoodputCalculator("job", "goodput_job", store=":memory:")
            >>> calc._get_step_times([{"job_name": "job", "step_count": 0, "step_start_time": 1.0},
            ...                       {"job_name": "job", "step_count": 1, "step_start_time": 4.0}])
            {0: 3.0}
        """
        times = StepTimes()
        times.add(step_starts(entries))
        return times.times

    def _fetch_new_entries(self, query_time: datetime.datetime) -> list[Any]:
        """Google's ``_fetch_new_entries``: bring the calculator up to date with the store
        (:meth:`refresh`) and return the entries recorded since the last call, up to
        ``query_time``, as Google's entry dicts.

        The calculator's own totals always read the whole store (there is no separate fetch
        step here); entries after ``query_time`` are returned by a later call.

        ``Any``: Google's entries, JSON-like dicts.
        """
        t = to_ts(query_time, "query_time")
        with self._lock:
            self.refresh()
            events, self._fetch_cursor = self.store.read_events(self.job_name,
                                                                self._fetch_cursor)
            new = self._unfetched + list(events)
            self._unfetched = [ev for ev in new if ev.timestamp > t]
        return [to_entry(ev) for ev in new if ev.timestamp <= t]

    def _get_current_productive_and_unproductive_time(
            self, interval_query: bool | None = False) -> tuple[float, dict, int, int]:
        """Google's ``_get_current_productive_and_unproductive_time``: the job's (or, with
        ``interval_query``, the last :meth:`get_job_goodput_interval` window's) productive
        seconds, ``{BadputType: s}`` (custom badput as ``{TYPE: s}``, no ``OTHER``: Google
        adds it afterwards), the last productive step and the last recorded step.

        The seconds are goodput_jax's attribution (``docs/semantics.md``), the same as
        :meth:`get_job_goodput_details` reports; they are Google's where the rules agree.
        """
        if interval_query:
            eng = self._last_interval_engine
            if eng is None or eng.runs == 0:
                return 0.0, self._google_unproductive({}, {}), 0, 0
            productive, acc, custom = eng.totals(eng.last_t)
            badput = dict(zip(BUCKET_TYPES, acc, strict=True))
            badput[MeasureBadputType.DATA_LOADING_ASYNC] = eng.async_data_loading()
            last = eng.live_steps[-1] if eng.live_steps else 0
            recorded = max([last, eng.open_step, *eng.dq])
            return productive, self._google_unproductive(badput, custom), last, recorded
        try:
            d = _BaseCalculator.get_job_goodput_details(self)
        except NoEventsError:
            return 0.0, self._google_unproductive({}, {}), 0, 0
        self._step_starts.update()
        last_start = self._step_starts.last_step
        return (d["productive_time"],
                self._google_unproductive(d["badput_time"], d["custom_badput_time"]),
                d["last_productive_step"], 0 if last_start is None else last_start)

    def _google_unproductive(self, badput: dict, custom: dict[str, float]) -> dict:
        out = self._unproductive_seconds({"badput_time": badput, "custom_badput_time": custom})
        out.pop(BadputType.OTHER, None)
        return out
