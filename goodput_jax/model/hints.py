"""The scheduling hints a training job publishes: one typed record with strict JSON.

The training hooks write a :class:`Hints` (``hooks.hints()``), the store keeps its
JSON, and the scheduler (:mod:`goodput_jax.sched.hints`), the report and the
monitor read it back with :meth:`Hints.from_json`. The JSON keys are AdaptDL's
(``perfParams``, ``gradParams``, ``initBatchSize`` ...) so AdaptDL-style job
status works unchanged. Parsing is strict: an unknown key, a wrong type or an
out-of-range value raises an error that names the key.

Heterogeneous clusters (Sia): a job may carry step-time parameters per
accelerator type (``perfParamsByType``) and the throughput it measured at its
minimum GPU count on each type (``minThroughputByType``, Sia's bootstrap
profile). :meth:`Hints.perf_params_for` returns the parameters for a type, fitted
on that type if it has been observed there, otherwise bootstrapped from an
observed type by the ratio of the two types' throughputs at the minimum count.

This module is plain Python (no JAX).

Example:
    >>> h = Hints.from_json({"perfParams": {"alpha_c": 0.1, "beta_c": 0.01, "alpha_n": 0.0,
    ...     "beta_n": 0.0, "alpha_r": 0.0, "beta_r": 0.0, "gamma": 1.0}, "initBatchSize": 32})
    >>> h.init_batch_size, h.perf_params.alpha_c
    (32, 0.1)
    >>> Hints.from_json(h.to_json()) == h
    True
    >>> Hints.from_json({"initBatchSize": "big"})
    Traceback (most recent call last):
    ...
    TypeError: hint 'initBatchSize' must be a finite number, got 'big'
"""

from __future__ import annotations

import math
import numbers
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from goodput_jax.model.types import GradParams, PerfParams

__all__ = ["PERF_PARAM_KEYS", "Hints", "bootstrap_perf_params", "max_replicas_allowed"]

#: Keys of ``perfParams``, in PerfParams order.
PERF_PARAM_KEYS = PerfParams._fields

_EMPTY: Mapping = types.MappingProxyType({})
_V = TypeVar("_V")


def _number(key: str, value: Any, *, positive: bool = False, integer: bool = False,
            nonneg: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise TypeError(f"hint {key!r} must be a finite number, got {value!r}")
    x = float(value)
    if integer and not x.is_integer():
        raise ValueError(f"hint {key!r} must be an integer, got {value!r}")
    if positive and x <= 0:
        raise ValueError(f"hint {key!r} must be > 0, got {value!r}")
    if nonneg and x < 0:
        raise ValueError(f"hint {key!r} must be >= 0, got {value!r}")
    return int(x) if integer else x


def _perf(key: str, value: Any) -> PerfParams:
    if isinstance(value, PerfParams):
        value = value._asdict()
    if not isinstance(value, Mapping):
        raise TypeError(f"hint {key!r} must be a mapping of {', '.join(PERF_PARAM_KEYS)}, "
                        f"got {value!r}")
    extra = set(value) - set(PERF_PARAM_KEYS)
    if extra:
        raise ValueError(f"hint {key!r} has unknown key {min(extra)!r}")
    out = []
    for name in PERF_PARAM_KEYS:
        if name not in value:
            raise ValueError(f"hint {key!r} is missing key {name!r}")
        label = name if key == "perfParams" else f"{key}.{name}"
        out.append(_number(label, value[name], positive=name == "gamma"))
    return PerfParams(*out)


def _grad(key: str, value: Any) -> GradParams:
    if isinstance(value, GradParams):
        value = {"norm": value.sqr, "var": value.var}
    if not isinstance(value, Mapping):
        raise TypeError(f"hint {key!r} must be a mapping with 'norm' and 'var', got {value!r}")
    extra = set(value) - {"norm", "var"}
    if extra:
        raise ValueError(f"hint {key!r} has unknown key {min(extra)!r}")
    for name in ("norm", "var"):
        if name not in value:
            raise ValueError(f"hint {key!r} is missing key {name!r}")
    return GradParams(_number("norm", value["norm"]), _number("var", value["var"]))


def _type_map(key: str, value: Any, convert: Callable[[str, Any], _V]) -> Mapping[str, _V]:
    if not isinstance(value, Mapping):
        raise TypeError(f"hint {key!r} must be a mapping of accelerator type to values, "
                        f"got {value!r}")
    out: dict[str, _V] = {}
    for name, item in value.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"hint {key!r}: accelerator types must be non-empty str, "
                            f"got {name!r}")
        out[name] = convert(f"{key}.{name}", item)
    return types.MappingProxyType(dict(sorted(out.items())))


