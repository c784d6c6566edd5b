"""One test per row of docs/semantics.md, with exact expected percentages.

Every timeline is hand-built (timestamps in seconds) in a real SQLite store and
measured with a fixed clock, so the numbers below are worked out by hand in the
comments.
"""

from __future__ import annotations

import pytest

from goodput_jax.measure.calculator import BadputType as B
from tests.measure._timeline import K, calc_for, events, new_store

TOL = 1e-6


def measure(spec_by_run, now=1e6, job="job", **kw):
    """spec_by_run: list of (run_id, host, spec); returns (goodput, breakdown, last, details)."""
    store = new_store()
    for run, host, spec in spec_by_run:
        store.append(events(job, run, spec, host=host))
    calc = calc_for(store, job, now=now, **kw)
    g, b, last = calc.get_job_goodput(include_badput_breakdown=True)
    assert g + sum(v for k, v in b.items() if k is not B.DATA_LOADING_ASYNC) == pytest.approx(100.0, abs=0.01)
    return g, b, last, calc.get_job_goodput_details()


def only(b, **expected):
    """All buckets not named are zero; named ones equal the given percentages."""
    want = {getattr(B, k): v for k, v in expected.items()}
    for bt, pct in b.items():
        assert pct == pytest.approx(want.get(bt, 0.0), abs=TOL), bt


def test_row01_buckets_and_innermost_span():
    # accel [0,2) prep [2,4) startup [4,6); step 0 [6,10) minus the run's first data load
    # [6,7) (synchronous) = 3; step 1 lasts to the job end [10,20) (its host-side STEP_END
    # at 16 does not end it) minus save [13,15) = 8. total 20, productive 11.
    # Program startup is not inferred: the only step besides the first is closed by JOB_END.
    g, b, last, _ = measure([("r", 0, [
        (K.JOB_START, 0), (K.ACCELERATOR_INIT_START, 0), (K.ACCELERATOR_INIT_END, 2),
        (K.TRAINING_PREP_START, 2), (K.TRAINING_PREP_END, 4),
        (K.PROGRAM_STARTUP_START, 4), (K.PROGRAM_STARTUP_END, 6),
        (K.STEP_START, 6, 0), (K.DATA_LOADING_START, 6), (K.DATA_LOADING_END, 7),
        (K.STEP_START, 10, 1), (K.CHECKPOINT_SAVE_START, 13, 1), (K.CHECKPOINT_SAVE_END, 15, 1),
        (K.STEP_END, 16, 1), (K.JOB_END, 20)])])
    assert g == pytest.approx(55.0, abs=TOL)
    only(b, ACCELERATOR_INITIALIZATION=10, TRAINING_PREP=10, PROGRAM_STARTUP=10, DATA_LOADING=5,
         UNPRODUCTIVE_CHECKPOINT_SAVE_TIME=10)
    assert last == 1


def test_row02_restart_rolls_back_progress():
    # run A: steps 0,1,2 complete (10 s each), step 3 in flight at the crash (t=30).
    # run B starts at 40 and resumes at step 2: A's step 2 (10 s) is wasted progress;
    # downtime 30->40 is recovery; B's [40,50) before its first step is other;
    # B's steps 2 and 3 are productive (10 s each). total 70, productive 40.
    g, b, last, d = measure([
        ("A", 0, [(K.JOB_START, 0), (K.STEP_START, 0, 0), (K.STEP_START, 10, 1),
                  (K.STEP_START, 20, 2), (K.STEP_START, 30, 3)]),
        ("B", 0, [(K.JOB_START, 40), (K.STEP_START, 50, 2), (K.STEP_START, 60, 3),
                  (K.JOB_END, 70)]),
    ])
    assert g == pytest.approx(400 / 7, abs=TOL)
    only(b, WASTED_PROGRESS_FROM_DISRUPTION=100 / 7,
         INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION=100 / 7, OTHER=100 / 7)
    assert last == 3
    assert d["num_runs"] == 2 and d["num_disruptions"] == 1


def test_row03_backwards_step_in_one_run_is_a_restart():
    # steps 0..2 then step 1 again inside the same run: steps 1 and 2 (20 s) wasted.
    g, b, last, _ = measure([("r", 0, [
        (K.JOB_START, 0), (K.STEP_START, 0, 0), (K.STEP_START, 10, 1), (K.STEP_START, 20, 2),
        (K.STEP_START, 30, 1), (K.JOB_END, 40)])])
    # productive: step0 10 + step1 (again) 10 = 20; wasted 20; total 40
    assert g == pytest.approx(50.0, abs=TOL)
    only(b, WASTED_PROGRESS_FROM_DISRUPTION=50.0)
    assert last == 1


