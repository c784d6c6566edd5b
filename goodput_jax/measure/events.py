"""The one event vocabulary shared by the recorder, the stores and the calculator.

Every event carries the job name, a run id (fresh per process launch, so that
restarts and a reused job name are unambiguous), the host/process index, an
optional step and a UTC timestamp in float seconds since the epoch.

Example:
    >>> ev = Event(EventKind.STEP_START, "job", "run-1", 0, 1700000000.0, step=3)
    >>> Event.from_dict(ev.to_dict()) == ev
    True
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import json
import math
import numbers
import operator
import os
import socket
import uuid
from typing import Any, SupportsFloat, TypeAlias


class EventKind(str, enum.Enum):
    """Kinds of recorded events. Values are stable strings stored on disk."""

    JOB_START = "job_start"
    JOB_END = "job_end"
    STEP_START = "step_start"
    STEP_END = "step_end"
    ACCELERATOR_INIT_START = "accelerator_init_start"
    ACCELERATOR_INIT_END = "accelerator_init_end"
    TRAINING_PREP_START = "training_prep_start"
    TRAINING_PREP_END = "training_prep_end"
    PROGRAM_STARTUP_START = "program_startup_start"
    PROGRAM_STARTUP_END = "program_startup_end"
    DATA_LOADING_START = "data_loading_start"
    DATA_LOADING_END = "data_loading_end"
    CHECKPOINT_SAVE_START = "checkpoint_save_start"
    CHECKPOINT_SAVE_END = "checkpoint_save_end"
    CHECKPOINT_RESTORE_START = "checkpoint_restore_start"
    CHECKPOINT_RESTORE_END = "checkpoint_restore_end"
    CUSTOM_BADPUT_START = "custom_badput_start"
    CUSTOM_BADPUT_END = "custom_badput_end"
    #: Model-side hints published by the training hooks (payload = JSON dict).
    HINTS = "hints"
    #: ``record_checkpoint_progress``: the last step included in a saved checkpoint.
    CHECKPOINT_PROGRESS = "checkpoint_progress"
    #: A JAX compilation measured from ``jax.monitoring`` (point event at the compile's
    #: end; payload ``{"duration_s": float, "recompile": bool, "name": str}``).
    COMPILATION = "compilation"
    #: The device finished step ``step`` (its outputs became ready), observed by the
    #: non-stalling step recorder; the step's host-side ``STEP_END`` is only its dispatch.
    STEP_DEVICE_END = "step_device_end"
    #: Checkpoint-manager statistics as Orbax logs them for ml-goodput-measurement (point
    #: event; payload ``{"event_type": "save"|"restore", "duration_s": float, "step": int}``):
    #: blocking save time comes out of productive time, restore time out of OTHER.
    CHECKPOINT_STATS = "checkpoint_stats"
    #: Elastic training (ml-goodput-measurement's ``goodput_elastic``): waiting for slices
    #: (label = the wait's event type), re-initialisation, and slice counts (payload
    #: ``{"active": int, "total": int, "available": int}``).
    ELASTIC_WAIT_START = "elastic_wait_start"
    ELASTIC_WAIT_END = "elastic_wait_end"
    ELASTIC_REINIT_START = "elastic_reinit_start"
    ELASTIC_REINIT_END = "elastic_reinit_end"
    ELASTIC_SLICE_COUNTS = "elastic_slice_counts"
    #: One compiled step program's cost from XLA's cost analysis, read by the runtime
    #: capture when the program is first seen (point event; ``step`` = the first step run
    #: with it; payload = :meth:`goodput_jax.measure.productivity.ProgramCost.to_payload`).
    PROGRAM_COST = "program_cost"


#: start kind -> end kind, for every start/end pair.
START_END_PAIRS: dict[EventKind, EventKind] = {
    EventKind.JOB_START: EventKind.JOB_END,
    EventKind.STEP_START: EventKind.STEP_END,
    EventKind.ACCELERATOR_INIT_START: EventKind.ACCELERATOR_INIT_END,
    EventKind.TRAINING_PREP_START: EventKind.TRAINING_PREP_END,
    EventKind.PROGRAM_STARTUP_START: EventKind.PROGRAM_STARTUP_END,
    EventKind.DATA_LOADING_START: EventKind.DATA_LOADING_END,
    EventKind.CHECKPOINT_SAVE_START: EventKind.CHECKPOINT_SAVE_END,
    EventKind.CHECKPOINT_RESTORE_START: EventKind.CHECKPOINT_RESTORE_END,
    EventKind.CUSTOM_BADPUT_START: EventKind.CUSTOM_BADPUT_END,
    EventKind.ELASTIC_WAIT_START: EventKind.ELASTIC_WAIT_END,
    EventKind.ELASTIC_REINIT_START: EventKind.ELASTIC_REINIT_END,
}
END_START_PAIRS: dict[EventKind, EventKind] = {v: k for k, v in START_END_PAIRS.items()}

#: Stable small-integer codes for every kind (stored on disk by the SQLite store and
#: used by the calculator's hot loop). Never renumber: append new kinds at the end.
KIND_CODES: dict[EventKind, int] = {
    EventKind.JOB_START: 0,
    EventKind.JOB_END: 1,
    EventKind.STEP_START: 2,
    EventKind.STEP_END: 3,
    EventKind.ACCELERATOR_INIT_START: 4,
    EventKind.ACCELERATOR_INIT_END: 5,
    EventKind.TRAINING_PREP_START: 6,
    EventKind.TRAINING_PREP_END: 7,
    EventKind.PROGRAM_STARTUP_START: 8,
    EventKind.PROGRAM_STARTUP_END: 9,
    EventKind.DATA_LOADING_START: 10,
    EventKind.DATA_LOADING_END: 11,
    EventKind.CHECKPOINT_SAVE_START: 12,
    EventKind.CHECKPOINT_SAVE_END: 13,
    EventKind.CHECKPOINT_RESTORE_START: 14,
    EventKind.CHECKPOINT_RESTORE_END: 15,
    EventKind.CUSTOM_BADPUT_START: 16,
    EventKind.CUSTOM_BADPUT_END: 17,
    EventKind.HINTS: 18,
    EventKind.CHECKPOINT_PROGRESS: 19,
    EventKind.COMPILATION: 20,
    EventKind.STEP_DEVICE_END: 21,
    EventKind.CHECKPOINT_STATS: 22,
    EventKind.ELASTIC_WAIT_START: 23,
    EventKind.ELASTIC_WAIT_END: 24,
    EventKind.ELASTIC_REINIT_START: 25,
    EventKind.ELASTIC_REINIT_END: 26,
    EventKind.ELASTIC_SLICE_COUNTS: 27,
    EventKind.PROGRAM_COST: 28,
}
#: code -> kind (index = code).
KINDS_BY_CODE: tuple[EventKind, ...] = tuple(
    sorted(KIND_CODES, key=KIND_CODES.__getitem__)
)
assert len(KINDS_BY_CODE) == len(EventKind) and all(
    KIND_CODES[k] == i for i, k in enumerate(KINDS_BY_CODE)
), "KIND_CODES must number every EventKind 0..n-1"  # import-time self-check


def new_run_id() -> str:
    """A fresh run id for one process launch: host name, pid and a random suffix."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:12]}"


