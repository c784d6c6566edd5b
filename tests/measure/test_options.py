"""Options objects (issue 43, item 1): frozen, validated once, one-line errors; the old
keywords are translated in one place; the measure recorder takes ``store`` by keyword only,
so only Google's drop-in has a fourth positional argument (its ``cloud_logger``)."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from goodput_jax import goodput
from goodput_jax.measure.lifecycle import Rerun
from goodput_jax.measure.recorder import GoodputRecorder, RecorderOptions
from goodput_jax.measure.stores import RawEventStore
from goodput_jax.measure.stores.cloud_logging import CloudLoggingOptions, CloudLoggingStore
from goodput_jax.measure.stores.sqlite import SQLiteStore


@pytest.mark.parametrize("kw, msg", [
    ({"max_queue": 0}, "max_queue (0) must be a positive int"),
    ({"batch_size": True}, "batch_size (True) must be a positive int"),
    ({"flush_interval": -1}, "flush_interval (-1) must be a positive number"),
    ({"max_retries": -2}, "max_retries (-2) must be a non-negative int"),
    ({"host": -1}, "host (-1) must be a non-negative int"),
    ({"run_id": ""}, "run_id ('') must be a non-empty string"),
    ({"rerun": "again"}, "rerun ('again') must be one of 'warn', 'append', 'refuse'"),
])
def test_recorder_options_one_line_errors(kw, msg):
    with pytest.raises((ValueError, TypeError)) as e:
        RecorderOptions(**kw)
    assert str(e.value) == msg and "\n" not in str(e.value)
    with pytest.raises(type(e.value), match=msg.split(" (")[0]):
        GoodputRecorder("j", "l", **kw)  # the keyword spelling: the same check


def test_recorder_options_are_frozen_and_keywords_merge():
    o = RecorderOptions(batch_size=8, rerun="append")
    assert o.rerun is Rerun.APPEND
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.batch_size = 9  # type: ignore[misc]
    rec = GoodputRecorder("j", "l", options=o, synchronous=True)
    assert rec.options == dataclasses.replace(o, synchronous=True)
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['nope'\]"):
        GoodputRecorder("j", "l", nope=1)
    with pytest.raises(TypeError, match="must be a RecorderOptions"):
        GoodputRecorder("j", "l", options={"batch_size": 8})


def test_one_name_one_thing_fourth_positional():
    base = inspect.signature(GoodputRecorder).parameters
    assert [p for p in base.values() if p.kind is p.POSITIONAL_OR_KEYWORD][3:] == []
    assert base["store"].kind is inspect.Parameter.KEYWORD_ONLY
    google = list(inspect.signature(goodput.GoodputRecorder).parameters)
    assert google[:4] == ["job_name", "logger_name", "logging_enabled", "cloud_logger"]
    with pytest.raises(TypeError):
        GoodputRecorder("j", "l", False, "sqlite:///x.db")  # type: ignore[misc]


def test_no_public_constructor_over_ten_parameters():
    for fn in (GoodputRecorder.__init__, CloudLoggingStore.__init__):
        assert len(inspect.signature(fn).parameters) <= 10, fn


@pytest.mark.parametrize("kw, msg", [
    ({"batch_size": 0}, "batch_size (0) must be in [1, 1000]"),
    ({"read_page_size": 5000}, "read_page_size (5000) must be in [1, 1000]"),
    ({"retry_deadline": -1.0}, "retry_deadline (-1.0) must be finite and >= 0"),
    ({"logger_name": "a b"}, "logger_name ('a b') must be 1-511 characters from [A-Za-z0-9_-./]"),
    ({"client": object(), "credentials": object()},
     "pass either client= or credentials=/client_options=, not both"),
])
def test_cloud_logging_options_one_line_errors(kw, msg):
    with pytest.raises((ValueError, TypeError)) as e:
        CloudLoggingOptions(**kw)
    assert str(e.value) == msg
    with pytest.raises(type(e.value)):
        CloudLoggingStore(**kw)


def test_raw_write_path_is_a_protocol():
    assert isinstance(SQLiteStore(":memory:"), RawEventStore)

    class Plain:
        url = "plain://"

        def append(self, events): ...
        def read_events(self, job_name, cursor=None, limit=None): return [], cursor
        def list_jobs(self): return []
        def close(self): ...

    assert not isinstance(Plain(), RawEventStore)
    rec = GoodputRecorder("j", "l", True, store=Plain())  # completed by RowStoreAdapter
    rec.record_step_start_time(0, 1.7e9)
    assert rec.flush() and rec.written_count == 1
    rec.close()


def test_a_store_without_a_write_path_fails_at_construction():
    with pytest.raises(TypeError, match=r"must be an EventStore or a store URL; it needs url, "
                                        r"append\(\)"):
        GoodputRecorder("j", "l", True, store=object())
