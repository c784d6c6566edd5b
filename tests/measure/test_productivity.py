"""ML Productivity Goodput from hand-made timelines (issue 35, Build 2 and 3).

Every expected number is computed by hand from the timeline written in the test.
"""

from __future__ import annotations

import math

import pytest

from goodput_jax.measure.advice import daly_interval, expected_goodput
from goodput_jax.measure.calculator import BadputType
from goodput_jax.measure.events import Event
from goodput_jax.measure.productivity import (
    DevicePeak,
    ProgramCost,
    SchedulingSpan,
    SchedulingTimeline,
    timeline_from_segments,
)
from tests.measure._timeline import K, calc_for, events, new_store

PEAK = DevicePeak("chip", 1e12, 1e10, "user")  # ridge point 100 FLOP/byte


def _cost(step: int, t: float, flops: float, nbytes: float, run: str = "r1") -> Event:
    c = ProgramCost("jit(step)", flops, 0.0, nbytes, "chip", 1, PEAK)
    return Event(K.PROGRAM_COST, "job", run, 0, t, step=step, payload=c.to_payload())


def test_scheduling_span_validation():
    with pytest.raises(ValueError, match=r"end \(1.0\) must be >= start"):
        SchedulingSpan(2.0, 1.0, True, "running")
    with pytest.raises(ValueError, match="held"):
        SchedulingSpan(0.0, 1.0, 1, "running")
    with pytest.raises(ValueError, match="reason"):
        SchedulingSpan(0.0, 1.0, True, "")
    with pytest.raises(ValueError, match="start"):
        SchedulingSpan(math.nan, 1.0, True, "running")
    with pytest.raises(ValueError, match="overlaps"):
        SchedulingTimeline((SchedulingSpan(0, 5, True, "running"),
                            SchedulingSpan(4, 6, False, "queued")))
    tl = SchedulingTimeline.of([SchedulingSpan(10, 20, True, "running"),
                                SchedulingSpan(0, 10, False, "queued"),
                                SchedulingSpan(20, 25, True, "running")])
    assert tl.held_windows() == ((10.0, 25.0),)
    assert tl.by_reason() == {"queued": 10.0, "running": 15.0}
    assert SchedulingTimeline().scheduling_goodput == 1.0


def _job_with_programs(store):
    # steps 0-4 with program A (1e10 FLOPs, 1e8 bytes: compute-bound, ideal 10 ms), steps
    # 5-9 with program B (1e9 FLOPs, 4e7 bytes: memory-bound, ideal 4 ms); host-timed
    # steps: step s runs from its start to the next start
    spec = [(K.JOB_START, 0.0)]
    t = 1.0
    for s in range(10):
        spec.append((K.STEP_START, t, s))
        t += 1.0 if s in (0, 5) else (0.02 if s < 5 else 0.008)  # first steps: compile
    spec.append((K.JOB_END, t))
    evs = events("job", "r1", spec)
    evs.insert(2, _cost(0, 1.0, 1e10, 1e8))
    evs.insert(8, _cost(5, evs[7].timestamp, 1e9, 4e7))
    store.append(evs)
    return t


def test_program_goodput_by_hand():
    store = new_store()
    _job_with_programs(store)
    pg = calc_for(store).get_program_goodput()
    a, b = pg.programs
    assert (a.first_step, a.num_steps, b.first_step, b.num_steps) == (0, 4, 5, 4)
    assert a.step_time_s == pytest.approx(0.02) and b.step_time_s == pytest.approx(0.008)
    assert a.compute_time_s == pytest.approx(0.01) and a.memory_time_s == pytest.approx(0.01 * 1)
    assert a.bound == "ridge"  # 1e10 / 1e8 = 100 FLOP/byte = the ridge: "near the ridge"
    assert a.mfu == pytest.approx(0.5) and a.program_goodput == pytest.approx(0.5)
    assert b.bound == "memory" and b.ideal_step_time_s == pytest.approx(0.004)
    assert b.mfu == pytest.approx(0.001 / 0.008) and b.program_goodput == pytest.approx(0.5)
    # weighted by step time: (4 x 0.01 + 4 x 0.004) / (4 x 0.02 + 4 x 0.008)
    assert pg.program_goodput == pytest.approx(0.056 / 0.112)
    assert pg.mfu == pytest.approx((0.04 + 0.004) / 0.112)
    # the caller's peak and table win over the recorded one
    fast = DevicePeak("chip", 2e12, 1e10, "user")
    assert calc_for(store).get_program_goodput(fast).programs[0].mfu == pytest.approx(0.25)
    assert calc_for(store).get_program_goodput(peak_table={"chip": fast}).programs[0].mfu \
        == pytest.approx(0.25)


