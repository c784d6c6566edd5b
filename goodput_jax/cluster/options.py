"""Options of the controller and its actor: frozen dataclasses, validated once.

* :class:`ControllerOptions`: how :class:`~goodput_jax.cluster.controller.Controller`
  schedules (policy, round interval, node grace, raylet probe, maximum capacity).
* :class:`ControllerActorOptions`: those plus what the Ray actor adds (its tick
  period, fake devices, compilation caches, precompile, warm spares, autoscaling,
  the raylet probe); :meth:`~ControllerActorOptions.controller`
  gives the controller's part.

Each is built once (``ControllerOptions(interval=30)``) or from the old keyword
arguments (:func:`options_from`), and a wrong value is refused in one line naming it.

Example:
    >>> ControllerOptions(interval=30.0).interval
    30.0
    >>> ControllerOptions(interval=0)
    Traceback (most recent call last):
    ...
    ValueError: interval (0) must be > 0 seconds
    >>> ControllerActorOptions(policy="sia", poll=0.25).controller().policy
    'sia'
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from goodput_jax.cluster.spec import Capacity

__all__ = ["ControllerActorOptions", "ControllerOptions", "as_capacity", "options_from"]

POLICIES = ("auto", "sia", "pollux")


def as_capacity(value: Any) -> Capacity:
    """``{type: (nodes, devices per node)}`` (or a :class:`Capacity`) as a Capacity
    (``Any``: the value as the user gave it, checked here).

    Example:
        >>> as_capacity({"a": [3, 2]}).by_type
        {'a': (3, 2)}
        >>> as_capacity({"a": (0, 2)})
        Traceback (most recent call last):
        ...
        ValueError: max_capacity ({'a': (0, 2)}): want {TYPE: (NODES, DEVICES)}, both >= 1
    """
    if isinstance(value, Capacity):
        return value
    ok = isinstance(value, Mapping) and bool(value) and all(
        isinstance(t, str) and t and isinstance(v, (list, tuple)) and len(v) == 2
        and all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in v)
        for t, v in value.items())
    if not ok:
        raise ValueError(f"max_capacity ({value!r}): want {{TYPE: (NODES, DEVICES)}}, "
                         f"both >= 1")
    return Capacity({t: (int(v[0]), int(v[1])) for t, v in sorted(value.items())})


def _seconds(name: str, value: Any, *, zero: bool = False) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and \
        math.isfinite(value) and (value >= 0 if zero else value > 0)
    if not ok:
        raise ValueError(f"{name} ({value!r}) must be {'>=' if zero else '>'} 0 seconds")
    return float(value)


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} ({value!r}) must be True or False")
    return value


def _policy(value: Any) -> Any:
    if isinstance(value, str) and value not in POLICIES:
        raise ValueError(f"policy ({value!r}) must be 'auto', 'sia', 'pollux' or a policy "
                         f"object")
    return value


@dataclass(frozen=True, kw_only=True)
class ControllerOptions:
    """How the controller schedules (:class:`~goodput_jax.cluster.controller_core.Controller`).

    Attributes:
        policy: ``"auto"`` (Pollux on a one-type cluster, Sia on a mixed one),
            ``"sia"``, ``"pollux"`` or a policy object (``Any``: a ``PolluxPolicy``, a
            ``SiaPolicy`` or one with their ``optimize``).
        interval: seconds between periodic rounds (60, as Pollux and Sia).
        round_on_events: also run a round right after an arrival, a finish or a node
            change (AdaptDL allocates new jobs at once too).
        node_grace: seconds a launch that died of a system error waits for the node
            table to show a dead node before counting as a crash (its nodes are held
            out of rounds meanwhile).
        probe_every: seconds between two probes of one node's raylet.
        max_capacity: the largest the cluster can grow to, ``{type: (nodes, devices per
            node)}``: specs are checked against it instead of the live nodes. None:
            the live nodes.
        lease: seconds a launch's process trains on without reaching its node's raylet
            or ``head`` before it stops itself (:mod:`goodput_jax.cluster.lease`; 0:
            no lease). It bounds how long two launches of one job can run at once.
        head: ``host:port`` of the cluster's head (its GCS) that the launches hold
            their lease on (the actor fills it in; None: the raylet only).
        node_mtbf: a node's mean time between failures in seconds, as the operator
            knows it; the jobs' checkpoint interval then follows it instead of the
            node losses observed (None: observed; see
            :mod:`goodput_jax.cluster.checkpointing`).
    """

    policy: Any = "auto"
    interval: float = 60.0
    round_on_events: bool = True
    node_grace: float = 15.0
    probe_every: float = 0.5
    max_capacity: Capacity | Mapping | None = None
    lease: float = 30.0
    head: str | None = None
    node_mtbf: float | None = None

    def __post_init__(self) -> None:
        _policy(self.policy)
        if self.node_mtbf is not None:
            object.__setattr__(self, "node_mtbf", _seconds("node_mtbf", self.node_mtbf))
        object.__setattr__(self, "lease", _seconds("lease", self.lease, zero=True))
        if self.head is not None and not (isinstance(self.head, str) and ":" in self.head):
            raise ValueError(f"head ({self.head!r}) must be 'HOST:PORT'")
        object.__setattr__(self, "interval", _seconds("interval", self.interval))
        _flag("round_on_events", self.round_on_events)
        object.__setattr__(self, "node_grace", _seconds("node_grace", self.node_grace,
                                                        zero=True))
        object.__setattr__(self, "probe_every", _seconds("probe_every", self.probe_every))
        if self.max_capacity is not None:
            object.__setattr__(self, "max_capacity", as_capacity(self.max_capacity))


@dataclass(frozen=True, kw_only=True)
class ControllerActorOptions:
    """The controller actor's options (:class:`~goodput_jax.cluster.controller_actor.ControllerActor`).

    Attributes:
        policy, interval, node_grace, max_capacity: as in :class:`ControllerOptions`.
        poll: seconds between two ticks.
        fake_devices: the accelerators are fake CPU devices (local clusters, CI).
        policy_kwargs: keyword arguments of the policy's constructor (``policy`` "sia"
            or "pollux"; ``Any``: checked by that constructor).
        compile_cache: JAX's persistent compilation cache in ``STATE_DIR/jax-cache``.
        precompile: compile the policy at startup, in the background; rounds wait for
            it at most ``precompile_wait`` seconds; ``precompile_more``: then for half
            and twice as many jobs.
        job_cache: every job's processes share a compilation cache
            (``STATE_DIR/jax-cache-jobs``).
        spares: one warm spare process per node.
        autoscale: ask Ray's autoscaler for the policy's desired size after every round.
        probe_raylets: a node whose raylet's port refuses connections is lost at once.
        lease, node_mtbf: as in :class:`ControllerOptions` (the head is the actor's GCS).
    """

    policy: str = "auto"
    interval: float = 60.0
    poll: float = 0.5
    fake_devices: bool = True
    node_grace: float = 15.0
    policy_kwargs: Mapping[str, Any] | None = None
    compile_cache: bool = True
    precompile: bool = True
    precompile_more: bool = True
    precompile_wait: float = 120.0
    job_cache: bool = True
    spares: bool = True
    autoscale: bool = False
    probe_raylets: bool = True
    max_capacity: Capacity | Mapping | None = None
    lease: float = 30.0
    node_mtbf: float | None = None

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"policy ({self.policy!r}) must be 'auto', 'sia' or 'pollux'")
        for name in ("interval", "poll"):
            object.__setattr__(self, name, _seconds(name, getattr(self, name)))
        for name in ("node_grace", "precompile_wait", "lease"):
            object.__setattr__(self, name, _seconds(name, getattr(self, name), zero=True))
        for name in ("fake_devices", "compile_cache", "precompile", "precompile_more",
                     "job_cache", "spares", "autoscale", "probe_raylets"):
            _flag(name, getattr(self, name))
        if self.policy_kwargs is not None:
            if not isinstance(self.policy_kwargs, Mapping) or not all(
                    isinstance(k, str) for k in self.policy_kwargs):
                raise TypeError(f"policy_kwargs ({self.policy_kwargs!r}) must be a dict of "
                                f"keyword arguments")
            if self.policy_kwargs and self.policy == "auto":
                raise ValueError(f"policy_kwargs ({dict(self.policy_kwargs)!r}) need policy "
                                 f"'sia' or 'pollux', not 'auto'")
            object.__setattr__(self, "policy_kwargs", dict(self.policy_kwargs))
        if self.max_capacity is not None:
            object.__setattr__(self, "max_capacity", as_capacity(self.max_capacity))
        if self.node_mtbf is not None:
            object.__setattr__(self, "node_mtbf", _seconds("node_mtbf", self.node_mtbf))

    def controller(self, policy: Any = None, head: str | None = None) -> ControllerOptions:
        """The controller's part (``policy``: a policy object built from these options,
        ``Any`` as :attr:`ControllerOptions.policy`; ``head``: the GCS address the
        launches' lease holds on)."""
        return ControllerOptions(policy=self.policy if policy is None else policy,
                                 interval=self.interval, node_grace=self.node_grace,
                                 max_capacity=self.max_capacity, lease=self.lease, head=head,
                                 node_mtbf=self.node_mtbf)


OptionsT = TypeVar("OptionsT", ControllerOptions, ControllerActorOptions)


def options_from(cls: type[OptionsT], options: OptionsT | None,
                 keywords: Mapping[str, Any]) -> OptionsT:
    """``options``, or ``cls(**keywords)`` (the old keyword arguments, ``Any``: each is
    checked by the options class), not both.

    Example:
        >>> options_from(ControllerOptions, None, {"interval": 5}).interval
        5.0
        >>> options_from(ControllerOptions, None, {"intervall": 5})
        Traceback (most recent call last):
        ...
        TypeError: intervall: not an option of ControllerOptions
    """
    if options is not None and keywords:
        raise TypeError(f"{', '.join(sorted(keywords))}: give either options or keywords, "
                        f"not both")
    if options is not None:
        if not isinstance(options, cls):
            raise TypeError(f"options ({type(options).__name__}) must be a {cls.__name__}")
        return options
    names = {f.name for f in dataclasses.fields(cls)}
    bad = sorted(k for k in keywords if k not in names)
    if bad:
        raise TypeError(f"{', '.join(bad)}: not an option of {cls.__name__}")
    return cls(**keywords)
