"""ML Productivity Goodput in the monitors (issue 35, Build 3): the ``productivity/*``
TensorBoard tags read back from real event files, and the
``custom.googleapis.com/goodput_jax/*`` metrics through the rule-enforcing loopback
MetricService, each equal to ``GoodputCalculator.get_productivity_goodput()``; no program
cost recorded: no program goodput, MFU or product written (not a 0).
"""

from __future__ import annotations

import math

import pytest

from goodput_jax.measure.calculator import GoodputCalculator
from goodput_jax.measure.events import Event
from goodput_jax.measure.events import EventKind as K
from goodput_jax.measure.productivity import DevicePeak, ProgramCost
from goodput_jax.measure.stores.sqlite import SQLiteStore
from goodput_jax.measure.tags import PRODUCTIVITY_TAGS
from tests.measure.test_monitor import T0, clock, load, make_monitor, scenario

PROGRAM = ("productivity/program_goodput", "productivity/mfu",
           "productivity/ml_productivity_goodput")
#: 1 TFLOP and 1 GB per step on a 2 TFLOP/s, 1 TB/s device: 0.5 s compute-bound roofline
COST = ProgramCost("jit(step)", 1e12, 0.0, 1e9, "test chip",
                   peak=DevicePeak("test chip", 2e12, 1e12, "user"))


def crashed_scenario(program_cost: bool) -> list[Event]:
    """``scenario()``'s job, but its first run crashes after step 9 (no job end) and a
    second run starts 20 s later and redoes steps 5-29; with a program cost at step 0."""
    out = []
    for e in scenario():
        if e.kind == K.JOB_END:
            continue
        if e.timestamp >= T0 + 26.0:  # after step 9's start at 24.5: the crash
            continue
        out.append(e)

    def add(kind, t, step=None, **kw):
        out.append(Event(kind, "job", "r2", 0, T0 + t, step=step, **kw))

    add(K.JOB_START, 46.0)
    for i, step in enumerate(range(5, 30)):
        t = 48.0 + 2.0 * i
        add(K.DATA_LOADING_START, t)
        add(K.DATA_LOADING_END, t + 0.5)
        add(K.STEP_START, t + 0.5, step=step)
    add(K.JOB_END, 48.0 + 2.0 * 25)
    if program_cost:
        out.append(Event(K.PROGRAM_COST, "job", "r1", 0, T0 + 6.5, step=0,
                         payload=COST.to_payload()))
    return out


def later():
    return T0 + 200.0


@pytest.fixture(params=[False, True], ids=["no-program-cost", "program-cost"])
def job(request, tmp_path):
    store = SQLiteStore(str(tmp_path / "g.db"))
    store.append(crashed_scenario(request.param))
    yield store, request.param
    store.close()


def test_tensorboard_tags_equal_the_calculators(job, tmp_path):
    store, with_cost = job
    tb = tmp_path / "tb"
    with make_monitor(store, tb, clock=later) as mon:
        written = mon.upload_goodput()
    calc = GoodputCalculator("job", None, store=store, clock=later)
    want = calc.get_productivity_goodput()
    _, _, last_step = calc.get_job_goodput()
    acc = load(tb)
    tags = {t for t in acc.Tags()["scalars"] if t.startswith("productivity/")}
    expected = set(PRODUCTIVITY_TAGS) - (set() if with_cost else set(PROGRAM))
    assert tags == expected  # no program cost: no program/MFU/product tag, not a 0
    for tag in expected:
        (point,) = acc.Scalars(tag)
        assert point.step == last_step
        assert point.value == pytest.approx(100 * getattr(want, PRODUCTIVITY_TAGS[tag]),
                                            rel=1e-6)
        assert written[tag] == pytest.approx(100 * getattr(want, PRODUCTIVITY_TAGS[tag]))
    # the crash's downtime (run 1's last event, step 9's start at 24.5 s, to run 2 at 46 s)
    # is not held
    assert 0.6 < want.scheduling_goodput < 0.9
    assert want.held_s == pytest.approx(want.total_s - 21.5)
    if with_cost:
        # step time 2 s against a 0.5 s compute roofline
        assert want.program_goodput == pytest.approx(0.25) and want.mfu == pytest.approx(0.25)
        prod = 1.0
        for tag in ("productivity/scheduling_goodput", "productivity/runtime_goodput",
                    "productivity/program_goodput"):
            prod *= acc.Scalars(tag)[0].value / 100
        assert 100 * prod == pytest.approx(
            acc.Scalars("productivity/ml_productivity_goodput")[0].value, rel=1e-5)
    else:
        assert math.isnan(want.program_goodput) and math.isnan(want.mfu)


