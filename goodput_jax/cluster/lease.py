"""Launches that fence themselves: a process that loses its node's raylet or the head
for longer than a lease stops on its own.

When a node's raylet dies (or the node is cut off from the cluster), the controller
counts the node as lost and relaunches its jobs elsewhere; the processes it ran there
may live on (a network partition, a raylet killed while its workers survive). Saves
are fenced by :meth:`~goodput_jax.cluster.context.JobContext.is_current`, but the
devices, the logs and whatever else the job writes are not. So every process of a
launch holds a **lease**: a watchdog thread (:class:`Lease`, started by
:func:`~goodput_jax.cluster.runner.run_replica`) connects every ``lease / 4`` seconds
(at most every second) to its node's raylet and to the cluster's head (its GCS); a
target that has not accepted a connection for ``lease`` seconds ends the process and
every process it started (a data loader's workers, say: :func:`descendants`), after
one last line in its log saying why. Two launches of one job therefore never
train at once for longer than the lease (plus one check period, and one probe's
timeout where a partition drops packets instead of refusing them).

A listening port accepts connections however busy its process is (the kernel
completes them), so load does not break a lease; a restarted controller changes
neither the raylets nor the head, so it stops nothing.

Example:
    >>> t = [0.0]
    >>> up = {"127.0.0.1:1": True}
    >>> lease = Lease(["127.0.0.1:1"], 10.0, reach=lambda a: up[a], clock=lambda: t[0])
    >>> lease.check() is None
    True
    >>> up["127.0.0.1:1"] = False; t[0] = 9.0
    >>> lease.check() is None  # unreachable for 9 s: within the lease
    True
    >>> t[0] = 10.5
    >>> lease.check()
    '127.0.0.1:1 unreachable for 10.5 s (lease 10 s)'
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence

__all__ = ["EXIT_CODE", "Lease", "descendants", "reachable"]

#: The exit status of a process whose lease expired.
EXIT_CODE = 75


def reachable(address: str, timeout: float = 1.0) -> bool:
    """Whether ``host:port`` accepts a TCP connection within ``timeout`` seconds.

    Example:
        >>> reachable("127.0.0.1:1", timeout=0.2)  # nothing listens on port 1
        False
    """
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


class Lease:
    """A process's lease on the targets it needs (its raylet, the head).

    Args:
        targets: ``host:port`` addresses; each must accept a connection at least once
            every ``lease`` seconds.
        lease: seconds (> 0).
        reach: tells whether a target accepts a connection (:func:`reachable`).
        clock: monotonic seconds.
    """

    def __init__(self, targets: Sequence[str], lease: float, *,
                 reach: Callable[[str], bool] = reachable,
                 clock: Callable[[], float] = time.monotonic):
        if not (isinstance(lease, (int, float)) and lease > 0):
            raise ValueError(f"lease ({lease!r}) must be > 0 seconds")
        self.targets = [t for t in targets if t]
        self.lease = float(lease)
        self.reach = reach
        self.clock = clock
        now = clock()
        self.last_ok = {t: now for t in self.targets}
        self._stop = threading.Event()

    @property
    def period(self) -> float:
        """Seconds between two checks: a quarter of the lease, at most 1 s."""
        return min(1.0, self.lease / 4)

    def check(self) -> str | None:
        """Probe every target once; the reason the lease expired, or None.

        A contact counts from the probe's start, a failure from its end: a probe that
        waited for its timeout (a network that drops packets) counts against the lease.
        """
        for t in self.targets:
            start = self.clock()
            ok = self.reach(t)
            now = self.clock()
            if ok:
                self.last_ok[t] = start
            elif now - self.last_ok[t] > self.lease:
                return (f"{t} unreachable for {now - self.last_ok[t]:.1f} s "
                        f"(lease {self.lease:g} s)")
        return None

    def watch(self, on_expire: Callable[[str], None]) -> threading.Thread:
        """Check every :attr:`period` seconds on a daemon thread; call ``on_expire(why)``
        once when the lease expires (then stop watching)."""
        def run() -> None:
            while not self._stop.wait(self.period):
                why = self.check()
                if why is not None:
                    on_expire(why)
                    return

        th = threading.Thread(target=run, name="gj-lease", daemon=True)
        th.start()
        return th

    def release(self) -> None:
        """Stop watching (the launch ended by itself)."""
        self._stop.set()


def descendants(pid: int | None = None) -> list[int]:
    """Every process below ``pid`` (this process by default), children first, from
    ``/proc`` (Linux; elsewhere none). A process that left its parent's tree (a daemon
    that forked twice) is not among them.

    Example:
        >>> descendants(2**22 + 1)  # no such process: nothing below it
        []
    """
    root = os.getpid() if pid is None else int(pid)
    try:
        names = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []
    kids: dict[int, list[int]] = {}
    for p in names:
        try:
            with open(f"/proc/{p}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # ended meanwhile
        kids.setdefault(ppid, []).append(int(p))
    out, todo = [], [root]
    while todo:
        below = kids.get(todo.pop(), [])
        out += below
        todo += below
    return out


def _kill_descendants() -> None:
    """SIGKILL every process below this one (again, for any started meanwhile)."""
    for _ in range(3):
        pids = descendants()
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass  # ended meanwhile


def end_process(label: str) -> Callable[[str], None]:
    """``on_expire`` that writes ``[goodput_jax.cluster] LABEL: lease expired: WHY; ...``
    to the process's output and ends the process (exit status :data:`EXIT_CODE`) and
    every process below it (SIGKILL: a fence, not a request)."""
    def expire(why: str) -> None:
        print(f"[goodput_jax.cluster] {label}: lease expired: {why}; this launch stops "
              f"itself (a newer launch may run elsewhere)", flush=True)
        sys.stderr.flush()
        _kill_descendants()
        os._exit(EXIT_CODE)

    return expire
