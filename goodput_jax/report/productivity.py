"""The report's ML Productivity Goodput panel: the three factors, MFU, the roofline position
and the advice that follows (checkpoint interval, finish forecast).

Everything here is read from :class:`~goodput_jax.measure.calculator.GoodputCalculator`'s
typed results (``get_productivity_goodput``, ``get_checkpoint_advice``,
``get_finish_forecast``); this module only gathers them, with the reason when one cannot be
given (no program cost recorded, no disruption seen and no MTBF given, no target step), and
writes them as text. The HTML table and the roofline figure are drawn by
:mod:`goodput_jax.report.render` and :mod:`goodput_jax.report.figures` from the same
:class:`ProductivityPanel`.

Example:
    >>> panel = productivity_panel(calc, target_step=10_000)      # doctest: +SKIP
    >>> print("\\n".join(productivity_lines(panel)))               # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from typing import Any

from goodput_jax.measure.advice import CheckpointAdvice, FinishForecast
from goodput_jax.measure.calculator import GoodputCalculator
from goodput_jax.measure.productivity import ProductivityGoodput, ProgramStats
from goodput_jax.report.labels import BUCKET_LABELS, format_duration, plural

__all__ = [
    "ABOVE_ROOF",
    "FACTOR_MEANINGS",
    "STEP_COUNT_RULE",
    "above_roof",
    "ProductivityPanel",
    "factor_rows",
    "format_fraction",
    "format_rate",
    "merged_programs",
    "peak_words",
    "productivity_lines",
    "productivity_panel",
]

#: the panel's rows: (name, formula and source), in the order they multiply
FACTOR_MEANINGS = (
    ("scheduling goodput", "time the job held all its resources / job time"),
    ("runtime goodput", "productive step time / held time (the measured goodput, over "
                        "the held time)"),
    ("program goodput", "roofline ideal step time / device-true step time (XLA's cost "
                        "analysis, with the matrix products it leaves out, against the "
                        "device's peak)"),
    ("ML Productivity Goodput", "scheduling x runtime x program goodput"),
    ("ETTR", "productive step time / job time (Meta's effective training time ratio)"),
    ("MFU", "FLOPs per step / peak FLOP/s / step time (model FLOPs utilisation)"),
)

#: shown when a step ran faster than the peak it was measured against allows: the peak was
#: raised to what that step reached (so no factor reads above 100%)
ABOVE_ROOF = ("peak raised: a step ran faster than the peak it was measured against allows "
              "(a measured peak probed on a busy machine, or XLA's bytes counting traffic "
              "that stays in cache), which proves the device's peak at least that high; the "
              "figures are against the raised peak, the one given is on its program's line. "
              "For the device's real peak pass peak=DevicePeak(...) to the calculator, or "
              "StepRecorder(peak=...)")

NO_PROGRAM_COST = ("no program cost recorded: program goodput and MFU need the step called "
                   "through goodput_jax.runtime.StepRecorder: `steps = "
                   "runtime.StepRecorder(recorder)` before the loop, then `state, out = "
                   "steps(step, train_step, state, batch)` in place of "
                   "record_step_start_time(step) and the step call "
                   "(docs/migrating-from-ml-goodput-measurement.md)")


@dataclasses.dataclass(frozen=True)
class ProductivityPanel:
    """What the panel shows, each part with the reason when it is missing.

    Attributes:
        productivity: the calculator's result, or None (``productivity_reason`` says why).
        advice: the checkpoint-interval advice, or None (``advice_reason``).
        forecast: the finish forecast, or None (``forecast_reason``).
    """

    productivity: ProductivityGoodput | None
    productivity_reason: str
    advice: CheckpointAdvice | None
    advice_reason: str
    forecast: FinishForecast | None
    forecast_reason: str


def productivity_panel(calculator: GoodputCalculator, *, target_step: int | None = None,
                       mtbf_s: float | None = None, now: Any = None) -> ProductivityPanel:
    """Gather the panel from the calculator.

    Args:
        calculator: the job's calculator.
        target_step: the step the job trains to, for the finish forecast (None: none).
        mtbf_s: mean time between failures in seconds for the checkpoint advice (None:
            the observed one; a job with no disruption then gets the reason instead).
        now: "now" for a live job.

    Raises:
        ValueError: ``target_step`` or ``mtbf_s`` is not valid (names it), before any work.

    Example:
        >>> productivity_panel(calc).productivity.ml_productivity_goodput  # doctest: +SKIP
    """
    if target_step is not None and (isinstance(target_step, bool)
                                    or not isinstance(target_step, int) or target_step < 0):
        raise ValueError(f"target_step ({target_step!r}) must be an integer >= 0")
    if mtbf_s is not None and (isinstance(mtbf_s, bool) or not isinstance(mtbf_s, int | float)
                               or not math.isfinite(mtbf_s) or mtbf_s <= 0):
        raise ValueError(f"mtbf_s ({mtbf_s!r}) must be a number of seconds > 0")
    prod, prod_why = None, ""
    try:
        prod = calculator.get_productivity_goodput(now=now)
    except ValueError as e:
        prod_why = str(e)
    advice, advice_why = None, ""
    try:
        advice = calculator.get_checkpoint_advice(mtbf_s)
    except ValueError as e:
        advice_why = str(e)
    forecast, forecast_why = None, ""
    if target_step is None:
        forecast_why = ("no target step given (goodput-jax report --target-step N, or "
                        "target_step=N)")
    else:
        try:
            forecast = calculator.get_finish_forecast(target_step, now=now)
        except ValueError as e:
            forecast_why = str(e)
    return ProductivityPanel(prod, prod_why, advice, advice_why, forecast, forecast_why)


def format_rate(x: float, unit: str) -> str:
    """A rate with an SI prefix and 4 significant digits.

    Example:
        >>> format_rate(9.047e10, "FLOP/s"), format_rate(8.493e8, "B/s")
        ('90.47 GFLOP/s', '849.3 MB/s')
    """
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.4g} {prefix}{unit}"
    return f"{x:.4g} {unit}"


def format_fraction(x: float | None) -> str:
    """A fraction as a percentage, ``n/a`` when unknown.

    Example:
        >>> format_fraction(0.4567), format_fraction(float("nan")), format_fraction(None)
        ('45.67%', 'n/a', 'n/a')
    """
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{100.0 * x:.2f}%"


def factor_rows(p: ProductivityGoodput) -> list[tuple[str, str, str]]:
    """``(name, value, how it is computed)`` for each row of :data:`FACTOR_MEANINGS`.

    Example:
        >>> [r[0] for r in factor_rows(calc.get_productivity_goodput())][:3]  # doctest: +SKIP
        ['scheduling goodput', 'runtime goodput', 'program goodput']
    """
    values = (p.scheduling_goodput, p.runtime_goodput, p.program_goodput,
              p.ml_productivity_goodput, p.ettr, p.mfu)
    return [(name, format_fraction(v), how)
            for (name, how), v in zip(FACTOR_MEANINGS, values, strict=True)]


def merged_programs(programs: Any) -> list[ProgramStats]:
    """One entry per distinct program (same cost and peak), in the order first seen.

    The calculator returns one :class:`ProgramStats` per recorded stretch (a loop that
    switches between compiled programs records a program cost at every switch); here the
    stretches of one program are merged: their steps summed, the step time the
    steps-weighted mean of the stretches' medians, MFU and program goodput from it.

    Example:
        >>> len(merged_programs(calc.get_program_goodput().programs))  # doctest: +SKIP
        3
    """
    groups: dict[Any, list[ProgramStats]] = {}
    for s in programs:
        groups.setdefault((s.cost, s.peak), []).append(s)
    out = []
    for group in groups.values():
        n = sum(s.num_steps for s in group)
        if n <= 0:
            out.append(group[0])
            continue
        st = sum(s.step_time_s * s.num_steps for s in group) / n
        first = group[0]
        # (the peak bounds each stretch's steps, so these stay <= 1 but for rounding)
        out.append(dataclasses.replace(
            first, first_step=min(s.first_step for s in group), num_steps=n, step_time_s=st,
            mfu=min(first.compute_time_s / st, 1.0) if st > 0 else math.nan,
            program_goodput=min(first.ideal_step_time_s / st, 1.0) if st > 0 else math.nan))
    return out


def above_roof(p: ProductivityGoodput) -> bool:
    """Whether a step of the job ran above the roofline of the peak it was given (its peak
    was raised; a result made by hand: a program goodput above 100%).

    Example:
        >>> above_roof(calc.get_productivity_goodput())  # doctest: +SKIP
        False
    """
    vals = [p.program_goodput] + [s.program_goodput for s in p.program.programs]
    return bool(p.program.raised) or any(math.isfinite(v) and v > 1.0 + 1e-9 for v in vals)


def peak_words(s: ProgramStats) -> str:
    """The peak a program is measured against, its source, spread and raise, in words.

    Example:
        >>> from goodput_jax.measure.productivity import DevicePeak, ProgramCost, program_stats
        >>> pk = DevicePeak("cpu", 1e11, 4e9, "measured", flops_spread=0.12)
        >>> peak_words(program_stats(ProgramCost("f", 1e10, 0, 1e6, "cpu"), pk, [0.05]))
        'peak 200 GFLOP/s, 4 GB/s (measured, spread 12% / 0%, ridge spread 50%; raised from 100 GFLOP/s, 4 GB/s: a step beat it)'
    """
    pk = s.peak
    out = (f"peak {format_rate(pk.flops_per_s, 'FLOP/s')}, {format_rate(pk.bytes_per_s, 'B/s')}"
           f" ({pk.source}")
    if pk.flops_spread or pk.bytes_spread:
        out += f", spread {100 * pk.flops_spread:.0f}% / {100 * pk.bytes_spread:.0f}%"
    if pk.ridge_spread:
        out += f", ridge spread {100 * pk.ridge_spread:.0f}%"
    if s.raised_from is not None:
        out += (f"; raised from {format_rate(s.raised_from.flops_per_s, 'FLOP/s')}, "
                f"{format_rate(s.raised_from.bytes_per_s, 'B/s')}: a step beat it")
    return out + ")"


#: what a roofline line's step count counts (the calculator's rule, say it where it is shown)
STEP_COUNT_RULE = ("steps: each program's productive steps in all runs, the first after each "
                   "compile or switch left out")


def roofline_lines(p: ProductivityGoodput) -> list[str]:
    """One line per distinct compiled program: where it sits on its device's roofline.

    Its step count is the program's productive steps in every run of the job (each stretch's
    first step left out, as the calculator's median does); the training hooks' profile
    (``GoodputHooks.profile_table``, the demo's "profiled" lines) counts another thing, the
    step times it keeps for the fit, warm-up steps dropped, since the process started.
    """
    out = []
    for s in merged_programs(p.program.programs):
        peak = s.peak
        out.append(
            f"  {s.cost.name or 'program'} on {s.cost.device_kind or 'device'}"
            f" ({plural(s.cost.num_devices, 'device')}, {peak_words(s)}): "
            f"{s.verdict}, {s.arithmetic_intensity:.3g} FLOP/byte against a ridge of "
            f"{peak.ridge_point:.3g}; step {format_duration(s.step_time_s)} against an "
            f"ideal {format_duration(s.ideal_step_time_s)} (compute "
            f"{format_duration(s.compute_time_s)}, memory {format_duration(s.memory_time_s)}),"
            f" MFU {format_fraction(s.mfu)}, over {plural(s.num_steps, 'productive step')}"
            " (all runs)")
    return out


def advice_lines(panel: ProductivityPanel) -> list[str]:
    """The checkpoint interval and the finish forecast, as sentences."""
    out = []
    a = panel.advice
    if a is None:
        out.append(f"checkpoint interval: no advice ({panel.advice_reason})")
    else:
        mtbf = ("observed" if a.mtbf_source == "observed" else "given")
        now = ("" if a.current_interval_steps is None else
               f"; today's {plural(a.current_interval_steps, 'step')}: "
               f"{format_fraction(a.current_predicted_goodput)}")
        out.append(
            f"checkpoint interval: every {plural(a.interval_steps, 'step')} "
            f"({format_duration(a.interval_s)} of work; {a.method.capitalize()}'s optimum for "
            f"a save of {format_duration(a.save_cost_s)} and a mean time between failures "
            f"of {format_duration(a.mtbf_s)}, {mtbf}), predicted goodput "
            f"{format_fraction(a.predicted_goodput)}{now}")
    f = panel.forecast
    if f is None:
        out.append(f"finish forecast: none ({panel.forecast_reason})")
    else:
        when = datetime.datetime.fromtimestamp(f.finish_time, datetime.UTC)
        top = sorted(f.expected_badput.items(), key=lambda kv: -kv[1])[:3]
        bad = ", ".join(f"{BUCKET_LABELS.get(k, k.lower().replace('_', ' '))} "
                        f"{format_duration(v)}" for k, v in top)
        out.append(
            f"finish forecast: step {f.target_step} in {format_duration(f.seconds_left)} "
            f"({when:%Y-%m-%d %H:%M:%S} UTC): {plural(f.steps_left, 'step')} x "
            f"{format_duration(f.step_time_s)} of work and {format_duration(f.expected_badput_s)}"
            f" of expected badput" + (f" ({bad})" if bad else ""))
    return out


def productivity_lines(panel: ProductivityPanel) -> list[str]:
    """The panel as text lines (the text report's section).

    Example:
        >>> print("\\n".join(productivity_lines(productivity_panel(calc))))  # doctest: +SKIP
    """
    lines = ["ML Productivity Goodput (scheduling x runtime x program goodput)"]
    p = panel.productivity
    if p is None:
        lines.append(f"  not available: {panel.productivity_reason}")
    else:
        w = max(len(n) for n, _ in FACTOR_MEANINGS)
        for name, value, how in factor_rows(p):
            lines.append(f"  {name:<{w}} {value:>8}   {how}")
        src = ("the cluster runtime's timeline" if p.scheduling_source == "timeline" else
               "the job's own events (elastic waits, downtime after a disruption)")
        lines.append(f"  held {format_duration(p.held_s)} of {format_duration(p.total_s)} "
                     f"(scheduling from {src})")
        if p.program.programs:
            lines.append(f"  roofline position ({STEP_COUNT_RULE}):")
            lines.extend(roofline_lines(p))
            if above_roof(p):
                lines.append(f"  note: {ABOVE_ROOF}")
        else:
            lines.append(f"  {NO_PROGRAM_COST}")
    lines.append("advice:")
    lines.extend(f"  {x}" for x in advice_lines(panel))
    return lines
