"""The cluster report (goodput_jax.cluster.report) on a synthetic state directory, no Ray.

The state is what the controller writes (controller.json's job records, events,
launches and rounds; cluster.json's live nodes; each job's progress log), for three
jobs on a:2, a:2, b:2: a policy move (j1), a node loss (a1, under j3) and a quiet
round. One job has a real goodput store written by the GoodputRecorder.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest

from goodput_jax.cluster.report import (
    ClusterTimeline,
    build_timeline,
    render_html,
    timeline_from_state,
    write_cluster_report,
)
from goodput_jax.cluster.spec import JobSpec
from goodput_jax.cluster.state import StateDir
from goodput_jax.measure.productivity import DevicePeak, ProgramCost

T0 = 1_750_000_000.0


def ev(t, what, **kw):
    return {"t": T0 + t, "what": what, **kw}


def launch(t, attempt, reason, alloc, kind):
    return {"t": T0 + t, "attempt": attempt, "reason": reason, "allocation": alloc,
            "devices": len(alloc), "nodes": sorted(set(alloc)), "type": kind}


def job(status, submitted, finished, events, launches, store, restarts=0):
    name = store.split("/")[-2]
    spec = JobSpec(name, "goodput_jax.cluster.examples:regression", max_replicas=4, store=store)
    return {"name": name, "spec": spec.to_json(), "status": status,
            "submitted": T0 + submitted,
            "finished": None if finished is None else T0 + finished, "restarts": restarts,
            "failures": 0, "error": None, "allocation": [], "attempt": len(launches) - 1,
            "events": events, "launches": launches}


def write_state(root) -> StateDir:
    sd = StateDir(root)
    a4 = ["a0", "a0", "a1", "a1"]
    jobs = {
        "j1": job("finished", 0, 70, [
            ev(0, "submitted"), ev(1, "launched", attempt=0, reason="allocated", allocation=a4),
            ev(10, "stop requested", to=["a0", "a0"]), ev(14, "stopped", forced=False),
            ev(14, "launched", attempt=1, reason="reallocation", allocation=["a0", "a0"]),
            ev(70, "finished")],
            [launch(1, 0, "allocated", a4, "a"), launch(14, 1, "reallocation", ["a0", "a0"], "a")],
            f"sqlite:///{root}/jobs/j1/goodput.db", restarts=1),
        "j2": job("finished", 10, 90, [
            ev(10, "submitted"),
            ev(10, "launched", attempt=0, reason="allocated", allocation=["b0", "b0"]),
            ev(90, "finished")],
            [launch(10, 0, "allocated", ["b0", "b0"], "b")], f"sqlite:///{root}/jobs/j2/goodput.db"),
        "j3": job("running", 20, None, [
            ev(20, "submitted"),
            ev(20, "launched", attempt=0, reason="allocated", allocation=["a1", "a1"]),
            ev(50, "node lost", nodes=["a1"]),
            ev(70, "launched", attempt=1, reason="resumed", allocation=["a0", "a0"])],
            [launch(20, 0, "allocated", ["a1", "a1"], "a"),
             launch(70, 1, "resumed", ["a0", "a0"], "a")],
            f"sqlite:///{root}/jobs/j3/goodput.db", restarts=1),
    }
    rounds = [
        {"t": T0 + 1, "policy": "sia", "changed": ["j1"], "allocations": {"j1": a4}},
        {"t": T0 + 10, "policy": "sia", "changed": ["j1", "j2"],
         "allocations": {"j1": ["a0", "a0"], "j2": ["b0", "b0"]}},
        {"t": T0 + 20, "policy": "sia", "changed": ["j3"],
         "allocations": {"j1": ["a0", "a0"], "j2": ["b0", "b0"], "j3": ["a1", "a1"]}},
        {"t": T0 + 51, "policy": "sia", "changed": [],
         "allocations": {"j1": ["a0", "a0"], "j2": ["b0", "b0"], "j3": []}},
        {"t": T0 + 70, "policy": "sia", "changed": ["j3"],
         "allocations": {"j2": ["b0", "b0"], "j3": ["a0", "a0"]}},
    ]
    sd.write_json(sd.controller_path, {"version": 2, "jobs": jobs, "rounds": rounds,
                                       "updated": T0 + 100})
    sd.write_json(sd.cluster_path, {"nodes": [
        {"label": "a0", "accelerator_type": "a", "devices": 2},
        {"label": "b0", "accelerator_type": "b", "devices": 2}],
        "capacity": {"a": [1, 2], "b": [1, 2]}, "updated": T0 + 50})
    progress = {"j1": [(0, 6.0), (1, 18.5), (1, 19.0)], "j3": [(0, 24.0), (1, 76.0)]}
    for name, steps in progress.items():
        import os
        os.makedirs(sd.job_dir(name), exist_ok=True)
        with open(sd.progress_path(name), "w") as fh:
            for attempt, t in steps:
                fh.write(json.dumps({"attempt": attempt, "event": "launch", "t": T0 + t - 1})
                         + "\n")
                fh.write(json.dumps({"attempt": attempt, "event": "step", "step": 1,
                                     "t": T0 + t}) + "\n")
    return sd


#: j1's step program: 1 TFLOP and 1 GB per step on a 2 TFLOP/s, 1 TB/s device, so a
#: 0.5 s compute-bound roofline against its 2 s steps (program goodput 0.25)
COST = ProgramCost("jit(step)", 1e12, 0.0, 1e9, "test chip",
                   peak=DevicePeak("test chip", 2e12, 1e12, "user"))


def write_goodput(sd: StateDir):
    """j1's real goodput store, as its two launches recorded it: the first (1-10 s, its
    allocation held) steps every 2 s from 2 s to 8 s and stops at 10 s; the second (from
    14 s) every 2 s from 16 s to 66 s and ends the job at 70 s; the step program's cost
    recorded at step 0."""
    from goodput_jax.measure.recorder import GoodputRecorder

    launches = ((1.0, range(2, 9, 2), 10.0, 0), (14.0, range(16, 67, 2), 70.0, 4))
    for run, (start, steps, stop, first) in enumerate(launches):
        rec = GoodputRecorder("j1", "goodput_j1", True, store=sd.default_store("j1"),
                              synchronous=True, run_id=f"r{run}")
        rec.record_job_start_time(T0 + start)
        for i, t in enumerate(steps):
            rec.record_step_start_time(first + i, T0 + t)
            if first + i == 0:
                rec.record_program_cost(COST, step=0, timestamp=T0 + t)
        rec.record_job_end_time(T0 + stop)
        rec.close()


def write_goodput_j3(sd: StateDir):
    """j3's store (no program cost): its first launch steps from 22 s to 48 s, the node
    is lost at 50 s, the second launch steps from 76 s; still running."""
    from goodput_jax.measure.recorder import GoodputRecorder

    for run, (start, steps) in enumerate(((20.0, range(22, 49, 2)), (70.0, range(76, 99, 2)))):
        rec = GoodputRecorder("j3", "goodput_j3", True, store=sd.default_store("j3"),
                              synchronous=True, run_id=f"r{run}")
        rec.record_job_start_time(T0 + start)
        for i, t in enumerate(steps):
            rec.record_step_start_time(i + 100 * run, T0 + t)
        rec.close()


def test_timeline_from_state(tmp_path):
    sd = write_state(tmp_path / "state")
    write_goodput(sd)
    tl = timeline_from_state(sd.root, now=T0 + 100)
    assert isinstance(tl, ClusterTimeline) and (tl.start, tl.end) == (T0, T0 + 100)
    # a1 is gone from the node table: kept, as lost
    assert [(n.label, n.accelerator_type, n.devices, n.alive) for n in tl.nodes] == [
        ("a0", "a", 2, True), ("a1", "a", 2, False), ("b0", "b", 2, True)]
    j1, j2, j3 = tl.jobs
    assert [(la.attempt, la.start - T0, la.end - T0, la.ended_by) for la in j1.launches] == [
        (0, 1.0, 14.0, "stopped"), (1, 14.0, 70.0, "finished")]
    assert j1.launches[0].allocation == ("a0", "a0", "a1", "a1")
    (r1,) = j1.restarts
    assert (r1.attempt, r1.cause, r1.requested - T0, r1.launched - T0, r1.first_step - T0,
            r1.cost) == (1, "stop requested", 10.0, 14.0, 18.5, 8.5)
    assert (j1.queued_before_start, j1.between_launches, j1.jct) == (1.0, 0.0, 70.0)
    # j3: lost its node at 50, waited, relaunched at 70, first step at 76; still running
    (r3,) = j3.restarts
    assert (r3.cause, r3.requested - T0, r3.cost) == ("node lost", 50.0, 26.0)
    assert [(la.end, la.ended_by) for la in j3.launches] == [(T0 + 50, "node lost"),
                                                            (None, None)]
    assert (j3.between_launches, j3.jct, j3.status) == (20.0, None, "running")
    assert (j2.restarts, j2.jct, j2.queued_before_start) == ((), 80.0, 0.0)
    # goodput: j1's from its store, as the calculator gives it; no store for the others
    from goodput_jax.measure.calculator import GoodputCalculator

    calc = GoodputCalculator("j1", store=sd.default_store("j1"))
    assert j1.goodput == calc.get_job_goodput()[0] and 80.0 < j1.goodput < 100.0
    calc.store.close()
    assert (j2.goodput, j3.goodput) == (None, None)
    # the policy's decisions: rounds that changed something, with the old allocation
    assert [(r.t - T0, r.changed) for r in tl.rounds] == [
        (1.0, ("j1",)), (10.0, ("j1", "j2")), (20.0, ("j3",)), (70.0, ("j3",))]
    assert tl.rounds[1].previous == {"j1": ("a0", "a0", "a1", "a1"), "j2": ()}
    assert tl.rounds[3].previous == {"j3": ()}  # the quiet round at 51 had taken it away
    assert tl.rounds_without_change == 1


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.svg = set(), None
        self.rects, self.lost, self.rounds = {}, {}, {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "svg":
            self.svg = a["id"]
            self.rects[self.svg], self.lost[self.svg], self.rounds[self.svg] = [], 0, 0
        cls = a.get("class", "")
        if tag == "rect" and cls == "launch":
            self.rects[self.svg].append(a["data-job"])
        if cls in ("node-lost", "round"):
            getattr(self, "lost" if cls == "node-lost" else "rounds")[self.svg] += 1


def test_render_html(tmp_path):
    sd = write_state(tmp_path / "state")
    out = write_cluster_report(sd.root, tmp_path / "report.html", now=T0 + 100)
    page = open(out, encoding="utf-8").read()
    p = _Page()
    p.feed(page)
    assert {"gantt", "headline", "allocation", "jobs", "restarts", "rounds", "events",
            "job-j1", "job-j2", "job-j3"} <= p.ids
    # both drawings (wide, narrow): one bar per device per launch: j1 4 + 2, j2 2, j3 2 + 2
    assert sorted(p.rects) == ["gantt", "gantt-narrow"]
    for svg in p.rects:
        assert sorted(p.rects[svg]) == ["j1"] * 6 + ["j2"] * 2 + ["j3"] * 4
        assert p.lost[svg] == 1 and p.rounds[svg] == 4
    assert "a1 (lost)" in page
    assert "2 restarts costing 34.5 s in all" in page
    assert re.search(r"j1: a0\u00d72 a1\u00d72 \u2192 a0\u00d72", page)
    assert "<script" not in page
    # bad input: one line naming the value, nothing written
    with pytest.raises(ValueError, match="holds no controller state"):
        write_cluster_report(tmp_path / "empty", tmp_path / "x.html")
    with pytest.raises(ValueError, match="does not exist"):
        write_cluster_report(sd.root, tmp_path / "nowhere" / "x.html")
    assert not (tmp_path / "x.html").exists()
    with pytest.raises(TypeError, match="ClusterTimeline"):
        render_html({}, tmp_path / "y.html")


def test_launch_end_with_a_bounded_history():
    # the 'launched' event of attempt 0 was dropped: its end is the first ending event
    # after its start, and a launch without one ends when the next began
    rec = {"status": "running", "submitted": 0.0, "events_dropped": 5,
           "events": [{"t": 30.0, "what": "crashed", "error": "boom"},
                      {"t": 31.0, "what": "launched", "attempt": 1, "reason": "retry"}],
           "launches": [{"t": 10.0, "attempt": 0, "reason": "allocated", "allocation": ["n"]},
                        {"t": 31.0, "attempt": 1, "reason": "retry", "allocation": ["n"]},
                        {"t": 40.0, "attempt": 2, "reason": "retry", "allocation": ["n"]}]}
    (j,) = build_timeline({"j": rec}, now=50.0).jobs
    assert [(la.end, la.ended_by) for la in j.launches] == [
        (30.0, "crashed"), (40.0, "relaunched"), (None, None)]
    assert [(r.cause, r.requested) for r in j.restarts] == [("crashed", 30.0), ("retry", 40.0)]
    assert j.events_dropped == 5
    with pytest.raises(ValueError, match="job 'j': submitted must be a finite time"):
        build_timeline({"j": dict(rec, submitted="soon")})


def test_productivity_per_job(tmp_path):
    """Each job's three factors and their product: scheduling goodput from the cluster's
    own timeline of the job (by hand below), runtime and program goodput from its store
    through the calculator's public methods."""
    import math

    from goodput_jax.cluster.record import read_state, scheduling_timeline
    from goodput_jax.measure.calculator import GoodputCalculator

    sd = write_state(tmp_path / "state")
    write_goodput(sd)
    write_goodput_j3(sd)
    tl = timeline_from_state(sd.root, now=T0 + 100)
    j1, j2, j3 = tl.jobs
    # j1: queued 0-1, running 1-10, stopping 10-14 (a reallocation), running 14-70
    p1 = j1.productivity
    assert p1.scheduling_source == "timeline"
    assert p1.scheduling_goodput == pytest.approx(((10 - 1) + (70 - 14)) / 70)
    assert (p1.held_s, p1.total_s) == (pytest.approx(65.0), pytest.approx(70.0))
    # j3: running 20-50, node lost at 50 (relaunching) to 70, running 70-100 (the end)
    p3 = j3.productivity
    assert p3.scheduling_goodput == pytest.approx(((50 - 20) + (100 - 70)) / 80)
    assert j2.productivity is None  # no store
    # productive step time by hand: j1 steps 2-8 s (the last one closed by the stop at 10)
    # and 16-66 s (closed by the end at 70); j3 13 steps 22-48 s, 11 steps 76-98 s (each
    # launch's last step still open)
    assert (p1.productive_s, p3.productive_s) == (pytest.approx(8 + 54), pytest.approx(48))
    # a running job is measured to the report's end, not to the wall clock
    assert j3.goodput == pytest.approx(100 * 48 / 80)
    for p in (p1, p3):
        assert p.runtime_goodput == pytest.approx(p.productive_s / p.held_s)
        assert p.ettr == pytest.approx(p.productive_s / p.total_s)
    # the factors multiply to the product; j1's program: 0.5 s roofline / 2 s steps
    assert p1.program_goodput == pytest.approx(0.25) and p1.mfu == pytest.approx(0.25)
    assert p1.ml_productivity_goodput == pytest.approx(
        p1.scheduling_goodput * p1.runtime_goodput * p1.program_goodput, rel=1e-12)
    assert 0 < p1.ml_productivity_goodput < p1.scheduling_goodput
    # j3 recorded no program cost: no program goodput, no MFU, no product
    assert math.isnan(p3.program_goodput) and math.isnan(p3.ml_productivity_goodput)
    # the same as the calculator's, given the cluster's timeline of the job
    state = read_state(sd.root)
    calc = GoodputCalculator("j1", store=sd.default_store("j1"))
    want = calc.get_productivity_goodput(scheduling_timeline(state.jobs["j1"], now=T0 + 100),
                                         now=T0 + 100)
    calc.store.close()
    assert p1.as_dict() == want.as_dict()
    # the page: one row per job, the product in bold, the reason when a figure is missing
    out = render_html(tl, tmp_path / "report.html")
    page = open(out, encoding="utf-8").read()
    row = re.search(r"<tr id='productivity-j1'>(.*?)</tr>", page).group(1)
    cells = dict(re.findall(r"<td class='(sched|runtime|program|product)'[^>]*>(?:<b>)?([^<]*)", row))
    assert cells == {"sched": f"{100 * p1.scheduling_goodput:.1f}",
                     "runtime": f"{100 * p1.runtime_goodput:.1f}", "program": "25.0",
                     "product": f"{100 * p1.ml_productivity_goodput:.1f}"}
    assert "no goodput store" in re.search(r"<tr id='productivity-j2'>(.*?)</tr>", page).group(1)
    assert "no program cost recorded" in re.search(r"<tr id='productivity-j3'>(.*?)</tr>",
                                                   page).group(1)
    with pytest.raises(TypeError, match=r"productivity\['j'\]"):
        build_timeline({"j": {"submitted": 0.0}}, productivity={"j": 0.5})


