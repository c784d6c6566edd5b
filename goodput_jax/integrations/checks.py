"""Argument checks of the integrations' public boundary: one-line errors naming the argument.

Example:
    >>> positive_int(3, "num_replicas"), nonneg_int(0, "accum_steps")
    (3, 0)
    >>> positive_int(0, "num_replicas")
    Traceback (most recent call last):
    ...
    ValueError: num_replicas (0) must be a positive integer
"""

from __future__ import annotations

import numbers
from typing import Any, Literal, overload

__all__ = ["check_limits", "nonneg_int", "nonneg_number", "positive_int"]


@overload
def positive_int(value: Any, name: str, allow_none: Literal[False] = False) -> int: ...
@overload
def positive_int(value: Any, name: str, allow_none: bool) -> int | None: ...
def positive_int(value: Any, name: str, allow_none: bool = False) -> int | None:
    """``int(value)`` for an integer >= 1 (None passes with ``allow_none``)."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} ({value!r}) must be a positive integer")
    return int(value)


def nonneg_int(value: Any, name: str) -> int:
    """``int(value)`` for an integer >= 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"{name} ({value!r}) must be a non-negative integer")
    return int(value)


def nonneg_number(value: Any, name: str) -> float:
    """``float(value)`` for a real number >= 0.

    Example:
        >>> nonneg_number(0.5, "refit_interval")
        0.5
    """
    if not isinstance(value, numbers.Real) or not float(value) >= 0:
        raise ValueError(f"{name} ({value!r}) must be a number >= 0")
    return float(value)


def check_limits(init_batch_size: Any, max_batch_size: Any, local_bsz_bounds: Any,
                 ) -> tuple[int, int, tuple[int | None, int | None]]:
    """A job's batch limits, checked: ``(init_batch_size, max_batch_size, (lo, hi))``.

    ``max_batch_size`` None means ``init_batch_size``; ``local_bsz_bounds`` None, or
    either bound None, means unbounded.

    Example:
        >>> check_limits(32, None, (8, None))
        (32, 32, (8, None))
        >>> check_limits(32, 16, None)
        Traceback (most recent call last):
        ...
        ValueError: max_batch_size (16) < init_batch_size (32)
    """
    m0 = positive_int(init_batch_size, "init_batch_size")
    top = positive_int(m0 if max_batch_size is None else max_batch_size, "max_batch_size")
    if top < m0:
        raise ValueError(f"max_batch_size ({top}) < init_batch_size ({m0})")
    lo, hi = (None, None) if local_bsz_bounds is None else tuple(local_bsz_bounds)
    lo = positive_int(lo, "local_bsz_bounds[0]", allow_none=True)
    hi = positive_int(hi, "local_bsz_bounds[1]", allow_none=True)
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"local_bsz_bounds ({local_bsz_bounds!r}) must have min <= max")
    return m0, top, (lo, hi)
