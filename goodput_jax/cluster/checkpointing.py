"""Checkpoints at the interval goodput asks for: :class:`CheckpointTimer` behind
:meth:`JobContext.should_checkpoint <goodput_jax.cluster.context.JobContext.should_checkpoint>`.

The goodput-optimal interval between checkpoints is Young/Daly's
(:func:`goodput_jax.measure.advice.daly_interval`) from two numbers:

* the job's **save cost**: measured here, without any call of its own. When
  :meth:`CheckpointTimer.should_checkpoint` answers True the job saves and then
  trains one more step before it asks again; that gap less a step's time (the median
  of the recent steps) is the save's cost (its blocking part; a running mean);
* the **mean time between failures** the job sees: the cluster's observed time between
  node losses per node (:class:`NodeLossBook`, kept by the controller in
  ``STATE_DIR/reliability.json``, re-read every 30 s), divided by the nodes the launch
  spans (any one of them lost takes the launch down), or an MTBF the operator gives.

Both are updated as they are measured, and so is the interval. The goodput the advice
predicts there (:func:`~goodput_jax.measure.advice.expected_goodput`) also takes what a
loss costs besides the work it loses, the **restart** (notice, relaunch, restore, first
step): :meth:`CheckpointTimer.observe_restart` with :func:`restart_seconds` at a
relaunch's first step (0 s before one is measured; the interval does not depend on it). A relaunch starts from
the save cost its earlier launches measured (the last ``"checkpoint advice"`` record
of the job's progress log); before the first save is measured its cost is taken as 1 s; before any node loss the node MTBF is the
operator's, or one loss per 24 node-hours (a prior that the observed losses outweigh
as they come).

Example:
    >>> t = [0.0]
    >>> timer = CheckpointTimer(nodes=1, mtbf_s=7200.0, clock=lambda: t[0])
    >>> due = []
    >>> for step in range(1000):
    ...     t[0] += 1.0                      # one second per step
    ...     if timer.should_checkpoint(step):
    ...         due.append(step); t[0] += 10.0   # a save takes 10 s
    >>> due[:3], round(timer.save_cost_s), round(timer.interval_s())
    ([120, 493, 866], 10, 373)
"""

from __future__ import annotations

import collections
import json
import math
import os
import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any

from goodput_jax.measure.advice import CheckpointAdvice, checkpoint_advice, daly_interval

__all__ = ["DEFAULT_NODE_MTBF_S", "CheckpointTimer", "NodeLossBook", "last_advice",
           "reliability_path", "restart_seconds"]

#: The node MTBF assumed before any loss is observed (one loss per 24 node-hours).
DEFAULT_NODE_MTBF_S = 86400.0
#: The save cost assumed before one is measured (seconds).
PRIOR_SAVE_COST_S = 1.0


