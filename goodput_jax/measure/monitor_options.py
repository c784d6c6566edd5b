"""The monitor's options: one frozen dataclass, validated once, one-line errors.

:class:`MonitorOptions` holds every setting of a
:class:`~goodput_jax.measure.monitor.GoodputMonitor` (what to upload, how often, the hang
check, the straggler tags); the monitor's constructor takes it as ``options=``.
:func:`monitor_options` is the one place where the constructor's keywords (the earlier
constructor's, kept working) become options.

Example:
    >>> MonitorOptions(upload_interval=60, hang_threshold_seconds=600).upload_interval
    60.0
    >>> MonitorOptions(upload_interval=0)
    Traceback (most recent call last):
    ValueError: upload_interval (0) must be a positive finite number of seconds
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, Generic, Literal, TypedDict, TypeVar, overload

__all__ = ["MonitorKeywords", "MonitorOptions", "OptionField", "check_windows",
           "monitor_options", "nonnegative_seconds", "positive_seconds"]

_T = TypeVar("_T")


def positive_seconds(name: str, value: Any) -> float:
    """``value`` as positive finite seconds.

    Raises:
        TypeError, ValueError: one line naming ``name`` and the value.

    Example:
        >>> positive_seconds("upload_interval", 30)
        30.0

    ``Any``: this is where the caller's value is checked (anything may come in; a one-line error
    names the argument and the value).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} ({value!r}) must be a positive number of seconds")
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} ({value!r}) must be a positive finite number of seconds")
    return v