def test_row04_gaps_in_step_numbers_are_productive():
    g, b, last, _ = measure([("r", 0, [
        (K.JOB_START, 0), (K.STEP_START, 0, 0), (K.STEP_START, 10, 5), (K.STEP_START, 20, 10),
        (K.JOB_END, 30)])])
    assert g == pytest.approx(100.0, abs=TOL)
    only(b)
    assert last == 10


def test_row05_last_step_before_a_crash():
    # run A: step 0 complete (10 s), step 1 in flight when it crashed (last event t=10).
    # B restarts at 25 resuming step 1: nothing completed is redone.
    # recovery = in-flight step 1 of A (0 s recorded) + downtime 10->25 = 15.
    spec = [
        ("A", 0, [(K.JOB_START, 0), (K.STEP_START, 0, 0), (K.STEP_START, 10, 1)]),
        ("B", 0, [(K.JOB_START, 25), (K.STEP_START, 25, 1), (K.STEP_START, 35, 2),
                  (K.JOB_END, 45)]),
    ]
    g, b, last, _ = measure(spec)
    assert g == pytest.approx(200 / 3, abs=TOL)
    only(b, INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION=100 / 3)
    assert last == 2
    # Seen while A is still the latest run (now=20): the in-flight step 1 is not productive.
    g, b, last, _ = measure(spec[:1], now=20)
    assert g == pytest.approx(50.0, abs=TOL)
    only(b, OTHER=50.0)
    assert last == 0


def test_row06_nested_restore_inside_training_prep_counted_once():
    # prep [0,8) contains restore [2,6): prep 4, restore 4; steps 20; total 28
    g, b, _, _ = measure([("r", 0, [
        (K.JOB_START, 0), (K.TRAINING_PREP_START, 0), (K.CHECKPOINT_RESTORE_START, 2, 7),
        (K.CHECKPOINT_RESTORE_END, 6, 7), (K.TRAINING_PREP_END, 8),
        (K.STEP_START, 8, 8), (K.STEP_START, 18, 9), (K.JOB_END, 28)])])
    assert g == pytest.approx(2000 / 28, abs=TOL)
    only(b, TRAINING_PREP=400 / 28, UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME=400 / 28)


def test_row07_overlapping_custom_events_counted_once():
    # A [2,6), B [4,8) inside step 0 [0,10): [2,4)->A, [4,8)->B (innermost), custom 6 s once.
    g, b, _, d = measure([("r", 0, [
        (K.JOB_START, 0), (K.STEP_START, 0, 0),
        (K.CUSTOM_BADPUT_START, 2, None, "A"), (K.CUSTOM_BADPUT_START, 4, None, "B"),
        (K.CUSTOM_BADPUT_END, 6, None, "A"), (K.CUSTOM_BADPUT_END, 8, None, "B"),
        (K.STEP_START, 10, 1), (K.JOB_END, 20)])])
    assert g == pytest.approx(70.0, abs=TOL)
    only(b, CUSTOM_BADPUT_EVENTS=30.0)
    assert d["custom_badput_time"] == pytest.approx({"A": 2.0, "B": 4.0})


def test_row08_several_runs_under_one_job_name():
    # A ends cleanly at 20; B (a new launch reusing the name) starts at 1000 from step 0.
    # The idle 20->1000 is not job time; B redoing steps 0,1 wastes A's 20 s.
    g, b, _, d = measure([
        ("A", 0, [(K.JOB_START, 0), (K.STEP_START, 0, 0), (K.STEP_START, 10, 1), (K.JOB_END, 20)]),
        ("B", 0, [(K.JOB_START, 1000), (K.STEP_START, 1000, 0), (K.STEP_START, 1010, 1),
                  (K.JOB_END, 1020)]),
    ])
    assert g == pytest.approx(50.0, abs=TOL)
    only(b, WASTED_PROGRESS_FROM_DISRUPTION=50.0)
    assert d["num_runs"] == 2 and d["num_disruptions"] == 0 and d["total_time"] == 40.0