def test_include_productivity_false_writes_none(tmp_path):
    store = SQLiteStore(str(tmp_path / "g.db"))
    store.append(crashed_scenario(True))
    tb = tmp_path / "tb"
    with make_monitor(store, tb, include_productivity=False) as mon:
        assert "goodput/total" in mon.upload_goodput()
    assert not [t for t in load(tb).Tags()["scalars"] if t.startswith("productivity/")]
    with pytest.raises(ValueError, match=r"include_productivity \('yes'\)"):
        make_monitor(store, tb, include_productivity="yes")
    store.close()


def test_the_uploader_thread_writes_them(tmp_path):
    """The goodput uploader's polls (and its final upload at stop) carry the tags."""
    store = SQLiteStore(str(tmp_path / "g.db"))
    store.append(crashed_scenario(True))
    tb = tmp_path / "tb"
    with make_monitor(store, tb, clock=clock) as mon:
        mon.start_goodput_uploader()
        mon.stop_goodput_uploader()
    acc = load(tb)
    pts = acc.Scalars("productivity/ml_productivity_goodput")
    assert len(pts) >= 2  # the first poll and the final upload
    want = GoodputCalculator("job", None, store=store, clock=clock).get_productivity_goodput()
    assert pts[-1].value == pytest.approx(100 * want.ml_productivity_goodput, rel=1e-6)
    store.close()


# ------------------------------------------------------------------ Cloud Monitoring
grpc = pytest.importorskip("grpc")
pytest.importorskip("google.cloud.monitoring_v3")


def _gcm_monitor(tmp_path, store, srv, clk, **kw):
    from goodput_jax import monitoring
    from tests.measure.test_monitoring_rules import OPTS

    return monitoring.GoodputMonitor(
        "job", "goodput_job", str(tmp_path / "tb"), 3600, True, include_badput_breakdown=True,
        gcp_options=OPTS, store=store, clock=clk, gcm_client=srv.client(), stop_timeout=5.0,
        **kw)


def test_cloud_monitoring_metrics_within_the_write_rules(job, tmp_path):
    """Four goodput uploads 2 s apart (on the injected clock) and the stop: every point
    accepted by the rule-enforcing server (the ones within 5 s held and merged), the last
    value of each series equal to the calculator's, under goodput_jax's own prefix."""
    from goodput_jax.measure import cloud_monitoring as cm
    from tests.measure.test_cloud_monitoring import LoopbackMetricService, SteppingClock

    store, with_cost = job
    clk = SteppingClock(start=T0 + 200.0, step=0.0)
    with LoopbackMetricService() as srv:
        mon = _gcm_monitor(tmp_path, store, srv, clk, send_productivity_metrics=True)
        for _ in range(4):
            mon.upload_goodput()
            clk.t += 2.0
        clk.step = 0.5  # time passes while the stop's flush waits for the period
        mon.close()
        exp = mon.cloud_monitoring
    assert srv.refused == [] and exp.errors == 0 and exp.dropped == 0 and exp.held == 0
    want = GoodputCalculator("job", None, store=store, clock=clk).get_productivity_goodput()
    names = set(PRODUCTIVITY_TAGS.values()) - (
        set() if with_cost else {"program_goodput", "mfu", "ml_productivity_goodput"})
    got = {k[0][len(cm.CUSTOM_PREFIX):]: pts for k, pts in srv.points.items()
           if k[0].startswith(cm.CUSTOM_PREFIX)}
    assert set(got) == names
    for name, pts in got.items():
        assert pts[-1][1] == pytest.approx(100 * getattr(want, name), rel=1e-9)
        assert all(b[0] - a[0] >= 5.0 for a, b in zip(pts, pts[1:]))
        assert len(pts) == 2  # uploads at 0, 2, 4, 6 s: sent at 0, the merged rest at >= 5
    key = next(k for k in srv.points if k[0] == cm.CUSTOM_PREFIX + "scheduling_goodput")
    assert key[2] == cm.TASK_RESOURCE_TYPE and dict(key[3])["job"] == "job"


def test_no_productivity_metric_unless_asked(tmp_path):
    """Custom metrics are created in the user's project only when asked for."""
    from goodput_jax.measure import cloud_monitoring as cm
    from tests.measure.test_cloud_monitoring import LoopbackMetricService, SteppingClock

    store = SQLiteStore(str(tmp_path / "g.db"))
    store.append(crashed_scenario(True))
    with LoopbackMetricService() as srv:
        mon = _gcm_monitor(tmp_path, store, srv, SteppingClock())
        values = mon.upload_goodput()
        mon.close()
    assert "productivity/ml_productivity_goodput" in values  # TensorBoard still has them
    sent = {k[0] for k in srv.points}
    assert not {cm.CUSTOM_PREFIX + n for n in PRODUCTIVITY_TAGS.values()} & sent
    assert "compute.googleapis.com/workload/goodput_time" in sent and not srv.refused
    store.close()
