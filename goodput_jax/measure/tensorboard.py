"""TensorBoard event files for the monitor: local directories and object stores.

:class:`ScalarEventWriter` writes ``simple_value`` scalars to one event file (opened
lazily, thread-safe) under a local ``tensorboard_dir`` (:class:`LocalEventFile`), or under
``gs://...`` through fsspec/gcsfs (:class:`RemoteEventFile`), without TensorFlow. Both
name their file themselves (``events.out.tfevents.<time>.<host>.<pid>.<n>.goodput_jax``,
the name TensorBoard's own writer gives) and write its records with TensorBoard's public
``RecordWriter``. :func:`check_tensorboard_dir` validates a remote directory before
anything is written.

Example:
    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> w = ScalarEventWriter(d)
    >>> w.write(1, {"goodput/total": 50.0}, wall_time=0.0)
    1
    >>> w.close()
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

_log = logging.getLogger("goodput_jax.measure.monitor")

__all__ = ["LocalEventFile", "RemoteEventFile", "ScalarEventWriter", "check_tensorboard_dir",
           "event_file_name"]


_REMOTE_PACKAGES = {"gs": ("gcsfs", "gcp"), "gcs": ("gcsfs", "gcp")}


def _protocol(path: str) -> str | None:
    head, sep, _ = path.partition("://")
    return head.lower() if sep and head.lower() != "file" else None


def check_tensorboard_dir(tensorboard_dir: str) -> str | None:
    """Validate ``tensorboard_dir`` before anything is written: a local directory must
    be creatable and writable (checked without creating anything), a remote one
    (``gs://...``) needs its file system's package.

    Returns:
        The protocol (``"gs"``), or None for a local directory.

    Raises:
        ValueError: a local directory that cannot be written (a path component is a
            file, no write permission, a read-only file system), naming
            ``tensorboard_dir`` and its value.
        ImportError: the file system's package is missing (e.g. ``gcsfs`` for
            ``gs://``: ``pip install 'goodput-jax[gcp]'``).

    Example:
        >>> check_tensorboard_dir("/tmp/tb") is None
        True
    """
    proto = _protocol(tensorboard_dir)
    if proto is None:
        _check_local_dir(tensorboard_dir)
        return None
    pkg, extra = _REMOTE_PACKAGES.get(proto, (None, None))
    try:
        if pkg is not None:
            __import__(pkg)
        import fsspec

        fsspec.get_filesystem_class(proto)
    except (ImportError, ValueError) as e:
        need = f"{pkg} (pip install 'goodput-jax[{extra}]')" if pkg else "an fsspec file system"
        raise ImportError(f"tensorboard_dir ({tensorboard_dir!r}) needs {need} to write "
                          f"{proto}:// event files: {e}") from None
    return proto


def _check_local_dir(tensorboard_dir: str) -> None:
    path = tensorboard_dir.removeprefix("file://")
    probe = os.path.abspath(os.path.expanduser(path))
    while not os.path.lexists(probe):  # the nearest existing ancestor: created from there
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    why = None
    if not os.path.isdir(probe):
        why = f"{probe!r} is not a directory"
    elif not os.access(probe, os.W_OK | os.X_OK):
        why = f"no permission to write in {probe!r}"
    else:
        try:
            if os.statvfs(probe).f_flag & os.ST_RDONLY:
                why = f"{probe!r} is on a read-only file system"
        except OSError as e:  # pragma: no cover - depends on the platform
            why = f"{probe!r}: {e}"
    if why is not None:
        raise ValueError(f"tensorboard_dir ({tensorboard_dir!r}) is not writable: {why}")


_SEQ = itertools.count(1)  # this process's event files, numbered (names never repeat)


def event_file_name(logdir: str, suffix: str = ".goodput_jax") -> str:
    """A new event file's path in ``logdir``, named as TensorBoard's writer names them:
    ``events.out.tfevents.<unix time>.<host>.<pid>.<n><suffix>`` (``n`` counts this
    process's files, so two monitors never share one).

    Example:
        >>> event_file_name("/tmp/tb").startswith("/tmp/tb/events.out.tfevents.")
        True
    """
    return (f"{logdir.rstrip('/')}/events.out.tfevents.{int(time.time()):010d}."
            f"{socket.gethostname()}.{os.getpid()}.{next(_SEQ)}{suffix}")


class _EventFile(Protocol):
    file_name: str

    def add_event(self, event: Any) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


def _first_event() -> Any:
    from tensorboard.compat.proto import event_pb2

    return event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2")


class LocalEventFile:
    """An event file in a local directory (created), written with TensorBoard's
    ``RecordWriter``; the file is created exclusively, so an existing one is never
    overwritten.

    Raises:
        ValueError: the file would be outside ``logdir`` (a symlinked name).
    """

    def __init__(self, logdir: str, suffix: str):
        from tensorboard.summary.writer.record_writer import RecordWriter

        path = logdir.removeprefix("file://")
        os.makedirs(path, exist_ok=True)
        self.file_name = event_file_name(path, suffix)
        real_dir = os.path.realpath(path)
        if os.path.commonpath([real_dir, os.path.realpath(self.file_name)]) != real_dir:
            raise ValueError(f"tensorboard event file {self.file_name!r} would be outside "
                             f"tensorboard_dir ({logdir!r})")
        self._file = open(self.file_name, "xb")  # noqa: SIM115 - closed by close()
        self._records = RecordWriter(self._file)
        self.add_event(_first_event())
        self.flush()

    def add_event(self, event: Any) -> None:
        """Append one ``Event`` record (written at the next :meth:`flush`).

        ``Any``: Google's or MaxText's objects (a ``google.cloud.logging`` logger, a MaxText
        config, an orbax manager) from libraries without type information, duck-typed as their
        code does.
        """
        self._records.write(event.SerializeToString())

    def flush(self) -> None:
        """Write the appended records to the file."""
        self._file.flush()

    def close(self) -> None:
        """Flush and close the file. Idempotent."""
        if not self._file.closed:
            self._file.flush()
            self._file.close()


class RemoteEventFile:
    """An event file on an object store (``gs://``), written through fsspec.

    Objects there cannot be appended to, so the records are kept in a local spool
    file and each flush uploads the whole file again (what TensorFlow's GCS file
    system does); past ``max_bytes`` the next record starts a new event file, so an
    upload stays bounded.
    """

    def __init__(self, logdir: str, suffix: str, max_bytes: int = 8 << 20):
        import tempfile

        import fsspec

        self.logdir = logdir.rstrip("/")
        self._suffix = suffix
        self._max_bytes = max_bytes
        self._fs, _ = fsspec.core.url_to_fs(self.logdir)
        self._tempfile = tempfile
        self._spool: Any = None
        self._dirty = False
        self.file_name = ""
        self._new_file()

    def _new_file(self) -> None:
        from tensorboard.summary.writer.record_writer import RecordWriter

        if self._spool is not None:
            self.flush()
            self._spool.close()
        self.file_name = event_file_name(self.logdir, self._suffix)
        self._spool = self._tempfile.TemporaryFile(prefix="goodput_jax_tb_")
        self._records = RecordWriter(self._spool)
        self._records.write(_first_event().SerializeToString())
        self._dirty = True
        self.flush()

    def add_event(self, event: Any) -> None:
        """``Any``: Google's or MaxText's objects (a ``google.cloud.logging`` logger, a MaxText
        config, an orbax manager) from libraries without type information, duck-typed as their
        code does.
        """
        if self._spool.tell() >= self._max_bytes:
            self._new_file()
        self._records.write(event.SerializeToString())
        self._dirty = True

    def flush(self) -> None:
        if not self._dirty:
            return
        self._spool.flush()
        self._spool.seek(0)
        data = self._spool.read()
        self._fs.pipe_file(self.file_name, data)
        self._dirty = False

    def close(self) -> None:
        if self._spool is None:
            return
        try:
            self.flush()
        except Exception as e:  # noqa: BLE001 - a failed last upload must not fail close()
            _log.warning("goodput monitor: last upload of %s failed: %s: %s", self.file_name,
                         type(e).__name__, e)
        finally:
            self._spool.close()
            self._spool = None


class ScalarEventWriter:
    """Thread-safe scalar writer on one TensorBoard event file (opened lazily at the first
    write; records reach the file at :meth:`flush`)."""

    def __init__(self, logdir: str):
        self.logdir = logdir
        self._lock = threading.Lock()
        self._writer: _EventFile | None = None
        self._closed = False
        self.file_name: str | None = None

    def write(self, step: int, values: Mapping[str, float], wall_time: float) -> int:
        if not values:
            return 0
        from tensorboard.compat.proto import event_pb2, summary_pb2

        summary = summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag=t, simple_value=float(v))
                   for t, v in values.items()]
        )
        event = event_pb2.Event(wall_time=wall_time, step=int(step), summary=summary)
        with self._lock:
            if self._closed:
                return 0  # a late poll of an uploader that outlived its stop timeout
            writer = self._open()
            writer.add_event(event)
            self.file_name = writer.file_name  # a remote file rolls over to a new one
        return len(values)

    def write_series(self, tag: str, points: Iterable[tuple[int, float]], wall_time: float) -> int:
        from tensorboard.compat.proto import event_pb2, summary_pb2

        n = 0
        with self._lock:
            if self._closed:
                return 0
            writer = self._open()
            for step, value in points:
                summary = summary_pb2.Summary(
                    value=[summary_pb2.Summary.Value(tag=tag, simple_value=float(value))]
                )
                writer.add_event(
                    event_pb2.Event(wall_time=wall_time, step=int(step), summary=summary)
                )
                n += 1
        return n

    def _open(self) -> _EventFile:
        if self._writer is None:
            self._writer = (RemoteEventFile(self.logdir, ".goodput_jax")
                            if _protocol(self.logdir) is not None
                            else LocalEventFile(self.logdir, ".goodput_jax"))
            self.file_name = self._writer.file_name
        return self._writer

    def flush(self) -> None:
        with self._lock:
            if self._writer is not None and not self._closed:
                self._writer.flush()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._writer is not None:
                self._writer.close()