class NodeLossBook:
    """The cluster's node losses and node time, for the MTBF the jobs checkpoint by.

    The controller calls :meth:`observe` every tick with the live nodes' ids; a node
    that leaves is a loss (the controller says which left because it was lost, not
    removed: ``lost``), and every live node adds the tick's time to the node time.

    Example:
        >>> book = NodeLossBook()
        >>> book.observe({"a", "b"}, now=0.0); book.observe({"a", "b"}, now=100.0)
        >>> book.observe({"a"}, now=200.0, lost={"b"})
        >>> book.losses, book.node_seconds, round(book.node_mtbf_s())
        (1, 400.0, 43400)
    """

    def __init__(self, node_seconds: float = 0.0, losses: int = 0,
                 prior_s: float = DEFAULT_NODE_MTBF_S, given_s: float | None = None):
        self.node_seconds = float(node_seconds)
        self.losses = int(losses)
        self.prior_s = float(prior_s)
        #: the node MTBF the operator gives (it then stands, whatever is observed)
        self.given_s = given_s
        self._live: set[str] = set()
        self._t: float | None = None

    def observe(self, live: Iterable[str], now: float, lost: Iterable[str] = ()) -> None:
        """The nodes live at ``now``; ``lost``: nodes that left by a loss since."""
        live = set(live)
        if self._t is not None and now > self._t:
            self.node_seconds += len(self._live) * (now - self._t)
        self.losses += len(set(lost))
        self._live, self._t = live, now

    def node_mtbf_s(self) -> float:
        """The operator's node MTBF if given, else node time per loss with one prior
        loss per ``prior_s`` node-seconds."""
        if self.given_s is not None:
            return float(self.given_s)
        return (self.node_seconds + self.prior_s) / (self.losses + 1)

    def to_json(self) -> dict[str, Any]:
        return {"node_seconds": self.node_seconds, "losses": self.losses,
                "node_mtbf_s": self.node_mtbf_s(), "prior_s": self.prior_s,
                "given_s": self.given_s}

    @classmethod
    def from_json(cls, data: Any, given_s: float | None = None) -> NodeLossBook:
        """From :meth:`to_json` (a missing or damaged record starts afresh); ``given_s``:
        the operator's node MTBF now."""
        if not isinstance(data, dict):
            return cls(given_s=given_s)
        try:
            return cls(float(data.get("node_seconds", 0.0)), int(data.get("losses", 0)),
                       float(data.get("prior_s", DEFAULT_NODE_MTBF_S)), given_s)
        except (TypeError, ValueError):
            return cls(given_s=given_s)


class CheckpointTimer:
    """When a job should checkpoint: after the advised seconds of work since its last save.

    Args:
        nodes: the nodes the launch spans (its MTBF is the node MTBF over this).
        mtbf_s: the job's MTBF as the operator gives it (None: the cluster's observed).
        reliability_path: the controller's ``reliability.json`` (None: the prior only).
        clock: monotonic seconds.
    """

    def __init__(self, nodes: int = 1, mtbf_s: float | None = None,
                 reliability_path: str | None = None,
                 clock: Callable[[], float] = time.monotonic):
        if mtbf_s is not None and not (isinstance(mtbf_s, (int, float)) and mtbf_s > 0):
            raise ValueError(f"mtbf_s ({mtbf_s!r}) must be > 0 seconds")
        self.nodes = max(int(nodes), 1)
        self.given_mtbf_s = mtbf_s
        self.reliability_path = reliability_path
        self.clock = clock
        self.steps: collections.deque[float] = collections.deque(maxlen=50)
        self.saves = 0
        self.save_cost_s = PRIOR_SAVE_COST_S
        #: seconds a loss costs besides the work it loses (notice, relaunch, restore, first
        #: step): the mean of :meth:`observe_restart`'s (0 before one is measured)
        self.restart_s = 0.0
        self.restarts = 0
        self.work_s = 0.0
        self._last: float | None = None
        self._saving = False
        self._node_mtbf = DEFAULT_NODE_MTBF_S
        self._read_at = -math.inf

    def carry_save_cost(self, advice: Any) -> None:
        """Start from the save cost an earlier launch measured (its last ``"checkpoint
        advice"`` progress record), as one measured save, and from its restart cost
        (``restart_s`` with ``restarts``, where the record has them); None: keep the prior."""
        try:
            cost = float(advice["save_cost_s"])
        except (TypeError, KeyError, ValueError):
            return
        if math.isfinite(cost) and cost > 0:
            self.save_cost_s, self.saves = cost, 1
        try:
            restart, count = float(advice["restart_s"]), int(advice["restarts"])
        except (TypeError, KeyError, ValueError):
            return
        if math.isfinite(restart) and restart >= 0 and count > 0:
            self.restart_s, self.restarts = restart, count

    def observe_restart(self, seconds: float) -> None:
        """One restart after a loss (:func:`restart_seconds`), into the mean restart cost
        the advice predicts with."""
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) \
                or not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"seconds ({seconds!r}) must be a finite number >= 0")
        self.restarts += 1
        self.restart_s += (float(seconds) - self.restart_s) / self.restarts

    def mtbf_s(self) -> float:
        """The job's mean time between failures now (given, or the cluster's node MTBF
        over the launch's nodes)."""
        if self.given_mtbf_s is not None:
            return float(self.given_mtbf_s)
        now = self.clock()
        if self.reliability_path and now - self._read_at >= 30.0:
            self._read_at = now
            try:
                with open(self.reliability_path) as fh:
                    self._node_mtbf = float(json.load(fh)["node_mtbf_s"])
            except (OSError, ValueError, KeyError, TypeError):
                pass
        return self._node_mtbf / self.nodes

    def step_time_s(self) -> float:
        """The median of the recent steps' seconds (1 s before any)."""
        return statistics.median(self.steps) if self.steps else 1.0

    def interval_s(self) -> float:
        """The advised seconds of work between saves (Daly, from what is measured now)."""
        return daly_interval(max(self.save_cost_s, 1e-3), self.mtbf_s())

    def advice(self) -> CheckpointAdvice:
        """The interval in steps and the goodput predicted there
        (:func:`goodput_jax.measure.advice.checkpoint_advice`)."""
        return checkpoint_advice(max(self.save_cost_s, 1e-3), self.mtbf_s(),
                                 self.step_time_s(), restart_s=self.restart_s, mtbf_source=(
                                     "given" if self.given_mtbf_s is not None else "observed"))

    def should_checkpoint(self, step: int) -> bool:
        """Call once per step, before it; True: save now (the advised work has passed)."""
        now = self.clock()
        if self._last is not None:
            gap = now - self._last
            if self._saving:  # a save and one step since the last call
                cost = max(gap - self.step_time_s(), 0.0)
                self.saves += 1
                self.save_cost_s = cost if self.saves == 1 else \
                    self.save_cost_s + (cost - self.save_cost_s) / min(self.saves, 10)
                self.work_s = self.step_time_s()
            else:
                self.steps.append(gap)
                self.work_s += gap
        self._last = now
        self._saving = self.work_s >= self.interval_s()
        return self._saving


