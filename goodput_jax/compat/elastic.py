"""ml-goodput-measurement's elastic drop-ins (MaxText's elastic training path).

The elastic recorder, calculator and monitor, re-exported at Google's import paths
by ``goodput_jax.goodput_elastic`` (whose docstring describes what they record and
report) and ``goodput_jax.monitoring_elastic``; the attribution is rule 23 of
``docs/semantics.md``.

Example:
    >>> rec = ElasticGoodputRecorder("job", "goodput_job", False)
    >>> rec.record_elastic_slice_counts(2, 4, 3)  # disabled: a no-op
"""

from __future__ import annotations

import datetime
import os
from typing import Any

from goodput_jax.compat.calculator import GoodputCalculator
from goodput_jax.compat.entries import slice_count_records
from goodput_jax.compat.enums import BadputType
from goodput_jax.compat.monitor import GoodputMonitor
from goodput_jax.compat.options import GCPOptions, local_time, to_ts
from goodput_jax.compat.recorder import GoodputRecorder
from goodput_jax.measure.calculator import breakdown as percentages
from goodput_jax.measure.events import KIND_CODES, EventKind, TimeLike
from goodput_jax.measure.tensorboard import check_tensorboard_dir

__all__ = ["ElasticGoodputCalculator", "ElasticGoodputMonitor", "ElasticGoodputRecorder",
           "slice_efficiency"]

_ELASTIC = (BadputType.ELASTIC_SLICE_DOWN, BadputType.ELASTIC_SCALE_UP,
            BadputType.ELASTIC_REINITIALIZATION)


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} ({value!r}) must be a non-negative int")
    return value


class ElasticGoodputRecorder(GoodputRecorder):
    """:class:`goodput_jax.goodput.GoodputRecorder` plus Google's elastic events.

    Example:
        >>> ElasticGoodputRecorder("j", "goodput_j", False).record_elastic_reinit_start_time()
    """

    def record_elastic_slice_counts(self, active_slices: int, total_slices: int,
                                    available_slices: int,
                                    timestamp: TimeLike | None = None) -> None:
        """Record how many slices step, exist and are available (from ``timestamp`` on)."""
        if not self.logging_enabled:
            return
        a = _count("active_slices", active_slices)
        t_ = _count("total_slices", total_slices)
        av = _count("available_slices", available_slices)
        t = self._now() if timestamp is None else to_ts(timestamp, "timestamp")
        self._put(KIND_CODES[EventKind.ELASTIC_SLICE_COUNTS], t, None, None,
                  {"active": a, "total": t_, "available": av})

    def record_elastic_wait_start_time(self, event_type: str,
                                       start_time: TimeLike | None = None) -> None:
        """Record the start of a wait for slices (``event_type``: e.g. ``"slice_down"``,
        ``"scale_up"``)."""
        self._record(EventKind.ELASTIC_WAIT_START, local_time(start_time), "start_time",
                     label=_label(event_type))
        if self.job_started:  # RUNNING -> WAITING
            self.lifecycle.begin_wait()

    def record_elastic_wait_end_time(self, event_type: str,
                                     end_time: TimeLike | None = None) -> None:
        """Record the end of the wait of the same ``event_type``."""
        self._record(EventKind.ELASTIC_WAIT_END, local_time(end_time), "end_time",
                     label=_label(event_type))
        if self.job_started:  # WAITING -> RUNNING
            self.lifecycle.end_wait()

    def record_elastic_reinit_start_time(self, start_time: TimeLike | None = None) -> None:
        """Record the start of an elastic re-initialisation."""
        self._record(EventKind.ELASTIC_REINIT_START, local_time(start_time), "start_time")

    def record_elastic_reinit_end_time(self, end_time: TimeLike | None = None) -> None:
        """Record the end of the elastic re-initialisation."""
        self._record(EventKind.ELASTIC_REINIT_END, local_time(end_time), "end_time")


def _label(event_type: Any) -> str:
    if not isinstance(event_type, str) or not event_type:
        raise ValueError(f"event_type ({event_type!r}) must be a non-empty string")
    return event_type


