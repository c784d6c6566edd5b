"""Event vocabulary: kinds, codes, validation and serialisation."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from goodput_jax.measure.events import (
    END_START_PAIRS,
    KIND_CODES,
    KINDS_BY_CODE,
    START_END_PAIRS,
    Event,
    EventKind,
    check_step,
    new_run_id,
    to_timestamp,
)


def test_every_kind_has_a_stable_code():
    assert sorted(KIND_CODES.values()) == list(range(len(EventKind)))
    assert all(KINDS_BY_CODE[KIND_CODES[k]] is k for k in EventKind)
    # codes are stored on disk: the first ones must never move
    assert KIND_CODES[EventKind.JOB_START] == 0 and KIND_CODES[EventKind.STEP_START] == 2
    assert KIND_CODES[EventKind.HINTS] == 18


def test_pairs_cover_all_spans():
    for start, end in START_END_PAIRS.items():
        assert start.value.endswith("_start") and end.value == start.value[:-6] + "_end"
        assert END_START_PAIRS[end] is start


def test_to_timestamp():
    aware = dt.datetime(2024, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert to_timestamp(aware) == 1704060000.0
    assert to_timestamp(3) == 3.0 and to_timestamp(np.float32(1.5)) == 1.5
    with pytest.raises(ValueError, match=r"start_time \(datetime.datetime\(2024, 1, 1, 0, 0\)\) is a naive"):
        to_timestamp(dt.datetime(2024, 1, 1), name="start_time")
    with pytest.raises(TypeError, match="'x'"):
        to_timestamp("x")
    with pytest.raises(TypeError):
        to_timestamp(True)
    with pytest.raises(ValueError, match="finite"):
        to_timestamp(float("inf"))


def test_check_step():
    assert check_step(0) == 0 and check_step(np.int32(7)) == 7
    for bad, exc in ((-1, ValueError), (1.0, TypeError), ("3", TypeError), (True, TypeError),
                     (np.array([1, 2]), TypeError)):
        with pytest.raises(exc, match="step"):
            check_step(bad)


def test_event_round_trip_and_validate():
    ev = Event(EventKind.CUSTOM_BADPUT_START, "j", "r", 2, 10.5, step=3, label="eval",
               payload={"a": [1, 2]})
    assert Event.from_dict(ev.to_dict()) == ev.validate()
    with pytest.raises(ValueError, match="missing key 'kind'"):
        Event.from_dict({"job_name": "j"})
    with pytest.raises(ValueError, match="job_name"):
        Event(EventKind.JOB_START, "", "r", 0, 1.0).validate()
    with pytest.raises(ValueError, match="host"):
        Event(EventKind.JOB_START, "j", "r", -1, 1.0).validate()
    with pytest.raises(ValueError, match="payload"):
        Event(EventKind.HINTS, "j", "r", 0, 1.0, payload={"x": object()}).validate()


def test_run_ids_are_fresh():
    assert len({new_run_id() for _ in range(100)}) == 100
