"""The typed core of the cluster runtime: a job's record, its state machine, the saved state.

* :class:`JobStatus`: ``queued -> running -> (stopping ->) finished``, with
  ``retrying`` after a crash and ``failed`` / ``cancelled`` as the other ends.
  A status is a ``str`` enum, so its JSON is the plain word (``"running"``).
* :class:`JobRecord`: everything the controller knows about one job. Every
  change of status is a method (:meth:`~JobRecord.launch`,
  :meth:`~JobRecord.request_stop`, :meth:`~JobRecord.stopped`,
  :meth:`~JobRecord.crash`, :meth:`~JobRecord.lose_node`,
  :meth:`~JobRecord.finish`, :meth:`~JobRecord.cancel`,
  :meth:`~JobRecord.fail` ...), which refuses a transition the state machine
  does not have (:class:`TransitionError`) and records an event. The event and
  launch histories are bounded (:data:`MAX_EVENTS`, :data:`MAX_LAUNCHES`; what
  was dropped is counted).
* :class:`ClusterState` / :func:`read_state`: the controller's saved state
  (``STATE_DIR/controller.json``) with its format version
  (:data:`STATE_VERSION`); the typed way to read a cluster's jobs (the cluster
  report reads it).
* :class:`Launcher`: what the controller needs from whatever starts processes, and
  :class:`Placement`: one process's node (label and Ray node id) and devices.
* :func:`scheduling_timeline`: a job's wall time as
  :class:`goodput_jax.measure.productivity.SchedulingTimeline` (queued, running
  with its full allocation, stopping, relaunching) from its record.

Example:
    >>> from goodput_jax.cluster.spec import JobSpec
    >>> rec = JobRecord.new(JobSpec("j", "m:f", max_replicas=2), now=0.0)
    >>> rec.status
    <JobStatus.QUEUED: 'queued'>
    >>> rec.launch(1.0, ["n0"], "allocated", nodes=["n0"], accelerator_type="a")
    0
    >>> rec.request_stop(5.0, ["n0", "n1"], reason="reallocation")
    >>> rec.stopped(6.0, forced=False)
    ['n0', 'n1']
    >>> rec.finish(7.0)
    Traceback (most recent call last):
    ...
    goodput_jax.cluster.record.TransitionError: job 'j': cannot finish from queued
    >>> [s.reason for s in scheduling_timeline(rec, now=8.0).spans]
    ['queued', 'running', 'stopping', 'relaunching']
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from goodput_jax.cluster.spec import JobSpec

if TYPE_CHECKING:
    from goodput_jax.cluster.plan import NodeRecord
    from goodput_jax.measure.productivity import SchedulingTimeline

__all__ = [
    "ACTIVE",
    "MAX_EVENTS",
    "MAX_LAUNCHES",
    "STATE_VERSION",
    "TERMINAL",
    "ClusterState",
    "JobRecord",
    "JobStatus",
    "Launcher",
    "Placement",
    "TransitionError",
    "read_state",
    "scheduling_timeline",
]

#: Version of ``controller.json``'s format (1: the untyped dicts before it had one).
STATE_VERSION = 2
#: Events kept per job (older ones are dropped and counted in ``events_dropped``).
MAX_EVENTS = 200
#: Launches kept per job (older ones are dropped and counted in ``launches_dropped``).
MAX_LAUNCHES = 100


class JobStatus(str, enum.Enum):
    """Where a job stands. ``str``-valued: ``JobStatus.RUNNING == "running"``."""

    SUBMITTED = "submitted"  # in the inbox, not taken in by the controller yet
    QUEUED = "queued"
    RUNNING = "running"
    STOPPING = "stopping"
    RETRYING = "retrying"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"

    def __str__(self) -> str:
        return self.value

    @property
    def active(self) -> bool:
        """Whether the scheduler allocates for it."""
        return self in ACTIVE

    @property
    def terminal(self) -> bool:
        """Whether nothing more happens to it."""
        return self in TERMINAL


#: States the scheduler allocates for.
ACTIVE = frozenset({JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.STOPPING, JobStatus.RETRYING})
#: States after which nothing happens.
TERMINAL = frozenset({JobStatus.FINISHED, JobStatus.FAILED, JobStatus.CANCELLED})


class TransitionError(ValueError):
    """A status change the job's state machine does not have."""


def _labels(value: Any, name: str) -> list[str]:
    if isinstance(value, str) or not isinstance(value, Sequence) or not all(
            isinstance(v, str) and v for v in value):
        raise TypeError(f"{name} ({value!r}) must be a list of node labels")
    return list(value)


