"""``GCPOptions`` and the argument checks the drop-ins share.

The drop-ins log as ``goodput_jax.goodput`` (:data:`LOGGER_NAME`), the module
they lived in, so a logging configuration naming it keeps working.

Example:
    >>> GCPOptions().replica_id, check_flag("monitor_goodput", None)
    ('0', None)
"""

from __future__ import annotations

import dataclasses
import datetime
import numbers
from typing import Any

__all__ = [
    "LOGGER_NAME",
    "GCPOptions",
    "check_flag",
    "check_positive",
    "cloud_logger_store",
    "to_ts",
]

#: the logger the drop-ins write to
LOGGER_NAME = "goodput_jax.goodput"


@dataclasses.dataclass
class GCPOptions:
    """Google Cloud Monitoring options (Google's ``GCPOptions``, every field).

    With ``enable_gcp_goodput_metrics`` / ``enable_gcp_step_deviation_metrics``
    and a ``project_id``, :class:`GoodputMonitor` sends goodput, badput and step
    deviation as Cloud Monitoring time series (``goodput_jax.measure.cloud_monitoring``,
    needs the ``gcp`` extra).
    """

    project_id: str | None = None
    location: str | None = None
    replica_id: str = "0"
    acc_type: str | None = None
    cluster_name: str | None = None
    enable_gcp_goodput_metrics: bool = True
    enable_gcp_step_deviation_metrics: bool = True


def check_flag(name: str, value: Any) -> bool | None:
    """An optional bool flag (``None`` = not given); ints count as bools, as in MaxText.

    Raises:
        TypeError: naming ``name`` and the value when it is neither.

    Example:
        >>> check_flag("monitor_goodput", 1), check_flag("monitor_goodput", False)
        (True, False)
    """
    if value is None:
        return None
    if not isinstance(value, (bool, numbers.Integral)):
        raise TypeError(f"{name} ({value!r}) must be a bool")
    return bool(value)


def check_positive(name: str, value: Any) -> float:
    """A positive real number as a float.

    Raises:
        ValueError: naming ``name`` and the value.

    Example:
        >>> check_positive("background_max_latency_s", 2)
        2.0
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
        raise ValueError(f"{name} ({value!r}) must be a positive number")
    return float(value)


def local_time(value: Any) -> Any:
    """A naive datetime read as local time, as Google's library reads it
    (``datetime.timestamp()``); anything else unchanged.

    Example:
        >>> import datetime
        >>> naive = datetime.datetime(2024, 1, 1, 12, 0)
        >>> local_time(naive).timestamp() == naive.timestamp()
        True
        >>> local_time(5.0)
        5.0
    """
    if isinstance(value, datetime.datetime) and (
            value.tzinfo is None or value.tzinfo.utcoffset(value) is None):
        return value.astimezone()  # a naive datetime is local time
    return value


def to_ts(value: Any, name: str) -> float:
    """UTC seconds from a datetime (a naive one as local time, as Google's library) or a
    number (``goodput_jax.measure.events.to_timestamp``).

    Example:
        >>> import datetime
        >>> to_timestamp = to_ts(datetime.datetime(1970, 1, 1, 0, 1, tzinfo=datetime.UTC), "t")
        >>> to_timestamp
        60.0
    """
    from goodput_jax.measure.events import to_timestamp

    return to_timestamp(local_time(value), name=name)


def cloud_logger_store(cloud_logger: Any, store: Any) -> Any:
    """The store for Google's ``cloud_logger=`` seam: a ``CloudLoggerStore`` over it, or
    ``store`` when no cloud logger is given.

    Raises:
        ValueError: both were given.

    Example:
        >>> cloud_logger_store(None, ":memory:")
        ':memory:'
    """
    if cloud_logger is None:
        return store
    if store is not None:
        raise ValueError(
            f"give cloud_logger ({cloud_logger!r}) or store ({store!r}), not both"
        )
    from goodput_jax.measure.stores.cloud_logger import CloudLoggerStore

    return CloudLoggerStore(cloud_logger)
