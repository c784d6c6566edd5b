"""The plain drop-in says what it measures: host-timed steps, later loads assumed to overlap.

A job recorded without ``goodput_jax.runtime``'s device step ends gets a note in the text and
the HTML report pointing to ``goodput_jax.runtime``; a device-timed job gets none; a job with
both kinds of runs says how many runs are host-timed.
"""

from __future__ import annotations

import pytest

from goodput_jax.report.text import HOST_TIMED_NOTE, format_report, measurement_note
from tests.measure._timeline import K, calc_for, events, new_store

HOST = [(K.JOB_START, 0), (K.DATA_LOADING_START, 0), (K.DATA_LOADING_END, 1),
        (K.STEP_START, 1, 0), (K.DATA_LOADING_START, 2), (K.DATA_LOADING_END, 3),
        (K.STEP_START, 3, 1), (K.JOB_END, 5)]
DEVICE = [(K.JOB_START, 10), (K.STEP_START, 10, 2), (K.STEP_DEVICE_END, 11, 2),
          (K.STEP_START, 11, 3), (K.STEP_DEVICE_END, 12, 3), (K.JOB_END, 12)]


def _calc(*runs):
    store = new_store()
    for name, spec in runs:
        store.append(events("j", name, spec))
    return calc_for(store, "j", now=100.0)


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_host_timed_job_says_so_in_the_text_report():
    calc = _calc(("a", HOST))
    d = calc.get_job_goodput_details()
    assert (d["num_runs"], d["device_timed_runs"]) == (1, 0)
    out = _flat(format_report(calc))
    assert "Step times are host-timed" in out
    assert "assumed to overlap" in out and "DATA_LOADING_ASYNC" in out
    assert "goodput_jax.runtime.StepRecorder" in out
    assert measurement_note(d) == HOST_TIMED_NOTE


def test_device_timed_job_has_no_note_and_a_mixed_job_counts_its_runs():
    calc = _calc(("b", DEVICE))
    assert calc.get_job_goodput_details()["device_timed_runs"] == 1
    assert "host-timed" not in format_report(calc)
    mixed = _calc(("a", HOST), ("b", DEVICE))
    out = _flat(format_report(mixed))
    assert "1 of 2 runs: step times are host-timed" in out


def test_html_report_carries_the_note(tmp_path):
    pytest.importorskip("matplotlib")
    from goodput_jax.report import render

    for runs, want in (((("a", HOST),), True), ((("b", DEVICE),), False)):
        path = tmp_path / f"r{want}.html"
        render.render_html(_calc(*runs), path, now=100.0)
        text = path.read_text(encoding="utf-8")
        assert ('id="host-timed"' in text) is want
        if want:
            assert "goodput_jax.runtime" in text and "assumed to overlap" in text
