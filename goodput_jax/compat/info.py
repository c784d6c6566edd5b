"""ml-goodput-measurement's result shapes: ``GoodputInfo``, ``StepInfo``, the metric-details
``TypedDict``\\ s and ``MonitoringWindowType``, as its ``goodput_utils`` defines them.

``GoodputCalculator._goodput_cache`` (Google's calculator keeps its last result there, and
Google's own tests read it) is a :class:`LastResult` here: the last result the calculator
computed, in these shapes, in memory (goodput_jax keeps no on-disk cache to sync).

Example:
    >>> info = GoodputInfo(total_productive_time=12.0, total_elapsed_time=20.0)
    >>> info.total_productive_time, info.total_unproductive_time
    (12.0, {})
    >>> MonitoringWindowType.INTERVAL.value
    'interval'
"""

from __future__ import annotations

import datetime
import enum
import threading
from typing import TypedDict

from goodput_jax.compat.enums import BadputType, GoodputType

__all__ = [
    "ElasticIntervalWorkloadMetricDetails",
    "ElasticWorkloadMetricDetails",
    "GoodputInfo",
    "IntervalWorkloadMetricDetails",
    "LastResult",
    "MonitoringWindowType",
    "StepInfo",
    "WorkloadMetricDetails",
]


class WorkloadMetricDetails(TypedDict):
    """Google's cumulative metric details (``GoodputCalculator.get_job_goodput_details``)."""

    goodput_time: dict[GoodputType, float]
    badput_time: dict[BadputType, float | dict[str, float]]
    max_productive_step: int
    total_elapsed_time: float
    disruption_count: int
    step_time_deviation: dict[int, float]
    ideal_step_time: float
    total_excluded_time: float


class IntervalWorkloadMetricDetails(TypedDict):
    """Google's interval metric details (``get_interval_metric_details``)."""

    interval_goodput: dict[GoodputType, float]
    interval_badput: dict[BadputType, float | dict[str, float]]
    interval_size: int  # seconds


class ElasticWorkloadMetricDetails(WorkloadMetricDetails, total=False):
    """:class:`WorkloadMetricDetails` with the elastic calculator's slice efficiencies."""

    stepping_slice_efficiency: float
    available_slice_efficiency: float


class ElasticIntervalWorkloadMetricDetails(IntervalWorkloadMetricDetails, total=False):
    """:class:`IntervalWorkloadMetricDetails` with the slice efficiencies."""

    stepping_slice_efficiency: float
    available_slice_efficiency: float


class MonitoringWindowType(enum.Enum):
    """Google's monitoring window: the whole job or the recent interval."""

    CUMULATIVE = "cumulative"
    INTERVAL = "interval"


class GoodputInfo:
    """Google's goodput information: seconds, per bucket, at ``last_updated_timestamp``.

    Args and attributes as in ml-goodput-measurement (``total_unproductive_time`` is
    ``{BadputType: s}``, custom badput as ``{TYPE: s}``).

    Example:
        >>> GoodputInfo(number_of_disruptions=1).number_of_disruptions
        1
    """

    def __init__(self, total_productive_time: float = 0.0, total_elapsed_time: float = 0.0,
                 total_unproductive_time: dict[BadputType, float | dict[str, float]]
                 | None = None,
                 max_productive_step: int = 0, last_recorded_step: int = 0,
                 last_updated_timestamp: datetime.datetime | None = None,
                 number_of_disruptions: int = 0, total_excluded_time: float = 0.0):
        self.total_productive_time = total_productive_time
        self.total_elapsed_time = total_elapsed_time
        self.total_unproductive_time = total_unproductive_time or {}
        self.max_productive_step = max_productive_step
        self.last_recorded_step = last_recorded_step
        # Google's default is evaluated once, at import; "now" is what it means
        self.last_updated_timestamp = (last_updated_timestamp if last_updated_timestamp
                                       is not None else datetime.datetime.now(datetime.UTC))
        self.number_of_disruptions = number_of_disruptions
        self.total_excluded_time = total_excluded_time

    def __repr__(self) -> str:
        return (f"GoodputInfo(total_productive_time={self.total_productive_time!r}, "
                f"total_elapsed_time={self.total_elapsed_time!r}, "
                f"max_productive_step={self.max_productive_step!r}, "
                f"number_of_disruptions={self.number_of_disruptions!r})")


class StepInfo:
    """Google's step information: the ideal step time and ``{step: deviation}`` (s).

    Example:
        >>> StepInfo(2.0, {0: 0.5}).step_deviations
        {0: 0.5}
    """

    def __init__(self, ideal_step_time: float, step_deviations: dict[int, float]):
        self.ideal_step_time = ideal_step_time
        self.step_deviations = step_deviations


class LastResult:
    """The last result a drop-in calculator computed, read the way Google's tests read its
    calculator's ``_goodput_cache`` (``get_goodput_info()``, ``get_step_info()``).

    It holds what the calculator returned, in Google's shapes; it is not a second
    computation and it persists nothing (Google's ``cache_dir`` and ``gcs_path`` are
    accepted and unused: the calculator is incremental in memory).

    Example:
        >>> last = LastResult()
        >>> last.get_goodput_info() is None, last.is_cache_empty()
        (True, True)
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._goodput: GoodputInfo | None = None
        self._step: StepInfo | None = None

    def update_goodput_info(self, info: GoodputInfo) -> None:
        """Keep ``info`` as the last goodput result."""
        with self._lock:
            self._goodput = info

    def update_step_info(self, info: StepInfo) -> None:
        """Keep ``info`` as the last step-deviation result."""
        with self._lock:
            self._step = info

    def get_goodput_info(self) -> GoodputInfo | None:
        """The last goodput result (None before the first query)."""
        with self._lock:
            return self._goodput

    def get_step_info(self) -> StepInfo | None:
        """The last step-deviation result (None before the first query)."""
        with self._lock:
            return self._step

    def is_cache_empty(self) -> bool:
        """Whether nothing was computed yet."""
        with self._lock:
            return self._goodput is None and self._step is None
