"""Advice that follows from the measurements: a checkpoint interval and a finish forecast.

Light core (the standard library only).

* :func:`daly_interval`: the optimum compute time between checkpoints for a save that
  costs ``delta`` seconds and failures with mean time between them ``M`` (Young 1974:
  ``sqrt(2 delta M)``; Daly 2006's higher-order estimate, used by default, is closer for a
  save cost that is not small against ``M``).
* :func:`expected_goodput`: the share of wall time spent on work that is kept, for an
  interval, under Poisson failures (Daly 2006's exact expectation, with restart cost).
* :func:`checkpoint_advice` / :func:`finish_forecast`: typed results from measured
  numbers (``GoodputCalculator.get_checkpoint_advice`` and ``get_finish_forecast``).

References: J. W. Young, "A first order approximation to the optimum checkpoint
interval", CACM 17(9), 1974; J. T. Daly, "A higher order estimate of the optimum
checkpoint interval for restart dumps", FGCS 22(3), 2006.

Example:
    >>> round(daly_interval(60.0, 86400.0, method="young"))
    3220
    >>> round(expected_goodput(3220.0, 60.0, 86400.0), 3)
    0.963
"""

from __future__ import annotations

import dataclasses
import math

__all__ = ["CheckpointAdvice", "FinishForecast", "checkpoint_advice", "daly_interval",
           "expected_goodput", "finish_forecast"]


def _pos(value: float, name: str, *, zero: bool = False) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{name} ({value!r}) must be a finite number")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} ({value!r}) must be a finite number") from None
    if not math.isfinite(v) or v < 0 or (v == 0 and not zero):
        raise ValueError(f"{name} ({value!r}) must be a finite number "
                         f"{'>= 0' if zero else '> 0'}")
    return v


def daly_interval(save_cost_s: float, mtbf_s: float, method: str = "daly") -> float:
    """Optimum seconds of work between checkpoints.

    Args:
        save_cost_s: seconds a save takes from training (its blocking part), > 0.
        mtbf_s: mean time between failures, seconds, > 0.
        method: ``'young'`` (``sqrt(2 delta M)``) or ``'daly'`` (Daly 2006, eq. 37:
            ``sqrt(2 delta M) [1 + sqrt(delta / 2M) / 3 + delta / 18M] - delta`` for
            ``delta < 2M``, else ``M``).

    Example:
        >>> round(daly_interval(60.0, 86400.0))
        3180
    """
    d = _pos(save_cost_s, "save_cost_s")
    m = _pos(mtbf_s, "mtbf_s")
    if method == "young":
        return math.sqrt(2.0 * d * m)
    if method != "daly":
        raise ValueError(f"method ({method!r}) must be 'young' or 'daly'")
    if d >= 2.0 * m:
        return m
    return math.sqrt(2.0 * d * m) * (1.0 + math.sqrt(d / (2.0 * m)) / 3.0 + d / (18.0 * m)) - d


def expected_goodput(interval_s: float, save_cost_s: float, mtbf_s: float,
                     restart_s: float = 0.0) -> float:
    """Expected share of wall time spent on kept work, checkpointing every ``interval_s``.

    Failures arrive as a Poisson process (mean ``mtbf_s``) at any time, during work, saves
    and restarts alike; a failure loses the work since the last completed save and costs
    ``restart_s`` (itself interruptible). Daly 2006: one segment of ``tau`` seconds of work
    takes ``M e^{R/M} (e^{(tau + delta)/M} - 1)`` seconds on average, so the goodput is
    ``tau`` over that (exact under these assumptions).

    Example:
        >>> round(expected_goodput(3600.0, 0.0, 1e12), 6)
        1.0
    """
    tau = _pos(interval_s, "interval_s")
    d = _pos(save_cost_s, "save_cost_s", zero=True)
    m = _pos(mtbf_s, "mtbf_s")
    r = _pos(restart_s, "restart_s", zero=True)
    x = (tau + d) / m
    expected = m * math.exp(r / m) * math.expm1(x)
    return tau / expected if expected > 0 else 0.0


@dataclasses.dataclass(frozen=True, slots=True)
class CheckpointAdvice:
    """How often to checkpoint, and what it would bring.

    Attributes:
        save_cost_s: blocking seconds per save (measured, or given).
        mtbf_s: mean time between failures (observed, or given).
        mtbf_source: ``'observed'`` (job time / disruptions) or ``'given'``.
        restart_s: seconds lost per failure besides the lost work (recovery, restore).
        step_time_s: productive seconds per step (to turn seconds into steps).
        interval_s: the suggested seconds of work between saves.
        interval_steps: the same in steps (at least 1).
        method: ``'daly'`` or ``'young'``.
        predicted_goodput: expected goodput (fraction) at the suggested interval.
        current_interval_steps: today's steps between saves (None: no save seen twice).
        current_predicted_goodput: expected goodput at today's interval (None likewise).
    """

    save_cost_s: float
    mtbf_s: float
    mtbf_source: str
    restart_s: float
    step_time_s: float
    interval_s: float
    interval_steps: int
    method: str
    predicted_goodput: float
    current_interval_steps: int | None
    current_predicted_goodput: float | None

    def as_dict(self) -> dict:
        """JSON-ready dict of every field."""
        return dataclasses.asdict(self)