def test_no_program_cost_gives_nan():
    store = new_store()
    store.append(events("job", "r1", [(K.JOB_START, 0), (K.STEP_START, 1, 0), (K.JOB_END, 2)]))
    pg = calc_for(store).get_program_goodput()
    assert pg.programs == () and math.isnan(pg.program_goodput)


def test_productivity_with_a_cluster_timeline_multiplies():
    store = new_store()
    end = _job_with_programs(store)
    calc = calc_for(store, now=end)
    # the cluster kept the job queued 30 s before its start and moved it once (10 s)
    tl = SchedulingTimeline.of([
        SchedulingSpan(-30.0, 0.0, False, "queued"),
        SchedulingSpan(0.0, end, True, "running"),
        SchedulingSpan(end, end + 10.0, False, "relaunching"),
    ])
    r = calc.get_productivity_goodput(tl)
    det = calc.get_job_goodput_details()
    assert r.total_s == pytest.approx(end + 40.0) and r.held_s == pytest.approx(end)
    assert r.scheduling_goodput == pytest.approx(end / (end + 40.0))
    assert r.runtime_goodput == pytest.approx(det["productive_time"] / end)
    assert r.ml_productivity_goodput == pytest.approx(
        r.scheduling_goodput * r.runtime_goodput * r.program_goodput)
    assert r.ettr == pytest.approx(det["productive_time"] / (end + 40.0))
    assert r.scheduling_source == "timeline"
    with pytest.raises(TypeError, match="scheduling"):
        calc.get_productivity_goodput([1, 2])


def test_scheduling_from_events_crash_and_elastic_wait():
    store = new_store()
    # run 1: steps, crash at t=20 (last event); run 2 starts at t=50: 30 s relaunching;
    # then an elastic wait for slices of 10 s; clean end at 100
    store.append(events("job", "r1", [(K.JOB_START, 0), (K.STEP_START, 5, 0),
                                      (K.STEP_START, 20, 1)]))
    store.append(events("job", "r2", [(K.JOB_START, 50), (K.STEP_START, 55, 1),
                                      (K.ELASTIC_WAIT_START, 70, None, "slice_down"),
                                      (K.ELASTIC_WAIT_END, 80, None, "slice_down"), (K.STEP_START, 85, 2),
                                      (K.JOB_END, 100)]))
    calc = calc_for(store, now=100.0)
    tl = calc.get_scheduling_timeline()
    assert tl.total_s == pytest.approx(100.0)
    assert tl.by_reason()["relaunching"] == pytest.approx(30.0)
    assert tl.by_reason()["elastic_wait"] == pytest.approx(10.0)
    assert tl.held_s == pytest.approx(60.0)
    r = calc.get_productivity_goodput()
    assert r.scheduling_source == "events" and r.scheduling_goodput == pytest.approx(0.6)
    det = calc.get_job_goodput_details()
    assert r.runtime_goodput == pytest.approx(det["productive_time"] / 60.0)
    assert r.ettr == pytest.approx(det["productive_time"] / 100.0)
    # with no program cost recorded the product is NaN, the other factors are not
    assert math.isnan(r.ml_productivity_goodput) and not math.isnan(r.ettr)