def _tail_lines(path: str, tail: int) -> list[str]:
    """The lines of the last ``tail`` bytes of a progress log (none where it cannot be read)."""
    if not path:
        return []
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - tail))
            return fh.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []


def last_advice(progress_path: str, tail: int = 256 * 1024) -> dict | None:
    """The last ``"checkpoint advice"`` record in the end of a job's progress log, or None
    (what a relaunch carries over: the save and restart costs measured before it)."""
    for line in reversed(_tail_lines(progress_path, tail)):
        if '"checkpoint advice"' in line:
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def restart_seconds(progress_path: str, attempt: int, now: float,
                    tail: int = 256 * 1024) -> float | None:
    """The restart a loss cost this launch (``attempt``), from the job's progress log: ``now``
    (wall time, at this launch's first step) less the time of the last record of the launch
    before it, or None where there is none or it ended on its own (``"stopped"`` on a
    request, ``"finished"``: a move is not a loss).

    Example:
        >>> import json, os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "progress.jsonl")
        >>> with open(path, "w") as fh:
        ...     for r in ({"attempt": 0, "t": 100.0, "event": "step"},
        ...               {"attempt": 1, "t": 109.0, "event": "launch"}):
        ...         _ = fh.write(json.dumps(r) + "\\n")
        >>> restart_seconds(path, 1, now=112.5)
        12.5
    """
    for line in reversed(_tail_lines(progress_path, tail)):
        try:
            rec = json.loads(line)
            before = int(rec["attempt"]) < attempt
            t = float(rec["t"])
        except (ValueError, KeyError, TypeError):
            continue
        if before:
            if rec.get("event") in ("stopped", "finished"):
                return None
            return max(0.0, now - t)
    return None


def reliability_path(state_root: str) -> str:
    """Where the controller keeps its :class:`NodeLossBook` (``STATE_DIR/reliability.json``)."""
    return os.path.join(state_root, "reliability.json")