def _bounds(key: str, value: Any) -> tuple[int | None, int | None]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ValueError(f"hint {key!r} must be [min, max], got {value!r}")
    lo, hi = value
    for name, v in (("min", lo), ("max", hi)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, numbers.Real) or v < 0):
            raise ValueError(f"hint {key!r} {name} must be a number >= 0 or null, got {v!r}")
    if lo and hi and lo > hi:
        raise ValueError(f"hint {key!r} min ({lo}) > max ({hi})")
    return (None if lo is None else int(lo), None if hi is None else int(hi))


# JSON key -> (field name, parser or None for plain numbers, number options)
_INT = {"integer": True}
_POS_INT = {"integer": True, "positive": True}
_SPEC: dict[str, tuple[str, Any]] = {
    "perfParams": ("perf_params", _perf),
    "gradParams": ("grad_params", _grad),
    "initBatchSize": ("init_batch_size", _POS_INT),
    "maxBatchSize": ("max_batch_size", _POS_INT),
    "localBszBounds": ("local_bsz_bounds", _bounds),
    "gradientAccumulation": ("gradient_accumulation", bool),
    "maxProfiledReplicas": ("max_profiled_replicas", _INT),
    "numNodes": ("num_nodes", _INT),
    "numReplicas": ("num_replicas", _INT),
    "atomicBsz": ("atomic_bsz", _INT),
    "accumSteps": ("accum_steps", _INT),
    "gradientNoiseScale": ("gradient_noise_scale", {}),
    "efficiency": ("efficiency", {}),
    "suggestedBatchSize": ("suggested_batch_size", _INT),
    "suggestedAtomicBsz": ("suggested_atomic_bsz", _INT),
    "suggestedAccumSteps": ("suggested_accum_steps", _INT),
    "predictedSpeedup": ("predicted_speedup", {}),
    "acceleratorType": ("accelerator_type", str),
    "gradStatsNote": ("grad_stats_note", str),
    "perfParamsByType": ("perf_params_by_type", "perf_map"),
    "minThroughputByType": ("min_throughput_by_type", "thr_map"),
}
_FIELD_TO_KEY = {f: k for k, (f, _) in _SPEC.items()}


def _parse(key: str, value: Any) -> Any:
    _name, kind = _SPEC[key]
    if value is None:
        if kind in ("perf_map", "thr_map"):
            return _EMPTY
        if kind is bool:
            return False
        if key == "maxProfiledReplicas":
            return 0
        return None
    if kind is bool:
        if not isinstance(value, bool):
            raise TypeError(f"hint {key!r} must be a bool, got {value!r}")
        return value
    if kind is str:
        if not isinstance(value, str) or not value:
            raise TypeError(f"hint {key!r} must be a non-empty str, got {value!r}")
        return value
    if kind == "perf_map":
        return _type_map(key, value, _perf)
    if kind == "thr_map":
        return _type_map(key, value, lambda k, v: _number(k, v, positive=True))
    if isinstance(kind, dict):
        return _number(key, value, **kind)
    return kind(key, value)


