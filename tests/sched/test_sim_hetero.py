"""Heterogeneous simulation (Sia's 64-GPU cluster): per-type traces, Sia vs unaware Pollux."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from goodput_jax.sched.sim.apps import (
    CLUSTERS,
    find_sia_dir,
    load_typed_applications,
    sia_trace_file,
)
from goodput_jax.sched.sim.cluster import cluster_nodes, load_workload, make_jobs, simulate
from goodput_jax.sched.sim.runner import find_sia_workload

SIA64 = CLUSTERS["sia-64"]
SHORT = {"cifar10": {"max_epochs": 4}, "imagenet": {"max_epochs": 2},
         "deepspeech2": {"max_epochs": 3}, "yolov3": {"max_epochs": 3},
         "ncf": {"max_epochs": 2}, "bert": {"max_epochs": 1}}


@pytest.fixture(scope="module")
def typed_apps():
    return load_typed_applications(list(SIA64), settings=SHORT)


def test_cluster_and_workload_names():
    gpus, types = cluster_nodes(SIA64)
    assert sum(gpus.values()) == 64 and len(gpus) == 11
    assert [types[i] for i in (0, 5, 6, 9, 10)] == ["aws", "aws", "rtx", "dgx-ext", "dgx-ext"]
    assert sum(g for g in cluster_nodes(CLUSTERS["sia-2048"])[0].values()) == 2048
    assert find_sia_workload("philly/3").parent.name == "philly"
    assert find_sia_workload("helios/2").parent.name == "saturn"
    assert len(load_workload(find_sia_workload("scale_2x"))) == 320
    with pytest.raises(FileNotFoundError, match="philly/N"):
        find_sia_workload("nope/1")


def test_per_type_step_times_come_from_that_types_trace(typed_apps):
    for t in SIA64:
        with open(sia_trace_file("cifar10", "placements", t), newline="") as f:
            row = next(r for r in csv.DictReader(f) if r["placement"] == "1")
        step, _ = typed_apps["cifar10"][t].get_throughput((1,), float(row["local_bsz"]))
        assert step == pytest.approx(float(row["step_time"]))
    assert typed_apps["deepspeech2"]["rtx"].max_local_bsz == 57
    assert typed_apps["yolov3"]["dgx-ext"].max_local_bsz > typed_apps["yolov3"]["rtx"].max_local_bsz


def test_sia_smoke_run(typed_apps, tmp_path):
    from goodput_jax.sched.sim.sia_adapter import SiaAdapter, SiaModel

    rows = load_workload(find_sia_workload("philly/1"), max_jobs=6)
    jobs = make_jobs(rows, typed_apps, "sia")
    model = SiaModel(SIA64)
    res = simulate(jobs, SiaAdapter(model, SIA64), model=model, cluster=SIA64,
                   log_path=tmp_path / "s.jsonl")
    assert not res.unfinished and len(res.jcts) == 6
    assert res.total_gpus == 64 and len(res.round_times) > 0
    assert res.round_median <= res.round_p95
    # Every job ran on one type at a time, and somebody ran on the A100s.
    seen = set()
    for line in (tmp_path / "s.jsonl").read_text().splitlines():
        for name, rec in json.loads(line)["jobs"].items():
            if rec["gpus"]:
                seen.add(rec["type"])
    assert "dgx-ext" in seen
    # Per-type fits where a job ran; elsewhere Sia's bootstrap (1-GPU throughput ratio).
    job = max(jobs, key=lambda j: max((k[1] for k in j.profile), default=0))
    reps = {t: max(k[1] for k in prof) for t, prof in job.profile_by_type.items() if prof}
    ref = max(sorted(job.perf_by_type), key=lambda t: (reps[t], len(job.profile_by_type[t])))
    thr = model.min_throughput(job)
    for t in SIA64:
        p = model.perf_for(job, t)
        assert p is not None and len(p) == 7
        if t == ref:
            assert p == job.perf_by_type[t]
        else:  # network terms scaled from the reference type by the throughput ratio
            src = job.perf_by_type[ref]
            for a, b in zip(p[2:6], src[2:6]):
                assert a == pytest.approx(b * thr[ref] / thr[t], rel=1e-6, abs=1e-12)
            if t not in job.perf_by_type:
                assert p[0] == pytest.approx(src[0] * thr[ref] / thr[t], rel=1e-6)


def test_cli_side_by_side(tmp_path, capsys):
    from goodput_jax.sched.sim.cli import add_arguments, main
    import argparse

    args = add_arguments(argparse.ArgumentParser()).parse_args(
        ["philly/1", "--cluster", "sia-64", "--policy", "sia", "--max-jobs", "3", "--out",
         str(tmp_path), "--no-progress"])
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "| sia-64-philly-workload-1 | sia |" in out and "round median" in out
    assert (tmp_path / "sia-64-philly-workload-1-sia.png").stat().st_size > 10_000
    with pytest.raises(ValueError, match="--cluster"):
        main(add_arguments(argparse.ArgumentParser()).parse_args(["6", "--policy", "sia"]))


def test_calibrated_jobs_follow_the_sia_artifacts_simulator(typed_apps):
    rows = load_workload(find_sia_workload("philly/1"), max_jobs=3)
    cal = {j.app.name: j for j in make_jobs(rows, typed_apps, "pollux")}
    raw = {j.app.name: j for j in make_jobs(rows, typed_apps, "pollux", calibrated=False)}
    assert (cal["cifar10"].restart_delay, cal["cifar10"].slowdown) == (50.0, 1.8)
    assert (raw["cifar10"].restart_delay, raw["cifar10"].slowdown) == (30.0, 1.0)
    # Same placement, same configuration: the calibrated job advances 1 / 1.8 as far.
    a, b = cal["cifar10"], raw["cifar10"]
    for job in (a, b):
        job.accel_type = "aws"
        job.reallocate([0, 0])
        job.rescale_time = 0.0
        job.advance(10.0, 0.0)
    assert a.progress == pytest.approx(b.progress / 1.8, rel=1e-9)
    assert a.profile == b.profile  # the models see the traces' step times, not the slowdown


def test_unaware_pollux_sees_virtual_nodes_and_the_artifacts_caps(typed_apps):
    from goodput_jax.sched.sim.pollux_adapter import PolluxModel, UnawarePolluxAdapter

    a = UnawarePolluxAdapter(PolluxModel("aws"), SIA64)
    assert a.vnodes == {v: 4 for v in range(16)}
    # 6 T4 nodes, then each 8-GPU node is two virtual nodes.
    assert [a.vnode_real[v] for v in range(16)] == [0, 1, 2, 3, 4, 5, 6, 6, 7, 7, 8, 8,
                                                    9, 9, 10, 10]
    assert a.cap == 16 and UnawarePolluxAdapter(PolluxModel(), CLUSTERS["sia-512"]).cap == 16
    rows = load_workload(find_sia_workload("philly/1"), max_jobs=12)
    jobs = {j.app.name: j for j in make_jobs(rows, typed_apps, "pollux")}
    job = jobs["cifar10"]
    assert a.max_replicas(job) == 1
    job.profile[(1, 8, 128)] = (0.1, 0.05)
    aws = typed_apps["cifar10"]["aws"]
    assert a.max_replicas(job) == min(16, aws.max_batch_size // aws.min_local_bsz)
    # Mixed types: the most represented type stays; on a tie the faster one.
    assert a._keep_one_type([0, 0, 12, 12, 12]) == [12, 12, 12]
    assert a._keep_one_type([1, 1, 6, 6]) == [6, 6]
    assert a._keep_one_type([6, 7, 7]) == [6, 7, 7]
    # Previous real allocations map back onto the virtual nodes chosen last round.
    a._valloc = {"x": [7, 7]}
    prev = a._virtual_prev({"x": [6, 6], "y": [6, 6, 6, 6, 6, 0]})
    assert prev["x"] == [7, 7] and sorted(prev["y"]) == [0, 6, 6, 6, 6, 7]


def test_unaware_pollux_smoke_run(typed_apps, tmp_path):
    from goodput_jax.sched.sim.pollux_adapter import PolluxModel, UnawarePolluxAdapter

    seen = []

    class Recording(UnawarePolluxAdapter):
        def optimize(self, *args):
            out = super().optimize(*args)
            seen.append(out)
            return out

    rows = load_workload(find_sia_workload("philly/1"), max_jobs=4)
    model = PolluxModel("aws")
    jobs = make_jobs(rows, typed_apps, "pollux")
    res = simulate(jobs, Recording(model, SIA64), model=model, cluster=SIA64)
    assert not res.unfinished and len(res.jcts) == 4
    _, types = cluster_nodes(SIA64)
    allocs = [a for out in seen for a in out.values()]
    assert allocs and max(len(a) for a in allocs) <= 16
    assert all(len({types[n] for n in a}) == 1 for a in allocs)