@dataclass
class JobRecord:
    """One job as the controller knows it (see the module doc).

    Attributes:
        name: the job's name.
        spec: its spec with the defaults filled in (None only for a refused
            submission, whose raw form is in ``raw_spec``).
        status: a :class:`JobStatus`.
        allocation: node labels, one per replica, of the current (or next) launch.
        next_allocation: where a stopping job goes next.
        attempt: the newest launch's number (-1 before the first).
        restarts, failures: restarts (stops, node losses, controller rebuilds), crashes.
        error: the last crash's or the refusal's message (one line).
        submitted, started, finished: POSIX seconds (None: not yet).
        retry_at: when a retrying job relaunches; deadline: when a stop is forced.
        suspect_since, suspect_error: a launch that died of a system error waits for
            the node table (a node loss, not a crash).
        relaunch_reason: the reason the next launch records.
        events, launches: bounded histories (dicts with ``t`` and ``what`` /
            ``attempt``, ``reason``, ``allocation``, ``devices``, ``nodes``, ``type``).
        events_dropped, launches_dropped: how many older entries were dropped.
    """

    name: str
    spec: JobSpec | None
    status: JobStatus = JobStatus.QUEUED
    allocation: list[str] = field(default_factory=list)
    next_allocation: list[str] | None = None
    attempt: int = -1
    restarts: int = 0
    failures: int = 0
    error: str | None = None
    submitted: float = 0.0
    started: float | None = None
    finished: float | None = None
    retry_at: float | None = None
    deadline: float | None = None
    suspect_since: float | None = None
    suspect_error: str | None = None
    relaunch_reason: str | None = None
    events: list[dict] = field(default_factory=list)
    launches: list[dict] = field(default_factory=list)
    events_dropped: int = 0
    launches_dropped: int = 0
    raw_spec: dict | None = None

    # ------------------------------------------------------------------ building
    @classmethod
    def new(cls, spec: JobSpec, now: float) -> JobRecord:
        """A queued job just taken in."""
        if not isinstance(spec, JobSpec):
            raise TypeError(f"spec must be a JobSpec, got {type(spec).__name__}")
        rec = cls(spec.name, spec, JobStatus.QUEUED, submitted=float(now))
        rec.event(now, "submitted")
        return rec

    @classmethod
    def refused(cls, name: str, raw: Any, error: str, now: float) -> JobRecord:
        """A submission that cannot run: failed at once, with its error (``raw``, ``Any``:
        the submitted JSON as it came, kept when it is a mapping)."""
        rec = cls(name, None, JobStatus.FAILED, error=error, submitted=float(now),
                  finished=float(now), raw_spec=dict(raw) if isinstance(raw, Mapping) else None)
        rec.event(now, "refused", error=error)
        return rec

    # ------------------------------------------------------------------ histories
    def event(self, now: float, what: str, **extra: Any) -> None:
        """Append an event (the oldest is dropped past :data:`MAX_EVENTS`; ``extra``,
        ``Any``: its JSON fields)."""
        self.events.append({"t": float(now), "what": what, **extra})
        if len(self.events) > MAX_EVENTS:
            drop = len(self.events) - MAX_EVENTS
            del self.events[:drop]
            self.events_dropped += drop

    def _launched(self, entry: dict) -> None:
        self.launches.append(entry)
        if len(self.launches) > MAX_LAUNCHES:
            drop = len(self.launches) - MAX_LAUNCHES
            del self.launches[:drop]
            self.launches_dropped += drop

    # ------------------------------------------------------------------ transitions
    def _need(self, what: str, *allowed: JobStatus) -> None:
        if self.status not in allowed:
            raise TransitionError(f"job {self.name!r}: cannot {what} from {self.status.value}")

    def launch(self, now: float, allocation: Sequence[str], reason: str, *,
               nodes: Sequence[str], accelerator_type: str | None) -> int:
        """queued/retrying -> running on ``allocation``; returns the new attempt number."""
        self._need("launch", JobStatus.QUEUED, JobStatus.RETRYING)
        alloc = _labels(allocation, "allocation")
        if not alloc:
            raise ValueError(f"allocation ([]) of job {self.name!r} must name a node")
        self.allocation = alloc
        self.attempt += 1
        self.status = JobStatus.RUNNING
        self.started = self.started if self.started is not None else float(now)
        self.retry_at = self.deadline = None
        self.relaunch_reason = None
        self.suspect_since = None
        self.suspect_error = None
        self._launched({"t": float(now), "attempt": self.attempt, "reason": reason,
                        "allocation": list(alloc), "devices": len(alloc),
                        "nodes": list(nodes), "type": accelerator_type})
        self.event(now, "launched", attempt=self.attempt, reason=reason, allocation=list(alloc))
        return self.attempt

    def request_stop(self, now: float, to: Sequence[str], *, reason: str,
                     timeout: float | None = None) -> None:
        """running -> stopping: asked to checkpoint and stop, then go to ``to`` ([]: queue)."""
        self._need("request a stop", JobStatus.RUNNING)
        self.next_allocation = _labels(to, "to")
        self.status = JobStatus.STOPPING
        stop_timeout = self.spec.stop_timeout if self.spec is not None else 60.0
        self.deadline = float(now) + float(stop_timeout if timeout is None else timeout)
        self.restarts += 1
        self.event(now, "stop requested", to=list(self.next_allocation), reason=reason)

    def retarget(self, now: float, to: Sequence[str]) -> bool:
        """stopping -> stopping, relaunched on ``to`` instead; True when it changed."""
        self._need("retarget", JobStatus.STOPPING)
        to = _labels(to, "to")
        if to == self.next_allocation:
            return False
        self.next_allocation = to
        self.event(now, "retargeted", to=list(to))
        return True

    def stopped(self, now: float, *, forced: bool) -> list[str]:
        """stopping -> queued (the launch ended); returns where it was to go next."""
        self._need("record a stop", JobStatus.STOPPING)
        nxt = list(self.next_allocation or [])
        self.next_allocation = None
        self.deadline = None
        self.status = JobStatus.QUEUED
        self.allocation = []
        self.event(now, "stopped", forced=bool(forced))
        return nxt

    def crash(self, now: float, message: str) -> bool:
        """running/stopping -> retrying (after a backoff) or failed; True when it retries.

        A crash during a stop counts as the stop too (the launch is over)."""
        self._need("crash", JobStatus.RUNNING, JobStatus.STOPPING)
        self.failures += 1
        self.suspect_since = None
        self.suspect_error = None
        self.error = message
        self.next_allocation = None
        self.deadline = None
        self.event(now, "crashed", error=message)
        spec = self.spec
        retries = spec.max_retries if spec is not None else 0
        if self.failures > retries:
            self._end(now, JobStatus.FAILED, "failed", error=message)
            return False
        self.status = JobStatus.RETRYING
        backoff = spec.retry_backoff if spec is not None else 1.0
        self.retry_at = float(now) + backoff * 2 ** (self.failures - 1)
        self.relaunch_reason = "retry"
        return True

    def lose_node(self, now: float, nodes: Sequence[str]) -> None:
        """running/stopping/retrying -> queued: a node of its allocation left the cluster."""
        self._need("lose a node", JobStatus.RUNNING, JobStatus.STOPPING, JobStatus.RETRYING)
        self.restarts += 1
        self.status = JobStatus.QUEUED
        self.allocation = []
        self.next_allocation = None
        self.deadline = self.retry_at = None
        self.suspect_since = None
        self.suspect_error = None
        self.event(now, "node lost", nodes=sorted(set(nodes)))

    def suspect(self, now: float, message: str) -> None:
        """A launch died of a system error: wait for the node table before calling it a crash."""
        self._need("suspect a node loss", JobStatus.RUNNING, JobStatus.STOPPING)
        if self.suspect_since is None:
            self.suspect_since = float(now)
            self.suspect_error = message

    def finish(self, now: float) -> None:
        """running/stopping -> finished (every process returned without a stop)."""
        self._need("finish", JobStatus.RUNNING, JobStatus.STOPPING)
        self._end(now, JobStatus.FINISHED, "finished")

    def cancel(self, now: float) -> None:
        """any active state -> cancelled (its checkpoints stay)."""
        self._need("cancel", *ACTIVE)
        self._end(now, JobStatus.CANCELLED, "cancelled")

    def fail(self, now: float, error: str) -> None:
        """any active state -> failed with ``error`` (not retried)."""
        self._need("fail", *ACTIVE)
        self.error = error
        self._end(now, JobStatus.FAILED, "failed", error=error)

    def rebuild(self, now: float) -> None:
        """running/stopping -> retrying at once: a new controller relaunches it from its
        checkpoint (its launch did not survive the old controller)."""
        self._need("rebuild", JobStatus.RUNNING, JobStatus.STOPPING)
        if self.status == JobStatus.STOPPING and self.next_allocation is not None:
            self.allocation = list(self.next_allocation)
        self.next_allocation = None
        self.deadline = None
        self.status = JobStatus.RETRYING if self.allocation else JobStatus.QUEUED
        self.retry_at = float(now)
        self.relaunch_reason = "rebuilt"
        self.restarts += 1
        self.event(now, "controller restarted")

    def move_retry(self, to: Sequence[str]) -> None:
        """retrying -> retrying on ``to`` (or queued when ``to`` is empty)."""
        self._need("move a retry", JobStatus.RETRYING)
        self.allocation = _labels(to, "to")
        if not self.allocation:
            self.status = JobStatus.QUEUED
            self.retry_at = None

    def requeue(self, now: float) -> None:
        """retrying -> queued: its allocation is gone; the next round places it."""
        self._need("requeue", JobStatus.RETRYING)
        self.status = JobStatus.QUEUED
        self.allocation = []
        self.retry_at = None

    def _end(self, now: float, status: JobStatus, what: str, **extra: Any) -> None:
        self.status = status
        self.allocation = []
        self.next_allocation = None
        self.deadline = self.retry_at = None
        self.finished = float(now)
        self.event(now, what, **extra)

    # ------------------------------------------------------------------ reading
    def current_allocation(self) -> list[str]:
        """What it holds for the scheduler (a stopping job: where it goes next)."""
        if self.status == JobStatus.STOPPING and self.next_allocation is not None:
            return list(self.next_allocation)
        return list(self.allocation)

    def displaced_allocation(self) -> list[str]:
        """Where a queued non-preemptible job ran when a node loss took it down (the
        last launch's allocation, naming the lost nodes); ``[]`` for any other job.

        A node loss clears :attr:`allocation`, but Sia places such a job first, at
        its former size, only when the allocation it is given still names the lost
        nodes (:class:`~goodput_jax.sched.SiaPolicy`); the controller's rounds give
        it this one.

        Example:
            >>> rec = JobRecord.new(JobSpec("j", "m:f", preemptible=False), now=0.0)
            >>> rec.launch(1.0, ["n1"], "allocated", nodes=["n1"], accelerator_type="a")
            0
            >>> rec.lose_node(2.0, ["n1"])
            >>> rec.allocation, rec.displaced_allocation()
            ([], ['n1'])
        """
        if (self.status != JobStatus.QUEUED or self.spec is None or self.spec.preemptible
                or not self.events or self.events[-1].get("what") != "node lost"
                or not self.launches):
            return []
        return list(self.launches[-1].get("allocation") or [])

    def to_json(self) -> dict[str, Any]:
        """JSON-safe dict (``status`` as its word, ``spec`` as :meth:`JobSpec.to_json`;
        ``Any``: JSON values)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["status"] = self.status.value
        out["spec"] = self.spec.to_json() if self.spec is not None else self.raw_spec
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any], name: str | None = None) -> JobRecord:
        """Inverse of :meth:`to_json` (also reads version 1's dicts: unknown keys ignored;
        ``Any``: JSON values)."""
        known = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in data.items() if k in known}
        kw["name"] = kw.get("name") or name
        if not kw["name"]:
            raise ValueError("job record without a name")
        try:
            kw["status"] = JobStatus(kw.get("status", "queued"))
        except ValueError:
            raise ValueError(f"job {kw['name']!r}: unknown status "
                             f"{data.get('status')!r}") from None
        raw = kw.get("spec")
        try:
            kw["spec"] = JobSpec.from_json(raw) if raw is not None else None
        except (TypeError, ValueError):
            kw["spec"], kw["raw_spec"] = None, raw
        kw["allocation"] = list(kw.get("allocation") or [])
        kw["events"] = list(kw.get("events") or [])
        kw["launches"] = list(kw.get("launches") or [])
        return cls(**kw)


@dataclass
class ClusterState:
    """The controller's saved state (``controller.json``).

    Attributes:
        jobs: name -> :class:`JobRecord`.
        rounds: the latest rounds (``t``, ``policy``, ``changed``, ``allocations``).
        round_seconds: their durations.
        version: the file's format version.
        updated: when it was written (POSIX seconds).
    """

    jobs: dict[str, JobRecord] = field(default_factory=dict)
    rounds: list[dict] = field(default_factory=list)
    round_seconds: list[float] = field(default_factory=list)
    version: int = STATE_VERSION
    updated: float | None = None

    def to_json(self, keep_rounds: int = 200) -> dict[str, Any]:
        """The file's JSON (the last ``keep_rounds`` rounds; ``Any``: JSON values)."""
        return {"version": STATE_VERSION,
                "jobs": {n: r.to_json() for n, r in self.jobs.items()},
                "rounds": self.rounds[-keep_rounds:],
                "round_seconds": self.round_seconds[-keep_rounds:], "updated": self.updated}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> ClusterState:
        """Parse a saved state (version 1, without a number, or :data:`STATE_VERSION`;
        ``Any``: JSON values).

        Raises:
            ValueError: a newer format than this code reads.
        """
        data = data or {}
        version = int(data.get("version", 1))
        if version > STATE_VERSION:
            raise ValueError(f"controller state version ({version}) is newer than this "
                             f"goodput_jax reads ({STATE_VERSION})")
        jobs = {n: JobRecord.from_json(j, n) for n, j in (data.get("jobs") or {}).items()}
        return cls(jobs, list(data.get("rounds") or []), list(data.get("round_seconds") or []),
                   version, data.get("updated"))