def nonnegative_seconds(name: str, value: Any) -> float:
    """``value`` as finite seconds >= 0.

    Raises:
        TypeError, ValueError: one line naming ``name`` and the value.

    Example:
        >>> nonnegative_seconds("stop_timeout", 0)
        0.0

    ``Any``: this is where the caller's value is checked (anything may come in; a one-line error
    names the argument and the value).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} ({value!r}) must be a number of seconds")
    v = float(value)
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"{name} ({value!r}) must be a finite number of seconds >= 0")
    return v


def check_windows(window_seconds: Any) -> tuple[float, ...]:
    """Rolling windows as sorted unique positive seconds (one number or a list).

    Raises:
        TypeError, ValueError: naming ``window_seconds`` and the value.

    Example:
        >>> check_windows([900, 60, 60])
        (60.0, 900.0)

    ``Any``: this is where the caller's value is checked (anything may come in; a one-line error
    names the argument and the value).
    """
    if isinstance(window_seconds, (str, bytes)):
        raise TypeError(f"window_seconds ({window_seconds!r}) must be a number or a list of "
                        "numbers")
    if isinstance(window_seconds, numbers.Real):
        items = [window_seconds]
    else:
        try:
            items = list(window_seconds)
        except TypeError:
            raise TypeError(f"window_seconds ({window_seconds!r}) must be a number or a list "
                            "of numbers") from None
    if not items:
        raise ValueError("window_seconds ([]) must name at least one window")
    return tuple(sorted({positive_seconds("window_seconds", w) for w in items}))


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        # ValueError, as the monitor has always raised it (test_productivity_monitor)
        raise ValueError(f"{name} ({value!r}) must be True or False")  # noqa: TRY004
    return value


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} ({value!r}) must be a non-negative int")
    return value


@dataclasses.dataclass(frozen=True, kw_only=True)
class MonitorOptions:
    """Settings of a :class:`~goodput_jax.measure.monitor.GoodputMonitor`.

    Attributes:
        upload_interval: seconds between uploads (> 0).
        monitoring_enabled: if False every ``start_*`` is a no-op (only one worker of a
            multi-host job should monitor, e.g. process 0).
        badput_tags: write the ``badput/<type>`` and ``badput/custom/<label>`` tags (and
            ``goodput/productive_time``, ``goodput/total_time``). The drop-in
            ``goodput_jax.monitoring.GoodputMonitor`` takes Google's
            ``include_badput_breakdown`` (default False) and sets this from it.
        include_step_deviation: also write the ``step_time/*`` summary tags from the
            goodput uploader.
        configured_ideal_step_time: ideal step time (s) for the step deviation; None =
            robust estimate.
        step_deviation_interval_seconds: interval of the step-deviation uploader; None =
            ``upload_interval``.
        stop_timeout: default seconds a ``stop_*`` waits for its thread.
        max_deviation_points: at most this many new per-step deviations are written per
            upload (the newest).
        tag_layout: ``"goodput_jax"`` or ``"reference"`` (ml-goodput-measurement's layout
            in ``<tensorboard_dir>/goodput/``; ``docs/tensorboard_tags.md``).
        hang_threshold_seconds: past this long without a step (and before the job's end)
            the job is reported hung (``hang/hung``); None = ``hang/seconds_since_last_step``
            only.
        straggler_window_seconds: the ``stragglers/*`` tags cover the steps of the last
            this many seconds (None = the whole job).
        straggler_top: how many of the slowest hosts get their own tags and series.
        straggler_log_every: the slowest host is logged when it changes, else at most
            once every this many goodput uploads (0: only when it changes).
        include_productivity: each goodput upload also writes the ``productivity/*`` tags.
        send_productivity_metrics: with Cloud Monitoring on (the drop-in monitor), also
            send them as ``custom.googleapis.com/goodput_jax/*`` metrics.

    Raises:
        TypeError, ValueError: at construction, one line naming the field and its value.

    Example:
        >>> o = MonitorOptions(upload_interval=10)
        >>> o.step_interval, o.badput_tags
        (10.0, True)
    """

    upload_interval: float = 30.0
    monitoring_enabled: bool = False
    badput_tags: bool = True
    include_step_deviation: bool = True
    configured_ideal_step_time: float | None = None
    step_deviation_interval_seconds: float | None = None
    stop_timeout: float = 10.0
    max_deviation_points: int = 10_000
    tag_layout: Literal["goodput_jax", "reference"] = "goodput_jax"
    hang_threshold_seconds: float | None = None
    straggler_window_seconds: float | None = 3600.0
    straggler_top: int = 3
    straggler_log_every: int = 20
    include_productivity: bool = True
    send_productivity_metrics: bool = False

    def __post_init__(self) -> None:
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        put("upload_interval", positive_seconds("upload_interval", self.upload_interval))
        for name in ("step_deviation_interval_seconds", "hang_threshold_seconds",
                     "straggler_window_seconds", "configured_ideal_step_time"):
            v = getattr(self, name)
            if v is not None:
                put(name, positive_seconds(name, v))
        put("stop_timeout", nonnegative_seconds("stop_timeout", self.stop_timeout))
        for name in ("monitoring_enabled", "badput_tags", "include_step_deviation",
                     "include_productivity", "send_productivity_metrics"):
            _flag(name, getattr(self, name))
        for name in ("max_deviation_points", "straggler_top", "straggler_log_every"):
            _count(name, getattr(self, name))
        if self.tag_layout not in ("goodput_jax", "reference"):
            raise ValueError(f"tag_layout ({self.tag_layout!r}) must be 'goodput_jax' or "
                             "'reference'")

    @property
    def step_interval(self) -> float:
        """Seconds between step-deviation uploads (``step_deviation_interval_seconds``,
        else ``upload_interval``)."""
        if self.step_deviation_interval_seconds is None:
            return self.upload_interval
        return self.step_deviation_interval_seconds


class MonitorKeywords(TypedDict, total=False):
    """The :class:`MonitorOptions` fields a ``GoodputMonitor(...)`` call may give as
    keywords (``upload_interval`` and ``monitoring_enabled`` are its positional
    parameters)."""

    badput_tags: bool
    include_step_deviation: bool
    configured_ideal_step_time: float | None
    step_deviation_interval_seconds: float | None
    stop_timeout: float
    max_deviation_points: int
    tag_layout: Literal["goodput_jax", "reference"]
    hang_threshold_seconds: float | None
    straggler_window_seconds: float | None
    straggler_top: int
    straggler_log_every: int
    include_productivity: bool
    send_productivity_metrics: bool


#: names the base monitor no longer takes, and what to give instead (one-line errors)
_RENAMED = {
    "include_badput_breakdown": "this GoodputMonitor's name for it is badput_tags (default "
                                "True); include_badput_breakdown (default False) is Google's, "
                                "taken by goodput_jax.monitoring.GoodputMonitor",
    "pathway_enabled": "it is Google's argument, taken (and ignored) by "
                       "goodput_jax.monitoring.GoodputMonitor",
}


def monitor_options(options: MonitorOptions | None, *, upload_interval: Any = None,
                    monitoring_enabled: Any = None, **keywords: Any) -> MonitorOptions:
    """``options`` (default :class:`MonitorOptions`) with the fields given as keywords
    replaced: the one place a constructor's keywords become options.

    A field given both in ``options`` and as a keyword must agree.

    Raises:
        TypeError: an unknown keyword (one line, naming it); ValueError: a keyword that
            disagrees with ``options``, or a field's value (from :class:`MonitorOptions`).

    Example:
        >>> monitor_options(None, upload_interval=5, hang_threshold_seconds=60).upload_interval
        5.0

    ``Any``: the old keyword arguments, each checked as it becomes a field of the options (an
    unknown one is a one-line TypeError).
    """
    if options is not None and not isinstance(options, MonitorOptions):
        raise TypeError(f"options ({options!r}) must be a MonitorOptions")
    fields = {f.name for f in dataclasses.fields(MonitorOptions)}
    given = {k: v for k, v in (("upload_interval", upload_interval),
                               ("monitoring_enabled", monitoring_enabled)) if v is not None}
    for name, value in keywords.items():
        if name in _RENAMED:
            raise TypeError(f"GoodputMonitor() got {name}={value!r}: {_RENAMED[name]}")
        if name not in fields:
            raise TypeError(f"GoodputMonitor() got an unexpected keyword argument {name!r}")
        given[name] = value
    if options is None:
        return MonitorOptions(**given)
    for name, value in given.items():
        mine = getattr(options, name)
        if value != mine:
            default = next(f.default for f in dataclasses.fields(MonitorOptions)
                           if f.name == name)
            if mine != default:
                raise ValueError(f"{name} ({value!r}) and options.{name} ({mine!r}) disagree; "
                                 "give one of them")
    return dataclasses.replace(options, **given) if given else options


class OptionField(Generic[_T]):
    """A class attribute that reads the same-named field of its instance's ``options``
    (read-only): ``GoodputMonitor.upload_interval`` is ``monitor.options.upload_interval``.

    Example:
        >>> class M:
        ...     upload_interval = OptionField[float]()
        ...     def __init__(self): self.options = MonitorOptions(upload_interval=5)
        >>> M().upload_interval
        5.0
    """

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> OptionField[_T]: ...

    @overload
    def __get__(self, obj: object, owner: type | None = None) -> _T: ...

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        if obj is None:
            return self
        return getattr(obj.options, self.name)  # type: ignore[attr-defined]

    def __set__(self, obj: object, value: _T) -> None:
        raise AttributeError(f"{self.name} is read-only: it is options.{self.name} "
                             "(MonitorOptions are frozen)")
