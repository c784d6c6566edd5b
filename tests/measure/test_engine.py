"""The one engine: the report's timeline and the calculator agree to the millisecond."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from goodput_jax.measure.calculator import NoEventsError
from goodput_jax.measure.engine import Engine
from goodput_jax.measure.events import Event
from goodput_jax.report.timeline import build_timeline
from tests.measure._timeline import K, calc_for, events, new_store
from tests.measure.test_calculator import timelines

MS = 1e-3


def _agree(store, job, now):
    d = calc_for(store, job, now=now).get_job_goodput_details()
    tot = build_timeline(store, job, now=now).totals()
    assert tot["PRODUCTIVE"] == pytest.approx(d["productive_time"], abs=MS)
    for bt, secs in d["badput_time"].items():
        if bt.name in tot:
            assert tot[bt.name] == pytest.approx(secs, abs=MS), bt
    assert sum(tot.values()) == pytest.approx(d["total_time"], abs=MS)
    return d, tot


def _job(store, finished: bool):
    """Two runs (a repeated job start = crash), compiles, device ends, async loads."""
    spec = [(K.JOB_START, 0), (K.ACCELERATOR_INIT_START, 0), (K.ACCELERATOR_INIT_END, 3),
            (K.DATA_LOADING_START, 3), (K.DATA_LOADING_END, 4)]
    t = 4.0
    for i in range(6):
        spec += [(K.STEP_START, t, i), (K.STEP_END, t + 0.1, i),
                 (K.DATA_LOADING_START, t + 0.2), (K.DATA_LOADING_END, t + 0.5)]
        t += 2.0 if i else 9.0  # the first step is slow (inferred program startup)
    spec += [(K.JOB_START, t + 5)]  # the same recorder starts again: a crash
    t += 6
    for i in range(3, 9):
        spec += [(K.STEP_START, t, i), (K.STEP_DEVICE_END, t + 1.5, i)]
        t += 2.0
    spec.append((K.STEP_START, t, 9))  # in flight
    if finished:
        spec.append((K.JOB_END, t + 1.25))
    evs = events("j", "r", spec)
    comp = Event(K.COMPILATION, "j", "r", 0, 8.0,
                 payload={"duration_s": 3.0, "recompile": True, "name": "step"})
    store.append(evs[:9] + [comp] + evs[9:])
    return t


@pytest.mark.parametrize("finished", [False, True])
def test_timeline_equals_calculator_live_and_finished(finished):
    store = new_store()
    t = _job(store, finished)
    d, tot = _agree(store, "j", now=t + 0.7)
    assert tot["PROGRAM_STARTUP"] > 1 and tot["RECOMPILATION"] == pytest.approx(3.0)
    assert d["num_runs"] == 2 and d["num_disruptions"] == 1
    if not finished:  # the in-flight step (0.7 s so far) is not productive yet
        assert d["last_productive_step"] == 8


def test_public_calculator_timeline_leaves_the_calculator_state_alone():
    """``GoodputCalculator.timeline`` is the report's only door into the engine."""
    store = new_store()
    t = _job(store, finished=False)
    calc = calc_for(store, "j", now=t + 0.7)
    before = calc.get_job_goodput_details()
    tl = calc.timeline(t + 0.7)
    assert tl["run_ids"] == ["r", "r"] and tl["now"] == t + 0.7 and tl["first_t"] is not None
    secs = sum(b - a for a, b, *_ in tl["segments"])
    assert secs == pytest.approx(before["total_time"], abs=MS)
    assert calc.timeline()["now"] == t + 0.7  # default: the calculator's clock
    assert calc.get_job_goodput_details() == before
    with pytest.raises(NoEventsError, match="nosuch"):
        calc_for(store, "nosuch", now=t).timeline()


def test_report_uses_no_private_calculator_api():
    import pathlib

    from goodput_jax import report

    for path in pathlib.Path(report.__file__).parent.glob("*.py"):
        text = path.read_text()
        for private in ("._feed_new", "._require_events", "._keys", "._engine", "Engine("):
            assert private not in text, (path.name, private)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(timelines(), st.floats(0.0, 1000.0))
def test_timeline_equals_calculator_on_arbitrary_events(evs, now):
    store = new_store()
    store.append(evs)
    try:
        calc_for(store, now=now).get_job_goodput_details()
    except NoEventsError:
        return
    _agree(store, "job", now)


def test_compile_time_inside_a_step_lost_in_a_crash_stays_program_startup():
    # step 0 from 0; a 1 s compile ends at 1 (program startup, carved out of the step);
    # the same recorder starts again at 1: the crashed step's remaining time is recovery,
    # the compile time stays program startup in the timeline too (hypothesis found it)
    store = new_store()
    evs = events("job", "a", [(K.STEP_START, 0, 0), (K.JOB_START, 1)])
    comp = Event(K.COMPILATION, "job", "a", 0, 1.0,
                 payload={"duration_s": 1.0, "recompile": False, "name": "f"})
    store.append([evs[0], comp, evs[1]])
    _, tot = _agree(store, "job", now=1.0)
    assert tot["PROGRAM_STARTUP"] == pytest.approx(1.0)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(timelines())
def test_the_row_loop_reads_the_owner_table_of_its_mode(evs):
    """The row loop reads ``rules.gap_owner`` through the table of the run's mode (device
    ends seen, a re-initialisation open); after every row the table is that mode's."""
    from goodput_jax.measure.engine import StreamKeys
    from goodput_jax.measure.engine.rules import OWNER_TABLES
    from goodput_jax.measure.events import KIND_CODES

    keys = StreamKeys()
    eng = Engine()
    for e in evs:
        extra = e.label if e.label is not None else e.payload
        eng.feed([(KIND_CODES[e.kind], keys.key(e.run_id, e.host), e.timestamp,
                   -1 if e.step is None else e.step, extra)])
        assert eng.owners is OWNER_TABLES[eng.dev_mode][eng.reinit_open > 0]
        assert eng.reinit_open >= 0
