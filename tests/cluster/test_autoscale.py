"""Autoscaling without Ray: the desired bundles of a plan (pure), and the controller
giving them to a requester once per round (a recording one here; the Ray one is
``RayAutoscaler``, exercised on Ray's fake autoscaler by test_autoscale_ray.py)."""

from __future__ import annotations

import pytest

from goodput_jax.cluster.autoscale import bundle, desired_bundles
from goodput_jax.cluster.controller import Controller
from goodput_jax.cluster.plan import NodeRecord, RoundPlan
from goodput_jax.cluster.spec import JobSpec

EX = "goodput_jax.cluster.examples:regression"
A2 = {"gj_accel": 2.0, "gj_type_a": 2.0}


def _spec(name, lo=2, hi=2, types=("a",)):
    return JobSpec(name, EX, min_replicas=lo, max_replicas=hi, accelerator_types=types,
                   store=f"sqlite:///none/{name}")


def test_desired_bundles_of_a_queue_and_of_pollux():
    nodes = [NodeRecord("n0", "a", 2), NodeRecord("n1", "b", 4)]
    specs = {"run": _spec("run"), "wide": _spec("wide", lo=5, hi=8, types=()),
             "typed": _spec("typed", lo=3, hi=3, types=("b",))}
    plan = RoundPlan({"run": ("n0", "n0"), "wide": (), "typed": ()}, ("run",), "sia")
    # held: one bundle per node a job holds; waiting: min_replicas in node-sized bundles,
    # of the job's one type (else any type, in the largest node's size)
    assert desired_bundles(plan, specs, nodes) == [
        A2, bundle(3, "b"), bundle(4), bundle(1)]
    # nothing waits: only what is held (a node a job was just placed on stays until its
    # placement group makes it busy); nothing held or waiting: the request is released
    assert desired_bundles(RoundPlan({"run": ("n0", "n0")}, (), "sia"), specs, nodes) == [A2]
    assert desired_bundles(RoundPlan({}, (), "none"), specs, nodes) == []
    # no live node yet (an autoscaled cluster at zero workers): one-device bundles
    assert desired_bundles(RoundPlan({"typed": ()}, (), "none"), specs, []) == \
        [bundle(1, "b")] * 3
    # Pollux's desired size: template nodes (the largest live one), only above the live count
    one = [NodeRecord("n0", "a", 2), NodeRecord("n1", "a", 2)]
    grow = RoundPlan({"run": ("n0", "n0")}, (), "pollux", desired_nodes=4)
    assert desired_bundles(grow, specs, one) == [A2] * 4
    same = RoundPlan({"run": ("n0", "n0"), "wide": ()}, (), "pollux", desired_nodes=2)
    assert desired_bundles(same, specs, one) == [A2]  # what is held
    with pytest.raises(TypeError, match="RoundPlan"):
        desired_bundles({"run": ()}, specs, nodes)
    with pytest.raises(ValueError, match=r"devices \(0\)"):
        bundle(0)


class Launcher:
    """Starts nothing; records launches and the labels it was asked to keep warm."""

    def __init__(self):
        self.launched, self.warmed, self.results = [], [], {}

    def launch(self, spec, groups, contexts, log_paths):
        h = (spec.name, contexts[0]["attempt"])
        self.launched.append((spec.name, tuple(g[0] for g in groups)))
        return h

    def attach(self, name, attempt, ranks):
        return None

    def poll(self, handle):
        return self.results.get(handle)

    def kill(self, handle):
        pass

    def release(self, handle):
        pass

    def log_tail(self, handle, rank):
        return None

    def warm(self, nodes):
        self.warmed.append(sorted(n.label for n in nodes))


class Requests:
    def __init__(self):
        self.sent = []

    def request(self, bundles):
        if self.sent and self.sent[-1] == bundles:
            return False
        self.sent.append(bundles)
        return True


