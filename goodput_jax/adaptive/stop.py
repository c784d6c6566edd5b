"""A cooperative "checkpoint and stop at the next step boundary" request.

A scheduler that wants a running job somewhere else (a new allocation, a node
going away) asks it to stop; the training loop polls the request at its step
boundaries, checkpoints and exits cleanly. AdaptDL does the same with a signal
handler that its data loader checks; here the request is a file (visible to a
job on another host through a shared filesystem), and optionally a signal.

* :meth:`StopRequest.request` (the scheduler's side) creates the file,
  atomically, with a reason.
* :meth:`StopRequest.should_stop` (the job's side) is one ``os.stat`` every
  ``check_every`` steps. In a multi-process JAX job every process must stop at
  the same step (a checkpoint is a collective), so the flag of process 0 is
  broadcast to all processes (one tiny cross-process collective per check).
* :meth:`StopRequest.install_signal_handler` turns ``SIGTERM`` (or another
  signal) into the same request, for launchers that signal instead.
* :meth:`StopRequest.clear` removes a served request before the job is relaunched
  (the cluster runtime's controller does it), so the new launch does not stop again.

Example:
    >>> import os, tempfile
    >>> stop = StopRequest(os.path.join(tempfile.mkdtemp(), "stop"))
    >>> stop.should_stop(0)
    False
    >>> stop.request("reallocation")
    >>> stop.should_stop(1), stop.reason()
    (True, 'reallocation')
    >>> stop.clear(); stop.requested()
    False
"""

from __future__ import annotations

import os
import signal
import types
from typing import Any

__all__ = ["StopRequest"]


class StopRequest:
    """A file-backed stop request that a training loop polls at step boundaries.

    Args:
        path: the request file (its directory is created on :meth:`request`).
        check_every: look at the file every this many steps (>= 1); a stop is
            then seen at most ``check_every - 1`` steps late.
        multiprocess: broadcast process 0's answer to every JAX process
            (``None``: when ``jax.process_count() > 1``, only if JAX is loaded).

    Raises:
        ValueError / TypeError: a bad argument, named in the message.

    Example:
        >>> import tempfile, os
        >>> StopRequest(os.path.join(tempfile.mkdtemp(), "s"), check_every=10).should_stop(3)
        False
    """

    def __init__(self, path: str | os.PathLike, *, check_every: int = 1,
                 multiprocess: bool | None = None):
        if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
            raise TypeError(f"path ({path!r}) must be a non-empty path")
        if isinstance(check_every, bool) or not isinstance(check_every, int) or check_every < 1:
            raise ValueError(f"check_every ({check_every!r}) must be an int >= 1")
        self.path = os.fspath(path)
        self.check_every = check_every
        self._multiprocess = multiprocess
        self._signalled: str | None = None
        self._previous_handlers: dict[int, Any] = {}

    # ---------------------------------------------------------------- scheduler side
    def request(self, reason: str = "stop") -> None:
        """Ask the job to checkpoint and stop (atomic: write a temp file, rename).

        Example:
            >>> import tempfile, os
            >>> s = StopRequest(os.path.join(tempfile.mkdtemp(), "d", "stop"))
            >>> s.request("node draining"); s.reason()
            'node draining'
        """
        if not isinstance(reason, str):
            raise TypeError(f"reason ({reason!r}) must be a str")
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "w") as fh:
            fh.write(reason)
        os.replace(tmp, self.path)

    def clear(self) -> None:
        """Withdraw a request (the launcher clears a served one before relaunching)."""
        self._signalled = None
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass

    # ---------------------------------------------------------------- job side
    def requested(self) -> bool:
        """Whether a request is pending on this process (no collective)."""
        return self._signalled is not None or os.path.exists(self.path)

    def reason(self) -> str | None:
        """The pending request's reason, or None."""
        if self._signalled is not None:
            return self._signalled
        try:
            with open(self.path) as fh:
                return fh.read() or "stop"
        except FileNotFoundError:
            return None

    def _is_multiprocess(self) -> bool:
        if self._multiprocess is not None:
            return self._multiprocess
        import sys

        jax = sys.modules.get("jax")
        return jax is not None and jax.process_count() > 1

    def should_stop(self, step: int) -> bool:
        """Whether to checkpoint and stop now (call at a step boundary; every process).

        Looks only when ``step % check_every == 0``; in a multi-process job the
        answer is process 0's, broadcast, so all processes agree.

        Example:
            >>> import tempfile, os
            >>> s = StopRequest(os.path.join(tempfile.mkdtemp(), "s"), check_every=2)
            >>> s.request(); s.should_stop(1), s.should_stop(2)
            (False, True)
        """
        if isinstance(step, bool) or not isinstance(step, int):
            raise TypeError(f"step ({step!r}) must be an int")
        if step % self.check_every:
            return False
        flag = self.requested()
        if self._is_multiprocess():
            import numpy as np
            from jax.experimental import multihost_utils

            flag = bool(multihost_utils.broadcast_one_to_all(np.int32(flag)))
        return flag

    def install_signal_handler(self, signum: int = signal.SIGTERM) -> None:
        """Turn ``signum`` into a stop request on this process (main thread only).

        Example:
            >>> import tempfile, os, signal
            >>> s = StopRequest(os.path.join(tempfile.mkdtemp(), "s"))
            >>> s.install_signal_handler(signal.SIGUSR1)
            >>> os.kill(os.getpid(), signal.SIGUSR1); s.requested()
            True
            >>> s.restore_signal_handlers()
        """

        def handler(sig: int, frame: types.FrameType | None) -> None:
            self._signalled = f"signal {signal.Signals(sig).name}"

        self._previous_handlers.setdefault(signum, signal.getsignal(signum))
        signal.signal(signum, handler)

    def restore_signal_handlers(self) -> None:
        """Put back the handlers :meth:`install_signal_handler` replaced."""
        for signum, old in self._previous_handlers.items():
            signal.signal(signum, old)
        self._previous_handlers.clear()

    def __repr__(self) -> str:
        return f"StopRequest({self.path!r}, check_every={self.check_every})"