def test_nodes_over_the_run_titles_and_tables_that_reflow(tmp_path):
    """Fails on the old page: its headline counted only the nodes live at the end ("on 2
    nodes (4 devices)" beside a chart of 3), the lost node had no "type · devices" line,
    the title was the state directory's name, and the tables had no narrow layout."""
    sd = write_state(tmp_path / "state")
    cluster = sd.read_json(sd.cluster_path)
    # what the controller saw over the run: a1 (4 devices) was lost at 50 s
    cluster["nodes_seen"] = cluster["nodes"] + [
        {"label": "a1", "accelerator_type": "a", "devices": 4}]
    sd.write_json(sd.cluster_path, cluster)
    out = write_cluster_report(sd.root, tmp_path / "report.html", now=T0 + 100)
    page = open(out, encoding="utf-8").read()
    assert "on 3 nodes (8 devices; 1 lost during the run, 2 at its end)" in page
    kinds = re.findall(r'<text class="node-kind"[^>]*>([^<]*)</text>', page)
    # each node once per drawing (wide and narrow), the lost one with its own devices
    assert sorted(kinds) == sorted(["a \u00b7 2 dev", "a \u00b7 4 dev", "b \u00b7 2 dev"] * 2)
    assert "<title>Cluster report: j1, j2, j3</title>" in page
    assert f"records from {sd.root}" in page
    for cls in ("jobs", "productivity", "restarts", "rounds"):
        table = re.search(rf"<table class='{cls} reflow'>.*?</table>", page, re.S).group(0)
        heads = re.findall(r"<th[^>]*>([^<]*)</th>", table)
        cells = re.findall(r"<td[^>]*data-label='([^']*)'", table)
        assert cells and set(cells) <= set(heads), cls
    assert "table.reflow td::before { content: attr(data-label)" in page
    # without nodes_seen, a lost node still counts, with the devices its launches used
    from goodput_jax.cluster.report import timeline_from_state

    del cluster["nodes_seen"]
    sd.write_json(sd.cluster_path, cluster)
    tl = timeline_from_state(sd.root, now=T0 + 100, goodput=False)
    assert [(n.label, n.alive) for n in tl.nodes] == [("a0", True), ("a1", False), ("b0", True)]


