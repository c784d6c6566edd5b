"""Checkpoints at the interval goodput asks for (issue 45 item 2): ``ctx.should_checkpoint``.

A job runs on a virtual clock (1 s steps, 10 s saves, 5 s restarts) with node losses
arriving as a Poisson process at a known rate; each loss ends the launch (its process
and its :class:`CheckpointTimer` with it) and the next launch resumes from the last
save. Following the timer it reaches a higher goodput than a fixed interval that saves
too often (every 20 steps, the docs' former example: less work redone, but a third of
the time spent saving) or too rarely (every 2000 steps: more work redone), and its
goodput is within 2 pp of what :func:`goodput_jax.measure.advice.expected_goodput`
predicts for the advised interval.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from goodput_jax.cluster.checkpointing import CheckpointTimer, NodeLossBook
from goodput_jax.cluster.context import JobContext, reset_stopped
from goodput_jax.cluster.controller import Controller
from goodput_jax.cluster.plan import NodeRecord
from goodput_jax.cluster.spec import JobSpec
from goodput_jax.measure.advice import daly_interval, expected_goodput

STEP, SAVE, RESTART, MTBF = 1.0, 10.0, 5.0, 3600.0


def _run(policy, work_steps: int, seed: int) -> dict:
    """Wall time, kept steps and lost steps of one job under ``policy``: ``"advised"``
    (a CheckpointTimer per launch) or an int (save every that many steps)."""
    rng = random.Random(seed)
    t = [0.0]
    fail = rng.expovariate(1 / MTBF)
    saved = step = lost = 0

    def advance(dt: float) -> bool:
        """Spend ``dt`` seconds; False: a node loss came first (at its time)."""
        if t[0] + dt >= fail:
            t[0] = fail
            return False
        t[0] += dt
        return True

    def new_timer():
        return CheckpointTimer(nodes=1, mtbf_s=MTBF, clock=lambda: t[0]) \
            if policy == "advised" else None

    timer = new_timer()
    while saved < work_steps:
        due = timer.should_checkpoint(step) if timer is not None else \
            step > saved and step % policy == 0
        ok = (not due or advance(SAVE)) and advance(STEP)
        if ok:
            if due:
                saved = step
            step += 1
            continue
        lost += step - saved  # back to the last save, after a restart
        step = saved
        fail = t[0] + RESTART + rng.expovariate(1 / MTBF)
        t[0] += RESTART
        timer = new_timer()
    return {"wall": t[0], "kept": saved, "lost": lost, "goodput": saved * STEP / t[0]}


def test_the_advised_interval_beats_a_fixed_one_and_meets_its_prediction():
    work = 200_000
    advised = _run("advised", work, seed=1)
    often, rarely = _run(20, work, seed=1), _run(2000, work, seed=1)
    interval = daly_interval(SAVE, MTBF)
    predicted = expected_goodput(interval, SAVE, MTBF, RESTART)
    # every 20 steps (the docs' former example) spends a third of the time saving; every
    # 2000 steps redoes much more work after each loss; the advice (~262 steps) does best
    assert advised["goodput"] > often["goodput"] + 0.2, (advised, often)
    assert advised["goodput"] > rarely["goodput"] + 0.02, (advised, rarely)
    assert advised["lost"] < rarely["lost"] / 3, (advised, rarely)
    badput = {k: r["wall"] - r["kept"] * STEP for k, r in
              (("advised", advised), ("often", often), ("rarely", rarely))}
    assert badput["advised"] < min(badput["often"], badput["rarely"]), badput
    assert abs(advised["goodput"] - predicted) < 0.02, (advised["goodput"], predicted)
    # and the fixed intervals' own predictions hold too (the simulation is sound)
    for every, run in ((20, often), (2000, rarely)):
        assert abs(run["goodput"] - expected_goodput(every * STEP, SAVE, MTBF, RESTART)) < 0.02


def test_the_timer_measures_the_save_cost_and_follows_the_cluster(tmp_path):
    t = [0.0]
    path = tmp_path / "reliability.json"
    path.write_text(json.dumps(NodeLossBook(node_seconds=7200.0, losses=1,
                                            prior_s=0.0).to_json()))
    timer = CheckpointTimer(nodes=2, reliability_path=str(path), clock=lambda: t[0])
    assert timer.mtbf_s() == 7200.0 / 2 / 2  # node time per loss, over the launch's nodes
    for step in range(2000):
        t[0] += 0.5
        if timer.should_checkpoint(step):
            t[0] += 4.0
    assert timer.save_cost_s == pytest.approx(4.0) and timer.step_time_s() == 0.5
    assert timer.interval_s() == pytest.approx(daly_interval(4.0, 1800.0))
    advice = timer.advice()
    assert advice.interval_steps == round(daly_interval(4.0, 1800.0) / 0.5)
    assert advice.mtbf_source == "observed" and 0 < advice.predicted_goodput < 1
    # more losses seen: the interval shortens (the file is re-read every 30 s)
    path.write_text(json.dumps(NodeLossBook(node_seconds=7200.0, losses=7,
                                            prior_s=0.0).to_json()))
    t[0] += 31.0
    assert timer.mtbf_s() == 7200.0 / 8 / 2
    with pytest.raises(ValueError, match=r"^mtbf_s \(0\) must be > 0 seconds$"):
        CheckpointTimer(mtbf_s=0)


def test_the_job_context_offers_it_once_per_process(tmp_path):
    progress = tmp_path / "progress.jsonl"
    ctx = JobContext(job="j", attempt=0, rank=0, num_processes=3, coordinator=None,
                     local_devices=1, accelerator_type="a", nodes=("n0", "n1", "n2"),
                     checkpoint_dir="", store="", stop_path="", progress_path=str(progress))
    reset_stopped()
    timer = ctx.checkpoint_timer()
    assert ctx.checkpoint_timer() is timer and timer.nodes == 3
    t = [0.0]
    timer.clock, timer.given_mtbf_s = (lambda: t[0]), 600.0
    assert ctx.should_checkpoint(0) is False  # nothing worked yet
    due = []
    for step in range(1, 200):
        t[0] += 1.0
        if ctx.should_checkpoint(step):
            due.append(step)
    assert due  # the advice, for the cluster report, in the progress log at each
    records = [json.loads(ln) for ln in progress.read_text().splitlines()]
    assert [r["step"] for r in records] == due
    assert records[0]["event"] == "checkpoint advice" and records[0]["mtbf_s"] == 600.0
    assert 0 < records[0]["predicted_goodput"] < 1 and records[0]["interval_steps"] >= 1
    reset_stopped()  # a new launch in this process: a new timer, from the cost measured
    again = ctx.checkpoint_timer()
    assert again is not timer and again.save_cost_s == records[-1]["save_cost_s"]


class _Launcher:
    def launch(self, spec, groups, contexts, log_paths):
        self.contexts = contexts
        return spec.name

    def attach(self, name, attempt, ranks):
        return None

    def poll(self, handle):
        return None

    def kill(self, handle):
        pass

    def release(self, handle):
        pass

    def log_tail(self, handle, rank):
        return None

    def warm(self, nodes):
        pass


def test_the_controller_counts_node_losses_for_the_jobs(tmp_path):
    """A node that leaves while a job holds it is a loss in ``reliability.json``; the
    launches are told where to read it."""
    t = [1000.0]
    live = [NodeRecord("n0", "a", 2), NodeRecord("n1", "a", 2)]
    launcher = _Launcher()
    ctl = Controller(str(tmp_path), policy="sia", launcher=launcher, nodes=lambda: list(live),
                     clock=lambda: t[0], probe=None)
    ctl.submit(JobSpec("j", "goodput_jax.cluster.examples:regression", min_replicas=4,
                       max_replicas=4))
    ctl.tick()
    assert ctl.jobs["j"].status.value == "running"
    assert launcher.contexts[0]["reliability_path"] == ctl.book.reliability_path
    t[0] += 100.0
    ctl.tick()
    live.pop()  # n1 is lost under the running job
    t[0] += 100.0
    ctl.tick()
    data = json.loads(Path(ctl.book.reliability_path).read_text())
    assert data["losses"] == 1 and data["node_seconds"] == 400.0
    assert data["node_mtbf_s"] == pytest.approx((400.0 + 86400.0) / 2)
    # the operator's node MTBF stands instead
    again = Controller(str(tmp_path), policy="sia", nodes=lambda: list(live),
                       clock=lambda: t[0], probe=None, node_mtbf=5000.0)
    again.tick()
    assert json.loads(Path(ctl.book.reliability_path).read_text())["node_mtbf_s"] == 5000.0


def test_the_example_job_checkpoints_when_asked(tmp_path):
    """``examples:regression --ckpt-every 0`` saves when ``ctx.should_checkpoint`` says
    so (here a node MTBF of 20 s: saves every few seconds of work), run by the runtime's
    own runner in a real process (no Ray)."""
    import os
    import subprocess
    import sys

    rel = tmp_path / "reliability.json"
    rel.write_text(json.dumps(NodeLossBook(given_s=20.0).to_json()))
    ctx = JobContext(job="ex", attempt=0, rank=0, num_processes=1, coordinator=None,
                     local_devices=1, accelerator_type="a", nodes=("n0",),
                     checkpoint_dir=str(tmp_path / "ckpt"),
                     store=f"sqlite:///{tmp_path / 'goodput.db'}",
                     stop_path=str(tmp_path / "stop"),
                     progress_path=str(tmp_path / "progress.jsonl"),
                     args=("--steps", "120", "--ckpt-every", "0", "--step-sleep", "0.05"),
                     hooks={"init_batch_size": 32}, reliability_path=str(rel))
    run = ("import json, sys; from goodput_jax.cluster.runner import run_replica; "
           "run_replica(json.loads(sys.argv[1]), sys.argv[2], sys.argv[3])")
    log = tmp_path / "log.txt"
    proc = subprocess.run([sys.executable, "-c", run, json.dumps(ctx.to_json()),
                           "goodput_jax.cluster.examples:regression", str(log)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"}, cwd=tmp_path,
                          check=False)
    assert proc.returncode == 0, log.read_text()[-3000:] + proc.stderr[-2000:]
    records = [json.loads(ln) for ln in (tmp_path / "progress.jsonl").read_text().splitlines()]
    advice = [r for r in records if r["event"] == "checkpoint advice"]
    assert advice and all(r["mtbf_s"] == 20.0 for r in advice), records[-3:]
    saves = [r for r in records if r["event"] == "save"]
    assert len(saves) >= len(advice) >= 1


def _ckpt_bench():
    """``benchmarks/ckpt_bench.py`` (``cluster_bench.py --checkpoints``'s accounting)."""
    import importlib.util
    import sys

    if "ckpt_bench" not in sys.modules:  # its dataclasses look their module up there
        path = Path(__file__).resolve().parents[2] / "benchmarks" / "ckpt_bench.py"
        spec = importlib.util.spec_from_file_location("ckpt_bench", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["ckpt_bench"] = module
        spec.loader.exec_module(module)
    return sys.modules["ckpt_bench"]


def _rec(attempt: int, t: float, event: str, step: int, **kw) -> dict:
    return {"attempt": attempt, "t": t, "event": event, "step": step, **kw}


def test_the_benchmark_books_a_window_by_hand():
    """A progress log built by hand (1 s steps, a 0.5 s save every 4 steps, 3 s restarts):
    launch 0 is killed at 11.5 s in step 10 (and, cut off, still logs that step at 12 s);
    launch 1 is killed at 13 s during its restart, after its launch record and before a
    step; launch 2 steps from 16 s. The old accounting counted the steps back to the
    checkpoint once per relaunch (launch 1's too) and took the cut-off launch's record as
    work: 6 steps redone instead of 2."""
    prog = [_rec(0, 0.0, "launch", 0)]
    t = 0.0
    for s in range(10):  # steps 0-9, saves after steps 3 and 7 (at steps 4 and 8)
        t += 1.0
        prog.append(_rec(0, t, "step", s))
        if (s + 1) % 4 == 0:
            t += 0.5
            prog.append(_rec(0, t, "save", s + 1, reason="periodic", seconds=0.5))
    prog.append(_rec(0, 12.0, "step", 10))  # after its node was killed (11.5 s)
    prog.append(_rec(1, 12.8, "launch", 8))  # killed at 13 s before its first step
    prog.append(_rec(2, 16.0, "launch", 8))
    t = 16.0
    for s in range(8, 21):
        t += 1.0
        prog.append(_rec(2, t, "step", s))
        if (s + 1) % 4 == 0:
            t += 0.5
            prog.append(_rec(2, t, "save", s + 1, reason="periodic", seconds=0.5))
    res = _ckpt_bench().ckpt_stats(prog, [(11.5, 0), (13.0, 1)], 0.0, 30.0, mtbf=15.0)
    assert res["after_kill_records"] == 1
    assert (res["losses"], res["redone_steps"], res["kept_steps"]) == (2, 2, 20)
    assert res["step_s"] == pytest.approx(1.0) and res["interval_steps"] == pytest.approx(4)
    assert res["saves"] == 5 and res["save_cost_s"] == pytest.approx(0.5)
    # restarts: 11.5 -> 13 (cut by the next loss), 13 -> 16 (whole: its mean, 3 s)
    assert res["restart_total_s"] == pytest.approx(4.5) and res["restart_s"] == pytest.approx(3)
    # 20 s kept + 2 s redone + 2.5 s saving + 4.5 s restarting + 1 s other (the half step
    # the first loss cut, the half step running at the window's end) = the 30 s window
    assert (res["redone_s"], res["save_total_s"]) == pytest.approx((2.0, 2.5))
    assert res["other_s"] == pytest.approx(1.0)
    assert res["goodput"] == pytest.approx(20 / 30)
    assert res["predicted"] == pytest.approx(expected_goodput(4.0, 0.5, 15.0, 3.0))


def test_the_benchmark_injects_exactly_the_expected_losses():
    bench = _ckpt_bench()
    for n, mtbf in ((5, 40.0), (6, 40.0), (10, 20.0)):
        times = bench.loss_offsets(n, mtbf, seed=0)
        assert len(times) == n and times == sorted(times) and times[-1] < n * mtbf
        gaps = sorted(b - a for a, b in zip([0.0, *times], times))
        # the exponential's quantiles at (i + 1/2) / n: a mean close to the MTBF
        assert gaps[0] == pytest.approx(-mtbf * math.log1p(-0.5 / n))
        assert 0.9 * mtbf < sum(gaps) / n < mtbf
        assert bench.loss_offsets(n, mtbf, seed=0) == times  # one seed, one sequence
    with pytest.raises(ValueError, match=r"^losses \(0\) must be >= 1$"):
        bench.Regime(name="x", label="", step_sleep=0.0, node_mtbf=1.0, losses=0)


def test_the_advice_predicts_with_the_restart_cost(tmp_path):
    """A loss costs its restart besides the work it loses: the advice's predicted goodput
    takes the restarts measured (0 s before one), carried to the next launch with the save
    cost; a launch that follows a stop on request (a move) measures none."""
    from goodput_jax.cluster.checkpointing import restart_seconds

    timer = CheckpointTimer(nodes=1, mtbf_s=40.0, clock=lambda: 0.0)
    timer.carry_save_cost({"save_cost_s": 0.2})
    assert timer.advice().predicted_goodput == pytest.approx(
        expected_goodput(timer.advice().interval_s, 0.2, 40.0, 0.0))
    timer.observe_restart(10.0)
    timer.observe_restart(20.0)
    advice = timer.advice()
    assert (timer.restart_s, advice.restart_s) == (15.0, 15.0)
    assert advice.predicted_goodput == pytest.approx(
        expected_goodput(advice.interval_s, 0.2, 40.0, 15.0))
    again = CheckpointTimer(nodes=1, mtbf_s=40.0)
    again.carry_save_cost({"save_cost_s": 0.2, "restart_s": 15.0, "restarts": 2})
    assert (again.restart_s, again.restarts) == (15.0, 2)
    with pytest.raises(ValueError, match=r"^seconds \(-1\.0\) must be a finite number >= 0$"):
        again.observe_restart(-1.0)
    log = tmp_path / "progress.jsonl"
    rows = [{"attempt": 0, "t": 100.0, "event": "step", "step": 9},
            {"attempt": 1, "t": 111.0, "event": "launch", "step": 0},
            {"attempt": 1, "t": 112.0, "event": "step", "step": 0}]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert restart_seconds(str(log), 1, now=112.0) == 12.0
    assert restart_seconds(str(log), 0, now=112.0) is None  # the first launch
    rows.insert(1, {"attempt": 0, "t": 101.0, "event": "stopped", "step": 10})
    log.write_text("garbage\n" + "".join(json.dumps(r) + "\n" for r in rows))
    assert restart_seconds(str(log), 1, now=112.0) is None  # a move, not a loss
    assert restart_seconds(str(tmp_path / "none.jsonl"), 1, now=1.0) is None


def test_a_relaunch_after_a_loss_measures_its_restart(tmp_path):
    """The job context's timer of a launch after a loss takes that restart (from the lost
    launch's last record to now) into its advice, which the progress log then carries
    (``restart_s``, ``restarts``); a first launch and a launch after a stop measure none."""
    import time as _time

    progress = tmp_path / "progress.jsonl"
    t_lost = _time.time() - 7.0  # the lost launch's last record, 7 s ago
    progress.write_text(json.dumps({"attempt": 0, "t": t_lost, "event": "step", "step": 5})
                        + "\n")

    def ctx(attempt):
        return JobContext(job="j", attempt=attempt, rank=0, num_processes=1,
                          coordinator=None, local_devices=1, accelerator_type="a",
                          nodes=("n0",), checkpoint_dir="", store="", stop_path="",
                          progress_path=str(progress))

    reset_stopped()
    first = ctx(0).checkpoint_timer()
    assert first.restarts == 0
    reset_stopped()
    c = ctx(1)
    timer = c.checkpoint_timer()
    assert timer.restarts == 1 and 7.0 <= timer.restart_s < 7.0 + 60.0
    t = [0.0]
    timer.clock, timer.given_mtbf_s = (lambda: t[0]), 600.0
    c.should_checkpoint(0)
    for step in range(1, 400):
        t[0] += 1.0
        if c.should_checkpoint(step):
            break
    else:
        raise AssertionError("no save asked for in 400 s of work")
    advice = [json.loads(ln) for ln in progress.read_text().splitlines()][-1]
    assert advice["event"] == "checkpoint advice" and advice["restarts"] == 1
    assert advice["restart_s"] == pytest.approx(timer.restart_s)
    assert advice["predicted_goodput"] == pytest.approx(
        expected_goodput(advice["interval_s"], advice["save_cost_s"], 600.0,
                         timer.restart_s), rel=1e-6)
    with progress.open("a") as fh:  # a move: the launch before stopped on request
        fh.write(json.dumps({"attempt": 1, "t": _time.time(), "event": "stopped"}) + "\n")
    reset_stopped()
    moved = ctx(2).checkpoint_timer()
    assert moved.restarts == 1  # the carried count, no new restart measured
    reset_stopped()
