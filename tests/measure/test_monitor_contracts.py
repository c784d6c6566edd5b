"""The monitor's contracts: its event files (named by the monitor, never by reaching into
TensorBoard's writer), the calculator protocol it reads, and its options."""

from __future__ import annotations

import ast
import inspect
import os

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from goodput_jax.measure import tensorboard as tb_mod
from goodput_jax.measure.tensorboard import LocalEventFile, ScalarEventWriter


def _private_reaches(module) -> list[str]:
    """``x._name`` attribute reads in ``module`` on anything but ``self`` / ``cls``."""
    tree = ast.parse(inspect.getsource(module))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                and not node.attr.startswith("__"):
            base = node.value
            if not (isinstance(base, ast.Name) and base.id in ("self", "cls")):
                out.append(f"{ast.unparse(node)} (line {node.lineno})")
    return out


# ----------------------------------------------------------------- event files
def test_the_event_writer_reaches_into_no_private_attribute():
    assert _private_reaches(tb_mod) == []


def test_event_files_are_named_by_the_monitor_and_read_back(tmp_path):
    writers = [ScalarEventWriter(str(tmp_path / "tb")) for _ in range(2)]
    for i, w in enumerate(writers):
        assert w.file_name is None  # opened lazily
        w.write(i, {"goodput/total": 10.0 * (i + 1)}, wall_time=1.0)
        w.flush()
    names = [w.file_name for w in writers]
    assert names[0] != names[1]  # two writers in one process, one second: two files
    assert sorted(os.listdir(tmp_path / "tb")) == sorted(os.path.basename(n) for n in names)
    for w in writers:
        w.close()
        w.close()  # idempotent
    for i, name in enumerate(names):
        acc = EventAccumulator(name)
        acc.Reload()
        assert [(s.step, s.value) for s in acc.Scalars("goodput/total")] == [(i, 10.0 * (i + 1))]


def test_an_existing_event_file_is_never_overwritten(tmp_path, monkeypatch):
    taken = tmp_path / "events.out.tfevents.taken"
    taken.write_bytes(b"keep")
    monkeypatch.setattr(tb_mod, "event_file_name", lambda logdir, suffix: str(taken))
    with pytest.raises(FileExistsError):
        LocalEventFile(str(tmp_path), ".goodput_jax")
    assert taken.read_bytes() == b"keep"


# ----------------------------------------------------------------- the calculator protocol
from goodput_jax.measure.calculator import GoodputCalculator
from goodput_jax.measure.monitor import GoodputMonitor
from goodput_jax.measure.monitor_calculator import (
    MONITORED_MEMBERS,
    MonitoredCalculator,
)
from goodput_jax.measure.stores.sqlite import SQLiteStore


class Delegating:
    """A calculator that is no GoodputCalculator: it has exactly the protocol's members,
    or all but ``without``."""

    def __init__(self, inner, without=()):
        self.calls = []
        for name in MONITORED_MEMBERS:
            if name in without:
                continue
            member = getattr(inner, name)
            if callable(member):
                member = self._counted(name, member)
            setattr(self, name, member)

    def _counted(self, name, fn):
        def call(*a, **kw):
            self.calls.append(name)
            return fn(*a, **kw)
        return call


def test_the_protocol_names_every_member_the_monitor_reads():
    assert set(MONITORED_MEMBERS) == {n for n in vars(MonitoredCalculator)
                                      if not n.startswith("_")}
    calc = GoodputCalculator("j", store=":memory:")
    assert isinstance(calc, MonitoredCalculator)
    from goodput_jax.goodput import GoodputCalculator as DropIn

    assert isinstance(DropIn("j", store=":memory:"), MonitoredCalculator)


