"""Heterogeneous simulation (Sia's 64-GPU cluster): per-type traces, Sia vs unaware Pollux."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from goodput_jax.sched.sim.apps import CLUSTERS, find_sia_dir, load_typed_applications
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
    root = find_sia_dir() / "traces" / "cifar10"
    for t in SIA64:
        with open(root / f"placements-{t}.csv", newline="") as f:
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