def read_state(state_dir: str | os.PathLike) -> ClusterState:
    """A cluster's saved state from its state directory (empty before its controller wrote one).

    Example:
        >>> import tempfile
        >>> read_state(tempfile.mkdtemp()).jobs
        {}
    """
    path = os.path.join(os.fspath(state_dir), "controller.json")
    try:
        with open(path) as fh:
            data = json.load(fh)
    except FileNotFoundError:
        data = None
    return ClusterState.from_json(data)


class Placement(NamedTuple):
    """Where one process of a launch runs: its node's label, its devices there, and
    the node's Ray node id (what a launch is pinned by; None without Ray)."""

    label: str
    devices: int
    node_id: str | None = None


class Launcher(Protocol):
    """What the controller needs from whatever starts a job's processes.

    A handle is the launcher's own value for one launch.
    """

    def launch(self, spec: JobSpec, groups: list[Placement], contexts: list[dict],
               log_paths: list[str]) -> Any:
        """Start one process per :class:`Placement` (rank order); returns a handle
        (``Any``: the launcher's own value)."""

    def poll(self, handle: Any) -> tuple[str, Any] | None:
        """None while running; ``("ok", [results])``; ``("error", (message, system))``
        (``Any``: the launcher's handle; the results or the error's pair)."""

    def kill(self, handle: Any) -> None:
        """Force the launch's processes down and release what it holds (``Any``: the launcher's own handle)."""

    def release(self, handle: Any) -> None:
        """Release what a finished launch holds (``Any``: the launcher's own handle)."""

    def attach(self, name: str, attempt: int, ranks: int) -> Any:
        """A handle on a launch still running from before a controller restart, or None
        (``Any``: the launcher's own handle)."""

    def log_tail(self, handle: Any, rank: int) -> str | None:
        """A running launch's output of ``rank``, read where it runs (None: unreachable;
        ``Any``: the launcher's own handle)."""

    def warm(self, nodes: Sequence[NodeRecord]) -> None:
        """Called every tick with the usable nodes (a launcher may keep warm processes)."""


