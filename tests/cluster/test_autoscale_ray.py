"""Autoscaling on Ray's stock ``AutoscalingCluster`` (issue 45 item 1), in the sandbox.

One driver process (``tests/cluster/_autoscale_driver.py``) starts Ray's own
``ray.cluster_utils.AutoscalingCluster`` (its fake multi-node provider, every node of
the one worker type with the same resources: 2 devices of type ``a``, 1 to 3 nodes)
inside the loopback-only network and PID namespace, where the ``ray stop --force`` of
its ``start`` and ``shutdown`` sees only the sandbox's processes. On that one cluster
it runs a controller with ``autoscale=True`` under Sia (the queue's demand), then one
under Pollux (its ``desired_nodes``); each time three 2-device jobs arrive, the
cluster grows to three nodes, the jobs run on them (placed by Ray's node ids: no
resource names a node) and end, and it shrinks back to one. About 65-90 s on a
loaded 2-core machine (the head's start takes 10-20 s of it). Skipped (with the
reason) where ``unshare`` is not permitted.

What Ray's autoscaler may legitimately do is allowed for, and nothing else: it removes
an idle node above ``min_workers`` (which is why the controller keeps asking for what
its jobs hold, ``autoscale.desired_bundles``: a node a job was just placed on looks
idle until its placement group is reserved there), a request cannot say *which* node
stays, and Ray's fake provider, which lists a node only once its raylet has started,
may start one node beyond ``max_workers`` for a moment (removed again as idle or for
"max workers"; no job is placed on it for good: each job is launched once).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from goodput_jax.cluster.local import run_sandboxed, sandbox_problem

ROOT = Path(__file__).resolve().parents[2]
A2 = {"gj_accel": 2.0, "gj_type_a": 2.0}
POLICIES = ("sia", "pollux")


@pytest.fixture(scope="module")
def run():
    pytest.importorskip("ray")
    problem = sandbox_problem()
    if problem:
        pytest.skip(f"no loopback-only sandbox for Ray here: {problem}")
    base = Path(tempfile.mkdtemp(prefix="gj-autoscale-"))
    ray_tmp = base / "ray"
    ray_tmp.mkdir()
    out, log = base / "out.json", base / "driver.log"
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    try:
        with open(log, "w") as fh:
            proc = run_sandboxed([str(ROOT / "tests" / "cluster" / "_autoscale_driver.py"),
                                  str(base / "state"), str(out)],
                                 ray_tmpdir=str(ray_tmp),
                                 env=env, timeout=400, stdout=fh, stderr=fh, cwd=ROOT)
        leftovers = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    if str(ray_tmp).encode() in fh.read():
                        leftovers.append(pid)
            except OSError:
                continue
        assert proc.returncode == 0, log.read_text()[-4000:]
        data = json.loads(out.read_text())
        data["leftover_pids"] = leftovers
        yield data
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(params=POLICIES)
def grown(request, run):
    return {**run["policies"][request.param], "policy": request.param}


def held(allocations: dict) -> list:
    """One a:2 bundle per job that holds a node (every job here takes one whole node)."""
    return [A2] * sum(1 for a in allocations.values() if a)


def test_a_queue_larger_than_the_cluster_grows_it_to_its_max(grown):
    assert grown["timeout"] is None, grown["nodes_seen"]
    assert len(grown["first_nodes"]) == 1
    sizes = [len(labels) for _, labels in grown["nodes_seen"]]
    assert 3 <= max(sizes) <= 4 and len(grown["grown_nodes"]) >= 3  # max_workers (+1)
    for r in grown["rounds"]:
        assert r["policy"] in (grown["policy"], "none")
        waits = any(not v for v in r["allocations"].values())
        if grown["policy"] == "sia":
            # a round that left a job waiting asked for room for every job (what is held
            # and what waits, one a:2 node each); the others for what the jobs hold
            assert r["requested"] == ([A2] * len(r["allocations"]) if waits
                                      else held(r["allocations"])), r
        elif r["allocations"]:
            # Pollux's desired size in template nodes, or what is held once the cluster
            # has it
            assert r["requested"] in (held(r["allocations"]), [A2] * r["desired_nodes"]), r
            assert waits or r["requested"] == held(r["allocations"]), r
    assert max(len(r["requested"]) for r in grown["rounds"]) == 3
    assert grown["controller"]["errors"] == []


def test_the_grown_nodes_get_the_waiting_jobs_at_the_next_round(grown):
    jobs = grown["jobs"]
    new = set(grown["grown_nodes"]) - set(grown["first_nodes"])
    hosts = {}
    for name, job in jobs.items():
        assert job["status"] == "finished", (name, job["events"][-3:])
        (launch,) = job["launches"]  # placed once, never moved
        hosts[name] = launch["nodes"]
    used = sorted(n for h in hosts.values() for n in h)
    assert len(set(used)) == 3 and set(used) <= set(grown["grown_nodes"])
    # named by Ray's node ids, as every node of the type carries the same resources
    assert all(n.startswith("a-") for n in used), used
    waiting = [n for n in jobs if hosts[n][0] in new]
    assert len(waiting) == 2
    rounds = grown["rounds"]
    for name in waiting:
        node = hosts[name][0]
        # the first round whose allocations name the new node is the one that placed it
        placing = next(r for r in rounds if any(node in a for a in r["allocations"].values()))
        assert placing["allocations"][name] == [node, node] and name in placing["changed"]


def test_the_request_is_released_and_the_idle_cluster_shrinks(grown):
    rounds = grown["rounds"]
    full = next(i for i, r in enumerate(rounds)
                if r["allocations"] and all(r["allocations"].values()))
    # from the round that placed the last job on, only what is held is asked for: the
    # request shrinks as jobs end, and is released ([]) once none is left
    assert all(r["requested"] == held(r["allocations"]) for r in rounds[full:])
    assert rounds[full]["requested"] == [A2] * 3 and rounds[-1]["requested"] == []
    assert grown["shrink_timeout"] is None, grown["nodes_seen"]
    assert len(grown["final_nodes"]) == 1  # min_workers
    assert grown["controller"]["requested"] == []
    # RayAutoscaler sent request_resources only when the bundles changed
    changes = [r["requested"] for i, r in enumerate(rounds)
               if i == 0 or r["requested"] != rounds[i - 1]["requested"]]
    assert grown["controller"]["requests_sent"] == len(changes) >= 2


def test_one_cluster_served_both_policies_and_left_nothing(run):
    sia, pollux = (run["policies"][p] for p in POLICIES)
    # the Pollux phase started on the node the Sia phase shrank back to
    assert pollux["first_nodes"] == sia["final_nodes"]
    assert run["leftover_pids"] == []
