"""Padded-size bucketing: few distinct array shapes, so jitted kernels compile rarely.

Every padded array in goodput_jax (fitting batches in :mod:`goodput_jax.model.perf`,
the scheduler's job/node/configuration axes in :mod:`goodput_jax.sched`) takes its
size from :func:`bucket`, so the rules live in one place.

Example:
    >>> bucket(5), bucket(9), bucket(3, 1)
    (8, 16, 4)
    >>> bucket(9, 1, fine=True), bucket(17, 16, fine=True)
    (10, 20)
"""

from __future__ import annotations

import numbers

__all__ = ["bucket"]


def bucket(value: int, minimum: int = 8, *, fine: bool = False) -> int:
    """Smallest bucketed size ``>= max(value, minimum)``.

    Args:
        value: the size needed (a non-negative integer).
        minimum: the smallest size returned (>= 1).
        fine: ``False`` (default): a power of two (at most 100% padding, fewest
            shapes; the scheduler's axes). ``True``: a size of the form
            ``{4, 5, 6, 7} * 2**k`` (at most 25% padding; the fitting batches of
            :mod:`goodput_jax.model.perf`); sizes up to 4 are returned as is.

    Returns:
        The padded size (a Python int).

    Raises:
        ValueError: if ``value`` is negative or ``minimum`` < 1.

    Example:
        >>> [bucket(n, 1) for n in (1, 2, 3, 5, 8, 9)]
        [1, 2, 4, 8, 8, 16]
        >>> [bucket(n, 1, fine=True) for n in (3, 5, 8, 9, 15, 33)]
        [3, 5, 8, 10, 16, 40]
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"bucket: value must be an integer >= 0, got {value!r}")
    if isinstance(minimum, bool) or not isinstance(minimum, numbers.Integral) or minimum < 1:
        raise ValueError(f"bucket: minimum must be an integer >= 1, got {minimum!r}")
    n = max(int(value), int(minimum))
    if not fine:
        return 1 << (n - 1).bit_length()
    if n <= 4:
        return n
    step = 1 << ((n - 1).bit_length() - 3)  # n - 1 < 8 * step
    return -(-n // step) * step
