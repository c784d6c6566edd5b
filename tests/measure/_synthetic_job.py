"""Synthetic jobs with a known answer, written through the real recorder into SQLite.

Time comes from an injected clock (no sleeps): the simulation sets ``clock.t`` and calls the
recorder's ``record_*`` methods without timestamps, as a training loop would. A crash is a
recorder closed without a job end; the next run is a new recorder (a new run id).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from goodput_jax.measure.calculator import GoodputCalculator
from goodput_jax.measure.recorder import GoodputRecorder


class Clock:
    """A settable clock: ``clock()`` returns ``clock.t``."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = float(t)

    def __call__(self) -> float:
        return self.t


def recorder(url: str, clock: Clock, run: str, job: str = "job") -> GoodputRecorder:
    return GoodputRecorder(job, "logger", logging_enabled=True, store=url, clock=clock,
                           run_id=run)


def calculator(url: str, now: float, job: str = "job") -> GoodputCalculator:
    return GoodputCalculator(job, "logger", store=url, clock=lambda: now)


@dataclasses.dataclass
class StartupJob:
    """A job with one-time start-up badput and recurring checkpoint saves.

    Accelerator init, training preparation, then ``other_s`` of unrecorded time before the
    first step (a probe, a build), a first step that compiles for ``compile_s``; steps whose
    time follows ``step_s(step)``; a blocking save of ``save_s`` after every ``every`` steps.
    """

    init_s: float = 20.0
    prep_s: float = 5.0
    other_s: float = 15.0
    compile_s: float = 3.0
    save_s: float = 1.5
    every: int = 100
    step_s: Callable[[int], float] = lambda s: 0.2 if s % 10 == 9 else 0.01
    probe_s: float = 0.0

    def times(self, last_step: int) -> list[tuple[str, float, int | None]]:
        """The job's marks up to the start of step ``last_step + 1`` (the moment step
        ``last_step`` is complete): ``(what, t, step)``."""
        out: list[tuple[str, float, int | None]] = [("job_start", 0.0, None),
                                                    ("init_start", 0.0, None)]
        t = self.init_s
        out += [("init_end", t, None), ("prep_start", t, None)]
        t += self.prep_s
        out.append(("prep_end", t, None))
        t += self.other_s
        for s in range(last_step + 1):
            out.append(("step", t, s))
            if s == 0 and self.probe_s:  # the probe in the middle of the first step
                t += (self.compile_s + self.step_s(s)) / 2
                out += [("probe_start", t, None), ("probe_end", t + self.probe_s, None)]
                t += self.probe_s + (self.compile_s + self.step_s(s)) / 2
                continue
            t += self.step_s(s) + (self.compile_s if s == 0 else 0.0)
            if (s + 1) % self.every == 0:
                out += [("save_start", t, s), ("save_end", t + self.save_s, s)]
                t += self.save_s
        out.append(("step", t, last_step + 1))
        return out

    def record(self, url: str, last_step: int) -> float:
        """Record the job until step ``last_step`` is complete; returns that moment."""
        clock = Clock()
        rec = recorder(url, clock, "r0")
        calls = {"job_start": lambda s: rec.record_job_start_time(),
                 "init_start": lambda s: rec.record_tpu_init_start_time(),
                 "init_end": lambda s: rec.record_tpu_init_end_time(),
                 "prep_start": lambda s: rec.record_training_preparation_start_time(),
                 "prep_end": lambda s: rec.record_training_preparation_end_time(),
                 "step": rec.record_step_start_time,
                 "probe_start": lambda s: rec.record_custom_badput_event_start_time(
                     custom_badput_event_type="peak probe"),
                 "probe_end": lambda s: rec.record_custom_badput_event_end_time(
                     custom_badput_event_type="peak probe"),
                 "save_start": rec.record_checkpoint_save_start_time,
                 "save_end": rec.record_checkpoint_save_end_time}
        for what, t, step in self.times(last_step):
            clock.t = t
            calls[what](step)
        rec.close()
        return clock.t


@dataclasses.dataclass
class CrashJob:
    """Fixed-time steps, a blocking save of ``save_s`` after every ``every`` steps, and
    crashes at known times (mid-step or mid-save), each given as seconds after the start of
    the run it ends (after its restore). After a crash the job is down for ``down_s``, then
    restores for ``restore_s`` (true restart cost: their sum) and redoes the steps since the
    last completed save."""

    step_s: float = 2.0
    save_s: float = 90.0
    every: int = 300
    down_s: float = 100.0
    restore_s: float = 20.0

    def save_window(self, k: int) -> tuple[float, float]:
        """Seconds after a run's start when its ``k``-th save (0-based) runs."""
        a = (k + 1) * self.every * self.step_s + k * self.save_s
        return a, a + self.save_s

    def record(self, url: str, offsets: Sequence[float], end_step: int | None = None) -> dict:
        """Run the job through the crashes to ``end_step`` (None: one save after the last
        crash's restart); returns what happened."""
        pending = list(offsets)
        crashes = [pending.pop(0)] if pending else []
        clock = Clock()
        run, ckpt, s, t = 0, 0, 0, 0.0
        mid_save = mid_step = 0
        rec = recorder(url, clock, "r0")
        rec.record_job_start_time()
        end = end_step if end_step is not None or pending or crashes else self.every
        while end is None or s < end:
            nxt = crashes[0] if crashes else float("inf")
            if nxt < t + self.step_s:  # crash mid-step
                rec.record_step_start_time(s)
                mid_step += 1
            else:
                rec.record_step_start_time(s)
                t += self.step_s
                clock.t = t
                s += 1
                if s % self.every != 0:
                    continue
                rec.record_checkpoint_save_start_time(s)
                nxt = crashes[0] if crashes else float("inf")
                if nxt >= t + self.save_s:
                    t += self.save_s
                    clock.t = t
                    rec.record_checkpoint_save_end_time(s)
                    ckpt = s
                    continue
                mid_save += 1
            # the crash: no job end; down, then a new run restores and redoes the steps
            crash_t = crashes.pop(0)
            rec.close()
            run += 1
            t = crash_t + self.down_s
            clock.t = t
            rec = recorder(url, clock, f"r{run}")
            rec.record_job_start_time()
            rec.record_checkpoint_restore_start_time(ckpt)
            t += self.restore_s
            clock.t = t
            rec.record_checkpoint_restore_end_time(ckpt)
            s = ckpt
            crashes = [t + pending.pop(0)] if pending else []
            if end_step is None and not crashes:
                end = s + self.every
        rec.record_step_start_time(s)
        rec.record_job_end_time()
        rec.close()
        return {"end": t, "mid_save": mid_save, "mid_step": mid_step, "runs": run + 1}
