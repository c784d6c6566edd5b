"""The checkpoint interval under injected node losses (``cluster_bench.py --checkpoints``).

Two regimes, one after the other in one run on one sandboxed local cluster (fresh nodes
and a fresh controller for each); in each, jobs side by side, each on its own 1-device
node (the example Flax MLP, :mod:`goodput_jax.cluster.examples`):

* ``advised``: ``--ckpt-every 0``, it saves when ``ctx.should_checkpoint`` asks (the
  Young/Daly interval from its measured save cost and the MTBF the controller is given);
* ``every20``: every 20 steps (the docs' former example);
* ``fixedN`` (``--control``; not run for the docs' table): every N steps, N the advice
  the advised job logged at its second save (the same interval without the timer).

Both regimes lose a job's node every 40 s on average (a restart under load takes
5-20 s, so a shorter MTBF leaves little to measure). Regime **a** (``0.05 s`` steps):
every 20 steps (~1.1 s) is far shorter than the advised interval (~4 s): it saves too
often. Regime **b** (``1 s`` steps): every 20 steps (~20 s) is far longer than the
advised interval (~4 s): it saves too rarely.

**Losses.** Each regime's window lasts ``losses x MTBF`` seconds and holds exactly
``losses`` node losses at the known rate 1/MTBF: the gaps between them are a
stratified sample of the exponential distribution of mean MTBF (its quantiles at
``(i + 1/2) / losses``, shuffled by the seed), not independent draws, so that the
number of losses in a short window is the expected one instead of a Poisson count
(whose spread, ``sqrt(losses)``, would move a 200 s window's goodput by several pp
either way). Every job of a regime sees the same loss times (common random numbers):
at each one, each job's node is killed (its raylet and processes, no drain; the
order alternates) and a fresh node joins. A job between launches (queued, no node) is
killed as soon as it holds one again (a loss during its restart).

**Accounting**, per job, from its progress log over the window ``[t0, t1]`` (records
a launch wrote after its node was killed are dropped: that work did not happen):

* kept steps: the progress at ``t1`` (the step it would continue from; after a loss
  that it has not recovered from by ``t1``, the restored step) less that at ``t0``;
* redone steps: steps run in the window less the kept ones;
* step time: the mean gap between two consecutive steps of one launch with no save
  between them; kept and redone seconds are those steps times it;
* save time: each periodic save's gap (the step before it to the step after it) less a
  step time (the save cost: their mean over the window's saves); restart time: from a
  loss to the first step of the next launch (less a step time), cut at the next loss if
  that comes first; other: what is left of the
  window (the part of a step a loss interrupted, a save a loss cut off);
* measured goodput: kept seconds / window; predicted:
  :func:`~goodput_jax.measure.advice.expected_goodput` at the interval the job used
  (the mean steps between two periodic saves of one launch x the step time), its mean
  save cost, the injected MTBF and its mean restart (the ones no loss cut short).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import random
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

EX = "goodput_jax.cluster.examples:regression"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Regime:
    """One regime: the jobs' step (seconds of host work per step), the node MTBF and the
    losses its window holds (window = losses x node MTBF)."""

    name: str
    label: str
    step_sleep: float
    node_mtbf: float
    losses: int

    def __post_init__(self) -> None:
        if not self.node_mtbf > 0:
            raise ValueError(f"node_mtbf ({self.node_mtbf!r}) must be > 0 seconds")
        if self.losses < 1:
            raise ValueError(f"losses ({self.losses!r}) must be >= 1")

    @property
    def window(self) -> float:
        return self.losses * self.node_mtbf


REGIMES = (
    Regime(name="a", label="every 20 steps saves too often", step_sleep=0.05,
           node_mtbf=40.0, losses=5),
    Regime(name="b", label="every 20 steps saves too rarely", step_sleep=1.0,
           node_mtbf=40.0, losses=6),
)


def loss_offsets(losses: int, mtbf: float, seed: int) -> list[float]:
    """Seconds from the window's start to each loss: the gaps are the exponential's
    quantiles at ``(i + 1/2) / losses`` (mean ``mtbf``), in an order shuffled by ``seed``.

    Example:
        >>> [round(t, 1) for t in loss_offsets(4, 40.0, seed=0)]
        [39.2, 44.6, 127.8, 146.5]
    """
    gaps = [-mtbf * math.log1p(-(i + 0.5) / losses) for i in range(losses)]
    random.Random(seed).shuffle(gaps)
    return list(itertools.accumulate(gaps))


def _progress_at(steps: list[dict], t: float) -> int:
    """The step a job continues from at ``t``: one past its last step by then, or, where
    a later step is lower (a loss before ``t`` sent it back to a checkpoint), that."""
    before = [p["step"] + 1 for p in steps if p["t"] <= t]
    after = [p["step"] for p in steps if p["t"] > t]
    return min([*before[-1:], *after]) if before or after else 0


def ckpt_stats(prog: Sequence[dict], kills: Iterable[tuple[float, int]], t0: float, t1: float,
               mtbf: float) -> dict[str, Any]:
    """One job's numbers over ``[t0, t1]`` from its progress log (see the module doc).

    Args:
        prog: the job's progress records (``ClusterClient.progress``), in order.
        kills: ``(time, attempt)`` of each loss of its node: the launch it ended.
        t0, t1: the window.
        mtbf: the injected MTBF (the prediction's).
    """
    from goodput_jax.measure.advice import expected_goodput

    kills = sorted(kills)
    ended = {}
    for t, a in kills:
        ended.setdefault(a, t)
    recs = [p for p in prog if not (p["attempt"] in ended and p["t"] > ended[p["attempt"]])]
    after_kill = len(prog) - len(recs)
    steps = [p for p in recs if p["event"] == "step"]
    saves = [p for p in recs if p["event"] == "save" and p.get("reason") == "periodic"]
    at = {(p["attempt"], p["step"]): p for p in steps}
    saved = {(p["attempt"], p["step"]) for p in saves}
    # the step time: consecutive steps of one launch, no save between (a save at step s
    # comes between the records of steps s-1 and s)
    gaps = [b["t"] - a["t"] for a, b in itertools.pairwise(steps)
            if b["attempt"] == a["attempt"] and b["step"] == a["step"] + 1
            and (b["attempt"], b["step"]) not in saved and t0 < b["t"] <= t1]
    step_s = statistics.mean(gaps) if gaps else float("nan")
    # each periodic save's cost: its gap less a step
    costs = {}
    for p in saves:
        a, s = (p["attempt"], p["step"] - 1), (p["attempt"], p["step"])
        if a in at and s in at:
            costs[(p["attempt"], p["step"])] = at[s]["t"] - at[a]["t"] - step_s
    in_window = [p for p in saves if t0 < p["t"] <= t1]
    window_costs = [costs[k] for k in ((p["attempt"], p["step"]) for p in in_window)
                    if k in costs]
    save_cost = statistics.mean(window_costs) if window_costs else 0.0
    save_total = sum(costs.get((p["attempt"], p["step"]), save_cost) for p in in_window)
    # the interval used: steps between two periodic saves of one launch
    spans = [b["step"] - a["step"] for a, b in itertools.pairwise(saves)
             if a["attempt"] == b["attempt"] and t0 < b["t"] <= t1]
    interval_steps = statistics.mean(spans) if spans else float("nan")
    # restarts: a loss to the next launch's first step (less a step), cut at the next loss
    restart_total, whole = 0.0, []
    for i, (tk, ak) in enumerate(kills):
        if not t0 <= tk <= t1:
            continue
        nxt = next((p["t"] - step_s for p in steps if p["attempt"] > ak and p["t"] > tk),
                   math.inf)
        cut = kills[i + 1][0] if i + 1 < len(kills) else math.inf
        end = min(nxt, cut, t1)
        restart_total += max(0.0, end - tk)
        if nxt < cut:
            whole.append(nxt - tk)
    restart_s = statistics.mean(whole) if whole else 0.0
    executed = sum(1 for p in steps if t0 < p["t"] <= t1)
    kept = _progress_at(steps, t1) - _progress_at(steps, t0)
    redone = executed - kept
    window = t1 - t0
    kept_s, redone_s = kept * step_s, redone * step_s
    measured = kept_s / window
    predicted = float("nan") if math.isnan(step_s) or math.isnan(interval_steps) else \
        expected_goodput(interval_steps * step_s, save_cost, mtbf, restart_s)
    losses = sum(1 for t, _ in kills if t0 <= t <= t1)
    return {"losses": losses, "redone_steps": redone, "kept_steps": kept, "step_s": step_s,
            "saves": len(in_window), "interval_steps": interval_steps,
            "interval_s": interval_steps * step_s, "save_cost_s": save_cost,
            "restart_s": restart_s, "redone_s": redone_s, "save_total_s": save_total,
            "restart_total_s": restart_total,
            "other_s": window - kept_s - redone_s - save_total - restart_total,
            "lost_s": redone_s + restart_total, "goodput": measured, "predicted": predicted,
            "diff_pp": 100 * abs(measured - predicted), "after_kill_records": after_kill}


def _wait(what: str, ok: Callable[[], bool], timeout: float, every: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(every)


def run_regime(work: str, cluster: Any, regime: Regime, seed: int = 0,
               control: bool = False) -> dict:
    """One regime on ``cluster`` (a :class:`~goodput_jax.cluster.local.LocalCluster`; its
    nodes are killed at the end): its jobs side by side under the same losses."""
    import ray

    from goodput_jax.cluster import ClusterClient, JobSpec, start_controller
    from goodput_jax.cluster.controller import CONTROLLER_NAME, stop_controller
    from goodput_jax.cluster.launch import NAMESPACE

    names: dict[str, int] = {"advised": 0, "every20": 20}
    n_jobs = len(names) + int(control)
    # each job on its node and two spares per job (a loss hits every job at once; a
    # fresh node takes seconds to join)
    while len(cluster.nodes) < 3 * n_jobs:
        cluster.add_node("a", 1)
    try:
        _wait("the last controller to go",
              lambda: _gone(ray, CONTROLLER_NAME, NAMESPACE), 30)
        sd = os.path.join(work, f"ckpt-{regime.name}")
        ctl = start_controller(sd, policy="sia", interval=1e6, poll=0.1,
                               node_mtbf=regime.node_mtbf)
        client = ClusterClient(sd)
        _wait("the controller", lambda: client.capacity() is not None, 120)

        def submit(name: str, every: int) -> None:
            client.submit(JobSpec(name, EX, args=(
                "--steps", "10000000", "--ckpt-every", str(every),
                "--step-sleep", str(regime.step_sleep)), min_replicas=1, max_replicas=1,
                preemptible=False, hooks={"init_batch_size": 32}))

        def saved(name: str, n: int = 1) -> bool:
            return sum(1 for p in client.progress(name) if p["event"] == "save") >= n

        for name, every in names.items():
            submit(name, every)
        if control:  # every N steps, N the advice once it has measured a save
            _wait("the advised job's second save", lambda: saved("advised", 2), 300)
            adv = [p for p in client.progress("advised") if p["event"] == "checkpoint advice"]
            names[f"fixed{adv[-1]['interval_steps']}"] = adv[-1]["interval_steps"]
            submit(*list(names.items())[-1])
        _wait("a save of every job", lambda: all(saved(n) for n in names), 300, 0.5)
        t0 = time.time()
        t1 = t0 + regime.window
        kills: dict[str, list[tuple[float, int]]] = {n: [] for n in names}
        late = []
        adds = 0
        for i, off in enumerate(loss_offsets(regime.losses, regime.node_mtbf, seed)):
            while adds and time.time() + 3.0 < t0 + off:  # a fresh node per loss, between
                cluster.add_node("a", 1)
                adds -= 1
            time.sleep(max(0.0, t0 + off - time.time()))
            todo = list(names) if i % 2 == 0 else list(reversed(names))
            deadline = time.monotonic() + 300
            while todo:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{todo}: not running again within 300 s")
                for name in list(todo):
                    job = client.status(name)
                    node = job["allocation"][0] if job["allocation"] else None
                    if job["status"] == "running" and node in cluster.nodes:
                        t = time.time()
                        cluster.kill_node(node)
                        kills[name].append((t, job["attempt"]))
                        late.append(t - t0 - off)
                        todo.remove(name)
                        adds += 1
                if todo and adds:  # a job waits for a node: the fresh ones come first
                    cluster.add_node("a", 1)
                    adds -= 1
                elif todo:
                    time.sleep(0.05)
        for _ in range(adds):
            cluster.add_node("a", 1)
        time.sleep(max(0.0, t1 - time.time()))

        def resumed(name: str) -> bool:  # a step after t1, of a launch no loss ended
            last = max((a for _, a in kills[name]), default=-1)
            return any(p["event"] == "step" and p["t"] > t1 and p["attempt"] > last
                       for p in client.progress(name))

        _wait("every job stepping after the window", lambda: all(map(resumed, names)), 180)
        progs = {n: client.progress(n) for n in names}
        stop_controller(ctl)
    finally:
        for label in list(cluster.nodes):
            cluster.kill_node(label)
    jobs = {n: ckpt_stats(progs[n], kills[n], t0, t1, regime.node_mtbf) for n in names}
    return {"regime": dataclasses.asdict(regime), "window": regime.window, "seed": seed,
            "jobs": jobs, "kill_late_s": [min(late), max(late)] if late else [],
            "kills": {n: [(t - t0, a) for t, a in k] for n, k in kills.items()},
            "raw": {"t0": t0, "t1": t1, "kills": kills, "progress": progs}}


def _gone(ray: Any, name: str, namespace: str) -> bool:
    try:
        ray.get_actor(name, namespace=namespace)
    except ValueError:
        return True
    return False


COLUMNS = (("losses", "losses", "d"), ("redone_steps", "redone", "d"),
           ("kept_steps", "kept", "d"), ("saves", "saves", "d"),
           ("interval_steps", "every", ".1f"), ("interval_s", "every_s", ".2f"),
           ("save_cost_s", "save_s", ".3f"), ("restart_s", "restart_s", ".2f"),
           ("redone_s", "lost:redo", ".1f"), ("restart_total_s", "lost:rst", ".1f"),
           ("save_total_s", "saving", ".1f"), ("other_s", "other", ".1f"),
           ("goodput", "goodput", ".3f"), ("predicted", "predicted", ".3f"),
           ("diff_pp", "|diff|pp", ".1f"))


def print_regime(res: dict) -> None:
    """One regime's table."""
    r = res["regime"]
    print(f"regime {r['name']} ({r['label']}): {r['step_sleep']} s of host work per step, "
          f"node MTBF {r['node_mtbf']:.0f} s, {r['losses']} losses in a "
          f"{res['window']:.0f} s window (seed {res['seed']}; kills "
          + (f"{res['kill_late_s'][0]:.2f}-{res['kill_late_s'][1]:.2f} s after their times)"
             if res["kill_late_s"] else "none)"))
    print(f"{'job':<10}" + "".join(f"{h:>10}" for _, h, _ in COLUMNS))
    for name, j in res["jobs"].items():
        print(f"{name:<10}" + "".join(f"{j[k]:>10{f}}" for k, _, f in COLUMNS))
    dropped = {n: j["after_kill_records"] for n, j in res["jobs"].items()
               if j["after_kill_records"]}
    if dropped:
        print(f"(records written after their launch's node was killed, dropped: {dropped})")


def rebook(path: str) -> list[dict]:
    """Each regime of a raw ``cluster_bench.json`` booked again from its progress logs
    (``python benchmarks/ckpt_bench.py RAW.json``)."""
    import json

    with open(path) as fh:
        results = json.load(fh)["checkpoints"]
    for res in results:
        raw, mtbf = res["raw"], res["regime"]["node_mtbf"]
        res["jobs"] = {n: ckpt_stats(raw["progress"][n], raw["kills"][n], raw["t0"],
                                     raw["t1"], mtbf) for n in res["jobs"]}
    return results


if __name__ == "__main__":
    import sys

    for res in rebook(sys.argv[1]):
        print_regime(res)
        print()
