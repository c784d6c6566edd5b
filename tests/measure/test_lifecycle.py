"""One job lifecycle (issue 43, item 3): a finished job stays finished; reruns are explicit.

Real SQLite stores under tmp_path, injected clocks, a real JAX compile through
``goodput_jax.runtime.attach``.
"""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import pytest

from goodput_jax import goodput, runtime
from goodput_jax.measure.calculator import GoodputCalculator
from goodput_jax.measure.lifecycle import JobEndedError, JobState, Rerun
from goodput_jax.measure.productivity import ProgramCost
from goodput_jax.measure.recorder import GoodputRecorder, RecorderOptions

T0 = 1_700_000_000.0


def _job(url, clock, **kw):
    rec = GoodputRecorder("lj", "goodput_lj", True, store=url, clock=lambda: clock[0], **kw)
    rec.record_job_start_time()
    for i in range(5):
        clock[0] += 1.0
        rec.record_step_start_time(i)
    clock[0] += 1.0
    rec.record_job_end_time()
    return rec


def _total(url, clock):
    return GoodputCalculator("lj", "l", store=url, clock=lambda: clock[0]) \
        .get_job_goodput_details()["total_time"]


def test_events_after_the_end_do_not_reopen_the_job(tmp_path, caplog):
    url = f"sqlite:///{tmp_path}/g.db"
    clock = [T0]
    rec = _job(url, clock)
    assert rec.job_state is JobState.ENDED
    before = _total(url, clock)
    assert before == pytest.approx(6.0)
    clock[0] += 5.0  # five seconds later: a compile, a step, a program cost, a span
    with caplog.at_level(logging.WARNING):
        rec.record_compilation(0.5, recompile=False, name="get_grad_params")
        rec.record_step_start_time(5)
        rec.record_step_device_end_time(5)
        rec.record_program_cost(ProgramCost("jit(step)", 2e9, 0.0, 1e7, "cpu"), step=5)
        with rec.data_loading():
            pass
    assert _total(url, clock) == pytest.approx(before)
    warned = [r for r in caplog.records if "after its end" in r.getMessage()]
    assert len(warned) == 1, [r.getMessage() for r in warned]
    assert rec.refused_count == 6
    rec.close()


def test_a_real_compile_after_the_end_is_refused(tmp_path):
    url = f"sqlite:///{tmp_path}/g.db"
    clock = [T0]
    rec = _job(url, clock)
    before = _total(url, clock)
    with runtime.attach(rec):
        jax.jit(lambda x: x * 3.0 + 1.0)(jnp.ones(7)).block_until_ready()
    clock[0] += 5.0
    assert _total(url, clock) == pytest.approx(before)
    assert rec.refused_count >= 1
    rec.close()


def test_sink_events_after_the_end_are_refused_at_the_writer(tmp_path):
    url = f"sqlite:///{tmp_path}/g.db"
    rec = GoodputRecorder("lj", "l", True, store=url)
    rec.record_job_start_time(T0)
    rec.record_step_start_time(0, T0 + 1)
    rec.record_job_end_time(T0 + 2)
    sink = rec.step_sink()
    sink.start(1, T0 + 9)  # the fast path does no state check: the writer refuses it
    assert rec.flush()
    clock = [T0 + 20]
    assert _total(url, clock) == pytest.approx(2.0)
    assert rec.refused_count == 1
    rec.close()


def test_states_and_transitions():
    rec = GoodputRecorder("lj", "l")  # disabled: the state is still kept
    assert rec.job_state is JobState.NOT_STARTED and not rec.job_started
    rec.record_job_start_time(T0)
    assert rec.job_state is JobState.RUNNING and rec.job_started
    rec.lifecycle.begin_wait()
    assert rec.job_state is JobState.WAITING and rec.job_started
    rec.lifecycle.end_wait()
    rec.record_job_end_time(T0 + 1)
    assert rec.job_state is JobState.ENDED and not rec.job_started
    with pytest.raises(RuntimeError, match=r"end_wait\(\) in state ENDED"):
        rec.lifecycle.end_wait()
    rec.record_job_start_time(T0 + 5)  # the same recorder starts a new run: asked for
    assert rec.job_state is JobState.RUNNING


def test_elastic_wait_is_a_state():
    from goodput_jax import goodput_elastic

    rec = goodput_elastic.ElasticGoodputRecorder("e", "l", False)
    rec.record_job_start_time(T0)
    rec.record_elastic_wait_start_time("slice_down", T0 + 1)
    assert rec.job_state is JobState.WAITING
    rec.record_elastic_wait_end_time("slice_down", T0 + 2)
    assert rec.job_state is JobState.RUNNING


# -------------------------------------------------------------------- reruns
def _run(url, t0, **kw):
    rec = GoodputRecorder("rr", "l", True, store=url, **kw)
    rec.record_job_start_time(t0)
    rec.record_step_start_time(0, t0 + 1)
    rec.record_job_end_time(t0 + 2)
    rec.close()


def test_rerun_default_warns_once_and_appends(tmp_path, caplog):
    url = f"sqlite:///{tmp_path}/g.db"
    _run(url, T0)
    with caplog.at_level(logging.WARNING):
        _run(url, T0 + 100)
    msgs = [r.getMessage() for r in caplog.records if "already ended" in r.getMessage()]
    assert len(msgs) == 1 and "'rr'" in msgs[0]
    d = GoodputCalculator("rr", "l", store=url).get_job_goodput_details()
    assert d["num_runs"] == 2


def test_rerun_append_is_silent_and_refuse_raises(tmp_path, caplog):
    url = f"sqlite:///{tmp_path}/g.db"
    _run(url, T0)
    with caplog.at_level(logging.WARNING):
        _run(url, T0 + 100, options=RecorderOptions(rerun=Rerun.APPEND))
    assert not [r for r in caplog.records if "already ended" in r.getMessage()]
    with pytest.raises(JobEndedError, match="'rr' already ended"):
        _run(url, T0 + 200, rerun="refuse")
    assert GoodputCalculator("rr", "l", store=url).get_job_goodput_details()["num_runs"] == 2


def test_a_restart_after_a_crash_is_not_a_rerun(tmp_path, caplog):
    url = f"sqlite:///{tmp_path}/g.db"
    rec = GoodputRecorder("rr", "l", True, store=url)
    rec.record_job_start_time(T0)
    rec.record_step_start_time(0, T0 + 1)
    rec.close()  # no job end: the run crashed
    _run(url, T0 + 50, rerun="refuse")  # the restart is the job's own: no error
    d = GoodputCalculator("rr", "l", store=url).get_job_goodput_details()
    assert d["num_runs"] == 2 and d["num_disruptions"] == 1


def test_google_drop_in_rerun_warns(tmp_path, caplog):
    url = f"sqlite:///{tmp_path}/g.db"
    for k in range(2):
        rec = goodput.GoodputRecorder("gr", "goodput_gr", True, store=url)
        with caplog.at_level(logging.WARNING):
            rec.record_job_start_time(T0 + 100 * k)
            rec.record_job_end_time(T0 + 100 * k + 5)
        rec.close()
    assert len([r for r in caplog.records if "already ended" in r.getMessage()]) == 1