def test_checkpoint_intervals_per_job(tmp_path):
    """Each job's interval, the advice at the cluster's MTBF over its nodes and the goodput
    predicted at each (issue 45: the report showed none of them)."""
    from goodput_jax.cluster.checkpointing import reliability_path
    from goodput_jax.cluster.report import timeline_from_state
    from goodput_jax.measure.advice import checkpoint_advice
    from goodput_jax.measure.recorder import GoodputRecorder

    sd = write_state(tmp_path / "state")
    # j1: 1 s steps, a 2 s save every 10 steps (completed), one run
    rec = GoodputRecorder("j1", "goodput_j1", True, store=sd.default_store("j1"),
                          synchronous=True, run_id="r0")
    t = T0 + 1.0
    rec.record_job_start_time(t)
    for step in range(40):
        rec.record_step_start_time(step, t)
        t += 1.0
        if (step + 1) % 10 == 0:
            rec.record_checkpoint_save_start_time(step + 1, t)
            t += 2.0
            rec.record_checkpoint_save_end_time(step + 1, t)
    rec.record_job_end_time(t)
    rec.close()
    sd.write_json(reliability_path(sd.root), {"node_seconds": 0.0, "losses": 0,
                                              "prior_s": 3600.0, "given_s": None})
    with open(sd.progress_path("j3"), "a") as fh:  # j3 saves by the advice
        fh.write(json.dumps({"attempt": 1, "event": "checkpoint advice", "step": 80,
                             "interval_steps": 37, "t": T0 + 90}) + "\n")
    tl = timeline_from_state(sd.root, now=T0 + 100)
    j1, j2, j3 = tl.jobs
    # j1's last launch held a0 twice: one node; the book's node MTBF is its prior, 3600 s
    want = checkpoint_advice(2.0, 3600.0, 1.0, restart_s=0.0, current_interval_steps=10,
                             mtbf_source="given")
    a = j1.checkpoints
    assert (a.save_cost_s, a.mtbf_s, a.current_interval_steps) == (2.0, 3600.0, 10)
    assert a.interval_steps == want.interval_steps
    assert a.predicted_goodput == pytest.approx(want.predicted_goodput)
    assert a.current_predicted_goodput == pytest.approx(want.current_predicted_goodput)
    assert j1.acted_on is None and j3.acted_on["interval_steps"] == 37
    page = open(render_html(tl, tmp_path / "r.html"), encoding="utf-8").read()
    row = re.search(r"<tr id='checkpoints-j1'>.*?</tr>", page).group(0)
    cells = re.findall(r"data-label='[^']*'>(?:<span>.*?</span>)?([^<]*)</td>", row)
    assert cells[1:5] == ["its own interval", "10", f"{want.interval_steps}",
                          f"{100 * want.current_predicted_goodput:.1f}"], cells
    row3 = re.search(r"<tr id='checkpoints-j3'>.*?</tr>", page).group(0)
    assert "the advice (ctx.should_checkpoint)" in row3 and ">37<" in row3
