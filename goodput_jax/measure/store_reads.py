"""The calculator's side reads of a store, beside the engine's: every host's step marks
(read incrementally, for the stragglers) and the checkpoint saves' starts (for the advice).

Example:
    >>> from goodput_jax.measure.stores.sqlite import SQLiteStore
    >>> m = StepMarks(); m.read(SQLiteStore(":memory:"), "job", 1000); m.cols[0].size
    0
"""

from __future__ import annotations

from typing import Any

import numpy as np

from goodput_jax.measure.events import KIND_CODES, EventKind
from goodput_jax.measure.stores import EventStore

__all__ = ["StepMarks", "select"]

_MARK_CODES = np.array([KIND_CODES[EventKind.STEP_START], KIND_CODES[EventKind.STEP_END],
                        KIND_CODES[EventKind.STEP_DEVICE_END]], dtype=np.int64)


class StepMarks:
    """Every host's step marks read so far (columns), with the store cursor they end at."""

    def __init__(self) -> None:
        self.cursor: Any = None
        self.runs: dict[str, int] = {}  # run id -> run index
        self.info: dict[int, tuple[int, int]] = {}  # store stream id -> (run index, host)
        e = np.empty(0, dtype=np.int64)
        self.cols: tuple = (e, e, e, np.empty(0, dtype=np.float64), e)

    def read(self, store: EventStore, job_name: str, chunk: int) -> None:
        """Append the marks written since the last read (chunk by chunk: a failed read
        resumes where it stopped)."""
        while True:
            cols, cur, done = store.read_columns(job_name, self.cursor, chunk)
            if cols is not None and cols["kind"].size:
                keep = np.isin(cols["kind"], _MARK_CODES)
                stream = cols["stream"][keep]
                u, inv = np.unique(stream, return_inverse=True)
                rh = np.empty((u.size, 2), dtype=np.int64)
                for i, sid in enumerate(u.tolist()):
                    if sid not in self.info:
                        run_id, host = store.stream_info(sid)
                        self.info[sid] = (self.runs.setdefault(run_id, len(self.runs)),
                                          int(host))
                    rh[i] = self.info[sid]
                new = (cols["kind"][keep].astype(np.int64), rh[inv, 0], rh[inv, 1],
                       cols["ts"][keep], cols["step"][keep].astype(np.int64))
                self.cols = tuple(np.concatenate((a, b)) for a, b in zip(self.cols, new))
            self.cursor = cur
            if done:
                return


def select(cols: dict, mask: np.ndarray) -> dict:
    """The rows of a columnar chunk where ``mask`` holds (labels re-indexed)."""
    if mask.all():
        return cols
    idx = np.flatnonzero(mask)
    pos = {int(i): j for j, i in enumerate(idx)}
    labels = {pos[i]: v for i, v in cols["labels"].items() if i in pos}
    return {"kind": cols["kind"][idx], "stream": cols["stream"][idx], "ts": cols["ts"][idx],
            "step": cols["step"][idx], "labels": labels}