def max_replicas_allowed(max_profiled_replicas: int) -> int:
    """Most replicas a job may be given or asked about: AdaptDL's allocator rule.

    ``max(2 * max_profiled_replicas, 1)``: at most twice the largest replica count the
    step-time model was fitted on (``adaptdl_sched/allocator.py``), one before any
    profile. The one home of the rule: the scheduler's hints, the simulator's policies and
    the training hooks' search all call it.

    Raises:
        ValueError: ``max_profiled_replicas`` is not a non-negative integer.

    Example:
        >>> max_replicas_allowed(0), max_replicas_allowed(2)
        (1, 4)
    """
    if (isinstance(max_profiled_replicas, bool)
            or not isinstance(max_profiled_replicas, numbers.Integral)
            or max_profiled_replicas < 0):
        raise ValueError(f"max_profiled_replicas must be an integer >= 0, "
                         f"got {max_profiled_replicas!r}")
    return max(2 * int(max_profiled_replicas), 1)


def bootstrap_perf_params(observed: PerfParams, throughput_observed: float,
                          throughput_target: float) -> PerfParams:
    """Step-time parameters for an unobserved accelerator type (Sia's bootstrap).

    Every time term of the step-time model is scaled by
    ``throughput_observed / throughput_target`` (the ratio of the two types'
    throughputs at the job's minimum GPU count), so the bootstrapped model
    predicts exactly the measured throughput at that count and the observed
    type's scaling shape elsewhere. ``gamma`` is kept.

    Example:
        >>> p = PerfParams(0.1, 0.01, 0.2, 0.02, 0.1, 0.01, 1.5)
        >>> bootstrap_perf_params(p, 100.0, 400.0).beta_c
        0.0025
    """
    r = float(throughput_observed) / float(throughput_target)
    if not (math.isfinite(r) and r > 0):
        raise ValueError(f"throughput ratio must be positive and finite, got "
                         f"{throughput_observed!r} / {throughput_target!r}")
    o = observed
    return PerfParams(float(o.alpha_c) * r, float(o.beta_c) * r, float(o.alpha_n) * r,
                      float(o.beta_n) * r, float(o.alpha_r) * r, float(o.beta_r) * r,
                      float(o.gamma))