#: A time the package accepts (see :func:`to_timestamp`): a timezone-aware datetime, or
#: UTC seconds as any real number (float, int, numpy or JAX scalar). A naive datetime is
#: refused here; the Google drop-ins read it as local time, as Google's library does.
TimeLike: TypeAlias = _dt.datetime | SupportsFloat


def to_timestamp(value: Any, *, name: str = "timestamp") -> float:
    """Convert a timezone-aware datetime or a float (UTC seconds) to float seconds.

    Raises:
        ValueError: naive datetimes, non-finite numbers.
        TypeError: anything that is neither a datetime nor a real number.

    Example:
        >>> to_timestamp(_dt.datetime(2024, 1, 1, tzinfo=_dt.timezone.utc))
        1704067200.0

    ``Any``: this is where the caller's value is checked (anything may come in; a one-line error
    names the argument and the value).
    """
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
            raise ValueError(
                f"{name} ({value!r}) is a naive datetime; pass a timezone-aware one, "
                "e.g. datetime.datetime.now(datetime.timezone.utc)"
            )
        return value.timestamp()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{name} ({value!r}) must be a timezone-aware datetime or float UTC seconds, "
            f"not {type(value).__name__}"
        )
    out = float(value)
    if not math.isfinite(out):
        raise ValueError(f"{name} ({value!r}) must be finite")
    return out


