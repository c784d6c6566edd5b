"""The controller's state on disk and its readers: what a restarted controller reads back.

The seam: :mod:`goodput_jax.cluster.controller_core` decides (ticks, launches) and
:mod:`goodput_jax.cluster.controller_rounds` plans; this module keeps what they
decide from and writes what they decided; the Ray calls are in
:mod:`goodput_jax.cluster.controller_nodes` and :mod:`goodput_jax.cluster.controller_actor`.

* :class:`StateBook`: ``controller.json`` (the jobs' records and the latest rounds,
  :class:`~goodput_jax.cluster.record.ClusterState`), written only when it changed,
  and Pollux's carried state (``pollux.json``), so a restarted controller continues
  the policy's cycles.
* :class:`HintReaders`: one :class:`~goodput_jax.measure.calculator.GoodputCalculator`
  per job, reading its latest hints; closed (and the SQLite store's write-ahead log
  folded in, :func:`checkpoint_store`) when the job ends.

Example:
    >>> import tempfile
    >>> book = StateBook(tempfile.mkdtemp())
    >>> book.state.jobs, book.read_carry() is None
    ({}, True)
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from goodput_jax.cluster.record import ClusterState, JobRecord, read_state
from goodput_jax.cluster.state import StateDir

logger = logging.getLogger(__name__)

__all__ = ["HintReaders", "StateBook", "checkpoint_store", "one_line"]


def one_line(e: BaseException | str) -> str:
    """The last non-empty line of an error's text (at most 300 characters).

    Example:
        >>> one_line(ValueError("Traceback ...\\n  bad value\\n"))
        'bad value'
    """
    text = str(e).strip().splitlines()
    last = [ln for ln in text if ln.strip()]
    msg = last[-1].strip() if last else type(e).__name__
    return msg[:300]


def checkpoint_store(url: str) -> bool:
    """Fold a SQLite goodput store's write-ahead log into its database file
    (``PRAGMA wal_checkpoint(TRUNCATE)``), so the ``.db`` file alone holds every
    event; True when done (False: not a SQLite file, none there, or busy)."""
    if not isinstance(url, str) or not url.startswith("sqlite:///"):
        return False
    path = url[len("sqlite:///"):]
    if not os.path.exists(path):
        return False
    import sqlite3

    try:
        conn = sqlite3.connect(path, timeout=5.0)
        try:
            busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error as e:
        logger.warning("store %s: checkpoint failed: %s", path, e)
        return False
    return busy == 0


class StateBook:
    """``controller.json`` and ``pollux.json`` of one state directory.

    ``state`` is what was saved when the book was opened (empty for a new cluster);
    :meth:`write` saves a new state only when it differs from the last one written.
    """

    def __init__(self, root: str, node_mtbf_s: float | None = None):
        from goodput_jax.cluster.checkpointing import NodeLossBook, reliability_path

        self.sd = StateDir(root)
        self.state = read_state(self.sd.root)
        self._written: str | None = None
        #: the cluster's node losses and node time (``reliability.json``), which the
        #: jobs' checkpoint interval follows (:mod:`goodput_jax.cluster.checkpointing`)
        self.reliability_path = reliability_path(self.sd.root)
        self.losses = NodeLossBook.from_json(self.sd.read_json(self.reliability_path),
                                             node_mtbf_s)
        self._losses_at = (-1, -float("inf"))

    def observe_nodes(self, live: list[str], now: float, lost: set[str]) -> None:
        """Count node time and losses; ``reliability.json`` is written at a loss and
        at most every 30 s otherwise."""
        self.losses.observe(live, now, lost)
        count, at = self._losses_at
        if self.losses.losses != count or now - at >= 30.0:
            self.sd.write_json(self.reliability_path, self.losses.to_json())
            self._losses_at = (self.losses.losses, now)

    @property
    def carry_path(self) -> str:
        """Where Pollux's carried state (:class:`~goodput_jax.sched.pollux.PolluxCarry`)
        is saved after each round, so that a restarted controller decides as one that
        never stopped."""
        return os.path.join(self.sd.root, "pollux.json")

    def read_carry(self) -> Any:
        """Pollux's saved carry, or None (none saved, or a damaged file: start afresh)."""
        data = self.sd.read_json(self.carry_path)
        if data is None:
            return None
        from goodput_jax.sched.pollux import PolluxCarry

        try:
            return PolluxCarry.from_json(data)
        except ValueError as e:
            logger.warning("ignoring %s: %s", self.carry_path, one_line(e))
            return None

    def save_carry(self, policy: Any) -> None:
        """Save ``policy``'s carry when it is a PolluxPolicy (Sia carries nothing)."""
        from goodput_jax.sched.pollux import PolluxPolicy

        if isinstance(policy, PolluxPolicy):
            self.sd.write_json(self.carry_path, policy.carry().to_json())

    def take_requests(self) -> tuple[list[tuple[str, str, Any]], list[str],
                                     list[tuple[str, Any]]]:
        """What clients left in the state directory: ``(submitted, cancels, moves)``.

        ``submitted``: ``(path, job name, spec JSON)`` per inbox file (the caller
        removes the file once the job is saved); ``cancels``: job names;
        ``moves``: ``(job name, allocation)``. Cancel and move requests are removed.
        """
        import glob

        sd = self.sd
        submitted = []
        for path in sorted(glob.glob(os.path.join(sd.inbox, "*.json"))):
            data = sd.read_json(path)
            default = os.path.basename(path)[:-5]
            name = data.get("name", default) if isinstance(data, dict) else default
            submitted.append((path, name, data))
        cancels = []
        for path in sorted(glob.glob(os.path.join(sd.requests, "cancel-*"))):
            cancels.append(os.path.basename(path)[len("cancel-"):])
            os.remove(path)
        moves = []
        for path in sorted(glob.glob(os.path.join(sd.requests, "reallocate-*.json"))):
            data = sd.read_json(path) or {}
            os.remove(path)
            moves.append((os.path.basename(path)[len("reallocate-"):-len(".json")],
                          data.get("allocation", []) if isinstance(data, dict) else []))
        return submitted, cancels, moves

    def fence(self, name: str, attempt: int) -> None:
        """Before launch ``attempt`` of job ``name``: clear its stop request (served, or
        moot) and write the attempt number to ``jobs/NAME/attempt``, the fence that
        :meth:`~goodput_jax.cluster.context.JobContext.is_current` reads."""
        from goodput_jax.adaptive.stop import StopRequest

        jd = self.sd.job_dir(name)
        os.makedirs(jd, exist_ok=True)
        StopRequest(self.sd.stop_path(name)).clear()
        with open(os.path.join(jd, "attempt.tmp"), "w") as fh:
            fh.write(str(attempt))
        os.replace(os.path.join(jd, "attempt.tmp"), os.path.join(jd, "attempt"))

    def write(self, state: ClusterState) -> bool:
        """Write ``controller.json`` if ``state`` (less its time) changed; True if written."""
        data = state.to_json()
        updated = data.pop("updated")
        text = json.dumps(data, sort_keys=True, default=str)
        if text == self._written:
            return False
        self.sd.write_json(self.sd.controller_path, {**data, "updated": updated})
        self._written = text
        return True


