"""An EventStore over ml-goodput-measurement's ``cloud_logger=`` seam.

Google's recorder and calculator accept ``cloud_logger=``: any object with
``write_cloud_logging_entry(entry: dict)`` and
``read_cloud_logging_entries(start_time=None, end_time=None, last_entry_info=None)``
(returning the entries, or ``(entries, last_entry_info)`` as 0.2.3 does). This
store writes and reads the same entry dicts, so a recorder of either library
can be measured by a calculator of the other.

Kinds Google's format has (job, step start, TPU init, training preparation,
data loading, custom badput) are written with Google's keys. The others
(step end, checkpoint spans, compilation, device ends, hints, ...) are written
as ``{"job_name", "goodput_jax_event_time", "goodput_jax_event": {...}}``,
which Google's calculator ignores.

Google's entries carry neither run id nor host: every entry is read as one
stream (run id ``"cloud_logger"``, host 0), and a repeated job start is a
restart (``docs/semantics.md``).

Example:
    >>> class Log:
    ...     def __init__(self): self.entries = []
    ...     def write_cloud_logging_entry(self, e): self.entries.append(e)
    ...     def read_cloud_logging_entries(self, start_time=None, end_time=None,
    ...                                    last_entry_info=None): return self.entries, None
    >>> from goodput_jax.measure.events import Event, EventKind
    >>> store = CloudLoggerStore(Log())
    >>> store.append([Event(EventKind.STEP_START, "j", "r", 0, 5.0, step=1)])
    >>> store.cloud_logger.entries
    [{'job_name': 'j', 'step_count': 1, 'step_start_time': 5.0}]
    >>> [e.step for e in store.read_events("j")[0]]
    [1]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from goodput_jax.measure.events import Event, EventKind
from goodput_jax.measure.stores.base import RowColumns

K = EventKind
#: our kind -> Google's time key
_TIME_KEY = {
    K.JOB_START: "job_start_time",
    K.JOB_END: "job_end_time",
    K.STEP_START: "step_start_time",
    K.ACCELERATOR_INIT_START: "tpu_init_start_time",
    K.ACCELERATOR_INIT_END: "tpu_init_end_time",
    K.TRAINING_PREP_START: "training_prep_start_time",
    K.TRAINING_PREP_END: "training_prep_end_time",
    K.DATA_LOADING_START: "data_loading_start_time",
    K.DATA_LOADING_END: "data_loading_end_time",
    K.CUSTOM_BADPUT_START: "custom_badput_event_start_time",
    K.CUSTOM_BADPUT_END: "custom_badput_event_end_time",
    K.ELASTIC_WAIT_START: "elastic_wait_start_time",
    K.ELASTIC_WAIT_END: "elastic_wait_end_time",
    K.ELASTIC_REINIT_START: "elastic_reinit_start_time",
    K.ELASTIC_REINIT_END: "elastic_reinit_end_time",
    K.ELASTIC_SLICE_COUNTS: "elastic_slice_counts_timestamp",
}
_KIND_OF_KEY = {v: k for k, v in _TIME_KEY.items()}
EXTRA_TIME_KEY = "goodput_jax_event_time"
EXTRA_KEY = "goodput_jax_event"
RUN_ID = "cloud_logger"


def to_entry(ev: Event) -> dict:
    """One event as a Cloud Logging entry payload in Google's format."""
    key = _TIME_KEY.get(ev.kind)
    if key is None:
        return {"job_name": ev.job_name, EXTRA_TIME_KEY: ev.timestamp, EXTRA_KEY: ev.to_dict()}
    out: dict[str, Any] = {"job_name": ev.job_name}
    if ev.kind is K.STEP_START:
        if ev.step is None:
            raise TypeError(f"step ({ev.step!r}) of a step_start event must be an integer")
        out["step_count"] = int(ev.step)
    if ev.kind in (K.CUSTOM_BADPUT_START, K.CUSTOM_BADPUT_END):
        out["custom_badput_event_type"] = ev.label or "unknown"
    if ev.kind in (K.ELASTIC_WAIT_START, K.ELASTIC_WAIT_END):
        out["elastic_wait_event_type"] = ev.label or "unknown"
    if ev.kind is K.ELASTIC_SLICE_COUNTS:
        p = ev.payload or {}
        out.update(active_slices=int(p.get("active", 0)), total_slices=int(p.get("total", 1)),
                   available_slices=int(p.get("available", 0)))
    out[key] = ev.timestamp
    return out


