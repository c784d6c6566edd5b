"""The drop-in takes what Google's library takes and names things as it does.

* Google's README example, as written: ``record_job_start_time(datetime.datetime.now())``,
  a naive datetime, which Google's library reads as local time
  (``../shared/seeds/ml-goodput-measurement-readme.txt``);
* ``goodput.BadputType``'s member names are ml-goodput-measurement 0.2.3's
  (``tests/measure/data/reference_0_2_3_signatures.json``): code keying on ``.name``
  gets the same keys.
"""

from __future__ import annotations

import datetime
import json
import pathlib
import time

import pytest

from goodput_jax import goodput, goodput_elastic, goodput_utils
from goodput_jax.measure.events import KIND_CODES, EventKind
from goodput_jax.measure.stores.sqlite import SQLiteStore

REF = json.loads((pathlib.Path(__file__).parents[1] / "measure" / "data" /
                  "reference_0_2_3_signatures.json").read_text())


@pytest.fixture
def new_york(monkeypatch):
    """A local time zone that is not UTC (a naive datetime read as UTC is 4-5 h off)."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def _job_marks(store, job):
    cols, _, _ = store.read_columns(job)
    out = {}
    for kind in (EventKind.JOB_START, EventKind.JOB_END):
        sel = cols["ts"][cols["kind"] == KIND_CODES[kind]]
        out[kind] = float(sel[0])
    return out


def test_googles_readme_example_with_naive_datetimes(tmp_path, new_york):
    store = SQLiteStore(str(tmp_path / "g.db"))
    run_name = "readme-run"
    goodput_logger_name = f"goodput_{run_name}"
    # --- as in Google's README (the store= is goodput_jax's, for the test's tmp dir) ---
    goodput_recorder = goodput.GoodputRecorder(job_name=run_name,
                                               logger_name=goodput_logger_name,
                                               logging_enabled=True, store=store)
    before = time.time()
    goodput_recorder.record_job_start_time(datetime.datetime.now())
    for step in range(0, 5):
        goodput_recorder.record_step_start_time(step)
        time.sleep(0.01)  # training step...
    goodput_recorder.record_job_end_time(datetime.datetime.now())
    after = time.time()
    goodput_recorder.close()
    goodput_calculator = goodput.GoodputCalculator(job_name=run_name,
                                                   logger_name=goodput_logger_name,
                                                   store=store)
    total_goodput, _, last_step = goodput_calculator.get_job_goodput()
    # ------------------------------------------------------------------------------------
    assert 0.0 < total_goodput <= 100.0 and last_step == 4
    marks = _job_marks(store, run_name)
    # read as local time: the instants they were taken (not 4-5 h off, as UTC would be)
    assert before - 1.0 <= marks[EventKind.JOB_START] <= marks[EventKind.JOB_END] <= after + 1.0
    store.close()


def test_naive_datetimes_everywhere_google_takes_a_time(tmp_path, new_york):
    store = SQLiteStore(str(tmp_path / "g.db"))
    rec = goodput_elastic.ElasticGoodputRecorder("j", "goodput_j", True, store=store,
                                                 synchronous=True)
    t0 = datetime.datetime(2025, 6, 1, 8, 0, 0)  # naive: 08:00 in New York = 12:00 UTC
    at = [t0 + datetime.timedelta(seconds=s) for s in range(12)]
    rec.record_job_start_time(at[0])
    rec.record_tpu_init_start_time(at[0])
    rec.record_tpu_init_end_time(at[1])
    rec.record_training_preparation_start_time(at[1])
    rec.record_training_preparation_end_time(at[2])
    rec.record_data_loading_start_time(at[2])
    rec.record_data_loading_end_time(at[3])
    rec.record_step_start_time(0, at[3])
    rec.record_custom_badput_event_start_time(at[4], "eval")
    rec.record_custom_badput_event_end_time(at[5], "eval")
    rec.record_checkpoint_save_start_time(0, at[5])
    rec.record_checkpoint_save_end_time(0, at[6])
    rec.record_elastic_reinit_start_time(at[6])
    rec.record_elastic_reinit_end_time(at[7])
    rec.record_step_start_time(1, at[7])
    rec.record_job_end_time(at[11])
    rec.close()
    utc_start = datetime.datetime(2025, 6, 1, 12, 0, 0, tzinfo=datetime.UTC).timestamp()
    marks = _job_marks(store, "j")
    assert marks[EventKind.JOB_START] == pytest.approx(utc_start)
    assert marks[EventKind.JOB_END] == pytest.approx(utc_start + 11)
    calc = goodput.GoodputCalculator("j", "goodput_j", store=store)
    assert calc.get_job_goodput_details()["total_elapsed_time"] == pytest.approx(11.0)
    # the calculator's windows take naive datetimes as local time too
    g, _, _, total, _ = calc.get_job_goodput_interval(at[0] - datetime.timedelta(seconds=1),
                                                      at[11])
    assert total == pytest.approx(11.0) and 0 < g < 100
    store.close()


def test_the_base_recorder_still_refuses_naive_datetimes():
    from goodput_jax.measure.recorder import GoodputRecorder

    rec = GoodputRecorder("j", "l", True, store=":memory:")
    with pytest.raises(ValueError, match=r"start_time \(.*\) is a naive datetime"):
        rec.record_job_start_time(datetime.datetime.now())
    rec.close()


def test_badput_type_names_are_googles():
    ours = {m.name: m.value for m in goodput.BadputType}  # members, aliases left out
    assert {k: v for k, v in ours.items() if k in REF["BadputType"]} == REF["BadputType"]
    assert set(ours) - set(REF["BadputType"]) == {"RECOMPILATION"}  # goodput_jax's own
    assert goodput.BadputType.TPU_INITIALIZATION.name == "TPU_INITIALIZATION"
    assert goodput.BadputType.DATA_LOADING_SYNC.name == "DATA_LOADING_SYNC"
    # goodput_jax's spellings still reach the same members
    assert goodput.BadputType.ACCELERATOR_INITIALIZATION is goodput.BadputType.TPU_INITIALIZATION
    assert goodput.BadputType["DATA_LOADING"] is goodput.BadputType.DATA_LOADING_SYNC
    for mod in (goodput_utils, goodput_elastic):
        assert mod.BadputType is goodput.BadputType


def test_the_calculators_keys_carry_googles_names(tmp_path):
    store = SQLiteStore(str(tmp_path / "g.db"))
    rec = goodput.GoodputRecorder("j", "goodput_j", True, store=store, synchronous=True,
                                  clock=lambda: 1003.0)  # the badput span below: 0 s long
    rec.record_job_start_time(1000.0)
    rec.record_tpu_init_start_time(1000.0)
    rec.record_tpu_init_end_time(1002.0)
    rec.record_data_loading_start_time(1002.0)
    rec.record_data_loading_end_time(1003.0)
    with rec.badput(goodput.BadputType.TRAINING_PREP):  # Google's member, goodput_jax's API
        pass
    for step in range(4):
        rec.record_step_start_time(step, 1003.0 + step)
    rec.record_job_end_time(1008.0)
    rec.close()
    calc = goodput.GoodputCalculator("j", "goodput_j", store=store, clock=lambda: 1010.0)
    _, badput, _ = calc.get_job_goodput(include_badput_breakdown=True)
    names = {k.name for k in badput}
    assert {"TPU_INITIALIZATION", "DATA_LOADING_SYNC", "TRAINING_PREP"} <= names
    assert not names & {"ACCELERATOR_INITIALIZATION", "DATA_LOADING"}
    assert badput[goodput.BadputType.TPU_INITIALIZATION] == pytest.approx(100 * 2 / 8)
    secs = calc.get_job_goodput_details()["badput_time"]
    assert secs[goodput.BadputType.DATA_LOADING_SYNC] == pytest.approx(1.0)
    store.close()
