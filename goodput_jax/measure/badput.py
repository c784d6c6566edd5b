"""The badput vocabulary: every cause of unproductive time, its label and its events.

One module owns the words; everything else imports them from here:

* :class:`BadputType`: the causes (Google's ml-goodput-measurement categories plus
  goodput_jax's recompilation and elastic ones);
* :data:`BUCKET_NAMES`: the attribution engine's buckets, in bucket-index order;
  :data:`PRODUCTIVE`: the timeline category of productive steps;
* :data:`BUCKET_LABELS`: category -> the human label the report shows;
  :data:`OPTIONAL_BUCKETS`: buckets the report lists only when they hold time;
* :data:`RECORDABLE`: the badput types a recorder can record directly, with
  their start and end :class:`~goodput_jax.measure.events.EventKind`;
* :data:`GOOGLE_NAMES`: our names that ml-goodput-measurement spells differently.

The module imports only the standard library and :mod:`goodput_jax.measure.events`.

Example:
    >>> from goodput_jax.measure.badput import BadputType, label
    >>> label(BadputType.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME)
    'checkpoint save'
    >>> BadputType.TPU_INITIALIZATION is BadputType.ACCELERATOR_INITIALIZATION
    True
"""

from __future__ import annotations

import enum

from goodput_jax.measure.events import EventKind

__all__ = [
    "BUCKET_LABELS",
    "BUCKET_NAMES",
    "GOOGLE_NAMES",
    "OPTIONAL_BUCKETS",
    "PRODUCTIVE",
    "RECORDABLE",
    "BadputType",
    "label",
]


class BadputType(enum.Enum):
    """Causes of unproductive time (Google's ml-goodput-measurement categories).

    ``TPU_INITIALIZATION`` and ``DATA_LOADING_SYNC`` are aliases of
    ``ACCELERATOR_INITIALIZATION`` and ``DATA_LOADING`` (Google's names).
    ``DATA_LOADING_ASYNC`` exists for drop-in compatibility: asynchronous loading
    does not block training, so it is never badput and always reported as 0.

    Example:
        >>> BadputType["DATA_LOADING_SYNC"] is BadputType.DATA_LOADING
        True
    """

    ACCELERATOR_INITIALIZATION = 1
    TPU_INITIALIZATION = 1  # noqa: PIE796 - Google's name, an alias
    TRAINING_PREP = 2
    PROGRAM_STARTUP = 3
    DATA_LOADING = 4
    DATA_LOADING_SYNC = 4  # noqa: PIE796 - Google's name, an alias
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


#: engine bucket index -> BadputType member name (the engine's hot loop uses the indices)
BUCKET_NAMES: tuple[str, ...] = (
    "ACCELERATOR_INITIALIZATION",
    "TRAINING_PREP",
    "PROGRAM_STARTUP",
    "DATA_LOADING",
    "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME",
    "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME",
    "WASTED_PROGRESS_FROM_DISRUPTION",
    "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION",
    "CUSTOM_BADPUT_EVENTS",
    "OTHER",
    "RECOMPILATION",
    "ELASTIC_SLICE_DOWN",
    "ELASTIC_SCALE_UP",
    "ELASTIC_REINITIALIZATION",
)

#: timeline category of productive time
PRODUCTIVE = "PRODUCTIVE"

#: category -> label, in table order: productive time first, then every badput bucket.
BUCKET_LABELS: dict[str, str] = {
    PRODUCTIVE: "productive steps",
    "ACCELERATOR_INITIALIZATION": "accelerator initialization",
    "TRAINING_PREP": "training preparation",
    "PROGRAM_STARTUP": "program startup (compile)",
    "DATA_LOADING": "data loading (sync)",
    "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME": "checkpoint save",
    "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME": "checkpoint restore",
    "WASTED_PROGRESS_FROM_DISRUPTION": "wasted progress (disruption)",
    "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION": "infrastructure recovery",
    "CUSTOM_BADPUT_EVENTS": "custom badput events",
    "OTHER": "other (unaccounted, hangs)",
    "RECOMPILATION": "recompilation",
    "ELASTIC_SLICE_DOWN": "elastic: slice down",
    "ELASTIC_SCALE_UP": "elastic: scale up",
    "ELASTIC_REINITIALIZATION": "elastic: re-initialization",
}

#: buckets the report's table lists only when they hold time (goodput_jax-only or elastic jobs)
OPTIONAL_BUCKETS: frozenset[str] = frozenset(
    {"RECOMPILATION", "ELASTIC_SLICE_DOWN", "ELASTIC_SCALE_UP", "ELASTIC_REINITIALIZATION"})

#: badput types a recorder records directly -> (start kind, end kind); wasted progress,
#: recovery, other, recompilation and the elastic buckets are derived by the engine.
RECORDABLE: dict[BadputType, tuple[EventKind, EventKind]] = {
    BadputType.ACCELERATOR_INITIALIZATION: (
        EventKind.ACCELERATOR_INIT_START, EventKind.ACCELERATOR_INIT_END),
    BadputType.TRAINING_PREP: (EventKind.TRAINING_PREP_START, EventKind.TRAINING_PREP_END),
    BadputType.PROGRAM_STARTUP: (EventKind.PROGRAM_STARTUP_START, EventKind.PROGRAM_STARTUP_END),
    BadputType.DATA_LOADING: (EventKind.DATA_LOADING_START, EventKind.DATA_LOADING_END),
    BadputType.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME: (
        EventKind.CHECKPOINT_SAVE_START, EventKind.CHECKPOINT_SAVE_END),
    BadputType.UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME: (
        EventKind.CHECKPOINT_RESTORE_START, EventKind.CHECKPOINT_RESTORE_END),
    BadputType.CUSTOM_BADPUT_EVENTS: (EventKind.CUSTOM_BADPUT_START, EventKind.CUSTOM_BADPUT_END),
}

#: our BadputType names -> ml-goodput-measurement's, where they differ (metric tags)
GOOGLE_NAMES: dict[str, str] = {"ACCELERATOR_INITIALIZATION": "TPU_INITIALIZATION",
                                "DATA_LOADING": "DATA_LOADING_SYNC"}

if set(BUCKET_NAMES) - set(BadputType.__members__) or set(BUCKET_LABELS) != {
        PRODUCTIVE, *BUCKET_NAMES}:  # pragma: no cover - caught by tests/measure/test_badput.py
    raise ImportError("badput vocabulary out of date: BUCKET_NAMES, BadputType and "
                      "BUCKET_LABELS must name the same buckets")


def label(kind: BadputType | str) -> str:
    """The human label of a badput type or timeline category.

    Args:
        kind: a :class:`BadputType` member or a category name (``"PRODUCTIVE"`` or a
            member name such as ``"OTHER"``).

    Raises:
        ValueError: ``kind`` names no bucket (``DATA_LOADING_ASYNC`` is never badput).

    Example:
        >>> label("PRODUCTIVE"), label(BadputType.TPU_INITIALIZATION)
        ('productive steps', 'accelerator initialization')
    """
    name = kind.name if isinstance(kind, BadputType) else kind
    try:
        return BUCKET_LABELS[name]
    except (KeyError, TypeError):
        raise ValueError(f"kind ({kind!r}) names no goodput/badput bucket; expected one of "
                         f"{', '.join(BUCKET_LABELS)}") from None
