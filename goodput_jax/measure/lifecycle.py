"""One job lifecycle per recorder: a typed state whose transitions are methods.

=================  ======================================================================
``NOT_STARTED``    the recorder has recorded no job start yet
``RUNNING``        a job start was recorded (``record_job_start_time``, ``job()``)
``WAITING``        running, and waiting for resources (an elastic wait for slices is open)
``ENDED``          the job end was recorded: the job's time stops there
=================  ======================================================================

After the end, events are refused (a step, a compile that
``goodput_jax.runtime`` reports, a program cost, a span): they are counted in
:attr:`JobLifecycle.refused` and a warning is logged once, so a finished job stays finished
(before, such an event reopened the job and its time grew with the wall clock). A new
``record_job_start_time`` on the same recorder starts a new run: that is asked for.

A *rerun* is a new recorder (a new process) starting a job whose last run in the store ended
cleanly. :class:`Rerun` says what the recorder does then (``docs/semantics.md``, "Runs of a
job"): ``WARN`` (default) appends the run and warns once, ``APPEND`` appends silently (a
deliberate continuation), ``REFUSE`` raises :class:`JobEndedError`. A restart after a crash
(the last run has no job end) is always appended: that is what disruption accounting is for.

Example:
    >>> lc = JobLifecycle("job")
    >>> lc.state, (lc.start(), lc.state)[1], (lc.end(), lc.state)[1]
    (<JobState.NOT_STARTED: 'not_started'>, <JobState.RUNNING: 'running'>, <JobState.ENDED: 'ended'>)
"""  # noqa: E501 (a doctest's one-line output)

from __future__ import annotations

import enum
import logging
import threading
from typing import Any

from goodput_jax.measure.events import KIND_CODES, EventKind
from goodput_jax.measure.stores import EventStore

__all__ = ["JobEndedError", "JobLifecycle", "JobState", "Rerun", "last_run_ended"]

logger = logging.getLogger("goodput_jax.measure.recorder")

_JOB_START, _JOB_END = KIND_CODES[EventKind.JOB_START], KIND_CODES[EventKind.JOB_END]


class JobState(enum.Enum):
    """Where a recorder's job is (see the module docstring)."""

    NOT_STARTED = "not_started"
    RUNNING = "running"
    WAITING = "waiting"
    ENDED = "ended"


class Rerun(enum.Enum):
    """What a recorder does when its job's last run in the store ended cleanly."""

    WARN = "warn"  #: append the new run to the job, warn once (default)
    APPEND = "append"  #: append the new run silently: a deliberate continuation
    REFUSE = "refuse"  #: raise JobEndedError at the job start


class JobEndedError(RuntimeError):
    """The job already ended cleanly in the store and the recorder was told not to rerun it."""


class JobLifecycle:
    """The state of one recorder's job; each transition is a method.

    Args:
        job_name: the job's name (for messages).

    Raises:
        RuntimeError: a transition from a state it does not leave (named in the message).
    """

    def __init__(self, job_name: str):
        self.job_name = job_name
        self._state = JobState.NOT_STARTED
        self._lock = threading.Lock()
        self._warned = False
        #: events refused after the job end
        self.refused = 0

    @property
    def state(self) -> JobState:
        return self._state

    @property
    def ended(self) -> bool:
        return self._state is JobState.ENDED

    @property
    def started(self) -> bool:
        """Running or waiting: a job start and no job end since."""
        return self._state in (JobState.RUNNING, JobState.WAITING)

    def _move(self, name: str, allowed: tuple[JobState, ...], to: JobState) -> None:
        with self._lock:
            if self._state not in allowed:
                raise RuntimeError(f"job {self.job_name!r}: {name}() in state {self._state.name}")
            self._state = to

    def start(self) -> None:
        """NOT_STARTED or ENDED (a new run) -> RUNNING; a start while running is the
        same run (a second ``record_job_start_time``, as Google's recorder allows)."""
        with self._lock:
            if self._state is JobState.ENDED:
                self._warned = False
            self._state = JobState.RUNNING

    def end(self) -> None:
        """Any state -> ENDED (an end without a start is recorded, as Google's is)."""
        with self._lock:
            self._state = JobState.ENDED

    def begin_wait(self) -> None:
        """RUNNING -> WAITING (an elastic wait for slices opens)."""
        self._move("begin_wait", (JobState.RUNNING, JobState.WAITING), JobState.WAITING)

    def end_wait(self) -> None:
        """WAITING -> RUNNING (the wait is over)."""
        self._move("end_wait", (JobState.WAITING, JobState.RUNNING), JobState.RUNNING)

    def refuse(self, what: str, n: int = 1) -> None:
        """Count ``n`` events refused after the end; the first one is warned about."""
        with self._lock:
            self.refused += n
            if self._warned:
                return
            self._warned = True
        logger.warning(
            "goodput recorder: job %r ended; %s recorded after its end is not recorded, "
            "nor is any later event until a new record_job_start_time (see refused_count)",
            self.job_name, what)

    def check_rerun(self, policy: Rerun, store: EventStore | None, own_run_id: str) -> None:
        """At the recorder's first job start: apply ``policy`` if the job's last run in
        ``store`` (other than ``own_run_id``) ended cleanly.

        Raises:
            JobEndedError: it did and ``policy`` is ``REFUSE``.
        """
        if policy is Rerun.APPEND or store is None or self._state is not JobState.NOT_STARTED:
            return
        if not last_run_ended(store, self.job_name, own_run_id):
            return
        msg = (f"job {self.job_name!r} already ended cleanly in store {store.url!r}: this "
               f"rerun appends a second run to it (its goodput covers both runs); pass "
               f"rerun='append' to continue the job deliberately, or use a new job name")
        if policy is Rerun.REFUSE:
            raise JobEndedError(msg.replace("this rerun appends", "a rerun would append")
                                .replace("rerun='append'", "rerun='append' (not 'refuse')"))
        logger.warning("goodput recorder: %s", msg)


def check_rerun(value: Any) -> Rerun:
    """A ``rerun`` option: a :class:`Rerun` or its value (``"warn"``, ``"append"``,
    ``"refuse"``).

    Example:
        >>> check_rerun("append")
        <Rerun.APPEND: 'append'>
    """
    if isinstance(value, Rerun):
        return value
    try:
        return Rerun(value)
    except ValueError:
        raise ValueError(f"rerun ({value!r}) must be one of 'warn', 'append', 'refuse'") from None


def last_run_ended(store: EventStore, job_name: str, own_run_id: str) -> bool:
    """Whether the job's latest run in ``store`` other than ``own_run_id`` ended cleanly:
    its latest job start or end is an end. False when there is no such run. Reads the
    job's history once (columns, in chunks).

    Example:
        >>> from goodput_jax.measure.stores.sqlite import SQLiteStore
        >>> last_run_ended(SQLiteStore(":memory:"), "job", "run-1")
        False
    """
    last_run: str | None = None
    ended: dict[str, bool] = {}
    runs: dict[int, str] = {}
    cursor: Any = None
    while True:
        cols, cursor, done = store.read_columns(job_name, cursor, 250_000)
        if cols is not None:
            kinds, streams = cols["kind"].tolist(), cols["stream"].tolist()
            for kind, sid in zip(kinds, streams):
                run = runs.get(sid)
                if run is None:
                    run = runs[sid] = store.stream_info(sid)[0]
                if run == own_run_id:
                    continue
                last_run = run
                if kind == _JOB_END:
                    ended[run] = True
                elif kind == _JOB_START:
                    ended[run] = False
        if done:
            break
    return last_run is not None and ended.get(last_run, False)
