"""ml-goodput-measurement's enums, entry keys and badput-breakdown shape.

``BadputType`` is Google's: its members are named and numbered as in
``ml_goodput_measurement`` (``BadputType.TPU_INITIALIZATION.name ==
"TPU_INITIALIZATION"``, ``DATA_LOADING_SYNC.name == "DATA_LOADING_SYNC"``), with
goodput_jax's spellings as aliases (``ACCELERATOR_INITIALIZATION``, ``DATA_LOADING``)
and goodput_jax's ``RECOMPILATION`` after Google's fourteen. The measure room's
enum (``goodput_jax.measure.badput.BadputType``, whose canonical names are goodput_jax's)
maps onto it by value (:meth:`BadputType.of`, :attr:`BadputType.measure`).

Example:
    >>> MetricType.GOODPUT_TIME.value, IntervalMetricType.INTERVAL_SIZE.value
    ('goodput_time', 'interval_size')
    >>> BadputType.TPU_INITIALIZATION.name, BadputType.DATA_LOADING_SYNC.name
    ('TPU_INITIALIZATION', 'DATA_LOADING_SYNC')
    >>> BadputType.ACCELERATOR_INITIALIZATION is BadputType.TPU_INITIALIZATION
    True
"""

from __future__ import annotations

import enum
from typing import Any

from goodput_jax.measure.badput import BadputType as MeasureBadputType

__all__ = [
    "GOOGLE_BREAKDOWN_KEYS",
    "BadputType",
    "GoodputType",
    "IntervalMetricType",
    "MetricType",
    "google_breakdown",
]

# Google's entry keys (its tests import them from its modules; the thin modules
# re-export them under the same names).
_JOB_NAME = "job_name"
_STEP_COUNT = "step_count"
_STEP_START_TIME = "step_start_time"
_JOB_START_TIME = "job_start_time"
_JOB_END_TIME = "job_end_time"
_TPU_INIT_START_TIME = "tpu_init_start_time"
_TPU_INIT_END_TIME = "tpu_init_end_time"
_TRAINING_PREPARATION_START_TIME = "training_prep_start_time"
_TRAINING_PREPARATION_END_TIME = "training_prep_end_time"
_DATA_LOADING_START_TIME = "data_loading_start_time"
_DATA_LOADING_END_TIME = "data_loading_end_time"
_CUSTOM_BADPUT_EVENT_TYPE = "custom_badput_event_type"
_CUSTOM_BADPUT_EVENT_START_TIME = "custom_badput_event_start_time"
_CUSTOM_BADPUT_EVENT_END_TIME = "custom_badput_event_end_time"
# ... and its elastic ones (goodput_elastic)
_ACTIVE_SLICES = "active_slices"
_TOTAL_SLICES = "total_slices"
_AVAILABLE_SLICES = "available_slices"
_ELASTIC_SLICE_COUNTS_TIMESTAMP = "elastic_slice_counts_timestamp"
_ELASTIC_WAIT_EVENT_TYPE = "elastic_wait_event_type"
_ELASTIC_WAIT_START_TIME = "elastic_wait_start_time"
_ELASTIC_WAIT_END_TIME = "elastic_wait_end_time"
_ELASTIC_REINIT_START_TIME = "elastic_reinit_start_time"
_ELASTIC_REINIT_END_TIME = "elastic_reinit_end_time"


class BadputType(enum.Enum):
    """The type of badput, as ml-goodput-measurement names and numbers it.

    ``ACCELERATOR_INITIALIZATION`` and ``DATA_LOADING`` (goodput_jax's names) are
    aliases; ``RECOMPILATION`` is goodput_jax's own (measured recompilations).

    Example:
        >>> BadputType.of(MeasureBadputType.ACCELERATOR_INITIALIZATION).name
        'TPU_INITIALIZATION'
        >>> BadputType.DATA_LOADING_SYNC.measure.name
        'DATA_LOADING'
    """

    TPU_INITIALIZATION = 1
    ACCELERATOR_INITIALIZATION = 1  # noqa: PIE796 - goodput_jax's name, an alias
    TRAINING_PREP = 2
    PROGRAM_STARTUP = 3
    DATA_LOADING_SYNC = 4
    DATA_LOADING = 4  # noqa: PIE796 - goodput_jax's name, an alias
    DATA_LOADING_ASYNC = 5
    UNPRODUCTIVE_CHECKPOINT_SAVE_TIME = 6
    UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME = 7
    WASTED_PROGRESS_FROM_DISRUPTION = 8
    INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION = 9
    CUSTOM_BADPUT_EVENTS = 10
    OTHER = 11
    ELASTIC_SLICE_DOWN = 12
    ELASTIC_SCALE_UP = 13
    ELASTIC_REINITIALIZATION = 14
    #: measured ``recompile=True`` compilations (goodput_jax only)
    RECOMPILATION = 15

    @classmethod
    def of(cls, badput_type: Any) -> BadputType:
        """The member for a measure-room ``BadputType`` (or one of these).

        ``Any``: this is where the caller's value is checked (anything may come in; a one-line
        error names the argument and the value).
        """
        return cls(badput_type.value)

    @property
    def measure(self) -> MeasureBadputType:
        """The measure room's member (the calculators' own keys)."""
        return MeasureBadputType(self.value)