def test_row09_clock_skew_between_hosts():
    a = ("A", 0, [(K.JOB_START, 100), (K.STEP_START, 100, 0), (K.STEP_START, 110, 1),
                  (K.STEP_START, 120, 2)])
    # B restarts on host 1 whose clock is 50 s behind: its events read 80..100.
    behind = ("B", 1, [(K.JOB_START, 80), (K.STEP_START, 80, 2), (K.STEP_START, 90, 3),
                       (K.JOB_END, 100)])
    g, b, last, d = measure([a, behind])
    # durations never mix clocks: steps 0..3 are 10 s each; the negative gap is clamped at 0
    assert g == pytest.approx(100.0, abs=TOL)
    only(b)
    assert d["total_time"] == pytest.approx(40.0) and last == 3
    # B's clock 50 s ahead: its events read 180..200; the gap 120->180 is recovery.
    ahead = ("B", 1, [(K.JOB_START, 180), (K.STEP_START, 180, 2), (K.STEP_START, 190, 3),
                      (K.JOB_END, 200)])
    g, b, _, _ = measure([a, ahead])
    assert g == pytest.approx(40.0, abs=TOL)
    only(b, INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION=60.0)


def test_row10_interval_ending_in_a_hang():
    store = new_store()
    store.append(events("job", "r", [(K.JOB_START, 0), (K.STEP_START, 0, 0),
                                     (K.STEP_START, 10, 1), (K.STEP_START, 20, 2)]))
    calc = calc_for(store, now=100)
    # window [10, 60]: step 1 productive 10 s; step 2 never completes: 40 s other
    g, b, last = calc.get_job_goodput_interval(10.0, 60.0)
    assert g == pytest.approx(20.0, abs=TOL)
    only(b, OTHER=80.0)
    assert last == 1
    # whole job up to now=100: productive 20, hang 80
    g, b, _ = calc.get_job_goodput(include_badput_breakdown=True)
    assert g == pytest.approx(20.0, abs=TOL)
    only(b, OTHER=80.0)


def test_row11_interval_clips_and_sees_later_rollbacks():
    store = new_store()
    store.append(events("job", "A", [(K.JOB_START, 0), (K.STEP_START, 0, 0), (K.STEP_START, 10, 1),
                                     (K.STEP_START, 20, 2), (K.STEP_START, 30, 3)]))
    store.append(events("job", "B", [(K.JOB_START, 30), (K.STEP_START, 30, 2),
                                     (K.STEP_START, 40, 3), (K.JOB_END, 50)]))
    calc = calc_for(store, now=1000)
    # [5, 25]: step0 5 s + step1 10 s productive; step 2's 5 s were later redone -> wasted
    g, b, _ = calc.get_job_goodput_interval(5.0, 25.0)
    assert g == pytest.approx(75.0, abs=TOL)
    only(b, WASTED_PROGRESS_FROM_DISRUPTION=25.0)
    # the window extending past the end of the job only counts job time
    g, _, _ = calc.get_job_goodput_interval(40.0, 5000.0)
    assert g == pytest.approx(100.0, abs=TOL)


def test_row12_late_events_of_a_superseded_run_are_ignored():
    store = new_store()
    store.append(events("job", "A", [(K.JOB_START, 0), (K.STEP_START, 0, 0), (K.STEP_START, 10, 1)]))
    store.append(events("job", "B", [(K.JOB_START, 10), (K.STEP_START, 10, 1), (K.STEP_START, 20, 2)]))
    store.append(events("job", "A", [(K.STEP_START, 15, 2)]))  # zombie of A
    store.append(events("job", "B", [(K.JOB_END, 30)]))
    calc = calc_for(store)
    g, _, last = calc.get_job_goodput(include_badput_breakdown=True)
    assert g == pytest.approx(100.0, abs=TOL) and last == 2
    assert calc.get_job_goodput_details()["ignored_events"] == 1


def test_row13_running_job_open_span_runs_to_now():
    # step 0 [0,10) completes when step 1 starts; a checkpoint save still in progress at
    # now=30 counts as checkpoint save [10,30); step 1 is in flight (0 s). total 30.
    store = new_store()
    store.append(events("job", "r", [(K.JOB_START, 0), (K.STEP_START, 0, 0), (K.STEP_START, 10, 1),
                                     (K.CHECKPOINT_SAVE_START, 10, 1)]))
    g, b, _ = calc_for(store, now=30).get_job_goodput(include_badput_breakdown=True)
    assert g == pytest.approx(100 / 3, abs=TOL)
    only(b, UNPRODUCTIVE_CHECKPOINT_SAVE_TIME=200 / 3)


