"""Drop-in for ``ml_goodput_measurement.goodput_elastic`` (MaxText's elastic training path).

The elastic recorder adds slice counts, waits for slices and re-initialisation
to the goodput recorder; the elastic calculator reports them as the
``ELASTIC_SLICE_DOWN`` / ``ELASTIC_SCALE_UP`` (a wait whose event type contains
``scale_up``) and ``ELASTIC_REINITIALIZATION`` badput buckets, with
accelerator-initialisation and training-preparation time inside a
re-initialisation counted as re-initialisation, and the time-weighted
``stepping_slice_efficiency`` / ``available_slice_efficiency``.

Example:
    >>> from goodput_jax import goodput_elastic
    >>> rec = goodput_elastic.ElasticGoodputRecorder("job", "goodput_job", False)
    >>> rec.record_elastic_slice_counts(2, 4, 3)  # disabled: a no-op
"""

from __future__ import annotations

from typing import Any

from goodput_jax.goodput import (
    BadputType,
    GoodputCalculator,
    GoodputRecorder,
    _to_ts,
)
from goodput_jax.measure.events import EventKind

__all__ = ["ElasticGoodputCalculator", "ElasticGoodputRecorder", "GoodputRecorder",
           "slice_efficiency"]

# Google's entry keys (its tests import them from the module).
_JOB_NAME = "job_name"
_ACTIVE_SLICES = "active_slices"
_TOTAL_SLICES = "total_slices"
_AVAILABLE_SLICES = "available_slices"
_ELASTIC_SLICE_COUNTS_TIMESTAMP = "elastic_slice_counts_timestamp"
_ELASTIC_WAIT_EVENT_TYPE = "elastic_wait_event_type"
_ELASTIC_WAIT_START_TIME = "elastic_wait_start_time"
_ELASTIC_WAIT_END_TIME = "elastic_wait_end_time"
_ELASTIC_REINIT_START_TIME = "elastic_reinit_start_time"
_ELASTIC_REINIT_END_TIME = "elastic_reinit_end_time"

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
                                    available_slices: int, timestamp: Any = None) -> None:
        """Record how many slices step, exist and are available (from ``timestamp`` on)."""
        if not self.logging_enabled:
            return
        a = _count("active_slices", active_slices)
        t_ = _count("total_slices", total_slices)
        av = _count("available_slices", available_slices)
        t = self._now() if timestamp is None else _to_ts(timestamp, "timestamp")
        from goodput_jax.measure.events import KIND_CODES

        self._put(KIND_CODES[EventKind.ELASTIC_SLICE_COUNTS], t, None, None,
                  {"active": a, "total": t_, "available": av})

    def record_elastic_wait_start_time(self, event_type: str, start_time: Any = None) -> None:
        """Record the start of a wait for slices (``event_type``: e.g. ``"slice_down"``,
        ``"scale_up"``)."""
        self._record(EventKind.ELASTIC_WAIT_START, start_time, "start_time",
                     label=_label(event_type))

    def record_elastic_wait_end_time(self, event_type: str, end_time: Any = None) -> None:
        """Record the end of the wait of the same ``event_type``."""
        self._record(EventKind.ELASTIC_WAIT_END, end_time, "end_time", label=_label(event_type))

    def record_elastic_reinit_start_time(self, start_time: Any = None) -> None:
        """Record the start of an elastic re-initialisation."""
        self._record(EventKind.ELASTIC_REINIT_START, start_time, "start_time")

    def record_elastic_reinit_end_time(self, end_time: Any = None) -> None:
        """Record the end of the elastic re-initialisation."""
        self._record(EventKind.ELASTIC_REINIT_END, end_time, "end_time")


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

    def _with_elastic(self, breakdown: dict, flat: dict) -> dict:
        if breakdown:
            for bt in _ELASTIC:
                breakdown[bt] = float(flat.get(bt, 0.0))
        return breakdown

    def get_job_goodput(self, include_badput_breakdown: bool = False,
                        configured_ideal_step_time: float | None = None):
        g, breakdown, last = super().get_job_goodput(include_badput_breakdown,
                                                     configured_ideal_step_time)
        if include_badput_breakdown:
            _, flat, _ = super(GoodputCalculator, self).get_job_goodput(True)
            self._with_elastic(breakdown, flat)
        return g, breakdown, last

    def get_job_goodput_interval(self, interval_start: Any, interval_end: Any):
        g, breakdown, last, total, disruptions = super().get_job_goodput_interval(
            interval_start, interval_end)
        eng = self._last_interval_engine
        p, acc, _ = eng.totals(eng.last_t)
        tot = p + sum(acc)
        from goodput_jax.measure.calculator import breakdown as percentages

        flat = percentages(acc, tot) if tot else {}
        return g, self._with_elastic(breakdown, flat), last, total, disruptions

    def get_interval_metric_details(self, interval_start: Any, interval_end: Any) -> dict:
        """Google's interval details plus ``stepping_slice_efficiency`` /
        ``available_slice_efficiency`` when slice counts were recorded."""
        out = super().get_interval_metric_details(interval_start, interval_end)
        a, b = _to_ts(interval_start, "interval_start"), _to_ts(interval_end, "interval_end")
        with self._lock:
            self.refresh()
            records = list(self._engine.slice_counts)
        if records:
            out["stepping_slice_efficiency"], out["available_slice_efficiency"] = \
                slice_efficiency(records, a, b)
        return out

    def get_job_goodput_details(self) -> dict[str, Any]:
        """The base details, the elastic buckets in ``badput_time`` and the job's slice
        efficiency (from its first event over its elapsed time)."""
        out = super().get_job_goodput_details()
        if "badput_time" in out and "productive_time" in out:
            base = super(GoodputCalculator, self).get_job_goodput_details()
            for bt in _ELASTIC:
                out["badput_time"][bt] = base["badput_time"][bt]
        with self._lock:
            records = list(self._engine.slice_counts)
            start = self._engine.first_t
        if records and start is not None:
            end = start + float(out.get("total_elapsed_time", 0.0))
            out["stepping_slice_efficiency"], out["available_slice_efficiency"] = \
                slice_efficiency(records, start, end)
        return out


