"""Hang detection: "seconds since the last step" and a hang threshold, reported while the
job is still running (no job end needed), with an injected clock; then the same through the
monitor's real uploader thread and a real recorder."""

from __future__ import annotations

import logging
import math
import threading
import time

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from goodput_jax.measure.calculator import BadputType, GoodputCalculator
from goodput_jax.measure.events import Event
from goodput_jax.measure.events import EventKind as K
from goodput_jax.measure.monitor import GoodputMonitor
from goodput_jax.measure.recorder import GoodputRecorder
from goodput_jax.measure.stores.sqlite import SQLiteStore

T0 = 1_700_000_000.0


def _acc(path) -> EventAccumulator:
    acc = EventAccumulator(str(path), size_guidance={"scalars": 0})
    acc.Reload()
    return acc


@pytest.mark.parametrize("threshold,interval", [(10.0, 5.0), (7.0, 3.0), (2.0, 4.0)])
def test_steps_stop_and_the_job_is_reported_hung_within_threshold_plus_one_interval(
        tmp_path, caplog, threshold, interval):
    """Steps every 1 s until t=19, then nothing; the monitor polls every ``interval`` s of
    the injected clock (what its uploader does) and appends what the job recorded up to then.
    It reports hung no earlier than ``threshold`` after the last step and no later than
    ``threshold + interval``; a step brings it back; a job end is never a hang."""
    store = SQLiteStore(str(tmp_path / "g.db"))
    now = [T0]
    pending = [Event(K.JOB_START, "job", "r1", 0, T0)] + [
        Event(K.STEP_START, "job", "r1", 0, T0 + 1 + i, step=i) for i in range(19)]
    pending.append(Event(K.STEP_START, "job", "r1", 0, T0 + 50, step=19))  # it resumes
    pending.append(Event(K.JOB_END, "job", "r1", 0, T0 + 51))
    mon = GoodputMonitor("job", None, str(tmp_path / "tb"), interval, True, store=store,
                         clock=lambda: now[0], hang_threshold_seconds=threshold)
    polls, window = [], None
    t = interval
    with caplog.at_level(logging.INFO, logger="goodput_jax.measure.monitor"):
        while t <= 120:
            now[0] = T0 + t
            due = [e for e in pending if e.timestamp <= now[0]]
            pending = [e for e in pending if e.timestamp > now[0]]
            if due:
                store.append(due)
            values = mon.upload_goodput()
            polls.append((t, values["hang/hung"], values["hang/seconds_since_last_step"]))
            if values["hang/hung"] and not window:  # while hung: the interval is badput
                window = GoodputCalculator("job", None, store=store, clock=lambda: now[0]
                                           ).get_job_goodput_interval(now[0] - 5, now[0])
            t += interval
    mon.close()
    last_step = 19.0  # step 18 started at t=19
    first_hung = next(t for t, hung, _ in polls if hung)
    assert last_step + threshold <= first_hung <= last_step + threshold + interval
    assert all(not hung for t, hung, _ in polls if t < last_step + threshold)
    for t, _, secs in polls:
        expect = t - max(s for s in [0.0, *range(1, 20), 50.0] if s <= t)
        if t >= 51:
            expect = t - 50.0
        assert secs == pytest.approx(expect)
    assert all(hung for t, hung, _ in polls if last_step + threshold <= t < 50)
    assert not any(hung for t, hung, _ in polls if t >= 50)  # stepped again, then ended
    assert caplog.text.count("is hung") == 1 and "hang_threshold_seconds" in caplog.text
    assert "is stepping again" in caplog.text or "ended" in caplog.text
    acc = _acc(tmp_path / "tb")
    assert [s.value for s in acc.Scalars("hang/hung")] == [float(h) for _, h, _ in polls]
    # interval queries count the hang as badput (as they always did)
    g, bad, _ = window
    assert g == 0.0 and bad[BadputType.OTHER] == pytest.approx(100.0)
    store.close()


