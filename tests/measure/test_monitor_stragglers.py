"""The monitor's stragglers: two real recorders (host 0 and 1 of one launch) write one SQLite
store on injected clocks; the monitor's ``stragglers/*`` tags are read back from the event
file with EventAccumulator, its log line from the log, and its Cloud Monitoring series from
the loopback MetricService of test_cloud_monitoring.

The timeline (hand-computed): both hosts start the job at T0 and meet every step (a
collective), period 1 s, step ``i`` at T0 + 1 + i, both ending it at T0 + 1.9 + i. Host 1
loads its batch 0.25 s longer in steps 0-14 (it starts them 0.25 s late), host 0 0.5 s longer
in steps 15-19. Per step the late host's lag is its delay (the other host's start is the
median of the others), so host 1 lost 15 x 0.25 = 3.75 s (60 % of 6.25 s), host 0 5 x 0.5 =
2.5 s (40 %).
"""

from __future__ import annotations

import logging

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from goodput_jax.measure.calculator import GoodputCalculator
from goodput_jax.measure.monitor import GoodputMonitor, straggler_scalars
from goodput_jax.measure.recorder import GoodputRecorder
from goodput_jax.measure.stores.sqlite import SQLiteStore

T0 = 1_700_000_000.0
STEPS = 20


class Clock:
    """An injected clock: the test sets ``t``."""

    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def delay(host: int, step: int) -> float:
    if host == 1 and step < 15:
        return 0.25
    if host == 0 and step >= 15:
        return 0.5
    return 0.0


class TwoHosts:
    """Two recorders, host 0 and host 1 of run "launch-1", on one store and their own
    injected clocks; ``record(a, b)`` records steps ``a..b-1`` on both and flushes."""

    def __init__(self, path: str) -> None:
        self.clocks = [Clock(T0), Clock(T0)]
        self.recs = [GoodputRecorder("job", "goodput_job", True, store=f"sqlite:///{path}",
                                     clock=self.clocks[h], host=h, run_id="launch-1")
                     for h in (0, 1)]
        for rec in self.recs:
            rec.record_job_start_time()

    def record(self, a: int, b: int) -> None:
        for i in range(a, b):
            for h, rec in enumerate(self.recs):
                self.clocks[h].t = T0 + 1.0 + i + delay(h, i)
                rec.record_step_start_time(i)
                self.clocks[h].t = T0 + 1.9 + i
                rec.record_step_end_time(i)
        for rec in self.recs:
            assert rec.flush(10.0)

    def end(self, t: float) -> None:
        for h, rec in enumerate(self.recs):
            self.clocks[h].t = t
            rec.record_job_end_time()
            rec.close()


