"""Data sources the adaptive batch size draws from: any number of examples per call.

* :class:`ArraySource`: in-memory arrays (a pytree of numpy arrays sharing the
  leading axis), shuffled per epoch from a seed; its position is a tiny JSON
  state, so a restored job continues with the exact next example.
* :class:`IterableSource`: any Python iterable of examples (each a pytree of
  arrays or scalars, e.g. a grain or tf.data numpy iterator of single
  examples); its state is the number of examples consumed, restored by
  skipping that many from a fresh iterator.

Example:
    >>> import numpy as np
    >>> src = ArraySource({"x": np.arange(10)}, shuffle=False)
    >>> src.take(4)["x"].tolist(), src.take(8)["x"].tolist()
    ([0, 1, 2, 3], [4, 5, 6, 7, 8, 9, 0, 1])
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

__all__ = ["ArraySource", "IterableSource", "as_source"]


def _tree_map(fn: Callable, tree: Any, *rest: Any) -> Any:
    if isinstance(tree, dict):
        return {k: _tree_map(fn, tree[k], *(r[k] for r in rest)) for k in tree}
    if isinstance(tree, (tuple, list)):
        return type(tree)(_tree_map(fn, t, *(r[i] for r in rest)) for i, t in enumerate(tree))
    return fn(tree, *rest)


def _leaves(tree: Any) -> list:
    if isinstance(tree, dict):
        return [x for k in tree for x in _leaves(tree[k])]
    if isinstance(tree, (tuple, list)):
        return [x for t in tree for x in _leaves(t)]
    return [tree]


class ArraySource:
    """Examples from in-memory arrays, reshuffled every epoch (deterministic from ``seed``).

    Args:
        arrays: dict / tuple / list pytree of arrays with a shared leading size N.
        seed: shuffling seed.
        shuffle: shuffle each epoch (else sequential order).

    Example:
        >>> src = ArraySource((np.arange(6), np.arange(6) * 2), seed=0)
        >>> x, y = src.take(3)
        >>> bool((y == 2 * x).all())
        True
    """

    def __init__(self, arrays: Any, *, seed: int = 0, shuffle: bool = True):
        """``Any``: ``arrays`` is a pytree of arrays (JAX pytrees have no static type)."""
        leaves = [np.asarray(a) for a in _leaves(arrays)]
        if not leaves:
            raise ValueError("arrays must hold at least one array")
        n = leaves[0].shape[0] if leaves[0].ndim else 0
        for a in leaves:
            if a.ndim == 0 or a.shape[0] != n:
                raise ValueError(f"arrays must share a leading size; got shapes "
                                 f"{[x.shape for x in leaves]}")
        if n == 0:
            raise ValueError("arrays must hold at least one example")
        self.arrays = _tree_map(np.asarray, arrays)
        self.size = n
        self.seed = int(seed)
        self.shuffle = bool(shuffle)
        self.epoch = 0
        self.index = 0
        self._perm = self._permutation(0)

    def _permutation(self, epoch: int) -> np.ndarray:
        if not self.shuffle:
            return np.arange(self.size)
        return np.random.default_rng((self.seed, epoch)).permutation(self.size)

    def take(self, n: int) -> Any:
        """The next ``n`` examples (wrapping into the next epoch), stacked.

        ``Any``: params, optimizer state and batches are JAX pytrees, which have no static type.
        """
        if n < 1:
            raise ValueError(f"n ({n!r}) must be >= 1")
        parts, left = [], int(n)
        while left:
            k = min(left, self.size - self.index)
            parts.append(self._perm[self.index:self.index + k])
            self.index += k
            left -= k
            if self.index == self.size:
                self.epoch += 1
                self.index = 0
                self._perm = self._permutation(self.epoch)
        idx = np.concatenate(parts)
        return _tree_map(lambda a: a[idx], self.arrays)

    @property
    def epochs_done(self) -> float:
        """Epochs consumed so far (fractional)."""
        return self.epoch + self.index / self.size

    def state_dict(self) -> dict:
        """Position (JSON-safe)."""
        return {"epoch": self.epoch, "index": self.index, "seed": self.seed}

    def load_state_dict(self, state: dict) -> None:
        """Continue from :meth:`state_dict`."""
        self.seed = int(state["seed"])
        self.epoch = int(state["epoch"])
        self.index = int(state["index"])
        self._perm = self._permutation(self.epoch)


class IterableSource:
    """Examples from a Python iterable (re-created by ``factory`` on each epoch and restore).

    Args:
        factory: a callable returning a fresh iterable of examples, or an
            iterable (then it is iterated once; restore and epochs need a factory).

    Example:
        >>> src = IterableSource(lambda: ({"x": np.float32(i)} for i in range(5)))
        >>> src.take(3)["x"].tolist()
        [0.0, 1.0, 2.0]
    """

    def __init__(self, factory: Callable[[], Iterable] | Iterable):
        self._factory: Callable[[], Iterable] | None
        if callable(factory):
            self._factory = factory
        else:
            it = factory
            self._factory = None
            self._it = iter(it)
        if self._factory is not None:
            self._it = iter(self._factory())
        self.consumed = 0
        self.epoch = 0

    def _next(self) -> Any:
        try:
            return next(self._it)
        except StopIteration:
            if self._factory is None:
                raise
            self.epoch += 1
            self._it = iter(self._factory())
            return next(self._it)

    def take(self, n: int) -> Any:
        """The next ``n`` examples, stacked along a new leading axis.

        ``Any``: params, optimizer state and batches are JAX pytrees, which have no static type.
        """
        if n < 1:
            raise ValueError(f"n ({n!r}) must be >= 1")
        items = [self._next() for _ in range(int(n))]
        self.consumed += int(n)
        return _tree_map(lambda *xs: np.stack([np.asarray(x) for x in xs]), items[0], *items[1:])

    def state_dict(self) -> dict:
        """Examples consumed (JSON-safe)."""
        return {"consumed": self.consumed}

    def load_state_dict(self, state: dict) -> None:
        """Skip to the position of :meth:`state_dict` (needs a factory)."""
        if self._factory is None:
            raise ValueError("IterableSource built from an iterator cannot be restored; "
                             "pass a factory (a callable returning a fresh iterable)")
        self._it = iter(self._factory())
        self.consumed = 0
        self.epoch = 0
        for _ in range(int(state["consumed"])):
            self._next()
        self.consumed = int(state["consumed"])


def as_source(data: Any, *, seed: int = 0) -> ArraySource | IterableSource:
    """An :class:`ArraySource` for arrays (dict/tuple of numpy arrays), else an
    :class:`IterableSource`.

    Example:
        >>> type(as_source({"x": np.zeros(3)})).__name__
        'ArraySource'

    ``Any``: params, optimizer state and batches are JAX pytrees, which have no static type.
    """
    if isinstance(data, (ArraySource, IterableSource)):
        return data
    leaves = _leaves(data) if isinstance(data, (dict, tuple)) else [data]
    if leaves and all(isinstance(x, np.ndarray) for x in leaves):
        return ArraySource(data, seed=seed)
    return IterableSource(data)