def test_timeline_from_segments_merges_and_splits():
    segs = [[0, 4, "PRODUCTIVE"], [4, 9, "OTHER"], [9, 12, "ELASTIC_SCALE_UP"],
            [12, 20, "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"], [20, 22, "PRODUCTIVE"]]
    tl = timeline_from_segments(segs, crashes=[(15.0, 0)], restarts=[(19.0, 1)])
    assert [(s.start, s.end, s.held, s.reason) for s in tl.spans] == [
        (0.0, 9.0, True, "running"), (9.0, 12.0, False, "elastic_wait"),
        (12.0, 15.0, True, "running"), (15.0, 19.0, False, "relaunching"),
        (19.0, 22.0, True, "running")]


def test_checkpoint_advice_and_forecast_from_events():
    store = new_store()
    # 1 s steps; a 2 s save every 10 steps; a crash after step 24 (run 2 restarts 8 s
    # later and restores for 2 s); end at step 40
    spec1 = [(K.JOB_START, 0.0)]
    t, s = 1.0, 0
    while s < 25:
        spec1.append((K.STEP_START, t, s))
        t += 1.0
        s += 1
        if s % 10 == 0:
            spec1 += [(K.CHECKPOINT_SAVE_START, t, s), (K.CHECKPOINT_SAVE_END, t + 2.0, s)]
            t += 2.0
    store.append(events("job", "r1", spec1))
    crash_t = t
    t += 8.0
    spec2 = [(K.JOB_START, t), (K.CHECKPOINT_RESTORE_START, t), (K.CHECKPOINT_RESTORE_END, t + 2)]
    t += 2.0
    s = 20
    while s <= 40:
        spec2.append((K.STEP_START, t, s))
        t += 1.0
        s += 1
        if s % 10 == 0:
            spec2 += [(K.CHECKPOINT_SAVE_START, t, s), (K.CHECKPOINT_SAVE_END, t + 2.0, s)]
            t += 2.0
    spec2.append((K.JOB_END, t))
    store.append(events("job", "r2", spec2))
    calc = calc_for(store, now=t)
    det = calc.get_job_goodput_details()
    assert det["num_disruptions"] == 1
    adv = calc.get_checkpoint_advice()
    saves = 2 + 2  # steps 10, 20 in run 1; 30, 40 in run 2
    save_cost = det["badput_time"][BadputType.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME] / saves
    assert adv.save_cost_s == pytest.approx(save_cost) and save_cost == pytest.approx(2.0)
    assert adv.mtbf_s == pytest.approx(det["total_time"]) and adv.mtbf_source == "observed"
    restart = (det["badput_time"][BadputType.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION]
               + det["badput_time"][BadputType.UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME])
    assert restart == pytest.approx(9.0 + 2.0)
    # the restart cost Daly's model takes: the downtime (9 s) less the in-flight step's
    # expected lost work (half a mean step, 0.5 s: the model counts lost work itself),
    # plus the restore (2 s)
    assert adv.restart_s == pytest.approx(9.0 - 0.5 + 2.0)
    restart = adv.restart_s
    assert adv.step_time_s == pytest.approx(1.0)
    assert adv.current_interval_steps == 10
    assert adv.interval_steps == round(daly_interval(save_cost, det["total_time"]))
    assert adv.current_predicted_goodput == pytest.approx(
        expected_goodput(10.0, save_cost, det["total_time"], restart))
    given = calc.get_checkpoint_advice(mtbf_s=3600.0, save_cost_s=10.0)
    assert given.mtbf_source == "given" and given.save_cost_s == 10.0
    assert given.interval_steps == round(daly_interval(10.0, 3600.0))
    # forecast: 60 more steps at 1 s, recurring badput per productive step as today: the
    # 4 saves (8 s), the redone steps 20-23 (4 s), the recovery (9 s) and the restore (2 s)
    # over 41 productive steps; the 1 s before step 0 is one-time, not repeated
    f = calc.get_finish_forecast(100, now=t)
    assert f.current_step == 40 and f.steps_left == 60 and f.work_s == pytest.approx(60.0)
    assert det["productive_time"] == pytest.approx(41.0)
    assert f.expected_badput_s == pytest.approx(60.0 * (8 + 4 + 9 + 2) / 41)
    assert f.finish_time == pytest.approx(t + f.seconds_left)
    assert crash_t < t


