"""The options of :class:`~goodput_jax.integrations.hooks.GoodputHooks`: one frozen object per
concern, each validated once at construction with a one-line error.

* :class:`BatchLimits`: the batch sizes the job accepts.
* :class:`Placement`: the configuration the loop starts in (it changes with
  ``set_config``).
* :class:`ProfileOptions`: which step times the profile keeps, and the statistics' period.
* :class:`RefitOptions`: when and where the step-time model is refitted.
* :class:`RecordingOptions`: where the steps are recorded (recorder, store, StepRecorder).

``GoodputHooks`` also takes the earlier keywords (``init_batch_size=``, ``steps=``,
``refit_interval=`` ...): :func:`hooks_options` translates them into these objects, in this
one place.

Example:
    >>> from goodput_jax.integrations.hooks import GoodputHooks
    >>> hooks = GoodputHooks("doc", limits=BatchLimits(init=32, max=1024),
    ...                      placement=Placement(num_replicas=1, num_nodes=1),
    ...                      recording=RecordingOptions(is_primary=False))
    >>> hooks.max_batch_size, hooks.options.refit.interval
    (1024, 30.0)
    >>> BatchLimits(init=64, max=8)
    Traceback (most recent call last):
    ValueError: max_batch_size (8) < init_batch_size (64)
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any

from goodput_jax.integrations.checks import check_limits, nonneg_int, nonneg_number, positive_int
from goodput_jax.integrations.profile import PROFILE_WINDOW

__all__ = ["BatchLimits", "HooksOptions", "Placement", "ProfileOptions", "RecordingOptions",
           "RefitOptions", "hooks_options"]


def _set(obj: Any, name: str, value: Any) -> None:
    object.__setattr__(obj, name, value)


@dataclasses.dataclass(frozen=True, kw_only=True)
class BatchLimits:
    """The batch sizes the job accepts.

    Attributes:
        init: ``M0``, the total batch size the learning rate was tuned for
            (``init_batch_size``).
        max: the largest total batch (``max_batch_size``; default ``init``).
        local_bounds: ``(min, max)`` per-replica batch size, either may be None
            (``local_bsz_bounds``).
        accumulation: whether suggestions may use gradient accumulation
            (``gradient_accumulation``).
    """

    init: int
    max: int | None = None
    local_bounds: tuple[int | None, int | None] | None = None
    accumulation: bool = False

    def __post_init__(self) -> None:
        init, top, bounds = check_limits(self.init, self.max, self.local_bounds)
        _set(self, "init", init)
        _set(self, "max", top)
        _set(self, "local_bounds", bounds)
        _set(self, "accumulation", bool(self.accumulation))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Placement:
    """The configuration the loop starts in (None: found at construction).

    Attributes:
        atomic_bsz: per-replica micro-batch (default ``init // num_replicas``).
        accum_steps: extra accumulation steps (0: none).
        num_nodes: nodes in use (default ``jax.process_count()``).
        num_replicas: data-parallel replicas (default ``jax.device_count()``).
    """

    atomic_bsz: int | None = None
    accum_steps: int = 0
    num_nodes: int | None = None
    num_replicas: int | None = None

    def __post_init__(self) -> None:
        _set(self, "atomic_bsz", positive_int(self.atomic_bsz, "atomic_bsz", allow_none=True))
        _set(self, "num_nodes", positive_int(self.num_nodes, "num_nodes", allow_none=True))
        _set(self, "num_replicas", positive_int(self.num_replicas, "num_replicas",
                                                allow_none=True))
        _set(self, "accum_steps", nonneg_int(self.accum_steps, "accum_steps"))
        if self.num_nodes is not None and self.num_replicas is not None \
                and self.num_nodes > self.num_replicas:
            raise ValueError(f"num_nodes ({self.num_nodes}) > num_replicas ({self.num_replicas})")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProfileOptions:
    """Which step times the profile keeps, and how often the statistics are read.

    Attributes:
        warmup_steps: steps dropped at the start of every configuration.
        job_warmup_steps: further steps dropped at the start of the process (cold caches,
            thread pools and allocators: 5-10x the steady step on the CPU backend).
        quantile: the per-configuration statistic the fit uses (``profile_quantile``; 0.5:
            the median; e.g. 0.25 on a machine shared with other work).
        window: step times kept per configuration, the newest (``profile_window``).
        stats_every: read the gradient statistics every this many steps.
    """

    warmup_steps: int = 2
    job_warmup_steps: int = 8
    quantile: float = 0.5
    window: int = PROFILE_WINDOW
    stats_every: int = 50

    def __post_init__(self) -> None:
        _set(self, "warmup_steps", nonneg_int(self.warmup_steps, "warmup_steps"))
        _set(self, "job_warmup_steps", nonneg_int(self.job_warmup_steps, "job_warmup_steps"))
        q = self.quantile
        if not (isinstance(q, numbers.Real) and 0.0 < q <= 0.5):
            raise ValueError(f"profile_quantile ({q!r}) must be in (0, 0.5]")
        _set(self, "quantile", float(q))
        _set(self, "window", positive_int(self.window, "profile_window"))
        _set(self, "stats_every", positive_int(self.stats_every, "stats_every"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class RefitOptions:
    """When and where the step-time model is refitted.

    Attributes:
        interval: seconds of profiled training time between refits (``refit_interval``).
        tolerance: a periodic refit runs only when a configuration is new or its median
            step time or the noise scale moved by more than this fraction
            (``refit_tolerance``); explicit ``refit()`` calls always fit.
        background: refit on a background thread; False: inline. None: background, except
            on the CPU backend with several local devices (a JAX computation on a second
            thread can starve the in-process all-reduce of a multi-device step).
    """

    interval: float = 30.0
    tolerance: float = 0.05
    background: bool | None = None

    def __post_init__(self) -> None:
        _set(self, "interval", nonneg_number(self.interval, "refit_interval"))
        _set(self, "tolerance", nonneg_number(self.tolerance, "refit_tolerance"))
        if self.background is not None:
            _set(self, "background", bool(self.background))


@dataclasses.dataclass(frozen=True, kw_only=True)
class RecordingOptions:
    """Where the hooks record the steps.

    Attributes:
        recorder: a :class:`~goodput_jax.measure.recorder.GoodputRecorder` (a
            :class:`~goodput_jax.runtime.contracts.HooksRecording`); by default one is
            created with ``logger_name = f"goodput_{job_name}"`` and ``store``, enabled on
            the primary process.
        store: store (or URL) for the created recorder.
        steps: the loop's :class:`~goodput_jax.runtime.StepRecorder`: every step is
            recorded through its call (start, device end, program cost) on its recorder.
        record_device_ends: True (default): without ``steps``, the hooks record through a
            StepRecorder of their own. False only where the loop's own StepRecorder tracks
            the outputs (``steps.track``); prefer ``steps``.
        is_primary: whether this process fits and publishes (default
            ``jax.process_index() == 0``).
    """

    recorder: Any = None
    store: Any = None
    steps: Any = None
    record_device_ends: bool = True
    is_primary: bool | None = None

    def __post_init__(self) -> None:
        from goodput_jax.runtime.steps import StepRecorder

        if self.steps is not None:
            if not isinstance(self.steps, StepRecorder):
                raise TypeError(f"steps ({self.steps!r}) must be a goodput_jax.runtime.StepRecorder")
            if self.recorder is not None and self.recorder is not self.steps.recorder:
                raise ValueError("steps (a StepRecorder) records to another recorder than "
                                 "recorder=; pass one recorder (or only steps=)")
        _set(self, "record_device_ends", bool(self.record_device_ends))
        if self.is_primary is not None:
            _set(self, "is_primary", bool(self.is_primary))


@dataclasses.dataclass(frozen=True, kw_only=True)
class HooksOptions:
    """All of the hooks' options (what :func:`hooks_options` returns)."""

    limits: BatchLimits
    placement: Placement = dataclasses.field(default_factory=Placement)
    profile: ProfileOptions = dataclasses.field(default_factory=ProfileOptions)
    refit: RefitOptions = dataclasses.field(default_factory=RefitOptions)
    recording: RecordingOptions = dataclasses.field(default_factory=RecordingOptions)


#: the earlier keywords of ``GoodputHooks``: ``keyword -> (group, field)``
KEYWORDS: dict[str, tuple[str, str]] = {
    "init_batch_size": ("limits", "init"),
    "max_batch_size": ("limits", "max"),
    "local_bsz_bounds": ("limits", "local_bounds"),
    "gradient_accumulation": ("limits", "accumulation"),
    "atomic_bsz": ("placement", "atomic_bsz"),
    "accum_steps": ("placement", "accum_steps"),
    "num_nodes": ("placement", "num_nodes"),
    "num_replicas": ("placement", "num_replicas"),
    "warmup_steps": ("profile", "warmup_steps"),
    "job_warmup_steps": ("profile", "job_warmup_steps"),
    "profile_quantile": ("profile", "quantile"),
    "profile_window": ("profile", "window"),
    "stats_every": ("profile", "stats_every"),
    "refit_interval": ("refit", "interval"),
    "refit_tolerance": ("refit", "tolerance"),
    "background": ("refit", "background"),
    "recorder": ("recording", "recorder"),
    "store": ("recording", "store"),
    "steps": ("recording", "steps"),
    "record_device_ends": ("recording", "record_device_ends"),
    "is_primary": ("recording", "is_primary"),
}
_CLASSES: dict[str, type] = {"limits": BatchLimits, "placement": Placement,
                             "profile": ProfileOptions, "refit": RefitOptions,
                             "recording": RecordingOptions}


def hooks_options(keywords: dict[str, Any], **given: Any) -> HooksOptions:
    """The hooks' options from option objects (``given``: ``limits=``, ``placement=``,
    ``profile=``, ``refit=``, ``recording=``; None: not given) and the earlier keywords: THE
    one place that translates them.

    Raises:
        TypeError: an unknown keyword, an option object of the wrong type, or no batch
            limits (neither ``limits=`` nor ``init_batch_size=``).
        ValueError: a keyword given beside its option object, or a value the option
            objects refuse.

    Example:
        >>> hooks_options({"init_batch_size": 8, "refit_interval": 5.0}).refit.interval
        5.0
        >>> hooks_options({"refit_interval": 5.0}, limits=BatchLimits(init=8),
        ...               refit=RefitOptions())
        Traceback (most recent call last):
        ValueError: refit_interval (5.0): give it in refit= or as a keyword, not both
    """
    fields: dict[str, dict[str, Any]] = {group: {} for group in _CLASSES}
    for key, value in keywords.items():
        if key not in KEYWORDS:
            raise TypeError(f"GoodputHooks() got an unexpected keyword argument {key!r}")
        group, field = KEYWORDS[key]
        if given.get(group) is not None:
            raise ValueError(f"{key} ({value!r}): give it in {group}= or as a keyword, not both")
        fields[group][field] = value
    built: dict[str, Any] = {}
    for group, cls in _CLASSES.items():
        obj = given.get(group)
        if obj is None:
            if group == "limits" and "init" not in fields[group]:
                raise TypeError("GoodputHooks() needs its batch limits: limits=BatchLimits("
                                "init=...) or init_batch_size=")
            obj = cls(**fields[group])
        elif not isinstance(obj, cls):
            raise TypeError(f"{group} ({obj!r}) must be a {cls.__name__}")
        built[group] = obj
    return HooksOptions(**built)
