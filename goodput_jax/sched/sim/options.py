"""The simulator's options objects: the cluster a run simulates, and how a workload is run.

Frozen, keyword-only dataclasses validated once at construction (one-line errors naming
the field and its value). :func:`~goodput_jax.sched.sim.cluster.simulate` takes
:class:`SimOptions`, :func:`~goodput_jax.sched.sim.runner.run_workload` takes
:class:`WorkloadOptions`; both still accept the fields as keywords (translated here, by
:func:`with_keywords`, in one place).

Example:
    >>> SimOptions(interval=30.0).gpus_per_node
    4
    >>> SimOptions(num_nodes=0)
    Traceback (most recent call last):
    ...
    ValueError: num_nodes (0) must be >= 1
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["SimOptions", "WorkloadOptions", "with_keywords"]

_O = TypeVar("_O", bound="DataclassInstance")


def _positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not float(value) > 0:
        raise ValueError(f"{name} ({value!r}) must be a number > 0")


def _count(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} ({value!r}) must be an int")
    if value < 1:
        raise ValueError(f"{name} ({value!r}) must be >= 1")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SimOptions:
    """The simulated cluster and the loop's limits.

    Attributes:
        interval: scheduling interval (simulated seconds), > 0.
        interference: slowdown of co-located distributed jobs, in [0, 1).
        num_nodes, gpus_per_node: a homogeneous cluster (each >= 1).
        max_time: simulated-time limit (s); jobs still running then are unfinished.
        cluster: a heterogeneous cluster ``{type: (nodes, GPUs per node)}`` (replaces
            ``num_nodes`` x ``gpus_per_node``).
    """

    interval: float = 60.0
    interference: float = 0.0
    num_nodes: int = 16
    gpus_per_node: int = 4
    max_time: float = 30 * 86400.0
    cluster: Mapping[str, tuple[int, int]] | None = None

    def __post_init__(self) -> None:
        _positive("interval", self.interval)
        _positive("max_time", self.max_time)
        if not isinstance(self.interference, numbers.Real) or not 0 <= self.interference < 1:
            raise ValueError(f"interference ({self.interference!r}) must be in [0, 1)")
        _count("num_nodes", self.num_nodes)
        _count("gpus_per_node", self.gpus_per_node)
        if self.cluster is not None and not isinstance(self.cluster, Mapping):
            raise TypeError(f"cluster ({self.cluster!r}) must map a type to (nodes, GPUs)")


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkloadOptions:
    """How :func:`~goodput_jax.sched.sim.runner.run_workload` runs a workload.

    Attributes:
        traces: the trace directory (see :func:`~.apps.find_traces_dir`); on a
            heterogeneous cluster, the root of the Sia data.
        seed, p: Pollux's search seed and fairness power.
        max_jobs: only the first N jobs of the workload (``None``: all).
        calibrated: on a heterogeneous cluster, the Sia artifact's restore times and
            calibration slowdowns (see :func:`~.cluster.make_jobs`).
        cluster: a heterogeneous cluster by name (``"sia-64"``, see
            :data:`~.apps.CLUSTERS`) or as ``{type: (nodes, GPUs per node)}``.
        interval, interference, num_nodes, gpus_per_node: as :class:`SimOptions`.
    """

    traces: str | os.PathLike[str] | None = None
    seed: int = 0
    p: float = -1.0
    max_jobs: int | None = None
    calibrated: bool = True
    cluster: str | Mapping[str, tuple[int, int]] | None = None
    interval: float = 60.0
    interference: float = 0.0
    num_nodes: int = 16
    gpus_per_node: int = 4

    def __post_init__(self) -> None:
        if self.max_jobs is not None:
            _count("max_jobs", self.max_jobs)
        if isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral):
            raise TypeError(f"seed ({self.seed!r}) must be an int")
        if not isinstance(self.p, numbers.Real) or not math.isfinite(self.p):
            raise ValueError(f"p ({self.p!r}) must be a finite number")
        if self.cluster is not None and not isinstance(self.cluster, str | Mapping):
            raise TypeError(f"cluster ({self.cluster!r}) must be a name or a mapping")
        self.sim_options(None)  # the cluster fields, validated once here

    def sim_options(self, cluster: Mapping[str, tuple[int, int]] | None) -> SimOptions:
        """The :class:`SimOptions` of this run, on the resolved heterogeneous ``cluster``."""
        return SimOptions(interval=self.interval, interference=self.interference,
                          num_nodes=self.num_nodes, gpus_per_node=self.gpus_per_node,
                          cluster=cluster)


def with_keywords(cls: type[_O], options: _O | None, keywords: Mapping[str, Any],
                  where: str) -> _O:
    """``options`` (or the defaults) with the fields given as old-style keywords replaced.

    ``keywords`` maps to ``Any``: the fields of ``cls`` differ in type, and ``cls``
    checks each value when it is built.

    The one place a function that takes ``options`` translates its former keyword
    arguments.

    Raises:
        TypeError: a keyword that is not a field of ``cls``.

    Example:
        >>> with_keywords(SimOptions, None, {"interval": 30.0}, "simulate").interval
        30.0
        >>> with_keywords(SimOptions, None, {"intervl": 30.0}, "simulate")
        Traceback (most recent call last):
        ...
        TypeError: simulate() got an unexpected keyword argument 'intervl'
    """
    fields = {f.name for f in dataclasses.fields(cls)}
    for name in keywords:
        if name not in fields:
            raise TypeError(f"{where}() got an unexpected keyword argument {name!r}")
    base = options if options is not None else cls()
    return dataclasses.replace(base, **keywords) if keywords else base