def test_row14_repeated_job_start_is_a_restart():
    # One recorder (one run id) calls record_job_start_time again without a job end: a crash.
    # run 1: steps 0, 1 (10 s each), step 2 in flight from 20; restart at 50: downtime
    # [20,50) = 30 recovery. run 2: [50,60) other, resumes at step 1 -> run 1's step 1 is
    # wasted (10); steps 1, 2 productive (10 each, step 2 closed by JOB_END at 80).
    # total 80: productive 30, wasted 10, recovery 30, other 10 (as ml-goodput-measurement).
    g, b, last, d = measure([("r", 0, [
        (K.JOB_START, 0), (K.STEP_START, 0, 0), (K.STEP_START, 10, 1), (K.STEP_START, 20, 2),
        (K.JOB_START, 50), (K.STEP_START, 60, 1), (K.STEP_START, 70, 2), (K.JOB_END, 80)])])
    assert g == pytest.approx(37.5, abs=TOL)
    only(b, WASTED_PROGRESS_FROM_DISRUPTION=12.5, INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION=37.5,
         OTHER=12.5)
    assert d["num_runs"] == 2 and d["num_disruptions"] == 1 and last == 2


def test_row15_program_startup_inferred_from_first_step():
    # step 0 [10,40) = 30 s; steps 1-3 = 10 s each; step 4 [70,80) closed by JOB_END
    # (excluded from the mean, like the reference). startup = 30 - mean(10,10,10) = 20,
    # taken out of step 0. total 80: productive 50, startup 20, other [0,10) 10.
    g, b, _, d = measure([("r", 0, [
        (K.JOB_START, 0), (K.STEP_START, 10, 0), (K.STEP_START, 40, 1), (K.STEP_START, 50, 2),
        (K.STEP_START, 60, 3), (K.STEP_START, 70, 4), (K.JOB_END, 80)])])
    assert g == pytest.approx(62.5, abs=TOL)
    only(b, PROGRAM_STARTUP=25, OTHER=12.5)
    assert d["productive_time"] == pytest.approx(50)


def test_row16_measured_compile_wins_and_recompiles_are_their_own_bucket():
    # As row 15 plus COMPILATION events: at 35 (18 s, recompile=False) inside step 0 and at
    # 65 (4 s, recompile=True) inside step 3. Measured time wins over the guess (no inference):
    # step 0 = 30 - 18 = 12, step 3 = 10 - 4 = 6; productive 12+10+10+6+10 = 48,
    # startup 18, recompilation 4, other 10. total 80.
    store = new_store()
    evs = events("job", "r", [
        (K.JOB_START, 0), (K.STEP_START, 10, 0), (K.STEP_START, 40, 1), (K.STEP_START, 50, 2),
        (K.STEP_START, 60, 3), (K.STEP_START, 70, 4), (K.JOB_END, 80)])
    from goodput_jax.measure.events import Event
    comp = [Event(K.COMPILATION, "job", "r", 0, 35.0,
                  payload={"duration_s": 18.0, "recompile": False, "name": "train_step"}),
            Event(K.COMPILATION, "job", "r", 0, 65.0,
                  payload={"duration_s": 4.0, "recompile": True, "name": "train_step"})]
    store.append(evs[:2] + [comp[0]] + evs[2:5] + [comp[1]] + evs[5:])
    calc = calc_for(store)
    g, b, _ = calc.get_job_goodput(include_badput_breakdown=True)
    assert g == pytest.approx(60.0, abs=TOL)
    only(b, PROGRAM_STARTUP=22.5, RECOMPILATION=5.0, OTHER=12.5)
    dev = calc.get_step_deviation()
    assert dev.step_times.tolist() == pytest.approx([12, 10, 10, 6, 10])


def test_row17_first_load_is_synchronous_later_loads_async():
    # first load [0,4) of the run is synchronous badput; loads inside steps ([12,14),
    # [22,23)) overlap the device's previous step: DATA_LOADING_ASYNC (3 s), reported
    # beside the buckets, not subtracted. steps 0, 1, 2 = 10 s each. total 34.
    g, b, _, d = measure([("r", 0, [
        (K.JOB_START, 0), (K.DATA_LOADING_START, 0), (K.DATA_LOADING_END, 4),
        (K.STEP_START, 4, 0), (K.DATA_LOADING_START, 12), (K.DATA_LOADING_END, 14),
        (K.STEP_START, 14, 1), (K.DATA_LOADING_START, 22), (K.DATA_LOADING_END, 23),
        (K.STEP_START, 24, 2), (K.JOB_END, 34)])])
    assert g == pytest.approx(3000 / 34, abs=TOL)
    only(b, DATA_LOADING=400 / 34, DATA_LOADING_ASYNC=300 / 34)
    assert d["badput_time"][B.DATA_LOADING_ASYNC] == pytest.approx(3.0)


