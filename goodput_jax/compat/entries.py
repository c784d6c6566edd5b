"""Google's entry dicts read as goodput_jax events, for Google's private helpers.

ml-goodput-measurement's calculator keeps the Cloud Logging entries it read (dicts keyed
``job_start_time``, ``step_count`` / ``step_start_time``, ``elastic_slice_counts_timestamp``,
...) and its private helpers take lists of them. The drop-in calculators keep those helpers
(``compat/__init__``'s docstring lists them) as adaptors: the entries are translated here
by the ``cloud_logger=`` store's own reader
(:func:`goodput_jax.measure.stores.cloud_logger.from_entry`), and what they mean is
computed by goodput_jax's own rules, written once:
:class:`~goodput_jax.compat.step_times.StepTimes` for step times, the attribution
:class:`~goodput_jax.measure.engine.Engine` for slice-count records.

Example:
    >>> entries = [{"job_name": "j", "step_count": 0, "step_start_time": 10.0},
    ...            ("not", "an entry"),
    ...            {"job_name": "j", "step_count": 1, "step_start_time": 12.5}]
    >>> step_starts(entries)
    [(0, 10.0), (1, 12.5)]
    >>> slice_count_records([{"job_name": "j", "elastic_slice_counts_timestamp": 5.0,
    ...                       "active_slices": 2, "total_slices": 0, "available_slices": 3}])
    [(5.0, 2, 3, 1)]
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from goodput_jax.measure.engine import Engine
from goodput_jax.measure.events import KIND_CODES, Event, EventKind
from goodput_jax.measure.stores.cloud_logger import from_entry

__all__ = ["google_events", "slice_count_records", "step_starts"]

#: the job name given to an entry that carries none (Google's helpers read every entry
#: they are handed, whatever its job)
_ANY_JOB = "google-entries"


def google_events(entries: Iterable[Any]) -> list[Event]:
    """The events of Google's entry dicts, in order; anything else (a non-dict, an entry of
    an unknown writer) is skipped, as Google's ``key in payload`` tests skip it.

    Unlike the store, no entry is left out for its job: Google's helpers read what they are
    handed.

    ``Any``: Google's entries are JSON-like dicts from a Cloud Logging reader (or its test
    double), taken as they come.
    """
    out = []
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        if not isinstance(entry.get("job_name"), str) or not entry["job_name"]:
            entry = {**entry, "job_name": _ANY_JOB}
        ev = from_entry(entry)
        if ev is not None:
            out.append(ev)
    return out


def step_starts(entries: Iterable[Any]) -> list[tuple[int, float]]:
    """``(step, start time)`` of the step-start entries, in order.

    ``Any``: as :func:`google_events`.
    """
    return [(int(ev.step), ev.timestamp) for ev in google_events(entries)
            if ev.kind is EventKind.STEP_START and ev.step is not None]


def slice_count_records(entries: Iterable[Any]) -> list[tuple[float, int, int, int]]:
    """``(time, active, available, total >= 1)`` of the slice-count entries, in time order,
    as the attribution engine records them (``Engine.slice_counts``).

    ``Any``: as :func:`google_events`.
    """
    code = KIND_CODES[EventKind.ELASTIC_SLICE_COUNTS]
    eng = Engine()
    eng.feed((code, 0, ev.timestamp, None, ev.payload) for ev in google_events(entries)
             if ev.kind is EventKind.ELASTIC_SLICE_COUNTS)
    return sorted(eng.slice_counts, key=lambda r: r[0])
