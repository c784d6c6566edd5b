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
    "recorder_options",
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

    ``Any``: this is where the caller's value is checked (anything may come in; a one-line error
    names the argument and the value).
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

    ``Any``: this is where the caller's value is checked (anything may come in; a one-line error
    names the argument and the value).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not float(value) > 0:
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

    ``Any``: this is where the caller's value is checked (anything may come in; a one-line error
    names the argument and the value).
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

    ``Any``: Google's or MaxText's objects (a ``google.cloud.logging`` logger, a MaxText config,
    an orbax manager) from libraries without type information, duck-typed as their code does.
    """
    if cloud_logger is None:
        return store
    if store is not None:
        raise ValueError(
            f"give cloud_logger ({cloud_logger!r}) or store ({store!r}), not both"
        )
    from goodput_jax.measure.stores.cloud_logger import CloudLoggerStore

    return CloudLoggerStore(cloud_logger)


def recorder_options(*, enabled: bool, cloud_logger: Any, background_grace_period_s: Any,
                     background_batch_size: Any, background_max_latency_s: Any,
                     extras: dict[str, Any]) -> tuple[Any, Any, float]:
    """THE translation of Google's recorder arguments into goodput_jax's: ``(store,
    RecorderOptions, grace period)``.

    ``background_max_latency_s`` is the writer's ``flush_interval`` (unless ``extras``
    sets one); a ``cloud_logger`` (on an enabled recorder) becomes a
    ``CloudLoggerStore`` written synchronously, so a read right after a ``record_*``
    sees it, as with Google's recorder; ``background_batch_size`` is validated and
    accepted (the store writes what the writer hands it); ``extras`` are the base
    recorder's own keywords (``store``, ``options`` and the ``RecorderOptions`` fields).

    Raises:
        ValueError / TypeError: naming the argument and value.

    Example:
        >>> store, opts, grace = recorder_options(
        ...     enabled=True, cloud_logger=None, background_grace_period_s=5.0,
        ...     background_batch_size=100, background_max_latency_s=2.0, extras={})
        >>> store, opts.flush_interval, grace
        (None, 2.0, 5.0)

    ``Any``: Google's or MaxText's objects (a ``google.cloud.logging`` logger, a MaxText config,
    an orbax manager) from libraries without type information, duck-typed as their code does.
    """
    from goodput_jax.measure.options import RecorderOptions

    grace = check_positive("background_grace_period_s", background_grace_period_s)
    if isinstance(background_batch_size, bool) or not isinstance(background_batch_size, int) \
            or background_batch_size <= 0:
        raise ValueError(
            f"background_batch_size ({background_batch_size!r}) must be a positive int")
    keywords = dict(extras)
    store = keywords.pop("store", None)
    options = keywords.pop("options", None)
    keywords.setdefault("flush_interval", check_positive(
        "background_max_latency_s", background_max_latency_s))
    if cloud_logger is not None and enabled:
        store = cloud_logger_store(cloud_logger, store)
        keywords.setdefault("synchronous", True)
    return store, RecorderOptions.merged(options, keywords), grace