def checkpoint_advice(save_cost_s: float, mtbf_s: float, step_time_s: float, *,
                      restart_s: float = 0.0, current_interval_steps: int | None = None,
                      mtbf_source: str = "given", method: str = "daly") -> CheckpointAdvice:
    """The Young/Daly interval in steps, with the goodput predicted there and today.

    Example:
        >>> a = checkpoint_advice(30.0, 43200.0, 2.0, current_interval_steps=100)
        >>> a.interval_steps, round(a.predicted_goodput, 3), round(a.current_predicted_goodput, 3)
        (795, 0.963, 0.867)
    """
    st = _pos(step_time_s, "step_time_s")
    d = _pos(save_cost_s, "save_cost_s")
    m = _pos(mtbf_s, "mtbf_s")
    r = _pos(restart_s, "restart_s", zero=True)
    tau = daly_interval(d, m, method)
    steps = max(1, round(tau / st))
    cur_g = None
    if current_interval_steps is not None:
        if isinstance(current_interval_steps, bool) or not isinstance(current_interval_steps, int) \
                or current_interval_steps < 1:
            raise ValueError(f"current_interval_steps ({current_interval_steps!r}) "
                             "must be an int >= 1")
        cur_g = expected_goodput(current_interval_steps * st, d, m, r)
    return CheckpointAdvice(
        save_cost_s=d, mtbf_s=m, mtbf_source=mtbf_source, restart_s=r, step_time_s=st,
        interval_s=steps * st, interval_steps=steps, method=method,
        predicted_goodput=expected_goodput(steps * st, d, m, r),
        current_interval_steps=current_interval_steps, current_predicted_goodput=cur_g)


@dataclasses.dataclass(frozen=True, slots=True)
class FinishForecast:
    """When the job reaches its target step at the current rates.

    Attributes:
        target_step: the step asked about.
        current_step: the last productive step.
        steps_left: ``target_step - current_step`` (>= 0).
        step_time_s: productive seconds per step: the mean productive step (productive
            seconds / steps), the one statistic of both terms.
        work_s: ``steps_left x step_time_s``.
        expected_badput_s: badput expected on the way (today's recurring badput per
            productive second of ``work_s``, i.e. per step; one-time start-up costs left
            out), by bucket name in ``expected_badput``.
        seconds_left: ``work_s + expected_badput_s``.
        finish_time: UTC seconds when the target is reached (``now + seconds_left``).
        expected_badput: bucket name -> expected seconds.
        one_time_badput: bucket name -> seconds the job spent once (start-up, until the
            end of its first step); reported, not extrapolated.
    """

    target_step: int
    current_step: int
    steps_left: int
    step_time_s: float
    work_s: float
    expected_badput_s: float
    seconds_left: float
    finish_time: float
    expected_badput: dict[str, float]
    one_time_badput: dict[str, float] = dataclasses.field(default_factory=dict)

    def as_dict(self) -> dict:
        """JSON-ready dict of every field."""
        return dataclasses.asdict(self)


def finish_forecast(target_step: int, current_step: int, step_time_s: float,
                    productive_s: float, recurring_badput_s: dict[str, float],
                    now: float, *, one_time_badput: dict[str, float] | None = None
                    ) -> FinishForecast:
    """Forecast from today's rates: each productive second brings along
    ``recurring badput / productive`` seconds of badput.

    ``step_time_s`` should be ``productive_s / steps`` (the mean step): then the work and the
    badput use one statistic (:func:`goodput_jax.measure.advice_inputs.finish_forecast_for`
    measures both, with one-time start-up badput apart, passed as ``one_time_badput``).

    Example:
        >>> f = finish_forecast(200, 100, 1.0, 100.0, {"DATA_LOADING": 25.0}, now=0.0)
        >>> f.seconds_left, f.expected_badput
        (125.0, {'DATA_LOADING': 25.0})
    """
    if isinstance(target_step, bool) or not isinstance(target_step, int) or target_step < 0:
        raise ValueError(f"target_step ({target_step!r}) must be an int >= 0")
    st = _pos(step_time_s, "step_time_s")
    p = _pos(productive_s, "productive_s")
    left = max(target_step - int(current_step), 0)
    work = left * st
    per = {k: work * float(v) / p for k, v in recurring_badput_s.items() if v > 0}
    bad = float(sum(per.values()))
    once = {k: float(v) for k, v in (one_time_badput or {}).items() if v > 0}
    return FinishForecast(target_step, int(current_step), left, st, work, bad, work + bad,
                          float(now) + work + bad, per, once)