class HintReaders:
    """One goodput calculator per job, reading the hints it publishes to its store."""

    def __init__(self) -> None:
        self._calcs: dict[str, Any] = {}

    def hints(self, name: str, job: JobRecord) -> Any:
        """``job``'s latest :class:`~goodput_jax.model.hints.Hints`, or None (no store
        yet, nothing published, a store mid-write, malformed hints)."""
        spec = job.spec
        if spec is None or spec.store is None:
            return None
        store = spec.store
        if store.startswith("sqlite:///") and not os.path.exists(store[len("sqlite:///"):]):
            return None
        calc = self._calcs.get(name)
        if calc is None:
            from goodput_jax.measure.calculator import GoodputCalculator

            calc = self._calcs[name] = GoodputCalculator(name, store=store)
        try:
            raw = calc.get_latest_hints()
        except Exception as e:  # noqa: BLE001 - a store mid-write: next round
            logger.warning("job %s: hints not readable: %s", name, e)
            return None
        if raw is None:
            return None
        from goodput_jax.model.hints import Hints

        try:
            return Hints.from_json(raw)
        except (TypeError, ValueError) as e:
            logger.warning("job %s: malformed hints ignored: %s", name, e)
            return None

    def close(self, name: str, job: JobRecord | None = None) -> None:
        """Close the reader of ``name``'s store; with ``job``, also fold its SQLite
        store's write-ahead log into the database (the job has ended)."""
        calc = self._calcs.pop(name, None)
        if calc is not None:
            try:
                calc.store.close()
            except Exception as e:  # noqa: BLE001 - closing a reader
                logger.debug("close %s: %s", name, e)
        if job is not None and job.spec is not None and job.spec.store:
            checkpoint_store(job.spec.store)

    def close_all(self) -> None:
        """Close every reader (a controller handing over); the stores stay as they are."""
        for name in list(self._calcs):
            self.close(name)