def test_row18_host_step_end_does_not_end_the_step():
    # MaxText's context manager records STEP_END right after dispatch (t+1 .. t+2); the
    # device keeps working until the next step starts: every step lasts 10 s. 100 %.
    g, b, _, _ = measure([("r", 0, [
        (K.JOB_START, 0), (K.STEP_START, 0, 0), (K.STEP_END, 2, 0), (K.STEP_START, 10, 1),
        (K.STEP_END, 11, 1), (K.STEP_START, 20, 2), (K.STEP_END, 21, 2), (K.JOB_END, 30)])])
    assert g == pytest.approx(100.0, abs=TOL)
    only(b)


def test_row19b_a_load_running_when_device_mode_begins_becomes_synchronous():
    # first load [0,1) sync; step 0 from 1; the host loads the next batch from 2 (async under
    # the host rule); the first device end (step 0, at 4) switches to device mode while that
    # load runs: its rest [4,10) idles the device: synchronous. step 1 [10,13), device end 13.
    g, b, _, _ = measure([("r", 0, [
        (K.JOB_START, 0), (K.DATA_LOADING_START, 0), (K.DATA_LOADING_END, 1),
        (K.STEP_START, 1, 0), (K.DATA_LOADING_START, 2), (K.STEP_DEVICE_END, 4, 0),
        (K.DATA_LOADING_END, 10), (K.STEP_START, 10, 1), (K.STEP_DEVICE_END, 13, 1),
        (K.JOB_END, 13)])])
    # productive 3 + 3 = 6; data loading 1 + 6 = 7; async 9 - 7 = 2 ([2,4)); total 13
    assert g == pytest.approx(600 / 13, abs=TOL)
    only(b, DATA_LOADING=700 / 13, DATA_LOADING_ASYNC=200 / 13)


def test_row19_device_end_marks_the_busy_interval():
    # sync load [0,2); step 0 starts at 2 and the host loads the next batch [3,4) and
    # starts step 1 at 4 before the device is done (device mode begins at the first
    # STEP_DEVICE_END, 8: until then the host rule applies, so step 0 = [2,4) = 2 s and
    # step 1 = [4,12) = 8 s); device end of step 1 at 12; the device is idle while the
    # host loads [12,15): synchronous (3); step 2 [15,18) = 3; idle [18,20): other 2.
    # total 20: productive 13, data loading 2+3 = 5, other 2; async = 6 - 5 = 1.
    g, b, _, d = measure([("r", 0, [
        (K.JOB_START, 0), (K.DATA_LOADING_START, 0), (K.DATA_LOADING_END, 2),
        (K.STEP_START, 2, 0), (K.DATA_LOADING_START, 3), (K.DATA_LOADING_END, 4),
        (K.STEP_START, 4, 1), (K.STEP_DEVICE_END, 8, 0), (K.STEP_DEVICE_END, 12, 1),
        (K.DATA_LOADING_START, 12), (K.DATA_LOADING_END, 15), (K.STEP_START, 15, 2),
        (K.STEP_DEVICE_END, 18, 2), (K.JOB_END, 20)])])
    assert g == pytest.approx(65.0, abs=TOL)
    only(b, DATA_LOADING=25, OTHER=10, DATA_LOADING_ASYNC=5)
    assert d["last_productive_step"] == 2


def test_row20_hosts_of_one_run_are_one_timeline():
    # Both hosts of run "r" record (same run id, hosts 0 and 1), interleaved, host 1 a
    # little late. Host 0 wrote first: its events are the run's timeline; host 1 is no
    # crash and no restart. steps 0-2 of 10 s from 0; job end at 30 -> 100 %.
    store = new_store()
    h0 = events("job", "r", [(K.JOB_START, 0), (K.STEP_START, 0, 0), (K.STEP_START, 10, 1),
                             (K.STEP_START, 20, 2), (K.JOB_END, 30)], host=0)
    h1 = events("job", "r", [(K.JOB_START, 0.5), (K.STEP_START, 0.5, 0), (K.STEP_START, 10.5, 1),
                             (K.STEP_START, 20.5, 2), (K.JOB_END, 30.5)], host=1)
    for a, b in zip(h0, h1):
        store.append([a, b])
    calc = calc_for(store)
    g, b, last = calc.get_job_goodput(include_badput_breakdown=True)
    assert g == pytest.approx(100.0) and last == 2
    d = calc.get_job_goodput_details()
    assert (d["num_runs"], d["num_disruptions"], d["num_hosts"], d["dead_hosts"]) == (1, 0, 2, 0)


