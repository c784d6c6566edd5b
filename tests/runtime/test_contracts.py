"""The recorder protocols: the package's recorders satisfy them structurally, and a recorder
lacking a member fails at construction with one line naming it (never silently later)."""

from __future__ import annotations

import pytest

from goodput_jax import goodput, runtime
from goodput_jax.compat.elastic import ElasticGoodputRecorder
from goodput_jax.integrations.hooks import GoodputHooks
from goodput_jax.integrations.orbax import instrument
from goodput_jax.measure.recorder import GoodputRecorder
from goodput_jax.runtime import contracts

PROTOCOLS = (contracts.CompileRecording, contracts.StepRecording, contracts.JobRecording,
             contracts.CheckpointRecording, contracts.HooksRecording)


@pytest.mark.parametrize("make", [
    lambda: GoodputRecorder("j", "l"),
    lambda: goodput.GoodputRecorder("j", "l"),
    lambda: ElasticGoodputRecorder("j", "l", False),
], ids=["measure", "google", "elastic"])
def test_the_package_recorders_satisfy_every_protocol(make):
    rec = make()
    for p in PROTOCOLS:
        assert isinstance(rec, p), p.__name__
    rec.close()


class _NoProgramCost:
    """A recorder as a third party might write it: everything but program costs."""

    logging_enabled = True
    closed = False
    job_started = False

    def record_compilation(self, duration_s, end_time=None, *, recompile=False, name=""):
        pass

    def record_step_start_time(self, step, start_time=None):
        pass

    def record_step_device_end_time(self, step, end_time=None):
        pass

    def step_sink(self):
        return None

    def record_custom_badput_event_start_time(self, start_time=None,
                                              custom_badput_event_type="unknown"):
        pass

    def record_custom_badput_event_end_time(self, end_time=None,
                                            custom_badput_event_type="unknown"):
        pass

    def add_span_start_listener(self, listener):
        pass

    def remove_span_start_listener(self, listener):
        pass


def _one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_a_recorder_without_program_costs_fails_at_construction():
    with pytest.raises(TypeError) as e:
        runtime.StepRecorder(_NoProgramCost())
    msg = _one_line(e)
    assert "must be a GoodputRecorder (a StepRecording; it lacks record_program_cost)" in msg


def test_each_door_names_what_it_lacks():
    with pytest.raises(TypeError, match=r"recorder \(3\) must be a GoodputRecorder \(a "
                                        r"CompileRecording; it lacks closed, job_started, logging_enabled"):
        runtime.attach(3)
    with pytest.raises(TypeError, match=r"a JobRecording; it lacks .*record_job_start_time"):
        runtime.start_job(_NoProgramCost())
    with pytest.raises(TypeError, match=r"a CheckpointRecording; it lacks "
                                        r"record_checkpoint_progress"):
        instrument(_Manager(), _NoProgramCost())
    with pytest.raises(TypeError, match=r"a HooksRecording; it lacks .*record_program_cost"):
        GoodputHooks("j", init_batch_size=8, recorder=_NoProgramCost(), is_primary=False,
                     num_replicas=1, num_nodes=1)


class _Manager:
    def save(self, *a, **k):
        return True

    def restore(self, *a, **k):
        return None

    def should_save(self, step):
        return True

    def wait_until_finished(self):
        pass
