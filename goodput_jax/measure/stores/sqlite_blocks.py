"""The SQLite store's columnar copy of the timeline: one ``blocks`` row per run of
consecutive events of one (job, stream) in an appended batch, built at append
(:func:`blocks_of`) and read back as numpy columns (:func:`read_blocks`).
"""

from __future__ import annotations

import sqlite3

import numpy as np

from goodput_jax.measure.events import KIND_CODES, EventKind

__all__ = ["LABELLED_KINDS", "blocks_of", "read_blocks"]

#: kinds whose label / payload column matters to the calculator
LABELLED_KINDS = (
    KIND_CODES[EventKind.CUSTOM_BADPUT_START],
    KIND_CODES[EventKind.CUSTOM_BADPUT_END],
    KIND_CODES[EventKind.HINTS],
    KIND_CODES[EventKind.COMPILATION],
    KIND_CODES[EventKind.CHECKPOINT_STATS],
    KIND_CODES[EventKind.ELASTIC_WAIT_START],
    KIND_CODES[EventKind.ELASTIC_WAIT_END],
    KIND_CODES[EventKind.ELASTIC_SLICE_COUNTS],
    KIND_CODES[EventKind.PROGRAM_COST],
)


def blocks_of(rows: list[tuple]) -> list[tuple]:
    """Group inserted rows (id, job, stream, kind, ts, step, ...) into columnar blocks."""
    out = []
    start = 0
    n = len(rows)
    for i in range(1, n + 1):
        if i == n or rows[i][1] != rows[start][1] or rows[i][2] != rows[start][2]:
            chunk = rows[start:i]
            out.append((
                chunk[0][1], chunk[0][2], chunk[0][0], chunk[-1][0],
                np.fromiter((r[3] for r in chunk), dtype=np.int8, count=len(chunk)).tobytes(),
                np.fromiter((r[4] for r in chunk), dtype=np.float64, count=len(chunk)).tobytes(),
                np.fromiter((-1 if r[5] is None else r[5] for r in chunk), dtype=np.int64,
                            count=len(chunk)).tobytes(),
                sum(1 for r in chunk if r[3] in LABELLED_KINDS),
            ))
            start = i
    return out


def read_blocks(c: sqlite3.Connection, jid: int, after: int, top: int, max_events: int
                ) -> tuple[int, int, bool, list, list, list, list, dict]:
    """Blocks of job ``jid`` with ids in ``(after, top]``, about ``max_events`` events
    (whole blocks), inside the caller's snapshot: ``(n, last id read, done, kinds, streams,
    ts, steps, labels)`` (lists of arrays; labels ``{position: label or payload JSON}``)."""
    kinds, streams, ts, steps = [], [], [], []
    labelled_blocks = []  # (offset in the output, first id read, last id)
    n = 0
    hi = after
    cur = c.execute(
        "SELECT stream_id, first_id, last_id, kinds, ts, steps, n_labelled"
        " FROM blocks WHERE job_id = ? AND last_id > ? ORDER BY last_id",
        (jid, after),
    )
    for sid, first, last, bk, bt, bs, n_lab in cur:
        if first > top:
            break
        lo = max(after + 1 - first, 0)
        k = np.frombuffer(bk, dtype=np.int8)[lo:]
        if n_lab:
            labelled_blocks.append((n, first + lo, last))
        kinds.append(k)
        ts.append(np.frombuffer(bt, dtype=np.float64)[lo:])
        steps.append(np.frombuffer(bs, dtype=np.int64)[lo:])
        streams.append(np.full(k.size, sid, dtype=np.int64))
        n += k.size
        hi = last
        if n >= max_events:
            break
    cur.close()
    done = n < max_events
    if done:
        hi = top
    labels = {}
    for offset, first, last in labelled_blocks:
        for eid, text in c.execute(
            "SELECT id, COALESCE(label, payload) FROM events WHERE id >= ?"
            " AND id <= ? AND kind IN (" + ", ".join("?" * len(LABELLED_KINDS)) + ")",
            (first, last, *LABELLED_KINDS),
        ):
            labels[offset + eid - first] = text
    return n, hi, done, kinds, streams, ts, steps, labels
