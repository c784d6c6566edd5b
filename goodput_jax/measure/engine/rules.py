"""The attribution rules that every path of the engine calls (``docs/semantics.md``).

The row loop (:mod:`~goodput_jax.measure.engine.core`), the vectorised path
(:mod:`~goodput_jax.measure.engine.columns`) and the query-time tail
(:mod:`~goodput_jax.measure.engine.query`) decide with these functions, so a rule
changed here changes everywhere. The row loop reads :func:`gap_owner` and
:func:`load_blocks` through :data:`OWNER_TABLES` and :data:`LOAD_BLOCKS` (each
function tabulated over its finite domain: a lookup costs the hot loop less than
a call); the vectorised path indexes the same owner table with arrays.

Example:
    >>> from goodput_jax.measure.engine.codes import B_OTHER, B_SAVE, PENDING
    >>> gap_owner(B_SAVE, True, False, False) == B_SAVE  # rule 1: the span, not the step
    True
    >>> gap_owner(B_SAVE, True, True, False) == PENDING  # rule 25: the device's step
    True
    >>> gap_owner(-1, False, False, False) == B_OTHER
    True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from goodput_jax.measure.engine.codes import B_ACCEL, B_OTHER, B_PREP, B_REINIT, NB, PENDING

#: re-initialisation time inside these spans is re-initialisation (rule 23)
REINIT_ABSORBS = (B_ACCEL, B_PREP)


def gap_owner(span: int, step_open: bool, device_mode: bool, reinit: bool) -> int:
    """Where the time between two consecutive events of a run goes.

    Rules 1, 6, 7 (the innermost open badput span), 23 (training prep and
    accelerator init inside an elastic re-initialisation are re-initialisation),
    25 (with device ends, while the device runs a step that step owns the time,
    whatever span is open), else the open step (pending: productive once it
    completes, rule 1), else ``OTHER``.

    Args:
        span: bucket of the innermost open badput span, -1 if none.
        step_open: whether a step is open (started; with device ends: dispatched and
            its device work not yet ended).
        device_mode: whether the run records device step ends (rule 19).
        reinit: whether an elastic re-initialisation span is open.

    Returns:
        A bucket index, or :data:`~goodput_jax.measure.engine.codes.PENDING`.

    Example:
        >>> from goodput_jax.measure.engine.codes import B_PREP, B_REINIT
        >>> gap_owner(B_PREP, False, False, True) == B_REINIT
        True
    """
    if span >= 0 and not (device_mode and step_open):
        if reinit and span in REINIT_ABSORBS:
            return B_REINIT
        return span
    return PENDING if step_open else B_OTHER


def owner_table(device_mode: bool, reinit: bool) -> tuple[tuple[int, int], ...]:
    """:func:`gap_owner` tabulated: ``table[span][step_open]``; ``span`` -1 (no open
    span) is the last row, so ``table[-1]`` reads as it does in Python.

    Example:
        >>> from goodput_jax.measure.engine.codes import B_OTHER, B_SAVE, PENDING
        >>> t = owner_table(False, False)
        >>> t[-1] == (B_OTHER, PENDING) and t[B_SAVE] == (B_SAVE, B_SAVE)
        True
    """
    return tuple((gap_owner(b, False, device_mode, reinit), gap_owner(b, True, device_mode, reinit))
                 for b in (*range(NB), -1))


#: ``OWNER_TABLES[device_mode][reinit]``: the owner table of each mode
OWNER_TABLES = tuple(tuple(owner_table(d, r) for r in (False, True)) for d in (False, True))


def load_blocks(device_mode: bool, first_load_done: bool) -> bool:
    """Rules 17 and 19: whether a data load is a badput span (else it is asynchronous:
    transparent, reported as ``DATA_LOADING_ASYNC``).

    Without device ends only the first load of a run and of a segment blocks; with
    them every load is a span, badput only where the device idles (:func:`gap_owner`).

    Example:
        >>> load_blocks(False, False), load_blocks(False, True), load_blocks(True, True)
        (True, False, True)
    """
    return device_mode or not first_load_done


#: ``LOAD_BLOCKS[device_mode][first_load_done]``: :func:`load_blocks` tabulated
LOAD_BLOCKS = tuple(tuple(load_blocks(d, f) for f in (False, True)) for d in (False, True))


def window_ends(a: Any, b: Any, ws: float, we: float,
                maximum: Callable[[Any, Any], Any] = max,
                minimum: Callable[[Any, Any], Any] = min) -> tuple[Any, Any]:
    """Rule 11: the slice ``[a, b]`` clipped to the query window ``[ws, we]``; empty when
    the returned end is not after the start. The vectorised path clips arrays of
    slices with ``maximum=np.maximum, minimum=np.minimum``.

    Example:
        >>> window_ends(0.0, 10.0, 2.0, 5.0), window_ends(6.0, 8.0, 2.0, 5.0)
        ((2.0, 5.0), (6.0, 5.0))

    ``Any``: the ends are floats, or numpy arrays on the vectorised path (with ``np.maximum``
    and ``np.minimum``).
    """
    return maximum(a, ws), minimum(b, we)


def excluded_seconds(a: float, b: float, excl: list[tuple[float, float]]) -> float:
    """Rule 24: seconds of ``[a, b]`` inside the excluded intervals ``excl`` (sorted,
    merged), removed from the recorded activity that owns the slice.

    Example:
        >>> excluded_seconds(0.0, 10.0, [(2.0, 3.0), (9.0, 12.0)])
        2.0
    """
    out = 0.0
    for s, e in excl:
        if e <= a:
            continue
        if s >= b:
            break
        out += min(b, e) - max(a, s)
    return out