def check_job_name(job_name: Any, *, name: str = "job_name") -> str:
    """Validate a job name: a non-empty string without control characters.

    A control character (newline, tab, NUL, ...) would break a Cloud Logging
    filter (the job could never be read back), so every store refuses it.

    Example:
        >>> check_job_name("llama-7b")
        'llama-7b'

    ``Any``: this is where the caller's value is checked (anything may come in; a one-line error
    names the argument and the value).
    """
    if not isinstance(job_name, str) or not job_name:
        raise ValueError(f"{name} ({job_name!r}) must be a non-empty string")
    bad = [c for c in job_name if ord(c) < 32 or 127 <= ord(c) < 160]
    if bad:
        raise ValueError(
            f"{name} ({job_name!r}) contains the control character {bad[0]!r}; "
            "use printable characters only (it would break Cloud Logging filters)"
        )
    return job_name


def check_step(step: Any, *, name: str = "step") -> int:
    """Validate a step number: a non-negative integer (numpy/JAX integer scalars accepted).

    Example:
        >>> check_step(3)
        3

    ``Any``: this is where the caller's value is checked (anything may come in; a one-line error
    names the argument and the value).
    """
    if isinstance(step, bool):
        raise TypeError(f"{name} ({step!r}) must be a non-negative integer, not bool")
    try:  # an int, or a numpy / jax integer scalar (an index; a float or an array is not)
        out = operator.index(step)
    except TypeError:
        raise TypeError(f"{name} ({step!r}) must be a non-negative integer") from None
    if out < 0:
        raise ValueError(f"{name} ({step!r}) must be a non-negative integer")
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    """One recorded event.

    Attributes:
        kind: what happened.
        job_name: the job this belongs to.
        run_id: fresh per process launch.
        host: host / process index.
        timestamp: UTC seconds since the epoch.
        step: step number, where the kind has one.
        label: user label of a custom badput event.
        payload: free JSON-serialisable dict (hints, extra metadata).
    """

    kind: EventKind
    job_name: str
    run_id: str
    host: int
    timestamp: float
    step: int | None = None
    label: str | None = None
    payload: dict | None = None

    def to_dict(self) -> dict:
        """JSON-serialisable dict (used by the Cloud Logging store's jsonPayload)."""
        d: dict[str, Any] = {
            "kind": self.kind.value,
            "job_name": self.job_name,
            "run_id": self.run_id,
            "host": self.host,
            "timestamp": self.timestamp,
        }
        if self.step is not None:
            d["step"] = self.step
        if self.label is not None:
            d["label"] = self.label
        if self.payload is not None:
            d["payload"] = self.payload
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Event:
        """Inverse of :meth:`to_dict`; raises ValueError naming a bad key."""
        try:
            kind = EventKind(d["kind"])
            step = d.get("step")
            return cls(
                kind=kind,
                job_name=str(d["job_name"]),
                run_id=str(d["run_id"]),
                host=int(d["host"]),
                timestamp=float(d["timestamp"]),
                step=None if step is None else int(step),
                label=d.get("label"),
                payload=d.get("payload"),
            )
        except KeyError as e:
            raise ValueError(f"event dict is missing key {e.args[0]!r}: {d!r}") from None

    def payload_json(self) -> str | None:
        """The payload as canonical JSON text (None when there is no payload)."""
        return None if self.payload is None else json.dumps(self.payload, sort_keys=True)

    def validate(self) -> Event:
        """Check every field; raise TypeError/ValueError naming the field and value.

        Returns the event itself so that it can be chained.

        Example:
            >>> Event(EventKind.JOB_START, "j", "r", 0, 1.0).validate().kind
            <EventKind.JOB_START: 'job_start'>
        """
        if not isinstance(self.kind, EventKind):
            raise TypeError(f"kind ({self.kind!r}) must be an EventKind")
        check_job_name(self.job_name)
        if not isinstance(self.run_id, str) or not self.run_id:
            raise ValueError(f"run_id ({self.run_id!r}) must be a non-empty string")
        if isinstance(self.host, bool) or not isinstance(self.host, int) or self.host < 0:
            raise ValueError(f"host ({self.host!r}) must be a non-negative int")
        to_timestamp(self.timestamp)
        if self.step is not None:
            check_step(self.step)
        if self.label is not None and not isinstance(self.label, str):
            raise TypeError(f"label ({self.label!r}) must be a string or None")
        if self.payload is not None:
            if not isinstance(self.payload, dict):
                raise TypeError(f"payload ({self.payload!r}) must be a dict or None")
            try:
                json.dumps(self.payload)
            except (TypeError, ValueError) as e:
                raise ValueError(
                    f"payload ({self.payload!r}) is not JSON-serialisable: {e}") from None
        return self
