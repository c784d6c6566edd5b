"""The typed job spec of the cluster runtime, and its validation at ``submit``.

A :class:`JobSpec` says what to run (a ``"module:function"`` callable, or a
Python script with arguments), on how many replicas (one replica = one
accelerator device), on which accelerator types, whether the scheduler may move
it, where it checkpoints, where its goodput events go, and the settings of the
``GoodputHooks`` / ``AdaptiveBatchSize`` it trains with. The spec is plain JSON
(:meth:`JobSpec.to_json` / :meth:`JobSpec.from_json`), so it travels through the
cluster's state directory and the CLI unchanged.

:func:`validate` checks a spec against a cluster's capacity
(:class:`Capacity`) before anything is written: an unknown accelerator type,
``min_replicas`` above what the allowed types offer, or an entry point that
cannot be found is refused with a one-line error naming the argument and value.

Example:
    >>> spec = JobSpec("mnist", "goodput_jax.cluster.examples:regression",
    ...                accelerator_types=("a",), min_replicas=1, max_replicas=4)
    >>> cap = Capacity({"a": (2, 2)})
    >>> validate(spec, cap) is spec
    True
    >>> validate(JobSpec("x", "goodput_jax.cluster.examples:regression",
    ...                  accelerator_types=("tpu",)), cap)
    Traceback (most recent call last):
    ...
    ValueError: accelerator_types: unknown accelerator type 'tpu' (the cluster has: a)
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import numbers
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Capacity", "JobSpec", "validate"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


def _int(name: str, value: Any, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < lo:
        raise ValueError(f"{name} ({value!r}) must be an int >= {lo}")
    return int(value)


@dataclass(frozen=True)
class JobSpec:
    """One training job for the cluster runtime.

    Args:
        name: unique job name (letters, digits, ``_.-``; also its goodput job name).
        entry_point: ``"package.module:function"`` (called with a
            :class:`goodput_jax.cluster.JobContext`) or a path to a ``.py``
            script (run as ``__main__`` with ``args``; it reads its context with
            :func:`goodput_jax.cluster.job_context`).
        args: the script's (or function's, as ``ctx.args``) arguments.
        min_replicas: fewest devices it can run on (>= 1).
        max_replicas: most devices it may use (>= min_replicas).
        accelerator_types: the types it may run on; empty = any type.
        preemptible: whether the scheduler may move it once it runs.
        checkpoint_dir: where it checkpoints (default: in the cluster's state
            directory, ``jobs/NAME/ckpt``).
        store: its goodput store URL (default: ``sqlite:///`` in the job's directory).
        hooks: keyword arguments for its ``GoodputHooks`` (``init_batch_size`` ...;
            ``Any``: JSON values, checked to be JSON-serialisable).
        adaptive: keyword arguments for its ``AdaptiveBatchSize`` (JSON, as ``hooks``).
        max_retries: crashes retried (with backoff) before the job is marked failed.
        retry_backoff: seconds before the first retry (doubling each retry).
        stop_timeout: seconds a cooperative stop may take before it is forced.
        env: extra environment variables of its processes.

    Raises:
        ValueError / TypeError: a malformed field, named in the message.

    Example:
        >>> JobSpec("j", "m:f", max_replicas=2).to_json()["max_replicas"]
        2
        >>> JobSpec("j", "m:f", min_replicas=3, max_replicas=2)
        Traceback (most recent call last):
        ...
        ValueError: max_replicas (2) must be >= min_replicas (3)
    """

    name: str
    entry_point: str
    args: tuple[str, ...] = ()
    min_replicas: int = 1
    max_replicas: int = 1
    accelerator_types: tuple[str, ...] = ()
    preemptible: bool = True
    checkpoint_dir: str | None = None
    store: str | None = None
    hooks: Mapping[str, Any] = field(default_factory=dict)
    adaptive: Mapping[str, Any] = field(default_factory=dict)
    max_retries: int = 2
    retry_backoff: float = 1.0
    stop_timeout: float = 60.0
    env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(f"name ({self.name!r}) must be 1-63 letters, digits or _.- "
                             f"starting with a letter or digit")
        if not isinstance(self.entry_point, str) or not self.entry_point:
            raise ValueError(f"entry_point ({self.entry_point!r}) must be 'module:function' "
                             f"or a path to a .py script")
        if isinstance(self.args, str) or not isinstance(self.args, Sequence) or not all(
                isinstance(a, str) for a in self.args):
            raise TypeError(f"args ({self.args!r}) must be a list of str")
        object.__setattr__(self, "args", tuple(self.args))
        lo = _int("min_replicas", self.min_replicas, 1)
        hi = _int("max_replicas", self.max_replicas, 1)
        if hi < lo:
            raise ValueError(f"max_replicas ({hi}) must be >= min_replicas ({lo})")
        types = self.accelerator_types
        if isinstance(types, str):
            types = (types,)
        if not isinstance(types, Sequence) or not all(isinstance(t, str) and t for t in types):
            raise TypeError(f"accelerator_types ({self.accelerator_types!r}) must be a list "
                            f"of non-empty str")
        object.__setattr__(self, "accelerator_types", tuple(types))
        if not isinstance(self.preemptible, bool):
            raise TypeError(f"preemptible ({self.preemptible!r}) must be a bool")
        for name in ("checkpoint_dir", "store"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, str) or not v):
                raise TypeError(f"{name} ({v!r}) must be a non-empty str or None")
        for name in ("hooks", "adaptive", "env"):
            v = getattr(self, name)
            if not isinstance(v, Mapping) or not all(isinstance(k, str) for k in v):
                raise TypeError(f"{name} ({v!r}) must be a mapping with str keys")
            try:
                json.dumps(dict(v))
            except (TypeError, ValueError):
                raise TypeError(f"{name} ({v!r}) must be JSON-serialisable") from None
            object.__setattr__(self, name, dict(v))
        if not all(isinstance(x, str) for x in self.env.values()):
            raise TypeError(f"env ({self.env!r}) values must be str")
        _int("max_retries", self.max_retries, 0)
        for name in ("retry_backoff", "stop_timeout"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not float(v) >= 0:
                raise ValueError(f"{name} ({v!r}) must be a number of seconds >= 0")

    @property
    def is_script(self) -> bool:
        """Whether the entry point is a script path (else ``module:function``)."""
        return self.entry_point.endswith(".py")

    def to_json(self) -> dict[str, Any]:
        """The spec as a JSON-safe dict (lists for tuples; ``Any``: JSON values)."""
        out = dataclasses.asdict(self)
        out["args"] = list(self.args)
        out["accelerator_types"] = list(self.accelerator_types)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobSpec:
        """Parses :meth:`to_json` (``Any``: JSON values, each checked as the constructor
        does); an unknown key is refused by name.

        Example:
            >>> JobSpec.from_json({"name": "j", "entry_point": "m:f", "gpus": 2})
            Traceback (most recent call last):
            ...
            ValueError: unknown job spec key 'gpus'
        """
        if not isinstance(data, Mapping):
            raise TypeError(f"job spec must be a mapping, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        for key in data:
            if key not in known:
                raise ValueError(f"unknown job spec key {key!r}")
        for key in ("name", "entry_point"):
            if key not in data:
                raise ValueError(f"job spec is missing {key!r}")
        return cls(**dict(data))


@dataclass(frozen=True)
class Capacity:
    """A cluster's accelerators by type: ``{type: (nodes, devices per node)}``.

    Example:
        >>> Capacity({"a": (2, 2), "b": (1, 4)}).devices(("a",))
        4
    """

    by_type: Mapping[str, tuple[int, int]]

    def devices(self, types: Sequence[str] = ()) -> int:
        """Total devices of ``types`` (all types when empty)."""
        names = types or tuple(self.by_type)
        return sum(n * d for t, (n, d) in self.by_type.items() if t in names)


def _entry_exists(spec: JobSpec) -> str | None:
    if spec.is_script:
        return None if os.path.isfile(spec.entry_point) else "no such script"
    module, sep, func = spec.entry_point.partition(":")
    if not sep or not module or not func.isidentifier():
        return "expected 'module:function' or a path to a .py script"
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        found = None
    return None if found is not None else f"module {module!r} not found"


def validate(spec: JobSpec, capacity: Capacity | None = None) -> JobSpec:
    """Refuse a spec that cannot run, with a one-line error; returns the spec.

    Checks that the entry point exists (the script file, or the module of
    ``module:function``), and against ``capacity`` (when given) that every
    accelerator type is known and that ``min_replicas`` fits on the allowed types.

    Example:
        >>> validate(JobSpec("j", "no_such_mod:main"))
        Traceback (most recent call last):
        ...
        ValueError: entry_point ('no_such_mod:main'): module 'no_such_mod' not found
    """
    if not isinstance(spec, JobSpec):
        raise TypeError(f"spec must be a JobSpec, got {type(spec).__name__}")
    problem = _entry_exists(spec)
    if problem:
        raise ValueError(f"entry_point ({spec.entry_point!r}): {problem}")
    if capacity is not None:
        for t in spec.accelerator_types:
            if t not in capacity.by_type:
                raise ValueError(f"accelerator_types: unknown accelerator type {t!r} "
                                 f"(the cluster has: {', '.join(sorted(capacity.by_type))})")
        have = capacity.devices(spec.accelerator_types)
        if spec.min_replicas > have:
            where = ", ".join(spec.accelerator_types) or "all types"
            raise ValueError(f"min_replicas ({spec.min_replicas}) > the {have} devices of "
                             f"{where}")
    return spec
