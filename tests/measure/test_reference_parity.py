"""Parity with ml-goodput-measurement 0.2.3 on recorder call sequences both libraries run.

The reference is not installed in CI: its numbers were recorded by
``python benchmarks/reference_diff.py --ref-python /work/venvs/ref/bin/python --record
tests/measure/data/reference_0_2_3.json`` (the reference run in its own venv on the
same scenarios, ``tests/measure/reference_scenarios.py``). Here goodput_jax replays the
same calls (through its drop-in ``goodput`` module and the ``cloud_logger=`` seam) and
must give total goodput and every badput bucket both report within 1 pp.
"""

from __future__ import annotations

import json
import os

import pytest

from goodput_jax import goodput
from tests.measure.reference_scenarios import (
    ListLogger,
    breakdown_pct,
    entries_of,
    replay,
    scenario,
)

FIXTURE = os.path.join(os.path.dirname(__file__), "data", "reference_0_2_3.json")
with open(FIXTURE) as _f:
    REFERENCE = json.load(_f)["scenarios"]


def _assert_within_1pp(name: str, ours: dict) -> None:
    ref = REFERENCE[name]
    assert ours["goodput"] == pytest.approx(ref["goodput"], abs=1.0), "goodput"
    shared = set(ref["badput"]) & set(ours["badput"])
    assert {"TPU_INITIALIZATION", "TRAINING_PREP", "PROGRAM_STARTUP", "DATA_LOADING_SYNC",
            "DATA_LOADING_ASYNC", "WASTED_PROGRESS_FROM_DISRUPTION",
            "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION", "CUSTOM_BADPUT_EVENTS", "OTHER"} <= shared
    for k in shared:
        assert ours["badput"][k] == pytest.approx(ref["badput"][k], abs=1.0), k


@pytest.mark.parametrize("name", ["clean", "crash_restart", "three_runs"])
def test_recorder_and_calculator_match_the_reference(name):
    ours = replay(goodput, scenario(name), job=name)
    _assert_within_1pp(name, ours)
    # the scenarios exercise every rule: restarts, inferred startup, sync/async loading
    if name != "clean":
        assert ours["badput"]["WASTED_PROGRESS_FROM_DISRUPTION"] > 1
        assert ours["badput"]["INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"] > 1
    assert ours["badput"]["PROGRAM_STARTUP"] > 1 and ours["badput"]["DATA_LOADING_ASYNC"] > 1


def test_100k_steps_match_the_reference():
    # the entries Google's recorder writes for the calls, read by our drop-in calculator
    log = ListLogger()
    log.entries = entries_of(scenario("steps_100k"), "steps_100k")
    calc = goodput.GoodputCalculator("steps_100k", "goodput_steps_100k", log)
    g, badput, last = calc.get_job_goodput(include_badput_breakdown=True)
    _assert_within_1pp("steps_100k", breakdown_pct(g, badput))
    assert last == 99_999
