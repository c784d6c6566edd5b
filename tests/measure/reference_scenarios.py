"""Recorder call sequences replayed through ml-goodput-measurement 0.2.3 and goodput_jax.

Each scenario is a list of ``(recorder method, args)`` with float UTC seconds for
every time argument (the replay turns them into aware datetimes), written the way
a MaxText-style loop calls the recorder: job start, TPU init, training
preparation, a data load before every step, steps, custom badput (evaluation)
inside steps, crashes (no job end) and restarts that resume from a checkpoint.

``replay(goodput_module, calls, job)`` runs one scenario through a library's
``goodput`` module via its ``cloud_logger=`` seam and returns goodput and the
badput breakdown in percent (custom badput summed). ``benchmarks/reference_diff.py``
runs both libraries; ``tests/measure/test_reference_parity.py`` compares goodput_jax
with the committed reference numbers (``data/reference_0_2_3.json``).

Example:
    >>> calls = scenario("clean")
    >>> calls[0]
    ('record_job_start_time', (1700000000.0,))
"""

from __future__ import annotations

import datetime as _dt
import math
from typing import Any

T0 = 1_700_000_000.0
SCENARIOS = ("clean", "crash_restart", "three_runs", "steps_100k")


def _step_time(step: int) -> float:
    # deterministic jitter around 1 s
    return 1.0 + 0.05 * math.sin(step * 0.7)


def _run(calls: list, t: float, first_step: int, last_step: int, *, crash: bool,
         eval_every: int = 50) -> float:
    """One run: init, prep, first load, steps [first_step, last_step]; returns the time."""
    calls.append(("record_job_start_time", (t,)))
    t += 2.0
    calls.append(("record_tpu_init_start_time", (t,)))
    t += 30.0
    calls.append(("record_tpu_init_end_time", (t,)))
    calls.append(("record_training_preparation_start_time", (t,)))
    t += 15.0
    calls.append(("record_training_preparation_end_time", (t,)))
    t += 1.0
    for step in range(first_step, last_step + 1):
        calls.append(("record_data_loading_start_time", (t,)))
        t += 4.0 if step == first_step else 0.2  # the first load is cold
        calls.append(("record_data_loading_end_time", (t,)))
        calls.append(("record_step_start_time", (step, t)))
        t += _step_time(step)
        if step == first_step:
            t += 25.0  # compilation inside the first step
        if eval_every and step % eval_every == eval_every - 1:
            calls.append(("record_custom_badput_event_start_time", (t, "eval")))
            t += 6.0
            calls.append(("record_custom_badput_event_end_time", (t, "eval")))
            t += 0.1
    if crash:
        t += 0.4  # dies inside the last step
    else:
        t += 3.0  # final checkpoint and logging
        calls.append(("record_job_end_time", (t,)))
    return t


def scenario(name: str) -> list[tuple[str, tuple]]:
    """The recorder calls of one scenario (see the module docstring)."""
    calls: list[tuple[str, tuple]] = []
    t = T0
    if name == "clean":
        # (no evaluation inside the final step: the reference counts custom badput there
        # as productive time, a documented difference, see docs/semantics.md)
        _run(calls, t, 0, 209, crash=False)
    elif name == "crash_restart":
        t = _run(calls, t, 0, 137, crash=True)
        _run(calls, t + 90.0, 100, 209, crash=False)  # resumes from the step-100 checkpoint
    elif name == "three_runs":
        t = _run(calls, t, 0, 180, crash=True)
        t = _run(calls, t + 120.0, 150, 320, crash=True)
        _run(calls, t + 60.0, 300, 450, crash=False)
    elif name == "steps_100k":
        t = _run(calls, t, 0, 39_999, crash=True, eval_every=1000)
        t = _run(calls, t + 300.0, 39_000, 74_999, crash=True, eval_every=1000)
        _run(calls, t + 300.0, 74_000, 99_999, crash=False, eval_every=1000)
    else:
        raise ValueError(f"scenario ({name!r}) must be one of {SCENARIOS}")
    return calls


class ListLogger:
    """The ``cloud_logger=`` seam of both libraries: entries in a list, in write order."""

    def __init__(self) -> None:
        self.entries: list[dict] = []

    def write_cloud_logging_entry(self, entry: dict) -> None:
        self.entries.append(entry)

    def read_cloud_logging_entries(self, start_time=None, end_time=None, last_entry_info=None):
        # all entries, then nothing new (the calculators read once per query)
        out = self.entries if last_entry_info is None else []
        last = (_dt.datetime.now(_dt.UTC), str(len(self.entries)))
        return list(out), last


def _dt_of(x: Any) -> Any:
    if isinstance(x, float):
        return _dt.datetime.fromtimestamp(x, _dt.UTC)
    return x


#: recorder method -> (Google's time key, extra keys from the arguments)
_ENTRY_KEYS = {
    "record_job_start_time": "job_start_time",
    "record_job_end_time": "job_end_time",
    "record_tpu_init_start_time": "tpu_init_start_time",
    "record_tpu_init_end_time": "tpu_init_end_time",
    "record_training_preparation_start_time": "training_prep_start_time",
    "record_training_preparation_end_time": "training_prep_end_time",
    "record_data_loading_start_time": "data_loading_start_time",
    "record_data_loading_end_time": "data_loading_end_time",
    "record_custom_badput_event_start_time": "custom_badput_event_start_time",
    "record_custom_badput_event_end_time": "custom_badput_event_end_time",
}


