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
