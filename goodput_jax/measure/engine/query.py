"""The query-time part of the rules: added on every query, never stored in the state.

The live tail (last event to ``now``, rules 10 and 13, owned as
:func:`~goodput_jax.measure.engine.rules.gap_owner` says), the program startup
inferred per segment (rule 15) and Orbax's flat checkpoint statistics (rule 22)
are computed here from an :class:`~goodput_jax.measure.engine.Engine`'s state, so
an incremental query equals a from-scratch one after every append.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from goodput_jax.measure.badput import BUCKET_NAMES, PRODUCTIVE
from goodput_jax.measure.engine.codes import (
    B_CUSTOM,
    B_OTHER,
    B_RESTORE,
    B_SAVE,
    B_STARTUP,
    PENDING,
)
from goodput_jax.measure.engine.rules import gap_owner, window_ends

if TYPE_CHECKING:
    from goodput_jax.measure.engine.core import Engine

_OTHER = BUCKET_NAMES[B_OTHER]
_STARTUP = BUCKET_NAMES[B_STARTUP]


def tail_owner(eng: Engine) -> tuple[int, str | None]:
    """(bucket, label) of the live tail: the gap owner of the state; an in-flight step
    is not productive yet (rule 10), so its share is ``OTHER``."""
    spans = eng.spans
    o = gap_owner(spans[-1][2] if spans else -1, eng.open_step >= 0, eng.dev_mode,
                  eng.reinit_open > 0)
    if o == PENDING or o == B_OTHER:
        return B_OTHER, None
    return o, spans[-1][1]


def _tail(eng: Engine, now: float) -> tuple[float, float] | None:
    """The live tail ``[a, b]`` clipped to the window, if the run is live and it is not empty."""
    if eng.cur is None or eng.ended:
        return None
    a, b = window_ends(eng.last_t, now, eng.ws, eng.we)
    return (a, b) if b > a else None


def inferred_startup(eng: Engine) -> list[float]:
    """Rule 15: program startup inferred per segment (0 where compile time was measured):
    the first counted step's time minus the mean of the segment's other counted steps."""
    out = []
    for g in range(len(eng.seg_run)):
        x = 0.0
        if (eng.seg_run[g] not in eng.run_compiled and eng.seg_has_first[g]
                and eng.seg_ocnt[g] > 0):
            x = eng.seg_first[g] - eng.seg_osum[g] / eng.seg_ocnt[g]
        out.append(x if x > 0 else 0.0)
    return out


def totals(eng: Engine, now: float) -> tuple[float, list[float], dict[str, float]]:
    """(productive, bucket seconds, custom seconds) including the live tail up to now."""
    acc = list(eng.acc)
    custom = dict(eng.custom)
    productive = eng.productive
    inferred = sum(inferred_startup(eng))
    productive -= inferred
    acc[B_STARTUP] += inferred
    if eng.cur is not None and not eng.ended:
        acc[B_OTHER] += eng.pending  # in-flight step: not productive yet
    tail = _tail(eng, now)
    if tail is not None:
        a, b = tail
        bucket, label = tail_owner(eng)
        if bucket == B_OTHER:
            acc[B_OTHER] += b - a  # (unattributed time keeps excluded intervals, rule 24)
        else:
            dt = eng._clip(a, b)
            acc[bucket] += dt
            if bucket == B_CUSTOM:
                # (the recorder requires a custom span's label; a foreign row without one
                # is booked under "")
                key = "" if label is None else label
                custom[key] = custom.get(key, 0.0) + dt
    productive = max(productive, 0.0)
    # Orbax's checkpoint-manager statistics: blocking saves out of productive time,
    # restores out of OTHER (as the reference does), never below zero
    x = min(eng.flat_save, productive)
    productive -= x
    acc[B_SAVE] += x
    x = min(eng.flat_restore, acc[B_OTHER])
    acc[B_OTHER] -= x
    acc[B_RESTORE] += x
    return productive, acc, custom


def timeline(eng: Engine, now: float) -> dict:
    """The attributed slices of a recording engine, matching :func:`totals` to the float."""
    if not eng.record:
        raise ValueError("timeline() needs an Engine(record=True)")
    segs = [list(s) for s in eng.segs]
    extra: list[list] = []
    # program startup inferred from each segment's first step: its head
    for g, x in enumerate(inferred_startup(eng)):
        if x <= 0:
            continue
        recategorise(segs, eng.seg_first_segs[g], x, PRODUCTIVE, _STARTUP, head=True)
    if eng.cur is not None and not eng.ended:
        for i in set(eng.pend_segs):
            if segs[i][2] == PRODUCTIVE:
                segs[i][2] = _OTHER  # in-flight step: not productive yet
    tail = _tail(eng, now)
    if tail is not None:
        bucket, label = tail_owner(eng)
        extra.append([*tail, BUCKET_NAMES[bucket], eng.runs - 1, None, label])
    segs.extend(extra)
    # Orbax's flat checkpoint statistics (no time of their own): the latest
    # productive slices become save time, the latest OTHER slices restore time
    productive = sum(s[1] - s[0] for s in segs if s[2] == PRODUCTIVE)
    other = sum(s[1] - s[0] for s in segs if s[2] == _OTHER)
    for x, where, cat in ((min(eng.flat_save, productive), PRODUCTIVE, BUCKET_NAMES[B_SAVE]),
                          (min(eng.flat_restore, other), _OTHER, BUCKET_NAMES[B_RESTORE])):
        segs.sort(key=lambda s: (s[3], s[0]))
        recategorise(segs, range(len(segs) - 1, -1, -1), x, where, cat)
    segs.sort(key=lambda s: (s[3], s[0]))
    return {"segments": segs, "restarts": list(eng.restarts),
            "crashes": list(eng.crashes), "run_ids": list(eng.run_ids)}


def recategorise(segs: list, order: Iterable[int], x: float, where: str, cat: str, *,
                 head: bool = False) -> None:
    """Give ``x`` seconds of the ``where`` slices among ``segs[i]`` (``i`` in ``order``) to
    ``cat``, splitting one slice if needed: the last seconds of each slice, the latest slice
    first (``order`` latest first), or with ``head`` the first seconds, earliest first. The
    split-off part is appended, not inserted, so stored indices stay valid (``timeline()``
    sorts)."""
    for i in order:
        if x <= 0:
            return
        s = segs[i]
        if s[2] != where:
            continue
        d = s[1] - s[0]
        if d <= x:
            s[2] = cat
            x -= d
            continue
        cut = s[0] + x if head else s[1] - x
        segs.append([s[0], cut, cat, s[3], s[4], s[5]] if head
                    else [cut, s[1], cat, s[3], s[4], s[5]])
        s[0 if head else 1] = cut
        x = 0.0