def test_row21_a_host_that_dies_is_a_disruption():
    # Host 1 of run "r" dies after step 1 (no job end); host 0 finishes [0,30). Then run
    # "s" (both hosts) starts at 40. The run "r" did not end cleanly on every host: one
    # disruption, its time unchanged (host 0's timeline); the pause [30,40) is not job
    # time (host 0 ended). s: steps of 10 s [40,60), job end at 60. total 50, 100 %.
    store = new_store()
    store.append(events("job", "r", [(K.JOB_START, 0), (K.STEP_START, 0, 0)], host=0))
    store.append(events("job", "r", [(K.JOB_START, 0), (K.STEP_START, 0, 0),
                                     (K.STEP_START, 10, 1)], host=1))
    store.append(events("job", "r", [(K.STEP_START, 10, 1), (K.STEP_START, 20, 2),
                                     (K.JOB_END, 30)], host=0))
    calc = calc_for(store)
    d = calc.get_job_goodput_details()
    assert d["num_disruptions"] == 1 and d["dead_hosts"] == 1  # already, as the run has ended
    for host in (0, 1):
        store.append(events("job", "s", [(K.JOB_START, 40), (K.STEP_START, 40, 3),
                                         (K.STEP_START, 50, 4), (K.JOB_END, 60)], host=host))
    g, _, _ = calc.get_job_goodput(include_badput_breakdown=True)
    d = calc.get_job_goodput_details()
    assert g == pytest.approx(100.0)
    assert (d["num_runs"], d["num_disruptions"], d["dead_hosts"]) == (2, 1, 1)


def test_row22_orbax_checkpoint_statistics_are_flat():
    # OTHER [0,5); steps of 10 s from 5; Orbax statistics: a 4 s blocking save and a 3 s
    # restore. Save comes out of productive (30 -> 26), restore out of OTHER (5 -> 2).
    store = new_store()
    from goodput_jax.measure.events import Event
    store.append(events("job", "r", [(K.JOB_START, 0), (K.STEP_START, 5, 0),
                                     (K.STEP_START, 15, 1)]))
    store.append([Event(K.CHECKPOINT_STATS, "job", "r", 0, 16.0,
                        payload={"event_type": "save", "duration_s": 4.0, "step": 1}),
                  Event(K.CHECKPOINT_STATS, "job", "r", 0, 17.0,
                        payload={"event_type": "restore", "duration_s": 3.0, "step": 1})])
    store.append(events("job", "r", [(K.STEP_START, 25, 2), (K.JOB_END, 35)]))
    g, b, _ = calc_for(store).get_job_goodput(include_badput_breakdown=True)
    assert g == pytest.approx(2600 / 35, abs=TOL)
    only(b, UNPRODUCTIVE_CHECKPOINT_SAVE_TIME=400 / 35, UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME=300 / 35,
         OTHER=200 / 35)


def test_row24_exclusions_remove_recorded_activity_time():
    # prep [0,10), nothing [10,20), step 0 [20,25) closed by the job end; exclusion [5,15)
    # overlaps 5 s of prep (the 5 s of unattributed time stay OTHER, as the reference):
    # excluded 5, job time 20: prep 5 (25 %), other 10 (50 %), goodput 5 (25 %).
    from goodput_jax import goodput
    store = new_store()
    store.append(events("job", "r", [(K.JOB_START, 0), (K.TRAINING_PREP_START, 0),
                                     (K.TRAINING_PREP_END, 10), (K.STEP_START, 20, 0),
                                     (K.JOB_END, 25)]))
    calc = goodput.GoodputCalculator("job", "log", store=store, clock=lambda: 1e6)
    g, b, last, excluded = calc.get_job_goodput_with_exclusions([(5.0, 15.0)], True)
    assert excluded == pytest.approx(5.0) and last == 0
    assert g == pytest.approx(25.0)
    G = goodput.BadputType  # the drop-in's keys are Google's enum
    assert b[G.TRAINING_PREP] == pytest.approx(25.0) and b[G.OTHER] == pytest.approx(50.0)
    with pytest.raises(TypeError, match=r"exclusion_intervals\[0\]"):
        calc.get_job_goodput_with_exclusions([5.0])


_SPAN_PAIRS = {
    "save": (K.CHECKPOINT_SAVE_START, K.CHECKPOINT_SAVE_END, "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME"),
    "restore": (K.CHECKPOINT_RESTORE_START, K.CHECKPOINT_RESTORE_END,
                "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME"),
    "custom": (K.CUSTOM_BADPUT_START, K.CUSTOM_BADPUT_END, "CUSTOM_BADPUT_EVENTS"),
    "data": (K.DATA_LOADING_START, K.DATA_LOADING_END, "DATA_LOADING"),
}


