"""The Python API: ``submit``, ``status``, ``cancel``, ``reallocate``, ``logs``.

The controller owns the cluster; a client reaches it one of two ways:

* **by address** (``ClusterClient(address="ray://HEAD:10001")`` or a GCS address
  ``HOST:6379``): it connects to Ray and calls the controller actor (named
  ``goodput_jax_controller`` in the ``goodput_jax`` namespace). Nothing is shared
  with the head but the connection: the controller validates the spec against
  the live nodes and fills in its defaults, and logs come back over Ray.
* **by state directory** (``ClusterClient("/path/to/state")``): files in the
  cluster's state directory (:mod:`goodput_jax.cluster.state`), no Ray connection
  (a client on the same machine, or outside the local cluster's sandbox). ``submit``
  validates the spec against the capacity the controller last wrote and fills in
  the job's defaults, before anything is written.

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

import logging
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from goodput_jax.cluster.record import JobRecord, JobStatus, read_state
from goodput_jax.cluster.spec import Capacity, JobSpec, validate
from goodput_jax.cluster.state import StateDir

if TYPE_CHECKING:  # (Ray is imported when a client connects)
    from ray.actor import ActorHandle

__all__ = ["ClusterClient", "JobSpec", "connect"]

#: Job states after which nothing more happens.
TERMINAL = ("finished", "failed", "cancelled")


class ClusterClient:
    """Submit, watch, move and cancel jobs of a cluster (by address or state directory).

    Args:
        state_dir: the cluster's state directory (``goodput-jax cluster up --state-dir``).
        address: the Ray cluster's address (``ray://HOST:10001`` or ``HOST:PORT`` of its
            GCS); the client then talks to the controller actor over Ray only.

    Raises:
        ValueError: neither or both given, or an address where no cluster (or no
            controller) answers, in one line.
    """

    def __init__(self, state_dir: str | os.PathLike[str] | None = None, *,
                 address: str | None = None):
        if (state_dir is None) == (address is None):
            raise ValueError("ClusterClient needs a state_dir or an address (one of them)")
        self.address = address
        self.sd = StateDir(state_dir) if state_dir is not None else None
        self._actor: ActorHandle[Any] | None = None
        if address is not None:
            self._actor = connect(address)

    def _dir(self) -> StateDir:
        """The state directory (a client by address reaches none: its calls go over Ray)."""
        if self.sd is None:
            raise ValueError(f"this client reaches the cluster at {self.address!r} over Ray "
                             f"and has no state directory")
        return self.sd

    # ------------------------------------------------------------------ remote
    def _call(self, method: str, *args: Any) -> Any:
        import ray

        for attempt in range(30):  # a controller restarting answers again in seconds
            try:
                return ray.get(getattr(self._actor, method).remote(*args), timeout=120)
            except ray.exceptions.RayTaskError as e:
                cause = e.cause
                if isinstance(cause, (KeyError, ValueError, TypeError)):
                    raise cause from None
                raise
            except (ray.exceptions.ActorUnavailableError, ray.exceptions.ActorDiedError):
                if attempt == 29:
                    raise
                time.sleep(1.0)
        raise AssertionError("unreachable")

    def capacity(self) -> Capacity | None:
        """The cluster's capacity (as the controller last saw it; None before it started)."""
        if self._actor is not None:
            cap = self._call("capacity")
            return Capacity({t: tuple(v) for t, v in cap.items()}) if cap else None
        sd = self._dir()
        data = sd.read_json(sd.cluster_path)
        if not data:
            return None
        return Capacity({t: tuple(v) for t, v in data["capacity"].items()})

    def submit(self, spec: JobSpec) -> str:
        """Validate ``spec`` (against the capacity, when known) and queue it; returns its name.

        Raises:
            ValueError / TypeError: a spec that cannot run, in one line (nothing written).
        """
        if not isinstance(spec, JobSpec):
            raise TypeError(f"spec must be a JobSpec, got {type(spec).__name__}")
        if self._actor is not None:
            return self._call("submit", spec.to_json())
        validate(spec, self.capacity())
        if self._known(spec.name):
            raise ValueError(f"name ({spec.name!r}) is already submitted")
        sd = self._dir()
        spec = sd.fill_defaults(spec)
        sd.write_json(os.path.join(sd.inbox, f"{spec.name}.json"), spec.to_json())
        return spec.name

    def _known(self, name: str) -> bool:
        sd = self._dir()
        return name in read_state(sd.root).jobs or \
            os.path.exists(os.path.join(sd.inbox, f"{name}.json"))

    def records(self) -> dict[str, JobRecord]:
        """Every job as a typed :class:`~goodput_jax.cluster.record.JobRecord`, by name
        (submitted ones not yet taken in have status ``submitted``)."""
        return {n: JobRecord.from_json(j, n) for n, j in self.status().items()}

    def status(self, name: str | None = None) -> dict[str, Any]:
        """One job's record as JSON (``status``, ``allocation``, ``attempt``, ``restarts``,
        ``failures``, ``error``, ``events``, ``launches`` ...), or all of them by name
        (``Any``: JSON values; :meth:`records` gives typed ones).

        A job the controller has not taken in yet has status ``"submitted"``.

        Raises:
            KeyError: no such job.
        """
        if self._actor is not None:
            jobs = self._call("jobs")
        else:
            sd = self._dir()
            jobs = {n: r.to_json() for n, r in read_state(sd.root).jobs.items()}
            inbox = sd.inbox
            if os.path.isdir(inbox):
                for fn in os.listdir(inbox):
                    if fn.endswith(".json") and fn[:-5] not in jobs:
                        rec = JobRecord(fn[:-5], None, JobStatus.SUBMITTED)
                        jobs[fn[:-5]] = rec.to_json()
        if name is None:
            return jobs
        if name not in jobs:
            raise KeyError(f"job ({name!r}) is not known to the cluster at {self._where}")
        return jobs[name]

    @property
    def _where(self) -> str:
        return self.address if self.address is not None else self._dir().root

    def cancel(self, name: str) -> None:
        """Ask the controller to stop ``name`` (its checkpoints stay).

        Raises:
            KeyError: no such job.
        """
        if self._actor is not None:
            self._call("cancel", name)
            return
        self.status(name)
        sd = self._dir()
        os.makedirs(sd.requests, exist_ok=True)
        with open(sd.cancel_path(name), "w") as fh:
            fh.write("cancel")

    def reallocate(self, name: str, allocation: list[str]) -> str:
        """Move ``name`` to ``allocation`` (node labels, one per replica) by hand.

        By address, returns what the controller did (see
        :meth:`goodput_jax.cluster.controller.Controller.reallocate`); by state
        directory, ``"requested"`` (the controller acts at its next tick).

        Raises:
            KeyError / ValueError: an unknown job, node or a job that is not active,
                in one line; nothing is changed.
        """
        if isinstance(allocation, str) or not all(isinstance(a, str) for a in allocation):
            raise TypeError(f"allocation ({allocation!r}) must be a list of node labels")
        if self._actor is not None:
            return self._call("reallocate", name, list(allocation))
        job = self.status(name)
        if job["status"] not in ("queued", "running", "stopping", "retrying"):
            raise ValueError(f"job ({name!r}) is {job['status']}, not active")
        sd = self._dir()
        nodes = {n["label"] for n in (sd.read_json(sd.cluster_path) or {}).get("nodes", [])}
        bad = [n for n in allocation if n not in nodes]
        if bad:
            raise ValueError(f"allocation: unknown node {bad[0]!r} (the cluster has: "
                             f"{', '.join(sorted(nodes)) or 'none'})")
        sd.write_json(sd.reallocate_path(name), {"allocation": list(allocation)})
        return "requested"

    def logs(self, name: str, attempt: int | None = None, rank: int = 0) -> str:
        """The output of one process of one launch (default: the latest launch, rank 0)."""
        if self._actor is not None:
            return self._call("logs", name, attempt, rank)
        job = self.status(name)
        attempt = job.get("attempt", -1) if attempt is None else attempt
        if attempt is None or attempt < 0:
            return ""
        try:
            with open(self._dir().log_path(name, attempt, rank)) as fh:
                return fh.read()
        except FileNotFoundError:
            return ""

    def progress(self, name: str) -> list[dict]:
        """The job's progress log (steps, saves, restores, stops, per attempt; state
        directory only)."""
        if self.sd is None:
            raise ValueError("progress: read from the state directory (this client has "
                             "only an address)")
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
        if self.sd is None:
            raise ValueError("down: a cluster started by 'up' is stopped through its "
                             "state directory")
        os.makedirs(self.sd.requests, exist_ok=True)
        with open(self.sd.down_path(), "w") as fh:
            fh.write("down")


