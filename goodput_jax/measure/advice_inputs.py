"""The advice's inputs, read from a job's record without bias (issue 44, items 4 and 5).

:mod:`goodput_jax.measure.advice` holds the formulas; this module measures what they take,
through the calculator's public reads only (``get_job_goodput_details``,
``get_step_deviation``, ``timeline`` and the store's columnar read):

* **One step-time statistic**: the mean productive step (productive seconds per step), for
  the work left and for turning an interval into steps; the badput the job brings along is
  per productive step, so both terms use the same statistic.
* **One-time badput apart**: everything until the end of the job's first step
  (accelerator initialisation, training preparation, program startup, a peak probe inside
  or before it, "other" start-up time) happens once and is not extrapolated; what comes after
  (saves, data loading, hangs, and restarts with their own start-up) recurs per step.
* **Interrupted saves counted apart**: a crash during a save leaves a save start with no
  end; the engine books its time from the start to the crash, and the downtime after, to
  infrastructure recovery. Save cost is the save badput of completed saves over completed
  saves; restart cost is measured on the crashes that did not hit a save (their
  in-flight step's expected lost part, half a mean step, is lost work, not restart), plus
  the restore badput per disruption.

Example:
    >>> from goodput_jax.measure.calculator import GoodputCalculator
    >>> calc = GoodputCalculator("job", store="sqlite:///goodput.db")    # doctest: +SKIP
    >>> finish_forecast_for(calc, 10_000).seconds_left                  # doctest: +SKIP
    >>> checkpoint_advice_for(calc, mtbf_s=12 * 3600).interval_steps     # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

import numpy as np

from goodput_jax.measure.advice import (
    CheckpointAdvice,
    FinishForecast,
    checkpoint_advice,
    finish_forecast,
)
from goodput_jax.measure.badput import PRODUCTIVE
from goodput_jax.measure.events import KIND_CODES, EventKind, TimeLike

if TYPE_CHECKING:
    from goodput_jax.measure.calculator import GoodputCalculator
    from goodput_jax.measure.results import StepDeviation

__all__ = ["AdviceInputs", "advice_inputs", "checkpoint_advice_for", "finish_forecast_for"]

_SAVE = "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME"
_RESTORE = "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME"
_INFRA = "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"
_STEP_CATS = frozenset({PRODUCTIVE, "WASTED_PROGRESS_FROM_DISRUPTION"})
#: buckets that are one-time in the run that holds the job's first step, wherever
#: they fall in it (a measured compile after the first step, a second preparation span)
ONE_TIME_BUCKETS = frozenset({"ACCELERATOR_INITIALIZATION", "TRAINING_PREP", "PROGRAM_STARTUP"})
_SAVE_START = KIND_CODES[EventKind.CHECKPOINT_SAVE_START]
_SAVE_END = KIND_CODES[EventKind.CHECKPOINT_SAVE_END]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class AdviceInputs:
    """What the checkpoint advice and the finish forecast read from a job's record.

    Attributes:
        now: the moment read (UTC seconds).
        num_steps: productive steps completed.
        last_step: the last productive step.
        step_time_s: mean productive seconds per step (nan without a step).
        productive_s: productive seconds.
        total_s: the job's seconds so far.
        one_time_badput: bucket name -> seconds spent once, until the end of the job's
            first step (and the one-time buckets of that step's run).
        recurring_badput: bucket name -> seconds of every other badput.
        saves: saves started (the first host's marks).
        interrupted_saves: saves a crash cut short (a start, then the run crashed).
        save_cost_s: blocking seconds per completed save (None: no completed save).
        disruptions: crashes and dead hosts.
        restart_s: seconds per restart (recovery and restore), interrupted saves' time
            left out (0.0 without a disruption).
        current_interval_steps: median steps between saves (None: fewer than two).
    """

    now: float
    num_steps: int
    last_step: int
    step_time_s: float
    productive_s: float
    total_s: float
    one_time_badput: dict[str, float]
    recurring_badput: dict[str, float]
    saves: int
    interrupted_saves: int
    save_cost_s: float | None
    disruptions: int
    restart_s: float
    current_interval_steps: int | None

    def as_dict(self) -> dict:
        """JSON-ready dict of every field."""
        return dataclasses.asdict(self)


def _save_marks(calc: GoodputCalculator) -> dict[str, list[tuple[float, int, int]]]:
    """Run id -> the first host's save marks ``(t, +1 start / -1 end, step)``, in order."""
    store, job = calc.store, calc.job_name
    info: dict[int, tuple[str, int]] = {}
    marks: dict[tuple[int, str], list[tuple[float, int, int]]] = {}
    cursor = None
    while True:
        cols, cursor, done = store.read_columns(job, cursor, 250_000)
        if cols is not None and cols["kind"].size:
            sel = np.flatnonzero((cols["kind"] == _SAVE_START) | (cols["kind"] == _SAVE_END))
            for i in sel.tolist():
                sid = int(cols["stream"][i])
                if sid not in info:
                    info[sid] = store.stream_info(sid)
                run_id, host = info[sid]
                marks.setdefault((host, run_id), []).append(
                    (float(cols["ts"][i]), 1 if cols["kind"][i] == _SAVE_START else -1,
                     int(cols["step"][i])))
        if done:
            break
    if not marks:
        return {}
    first = min(h for h, _ in marks)
    return {r: sorted(v) for (h, r), v in marks.items() if h == first}


def _split_startup(segments: list) -> tuple[dict[str, float], dict[str, float]]:
    """(one-time, recurring) badput seconds by bucket from the timeline's slices: one-time is
    what came before the end of the job's first step (productive, or redone after a crash;
    its compile and whatever ran inside it, a peak probe say), and the one-time buckets of
    that step's run."""
    steps = [s for s in segments if s[4] is not None and s[2] in _STEP_CATS and s[1] > s[0]]
    first = min(steps, key=lambda s: s[0]) if steps else None
    end = -math.inf
    if first is not None:  # the first step's last slice: where start-up ends
        end = max(s[1] for s in steps if s[3] == first[3] and s[4] == first[4])
    once: dict[str, float] = {}
    rec: dict[str, float] = {}
    for a, b, cat, run, *_ in segments:
        if cat == PRODUCTIVE or b <= a:
            continue
        one = first is None or b <= end or (run == first[3] and cat in ONE_TIME_BUCKETS)
        d = once if one else rec
        d[cat] = d.get(cat, 0.0) + (b - a)
    return once, rec


def advice_inputs(calc: GoodputCalculator, now: TimeLike | None = None, *,
                  details: dict | None = None, statistics: StepDeviation | None = None
                  ) -> AdviceInputs:
    """Measure the advice's inputs from ``calc``'s job (replays the job's timeline: O(events)).

    Args:
        calc: a :class:`~goodput_jax.measure.calculator.GoodputCalculator` (or a subclass:
            its base reads are used, whatever shape the subclass returns).
        now: "now" for a live job (default: the calculator's clock).
        details: the job's details in the measure calculator's shape (default:
            ``calc.get_job_goodput_details()``; the calculator's own methods pass its base
            reads, so a drop-in subclass's shapes do not reach here).
        statistics: the productive steps' statistics (default: ``calc.get_step_statistics()``).

    Example:
        >>> advice_inputs(calc).save_cost_s                                 # doctest: +SKIP
    """
    det = calc.get_job_goodput_details() if details is None else details
    dev = calc.get_step_statistics() if statistics is None else statistics
    tl = calc.timeline(now)
    t = float(tl["now"])
    segs = tl["segments"]
    once, rec = _split_startup(segs)
    n = int(dev.num_steps)
    productive = float(det["productive_time"])
    # productive seconds per step (not the mean of the steps' raw times: the first step's
    # compile is program startup, out of productive time)
    mean = productive / n if n else math.nan

    # saves, and the crashes that cut one short
    marks = _save_marks(calc)
    run_ids = tl["run_ids"]
    saves = sum(1 for v in marks.values() for m in v if m[1] > 0)
    cut_in_save = 0.0
    down_step: list[float] = []  # downtime after each crash outside a save
    down_save: list[float] = []  # ... and after each crash that cut a save short
    crashes = tl["crashes"]
    for last_t, run in crashes:
        # the engine's recovery slice from the crashed run's last event to the next run
        down = sum(b - a for a, b, cat, _r, step, *_ in segs
                   if cat == _INFRA and a == last_t and step is None)
        run_marks = marks.get(run_ids[run], []) if run < len(run_ids) else []
        before = [m for m in run_marks if m[0] <= last_t]
        if before and before[-1][1] > 0:
            cut_in_save += last_t - before[-1][0]  # booked to the save span until then
            down_save.append(down)
        else:
            down_step.append(down)
    interrupted = len(down_save)
    done = saves - interrupted
    bad: dict[str, float] = dict(once)
    for k, secs in rec.items():
        bad[k] = bad.get(k, 0.0) + secs
    save_cost = (bad.get(_SAVE, 0.0) - cut_in_save) / done if done > 0 else None

    disruptions = int(det["num_disruptions"])
    restart = 0.0
    if disruptions:
        # a crash's downtime holds the lost part of what ran when it struck (a step: half a
        # step on average; a save: half a save) and then the restart itself
        if down_step:
            half = 0.5 * mean if n else 0.0
            restart = max(float(np.mean(down_step)) - half, 0.0)
        elif down_save:
            restart = max(float(np.mean(down_save)) - 0.5 * (save_cost or 0.0), 0.0)
        restart += bad.get(_RESTORE, 0.0) / disruptions
    current = None
    steps = sorted({m[2] for v in marks.values() for m in v if m[1] > 0 and m[2] >= 0})
    gaps = np.diff(np.asarray(steps, dtype=np.int64))
    gaps = gaps[gaps > 0]
    if gaps.size:
        current = int(np.median(gaps))
    return AdviceInputs(
        now=t, num_steps=n, last_step=int(det["last_productive_step"]), step_time_s=mean,
        productive_s=productive, total_s=float(det["total_time"]),
        one_time_badput=once, recurring_badput=rec, saves=saves,
        interrupted_saves=interrupted, save_cost_s=save_cost, disruptions=disruptions,
        restart_s=restart, current_interval_steps=current)


def checkpoint_advice_for(calc: GoodputCalculator, mtbf_s: float | None = None, *,
                          save_cost_s: float | None = None, restart_s: float | None = None,
                          method: str = "daly", inputs: AdviceInputs | None = None
                          ) -> CheckpointAdvice:
    """The Young/Daly advice from ``calc``'s job, on :func:`advice_inputs`.

    What ``GoodputCalculator.get_checkpoint_advice`` returns: save and restart costs that
    crashes during saves do not bias, and the mean productive step.

    Args:
        calc: the job's calculator.
        mtbf_s: mean time between failures in seconds (None: observed, job time /
            disruptions; a job with no disruption yet needs it).
        save_cost_s: override the measured save cost (completed saves' blocking time / saves).
        restart_s: override the measured restart cost (per disruption: the downtime of the
            crashes that did not hit a save, less half a mean step, plus the restore).
        method: ``'daly'`` (default) or ``'young'``.
        inputs: :func:`advice_inputs` already measured (default: measured here).

    Raises:
        ValueError: no completed save and no ``save_cost_s``; no disruption observed and no
            ``mtbf_s``; no productive step yet.

    Example:
        >>> checkpoint_advice_for(calc, mtbf_s=12 * 3600).interval_steps  # doctest: +SKIP
    """
    x = advice_inputs(calc) if inputs is None else inputs
    job = calc.job_name
    if x.num_steps == 0:
        raise ValueError(f"job {job!r} has no productive step yet: "
                         "no step time to turn an interval into steps")
    if save_cost_s is None:
        if x.save_cost_s is None:
            raise ValueError(f"save_cost_s (None): job {job!r} recorded no completed "
                             "checkpoint save; pass save_cost_s")
        save_cost_s = max(x.save_cost_s, 1e-9)
    source = "given"
    if mtbf_s is None:
        if x.disruptions == 0:
            raise ValueError(f"mtbf_s (None): job {job!r} saw no disruption "
                             "yet; pass the mean time between failures in seconds")
        mtbf_s, source = x.total_s / x.disruptions, "observed"
    if restart_s is None:
        restart_s = x.restart_s
    return checkpoint_advice(save_cost_s, mtbf_s, x.step_time_s, restart_s=restart_s,
                             current_interval_steps=x.current_interval_steps,
                             mtbf_source=source, method=method)


def finish_forecast_for(calc: GoodputCalculator, target_step: int,
                        now: TimeLike | None = None, *, inputs: AdviceInputs | None = None
                        ) -> FinishForecast:
    """When ``calc``'s job reaches ``target_step``: the mean step for the work left, plus the
    recurring badput per productive step; one-time start-up badput reported, not repeated.

    Example:
        >>> finish_forecast_for(calc, 10_000).finish_time                # doctest: +SKIP
    """
    x = advice_inputs(calc, now) if inputs is None else inputs
    if x.num_steps == 0:
        raise ValueError(f"job {calc.job_name!r} has no productive step yet: no rate to "
                         "forecast from")
    # step_time_s = productive_s / steps: work x badput / productive = steps left x badput
    # per step
    return finish_forecast(target_step, x.last_step, x.step_time_s,
                           x.productive_s, x.recurring_badput, x.now,
                           one_time_badput=x.one_time_badput)
