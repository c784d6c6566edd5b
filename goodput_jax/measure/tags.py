"""The monitor's TensorBoard tags: names, hint scalars and straggler scalars.

Pure functions of plain values (no I/O): which tag a hint's JSON key or a
straggler summary becomes. ``docs/tensorboard_tags.md`` lists them.

Example:
    >>> tag_part("my label!")
    'my_label_'
    >>> window_tag(3600.0)
    'goodput/interval_3600s'
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

__all__ = ["HINT_TAGS", "PRODUCTIVITY_TAGS", "JsonHints", "badput_scalars", "finite_number",
           "hint_scalars", "productivity_scalars", "straggler_scalars", "tag_part",
           "window_tag"]


#: TensorBoard tag -> the hint's JSON key, as ``goodput_jax.model.hints.Hints.to_json``
#: writes it (AdaptDL's camelCase names; ``tests/measure/test_monitor.py`` checks every key
#: against ``Hints``). No aliases: hints travel as ``Hints``.
HINT_TAGS: dict[str, str] = {
    "model/gradient_noise_scale": "gradientNoiseScale",
    "model/efficiency": "efficiency",
    "model/suggested_batch_size": "suggestedBatchSize",
    "model/suggested_accumulation_steps": "suggestedAccumSteps",
    "model/predicted_speedup": "predictedSpeedup",
    "model/suggested_atomic_batch_size": "suggestedAtomicBsz",
    "model/init_batch_size": "initBatchSize",
    "model/max_batch_size": "maxBatchSize",
    "model/atomic_batch_size": "atomicBsz",
    "model/accumulation_steps": "accumSteps",
    "model/num_replicas": "numReplicas",
    "model/num_nodes": "numNodes",
}

#: TensorBoard tag -> the :class:`~goodput_jax.measure.productivity.ProductivityGoodput`
#: field it shows (in %). ``docs/tensorboard_tags.md`` gives each formula.
PRODUCTIVITY_TAGS: dict[str, str] = {
    "productivity/scheduling_goodput": "scheduling_goodput",
    "productivity/runtime_goodput": "runtime_goodput",
    "productivity/program_goodput": "program_goodput",
    "productivity/ml_productivity_goodput": "ml_productivity_goodput",
    "productivity/ettr": "ettr",
    "productivity/mfu": "mfu",
}

TAG_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-/]")


def tag_part(text: str) -> str:
    """A label as a TensorBoard tag component: unsafe characters become ``_``."""
    return TAG_UNSAFE.sub("_", str(text)).strip("/") or "_"


def window_tag(window: float) -> str:
    return f"goodput/interval_{window:g}s"


def finite_number(v: Any) -> float | None:
    """``Any``: this is where the caller's value is checked (anything may come in; a one-line error
    names the argument and the value).
    """
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


@runtime_checkable
class JsonHints(Protocol):
    """Hints that give their JSON form (``goodput_jax.model.hints.Hints``)."""

    def to_json(self) -> Mapping[str, Any]:
        """The hints as AdaptDL's JSON keys.

        ``Any``: the values are JSON-like (numbers, strings, lists, nested dicts), as stored or
        uploaded.
        """
        ...


def badput_scalars(badput: Mapping[Any, Any], details: Mapping[str, Any], *,
                   reference: bool = False, elastic: bool = False) -> dict[str, float]:
    """The badput tags of one goodput upload (%), and ``goodput/productive_time`` and
    ``goodput/total_time`` (s).

    Args:
        badput: ``get_job_goodput(include_badput_breakdown=True)[1]``: {BadputType: %}
            (a custom-badput dict value is skipped: custom badput comes from ``details``).
        details: ``get_job_goodput_details()`` (``total_time``, ``productive_time``,
            ``custom_badput_time`` {label: s}).
        reference: ml-goodput-measurement's tags: ``badput/<google name>`` (no
            ``ELASTIC_*`` unless ``elastic``; recompilation only when it holds time) and
            ``badput/custom_badput_events/<label>``; else ``badput/<type>`` and
            ``badput/custom/<label>``.

    Example:
        >>> from goodput_jax.measure.badput import BadputType
        >>> for tag, value in badput_scalars({BadputType.DATA_LOADING: 5.0},
        ...                                  {"total_time": 10.0, "productive_time": 9.0,
        ...                                   "custom_badput_time": {"eval": 0.5}}).items():
        ...     print(tag, value)
        badput/data_loading 5.0
        goodput/productive_time 9.0
        goodput/total_time 10.0
        badput/custom/eval 5.0

    ``Any``: the values are JSON-like (numbers, strings, lists, nested dicts), as stored or
    uploaded.
    """
    from goodput_jax.measure.badput import GOOGLE_NAMES

    values: dict[str, float] = {}
    for kind, pct in badput.items():
        if isinstance(pct, dict):
            continue
        if not reference:
            values[f"badput/{kind.name.lower()}"] = float(pct)
            continue
        name = GOOGLE_NAMES.get(kind.name, kind.name)
        if kind.name == "CUSTOM_BADPUT_EVENTS" or (name.startswith("ELASTIC_") and not elastic) \
                or (kind.name == "RECOMPILATION" and not pct):
            continue
        values[f"badput/{name.lower()}"] = float(pct)
    total = float(details["total_time"])
    values["goodput/productive_time"] = float(details["productive_time"])
    values["goodput/total_time"] = total
    if total > 0:
        prefix = "badput/custom_badput_events/" if reference else "badput/custom/"
        for label, secs in sorted(details.get("custom_badput_time", {}).items()):
            values[prefix + tag_part(label.lower() if reference else label)] = \
                100.0 * float(secs) / total
    return values


def hint_scalars(hints: Any) -> dict[str, float]:
    """TensorBoard scalars from the training hooks' latest hints.

    Args:
        hints: a ``goodput_jax.model.hints.Hints`` (anything with its ``to_json()``), its
            JSON form (what ``GoodputCalculator.get_latest_hints()`` returns), or None.

    The keys read are the JSON keys of ``Hints`` (see :data:`HINT_TAGS`); the monitor
    (the light core, which imports no ``goodput_jax.model``) reads the numbers only and
    skips what is missing or not a finite number, so a malformed hint never fails an
    upload (``Hints.from_json`` is the strict parser). ``gradParams {"norm", "var"}``
    give ``model/grad_norm_sqr`` and ``model/grad_variance``; when no noise scale was
    published it is derived as ``initBatchSize * var / norm`` (AdaptDL's convention:
    ``var`` is the gradient variance at ``initBatchSize``, ``norm`` the squared norm).

    Example:
        >>> for tag, value in hint_scalars({"gradParams": {"norm": 2.0, "var": 4.0},
        ...                                 "initBatchSize": 32}).items():
        ...     print(tag, value)
        model/init_batch_size 32.0
        model/grad_norm_sqr 2.0
        model/grad_variance 4.0
        model/gradient_noise_scale 64.0

    ``Any``: published hints come as a JSON dict or as an object with ``to_json()``; only finite
    numbers are read.
    """
    if not isinstance(hints, Mapping) and isinstance(hints, JsonHints):
        hints = hints.to_json()
    if not isinstance(hints, Mapping):
        return {}
    out: dict[str, float] = {}
    for tag, key in HINT_TAGS.items():
        v = finite_number(hints.get(key))
        if v is not None:
            out[tag] = v
    grad = hints.get("gradParams")
    if isinstance(grad, Mapping):
        norm = finite_number(grad.get("norm"))
        var = finite_number(grad.get("var"))
        if norm is not None:
            out["model/grad_norm_sqr"] = norm
        if var is not None:
            out["model/grad_variance"] = var
        init_bsz = out.get("model/init_batch_size")
        if (
            "model/gradient_noise_scale" not in out
            and norm is not None and norm > 0 and var is not None and init_bsz is not None
        ):
            out["model/gradient_noise_scale"] = init_bsz * var / norm
    return out


def productivity_scalars(result: Any) -> dict[str, float]:
    """TensorBoard scalars (%) of a job's ML Productivity Goodput.

    Args:
        result: ``GoodputCalculator.get_productivity_goodput()``
            (:class:`~goodput_jax.measure.productivity.ProductivityGoodput`), or None.

    Each tag of :data:`PRODUCTIVITY_TAGS` is written only when its figure exists (a finite
    number): a job without a recorded program cost has no program goodput, no MFU and so
    no product, and gets no ``productivity/program_goodput``, ``productivity/mfu`` or
    ``productivity/ml_productivity_goodput`` (not a 0); a job with no held time yet has
    no runtime goodput.

    Example:
        >>> from goodput_jax.measure.productivity import (ProgramGoodput, SchedulingSpan,
        ...     SchedulingTimeline, productivity)
        >>> tl = SchedulingTimeline.of([SchedulingSpan(0, 20, False, "queued"),
        ...                             SchedulingSpan(20, 100, True, "running")])
        >>> for k, v in productivity_scalars(
        ...         productivity(tl, 60.0, ProgramGoodput((), 0.5, 0.4, 10))).items():
        ...     print(k, round(v, 6))
        productivity/scheduling_goodput 80.0
        productivity/runtime_goodput 75.0
        productivity/program_goodput 50.0
        productivity/ml_productivity_goodput 30.0
        productivity/ettr 60.0
        productivity/mfu 40.0
        >>> for k, v in productivity_scalars(
        ...         productivity(tl, 60.0, ProgramGoodput((), math.nan, math.nan, 0))).items():
        ...     print(k, v)
        productivity/scheduling_goodput 80.0
        productivity/runtime_goodput 75.0
        productivity/ettr 60.0

    ``Any``: a calculator result (a ProductivityGoodput), read by its fields; the light core
    imports no calculator here.
    """
    if result is None:
        return {}
    out: dict[str, float] = {}
    for tag, field in PRODUCTIVITY_TAGS.items():
        v = finite_number(getattr(result, field))
        if v is not None:
            out[tag] = 100.0 * v
    return out


def straggler_scalars(stragglers: Any, top: int = 3) -> dict[str, float]:
    """TensorBoard scalars of a :class:`~goodput_jax.measure.stragglers.Stragglers`.

    Empty for a job that one host records (``num_hosts <= 1``). Otherwise:
    ``stragglers/num_hosts``, ``stragglers/steps_compared``,
    ``stragglers/total_lost_seconds`` (seconds the hosts waited for the last one, summed
    over the steps), ``stragglers/max_lag_seconds`` (the worst step's lag) and, for the
    ``top`` slowest hosts ``<h>`` (their process index), ``stragglers/host_<h>/lost_seconds``,
    ``stragglers/host_<h>/share`` (% of the straggler time) and
    ``stragglers/host_<h>/steps_last`` (steps it held back); ``stragglers/slowest_host``
    is the slowest host's index (-1 when no host held a step back).

    Example:
        >>> import numpy as np
        >>> from goodput_jax.measure.events import KIND_CODES, EventKind as K
        >>> from goodput_jax.measure.stragglers import step_stragglers
        >>> st = step_stragglers(np.full(2, KIND_CODES[K.STEP_START]), np.zeros(2, int),
        ...                      np.array([0, 1]), np.array([0.0, 0.5]), np.zeros(2, int))
        >>> straggler_scalars(st)["stragglers/host_1/lost_seconds"]
        0.5

    ``Any``: a calculator result (Stragglers), read by its fields; the light core imports no
    calculator here.
    """
    if stragglers is None or int(stragglers.num_hosts) <= 1:
        return {}
    summary = stragglers.as_dict(top=top)
    out = {
        "stragglers/num_hosts": float(summary["num_hosts"]),
        "stragglers/steps_compared": float(summary["num_steps"]),
        "stragglers/total_lost_seconds": float(summary["total_lost"]),
        "stragglers/max_lag_seconds": float(summary["max_lag"]),
        "stragglers/slowest_host": float(summary["slowest"][0]["host"])
        if summary["slowest"] else -1.0,
    }
    for h in summary["slowest"]:
        base = f"stragglers/host_{int(h['host'])}/"
        out[base + "lost_seconds"] = float(h["lost_time"])
        out[base + "share"] = 100.0 * float(h["share"])
        out[base + "steps_last"] = float(h["steps_last"])
    return out


#: protocols written through fsspec, and the package (and extra) each needs
