"""The Python API: ``submit``, ``status``, ``cancel``, ``logs`` on a cluster's state directory.

The controller owns the cluster; a client talks to it through the state
directory (:mod:`goodput_jax.cluster.state`), so it needs no Ray connection
(it works from outside the cluster's network namespace, or from a laptop with
the directory mounted). ``submit`` validates the spec against the capacity the
controller last wrote and fills in the job's default checkpoint directory and
goodput store, before anything is written.

Example:
    >>> import tempfile
    >>> client = ClusterClient(tempfile.mkdtemp())
    >>> client.submit(JobSpec("j", "goodput_jax.cluster.examples:regression"))
    'j'
    >>> client.status("j")["status"]
    'submitted'
    >>> client.submit(JobSpec("j", "goodput_jax.cluster.examples:regression"))
    Traceback (most recent call last):
    ...
    ValueError: name ('j') is already submitted
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

from goodput_jax.cluster.spec import Capacity, JobSpec, validate
from goodput_jax.cluster.state import StateDir

__all__ = ["ClusterClient", "JobSpec"]

#: Job states after which nothing more happens.
TERMINAL = ("finished", "failed", "cancelled")


class ClusterClient:
    """Submit, watch and cancel jobs of the cluster whose state lives in ``state_dir``.

    Args:
        state_dir: the cluster's state directory (``goodput-jax cluster up --state-dir``).
    """

    def __init__(self, state_dir: str | os.PathLike):
        self.sd = StateDir(state_dir)

    def capacity(self) -> Capacity | None:
        """The cluster's capacity as the controller last wrote it (None before it started)."""
        data = self.sd.read_json(self.sd.cluster_path)
        if not data:
            return None
        return Capacity({t: tuple(v) for t, v in data["capacity"].items()})

    def submit(self, spec: JobSpec) -> str:
        """Validate ``spec`` (against the capacity, when known) and queue it; returns its name.

        Raises:
            ValueError / TypeError: a spec that cannot run, in one line.
        """
        validate(spec, self.capacity())
        if self._known(spec.name):
            raise ValueError(f"name ({spec.name!r}) is already submitted")
        spec = dataclasses.replace(
            spec, store=spec.store or self.sd.default_store(spec.name),
            checkpoint_dir=spec.checkpoint_dir or self.sd.default_checkpoint_dir(spec.name))
        self.sd.write_json(os.path.join(self.sd.inbox, f"{spec.name}.json"), spec.to_json())
        return spec.name

    def _known(self, name: str) -> bool:
        jobs = (self.sd.read_json(self.sd.controller_path, {}) or {}).get("jobs", {})
        return name in jobs or os.path.exists(os.path.join(self.sd.inbox, f"{name}.json"))

    def status(self, name: str | None = None) -> Any:
        """One job's record (``status``, ``allocation``, ``attempt``, ``restarts``,
        ``failures``, ``error``, ``events``, ``launches``), or all of them by name.

        A job the controller has not taken in yet has status ``"submitted"``.

        Raises:
            KeyError: no such job.
        """
        jobs = dict((self.sd.read_json(self.sd.controller_path, {}) or {}).get("jobs", {}))
        inbox = self.sd.inbox
        if os.path.isdir(inbox):
            for fn in os.listdir(inbox):
                if fn.endswith(".json") and fn[:-5] not in jobs:
                    jobs[fn[:-5]] = {"status": "submitted", "allocation": [], "attempt": -1,
                                     "restarts": 0, "failures": 0, "error": None}
        if name is None:
            return jobs
        if name not in jobs:
            raise KeyError(f"job ({name!r}) is not known to the cluster at {self.sd.root}")
        return jobs[name]

    def cancel(self, name: str) -> None:
        """Ask the controller to stop ``name`` (its checkpoints stay).

        Raises:
            KeyError: no such job.
        """
        self.status(name)
        os.makedirs(self.sd.requests, exist_ok=True)
        with open(self.sd.cancel_path(name), "w") as fh:
            fh.write("cancel")

    def logs(self, name: str, attempt: int | None = None, rank: int = 0) -> str:
        """The output of one process of one launch (default: the latest launch, rank 0)."""
        job = self.status(name)
        attempt = job.get("attempt", -1) if attempt is None else attempt
        if attempt is None or attempt < 0:
            return ""
        try:
            with open(self.sd.log_path(name, attempt, rank)) as fh:
                return fh.read()
        except FileNotFoundError:
            return ""

    def progress(self, name: str) -> list[dict]:
        """The job's progress log (steps, saves, restores, stops, per attempt)."""
        return self.sd.read_progress(name)

    def wait(self, names: list[str] | None = None, timeout: float = 600.0,
             poll: float = 0.5) -> dict:
        """Block until ``names`` (default: every job) are finished, failed or cancelled.

        Raises:
            TimeoutError: naming the jobs still running.
        """
        deadline = time.monotonic() + timeout
        while True:
            jobs = self.status()
            want = names if names is not None else list(jobs)
            left = [n for n in want if jobs.get(n, {}).get("status") not in TERMINAL]
            if not left:
                return {n: jobs[n] for n in want}
            if time.monotonic() > deadline:
                still = ", ".join(f"{n} ({jobs.get(n, {}).get('status')})" for n in left)
                raise TimeoutError(f"jobs still running after {timeout:.0f} s: {still}")
            time.sleep(poll)

    def request_down(self) -> None:
        """Ask a cluster started by ``goodput-jax cluster up`` to shut down."""
        os.makedirs(self.sd.requests, exist_ok=True)
        with open(self.sd.down_path(), "w") as fh:
            fh.write("down")
