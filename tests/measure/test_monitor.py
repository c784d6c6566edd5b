"""GoodputMonitor: real TensorBoard event files read back with EventAccumulator,
threads that survive failing stores and stop in bounded time, and the CLI."""

from __future__ import annotations

import os
import threading
import time

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from goodput_jax.measure.calculator import BadputType, GoodputCalculator
from goodput_jax.measure.events import Event
from goodput_jax.measure.events import EventKind as K
from goodput_jax.measure.monitor import GoodputMonitor, hint_scalars
from goodput_jax.measure.stores.base import StoreError
from goodput_jax.measure.stores.sqlite import SQLiteStore

T0 = 1_700_000_000.0
NOW = T0 + 120.0
HINTS = {
    "gradParams": {"norm": 0.25, "var": 2.0},
    "initBatchSize": 32,
    "efficiency": 0.8,
    "suggestedBatchSize": 256,
    "predictedSpeedup": 1.75,
}


def scenario(job: str = "job") -> list[Event]:
    out: list[Event] = []

    def add(kind, t, step=None, run="r1", **kw):
        out.append(Event(kind, job, run, 0, T0 + t, step=step, **kw))

    add(K.JOB_START, 0.0)
    add(K.ACCELERATOR_INIT_START, 0.0)
    add(K.ACCELERATOR_INIT_END, 5.0)
    for i in range(30):
        t = 6.0 + 2.0 * i
        add(K.DATA_LOADING_START, t)
        add(K.DATA_LOADING_END, t + 0.5)
        add(K.STEP_START, t + 0.5, step=i)
    add(K.CUSTOM_BADPUT_START, 66.5, label="eval/ppl")
    add(K.CUSTOM_BADPUT_END, 70.0, label="eval/ppl")
    add(K.HINTS, 70.0, payload=HINTS)
    add(K.JOB_END, 71.0)
    return out


def clock() -> float:
    return NOW


@pytest.fixture
def store(tmp_path):
    s = SQLiteStore(str(tmp_path / "goodput.db"))
    s.append(scenario())
    yield s
    s.close()