def _orbax_stats(entry: dict, job: str) -> Event | None:
    """Orbax's checkpoint-manager step statistics (written to the same logger)."""
    kind = entry.get("event_type")
    if kind == "save":
        d, t = entry.get("checkpoint_manager_blocking_duration_secs"), \
            entry.get("checkpoint_manager_blocking_start_time")
    elif kind in ("restore", "emergency_restore"):
        d, t = entry.get("checkpoint_manager_duration_secs"), \
            entry.get("checkpoint_manager_start_time")
    else:
        return None
    if d is None:
        return None
    try:
        duration = float(d)
        t = float(t) if t is not None else 0.0
    except (TypeError, ValueError):
        return None
    step = entry.get("step")
    payload: dict[str, Any] = {"event_type": kind, "duration_s": duration}
    if isinstance(step, int) and step >= 0:
        payload["step"] = step
    return Event(K.CHECKPOINT_STATS, job, RUN_ID, 0, t, payload=payload)


def from_entry(entry: Any, default_job: str | None = None) -> Event | None:
    """The event of an entry payload (None for entries of unknown writers).

    Orbax's checkpoint statistics carry no job name: they belong to
    ``default_job`` (Google's logger holds one job).

    ``Any``: the values are JSON-like (numbers, strings, lists, nested dicts), as stored or
    uploaded.
    """
    if not isinstance(entry, dict):
        return None
    job = entry.get("job_name")
    if not isinstance(job, str) or not job:
        if default_job is not None and "event_type" in entry:
            return _orbax_stats(entry, default_job)
        return None
    extra = entry.get(EXTRA_KEY)
    if isinstance(extra, dict):
        try:
            ev = Event.from_dict(extra)
        except (ValueError, TypeError):
            return None
        return Event(ev.kind, job, RUN_ID, 0, ev.timestamp, ev.step, ev.label, ev.payload)
    for key, value in entry.items():
        kind = _KIND_OF_KEY.get(key)
        if kind is None:
            continue
        try:
            t = float(value)
            step = int(entry["step_count"]) if kind is K.STEP_START else None
        except (KeyError, TypeError, ValueError):
            return None
        label = payload = None
        if kind in (K.CUSTOM_BADPUT_START, K.CUSTOM_BADPUT_END):
            label = str(entry.get("custom_badput_event_type", "unknown")).upper()
        elif kind in (K.ELASTIC_WAIT_START, K.ELASTIC_WAIT_END):
            label = str(entry.get("elastic_wait_event_type", "unknown"))
        elif kind is K.ELASTIC_SLICE_COUNTS:
            payload = {"active": entry.get("active_slices", 0),
                       "total": entry.get("total_slices", 1),
                       "available": entry.get("available_slices", 0)}
        return Event(kind, job, RUN_ID, 0, t, step=step, label=label, payload=payload)
    return None


class CloudLoggerStore(RowColumns):
    """EventStore over a Google-style ``cloud_logger`` object (see the module docstring).

    Args:
        cloud_logger: object with ``write_cloud_logging_entry`` and
            ``read_cloud_logging_entries``.

    Raises:
        TypeError: ``cloud_logger`` lacks one of the two methods.
    """

    def __init__(self, cloud_logger: Any):
        """``Any``: Google's ``cloud_logger`` (a ``google.cloud.logging`` logger, a library without
        type information), duck-typed as Google's code does.
        """
        for name in ("write_cloud_logging_entry", "read_cloud_logging_entries"):
            if not callable(getattr(cloud_logger, name, None)):
                raise TypeError(
                    f"cloud_logger ({cloud_logger!r}) must have a {name}() method "
                    "(ml-goodput-measurement's cloud_logger interface)"
                )
        self.cloud_logger = cloud_logger
        self.url = f"cloud_logger://{type(cloud_logger).__name__}"

    def append(self, events: Sequence[Event]) -> None:
        """Write each event as one entry, in order."""
        entries = [to_entry(ev.validate()) for ev in events]
        for e in entries:
            self.cloud_logger.write_cloud_logging_entry(e)

    def _entries(self) -> list:
        out = self.cloud_logger.read_cloud_logging_entries()
        if isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], list):
            out = out[0]
        return list(out)

    def read_events(self, job_name: str, cursor: Any = None,
                    limit: int | None = None) -> tuple[list[Event], Any]:
        """Events of ``job_name`` from entry number ``cursor`` on (Google's entries, in order).

        ``Any``: a cursor is the store's own opaque token (None = from the start); the return is
        ``(events or columns, the next cursor[, done])``.
        """
        start = int(cursor or 0)
        entries = self._entries()
        events: list[Event] = []
        i = start
        for i in range(start, len(entries)):
            ev = from_entry(entries[i], job_name)
            if ev is not None and ev.job_name == job_name:
                events.append(ev)
                if limit is not None and len(events) >= limit:
                    return events, i + 1
        return events, max(len(entries), start)

    def list_jobs(self) -> list[str]:
        """Job names found in the entries."""
        return sorted({ev.job_name for ev in map(from_entry, self._entries()) if ev is not None})

    def close(self) -> None:
        """Nothing to release (the cloud logger belongs to the caller)."""