def slice_efficiency(records: list[tuple[float, int, int, int]], start: float,
                     end: float) -> tuple[float, float]:
    """Time-weighted (stepping, available) slice efficiency over ``[start, end]``.

    Args:
        records: ``(time, active, available, total)`` slice counts in time order.

    Example:
        >>> slice_efficiency([(0.0, 1, 2, 2), (5.0, 2, 2, 2)], 0.0, 10.0)
        (0.75, 1.0)
    """
    if not records or end <= start:
        return 0.0, 0.0
    initial = None
    for r in records:
        if r[0] <= start:
            initial = r
    timeline = [(start, *initial[1:])] if initial is not None else []
    timeline += [r for r in records if start < r[0] < end]
    if not timeline:
        return 0.0, 0.0
    stepping = available = 0.0
    for i, (t, act, avail, total) in enumerate(timeline):
        nxt = timeline[i + 1][0] if i + 1 < len(timeline) else end
        stepping += act / total * (nxt - t)
        available += avail / total * (nxt - t)
    return stepping / (end - start), available / (end - start)


class ElasticGoodputCalculator(GoodputCalculator):
    """:class:`goodput_jax.goodput.GoodputCalculator` with the elastic buckets and efficiency.

    Example:
        >>> calc = ElasticGoodputCalculator("job", "goodput_job", store=":memory:")
    """

    # Google's private helpers, kept for Google's tests and code that calls them
    # (compat/__init__'s docstring); the elastic buckets reach Google's
    # _get_current_productive_and_unproductive_time through _unproductive_seconds
    @staticmethod
    def _extract_slice_count_entries(entries: list[dict[str, Any]]
                                     ) -> list[tuple[float, int, int, int]]:
        """Google's ``_extract_slice_count_entries``: ``(time, active, available, total)``
        of the slice-count entries (a total under 1 read as 1), in time order
        (:func:`goodput_jax.compat.entries.slice_count_records`).

        ``Any``: Google's entries, JSON-like dicts taken as they come.
        """
        return slice_count_records(entries)

    @staticmethod
    def _compute_time_weighted_efficiency(slice_records: list[tuple[float, int, int, int]],
                                          interval_start_ts: float, interval_end_ts: float
                                          ) -> tuple[float, float]:
        """Google's ``_compute_time_weighted_efficiency``: :func:`slice_efficiency`."""
        return slice_efficiency(slice_records, interval_start_ts, interval_end_ts)

    def _with_elastic(self, breakdown: dict, flat: dict) -> dict:
        if breakdown:
            for bt in _ELASTIC:
                breakdown[bt] = float(flat.get(bt.measure, 0.0))
        return breakdown

    def _unproductive_seconds(self, details: dict[str, Any]) -> dict:
        out = super()._unproductive_seconds(details)
        for bt in _ELASTIC:
            out[bt] = float(details["badput_time"].get(bt.measure, 0.0))
        return out

    def get_job_goodput(self, include_badput_breakdown: bool = False,
                        configured_ideal_step_time: float | None = None
                        ) -> tuple[float, dict, int]:
        g, breakdown, last = super().get_job_goodput(include_badput_breakdown,
                                                     configured_ideal_step_time)
        if include_badput_breakdown:
            _, flat, _ = super(GoodputCalculator, self).get_job_goodput(True)
            self._with_elastic(breakdown, flat)
        return g, breakdown, last

    # Google's signature: five values where the base calculator returns three
    def get_job_goodput_interval(  # type: ignore[override]
            self, interval_start: TimeLike, interval_end: TimeLike) -> tuple[float, dict, int,
            float, int]:
        g, breakdown, last, total, disruptions = super().get_job_goodput_interval(
            interval_start, interval_end)
        eng = self._last_interval_engine
        assert eng is not None  # set by the base's get_job_goodput_interval
        p, acc, _ = eng.totals(eng.last_t)
        tot = p + sum(acc)
        flat = percentages(acc, tot) if tot else {}
        return g, self._with_elastic(breakdown, flat), last, total, disruptions

    def get_interval_metric_details(self, interval_start: TimeLike, interval_end: TimeLike) -> dict:
        """Google's interval details plus ``stepping_slice_efficiency`` /
        ``available_slice_efficiency`` when slice counts were recorded."""
        out = super().get_interval_metric_details(interval_start, interval_end)
        a, b = to_ts(interval_start, "interval_start"), to_ts(interval_end, "interval_end")
        with self._lock:
            self.refresh()
            records = list(self._engine.slice_counts)
        if records:
            out["stepping_slice_efficiency"], out["available_slice_efficiency"] = \
                slice_efficiency(records, a, b)
        return out

    def get_job_goodput_details(self) -> dict[str, Any]:
        """The base details, the elastic buckets in ``badput_time`` and the job's slice
        efficiency (from its first event over its elapsed time).

        ``Any``: the values are JSON-like (numbers, strings, lists, nested dicts), as stored or
        uploaded.
        """
        out = super().get_job_goodput_details()
        if "badput_time" in out and "productive_time" in out:
            base = super(GoodputCalculator, self).get_job_goodput_details()
            for bt in _ELASTIC:
                out["badput_time"][bt] = base["badput_time"][bt.measure]
        with self._lock:
            records = list(self._engine.slice_counts)
            start = self._engine.first_t
        if records and start is not None:
            end = start + float(out.get("total_elapsed_time", 0.0))
            out["stepping_slice_efficiency"], out["available_slice_efficiency"] = \
                slice_efficiency(records, start, end)
        return out