def load(tb_dir) -> EventAccumulator:
    acc = EventAccumulator(str(tb_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return acc


def make_monitor(store, tb_dir, **kw) -> GoodputMonitor:
    kw.setdefault("monitoring_enabled", True)
    kw.setdefault("clock", clock)
    kw.setdefault("stop_timeout", 5.0)
    return GoodputMonitor("job", "goodput_job", str(tb_dir), kw.pop("upload_interval", 0.01),
                          store=store, **kw)


def wait_for(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.002)


# ----------------------------------------------------------------- values
def test_goodput_file_read_back_matches_calculator(store, tmp_path):
    tb = tmp_path / "tb"
    with make_monitor(store, tb) as monitor:
        written = monitor.upload_goodput()
    calc = GoodputCalculator("job", "goodput_job", store=store, clock=clock)
    goodput, badput, last_step = calc.get_job_goodput(include_badput_breakdown=True)
    acc = load(tb)
    (point,) = acc.Scalars("goodput/total")
    assert point.step == last_step == 29
    assert point.value == pytest.approx(goodput, rel=1e-6)
    assert written["goodput/total"] == pytest.approx(goodput)
    tags = set(acc.Tags()["scalars"])
    for kind, pct in badput.items():
        tag = f"badput/{kind.name.lower()}"
        assert tag in tags
        assert acc.Scalars(tag)[-1].value == pytest.approx(pct, rel=1e-5, abs=1e-5)
    assert acc.Scalars("badput/accelerator_initialization")[-1].value > 0
    details = calc.get_job_goodput_details()
    assert acc.Scalars("badput/custom/eval/ppl")[-1].value == pytest.approx(
        100 * details["custom_badput_time"]["eval/ppl"] / details["total_time"], rel=1e-5)
    dev = calc.get_step_deviation()
    assert acc.Scalars("step_time/median")[-1].value == pytest.approx(dev.median, rel=1e-6)
    assert acc.Scalars("step_time/ideal")[-1].value == pytest.approx(dev.ideal_step_time, rel=1e-6)
    # Model side from the training hooks' hints.
    assert acc.Scalars("model/efficiency")[-1].value == pytest.approx(0.8)
    assert acc.Scalars("model/suggested_batch_size")[-1].value == 256
    assert acc.Scalars("model/predicted_speedup")[-1].value == pytest.approx(1.75)
    assert acc.Scalars("model/gradient_noise_scale")[-1].value == pytest.approx(32 * 2.0 / 0.25)
    # Badput + goodput add up to 100 in what TensorBoard shows.
    total = acc.Scalars("goodput/total")[-1].value + sum(
        acc.Scalars(f"badput/{k.name.lower()}")[-1].value for k in badput
        if k is not BadputType.DATA_LOADING_ASYNC)
    assert total == pytest.approx(100.0, abs=1e-3)


def test_step_deviation_points_are_incremental(tmp_path):
    store = SQLiteStore(str(tmp_path / "g.db"))
    events = scenario()
    store.append(events[:50])  # steps 0..15 started
    tb = tmp_path / "tb"
    monitor = make_monitor(store, tb, configured_ideal_step_time=1.0)
    first = monitor.upload_step_deviation()
    store.append(events[50:])
    second = monitor.upload_step_deviation()
    monitor.close()
    calc = GoodputCalculator("job", "goodput_job", store=store, clock=clock,
                             configured_ideal_step_time=1.0)
    dev = calc.get_step_deviation()
    points = load(tb).Scalars("step_time/deviation")
    assert first["points"] > 0 and second["points"] > 0
    assert first["points"] + second["points"] == len(points) == dev.num_steps
    assert [p.step for p in points] == dev.steps.tolist()
    assert [p.value for p in points] == pytest.approx(dev.deviations.tolist(), abs=1e-5)
    store.close()


def test_step_deviation_uploads_steps_redone_after_a_rollback(tmp_path):
    """Steps redone after a rollback are uploaded again, with their new times (they
    used to be skipped until they passed the highest step already written)."""
    store = SQLiteStore(str(tmp_path / "g.db"))
    ev = lambda kind, t, step=None: Event(kind, "job", "r1", 0, T0 + t, step=step)
    store.append([ev(K.JOB_START, 0.0)] + [ev(K.STEP_START, 1.0 + i, i) for i in range(11)])
    tb = tmp_path / "tb"
    monitor = make_monitor(store, tb, configured_ideal_step_time=1.0)
    assert monitor.upload_step_deviation()["points"] == 10  # steps 0-9 of 1 s
    # rollback to step 6, redone at 3 s per step: steps 6, 7, 8 complete again
    store.append([ev(K.STEP_START, 12.0 + 3 * i, 6 + i) for i in range(4)])
    second = monitor.upload_step_deviation()
    monitor.close()
    assert second["points"] == 3
    points = load(tb).Scalars("step_time/deviation")
    assert [(p.step, round(p.value, 6)) for p in points[10:]] == [(6, 2.0), (7, 2.0), (8, 2.0)]
    store.close()


def test_rolling_window_query_does_not_hold_up_incremental_queries(tmp_path):
    """An interval query replays the whole history; it must not hold the calculator's
    lock meanwhile (the goodput uploader would stall behind every rolling-window upload)."""
    import threading

    class GatedStore(SQLiteStore):
        gate: threading.Event | None = None

        def read_columns(self, job_name, cursor=None, max_events=1_000_000):
            if cursor is None and self.gate is not None:
                self.entered.set()
                self.gate.wait(10)
            return super().read_columns(job_name, cursor, max_events)

    store = GatedStore(str(tmp_path / "g.db"))
    store.append(scenario())
    calc = GoodputCalculator("job", "goodput_job", store=store, clock=clock)
    calc.get_job_goodput()
    store.gate, store.entered = threading.Event(), threading.Event()
    th = threading.Thread(target=calc.get_job_goodput_interval, args=(NOW - 60, NOW))
    th.start()
    assert store.entered.wait(10)  # the replay is inside its (blocked) store read
    done = threading.Event()
    threading.Thread(target=lambda: (calc.get_job_goodput(), done.set()), daemon=True).start()
    finished = done.wait(3)
    store.gate.set()
    th.join()
    store.close()
    assert finished, "get_job_goodput waited for the interval query's replay"


def test_rolling_window_tags(store, tmp_path):
    tb = tmp_path / "tb"
    with make_monitor(store, tb) as monitor:
        values = monitor.upload_rolling_window_goodput([60, 3600])
    calc = GoodputCalculator("job", "goodput_job", store=store, clock=clock)
    acc = load(tb)
    for w in (60, 3600):
        expect = calc.get_job_goodput_interval(NOW - w, NOW)[0]
        assert values[f"goodput/interval_{w}s"] == pytest.approx(expect)
        assert acc.Scalars(f"goodput/interval_{w}s")[-1].value == pytest.approx(expect, rel=1e-6)
    # The 60 s window sees only the end of the job, the 3600 s window all of it.
    assert values["goodput/interval_60s"] != values["goodput/interval_3600s"]


def test_hint_scalars_read_the_hints_json_keys_only():
    assert hint_scalars(None) == {}
    assert hint_scalars({"gradParams": {"norm": 0.0, "var": 1.0}, "initBatchSize": 8}) == {
        "model/init_batch_size": 8.0, "model/grad_norm_sqr": 0.0, "model/grad_variance": 1.0}
    got = hint_scalars({"gradientNoiseScale": 123.0, "suggestedBatchSize": 64,
                        "predictedSpeedup": 2.5, "gradParams": {"norm": 1.0, "var": 1.0},
                        "initBatchSize": 4, "efficiency": float("nan")})
    assert got["model/gradient_noise_scale"] == 123.0  # explicit beats derived
    assert got["model/suggested_batch_size"] == 64.0
    assert got["model/predicted_speedup"] == 2.5
    assert "model/efficiency" not in got  # non-finite values are not written
    # the old alias table is gone: names that are not Hints' JSON keys are not read
    assert hint_scalars({"gradient_noise_scale": 1.0, "suggestion": {"batch_size": 64},
                         "speedup": 2.0, "gns": 3.0}) == {}


def test_hint_tags_follow_the_typed_hints():
    """Every key the monitor reads is a JSON key of ``Hints``, and a ``Hints`` (or its
    JSON) gives the tags of its fields."""
    from goodput_jax.measure.monitor import HINT_TAGS
    from goodput_jax.model.hints import Hints
    from goodput_jax.model.types import GradParams

    assert set(HINT_TAGS.values()) <= set(Hints().to_json())
    h = Hints(grad_params=GradParams(0.5, 2.0), init_batch_size=32, max_batch_size=512,
              num_nodes=1, num_replicas=2, atomic_bsz=16, accum_steps=1, efficiency=0.75,
              suggested_batch_size=128, suggested_atomic_bsz=32, suggested_accum_steps=2,
              predicted_speedup=1.5)
    expect = {
        "model/init_batch_size": 32.0, "model/max_batch_size": 512.0, "model/num_nodes": 1.0,
        "model/num_replicas": 2.0, "model/atomic_batch_size": 16.0,
        "model/accumulation_steps": 1.0, "model/efficiency": 0.75,
        "model/suggested_batch_size": 128.0, "model/suggested_atomic_batch_size": 32.0,
        "model/suggested_accumulation_steps": 2.0, "model/predicted_speedup": 1.5,
        "model/grad_norm_sqr": 0.5, "model/grad_variance": 2.0,
        "model/gradient_noise_scale": 32 * 2.0 / 0.5,
    }
    assert hint_scalars(h) == expect
    assert hint_scalars(h.to_json()) == expect
    assert hint_scalars(Hints.from_json(h.to_json())) == expect


# ----------------------------------------------------------------- threads
class FlakyStore:
    """SQLite store whose reads fail in alternating pairs of calls (one poll of the
    goodput uploader without breakdown/deviation makes two reads)."""

    def __init__(self, inner):
        self.inner = inner
        self.url = inner.url
        self.calls = 0
        self.failures = 0

    def read_events(self, job_name, cursor=None, limit=None):
        n = self.calls
        self.calls += 1
        if (n // 2) % 2 == 1:
            self.failures += 1
            raise StoreError("injected: store unavailable")
        return self.inner.read_events(job_name, cursor, limit)

    def append(self, events):
        self.inner.append(events)

    def list_jobs(self):
        return self.inner.list_jobs()

    def close(self):
        pass


def test_uploader_survives_a_store_that_fails_every_other_poll(store, tmp_path, caplog):
    flaky = FlakyStore(store)
    tb = tmp_path / "tb"
    monitor = make_monitor(flaky, tb, badput_tags=False,
                           include_step_deviation=False)
    assert monitor.start_goodput_uploader()
    wait_for(lambda: flaky.calls >= 16)
    assert monitor.stop_goodput_uploader()
    assert monitor.poll_errors >= 3 and flaky.failures >= 3
    assert "upload failed; will retry" in caplog.text
    points = load(tb).Scalars("goodput/total")
    assert len(points) >= 3  # the successful polls, between failures
    expect = GoodputCalculator("job", "goodput_job", store=store, clock=clock).get_job_goodput()[0]
    assert points[-1].value == pytest.approx(expect, rel=1e-6)
    monitor.close()


class HangingStore:
    """Reads block until released (a hung Cloud Logging call)."""

    def __init__(self, inner):
        self.inner = inner
        self.url = inner.url
        self.entered = threading.Event()
        self.release = threading.Event()

    def read_events(self, job_name, cursor=None, limit=None):
        self.entered.set()
        self.release.wait(30)
        return self.inner.read_events(job_name, cursor, limit)

    def append(self, events):
        self.inner.append(events)

    def list_jobs(self):
        return self.inner.list_jobs()

    def close(self):
        pass


def test_stop_is_bounded_when_the_store_hangs(store, tmp_path):
    hanging = HangingStore(store)
    monitor = make_monitor(hanging, tmp_path / "tb")
    try:
        assert monitor.start_goodput_uploader()
        assert monitor.start_rolling_window_goodput_uploader(60)
        assert hanging.entered.wait(5)
        t = time.monotonic()
        assert monitor.stop_goodput_uploader(timeout=0.2) is False
        assert monitor.close(timeout=0.2) is False
        assert time.monotonic() - t < 1.5
    finally:
        hanging.release.set()
    assert monitor.stop_goodput_uploader() is True  # idempotent once gone
    assert monitor.close() is True


def test_start_stop_idempotent_and_final_upload(store, tmp_path):
    tb = tmp_path / "tb"
    monitor = make_monitor(store, tb, upload_interval=3600)
    assert monitor.start_goodput_uploader()
    assert not monitor.start_goodput_uploader()  # already running
    assert monitor.start_step_deviation_uploader()
    wait_for(lambda: monitor.event_file is not None)
    t = time.monotonic()
    assert monitor.stop_goodput_uploader()
    assert monitor.stop_step_deviation_uploader()
    assert time.monotonic() - t < 2.0  # the hour-long wait is interrupted
    assert monitor.stop_goodput_uploader() and monitor.stop_step_deviation_uploader()
    monitor.close()
    monitor.close()
    acc = load(tb)
    assert len(acc.Scalars("goodput/total")) == 2  # first poll + final upload on stop
    assert len(acc.Scalars("step_time/deviation")) == 30  # points are not repeated


def test_disabled_monitor_starts_nothing_and_writes_nothing(store, tmp_path):
    tb = tmp_path / "tb"
    monitor = make_monitor(store, tb, monitoring_enabled=False)
    before = threading.active_count()
    assert not monitor.start_goodput_uploader()
    assert not monitor.start_step_deviation_uploader()
    assert not monitor.start_rolling_window_goodput_uploader([60])
    assert threading.active_count() == before
    assert monitor.stop_goodput_uploader()
    monitor.close()
    assert not tb.exists()


def test_writes_only_under_tensorboard_dir(store, tmp_path):
    tb = tmp_path / "deep" / "tb"
    before = {p for p in tmp_path.rglob("*")}
    with make_monitor(store, tb) as monitor:
        monitor.upload_goodput()
        monitor.upload_step_deviation()
        monitor.upload_rolling_window_goodput(30)
    new = {p for p in tmp_path.rglob("*")} - before
    new_files = [p for p in new if p.is_file() and not p.name.startswith("goodput.db")]
    assert new_files and all(tb in p.parents for p in new_files)
    assert os.path.dirname(monitor.event_file) == str(tb)


def test_empty_job_is_not_an_error(tmp_path):
    store = SQLiteStore(str(tmp_path / "empty.db"))
    monitor = make_monitor(store, tmp_path / "tb")
    assert monitor.upload_goodput() == {}
    assert monitor.upload_step_deviation() == {}
    assert monitor.upload_rolling_window_goodput(60) == {}
    assert monitor.poll_errors == 0
    monitor.close()
    store.close()


@pytest.mark.parametrize(
    "kw, exc, match",
    [
        ({"upload_interval": 0}, ValueError, "upload_interval"),
        ({"upload_interval": float("inf")}, ValueError, "upload_interval"),
        ({"upload_interval": "30"}, TypeError, "upload_interval"),
        ({"stop_timeout": -1}, ValueError, "stop_timeout"),
        ({"clock": 3}, TypeError, "clock"),
    ],
)
def test_constructor_validates(store, tmp_path, kw, exc, match):
    with pytest.raises(exc, match=match):
        make_monitor(store, tmp_path / "tb", **kw)


def test_window_validation(store, tmp_path):
    monitor = make_monitor(store, tmp_path / "tb")
    with pytest.raises(ValueError, match="window_seconds"):
        monitor.start_rolling_window_goodput_uploader([])
    with pytest.raises(ValueError, match="window_seconds"):
        monitor.start_rolling_window_goodput_uploader(-5)
    with pytest.raises(TypeError, match="window_seconds"):
        monitor.start_rolling_window_goodput_uploader("60")
    monitor.close()


def test_drop_in_constructor_positional_like_the_seed(store, tmp_path):
    monitor = GoodputMonitor(job_name="job", logger_name="goodput_job",
                             tensorboard_dir=str(tmp_path / "tb"), upload_interval=30,
                             monitoring_enabled=True, store=store, clock=clock)
    assert monitor.upload_goodput()["goodput/total"] > 0
    assert monitor.badput_tags is True and "badput/data_loading" in monitor.upload_goodput()
    monitor.close()


def test_google_badput_argument_is_the_drop_ins_and_named_in_one_line(store, tmp_path):
    # one name, one thing: Google's include_badput_breakdown (default False) is the
    # drop-in's; this monitor's badput_tags (default True) is another name
    with pytest.raises(TypeError) as e:
        GoodputMonitor("job", "goodput_job", str(tmp_path / "tb"), 30,
                       include_badput_breakdown=True, store=store)
    assert "\n" not in str(e.value) and "badput_tags" in str(e.value)
    from goodput_jax import monitoring

    drop_in = monitoring.GoodputMonitor("job", "goodput_job", str(tmp_path / "tb2"), 30,
                                        store=store, clock=clock)
    assert drop_in.include_badput_breakdown is False and drop_in.badput_tags is False
    assert not any(k.startswith("badput/") for k in drop_in.upload_goodput())
    drop_in.close()


# ----------------------------------------------------------------- CLI
def test_cli_monitor_once(store, tmp_path, capsys):
    from goodput_jax.cli import main

    tb = tmp_path / "tb"
    url = "sqlite:///" + str(tmp_path / "goodput.db")
    assert main(["monitor", "--job", "job", "--store", url, "--tensorboard-dir", str(tb),
                 "--once"]) == 0
    assert "goodput/total" in capsys.readouterr().out
    assert load(tb).Scalars("goodput/total")
    assert main(["monitor", "--job", "nobody", "--store", url, "--tensorboard-dir",
                 str(tmp_path / "tb2"), "--once"]) == 2
    assert "no goodput events for job 'nobody'" in capsys.readouterr().err


def test_cli_monitor_duration(store, tmp_path):
    from goodput_jax.cli import main

    tb = tmp_path / "tb"
    url = "sqlite:///" + str(tmp_path / "goodput.db")
    t = time.monotonic()
    assert main(["monitor", "--job", "job", "--store", url, "--tensorboard-dir", str(tb),
                 "--interval", "0.05", "--duration", "0.3"]) == 0
    assert time.monotonic() - t < 5
    assert len(load(tb).Scalars("goodput/total")) >= 2


def test_cli_monitor_on_cloud_logging(tmp_path, capsys):
    """`goodput-jax monitor --store gcl://...` against the loopback Cloud Logging server."""
    from goodput_jax.cli import main
    from tests.measure.gcl_server import FakeCloudLogging, loopback_only, make_store

    with loopback_only(), FakeCloudLogging() as srv:
        writer = make_store(srv, logger_name="goodput_cli")
        writer.append(scenario())
        assert writer.flush(5)
        writer.close()
        tb = tmp_path / "tb"
        url = f"gcl://test-project/goodput_cli?api_endpoint={srv.endpoint}&anonymous=1"
        assert main(["monitor", "--job", "job", "--store", url, "--tensorboard-dir", str(tb),
                     "--once"]) == 0
    sql = SQLiteStore(str(tmp_path / "ref.db"))
    sql.append(scenario())
    ref = GoodputCalculator("job", "goodput_job", store=sql).get_job_goodput()[0]
    got = load(tb).Scalars("goodput/total")[-1].value
    # Both computed with "now" = real time: the job has ended, so the value is fixed.
    assert got == pytest.approx(ref, rel=1e-6)
    sql.close()


def test_hint_scalars_from_the_training_hooks_keys():
    """The key set GoodputHooks.hints() publishes (AdaptDL names), None for unknowns."""
    hooks_hints = {
        "perfParams": {"alpha_c": 0.1}, "gradParams": {"norm": 0.5, "var": 1.0},
        "initBatchSize": 64, "maxBatchSize": 1024, "localBszBounds": [8, 256],
        "gradientAccumulation": True, "maxProfiledReplicas": 4, "numNodes": 1,
        "numReplicas": 4, "atomicBsz": 32, "accumSteps": 1, "gradientNoiseScale": 128.0,
        "efficiency": 0.9, "suggestedBatchSize": 512, "suggestedAtomicBsz": 64,
        "suggestedAccumSteps": 2, "predictedSpeedup": None,
    }
    got = hint_scalars(hooks_hints)
    assert got == {
        "model/gradient_noise_scale": 128.0, "model/efficiency": 0.9,
        "model/suggested_batch_size": 512.0, "model/suggested_accumulation_steps": 2.0,
        "model/suggested_atomic_batch_size": 64.0, "model/init_batch_size": 64.0,
        "model/max_batch_size": 1024.0, "model/atomic_batch_size": 32.0,
        "model/accumulation_steps": 1.0, "model/num_replicas": 4.0, "model/num_nodes": 1.0,
        "model/grad_norm_sqr": 0.5, "model/grad_variance": 1.0,
    }


def _tree(root):
    return sorted(os.path.relpath(os.path.join(d, f), root)
                  for d, dirs, files in os.walk(root) for f in files + dirs)


@pytest.mark.parametrize("layout", ["goodput_jax", "reference", "elastic"])
def test_an_unwritable_tensorboard_dir_fails_at_construction(tmp_path, monkeypatch, layout):
    """A tensorboard_dir that cannot be written (here a path through a regular file, which
    no user, root included, can create) is refused at construction with a one-line
    ValueError naming the argument and the value, before any file is created (not a
    warning at every upload interval)."""
    from goodput_jax import goodput, monitoring_elastic

    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    bad = str(blocker / "tb")
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)  # the default store (./goodput.db) would land here
    monkeypatch.delenv("GOODPUT_JAX_STORE", raising=False)
    before = _tree(tmp_path)
    with pytest.raises(ValueError) as e:
        if layout == "goodput_jax":
            GoodputMonitor("job", "goodput_job", bad, 30, True)
        elif layout == "reference":
            goodput.GoodputMonitor("job", "goodput_job", bad, 30, True)
        else:
            monitoring_elastic.ElasticGoodputMonitor("job", "goodput_job", bad, 30, True)
    msg = str(e.value)
    assert msg.startswith(f"tensorboard_dir ({bad!r}) is not writable") and "\n" not in msg
    assert "is not a directory" in msg
    assert _tree(tmp_path) == before  # nothing created: no store, no event file


def test_a_tensorboard_dir_without_write_permission_fails_at_construction(tmp_path):
    if os.geteuid() == 0:  # root writes anywhere; the path-through-a-file test covers root
        ro = "/proc/1/tb"  # proc: no directory can be created there, not even by root
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        ro = str(locked / "tb")
    with pytest.raises(ValueError, match=r"^tensorboard_dir \('.*'\) is not writable: "):
        GoodputMonitor("job", "goodput_job", ro, 30, True, store=":memory:")
