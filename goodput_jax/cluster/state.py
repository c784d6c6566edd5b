"""The cluster runtime's state directory: the one place its parts meet.

::

    STATE_DIR/
      cluster.json           nodes and capacity, written by the controller each change
      controller.json        the controller's persisted state (jobs, allocations,
                             attempts, restarts, failures, history, rounds)
      inbox/NAME.json        submitted specs, taken in by the controller
      jax-cache/             the controller's persistent JAX compilation cache (the
                             policies' compiled programs; safe to delete)
      requests/cancel-NAME   cancel requests; requests/down: stop the cluster
      requests/reallocate-NAME.json  a move by hand ({"allocation": [labels]})
      jobs/NAME/             per job: ckpt/, goodput.db, stop, progress.jsonl,
                             log-ATTEMPT-RANK.txt

Every JSON file is written atomically (temp file + rename), so a reader never
sees half a file and a crash leaves the previous version.

Example:
    >>> import tempfile
    >>> sd = StateDir(tempfile.mkdtemp())
    >>> sd.write_json(sd.controller_path, {"jobs": {}})
    >>> sd.read_json(sd.controller_path)
    {'jobs': {}}
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from goodput_jax.cluster.spec import JobSpec

__all__ = ["StateDir"]


class StateDir:
    """Paths and atomic JSON I/O of one cluster's state directory.

    Args:
        root: the directory (created on first write).
    """

    def __init__(self, root: str | os.PathLike):
        if not isinstance(root, (str, os.PathLike)) or not os.fspath(root):
            raise TypeError(f"state_dir ({root!r}) must be a non-empty path")
        self.root = os.path.abspath(os.fspath(root))

    @property
    def cluster_path(self) -> str:
        return os.path.join(self.root, "cluster.json")

    @property
    def controller_path(self) -> str:
        return os.path.join(self.root, "controller.json")

    @property
    def compile_cache(self) -> str:
        return os.path.join(self.root, "jax-cache")

    @property
    def inbox(self) -> str:
        return os.path.join(self.root, "inbox")

    @property
    def requests(self) -> str:
        return os.path.join(self.root, "requests")

    def job_dir(self, name: str) -> str:
        return os.path.join(self.root, "jobs", name)

    def stop_path(self, name: str) -> str:
        return os.path.join(self.job_dir(name), "stop")

    def progress_path(self, name: str) -> str:
        return os.path.join(self.job_dir(name), "progress.jsonl")

    def log_path(self, name: str, attempt: int, rank: int) -> str:
        return os.path.join(self.job_dir(name), f"log-{attempt}-{rank}.txt")

    def default_checkpoint_dir(self, name: str) -> str:
        return os.path.join(self.job_dir(name), "ckpt")

    def default_store(self, name: str) -> str:
        return "sqlite:///" + os.path.join(self.job_dir(name), "goodput.db")

    def fill_defaults(self, spec: JobSpec) -> JobSpec:
        """``spec`` with its checkpoint directory and goodput store filled in (the one
        place the defaults are decided: ``jobs/NAME/ckpt`` and ``jobs/NAME/goodput.db``)."""
        import dataclasses

        return dataclasses.replace(
            spec, store=spec.store or self.default_store(spec.name),
            checkpoint_dir=spec.checkpoint_dir or self.default_checkpoint_dir(spec.name))

    def reallocate_path(self, name: str) -> str:
        return os.path.join(self.requests, f"reallocate-{name}.json")

    def down_path(self) -> str:
        return os.path.join(self.requests, "down")

    def cancel_path(self, name: str) -> str:
        return os.path.join(self.requests, f"cancel-{name}")

    @staticmethod
    def write_json(path: str, data: Any) -> None:
        """Write ``data`` as JSON atomically (``Any``: whatever ``json.dump`` takes)."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as fh:
            json.dump(data, fh, indent=1, sort_keys=True)
        os.replace(tmp, path)

    @staticmethod
    def read_json(path: str, default: Any = None) -> Any:
        """The JSON at ``path``, or ``default`` when there is none (``Any``: a JSON value,
        or whatever ``default`` is)."""
        try:
            with open(path) as fh:
                return json.load(fh)
        except FileNotFoundError:
            return default

    def read_progress(self, name: str) -> list[dict]:
        """The job's progress log (one dict per line; a torn last line is skipped)."""
        out = []
        try:
            with open(self.progress_path(name)) as fh:
                for line in fh:
                    try:
                        out.append(json.loads(line))
                    except json.JSONDecodeError:
                        continue
        except FileNotFoundError:
            pass
        return out