class ElasticGoodputMonitor(GoodputMonitor):
    """:class:`goodput_jax.goodput.GoodputMonitor` on an :class:`ElasticGoodputCalculator`.

    Google's constructor (no ``pathway_enabled``: elastic jobs run on Pathways). The
    badput tags include ``badput/elastic_slice_down``, ``badput/elastic_scale_up`` and
    ``badput/elastic_reinitialization``; with ``include_slice_efficiency`` the tags
    ``goodput/stepping_slice_efficiency`` and ``goodput/available_slice_efficiency``
    (and the Cloud Monitoring metrics, when enabled) carry the slice efficiency.

    Example:
        >>> m = ElasticGoodputMonitor("j", "goodput_j", "/tmp/tb", 30,
        ...                           store=":memory:")            # doctest: +SKIP
    """

    elastic_tags = True

    def __init__(
        self,
        job_name: str,
        logger_name: str | None,
        tensorboard_dir: str | os.PathLike,
        upload_interval: float | None = None,
        monitoring_enabled: bool = False,
        include_badput_breakdown: bool = False,
        include_step_deviation: bool = False,
        include_slice_efficiency: bool = False,
        configured_ideal_step_time: float | None = None,
        step_deviation_interval_seconds: float | None = 10,
        gcp_options: GCPOptions | None = None,
        skip_final_flush: bool = False,
        final_flush_timeout_seconds: float | None = 30.0,
        gcs_sync_interval_seconds: int = 3600,
        cache_dir: str | os.PathLike = "/tmp",
        max_logs_retention_period: datetime.timedelta | None = None,
        **kwargs: Any,
    ):
        """``Any``: the old keyword arguments, each checked as it becomes a field of the options
        (an unknown one is a one-line TypeError).
        """
        if isinstance(tensorboard_dir, (str, os.PathLike)):  # before the store is opened
            check_tensorboard_dir(os.fspath(tensorboard_dir))
        self.include_slice_efficiency = bool(include_slice_efficiency)
        #: the store this monitor opened for its calculator (closed by :meth:`close`)
        self._own_store = None
        if kwargs.get("calculator") is None:
            from goodput_jax.measure.stores import resolve_store

            store = kwargs.pop("store", None)
            resolved = resolve_store(store)
            if store is None or isinstance(store, str):
                self._own_store = resolved
            kwargs["calculator"] = ElasticGoodputCalculator(
                job_name, logger_name, using_pathways=True,
                max_logs_retention_period=max_logs_retention_period,
                store=resolved, clock=kwargs.get("clock"),
                configured_ideal_step_time=configured_ideal_step_time)
        try:
            super().__init__(
                job_name, logger_name, tensorboard_dir, upload_interval, monitoring_enabled,
                True, include_badput_breakdown, include_step_deviation,
                configured_ideal_step_time, step_deviation_interval_seconds, gcp_options,
                skip_final_flush, final_flush_timeout_seconds, gcs_sync_interval_seconds,
                cache_dir, max_logs_retention_period, **kwargs)
        except BaseException:
            self._close_own_store()
            raise

    def _close_own_store(self) -> None:
        store, self._own_store = self._own_store, None
        if store is not None:
            store.close()

    def close(self, timeout: float | None = None) -> bool:
        """Stop every uploader and close the event file (as the base monitor), then the
        store this monitor opened, if every final upload completed. Idempotent."""
        ok = super().close(timeout)
        if ok:
            self._close_own_store()
        return ok

    def upload_goodput(self) -> dict[str, float]:
        values = super().upload_goodput()
        if values and self.include_slice_efficiency:
            d = self.calculator.get_job_goodput_details()
            extra = {f"goodput/{k}": float(d[k]) for k in
                     ("stepping_slice_efficiency", "available_slice_efficiency") if k in d}
            if extra:
                self.write_scalars(int(d.get("last_productive_step", 0)), extra)
                values.update(extra)
        return values
