"""The calculator's result shapes and the pure functions that compute them.

:class:`NoEventsError`, :data:`BUCKET_TYPES` (the engine's buckets, in order),
:class:`StepDeviation`, the goodput formula (:func:`goodput_percent`), the badput
percentages (:func:`breakdown`), the step-time rules (:func:`mad_limit`,
:func:`estimate_ideal_step_time`, :func:`check_ideal`) and the program goodput of recorded
program costs (:func:`program_goodput_of`). ``goodput_jax.measure.calculator`` re-exports
them.

Example:
    >>> goodput_percent(3.0, 4.0), estimate_ideal_step_time([1.0, 1.0, 9.0])
    (75.0, 1.0)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from goodput_jax.measure.badput import BUCKET_NAMES, BadputType
from goodput_jax.measure.engine.codes import payload
from goodput_jax.measure.productivity import (
    DevicePeak,
    ProgramCost,
    ProgramGoodput,
    combine_programs,
    lookup_peak,
    program_stats,
)

__all__ = ["BUCKET_TYPES", "NoEventsError", "StepDeviation", "breakdown", "check_ideal",
           "estimate_ideal_step_time", "goodput_percent", "mad_limit", "program_goodput_of",
           "step_deviation_of"]


class NoEventsError(ValueError):
    """The store holds no timeline events for the job (message names store and job)."""


#: The badput types of the engine's per-bucket seconds, in their order: ``acc[i]`` of
#: ``Engine.totals()`` is ``BUCKET_TYPES[i]`` (the seam :func:`breakdown` and the drop-ins use).
BUCKET_TYPES: tuple[BadputType, ...] = tuple(BadputType[name] for name in BUCKET_NAMES)


@dataclasses.dataclass(frozen=True)
class StepDeviation:
    """Step-time statistics of the live (productive) steps.

    Attributes:
        num_steps: number of completed productive steps.
        median: median step time (s).
        p90: 90th percentile step time (s).
        mean: mean step time (s).
        ideal_step_time: the configured ideal, or a robust estimate (median of
            the steps within median + 3 MAD).
        ideal_source: ``"configured"`` or ``"estimated"``.
        steps: step numbers (int64 array).
        step_times: productive seconds of each step (float64 array).
        deviations: ``step_times - ideal_step_time`` (float64 array).
    """

    num_steps: int
    median: float
    p90: float
    mean: float
    ideal_step_time: float
    ideal_source: str
    steps: np.ndarray
    step_times: np.ndarray
    deviations: np.ndarray

    @property
    def step_deviation(self) -> dict[int, float]:
        """``{step: step_time - ideal}`` like Google's step-deviation dict."""
        return dict(zip(self.steps.tolist(), self.deviations.tolist()))

    def as_dict(self) -> dict:
        """Summary (no per-step arrays) for JSON / TensorBoard."""
        return {
            "num_steps": self.num_steps,
            "median": self.median,
            "p90": self.p90,
            "mean": self.mean,
            "ideal_step_time": self.ideal_step_time,
            "ideal_source": self.ideal_source,
            "max_abs_deviation": float(np.max(np.abs(self.deviations))) if self.num_steps else 0.0,
        }


