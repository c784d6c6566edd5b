"""The engine's vocabulary: bucket indices, event kind codes, span tables, stream keys.

Nothing here attributes time (that is :mod:`~goodput_jax.measure.engine.rules`);
these are the names both of the engine's paths speak.

Example:
    >>> from goodput_jax.measure.badput import BUCKET_NAMES
    >>> BUCKET_NAMES[B_SAVE]
    'UNPRODUCTIVE_CHECKPOINT_SAVE_TIME'
    >>> SPAN_START_BUCKET[SPAN_END_START[DL_END]] == B_DATA
    True
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from typing import Any

from goodput_jax.measure.events import KIND_CODES, EventKind

# Bucket indices of the hot loop (order = BUCKET_NAMES).
B_ACCEL, B_PREP, B_STARTUP, B_DATA, B_SAVE, B_RESTORE = 0, 1, 2, 3, 4, 5
B_WASTED, B_INFRA, B_CUSTOM, B_OTHER, B_RECOMP = 6, 7, 8, 9, 10
B_SLICE_DOWN, B_SCALE_UP, B_REINIT = 11, 12, 13
NB = 14
#: "the device's open step" as an owner of time (pending: productive once it completes)
PENDING = NB

_K = KIND_CODES
JOB_START, JOB_END = _K[EventKind.JOB_START], _K[EventKind.JOB_END]
STEP_START, STEP_END = _K[EventKind.STEP_START], _K[EventKind.STEP_END]
HINTS, CKPT_PROGRESS = _K[EventKind.HINTS], _K[EventKind.CHECKPOINT_PROGRESS]
COMPILATION, DEVICE_END = _K[EventKind.COMPILATION], _K[EventKind.STEP_DEVICE_END]
DL_START, DL_END = _K[EventKind.DATA_LOADING_START], _K[EventKind.DATA_LOADING_END]
CUSTOM_START = _K[EventKind.CUSTOM_BADPUT_START]
CKPT_STATS, SLICE_COUNTS = _K[EventKind.CHECKPOINT_STATS], _K[EventKind.ELASTIC_SLICE_COUNTS]
EWAIT_START, REINIT_START = _K[EventKind.ELASTIC_WAIT_START], _K[EventKind.ELASTIC_REINIT_START]
PROGRAM_COST = _K[EventKind.PROGRAM_COST]
#: kinds that attribute no time of their own (their time is a point, or in the past)
POINT_KINDS = frozenset({HINTS, CKPT_PROGRESS, CKPT_STATS, SLICE_COUNTS, PROGRAM_COST})
#: span start code -> bucket
SPAN_START_BUCKET = {
    _K[EventKind.ACCELERATOR_INIT_START]: B_ACCEL,
    _K[EventKind.TRAINING_PREP_START]: B_PREP,
    _K[EventKind.PROGRAM_STARTUP_START]: B_STARTUP,
    DL_START: B_DATA,
    _K[EventKind.CHECKPOINT_SAVE_START]: B_SAVE,
    _K[EventKind.CHECKPOINT_RESTORE_START]: B_RESTORE,
    CUSTOM_START: B_CUSTOM,
    EWAIT_START: B_SLICE_DOWN,  # or B_SCALE_UP, by label
    REINIT_START: B_REINIT,
}
#: span end code -> its start code
SPAN_END_START = {
    _K[EventKind.ACCELERATOR_INIT_END]: _K[EventKind.ACCELERATOR_INIT_START],
    _K[EventKind.TRAINING_PREP_END]: _K[EventKind.TRAINING_PREP_START],
    _K[EventKind.PROGRAM_STARTUP_END]: _K[EventKind.PROGRAM_STARTUP_START],
    DL_END: DL_START,
    _K[EventKind.CHECKPOINT_SAVE_END]: _K[EventKind.CHECKPOINT_SAVE_START],
    _K[EventKind.CHECKPOINT_RESTORE_END]: _K[EventKind.CHECKPOINT_RESTORE_START],
    _K[EventKind.CUSTOM_BADPUT_END]: CUSTOM_START,
    _K[EventKind.ELASTIC_WAIT_END]: EWAIT_START,
    _K[EventKind.ELASTIC_REINIT_END]: REINIT_START,
}

#: an engine stream key is ``(run index << HOST_BITS) | host``: hosts of one run share a timeline
HOST_BITS = 20
HOST_MASK = (1 << HOST_BITS) - 1


class StreamKeys:
    """Maps ``(run_id, host)`` to engine stream keys and back (thread-safe, append-only).

    Example:
        >>> keys = StreamKeys()
        >>> keys.key("run-a", 0), keys.key("run-a", 1), keys.key("run-b", 0) >> HOST_BITS
        (0, 1, 1)
        >>> keys.run_id(keys.key("run-b", 3))
        'run-b'
    """

    def __init__(self) -> None:
        self._runs: dict[str, int] = {}
        self._names: list[str] = []
        self._lock = threading.Lock()

    def key(self, run_id: str, host: int) -> int:
        """The stream key of ``host`` in run ``run_id``."""
        r = self._runs.get(run_id)
        if r is None:
            with self._lock:
                r = self._runs.get(run_id)
                if r is None:
                    r = self._runs[run_id] = len(self._names)
                    self._names.append(run_id)
        if not 0 <= host <= HOST_MASK:
            raise ValueError(f"host ({host!r}) must be in [0, {HOST_MASK}]")
        return (r << HOST_BITS) | host

    def run_id(self, key: int) -> str:
        """The run id of a stream key."""
        return self._names[key >> HOST_BITS]


def merge_intervals(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sort and merge ``(start, end)`` float intervals; empty ones are dropped.

    Example:
        >>> merge_intervals([(5, 7), (0, 2), (1, 3), (4, 4)])
        [(0, 3), (5, 7)]
    """
    out: list[tuple[float, float]] = []
    for s, e in sorted((s, e) for s, e in intervals if e > s):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def payload(label: Any) -> dict:
    """The payload of a HINTS / COMPILATION / statistics row (a dict or JSON text), else {}.

    Example:
        >>> payload('{"duration_s": 2}'), payload("eval"), payload(None)
        ({'duration_s': 2}, {}, {})

    ``Any``: the values are JSON-like (numbers, strings, lists, nested dicts), as stored or
    uploaded.
    """
    if isinstance(label, dict):
        return label
    if isinstance(label, str):
        try:
            out = json.loads(label)
        except ValueError:
            return {}
        return out if isinstance(out, dict) else {}
    return {}