def test_advice_needs_mtbf_without_disruptions():
    store = new_store()
    store.append(events("job", "r1", [(K.JOB_START, 0), (K.STEP_START, 1, 0),
                                      (K.CHECKPOINT_SAVE_START, 2, 1),
                                      (K.CHECKPOINT_SAVE_END, 3, 1), (K.STEP_START, 3, 1),
                                      (K.JOB_END, 4)]))
    with pytest.raises(ValueError, match="mtbf_s"):
        calc_for(store).get_checkpoint_advice()
    assert calc_for(store).get_checkpoint_advice(mtbf_s=100.0).current_interval_steps is None


def test_program_cost_through_a_row_store():
    """A store without a columnar read (RowColumns: the Cloud Logging stores' path) hands the
    program cost's payload to the calculator too."""
    from goodput_jax.measure.calculator import GoodputCalculator
    from goodput_jax.measure.stores import as_event_store

    class ListStore:
        url = "list://"

        def __init__(self):
            self.events = []

        def append(self, evs):
            self.events.extend(evs)

        def read_events(self, job_name, cursor=None, limit=None):
            evs = [e for e in self.events if e.job_name == job_name]
            start = cursor or 0
            end = len(evs) if limit is None else min(len(evs), start + limit)
            return evs[start:end], end

        def list_jobs(self):
            return sorted({e.job_name for e in self.events})

        def close(self):
            pass

    store = as_event_store(ListStore())
    _job_with_programs(store)
    pg = GoodputCalculator("job", store=store, clock=lambda: 1e6).get_program_goodput()
    assert len(pg.programs) == 2 and pg.program_goodput == pytest.approx(0.5)


def test_results_as_dicts_are_json_ready():
    import json

    store = new_store()
    end = _job_with_programs(store)
    calc = calc_for(store, now=end)
    r = calc.get_productivity_goodput()
    d = json.loads(json.dumps(r.as_dict()))
    assert d["ml_productivity_goodput"] == pytest.approx(r.ml_productivity_goodput)
    assert set(d) >= {"scheduling_goodput", "runtime_goodput", "program_goodput", "ettr", "mfu"}
    p = json.loads(json.dumps(r.program.as_dict()))
    assert [q["bound"] for q in p["programs"]] == ["ridge", "memory"]
    assert [q["verdict"] for q in p["programs"]] == ["near the ridge", "memory-bound"]
    assert p["programs"][0]["peak_source"] == "user"
    f = calc.get_finish_forecast(20)
    assert json.loads(json.dumps(f.as_dict()))["steps_left"] == 20 - f.current_step
    a = calc.get_checkpoint_advice(mtbf_s=100.0, save_cost_s=1.0)
    assert json.loads(json.dumps(a.as_dict()))["interval_steps"] == a.interval_steps


def test_running_totals_equal_the_replayed_timeline():
    """The factors from the running totals equal those of the replayed spans, with and
    without a crash and an elastic wait."""
    store = new_store()
    end = _job_with_programs(store)
    calc = calc_for(store, now=end + 5.0)  # a live tail after the job end: not job time
    r = calc.get_productivity_goodput()
    exact = calc.get_scheduling_timeline()
    assert r.timeline is None and exact.held_s == exact.total_s
    assert r.total_s == pytest.approx(exact.total_s) and r.held_s == pytest.approx(exact.held_s)
    store = new_store()
    store.append(events("job", "r1", [(K.JOB_START, 0), (K.STEP_START, 5, 0),
                                      (K.STEP_START, 20, 1)]))
    store.append(events("job", "r2", [(K.JOB_START, 50), (K.STEP_START, 55, 1),
                                      (K.ELASTIC_WAIT_START, 70, None, "scale_up"),
                                      (K.ELASTIC_WAIT_END, 80, None, "scale_up"),
                                      (K.STEP_START, 85, 2)]))
    calc = calc_for(store, now=120.0)  # still running
    r = calc.get_productivity_goodput(spans=True)
    assert r.timeline is not None
    assert r.total_s == pytest.approx(r.timeline.total_s) == pytest.approx(120.0)
    assert r.held_s == pytest.approx(r.timeline.held_s) == pytest.approx(80.0)