def check_ideal(value: Any) -> float | None:
    """A ``configured_ideal_step_time``, validated: None, or a positive finite float.

    Raises:
        TypeError, ValueError: naming ``configured_ideal_step_time`` and the value.

    Example:
        >>> check_ideal(2), check_ideal(None)
        (2.0, None)

    ``Any``: this is where the caller's value is checked (anything may come in; a one-line error
    names the argument and the value).
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"configured_ideal_step_time ({value!r}) must be a positive float or None")
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"configured_ideal_step_time ({value!r}) must be a positive finite float")
    return v


def program_goodput_of(rows: list, steps: np.ndarray, secs: np.ndarray, peak: DevicePeak | None,
                     peak_table: dict[str, DevicePeak] | None) -> ProgramGoodput:
    """Each recorded program's stats over its productive steps (see
    ``GoodputCalculator.get_program_goodput``): ``rows`` are the engine's
    ``(timestamp, first step, payload)`` of each program cost; ``steps`` / ``secs`` the
    live steps and their productive seconds."""
    progs = []
    for t, step, label in rows:
        p = payload(label)
        try:
            cost = ProgramCost.from_payload(p)
        except (KeyError, TypeError, ValueError):
            continue
        first = int(step) if step is not None and int(step) >= 0 else None
        progs.append((first, t, cost))
    known = sorted(((f, t, c) for f, t, c in progs if f is not None), key=lambda x: x[0])
    out = []
    for i, (first, _t, cost) in enumerate(known):
        nxt = known[i + 1][0] if i + 1 < len(known) else None
        sel = steps >= first
        if nxt is not None:
            sel &= steps < nxt
        times = secs[sel]
        if times.size > 1 and steps[sel][0] == first:
            times = times[1:]  # the program's first step holds its compile
        # the caller's peak, then the caller's table, then what the runtime recorded, then
        # the published table
        pk = peak
        if pk is None and peak_table:
            pk = lookup_peak(cost.device_kind, peak_table)
        if pk is None:
            pk = cost.peak if cost.peak is not None else lookup_peak(cost.device_kind)
        if pk is None:
            continue
        out.append(program_stats(cost, pk, times, first))
    return combine_programs(out)


def mad_limit(step_times: Any) -> float:
    """The anomalous-step limit, median + 3 MAD (median absolute deviation), of step times.

    The one home of the rule: the calculator's ideal step time and the drop-ins'
    (Google's) ideal and anomalous-step helpers all split at this limit; a step above it
    is anomalous (with MAD 0 the limit is the median).

    Example:
        >>> round(mad_limit([1.0, 1.1, 0.9, 1.0, 30.0]), 6)
        1.3

    ``Any``: this is where the caller's value is checked (anything may come in; a one-line error
    names the argument and the value).
    """
    x = np.asarray(step_times, dtype=np.float64)
    if x.size == 0:
        raise ValueError("step_times (empty) must contain at least one step time")
    med = float(np.median(x))
    return med + 3.0 * float(np.median(np.abs(x - med)))


def goodput_percent(productive: float, total: float) -> float:
    """Goodput in percent: ``100 * productive / total`` seconds (NaN when ``total`` <= 0).

    The one home of the formula, for the calculator, the drop-ins and the reports.

    Example:
        >>> goodput_percent(3.0, 4.0)
        75.0
    """
    return 100.0 * float(productive) / float(total) if total > 0 else float("nan")


def estimate_ideal_step_time(step_times: Any) -> float:
    """Robust ideal step time: median of the steps within median + 3 MAD (:func:`mad_limit`).

    Excludes compile-heavy first steps and stragglers.

    Example:
        >>> estimate_ideal_step_time([1.0, 1.1, 0.9, 1.0, 30.0])
        1.0

    ``Any``: this is where the caller's value is checked (anything may come in; a one-line error
    names the argument and the value).
    """
    x = np.asarray(step_times, dtype=np.float64)
    normal = x[x <= mad_limit(x)]
    return float(np.median(normal)) if normal.size else float(np.median(x))


def breakdown(acc: list[float], total: float, async_s: float = 0.0) -> dict[BadputType, float]:
    """Badput percentages from the engine's per-bucket seconds (the calculator's rule).

    Args:
        acc: seconds per bucket in :data:`BUCKET_TYPES` order (``Engine.totals()[1]``).
        total: the job seconds the percentages are of (productive + ``sum(acc)``), > 0.
        async_s: asynchronous data-loading seconds: reported as ``DATA_LOADING_ASYNC``
            beside the others, not part of the 100 % (it did not block training).

    Returns:
        ``{BadputType: %}`` for every bucket and ``DATA_LOADING_ASYNC``.

    Raises:
        ValueError: ``acc`` has not one entry per bucket, or ``total`` is not positive.

    Example:
        >>> acc = [0.0] * len(BUCKET_TYPES)
        >>> acc[BUCKET_TYPES.index(BadputType.OTHER)] = 5.0
        >>> breakdown(acc, 20.0)[BadputType.OTHER]
        25.0
    """
    if len(acc) != len(BUCKET_TYPES):
        raise ValueError(f"acc ({len(acc)} entries) must hold one entry per bucket "
                         f"({len(BUCKET_TYPES)}, in BUCKET_TYPES order)")
    if not total > 0:
        raise ValueError(f"total ({total!r}) must be positive")
    out = {t: 100.0 * acc[i] / total for i, t in enumerate(BUCKET_TYPES)}
    # reported beside the others, not part of the 100 % (it did not block training)
    out[BadputType.DATA_LOADING_ASYNC] = 100.0 * async_s / total
    return out


def step_deviation_of(steps: np.ndarray, times: np.ndarray,
                      ideal_cfg: float | None) -> StepDeviation:
    """:class:`StepDeviation` of the live ``steps`` and their productive seconds ``times``
    (``GoodputCalculator.get_step_deviation``); ``ideal_cfg`` None: estimated.

    Example:
        >>> d = step_deviation_of(np.arange(3), np.array([1.0, 1.0, 4.0]), None)
        >>> d.median, d.ideal_step_time, d.ideal_source
        (1.0, 1.0, 'estimated')
    """
    if times.size == 0:
        nan = float("nan")
        ideal = ideal_cfg if ideal_cfg is not None else nan
        return StepDeviation(0, nan, nan, nan, ideal,
                             "configured" if ideal_cfg is not None else "estimated",
                             steps, times, times.copy())
    med = float(np.median(times))
    if ideal_cfg is not None:
        ideal, source = ideal_cfg, "configured"
    else:
        ideal, source = estimate_ideal_step_time(times), "estimated"
    return StepDeviation(
        num_steps=int(times.size),
        median=med,
        p90=float(np.percentile(times, 90)),
        mean=float(times.mean()),
        ideal_step_time=ideal,
        ideal_source=source,
        steps=steps,
        step_times=times,
        deviations=times - ideal,
    )
