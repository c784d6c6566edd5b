"""``RecorderOptions``: how a :class:`~goodput_jax.measure.recorder.GoodputRecorder` records.

A frozen, keyword-only dataclass validated once at construction (one-line errors naming
the field and value), as orbax's ``CheckpointManagerOptions``.

Example:
    >>> RecorderOptions(batch_size=64, rerun="append").rerun
    <Rerun.APPEND: 'append'>
    >>> RecorderOptions(max_queue=0)
    Traceback (most recent call last):
    ...
    ValueError: max_queue (0) must be a positive int
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from goodput_jax.measure.lifecycle import Rerun, check_rerun

__all__ = ["RecorderOptions"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class RecorderOptions:
    """How a recorder stamps, queues and writes its events.

    Attributes:
        clock: returns UTC seconds (default ``time.time``); used when no timestamp is given.
        host: host / process index stored with each event (default 0).
        run_id: id of this process launch (default: fresh per recorder).
        max_queue: events held in memory at most; beyond it new events are dropped and counted.
        batch_size: events per store write.
        flush_interval: seconds between background writes.
        max_retries: retries of a failing write before its batch is dropped and counted.
        synchronous: write each event to the store in the calling thread (no background
            thread; for test seams such as Google's ``cloud_logger=``, where a read must
            see the write that preceded it).
        rerun: what the first job start does when the job's last run in the store ended
            cleanly (:class:`~goodput_jax.measure.lifecycle.Rerun`: ``"warn"`` (default)
            appends and warns once, ``"append"`` appends silently, ``"refuse"`` raises).

    ``Any``: ``clock`` returns a time in any form
    :func:`~goodput_jax.measure.events.to_timestamp` accepts.
    """

    clock: Callable[[], Any] | None = None
    host: int | None = None
    run_id: str | None = None
    max_queue: int = 1_000_000
    batch_size: int = 4096
    flush_interval: float = 0.5
    max_retries: int = 6
    synchronous: bool = False
    rerun: Rerun = Rerun.WARN

    def __post_init__(self) -> None:
        clock, host, run_id = self.clock, self.host, self.run_id
        if clock is not None and not callable(clock):
            raise TypeError(f"clock ({clock!r}) must be a callable returning UTC seconds")
        if host is not None and (isinstance(host, bool) or not isinstance(host, int) or host < 0):
            raise ValueError(f"host ({host!r}) must be a non-negative int")
        if run_id is not None and (not isinstance(run_id, str) or not run_id):
            raise ValueError(f"run_id ({run_id!r}) must be a non-empty string")
        for name in ("max_queue", "batch_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"{name} ({v!r}) must be a positive int")
        r = self.max_retries
        if isinstance(r, bool) or not isinstance(r, int) or r < 0:
            raise ValueError(f"max_retries ({r!r}) must be a non-negative int")
        f = self.flush_interval
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not f > 0:
            raise ValueError(f"flush_interval ({f!r}) must be a positive number")
        if not isinstance(self.synchronous, bool):
            object.__setattr__(self, "synchronous", bool(self.synchronous))
        object.__setattr__(self, "rerun", check_rerun(self.rerun))

    @classmethod
    def merged(cls, options: RecorderOptions | None,
               keywords: Mapping[str, Any]) -> RecorderOptions:
        """THE translation of a recorder's keywords into options: ``options`` (or the
        defaults) with the keywords (each a field of this class) replacing its fields.

        Raises:
            TypeError: an unknown keyword, or ``options`` of another type.

        Example:
            >>> RecorderOptions.merged(None, {"batch_size": 8}).batch_size
            8

        ``Any``: the old keyword arguments, each checked as it becomes a field of the options
        (an unknown one is a one-line TypeError).
        """
        if options is not None and not isinstance(options, cls):
            raise TypeError(f"options ({options!r}) must be a RecorderOptions")
        if not keywords:
            return options or cls()
        unknown = sorted(set(keywords) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise TypeError(f"GoodputRecorder() got unexpected keyword argument(s) {unknown}")
        if options is None:
            return cls(**keywords)
        return dataclasses.replace(options, **keywords)