# what each event starts, for the scheduling timeline
_PHASE = {"submitted": ("queued", False), "launched": ("running", True),
          "stop requested": ("stopping", False), "stopped": ("relaunching", False),
          "node lost": ("relaunching", False), "crashed": ("relaunching", False),
          "controller restarted": ("relaunching", False)}
_END = ("finished", "failed", "cancelled", "refused")


def scheduling_timeline(record: JobRecord, now: float | None = None) -> SchedulingTimeline:
    """The job's wall time as a :class:`~goodput_jax.measure.productivity.SchedulingTimeline`.

    Spans from its events: ``queued`` (submitted, before the first launch),
    ``running`` (held: the launch has its full allocation), ``stopping`` (a stop
    was requested), ``relaunching`` (between a launch's end and the next launch:
    a stop, a crash, a node loss, a controller restart). The timeline ends at the
    job's end, or at ``now`` (default: its last event) while it is active. With a
    truncated event history it starts at the oldest event kept.
    """
    from goodput_jax.measure.productivity import SchedulingSpan, SchedulingTimeline

    spans = []
    phase: tuple[str, bool] | None = None
    since = 0.0
    end = None
    for ev in record.events:
        t = float(ev["t"])
        what = ev.get("what")
        if not isinstance(what, str):
            continue
        if what in _END:
            end = t
            break
        nxt = _PHASE.get(what)
        if nxt is None or (phase is not None and nxt == phase and what != "launched"):
            continue
        if phase is not None and t > since:
            spans.append(SchedulingSpan(since, t, held=phase[1], reason=phase[0]))
        phase, since = nxt, max(t, since)
    if end is None:
        end = now if now is not None else (float(record.events[-1]["t"]) if record.events
                                          else None)
    if phase is not None and end is not None and end > since:
        spans.append(SchedulingSpan(since, end, held=phase[1], reason=phase[0]))
    return SchedulingTimeline(tuple(spans))
