"""One single-line progress bar for every long-running command (no dependency).

The bar redraws in place with ``\\r`` only on an interactive terminal: when the
stream is redirected (a file, a pipe, a CI log) it writes nothing, so logs stay
clean. Used by ``goodput-jax demo`` and ``goodput-jax simulate``.

Example:
    >>> import io
    >>> bar = ProgressBar(10, label="demo", stream=io.StringIO())  # not a TTY: silent
    >>> bar.update(3, note="loss 0.1"); bar(7, 10); bar.close()
    >>> bar.done, bar.enabled
    (7, False)
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["ProgressBar"]


class ProgressBar:
    """A one-line progress bar on a terminal stream.

    Redraws at most every ``min_interval`` seconds (and always at 100%); does
    nothing when disabled or when the stream is not a TTY.

    Args:
        total: number of units of the whole bar (may be changed by ``__call__``).
        label: short text in front of the bar.
        enabled: draw at all (``False`` for ``--no-progress``).
        stream: where to draw (default ``sys.stderr``).
        width: characters of the bar itself.
        min_interval: seconds between redraws.

    Example:
        >>> bar = ProgressBar(4, enabled=False)
        >>> bar.update(); bar.update(2); bar.done
        3
    """

    def __init__(self, total: int = 1, label: str = "", enabled: bool = True,
                 stream: TextIO | None = None, width: int = 28, min_interval: float = 0.1):
        self.total = max(1, int(total))
        self.label = str(label)
        self.stream = sys.stderr if stream is None else stream
        isatty = getattr(self.stream, "isatty", None)
        try:
            tty = bool(isatty()) if callable(isatty) else False
        except (ValueError, OSError):  # closed stream
            tty = False
        self.enabled = bool(enabled) and tty
        self.width = int(width)
        self.min_interval = float(min_interval)
        self.done = 0
        self._last = 0.0
        self._t0 = time.perf_counter()
        self._shown = False
        self._note = ""

    def update(self, n: int = 1, note: str = "", force: bool = False) -> None:
        """Advance by ``n`` units and redraw (rate-limited) with a short note."""
        self._set(self.done + int(n), note, force)

    def __call__(self, done: int, total: int | None = None, note: str | float = "") -> None:
        """Set the absolute progress (``done`` of ``total``), e.g. as a simulator callback.

        A number passed as ``note`` is read as simulated seconds and shown in hours.
        """
        if total is not None:
            self.total = max(1, int(total))
        if not isinstance(note, str):
            note = f"t={float(note) / 3600:6.2f} h"
        self._set(int(done), note, False)

    def _set(self, done: int, note: str, force: bool) -> None:
        self.done = max(0, min(self.total, done))
        if note:
            self._note = note
        if not self.enabled:
            return
        now = time.perf_counter()
        if not force and now - self._last < self.min_interval and self.done < self.total:
            return
        self._last = now
        frac = self.done / self.total
        full = int(frac * self.width)
        bar = "#" * full + "-" * (self.width - full)
        label = f"{self.label} " if self.label else ""
        line = (f"\r{label}[{bar}] {100 * frac:5.1f}% {self.done}/{self.total} "
                f"{now - self._t0:5.1f}s {self._note}")
        self.stream.write(line[:120].ljust(100))
        self.stream.flush()
        self._shown = True

    def message(self, text: str) -> None:
        """Print ``text`` on its own line (to stdout) without garbling the bar."""
        if self._shown:
            self.stream.write("\r" + " " * 100 + "\r")
            self.stream.flush()
        print(text, flush=True)
        if self._shown:
            self._set(self.done, "", True)

    def close(self) -> None:
        """End the bar's line."""
        if self.enabled and self._shown:
            self.stream.write("\n")
            self.stream.flush()
            self._shown = False