def test_a_calculator_lacking_a_member_fails_at_construction(tmp_path):
    inner = GoodputCalculator("j", store=":memory:")
    calc = Delegating(inner, without=("get_step_stragglers", "new_step_times"))
    with pytest.raises(TypeError) as e:
        GoodputMonitor("j", "goodput_j", str(tmp_path / "tb"), 30, True, calculator=calc)
    msg = str(e.value)
    assert "\n" not in msg and "calculator (Delegating)" in msg
    assert "get_step_stragglers, new_step_times" in msg
    assert not (tmp_path / "tb").exists()


def test_any_object_with_the_members_is_monitored(tmp_path):
    from tests.measure.test_monitor import scenario

    store = SQLiteStore(str(tmp_path / "g.db"))
    store.append(scenario("j"))
    calc = Delegating(GoodputCalculator("j", store=store, clock=lambda: 1_700_000_120.0))
    mon = GoodputMonitor("j", "goodput_j", str(tmp_path / "tb"), 30, True, calculator=calc,
                         clock=lambda: 1_700_000_120.0)
    values = mon.upload_goodput()
    expect = GoodputCalculator("j", store=store, clock=lambda: 1_700_000_120.0).get_job_goodput()
    assert values["goodput/total"] == pytest.approx(expect[0])
    assert mon.upload_step_deviation()["points"] == 30.0
    assert {"get_job_goodput", "get_step_statistics", "get_step_stragglers",
            "new_step_times"} <= set(calc.calls)
    mon.close()
    store.close()


# ----------------------------------------------------------------- options
import dataclasses
import typing

from goodput_jax.measure.monitor_options import (
    MonitorKeywords,
    MonitorOptions,
    monitor_options,
)


@pytest.mark.parametrize("field, value, exc", [
    ("upload_interval", 0, ValueError), ("upload_interval", "30", TypeError),
    ("stop_timeout", -1, ValueError), ("hang_threshold_seconds", float("nan"), ValueError),
    ("straggler_top", -1, ValueError), ("straggler_top", True, ValueError),
    ("max_deviation_points", 1.5, ValueError), ("tag_layout", "google", ValueError),
    ("badput_tags", 1, ValueError), ("step_deviation_interval_seconds", 0, ValueError),
])
def test_options_fail_once_with_one_line_naming_field_and_value(field, value, exc):
    with pytest.raises(exc) as e:
        MonitorOptions(**{field: value})
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{field} ({value!r})")