class GoodputType(enum.Enum):
    """The type of goodput (Google's enum)."""

    TOTAL = 1


class MetricType(enum.Enum):
    """Keys of :meth:`GoodputCalculator.get_job_goodput_details` (Google's enum)."""

    GOODPUT_TIME = "goodput_time"
    BADPUT_TIME = "badput_time"
    MAX_PRODUCTIVE_STEP = "max_productive_step"
    TOTAL_ELAPSED_TIME = "total_elapsed_time"
    DISRUPTION_COUNT = "disruption_count"
    STEP_TIME_DEVIATION = "step_time_deviation"
    IDEAL_STEP_TIME = "ideal_step_time"
    TOTAL_EXCLUDED_TIME = "total_excluded_time"


class IntervalMetricType(enum.Enum):
    """Keys of :meth:`GoodputCalculator.get_interval_metric_details` (Google's enum)."""

    INTERVAL_GOODPUT = "interval_goodput"
    INTERVAL_BADPUT = "interval_badput"
    INTERVAL_SIZE = "interval_size"


#: Google's breakdown keys, in its order (the elastic calculator adds its three;
#: ``RECOMPILATION``, goodput_jax's own bucket, is added only when non-zero)
GOOGLE_BREAKDOWN_KEYS: tuple[BadputType, ...] = (
    BadputType.TPU_INITIALIZATION,
    BadputType.TRAINING_PREP,
    BadputType.DATA_LOADING_SYNC,
    BadputType.DATA_LOADING_ASYNC,
    BadputType.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME,
    BadputType.UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME,
    BadputType.PROGRAM_STARTUP,
    BadputType.WASTED_PROGRESS_FROM_DISRUPTION,
    BadputType.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION,
    BadputType.CUSTOM_BADPUT_EVENTS,
    BadputType.OTHER,
)


def google_breakdown(flat: dict, custom: dict[str, float], scale: float) -> dict:
    """A breakdown in Google's shape, from goodput_jax's flat one.

    Args:
        flat: ``{measure BadputType: value}`` (seconds or %, as
            :func:`goodput_jax.measure.calculator.breakdown` returns).
        custom: custom badput seconds by label; each becomes ``{LABEL.upper(): value}``
            under ``CUSTOM_BADPUT_EVENTS`` (labels equal after upper-casing add up).
        scale: factor applied to the custom seconds (``100 / total`` for %, 1 for s).

    Returns:
        ``{BadputType: value}`` (Google's members) with :data:`GOOGLE_BREAKDOWN_KEYS`
        in order (missing ones 0.0), custom badput as a dict, and ``RECOMPILATION``
        only if any.

    Example:
        >>> out = google_breakdown({MeasureBadputType.OTHER: 25.0}, {"eval": 2.0}, 10.0)
        >>> out[BadputType.OTHER], out[BadputType.CUSTOM_BADPUT_EVENTS]
        (25.0, {'EVAL': 20.0})
        >>> BadputType.RECOMPILATION in out
        False
    """
    out: dict[BadputType, Any] = {}
    for k in GOOGLE_BREAKDOWN_KEYS:
        if k is BadputType.CUSTOM_BADPUT_EVENTS:
            by_type: dict[str, float] = {}
            for label, secs in custom.items():
                key = str(label).upper()
                by_type[key] = by_type.get(key, 0.0) + scale * secs
            out[k] = by_type
        else:
            out[k] = float(flat.get(k.measure, flat.get(k, 0.0)))
    rec = float(flat.get(MeasureBadputType.RECOMPILATION, 0.0))
    if rec:
        out[BadputType.RECOMPILATION] = rec
    return out
