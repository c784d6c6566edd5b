"""The checkpoint-interval advice and the finish forecast, from the calculator's figures.

``GoodputCalculator.get_checkpoint_advice`` and ``get_finish_forecast`` read the job's
details, step statistics and save marks and hand them here; the models themselves are
:mod:`goodput_jax.measure.advice`'s.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from goodput_jax.measure.advice import (
    CheckpointAdvice,
    FinishForecast,
    checkpoint_advice,
    finish_forecast,
)
from goodput_jax.measure.badput import BadputType
from goodput_jax.measure.results import StepDeviation

__all__ = ["advise_checkpoints", "forecast_finish"]


def advise_checkpoints(job_name: str, det: dict[str, Any], dev: StepDeviation,
                       marks: tuple[np.ndarray, np.ndarray], *, mtbf_s: float | None,
                       save_cost_s: float | None, restart_s: float | None,
                       method: str) -> CheckpointAdvice:
    """``GoodputCalculator.get_checkpoint_advice`` from the job's details ``det``, step
    statistics ``dev`` and save marks ``(times, steps)`` (see that method)."""
    if dev.num_steps == 0:
        raise ValueError(f"job {job_name!r} has no productive step yet: "
                         "no step time to turn an interval into steps")
    times, steps = marks
    bad = det["badput_time"]
    if save_cost_s is None:
        if times.size == 0:
            raise ValueError(f"save_cost_s (None): job {job_name!r} recorded no "
                             "checkpoint save; pass save_cost_s")
        save_cost_s = bad[BadputType.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME] / times.size
        save_cost_s = max(save_cost_s, 1e-9)
    disruptions = det["num_disruptions"]
    source = "given"
    if mtbf_s is None:
        if disruptions == 0:
            raise ValueError(f"mtbf_s (None): job {job_name!r} saw no disruption "
                             "yet; pass the mean time between failures in seconds")
        mtbf_s, source = det["total_time"] / disruptions, "observed"
    if restart_s is None:
        lost = bad[BadputType.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION] \
            + bad[BadputType.UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME]
        restart_s = lost / disruptions if disruptions else 0.0
    current = None
    good = steps[steps >= 0]
    if good.size >= 2:
        gaps = np.diff(np.sort(good))
        gaps = gaps[gaps > 0]
        if gaps.size:
            current = int(np.median(gaps))
    return checkpoint_advice(save_cost_s, mtbf_s, dev.median, restart_s=restart_s,
                             current_interval_steps=current, mtbf_source=source,
                             method=method)


def forecast_finish(job_name: str, det: dict[str, Any], dev: StepDeviation, target_step: int,
                    t: float) -> FinishForecast:
    """``GoodputCalculator.get_finish_forecast`` from the job's details and step statistics."""
    if dev.num_steps == 0:
        raise ValueError(f"job {job_name!r} has no productive step yet: no rate to "
                         "forecast from")
    once = (BadputType.ACCELERATOR_INITIALIZATION, BadputType.TRAINING_PREP,
            BadputType.PROGRAM_STARTUP, BadputType.DATA_LOADING_ASYNC)
    recurring = {b.name: float(v) for b, v in det["badput_time"].items() if b not in once}
    return finish_forecast(target_step, det["last_productive_step"], dev.median,
                           max(det["productive_time"], 1e-12), recurring, t)