@dataclass(frozen=True)
class Hints:
    """What a job publishes for the scheduler (AdaptDL's ``status.train``), typed.

    Every field is optional (``None``) unless stated; JSON keys are camelCase
    (``perf_params`` <-> ``perfParams``).

    Attributes:
        perf_params: fitted step-time model on the type the job runs on.
        grad_params: gradient statistics (``norm`` = |G|^2, ``var`` = tr Sigma).
        init_batch_size: the batch size the job was configured with (> 0).
        max_batch_size: largest total batch size it accepts (>= init_batch_size).
        local_bsz_bounds: ``(min, max)`` per-replica batch size (either may be None).
        gradient_accumulation: whether accumulation may be used (default False).
        max_profiled_replicas: largest replica count profiled so far (default 0).
        num_nodes, num_replicas, atomic_bsz, accum_steps: the current configuration.
        gradient_noise_scale, efficiency, predicted_speedup: model read-outs.
        suggested_batch_size, suggested_atomic_bsz, suggested_accum_steps: the
            model's suggestion for the current allocation.
        accelerator_type: the type the job runs on now (e.g. ``"a100"``, ``"v5e"``).
        perf_params_by_type: step-time parameters fitted on each observed type.
        min_throughput_by_type: samples/s at the minimum GPU count on each
            profiled type (Sia's bootstrap profile).

    Example:
        >>> Hints(init_batch_size=64, accelerator_type="t4").to_json()["acceleratorType"]
        't4'
    """

    perf_params: PerfParams | None = None
    grad_params: GradParams | None = None
    init_batch_size: int | None = None
    max_batch_size: int | None = None
    local_bsz_bounds: tuple[int | None, int | None] | None = None
    gradient_accumulation: bool = False
    max_profiled_replicas: int = 0
    num_nodes: int | None = None
    num_replicas: int | None = None
    atomic_bsz: int | None = None
    accum_steps: int | None = None
    gradient_noise_scale: float | None = None
    efficiency: float | None = None
    suggested_batch_size: int | None = None
    suggested_atomic_bsz: int | None = None
    suggested_accum_steps: int | None = None
    predicted_speedup: float | None = None
    accelerator_type: str | None = None
    grad_stats_note: str | None = None
    perf_params_by_type: Mapping[str, PerfParams] = field(default_factory=lambda: _EMPTY)
    min_throughput_by_type: Mapping[str, float] = field(default_factory=lambda: _EMPTY)

    def __post_init__(self) -> None:
        for f in fields(self):
            key = _FIELD_TO_KEY[f.name]
            value = getattr(self, f.name)
            if f.name in ("perf_params", "grad_params") and value is not None:
                value = _parse(key, value)  # accepts PerfParams / GradParams / mappings
            elif f.name not in ("perf_params", "grad_params"):
                if f.name == "local_bsz_bounds" and value is None:
                    continue
                value = _parse(key, _to_json_value(value))
            object.__setattr__(self, f.name, value)
        if (self.max_batch_size is not None and self.init_batch_size is not None
                and self.max_batch_size < self.init_batch_size):
            raise ValueError(f"hint 'maxBatchSize' ({self.max_batch_size}) < 'initBatchSize' "
                             f"({self.init_batch_size})")

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Hints:
        """Parses the JSON form (a mapping with the camelCase keys); strict.

        Typed ``Any``: JSON values are ``Any`` (validated here).

        Raises:
            TypeError / ValueError: naming the unknown, missing or malformed key.

        Example:
            >>> Hints.from_json({"maxProfiledReplicas": 2}).max_profiled_replicas
            2
            >>> Hints.from_json({"batch": 2})
            Traceback (most recent call last):
            ...
            ValueError: unknown hint 'batch' (known: perfParams, gradParams, ...)
        """
        if isinstance(data, Hints):
            return data
        if not isinstance(data, Mapping):
            raise TypeError(f"hints must be a mapping, got {type(data).__name__}")
        kwargs = {}
        for key, value in data.items():
            if key not in _SPEC:
                raise ValueError(f"unknown hint {key!r} (known: perfParams, gradParams, ...)")
            kwargs[_SPEC[key][0]] = _parse(key, value)
        return cls(**kwargs)

    def to_json(self) -> dict[str, Any]:
        """The JSON form: every key, ``None`` for unknown values.

        Typed ``Any``: JSON values are ``Any``.

        Example:
            >>> Hints(max_profiled_replicas=4).to_json()["maxProfiledReplicas"]
            4
        """
        return {key: _to_json_value(getattr(self, name)) for key, (name, _) in _SPEC.items()}

    def perf_params_for(self, accelerator_type: str) -> PerfParams | None:
        """Step-time parameters on ``accelerator_type``: fitted, or bootstrapped (Sia).

        Fitted parameters of that type win. Otherwise the parameters of an
        observed type (the current ``accelerator_type`` first, else the first
        observed type by name) are scaled by the ratio of the two types'
        throughputs at the minimum GPU count (``min_throughput_by_type``). With
        no fitted type, or no throughput for the pair, returns None.

        Example:
            >>> p = PerfParams(0.1, 0.01, 0.2, 0.02, 0.1, 0.01, 1.5)
            >>> h = Hints(perf_params_by_type={"t4": p},
            ...           min_throughput_by_type={"t4": 100.0, "a100": 400.0})
            >>> h.perf_params_for("a100").alpha_c
            0.025
        """
        fitted = dict(self.perf_params_by_type)
        if self.perf_params is not None and self.accelerator_type is not None:
            fitted.setdefault(self.accelerator_type, self.perf_params)
        if accelerator_type in fitted:
            return fitted[accelerator_type]
        if not fitted:
            return None
        order = sorted(fitted)
        if self.accelerator_type in fitted:
            order.remove(self.accelerator_type)
            order.insert(0, self.accelerator_type)
        thr = self.min_throughput_by_type
        if accelerator_type not in thr:
            return None
        for name in order:
            if name in thr:
                return bootstrap_perf_params(fitted[name], thr[name], thr[accelerator_type])
        return None


def _to_json_value(value: Any) -> Any:
    if isinstance(value, PerfParams):
        return {k: float(v) for k, v in value._asdict().items()}
    if isinstance(value, GradParams):
        return {"norm": float(value.sqr), "var": float(value.var)}
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Mapping):
        return {k: _to_json_value(v) for k, v in value.items()}
    return value