def load(tb_dir) -> EventAccumulator:
    acc = EventAccumulator(str(tb_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return acc


def last(acc: EventAccumulator, tag: str) -> float:
    return acc.Scalars(tag)[-1].value


@pytest.fixture
def db(tmp_path):
    return str(tmp_path / "two_hosts.db")


def test_two_hosts_whole_job_tags_read_back(db, tmp_path):
    hosts = TwoHosts(db)
    hosts.record(0, STEPS)
    hosts.end(T0 + 1.0 + STEPS)
    store = SQLiteStore(db)
    now = Clock(T0 + 30.0)
    tb = tmp_path / "tb"
    with GoodputMonitor("job", "goodput_job", str(tb), 60, True, store=store, clock=now,
                        straggler_window_seconds=None) as mon:
        values = mon.upload_goodput()
    st = GoodputCalculator("job", store=store, clock=now).get_step_stragglers()
    assert st.num_hosts == 2 and st.steps.size == STEPS
    acc = load(tb)
    expect = {
        "stragglers/num_hosts": 2.0, "stragglers/steps_compared": 20.0,
        "stragglers/total_lost_seconds": 6.25, "stragglers/max_lag_seconds": 0.5,
        "stragglers/slowest_host": 1.0,
        "stragglers/host_1/lost_seconds": 3.75, "stragglers/host_1/share": 60.0,
        "stragglers/host_1/steps_last": 15.0,
        "stragglers/host_0/lost_seconds": 2.5, "stragglers/host_0/share": 40.0,
        "stragglers/host_0/steps_last": 5.0,
    }
    for tag, v in expect.items():
        assert values[tag] == pytest.approx(v, abs=1e-6), tag
        assert last(acc, tag) == pytest.approx(v, abs=1e-5), tag
    assert values == {**values, **straggler_scalars(st)}  # the monitor wrote the calculator's
    assert acc.Scalars("stragglers/total_lost_seconds")[-1].step == STEPS - 1
    assert "goodput/total" in acc.Tags()["scalars"]
    store.close()


def test_whole_job_log_line_names_the_slowest_host_and_its_shares(db, tmp_path, caplog):
    hosts = TwoHosts(db)
    hosts.record(0, STEPS)
    hosts.end(T0 + 1.0 + STEPS)
    store = SQLiteStore(db)
    caplog.set_level(logging.INFO, logger="goodput_jax.measure.monitor")
    with GoodputMonitor("job", "goodput_job", str(tmp_path / "tb"), 60, True, store=store,
                        clock=Clock(T0 + 30.0), straggler_window_seconds=None) as mon:
        mon.upload_goodput()
        total = mon.calculator.get_job_goodput_details()["total_time"]
    (line,) = [r.getMessage() for r in caplog.records if "slowest host" in r.getMessage()]
    assert total == pytest.approx(1.0 + STEPS)  # job start at T0, job end at T0 + 21
    assert (f"slowest host 1 held back 15 of 20 steps, 3.750s lost (60.0% of straggler "
            f"time, {100 * 3.75 / total:.1f}% of job time; 2 hosts, the whole job)") in line
    store.close()


def test_one_host_writes_no_straggler_tags(db, tmp_path):
    clock = Clock(T0)
    rec = GoodputRecorder("job", "goodput_job", True, store=f"sqlite:///{db}", clock=clock,
                          host=0, run_id="solo")
    rec.record_job_start_time()
    for i in range(5):
        clock.t = T0 + 1 + i
        rec.record_step_start_time(i)
    clock.t = T0 + 6
    rec.record_job_end_time()
    rec.close()
    store = SQLiteStore(db)
    tb = tmp_path / "tb"
    with GoodputMonitor("job", "goodput_job", str(tb), 60, True, store=store,
                        clock=Clock(T0 + 10)) as mon:
        values = mon.upload_goodput()
        assert mon.upload_stragglers() == {}
        assert mon.slowest_host is None
    assert values["goodput/total"] > 0
    assert not any(t.startswith("stragglers/") for t in values)
    assert not any(t.startswith("stragglers/") for t in load(tb).Tags()["scalars"])
    store.close()


def test_window_follows_the_slowest_host_and_logs_only_on_change(db, tmp_path, caplog):
    hosts = TwoHosts(db)
    store = SQLiteStore(db)
    now = Clock(T0)
    tb = tmp_path / "tb"
    caplog.set_level(logging.INFO, logger="goodput_jax.measure.monitor")

    def slowest_lines():
        return [r.getMessage() for r in caplog.records if "slowest host" in r.getMessage()]

    with GoodputMonitor("job", "goodput_job", str(tb), 60, True, store=store, clock=now,
                        straggler_window_seconds=5.0, straggler_log_every=3) as mon:
        hosts.record(0, 10)
        now.t = T0 + 11.0
        v1 = mon.upload_goodput()
        # window [T0+6, T0+11]: steps 5-9 (their starts at >= T0+6), host 1 lagged each
        assert v1["stragglers/steps_compared"] == 5.0
        assert v1["stragglers/host_1/lost_seconds"] == pytest.approx(5 * 0.25)
        assert v1["stragglers/slowest_host"] == 1.0 and mon.slowest_host == 1
        lines = slowest_lines()
        assert len(lines) == 1 and "slowest host 1 held back 5 of 5 steps" in lines[0]
        assert "100.0% of straggler time" in lines[0] and "last 5s" in lines[0]
        mon.upload_goodput()  # same slowest host: no new line
        assert len(slowest_lines()) == 1
        hosts.record(10, STEPS)
        now.t = T0 + 21.0
        v2 = mon.upload_goodput()  # window [T0+16, T0+21]: steps 15-19, host 0 lagged
        assert v2["stragglers/slowest_host"] == 0.0
        assert v2["stragglers/host_0/lost_seconds"] == pytest.approx(5 * 0.5)
        assert "stragglers/host_1/lost_seconds" not in v2
        lines = slowest_lines()
        assert len(lines) == 2 and "slowest host 0 held back 5 of 5 steps" in lines[1]
        for _ in range(2):
            mon.upload_goodput()
        assert len(slowest_lines()) == 2  # unchanged: 2 uploads since the last line
        mon.upload_goodput()  # the 3rd upload since: straggler_log_every=3
        assert len(slowest_lines()) == 3
    acc = load(tb)
    seq = [(e.step, e.value) for e in acc.Scalars("stragglers/slowest_host")]
    # at the goodput upload's step (the job's last productive step), 6 uploads
    assert [s for s, _ in seq] == [e.step for e in acc.Scalars("goodput/total")]
    assert [v for _, v in seq] == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    hosts.end(T0 + 22.0)
    store.close()


def test_straggler_arguments_are_checked_before_anything_is_written(tmp_path):
    tb = tmp_path / "tb"
    for kw, match in (({"straggler_window_seconds": 0}, "straggler_window_seconds"),
                      ({"straggler_top": -1}, "straggler_top"),
                      ({"straggler_log_every": 1.5}, "straggler_log_every")):
        with pytest.raises((TypeError, ValueError), match=match):
            GoodputMonitor("job", "goodput_job", str(tb), 60, True,
                           store=f"sqlite:///{tmp_path / 'x.db'}", **kw)
    assert not tb.exists() and not (tmp_path / "x.db").exists()


def test_cloud_monitoring_gets_per_host_lost_time(db, tmp_path):
    pytest.importorskip("grpc")
    pytest.importorskip("google.cloud.monitoring_v3")
    from goodput_jax import goodput
    from tests.measure.test_cloud_monitoring import LoopbackMetricService

    hosts = TwoHosts(db)
    hosts.record(0, STEPS)
    hosts.end(T0 + 1.0 + STEPS)
    store = SQLiteStore(db)
    opts = goodput.GCPOptions(project_id="proj", location="us-central1")
    with LoopbackMetricService() as srv:
        mon = goodput.GoodputMonitor("job", "goodput_job", str(tmp_path / "tb"), 3600, True,
                                     gcp_options=opts, store=store, clock=Clock(T0 + 30.0),
                                     gcm_client=srv.client(), straggler_window_seconds=3600)
        values = mon.upload_goodput()
        mon.close()
    assert values["stragglers/host_1/lost_seconds"] == pytest.approx(3.75)
    got = srv.series()
    c = "custom.googleapis.com/goodput_jax/"
    for host, lost, share in (("0", 2.5, 40.0), ("1", 3.75, 60.0)):
        labels = tuple(sorted({"host": host, "rolling_window_size": "3600"}.items()))
        value, resource, name = got[(c + "straggler_lost_time", labels)]
        assert value == pytest.approx(lost) and name == "projects/proj"
        assert resource == {"project_id": "proj", "location": "us-central1",
                            "namespace": "goodput_jax", "job": "job", "task_id": "0"}
        assert got[(c + "straggler_share", labels)][0] == pytest.approx(share)
    total = got[(c + "straggler_total_lost_time", (("rolling_window_size", "3600"),))]
    assert total[0] == pytest.approx(6.25)
    # the goodput metrics went too, in the same upload
    assert any(k[0] == "compute.googleapis.com/workload/goodput_time" for k in got)
    store.close()
