"""The monitor's background threads: named uploaders, each polling on its interval.

:class:`Uploader` is one daemon thread (poll, wait, repeat; a final poll on stop);
:class:`Uploaders` keeps a monitor's named uploaders: start one at most once, stop each
within a timeout (a thread that outlives it is left behind as a daemon), count and log
each poll's exception and keep going.

Example:
    >>> ups = Uploaders("doc")
    >>> calls = []
    >>> ups.start("goodput", 3600.0, lambda: calls.append(1))
    True
    >>> ups.stop("goodput", 5.0)
    True
    >>> len(calls)  # the first poll and the final one
    2
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["Uploader", "Uploaders"]

_log = logging.getLogger("goodput_jax.measure.monitor")


class Uploader:
    """One background thread: poll, wait ``interval``, repeat; a final poll on stop."""

    def __init__(self, name: str, interval: float, poll: Callable[[], object],
                 on_error: Callable[[str, BaseException], None]):
        self.name = name
        self.interval = interval
        self._poll = poll
        self._on_error = on_error
        self._stop = threading.Event()
        self.final = True
        self.thread = threading.Thread(target=self._run, name=f"goodput-monitor-{name}",
                                       daemon=True)
        self.polls = 0

    def _safe_poll(self) -> None:
        try:
            self._poll()
        except Exception as e:  # noqa: BLE001 - logged and counted; the uploader keeps going
            self._on_error(self.name, e)
        finally:
            self.polls += 1

    def _run(self) -> None:
        while True:
            self._safe_poll()
            if self._stop.wait(self.interval):
                break
        if self.final:
            self._safe_poll()  # the final upload

    def start(self) -> None:
        """Start the thread (its first poll runs at once)."""
        self.thread.start()

    def stop(self, timeout: float, final: bool = True) -> bool:
        """Stop after a final poll (unless not ``final``); True if the thread ended in time."""
        self.final = final
        self._stop.set()
        self.thread.join(timeout)
        return not self.thread.is_alive()


class Uploaders:
    """A monitor's named uploaders, and the errors of their polls.

    Args:
        owner: named in the log lines.
    """

    def __init__(self, owner: str = "goodput monitor"):
        self.owner = owner
        self._lock = threading.Lock()
        self._running: dict[str, Uploader] = {}
        self.closed = False
        #: polls that raised (each is logged)
        self.poll_errors = 0
        self.last_error: str | None = None

    def on_error(self, name: str, exc: BaseException) -> None:
        """Count and log a poll's exception (with its traceback the first time)."""
        with self._lock:
            self.poll_errors += 1
            first = self.poll_errors == 1
        self.last_error = f"{type(exc).__name__}: {exc}"
        if first:
            _log.warning("%s: %s upload failed; will retry", self.owner, name, exc_info=exc)
        else:
            _log.warning("%s: %s upload failed (%s); will retry", self.owner, name,
                         self.last_error)

    def start(self, name: str, interval: float, poll: Callable[[], object]) -> bool:
        """Start uploader ``name``; False if it already runs.

        Raises:
            RuntimeError: after :meth:`close`.
        """
        with self._lock:
            if self.closed:
                raise RuntimeError("GoodputMonitor is closed")
            running = self._running.get(name)
            if running is not None and running.thread.is_alive():
                _log.info("%s: %s uploader already running", self.owner, name)
                return False
            up = Uploader(name, interval, poll, self.on_error)
            self._running[name] = up
            up.start()
        return True

    def stop(self, name: str, timeout: float, final: bool = True) -> bool:
        """Stop uploader ``name`` (after a final poll unless not ``final``); True if it
        ended within ``timeout`` or was not running."""
        with self._lock:
            up = self._running.pop(name, None)
        if up is None:
            return True
        done = up.stop(timeout, final)
        if not done:
            _log.warning("%s: %s uploader did not finish within %.3gs (the store may be "
                         "hanging); left it behind as a daemon thread", self.owner, name,
                         timeout)
        return done

    def names(self) -> list[str]:
        """The uploaders running (or left behind and not yet stopped)."""
        with self._lock:
            return list(self._running)

    def stop_all(self, timeout: float, stop: Callable[[str, float], bool]) -> bool:
        """Stop every uploader through ``stop(name, seconds left)``, sharing ``timeout``.
        True if each ended in time."""
        deadline = time.monotonic() + timeout
        ok = True
        for name in self.names():
            ok &= stop(name, max(0.0, deadline - time.monotonic()))
        return ok

    def close(self) -> bool:
        """Mark closed (no more starts); True the first time."""
        with self._lock:
            first = not self.closed
            self.closed = True
            return first