def test_options_are_frozen_keyword_only_and_the_keywords_name_their_fields():
    o = MonitorOptions(upload_interval=5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.upload_interval = 6  # type: ignore[misc]
    with pytest.raises(TypeError):
        MonitorOptions(5)  # type: ignore[misc]
    assert o.upload_interval == 5.0 and isinstance(o.upload_interval, float)
    assert o.step_interval == 5.0
    fields = {f.name for f in dataclasses.fields(MonitorOptions)}
    assert set(typing.get_type_hints(MonitorKeywords)) == fields - {"upload_interval",
                                                                    "monitoring_enabled"}


def test_keywords_become_options_in_one_place():
    o = monitor_options(None, upload_interval=5, hang_threshold_seconds=60)
    assert (o.upload_interval, o.hang_threshold_seconds) == (5.0, 60.0)
    base = MonitorOptions(straggler_top=5)
    assert monitor_options(base, upload_interval=7) == dataclasses.replace(base,
                                                                          upload_interval=7)
    assert monitor_options(base, straggler_top=5) is not None  # agreeing: fine
    with pytest.raises(ValueError, match=r"straggler_top \(2\) and options.straggler_top \(5\)"):
        monitor_options(base, straggler_top=2)
    with pytest.raises(TypeError, match="unexpected keyword argument 'hang_treshold'"):
        monitor_options(None, hang_treshold=5)
    with pytest.raises(TypeError, match="options"):
        monitor_options({"upload_interval": 5})  # type: ignore[arg-type]


def test_the_monitor_takes_options_and_reads_its_attributes_from_them(tmp_path):
    opts = MonitorOptions(upload_interval=12, monitoring_enabled=True, badput_tags=False,
                          hang_threshold_seconds=60, straggler_window_seconds=None)
    mon = GoodputMonitor("j", "goodput_j", str(tmp_path / "tb"), options=opts,
                         store=":memory:")
    assert mon.options is opts
    assert (mon.upload_interval, mon.monitoring_enabled, mon.badput_tags,
            mon.hang_threshold_seconds, mon.straggler_window_seconds,
            mon.step_deviation_interval_seconds) == (12.0, True, False, 60.0, None, 12.0)
    with pytest.raises(AttributeError):
        mon.upload_interval = 3  # read-only: the options are the one place
    mon.close()
    # the earlier keywords still work, translated into the same options
    kw = GoodputMonitor("j", "goodput_j", str(tmp_path / "tb"), 12, True, badput_tags=False,
                        hang_threshold_seconds=60, straggler_window_seconds=None,
                        store=":memory:")
    assert kw.options == opts
    kw.close()


def test_no_public_monitor_constructor_takes_more_than_ten_parameters():
    sig = inspect.signature(GoodputMonitor.__init__)
    assert len([p for p in sig.parameters if p != "self"]) <= 10


# ----------------------------------------------------------------- the drop-in's translation
def test_the_drop_in_translates_googles_and_maxtexts_arguments_into_options(tmp_path):
    from goodput_jax import monitoring

    m = monitoring.GoodputMonitor("j", "goodput_j", str(tmp_path / "tb"),
                                  goodput_upload_interval_seconds=45, monitor_goodput=True,
                                  include_badput_breakdown=True,
                                  final_flush_timeout_seconds=12.0,
                                  hang_threshold_seconds=60, store=":memory:")
    o = m.options
    assert (o.upload_interval, o.monitoring_enabled, o.badput_tags, o.stop_timeout,
            o.tag_layout, o.hang_threshold_seconds, o.include_step_deviation) == \
        (45.0, True, True, 12.0, "reference", 60.0, False)
    m.close()
    with pytest.raises(TypeError) as e:
        monitoring.GoodputMonitor("j", "goodput_j", str(tmp_path / "tb"), 30,
                                  hang_treshold_seconds=60, store=":memory:")
    assert "\n" not in str(e.value) and "hang_treshold_seconds" in str(e.value)
    with pytest.raises(ValueError, match=r"^straggler_top \(-1\)"):
        monitoring.GoodputMonitor("j", "goodput_j", str(tmp_path / "tb"), 30,
                                  straggler_top=-1, store=":memory:")


def test_the_exporter_reads_gcp_options_through_the_gcptarget_protocol():
    from goodput_jax.goodput import GCPOptions
    from goodput_jax.measure.cloud_metrics import CloudMetrics
    from goodput_jax.measure.gce_metadata import GCPTarget

    opts = GCPOptions(project_id="p", location="l", acc_type="TPU-v5e", cluster_name="c")
    assert isinstance(opts, GCPTarget)
    m = CloudMetrics(opts, "job").interval_metrics({"interval_size": 60,
                                                    "interval_goodput": {"TOTAL": 90.0}})
    assert m[0]["metric_labels"] == {"goodput_source": "TOTAL", "rolling_window_size": "60",
                                     "accelerator_type": "TPU-v5e", "cluster_name": "c"}
    with pytest.raises(TypeError, match=r"gcp_options \(\{'project_id': 'p'\}\)"):
        CloudMetrics({"project_id": "p"}, "job")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="project_id"):
        CloudMetrics(GCPOptions(location="l"), "job")


def test_one_name_one_thing_for_the_metadata_lookup(monkeypatch):
    from goodput_jax import goodput_utils
    from goodput_jax.measure.gce_metadata import MetadataUnavailable, query_gce_metadata

    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")  # nothing listens: refused
    with pytest.raises(MetadataUnavailable):
        query_gce_metadata("project", "project-id", timeout=0.5)
    assert goodput_utils.get_gcp_metadata("project", "project-id", timeout=0.5, retries=0) is None
