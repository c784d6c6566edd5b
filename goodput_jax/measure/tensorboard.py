"""TensorBoard event files for the monitor: local directories and object stores.

:class:`ScalarEventWriter` writes ``simple_value`` scalars to one event file (opened
lazily, thread-safe) under a local ``tensorboard_dir`` with TensorBoard's own
``EventFileWriter``, or under ``gs://...`` through fsspec/gcsfs (:class:`RemoteEventFile`),
without TensorFlow. :func:`check_tensorboard_dir` validates a remote directory before
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

import logging
import os
import threading
import time
from collections.abc import Iterable, Mapping

_log = logging.getLogger("goodput_jax.measure.monitor")

__all__ = ["RemoteEventFile", "ScalarEventWriter", "check_tensorboard_dir"]


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
    path = tensorboard_dir[len("file://"):] if tensorboard_dir.startswith("file://") \
        else tensorboard_dir
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


class RemoteEventFile:
    """An event file on an object store (``gs://``), written through fsspec.

    Objects there cannot be appended to, so the records are kept in a local spool
    file and each flush uploads the whole file again (what TensorFlow's GCS file
    system does); past ``max_bytes`` the next record starts a new event file, so an
    upload stays bounded.
    """

    def __init__(self, logdir: str, suffix: str, max_bytes: int = 8 << 20):
        import socket
        import tempfile

        import fsspec

        self.logdir = logdir.rstrip("/")
        self._suffix = suffix
        self._max_bytes = max_bytes
        self._fs, _ = fsspec.core.url_to_fs(self.logdir)
        self._host = socket.gethostname()
        self._tempfile = tempfile
        self._seq = 0
        self._spool = None
        self._dirty = False
        self.file_name = ""
        self._new_file()

    def _new_file(self) -> None:
        from tensorboard.compat.proto import event_pb2
        from tensorboard.summary.writer.record_writer import RecordWriter

        if self._spool is not None:
            self.flush()
            self._spool.close()
        self._seq += 1
        self.file_name = (f"{self.logdir}/events.out.tfevents.{int(time.time()):010d}."
                          f"{self._host}.{os.getpid()}.{self._seq}{self._suffix}")
        self._spool = self._tempfile.TemporaryFile(prefix="goodput_jax_tb_")
        self._records = RecordWriter(self._spool)
        self._records.write(event_pb2.Event(wall_time=time.time(),
                                            file_version="brain.Event:2").SerializeToString())
        self._dirty = True
        self.flush()

    def add_event(self, event) -> None:
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
    """Thread-safe scalar writer on one TensorBoard event file (opened lazily)."""

    def __init__(self, logdir: str, flush_secs: float = 5.0):
        self.logdir = logdir
        self._flush_secs = flush_secs
        self._lock = threading.Lock()
        self._writer = None
        self._closed = False
        self.file_name: str | None = None

    def write(self, step: int, values: Mapping[str, float], wall_time: float) -> int:
        if not values:
            return 0
        from tensorboard.compat.proto import event_pb2, summary_pb2

        summary = summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag=t, simple_value=float(v)) for t, v in values.items()]
        )
        event = event_pb2.Event(wall_time=wall_time, step=int(step), summary=summary)
        with self._lock:
            if self._closed:
                return 0  # a late poll of an uploader that outlived its stop timeout
            self._open()
            self._writer.add_event(event)
            self.file_name = getattr(self._writer, "file_name", self.file_name)
        return len(values)

    def write_series(self, tag: str, points: Iterable[tuple[int, float]], wall_time: float) -> int:
        from tensorboard.compat.proto import event_pb2, summary_pb2

        n = 0
        with self._lock:
            if self._closed:
                return 0
            self._open()
            for step, value in points:
                summary = summary_pb2.Summary(
                    value=[summary_pb2.Summary.Value(tag=tag, simple_value=float(value))]
                )
                self._writer.add_event(
                    event_pb2.Event(wall_time=wall_time, step=int(step), summary=summary)
                )
                n += 1
        return n

    def _open(self) -> None:
        if self._writer is None and _protocol(self.logdir) is not None:
            self._writer = RemoteEventFile(self.logdir, ".goodput_jax")
            self.file_name = self._writer.file_name
        if self._writer is None:
            from tensorboard.summary.writer.event_file_writer import EventFileWriter

            writer = EventFileWriter(
                self.logdir, max_queue_size=1000, flush_secs=self._flush_secs,
                filename_suffix=".goodput_jax",
            )
            name = writer._file_name if hasattr(writer, "_file_name") else None
            if name is not None and "://" not in self.logdir:
                real_dir = os.path.realpath(self.logdir)
                if os.path.commonpath([real_dir, os.path.realpath(name)]) != real_dir:
                    writer.close()
                    raise ValueError(
                        f"tensorboard event file {name!r} would be outside "
                        f"tensorboard_dir ({self.logdir!r})"
                    )
            self.file_name = name
            self._writer = writer

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
