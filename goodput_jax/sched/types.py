"""Job and node descriptions consumed by the Pollux scheduling policy.

The constructor signatures follow AdaptDL's ``adaptdl_sched.policy.utils``
so code written against AdaptDL can switch by changing one import.

Example:
    >>> from datetime import datetime
    >>> job = JobInfo({"gpu": 1}, lambda n, r: r, datetime(2024, 1, 1), 0, 4)
    >>> job.max_replicas, job.preemptible
    (4, True)
    >>> NodeInfo({"gpu": 4, "cpu": 16000}, preemptible=False).resources["gpu"]
    4
    >>> NodeInfo({"gpu": 8}, preemptible=False, accelerator_type="a100").accelerator_type
    'a100'
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable, Hashable, Mapping
from datetime import datetime
from typing import Any, TypeVar

__all__ = ["CreationTimestamp", "JobInfo", "JobKey", "JobOptions", "NodeInfo", "NodeKey",
           "realloc_factor", "timestamp_seconds"]

#: A job's creation time: a ``datetime`` or POSIX seconds, or a 1-tuple of either (AdaptDL).
CreationTimestamp = datetime | float | tuple[datetime | float]

#: The type of a policy's job keys (any hashable: a name, an int, a tuple).
JobKey = TypeVar("JobKey", bound=Hashable)
#: The type of a policy's node keys.
NodeKey = TypeVar("NodeKey", bound=Hashable)


def _check_resources(resources: Any, owner: str) -> dict:
    if not isinstance(resources, Mapping):
        raise TypeError(f"{owner}: resources must be a mapping of resource name to amount, "
                        f"got {type(resources).__name__}")
    out = {}
    for key, value in resources.items():
        if not isinstance(key, str):
            raise TypeError(f"{owner}: resource names must be str, got {key!r}")
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{owner}: resources[{key!r}] must be a number, got {value!r}")
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{owner}: resources[{key!r}] must be finite and >= 0, got {value!r}")
        out[key] = value
    return out


def timestamp_seconds(value: object) -> float:
    """Converts a creation timestamp to POSIX seconds.

    Accepts a ``datetime`` (naive ones are read as local time, like
    ``datetime.timestamp``), a number of seconds, or a 1-tuple holding either
    (the AdaptDL seed test builds ``creation_timestamp = now + delta,`` with a
    stray trailing comma).

    Args:
        value: the timestamp.

    Returns:
        Seconds since the epoch as a float.

    Example:
        >>> timestamp_seconds((12.5,))
        12.5
    """
    if isinstance(value, tuple) and len(value) == 1:
        value = value[0]
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    raise TypeError(f"creation_timestamp must be a datetime or seconds, got {value!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobOptions:
    """What a policy may know of a job beyond AdaptDL's six ``JobInfo`` arguments.

    Attributes:
        age: seconds the job has existed, for the restart penalty; ``None`` lets
            the policy derive it from ``creation_timestamp`` and its clock.
        num_restarts: how often the job has been restarted so far (>= 0).
        goodput_fns: for heterogeneity-aware policies (``SiaPolicy``): per
            accelerator type, ``fn(num_nodes, num_replicas)`` -> goodput in a unit
            shared by all types of this job. A type left out means the job cannot run
            there (yet).
        restarting: the job is in the middle of a checkpoint-restore.
        restart_penalty: seconds one restart of this job costs (``None``: the
            policy's default).

    Example:
        >>> JobOptions(num_restarts=2).num_restarts
        2
        >>> JobOptions(num_restarts=-1)
        Traceback (most recent call last):
        ...
        ValueError: num_restarts (-1) must be >= 0
    """

    age: float | None = None
    num_restarts: int = 0
    goodput_fns: Mapping[str, Callable] | None = None
    restarting: bool = False
    restart_penalty: float | None = None

    def __post_init__(self) -> None:
        n = self.num_restarts
        if isinstance(n, bool) or not isinstance(n, numbers.Integral):
            raise TypeError(f"num_restarts ({n!r}) must be an int")
        if n < 0:
            raise ValueError(f"num_restarts ({n!r}) must be >= 0")
        object.__setattr__(self, "num_restarts", int(n))
        age = self.age
        if age is not None:
            if isinstance(age, bool) or not isinstance(age, numbers.Real) or not math.isfinite(age):
                raise ValueError(f"age ({age!r}) must be a finite number of seconds")
            object.__setattr__(self, "age", float(age))
        fns = self.goodput_fns
        if fns is not None:
            if not isinstance(fns, Mapping):
                raise TypeError(f"goodput_fns ({fns!r}) must map accelerator type to a callable")
            for name, fn in fns.items():
                if not isinstance(name, str) or not callable(fn):
                    raise TypeError(f"goodput_fns[{name!r}] ({fn!r}) must be a callable keyed "
                                    f"by an accelerator type (str)")
        object.__setattr__(self, "restarting", bool(self.restarting))
        pen = self.restart_penalty
        if pen is not None:
            if (isinstance(pen, bool) or not isinstance(pen, numbers.Real)
                    or not math.isfinite(pen) or pen < 0):
                raise ValueError(f"restart_penalty ({pen!r}) must be >= 0 seconds")
            object.__setattr__(self, "restart_penalty", float(pen))


class JobInfo:
    """What the policy needs to know about one job.

    Args:
        resources: resources one replica needs, e.g. ``{"nvidia.com/gpu": 1, "pods": 1}``.
        speedup_fn: ``speedup_fn(num_nodes, num_replicas)`` -> speedup over one
            replica (a :class:`~goodput_jax.sched.speedup.SpeedupFunction` or any
            callable accepting integer arrays).
        creation_timestamp: a ``datetime`` or POSIX seconds (a 1-tuple of either
            is unwrapped; :data:`CreationTimestamp`).
        min_replicas: fewest replicas the job can run with (0 or more).
        max_replicas: most replicas the job can use (at least 1 and at least
            ``min_replicas``).
        preemptible: whether the scheduler may move or stop the job once running.
        options: a :class:`JobOptions` (age, restarts, per-type goodput, restart state
            and penalty); a ``SpeedupFunction`` in ``goodput_fns`` counts in its own
            absolute goodput, ``speedup * base_goodput``.
        **keywords: ``JobOptions`` fields as keywords (``age=``, ``num_restarts=``, ...),
            applied over ``options``; typed ``Any`` because the fields differ in type
            (``JobOptions`` checks each one).

    Example:
        >>> JobInfo({"gpu": 1}, lambda n, r: r, 0.0, 1, 8, preemptible=False).min_replicas
        1
        >>> JobInfo({"gpu": 1}, lambda n, r: r, 0.0, 1, 8, options=JobOptions(age=60.0)).age
        60.0
    """

    def __init__(self, resources: Mapping[str, float], speedup_fn: Callable,
                 creation_timestamp: CreationTimestamp, min_replicas: int, max_replicas: int,
                 preemptible: bool = True, *, options: JobOptions | None = None,
                 **keywords: Any) -> None:
        self.resources = _check_resources(resources, "JobInfo")
        if not callable(speedup_fn):
            raise TypeError(f"JobInfo: speedup_fn must be callable, got {speedup_fn!r}")
        self.speedup_fn = speedup_fn
        if isinstance(creation_timestamp, tuple) and len(creation_timestamp) == 1:
            creation_timestamp = creation_timestamp[0]
        self.creation_time = timestamp_seconds(creation_timestamp)
        self.creation_timestamp = creation_timestamp
        for name, value in (("min_replicas", min_replicas), ("max_replicas", max_replicas)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError(f"JobInfo: {name} must be an int, got {value!r}")
        if min_replicas < 0:
            raise ValueError(f"JobInfo: min_replicas must be >= 0, got {min_replicas}")
        if max_replicas < 1:
            raise ValueError(f"JobInfo: max_replicas must be >= 1, got {max_replicas}")
        if max_replicas < min_replicas:
            raise ValueError(f"JobInfo: max_replicas ({max_replicas}) < min_replicas "
                             f"({min_replicas})")
        self.min_replicas = int(min_replicas)
        self.max_replicas = int(max_replicas)
        self.preemptible = bool(preemptible)
        # the one place the former keywords (age=, num_restarts=, ...) become options
        if keywords:
            unknown = sorted(set(keywords) - {f.name for f in dataclasses.fields(JobOptions)})
            if unknown:
                raise TypeError(f"JobInfo() got an unexpected keyword argument {unknown[0]!r}")
            options = dataclasses.replace(options or JobOptions(), **keywords)
        self.options = options if options is not None else JobOptions()
        self.age = self.options.age
        self.num_restarts = self.options.num_restarts
        self.goodput_fns = (None if self.options.goodput_fns is None
                            else dict(self.options.goodput_fns))
        self.restarting = self.options.restarting
        self.restart_penalty = self.options.restart_penalty

    def __repr__(self) -> str:
        return (f"JobInfo(resources={self.resources!r}, creation_timestamp="
                f"{self.creation_timestamp!r}, min_replicas={self.min_replicas}, "
                f"max_replicas={self.max_replicas}, preemptible={self.preemptible})")


class NodeInfo:
    """Resources one node offers.

    Args:
        resources: e.g. ``{"nvidia.com/gpu": 4, "pods": 32}``; a resource a
            node does not list counts as 0.
        preemptible: whether the node may disappear (spot/preemptible VM).
        accelerator_type: the node's accelerator type (``"t4"``, ``"a100"``,
            ``"v5e"`` ...); ``None`` for a homogeneous cluster.

    Example:
        >>> NodeInfo({"gpu": 2}, preemptible=True).preemptible
        True
    """

    def __init__(self, resources: Mapping[str, float], preemptible: bool,
                 accelerator_type: str | None = None):
        self.resources = _check_resources(resources, "NodeInfo")
        self.preemptible = bool(preemptible)
        if accelerator_type is not None and (not isinstance(accelerator_type, str)
                                             or not accelerator_type):
            raise TypeError(f"NodeInfo: accelerator_type must be a non-empty str or None, "
                            f"got {accelerator_type!r}")
        self.accelerator_type = accelerator_type

    def __repr__(self) -> str:
        extra = ("" if self.accelerator_type is None
                 else f", accelerator_type={self.accelerator_type!r}")
        return (f"NodeInfo(resources={self.resources!r}, preemptible={self.preemptible}"
                f"{extra})")


def realloc_factor(age: float, num_restarts: int, penalty: float, *,
                   exempt_young: bool = False) -> float:
    """Pollux's re-allocation factor: the share of a job's life not lost to restarts.

    ``max(age - num_restarts * penalty, 0) / (age + penalty)`` (AdaptDL's
    ``PolluxPolicy``), 1 when ``age + penalty`` is 0. It multiplies the speedup of an
    allocation that differs from the job's current one. With ``exempt_young`` (Sia's
    artifact) jobs younger than one ``penalty`` are not penalised (factor 1). The one home
    of the rule: :class:`~goodput_jax.sched.pollux.PolluxPolicy` and
    :class:`~goodput_jax.sched.sia.SiaPolicy` call it.

    Example:
        >>> realloc_factor(90.0, 1, 30.0), realloc_factor(10.0, 0, 30.0)
        (0.5, 0.25)
        >>> realloc_factor(10.0, 0, 30.0, exempt_young=True)
        1.0
    """
    if (exempt_young and age < penalty) or not age + penalty > 0:
        return 1.0
    return max(age - num_restarts * penalty, 0.0) / (age + penalty)
