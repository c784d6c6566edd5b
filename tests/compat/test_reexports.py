"""The thin modules at Google's and MaxText's import paths re-export ``goodput_jax.compat``.

Their public names are the ones they had before the drop-ins moved into compat (the
lists below were taken from the modules at that commit), each name is the compat
object itself, and Google's entry keys are still importable from them.
"""

from __future__ import annotations

import importlib
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

COMPAT = Path(__file__).resolve().parents[2] / "goodput_jax" / "compat"

#: module -> (its __all__, the other public names it offered)
PUBLIC = {
    "goodput": (
        ["BadputType", "GCPOptions", "GoodputCalculator", "GoodputEvent", "GoodputInfo",
         "GoodputMonitor", "GoodputRecorder", "GoodputType", "IntervalMetricType",
         "IntervalWorkloadMetricDetails", "MaxTextGoodput", "MetricType", "StepDeviation",
         "StepInfo", "WorkloadMetricDetails", "compute_ideal_step_time",
         "create_goodput_monitor", "create_goodput_recorder", "from_maxtext_config",
         "get_extra_time_from_anomalous_steps", "get_goodput_job_name",
         "get_timestamp_from_log_entry", "maybe_instrument_checkpoint_manager",
         "maybe_monitor_goodput", "maybe_record_goodput", "record_goodput"],
        [],
    ),
    "goodput_elastic": (
        ["ElasticGoodputCalculator", "ElasticGoodputRecorder", "GoodputRecorder",
         "slice_efficiency"],
        ["BadputType", "EventKind", "GoodputCalculator"],
    ),
    "goodput_utils": (
        ["MACHINE_TYPE_TO_ACCELERATOR_TYPE_MAPPING", "BadputType",
         "ElasticIntervalWorkloadMetricDetails", "ElasticWorkloadMetricDetails", "GCPOptions",
         "GoodputInfo", "GoodputType", "IntervalMetricType", "IntervalWorkloadMetricDetails",
         "MetricType", "MonitoringWindowType", "StepInfo", "WorkloadMetricDetails",
         "compute_ideal_step_time", "compute_percentile",
         "compute_step_deviation_from_baseline", "get_accelerator_type",
         "get_anomalous_and_normal_step_times", "get_cluster_name",
         "get_extra_time_from_anomalous_steps", "get_gcp_metadata", "get_gcp_project_id",
         "get_node_zone", "get_timestamp_from_log_entry"],
        [],
    ),
    "monitoring": (["GCPOptions", "GoodputMonitor"],
                   ["BadputType", "GoodputCalculator", "IntervalMetricType",
                    "IntervalWorkloadMetricDetails", "MetricType", "MonitoringWindowType",
                    "WorkloadMetricDetails"]),
    "monitoring_elastic": (["ElasticGoodputMonitor", "GCPOptions"],
                           ["ElasticGoodputCalculator", "GoodputMonitor"]),
}

#: Google's entry keys, as its modules spell them
ENTRY_KEYS = {
    "goodput": {
        "_JOB_NAME": "job_name", "_STEP_COUNT": "step_count",
        "_STEP_START_TIME": "step_start_time", "_JOB_START_TIME": "job_start_time",
        "_JOB_END_TIME": "job_end_time", "_TPU_INIT_START_TIME": "tpu_init_start_time",
        "_TPU_INIT_END_TIME": "tpu_init_end_time",
        "_TRAINING_PREPARATION_START_TIME": "training_prep_start_time",
        "_TRAINING_PREPARATION_END_TIME": "training_prep_end_time",
        "_DATA_LOADING_START_TIME": "data_loading_start_time",
        "_DATA_LOADING_END_TIME": "data_loading_end_time",
        "_CUSTOM_BADPUT_EVENT_TYPE": "custom_badput_event_type",
        "_CUSTOM_BADPUT_EVENT_START_TIME": "custom_badput_event_start_time",
        "_CUSTOM_BADPUT_EVENT_END_TIME": "custom_badput_event_end_time",
    },
    "goodput_elastic": {
        "_JOB_NAME": "job_name", "_ACTIVE_SLICES": "active_slices",
        "_TOTAL_SLICES": "total_slices", "_AVAILABLE_SLICES": "available_slices",
        "_ELASTIC_SLICE_COUNTS_TIMESTAMP": "elastic_slice_counts_timestamp",
        "_ELASTIC_WAIT_EVENT_TYPE": "elastic_wait_event_type",
        "_ELASTIC_WAIT_START_TIME": "elastic_wait_start_time",
        "_ELASTIC_WAIT_END_TIME": "elastic_wait_end_time",
        "_ELASTIC_REINIT_START_TIME": "elastic_reinit_start_time",
        "_ELASTIC_REINIT_END_TIME": "elastic_reinit_end_time",
    },
}