def test_the_controller_asks_for_the_queue_and_releases_it(tmp_path):
    """A queue larger than the cluster asks for room; nodes that join get the waiting
    jobs at the next round; the request drops to what is held when nothing waits, and
    is released when no job is left; spares only on held nodes (an idle node must be
    free to go)."""
    live = [NodeRecord("n0", "a", 2)]
    now = [1000.0]
    launcher, req = Launcher(), Requests()
    ctl = Controller(str(tmp_path), policy="sia", launcher=launcher, nodes=lambda: list(live),
                     clock=lambda: now[0], autoscaler=req)
    for name in ("j0", "j1", "j2"):
        ctl.submit(_spec(name), now[0])
    ctl.tick()
    assert [j.status.value for j in ctl.jobs.values()].count("running") == 1
    assert req.sent == [[A2, A2, A2]]  # the whole queue, the running job's node included
    assert ctl.rounds[-1]["requested"] == [A2, A2, A2]
    assert launcher.warmed[-1] == []  # before the round nothing was held
    now[0] += 5.0
    live += [NodeRecord("n1", "a", 2), NodeRecord("n2", "a", 2)]  # the autoscaler's nodes
    ctl.tick()
    assert all(j.status == "running" for j in ctl.jobs.values())
    assert sorted(a for _, (a,) in launcher.launched) == ["n0", "n1", "n2"]
    assert req.sent == [[A2, A2, A2]]  # nothing waits: what is held, the same: not resent
    now[0] += 1.0
    ctl.tick(rounds=False)
    assert launcher.warmed[-1] == ["n0", "n1", "n2"]
    for name, job in ctl.jobs.items():  # two jobs finish: their nodes get no spare
        if job.allocation != ["n0", "n0"]:
            launcher.results[(name, job.attempt)] = ("ok", [{"status": "finished"}])
    now[0] += 1.0
    ctl.tick()
    assert sorted(j.status.value for j in ctl.jobs.values()) == ["finished", "finished",
                                                                  "running"]
    ctl.tick(rounds=False)  # a tick warms before it looks at launches: the next one
    assert launcher.warmed[-1] == ["n0"] and req.sent[-1] == [A2] and len(req.sent) == 2
    for name, job in ctl.jobs.items():  # the last one ends: the request is released
        if job.status == "running":
            launcher.results[(name, job.attempt)] = ("ok", [{"status": "finished"}])
    now[0] += 1.0
    ctl.tick()
    assert req.sent[-1] == [] and len(req.sent) == 3


def test_rounds_run_before_any_node_is_up_when_autoscaling(tmp_path):
    """An autoscaled cluster may start with no worker: the queue still asks for one."""
    req = Requests()
    ctl = Controller(str(tmp_path), policy="sia", launcher=Launcher(), nodes=lambda: [],
                     clock=lambda: 10.0, autoscaler=req)
    ctl.submit(_spec("j0", lo=1, hi=2), 10.0)
    ctl.tick()
    assert req.sent == [[bundle(1, "a")]]
    plain = Controller(str(tmp_path / "plain"), policy="sia", launcher=Launcher(),
                       nodes=lambda: [], clock=lambda: 10.0)
    plain.submit(_spec("j0", lo=1, hi=2), 10.0)
    plain.tick()
    assert plain.rounds == []


def test_pollux_desired_nodes_reach_the_requester(tmp_path):
    """Pollux (one type) autoscales only with an autoscaler: its desired_nodes, as
    template nodes, when above the live count."""
    live = [NodeRecord("n0", "a", 2)]
    req = Requests()
    ctl = Controller(str(tmp_path), policy="auto", launcher=Launcher(), nodes=lambda: live,
                     clock=lambda: 1000.0, autoscaler=req)
    for name in ("j0", "j1", "j2"):
        ctl.submit(_spec(name), 1000.0)
    ctl.alive = list(live)
    plan = ctl.run_round(1000.0)
    assert ctl.policy.autoscale and plan.policy == "pollux"
    assert plan.desired_nodes is not None and plan.desired_nodes > 1
    assert req.sent == [[A2] * plan.desired_nodes]
    assert ctl.rounds[-1]["desired_nodes"] == plan.desired_nodes



def test_with_a_max_capacity_a_spec_is_checked_against_the_grown_cluster(tmp_path):
    """Fails on the controller that checked specs against the live nodes only: a job of
    two a:2 nodes was refused on a one-node cluster that can grow to three."""
    live = [NodeRecord("n0", "a", 2)]
    ctl = Controller(str(tmp_path), policy="sia", launcher=Launcher(), nodes=lambda: live,
                     clock=lambda: 10.0, autoscaler=Requests(), max_capacity={"a": (3, 2)})
    ctl.tick()
    assert ctl.submit(_spec("wide", lo=4, hi=4), 10.0) == "wide"  # 4 of the 6 devices
    with pytest.raises(ValueError, match=r"min_replicas \(8\) > the 6 devices of a"):
        ctl.submit(_spec("huge", lo=8, hi=8), 10.0)
    with pytest.raises(ValueError, match="unknown accelerator type 'b'"):
        ctl.submit(_spec("other", types=("b",)), 10.0)
    assert sorted(ctl.jobs) == ["wide"]
    assert ctl.sd.read_json(ctl.sd.cluster_path)["capacity"] == {"a": [3, 2]}
    plain = Controller(str(tmp_path / "plain"), policy="sia", launcher=Launcher(),
                       nodes=lambda: live, clock=lambda: 10.0)
    plain.tick()
    with pytest.raises(ValueError, match=r"min_replicas \(4\) > the 2 devices"):
        plain.submit(_spec("wide", lo=4, hi=4), 10.0)
    with pytest.raises(ValueError, match=r"max_capacity \(\{'a': 3\}\)"):
        Controller(str(tmp_path / "bad"), max_capacity={"a": 3})
