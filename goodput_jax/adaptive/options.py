"""What :class:`~goodput_jax.adaptive.AdaptiveBatchSize` is configured by: options objects.

Frozen, keyword-only dataclasses, each validated once at construction with a one-line
error that names the argument and its value:

* :class:`SearchSpace`: the configurations a check may choose among;
* :class:`SwitchPolicy`: when a better configuration is worth switching to;
* :class:`CheckSchedule`: how often a check runs, and on which statistics;
* :class:`AdaptiveOptions`: the three, plus ``rescale_nu`` and ``adaptive``.

The controller's old flat keywords (``AdaptiveBatchSize(hooks, data, patience=3)``) still
work: :meth:`AdaptiveOptions.with_keywords` translates them, in this one place.

The job's batch limits (initial and largest batch, per-replica bounds, accumulation) are the
hooks' (:class:`~goodput_jax.integrations.hooks.GoodputHooks`): the controller reads them
there.

Example:
    >>> opts = AdaptiveOptions(policy=SwitchPolicy(patience=3),
    ...                        checks=CheckSchedule(adapt_every=5))
    >>> opts.policy.patience, opts.checks.adapt_every, opts.search.max_accum_steps
    (3, 5, 7)
    >>> AdaptiveOptions().with_keywords(min_samples=8).policy.min_samples
    8
    >>> SwitchPolicy(speedup_threshold=1.02, explore_threshold=1.1)
    Traceback (most recent call last):
    ...
    ValueError: explore_threshold (1.1) must be between 1 and speedup_threshold (1.02)
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any

__all__ = ["AdaptiveOptions", "CheckSchedule", "SearchSpace", "SwitchPolicy"]


def _int(name: str, v: Any, low: int) -> None:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < low:
        what = "a positive integer" if low == 1 else f"an integer >= {low}"
        raise ValueError(f"{name} ({v!r}) must be {what}")


def _real(name: str, v: Any, low: float, *, strict: bool = False) -> None:
    if (isinstance(v, bool) or not isinstance(v, numbers.Real) or not float(v) >= low
            or (strict and float(v) == low)):
        raise ValueError(f"{name} ({v!r}) must be {'>' if strict else '>='} {low:g}")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SearchSpace:
    """The configurations a check chooses among.

    Attributes:
        atomic_sizes: allowed per-replica micro-batch sizes (None: powers of two within
            the hooks' bounds, plus the initial size; see
            :func:`~goodput_jax.adaptive.default_atomic_sizes`).
        max_accum_steps: largest ``accum_steps`` considered (0 with accumulation off).
        explore_factor: growth limit of the total batch per exploration step (> 1): at
            most this times the largest batch profiled on the replica count.

    Example:
        >>> SearchSpace(atomic_sizes=[8, 16]).atomic_sizes
        (8, 16)
    """

    atomic_sizes: tuple[int, ...] | None = None
    max_accum_steps: int = 7
    explore_factor: float = 2.0

    def __post_init__(self) -> None:
        if self.atomic_sizes is not None:
            sizes = tuple(self.atomic_sizes)
            if not sizes or any(isinstance(s, bool) or not isinstance(s, numbers.Integral)
                                or s < 1 for s in sizes):
                raise ValueError(f"atomic_sizes ({self.atomic_sizes!r}) must be positive "
                                 "integers")
            object.__setattr__(self, "atomic_sizes", tuple(int(s) for s in sizes))
        _int("max_accum_steps", self.max_accum_steps, 0)
        _real("explore_factor", self.explore_factor, 1.0, strict=True)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SwitchPolicy:
    """When a better configuration is worth the switch (the rules: ``adaptive.decisions``).

    Attributes:
        speedup_threshold: predicted goodput ratio a switch must beat (>= 1; AdaptDL 1.05).
        explore_threshold: the ratio a switch to a larger batch not yet profiled on this
            replica count must beat instead (1 to ``speedup_threshold``; default 1.0: any
            predicted gain; trying it costs a few steps and settles the question).
        patience: consecutive checks the same better candidate must win.
        immediate_gain: a larger batch predicted at least this much faster switches at the
            first check (no ``patience``).
        min_samples: profiled steps of the running configuration before a check.
        settle_samples: kept step times of the running configuration before a check may
            leave it for a smaller batch (which also waits while its step time still falls).
        reprobe_steps: steps after leaving a configuration before a larger one may be
            tried again (0: never); each probe the job leaves again soon doubles it.

    Example:
        >>> SwitchPolicy(patience=1).speedup_threshold
        1.05
    """

    speedup_threshold: float = 1.05
    explore_threshold: float = 1.0
    patience: int = 2
    immediate_gain: float = 1.25
    min_samples: int = 5
    settle_samples: int = 20
    reprobe_steps: int = 500

    def __post_init__(self) -> None:
        _real("speedup_threshold", self.speedup_threshold, 1.0)
        if (isinstance(self.explore_threshold, bool)
                or not isinstance(self.explore_threshold, numbers.Real)
                or not 1.0 <= self.explore_threshold <= self.speedup_threshold):
            raise ValueError(f"explore_threshold ({self.explore_threshold!r}) must be between "
                             f"1 and speedup_threshold ({self.speedup_threshold!r})")
        _int("patience", self.patience, 1)
        _real("immediate_gain", self.immediate_gain, 1.0)
        _int("min_samples", self.min_samples, 1)
        _int("settle_samples", self.settle_samples, 1)
        _int("reprobe_steps", self.reprobe_steps, 0)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CheckSchedule:
    """How often a check runs, and which gradient statistics it acts on.

    Attributes:
        adapt_every: steps between checks.
        adapt_interval: seconds (on the hooks' clock) after a settled check (no better
            candidate) before the next (0: every ``adapt_every`` steps); exploring keeps
            checking every ``adapt_every`` steps.
        min_grad_steps: steps behind the gradient statistics before a check.
        stable_reads: distinct statistics whose noise scales must agree (within
            ``stable_ratio``) before a check acts on them.
        stable_ratio: how far those noise scales may spread (a factor >= 1).

    Example:
        >>> CheckSchedule(adapt_every=1, adapt_interval=0).adapt_interval
        0
    """

    adapt_every: int = 10
    adapt_interval: float = 0.05
    min_grad_steps: int = 10
    stable_reads: int = 3
    stable_ratio: float = 2.0

    def __post_init__(self) -> None:
        _int("adapt_every", self.adapt_every, 1)
        if (isinstance(self.adapt_interval, bool)
                or not isinstance(self.adapt_interval, numbers.Real)
                or not math.isfinite(self.adapt_interval) or self.adapt_interval < 0):
            raise ValueError(f"adapt_interval ({self.adapt_interval!r}) must be a number of "
                             "seconds >= 0")
        _int("min_grad_steps", self.min_grad_steps, 1)
        _int("stable_reads", self.stable_reads, 1)
        _real("stable_ratio", self.stable_ratio, 1.0)


#: old flat keyword -> the options field it sets (the one place they are translated)
_KEYWORDS: dict[str, str] = {
    **{f.name: "search" for f in dataclasses.fields(SearchSpace)},
    **{f.name: "policy" for f in dataclasses.fields(SwitchPolicy)},
    **{f.name: "checks" for f in dataclasses.fields(CheckSchedule)},
    "rescale_nu": "", "adaptive": "",
}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class AdaptiveOptions:
    """Everything :class:`~goodput_jax.adaptive.AdaptiveBatchSize` is configured by.

    Attributes:
        search: :class:`SearchSpace`.
        policy: :class:`SwitchPolicy`.
        checks: :class:`CheckSchedule`.
        rescale_nu: at each switch, scale Adam's second moment by the expected change of
            ``E[g**2]`` (:func:`~goodput_jax.model.gradstats.nu_switch_factor`).
        adaptive: False keeps the initial configuration (a benchmark's fixed arm).

    Example:
        >>> AdaptiveOptions(adaptive=False).with_keywords(patience=4).policy.patience
        4
    """

    search: SearchSpace = dataclasses.field(default_factory=SearchSpace)
    policy: SwitchPolicy = dataclasses.field(default_factory=SwitchPolicy)
    checks: CheckSchedule = dataclasses.field(default_factory=CheckSchedule)
    rescale_nu: bool = True
    adaptive: bool = True

    def __post_init__(self) -> None:
        for name, v, cls in (("search", self.search, SearchSpace),
                             ("policy", self.policy, SwitchPolicy),
                             ("checks", self.checks, CheckSchedule)):
            if not isinstance(v, cls):
                raise TypeError(f"{name} ({v!r}) must be a {cls.__name__}")
        for flag, b in (("rescale_nu", self.rescale_nu), ("adaptive", self.adaptive)):
            if not isinstance(b, bool):
                raise ValueError(f"{flag} ({b!r}) must be True or False")  # noqa: TRY004 - as before

    def with_keywords(self, **keywords: Any) -> AdaptiveOptions:
        """These options with the controller's flat keywords applied (``patience=3``, ...).

        Raises:
            TypeError: a keyword the controller never took.

        ``Any``: the old keyword arguments, each checked as it becomes a field of the options
        (an unknown one is a one-line TypeError).
        """
        unknown = sorted(set(keywords) - set(_KEYWORDS))
        if unknown:
            raise TypeError(f"AdaptiveBatchSize() got an unexpected keyword argument "
                            f"{unknown[0]!r}")
        if "adaptive" in keywords:  # the old keyword took any truth value
            keywords["adaptive"] = bool(keywords["adaptive"])
        groups: dict[str, dict[str, Any]] = {}
        top: dict[str, Any] = {}
        for k, v in keywords.items():
            if _KEYWORDS[k]:
                groups.setdefault(_KEYWORDS[k], {})[k] = v
            else:
                top[k] = v
        parts: dict[str, Any] = {"search": self.search, "policy": self.policy,
                                 "checks": self.checks}
        for g, kw in groups.items():
            top[g] = dataclasses.replace(parts[g], **kw)
        return dataclasses.replace(self, **top) if top else self