@pytest.mark.parametrize("kind", sorted(_SPAN_PAIRS))
def test_row25_a_span_waiting_for_queued_steps_gives_way_to_them(kind):
    # step 0 [0,1) (device end at 1: device mode). The host queues steps 1-3 at 1.0, 1.1,
    # 1.2, then opens a span at 1.3 that blocks on the device (np.asarray(w) in a save)
    # and closes at 5. The device finishes steps 1-3 at 2, 3, 4: [1.3, 4) is step time,
    # only the idle [4, 5) is the span's. Step 4 [5, 6). total 6: productive 5, span 1.
    # (The old rule, data loading only, gave the span 3.7 s and steps 2-3 0 s each.)
    start, end, bucket = _SPAN_PAIRS[kind]
    label = "eval" if kind == "custom" else None
    step = None if kind in ("custom", "data") else 3
    g, b, _, d = measure([("r", 0, [
        (K.JOB_START, 0), (K.STEP_START, 0, 0), (K.STEP_DEVICE_END, 1, 0),
        (K.STEP_START, 1.0, 1), (K.STEP_START, 1.1, 2), (K.STEP_START, 1.2, 3),
        (start, 1.3, step, label), (K.STEP_DEVICE_END, 2, 1), (K.STEP_DEVICE_END, 3, 2),
        (K.STEP_DEVICE_END, 4, 3), (end, 5, step, label), (K.STEP_START, 5, 4),
        (K.STEP_DEVICE_END, 6, 4), (K.JOB_END, 6)])])
    assert g == pytest.approx(500 / 6, abs=TOL)
    # (a load: 3.7 s long, 1 s of it synchronous, 2.7 s asynchronous)
    only(b, **{bucket: 100 / 6}, DATA_LOADING_ASYNC=270 / 6 if kind == "data" else 0.0)
    if kind == "custom":
        assert d["custom_badput_time"] == {"eval": pytest.approx(1.0)}


def test_row25b_nested_spans_and_a_hang_inside_a_span_give_way_too():
    # as row 25 with a custom span nested in a save (Orbax's save inside a custom
    # "checkpointing" block): the device busy until 3 owns [1.3, 3); save then holds the
    # idle [3, 4), the custom span [4, 4.5), the save again [4.5, 5). Steps: 1 [1,2), 2 [2,3).
    # Job still running at now=7 with step 3 in flight from 5 and a custom span from 5.5:
    # the in-flight step owns the device ([5, 7) is OTHER until it completes, rule 10),
    # the span gets nothing while the device works.
    store = new_store()
    store.append(events("job", "r", [
        (K.JOB_START, 0), (K.STEP_START, 0, 0), (K.STEP_DEVICE_END, 1, 0),
        (K.STEP_START, 1.0, 1), (K.STEP_START, 1.1, 2),
        (K.CHECKPOINT_SAVE_START, 1.3, 2), (K.CUSTOM_BADPUT_START, 1.4, None, "ckpt"),
        (K.STEP_DEVICE_END, 2, 1), (K.CUSTOM_BADPUT_END, 2.5, None, "ckpt"),
        (K.STEP_DEVICE_END, 3, 2), (K.CUSTOM_BADPUT_START, 4, None, "ckpt"),
        (K.CUSTOM_BADPUT_END, 4.5, None, "ckpt"), (K.CHECKPOINT_SAVE_END, 5, 2),
        (K.STEP_START, 5, 3), (K.CUSTOM_BADPUT_START, 5.5, None, "eval")]))
    d = calc_for(store, now=7.0).get_job_goodput_details()
    assert d["productive_time"] == pytest.approx(3.0, abs=TOL)
    assert d["badput_time"][B.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME] == pytest.approx(1.5, abs=TOL)
    assert d["custom_badput_time"] == {"ckpt": pytest.approx(0.5, abs=TOL)}
    assert d["badput_time"][B.OTHER] == pytest.approx(2.0, abs=TOL)
    assert d["total_time"] == pytest.approx(7.0, abs=TOL)