def entries_of(calls: list[tuple[str, tuple]], job: str) -> list[dict]:
    """The Cloud Logging entries Google's recorder writes for ``calls`` (its documented
    payload format), for replaying long scenarios without the recorder."""
    out = []
    for method, args in calls:
        if method == "record_step_start_time":
            out.append({"job_name": job, "step_count": int(args[0]), "step_start_time": args[1]})
        elif method.startswith("record_custom_badput"):
            out.append({"job_name": job, "custom_badput_event_type": args[1],
                        _ENTRY_KEYS[method]: args[0]})
        else:
            out.append({"job_name": job, _ENTRY_KEYS[method]: args[0]})
    return out


def breakdown_pct(g: float, badput: dict) -> dict:
    """``{"goodput": %, "badput": {Google's name: %}}`` with custom badput summed."""
    out = {}
    for k, v in badput.items():
        name = {"ACCELERATOR_INITIALIZATION": "TPU_INITIALIZATION",
                "DATA_LOADING": "DATA_LOADING_SYNC"}.get(k.name, k.name)
        out[name] = float(sum(v.values())) if isinstance(v, dict) else float(v)
    return {"goodput": float(g), "badput": out}


def replay(goodput: Any, calls: list[tuple[str, tuple]], job: str = "parity",
           **calculator_kwargs: Any) -> dict:
    """Replay ``calls`` through ``goodput.GoodputRecorder`` / ``GoodputCalculator``.

    Returns:
        ``{"goodput": %, "badput": {BadputType name: %}}`` (custom badput summed).
    """
    log = ListLogger()
    rec = goodput.GoodputRecorder(job, f"goodput_{job}", True, log)
    for method, args in calls:
        getattr(rec, method)(*[_dt_of(a) for a in args])
    if hasattr(rec, "close"):
        rec.close()
    calc = goodput.GoodputCalculator(job, f"goodput_{job}", log, **calculator_kwargs)
    g, badput, _ = calc.get_job_goodput(include_badput_breakdown=True)
    return breakdown_pct(g, badput)


# ---------------------------------------------------------------- MaxText's wrapper
def maxtext_calls(steps: int = 20, crash_at: int = 14, resume_from: int = 10
                  ) -> list[tuple[float, int, str, tuple]]:
    """The recorder calls MaxText's goodput wrapper makes for a run that crashes and restarts.

    Follows AI-Hypercomputer/maxtext ``src/maxtext/common/goodput.py`` and its train
    loop: ``record_job_start_time`` (explicit), ``maybe_record_goodput`` around TPU init,
    training preparation, each data load and each step (``record_step_end_time`` is
    called through ``getattr`` right after the step is dispatched, so only recorders
    that have it record it), a blocking checkpoint save every 5 steps and metric
    logging on the host between steps, a crash inside step ``crash_at`` (no end, no job
    end) and a new process that restarts from the step-``resume_from`` checkpoint.

    Returns:
        ``(time, process, method, args)``: ``process`` 0 or 1 (the restart), time in
        UTC seconds at which the wrapper makes the call (the recorder reads it from
        the clock: the wrapper passes no timestamps).
    """
    out: list[tuple[float, int, str, tuple]] = []
    t = T0

    def run(proc: int, first: int, last: int, crash: int | None) -> None:
        nonlocal t
        out.append((t, proc, "record_job_start_time", ()))
        t += 1.0
        out.append((t, proc, "record_tpu_init_start_time", ()))
        t += 20.0
        out.append((t, proc, "record_tpu_init_end_time", ()))
        out.append((t, proc, "record_training_preparation_start_time", ()))
        t += 12.0  # model, optimizer, checkpoint manager (and a restore after a restart)
        out.append((t, proc, "record_training_preparation_end_time", ()))
        for step in range(first, last):
            out.append((t, proc, "record_data_loading_start_time", ()))
            t += 3.0 if step == first else 0.3
            out.append((t, proc, "record_data_loading_end_time", ()))
            out.append((t, proc, "record_step_start_time", (step,)))
            t += 18.0 if step == first else 0.05  # first call compiles; later ones dispatch
            if step == crash:
                return  # preempted inside the step: no end, no job end
            out.append((t, proc, "record_step_end_time", (step,)))
            t += 2.0  # the device finishes while the host logs metrics (blocks on them)
            if step % 5 == 4:
                t += 6.0  # a blocking checkpoint save (Orbax)
        out.append((t, proc, "record_job_end_time", ()))

    run(0, 0, steps, crash_at)
    t += 45.0  # rescheduling
    run(1, resume_from, steps, None)
    return out


def replay_maxtext(goodput: Any, calls, job: str, set_now, **recorder_kwargs: Any) -> dict:
    """Replay :func:`maxtext_calls` the way the wrapper makes them (``getattr``, no times).

    ``set_now(t)`` makes the library's clock read ``t``. One recorder per process.
    """
    recorders: dict[int, Any] = {}
    for t, proc, method, args in calls:
        set_now(t)
        rec = recorders.get(proc)
        if rec is None:
            rec = recorders[proc] = goodput.GoodputRecorder(job, f"goodput_{job}", True,
                                                            **recorder_kwargs)
        fn = getattr(rec, method, None)  # MaxText's record_goodput
        if fn:
            fn(*args)
    for rec in recorders.values():
        if hasattr(rec, "close"):
            rec.close()
    return recorders
