"""TensorBoard event files in a ``gs://`` directory, without TensorFlow: the monitor writes
through gcsfs to a loopback GCS emulator, and TensorBoard's EventAccumulator reads them back
(through its own fsspec file system, and from a local copy)."""

from __future__ import annotations

import sys

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from goodput_jax import goodput
from goodput_jax.measure.monitor import GoodputMonitor, check_tensorboard_dir
from goodput_jax.measure.stores.sqlite import SQLiteStore
from tests.measure._gcs_emulator import gcs_emulator
from tests.measure.test_monitor import clock, scenario


def _acc(path: str) -> EventAccumulator:
    acc = EventAccumulator(path, size_guidance={"scalars": 0})
    acc.Reload()
    return acc


def test_event_files_on_gcs_read_back_with_event_accumulator(tmp_path, monkeypatch):
    store = SQLiteStore(str(tmp_path / "g.db"))
    store.append(scenario())
    with gcs_emulator(monkeypatch) as _:
        import fsspec

        mon = GoodputMonitor("job", "goodput_job", "gs://tb-bucket/runs/job", 3600, True,
                             store=store, clock=clock)
        first = mon.upload_goodput()
        mon.upload_step_deviation()
        second = mon.upload_goodput()  # the object is rewritten whole on each flush
        mon.close()
        fs = fsspec.filesystem("gs")
        names = fs.ls("tb-bucket/runs/job")
        assert len(names) == 1 and "events.out.tfevents." in names[0]
        assert mon.event_file.startswith("gs://tb-bucket/runs/job/events.out.tfevents.")
        fs.get(names[0], str(tmp_path / "copy" / names[0].rsplit("/", 1)[1]))
        remote = _acc("gs://tb-bucket/runs/job")  # TensorBoard reads gs:// via fsspec itself
        local = _acc(str(tmp_path / "copy"))
    for acc in (remote, local):
        assert [s.value for s in acc.Scalars("goodput/total")] == pytest.approx(
            [first["goodput/total"], second["goodput/total"]], rel=1e-6)
        assert acc.Scalars("goodput/total")[-1].step == 29
        assert len(acc.Scalars("step_time/deviation")) == 30
        assert acc.Scalars("badput/accelerator_initialization")[-1].value == pytest.approx(
            first["badput/accelerator_initialization"], rel=1e-6)
    store.close()


def test_maxtext_reference_layout_on_gcs_and_rotation(tmp_path, monkeypatch):
    """The drop-in's <tensorboard_dir>/goodput/ layout on gs://, and a new event file once
    the current one passes its size bound (each upload rewrites a bounded object)."""
    store = SQLiteStore(str(tmp_path / "g.db"))
    store.append(scenario())
    with gcs_emulator(monkeypatch) as _:
        import fsspec

        from goodput_jax.measure import tensorboard as tensorboard_mod

        mon = goodput.GoodputMonitor("job", "goodput_job", "gs://tb-bucket/mt", 3600, True,
                                     include_badput_breakdown=True, store=store, clock=clock,
                                     gcp_options=goodput.GCPOptions(
                                         enable_gcp_goodput_metrics=False,
                                         enable_gcp_step_deviation_metrics=False))
        mon.upload_goodput()
        mon.close()
        acc = _acc("gs://tb-bucket/mt/goodput")
        assert acc.Scalars("goodput/goodput")[-1].step == 29
        assert {"badput/tpu_initialization", "badput/data_loading_sync"} <= set(
            acc.Tags()["scalars"])
        # rotation: a writer with a tiny bound starts a new file for each record past it
        ef = tensorboard_mod.RemoteEventFile("gs://tb-bucket/rot", ".t", max_bytes=64)
        from tensorboard.compat.proto import event_pb2, summary_pb2

        for i in range(3):
            ef.add_event(event_pb2.Event(wall_time=1.0 + i, step=i, summary=summary_pb2.Summary(
                value=[summary_pb2.Summary.Value(tag="x", simple_value=float(i))])))
        ef.close()
        files = fsspec.filesystem("gs").ls("tb-bucket/rot")
        assert len(files) == 3
        steps = sorted(s.step for s in _acc("gs://tb-bucket/rot").Scalars("x"))
        assert steps == [0, 1, 2]
    store.close()


def test_gs_dir_without_gcsfs_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "gcsfs", None)  # as if not installed
    with pytest.raises(ImportError, match=r"tensorboard_dir \('gs://b/tb'\) needs gcsfs "
                                          r"\(pip install 'goodput-jax\[gcp\]'\)"):
        GoodputMonitor("job", None, "gs://b/tb", 30, True, store=str(tmp_path / "g.db"))
    assert not (tmp_path / "g.db").exists()  # the error comes before any file is created
    assert check_tensorboard_dir(str(tmp_path)) is None