def _public(mod) -> set[str]:
    return {n for n in dir(mod) if not n.startswith("_")
            and not isinstance(getattr(mod, n), type(logging))  # stdlib modules imported
            and getattr(getattr(mod, n), "__module__", "goodput_jax").startswith("goodput_jax")}


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_thin_module_keeps_its_public_names(name):
    mod = importlib.import_module(f"goodput_jax.{name}")
    exported, extra = PUBLIC[name]
    assert mod.__all__ == exported
    assert _public(mod) == set(exported) | set(extra)


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_thin_module_names_are_the_compat_objects(name):
    mod = importlib.import_module(f"goodput_jax.{name}")
    for pub in _public(mod):
        obj = getattr(mod, pub)
        if not callable(obj):  # a constant (Google's machine-type table)
            assert obj is vars(importlib.import_module("goodput_jax.compat.utils"))[pub], pub
            continue
        home = importlib.import_module(obj.__module__)
        assert getattr(home, obj.__qualname__) is obj, pub
        assert obj.__module__.startswith(("goodput_jax.compat.", "goodput_jax.measure.")), \
            (pub, obj.__module__)


@pytest.mark.parametrize("name", sorted(ENTRY_KEYS))
def test_googles_entry_keys_are_importable(name):
    mod = importlib.import_module(f"goodput_jax.{name}")
    assert {k: getattr(mod, k) for k in ENTRY_KEYS[name]} == ENTRY_KEYS[name]


def test_one_class_behind_every_path():
    from goodput_jax import goodput, goodput_elastic, goodput_utils, monitoring, monitoring_elastic
    from goodput_jax.compat import elastic, enums, monitor, options

    assert monitoring.GoodputMonitor is goodput.GoodputMonitor is monitor.GoodputMonitor
    assert goodput_elastic.GoodputRecorder is goodput.GoodputRecorder
    assert monitoring_elastic.ElasticGoodputMonitor is elastic.ElasticGoodputMonitor
    assert goodput_utils.GCPOptions is goodput.GCPOptions is monitoring.GCPOptions \
        is monitoring_elastic.GCPOptions is options.GCPOptions
    assert goodput_utils.MetricType is goodput.MetricType is enums.MetricType
    assert issubclass(elastic.ElasticGoodputMonitor, monitor.GoodputMonitor)
    assert issubclass(elastic.ElasticGoodputCalculator, goodput.GoodputCalculator)
    assert issubclass(elastic.ElasticGoodputRecorder, goodput.GoodputRecorder)


def test_maxtexts_import_lines_work_in_a_fresh_interpreter():
    """The lines of maxtext/common/goodput.py and maxtext/utils/goodput_utils.py (with
    ml_goodput_measurement replaced by goodput_jax), each in a fresh process."""
    lines = [("from goodput_jax import goodput, monitoring\n"
              "from goodput_jax.goodput_utils import GCPOptions"),
             "from goodput_jax import monitoring_elastic, goodput_elastic"]
    env = {**os.environ, "PYTHONPATH": str(COMPAT.parents[1])}
    for line in lines:
        proc = subprocess.run([sys.executable, "-c", line + "\nprint('ok')"],
                              check=False, capture_output=True, text=True, timeout=120,
                              env=env)
        assert proc.returncode == 0 and proc.stdout.strip() == "ok", (line, proc.stderr)


def test_drop_ins_still_log_as_goodput_jax_goodput(caplog):
    from goodput_jax import goodput

    calc = goodput.GoodputCalculator("nothing", "goodput_nothing", store=":memory:")
    with caplog.at_level(logging.WARNING, logger="goodput_jax.goodput"):
        details = calc.get_job_goodput_details()
    assert details["goodput_time"] == {}
    assert [r.name for r in caplog.records] == ["goodput_jax.goodput"]


def test_each_compat_module_does_one_job_in_under_500_lines():
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines())
             for p in COMPAT.glob("*.py")}
    assert {"enums.py", "recorder.py", "calculator.py", "monitor.py", "maxtext.py",
            "elastic.py", "utils.py"} <= set(sizes)
    assert {n: s for n, s in sizes.items() if s > 500} == {}