def _reachable(address: str, timeout: float = 3.0) -> None:
    import socket

    hostport = address[len("ray://"):] if address.startswith("ray://") else address
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"address ({address!r}) must be HOST:PORT or ray://HOST:PORT")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as e:
        raise ValueError(f"address ({address!r}): no cluster answers there "
                         f"({e.strerror or e})") from None


def connect(address: str) -> ActorHandle[Any]:
    """Connect this process to the Ray cluster at ``address`` (once) and return the
    controller actor's handle (``ActorHandle[Any]``: its methods are called through
    ``.remote`` and answer JSON).

    In a network namespace with only loopback it first has Ray take 127.0.0.1 as its
    node IP (:func:`goodput_jax.cluster.local.loopback_node_ip`, when Ray is not imported
    yet), so Ray prints no "Failed to determine local IP" line.

    Raises:
        ValueError: nothing answers at ``address``, or no controller runs there (one line).
    """
    from goodput_jax.cluster.local import loopback_node_ip

    if "ray" not in sys.modules:  # Ray reads it on import: no node-IP probe without a route
        loopback_node_ip()
    import ray

    from goodput_jax.cluster.launch import NAMESPACE

    if not isinstance(address, str) or not address:
        raise ValueError(f"address ({address!r}) must be HOST:PORT or ray://HOST:PORT")
    if not ray.is_initialized():
        _reachable(address)
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        try:
            ray.init(address=address, namespace=NAMESPACE, log_to_driver=False,
                     logging_level=logging.WARNING, configure_logging=True)
        except (ConnectionError, RuntimeError) as e:
            raise ValueError(f"address ({address!r}): cannot connect: "
                             f"{str(e).strip().splitlines()[0] if str(e).strip() else e}") \
                from None
    from goodput_jax.cluster.controller import CONTROLLER_NAME

    try:
        return ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)
    except ValueError:
        raise ValueError(f"address ({address!r}): no goodput_jax controller runs on that "
                         f"cluster") from None
