"""What a :class:`~goodput_jax.measure.monitor.GoodputMonitor` reads of its calculator.

:class:`MonitoredCalculator` is the contract between the monitor and the calculator room:
the members the monitor (and the Cloud Monitoring exporter it sends with) calls, and
nothing else. It is ``runtime_checkable``: a calculator handed to the monitor that lacks a
member fails at the monitor's construction with one line naming what is missing
(:func:`check_calculator`), never in an uploader thread later.

:class:`~goodput_jax.measure.calculator.GoodputCalculator` (the monitor's default) and
the drop-in ``goodput_jax.goodput.GoodputCalculator`` satisfy it: both give the step
statistics as ``get_step_statistics`` (the drop-in keeps Google's ``get_step_deviation``
dict).

Example:
    >>> calc = GoodputCalculator("job", store=":memory:")
    >>> isinstance(calc, MonitoredCalculator)
    True
    >>> check_calculator(object())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    TypeError: calculator (object) lacks store, get_job_goodput, ...
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from goodput_jax.measure.calculator import GoodputCalculator, StepDeviation  # noqa: F401
from goodput_jax.measure.events import TimeLike

if TYPE_CHECKING:
    import numpy as np

    from goodput_jax.measure.productivity import ProductivityGoodput
    from goodput_jax.measure.stores import EventStore
    from goodput_jax.measure.stragglers import Stragglers

__all__ = ["MONITORED_MEMBERS", "MonitoredCalculator", "check_calculator"]


@runtime_checkable
class MonitoredCalculator(Protocol):
    """The calculator as the monitor reads it (thread-safe; every call may come from an
    uploader thread).

    ``goodput_jax.measure.calculator.GoodputCalculator`` (the monitor's default),
    ``goodput_jax.goodput.GoodputCalculator`` and the elastic drop-in satisfy it.
    """

    @property
    def store(self) -> EventStore:
        """The event store the calculator reads (the hang check reads the step times
        from it with its own cursor; a monitor that opened the store closes it)."""
        ...

    def get_job_goodput(self, include_badput_breakdown: bool = False
                        ) -> tuple[float, Mapping[Any, Any], int]:
        """``(goodput %, {BadputType: % or {label: %}}, last productive step)``.

        ``Any``: the breakdown's keys are the measure room's or Google's BadputType (the drop-
        ins' calculators are monitored too).
        """
        ...

    def get_job_goodput_details(self) -> dict[str, Any]:
        """Seconds: ``productive_time``, ``total_time``, ``custom_badput_time`` ...

        ``Any``: the values are JSON-like (numbers, strings, lists, nested dicts), as stored or
        uploaded.
        """
        ...

    def get_job_goodput_interval(self, interval_start: TimeLike, interval_end: TimeLike
                                 ) -> tuple[Any, ...]:
        """``(goodput %, badput, last productive step, ...)`` within the interval.

        ``Any``: the base calculator returns three values, Google's drop-in five.
        """
        ...

    def get_latest_hints(self) -> dict[str, Any] | None:
        """The latest hints' JSON payload, or None.

        ``Any``: the values are JSON-like (numbers, strings, lists, nested dicts), as stored or
        uploaded.
        """
        ...

    def get_productivity_goodput(self, *, now: TimeLike | None = None) -> ProductivityGoodput:
        """ML Productivity Goodput now (the ``productivity/*`` tags)."""
        ...

    def get_step_stragglers(self, since: TimeLike | None = None) -> Stragglers:
        """The slowest hosts since ``since`` (the ``stragglers/*`` tags)."""
        ...

    def get_step_statistics(self, configured_ideal_step_time: float | None = None
                            ) -> StepDeviation:
        """Step-time statistics (the ``step_time/*`` tags)."""
        ...

    def new_step_times(self, token: tuple[int, int] | None = None
                       ) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
        """Steps completed (or redone) since ``token``: ``(steps, seconds, token)``."""
        ...


#: the members of :class:`MonitoredCalculator`, in the order the message names them
MONITORED_MEMBERS: tuple[str, ...] = (
    "store", "get_job_goodput", "get_job_goodput_details", "get_job_goodput_interval",
    "get_latest_hints", "get_productivity_goodput", "get_step_stragglers",
    "get_step_statistics", "new_step_times",
)


def check_calculator(calculator: object) -> MonitoredCalculator:
    """``calculator`` if it is a :class:`MonitoredCalculator`.

    Raises:
        TypeError: one line naming the calculator's type and every member it lacks.

    Example:
        >>> check_calculator(GoodputCalculator("job", store=":memory:")).job_name
        'job'
    """
    if isinstance(calculator, MonitoredCalculator):
        return calculator
    missing = [m for m in MONITORED_MEMBERS if not hasattr(calculator, m)]
    raise TypeError(f"calculator ({type(calculator).__name__}) lacks {', '.join(missing)}: "
                    "a GoodputMonitor reads a MonitoredCalculator "
                    "(goodput_jax.measure.monitor_calculator)")
