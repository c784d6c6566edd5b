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
from goodput_jax.measure.calculator import GoodputCalculator  # noqa: E402
from goodput_jax.measure.monitor import GoodputMonitor  # noqa: E402
from goodput_jax.measure.monitor_calculator import (  # noqa: E402
    MONITORED_MEMBERS,
    MonitorCalculator,
    MonitoredCalculator,
)
from goodput_jax.measure.stores.sqlite import SQLiteStore  # noqa: E402


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
    calc = MonitorCalculator("j", store=":memory:")
    assert isinstance(calc, MonitoredCalculator)
    from goodput_jax.goodput import GoodputCalculator as DropIn

    assert isinstance(DropIn("j", store=":memory:"), MonitoredCalculator)


def test_a_calculator_lacking_a_member_fails_at_construction(tmp_path):
    inner = MonitorCalculator("j", store=":memory:")
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
    calc = Delegating(MonitorCalculator("j", store=store, clock=lambda: 1_700_000_120.0))
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