def test_row25c_without_device_ends_a_save_keeps_google_s_rule():
    # the same host events without STEP_DEVICE_END (the plain drop-in): Google's rule 1,
    # the save [1.3, 5) is all checkpoint badput; steps by host starts: 0 [0,1), 1 [1,1.1),
    # 2 [1.1,1.2), 3 [1.2,5) minus the save = 0.1, 4 [5,6). productive 2.3 of 6.
    # Program startup inferred: first step 1 - mean(0.1, 0.1, 0.1) = 0.9 (step 4 is closed
    # by the job end: excluded).
    g, b, _, _ = measure([("r", 0, [
        (K.JOB_START, 0), (K.STEP_START, 0, 0), (K.STEP_START, 1.0, 1), (K.STEP_START, 1.1, 2),
        (K.STEP_START, 1.2, 3), (K.CHECKPOINT_SAVE_START, 1.3, 3),
        (K.CHECKPOINT_SAVE_END, 5, 3), (K.STEP_START, 5, 4), (K.JOB_END, 6)])])
    assert g == pytest.approx(100 * (2.3 - 0.9) / 6, abs=1e-4)
    only(b, UNPRODUCTIVE_CHECKPOINT_SAVE_TIME=370 / 6, PROGRAM_STARTUP=90 / 6)


def test_row25d_orbax_instrument_events_give_way_to_queued_steps():
    # the events goodput_jax.integrations.orbax.instrument() writes: save(step=3) records a
    # save span from the call's start (1.3) to its return (2.5), then checkpoint progress
    # stamped at the call's start; wait_until_finished() a save span [2.6, 3.0) (step of the
    # last save). The blocking save copies the arrays off the device, so it waits for the
    # queued steps 1-3 (device ends 1.6, 2.0, 2.4): [1.3, 2.4) is step time, [2.4, 2.5) and
    # [2.6, 3.0) are the save's (0.5 s), [2.5, 2.6) OTHER; step 4 [3, 4). total 4:
    # step time 1 + 0.6 + 0.4 + 0.4 + 1 = 3.4, save 0.5, other 0.1; program startup inferred
    # (no compile events): first step 1 - mean(0.6, 0.4, 0.4, 1) = 0.4, so productive 3.0.
    store = new_store()
    store.append(events("job", "r", [
        (K.JOB_START, 0), (K.STEP_START, 0, 0), (K.STEP_DEVICE_END, 1, 0),
        (K.STEP_START, 1.0, 1), (K.STEP_START, 1.1, 2), (K.STEP_START, 1.2, 3),
        (K.CHECKPOINT_SAVE_START, 1.3, 3), (K.STEP_DEVICE_END, 1.6, 1),
        (K.STEP_DEVICE_END, 2.0, 2), (K.STEP_DEVICE_END, 2.4, 3),
        (K.CHECKPOINT_SAVE_END, 2.5, 3), (K.CHECKPOINT_PROGRESS, 1.3, 3),
        (K.CHECKPOINT_SAVE_START, 2.6, 3), (K.CHECKPOINT_SAVE_END, 3.0, 3),
        (K.STEP_START, 3, 4), (K.STEP_DEVICE_END, 4, 4), (K.JOB_END, 4)]))
    calc = calc_for(store)
    g, b, _ = calc.get_job_goodput(include_badput_breakdown=True)
    assert g == pytest.approx(75.0, abs=TOL)
    only(b, UNPRODUCTIVE_CHECKPOINT_SAVE_TIME=12.5, OTHER=2.5, PROGRAM_STARTUP=10.0)
    d = calc.get_job_goodput_details()
    assert d["last_checkpointed_step"] == 3
    np_steps = calc.get_step_deviation()
    assert np_steps.step_times.tolist() == pytest.approx([1.0, 0.6, 0.4, 0.4, 1.0])


def test_row27_program_cost_attributes_no_time():
    # steps 0-2 at [1,2), [2,3), [3,5); job end 5; a program cost at step 0 (t=1.5) and one
    # at step 2 (t=3.5, inside the step): the buckets are exactly as without them
    from goodput_jax.measure.events import Event
    from goodput_jax.measure.productivity import ProgramCost

    spec = [(K.JOB_START, 0), (K.STEP_START, 1, 0), (K.STEP_START, 2, 1),
            (K.STEP_START, 3, 2), (K.JOB_END, 5)]
    g0, b0, last0, _ = measure([("r1", 0, spec)])
    store = new_store()
    evs = events("job", "r1", spec)
    cost = ProgramCost("jit(f)", 1e9, 0.0, 1e6, "cpu").to_payload()
    evs.insert(2, Event(K.PROGRAM_COST, "job", "r1", 0, 1.5, step=0, payload=cost))
    evs.insert(5, Event(K.PROGRAM_COST, "job", "r1", 0, 3.5, step=2, payload=cost))
    store.append(evs)
    calc = calc_for(store, "job")
    g, b, last = calc.get_job_goodput(include_badput_breakdown=True)
    assert (g, last) == (pytest.approx(g0), last0) and g0 == pytest.approx(80.0)
    assert b == pytest.approx(b0)
    assert calc.get_scheduling_timeline().scheduling_goodput == 1.0