def test_a_run_that_never_steps_and_a_crashed_run_are_hung_an_ended_one_is_not(tmp_path):
    store = SQLiteStore(str(tmp_path / "g.db"))
    now = [T0 + 100]
    mon = GoodputMonitor("job", None, str(tmp_path / "tb"), 30, True, store=store,
                         clock=lambda: now[0], hang_threshold_seconds=60)
    assert mon.upload_hang_status() == {}  # no events yet: nothing to say
    store.append([Event(K.JOB_START, "job", "r1", 0, T0)])  # stuck before its first step
    assert mon.upload_hang_status() == {"hang/seconds_since_last_step": 100.0, "hang/hung": 1.0}
    assert mon.hung
    store.append([Event(K.STEP_START, "job", "r1", 0, T0 + 90, step=0),
                  Event(K.JOB_END, "job", "r1", 0, T0 + 95)])
    assert mon.upload_hang_status()["hang/hung"] == 0.0 and not mon.hung
    now[0] = T0 + 10_000  # long after the end: finished, not hung
    assert mon.upload_hang_status() == {"hang/seconds_since_last_step": 9910.0, "hang/hung": 0.0}
    # a restart (new run, no job end yet) counts from the restart
    store.append([Event(K.JOB_START, "job", "r2", 0, T0 + 9_990)])
    assert mon.upload_hang_status() == {"hang/seconds_since_last_step": 10.0, "hang/hung": 0.0}
    mon.close()
    # without a threshold only the seconds are written
    mon = GoodputMonitor("job", None, str(tmp_path / "tb2"), 30, True, store=store,
                         clock=lambda: now[0])
    assert mon.upload_hang_status() == {"hang/seconds_since_last_step": 10.0}
    mon.close()
    store.close()


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf, "10", True])
def test_hang_threshold_is_validated(tmp_path, bad):
    with pytest.raises((ValueError, TypeError), match=r"hang_threshold_seconds \("):
        GoodputMonitor("job", None, str(tmp_path / "tb"), 30, True, store=":memory:",
                       hang_threshold_seconds=bad)
    assert not (tmp_path / "tb").exists()


def test_the_uploader_thread_reports_a_hang_before_the_job_ends(tmp_path, caplog):
    """Real clock, real recorder and the monitor's own thread: a loop steps, then blocks
    (a hang); the monitor says so while the loop is still blocked. Only a lower bound is
    asserted on time (it never reports early); the upper wait is generous for a loaded
    machine, the threshold-plus-interval bound is the injected-clock test above."""
    store = SQLiteStore(str(tmp_path / "g.db"))
    rec = GoodputRecorder("live", None, True, store=store, flush_interval=0.02)
    threshold, interval = 0.4, 0.05
    mon = GoodputMonitor("live", None, str(tmp_path / "tb"), interval, True, store=store,
                         hang_threshold_seconds=threshold, stop_timeout=10)
    release = threading.Event()

    def loop():
        rec.record_job_start_time()
        for i in range(5):
            rec.record_step_start_time(i)
            time.sleep(0.01)
        release.wait(30)  # hung until the test lets go
        rec.record_job_end_time()

    worker = threading.Thread(target=loop)
    with caplog.at_level(logging.WARNING, logger="goodput_jax.measure.monitor"):
        worker.start()
        assert mon.start_goodput_uploader()
        deadline = time.monotonic() + 20
        while not mon.hung and time.monotonic() < deadline:
            time.sleep(0.02)
        reported = time.time()
        was_hung, still_running = mon.hung, worker.is_alive()
        release.set()
        worker.join(10)
    rec.close()
    mon.close()
    assert was_hung, f"no hang reported ({mon.poll_errors} poll errors: {mon.last_error})"
    assert still_running  # reported without waiting for the job to end
    events, _ = store.read_events("live")
    last_step = max(e.timestamp for e in events if e.kind is K.STEP_START)
    assert reported - last_step >= threshold  # never early
    assert "job 'live' is hung" in caplog.text
    assert not mon.hung  # the final upload saw the job end
    store.close()
