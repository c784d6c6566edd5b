"""Speedup of a job as a function of its allocation, from its goodput model.

``SpeedupFunction(goodput_fn, ...)(num_nodes, num_replicas)`` is the best
goodput reachable on ``num_replicas`` replicas spread over ``num_nodes`` nodes
(batch size and gradient accumulation chosen optimally within the job's
limits), divided by the best goodput on one replica.  The policy needs it for
every ``(nodes, replicas)`` pair of every job, so the values are kept in a
dense table ``table[n, r]`` that is computed in one vectorised call and grown
on demand; :func:`speedup_tables` builds the tables of many jobs at once, in
one vmapped call per group of jobs that share a configuration.

Example:
    >>> from goodput_jax.model.goodput import GoodputFunction
    >>> from goodput_jax.model.types import GradParams, PerfParams
    >>> fn = GoodputFunction(PerfParams(0.121, 0.00568, 0.0236, 0.00634, 0.0118, 0.00317, 1.14),
    ...                      GradParams(sqr=0.00136, var=0.000502), 128)
    >>> speedup = SpeedupFunction(fn, max_batch_size=1280, atomic_bsz_range=(64, 256))
    >>> speedup(1, 1), speedup(0, 0)
    (1.0, 0.0)
    >>> bool(1.5 < speedup(1, 4) < 4.0)
    True
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike

from goodput_jax.model.buckets import bucket as _bucket


@runtime_checkable
class OptimizingGoodput(Protocol):
    """What :class:`SpeedupFunction` needs of its goodput function (a
    :class:`~goodput_jax.model.goodput.GoodputFunction`): ``optimize``."""

    def optimize(self, *args: Any, **kwargs: Any) -> Any:
        """``(goodput, atomic_bsz, accum_steps)`` of ``(num_nodes, num_replicas,
        max_batch_size=, atomic_bsz_range=, accumulation=)``; ``Any`` because models
        differ in their array types (numpy or JAX) and extra options."""
        ...


@runtime_checkable
class RowTable(Protocol):
    """A goodput read from a row indexed by device count (the simulator's Sia tables):
    one-dimensional ``row``, batched without a call per job."""

    row: np.ndarray


__all__ = ["OptimizingGoodput", "RowTable", "SpeedupFunction", "goodput_grid", "goodput_matrix",
           "speedup_tables", "table_dims"]

# Dense memo tables grow to these sizes at most; larger queries are memoised
# per (nodes, replicas) pair instead.
_TABLE_MAX_NODES = 128
_TABLE_MAX_REPLICAS = 512


def table_dims(max_nodes: int, max_replicas: int) -> tuple[int, int]:
    """Bucketed table extents covering ``max_nodes`` and ``max_replicas``.

    Example:
        >>> table_dims(3, 12)
        (8, 16)
    """
    return _bucket(max_nodes), _bucket(max_replicas)


def _as_int_array(value: Any, name: str) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.integer)
                                 or np.issubdtype(arr.dtype, np.floating)):
        raise TypeError(f"{name} must be integers, got {value!r}")
    if np.issubdtype(arr.dtype, np.floating) and (
            not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr))):
        raise ValueError(f"{name} must be whole numbers, got {value!r}")
    return arr.astype(np.int64)


def _check_allocation(num_nodes: Any, num_replicas: Any) -> tuple[np.ndarray, np.ndarray, bool]:
    scalar = np.ndim(num_nodes) == 0 and np.ndim(num_replicas) == 0
    nodes = _as_int_array(num_nodes, "num_nodes")
    replicas = _as_int_array(num_replicas, "num_replicas")
    try:
        nodes, replicas = np.broadcast_arrays(nodes, replicas)
    except ValueError:
        raise ValueError(f"num_nodes shape {nodes.shape} and num_replicas shape "
                         f"{replicas.shape} do not broadcast") from None
    if np.any(nodes < 0) or np.any(replicas < 0):
        raise ValueError(f"num_nodes and num_replicas must be >= 0, got {num_nodes!r}, "
                         f"{num_replicas!r}")
    bad = nodes > replicas
    if np.any(bad):
        i = np.argmax(bad.ravel())
        raise ValueError(f"num_nodes ({nodes.ravel()[i]}) > num_replicas "
                         f"({replicas.ravel()[i]})")
    bad = (nodes == 0) != (replicas == 0)
    if np.any(bad):
        i = np.argmax(bad.ravel())
        raise ValueError(f"num_nodes ({nodes.ravel()[i]}) and num_replicas "
                         f"({replicas.ravel()[i]}) must both be zero or both positive")
    return nodes, replicas, scalar


def _grid(max_nodes: int, max_replicas: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Valid (n, r) cells of a (max_nodes+1) x (max_replicas+1) table: 1 <= n <= r."""
    n, r = np.meshgrid(np.arange(max_nodes + 1), np.arange(max_replicas + 1), indexing="ij")
    valid = (n >= 1) & (n <= r)
    return n, r, valid


class SpeedupFunction:
    """Memoised speedup of one job over a single replica.

    Args:
        goodput_fn: a :class:`~goodput_jax.model.goodput.GoodputFunction` (anything
            with its ``optimize(num_nodes, num_replicas, max_batch_size,
            atomic_bsz_range, accumulation)`` method works).
        max_batch_size: largest total batch size the job accepts (``None``: the
            goodput model's default).
        atomic_bsz_range: ``(min, max)`` per-replica batch size, or ``None``.
        accumulation: whether gradient accumulation may be used.
        mem_size: AdaptDL's memo extent (its default is 32). When given, the
            first table computed already covers ``num_nodes, num_replicas <
            mem_size`` (up to 128 nodes x 512 replicas), so later queries in that
            range never call the goodput model again. ``None``: the table grows
            to what is asked (power-of-two extents). Values never depend on it.

    ``speedup(num_nodes, num_replicas)`` accepts scalars (returns a Python
    float) or arrays (returns a float64 array of the broadcast shape);
    ``speedup(0, 0) == 0``; ``speedup[n, r]`` is the same as ``speedup(n, r)``.

    Example:
        >>> class Linear:  # any object with GoodputFunction.optimize's signature
        ...     def optimize(self, n, r, max_batch_size=None, atomic_bsz_range=None,
        ...                  accumulation=False):
        ...         return np.asarray(r, float) * 2.0, None, None
        >>> SpeedupFunction(Linear())(2, 6)
        6.0
    """

    def __init__(self, goodput_fn: OptimizingGoodput, max_batch_size: int | None = None,
                 atomic_bsz_range: Sequence[int | None] | None = None,
                 accumulation: bool = False, mem_size: int | None = None):
        if mem_size is not None and (isinstance(mem_size, bool)
                                     or not isinstance(mem_size, numbers.Integral)
                                     or mem_size < 1):
            raise ValueError(f"mem_size must be a positive integer or None, got {mem_size!r}")
        if not isinstance(goodput_fn, OptimizingGoodput):
            raise TypeError(f"goodput_fn must have an optimize method (a GoodputFunction), "
                            f"got {type(goodput_fn).__name__}")
        if max_batch_size is not None and (
                isinstance(max_batch_size, bool) or not isinstance(max_batch_size, numbers.Real)
                or max_batch_size <= 0):
            raise ValueError(f"max_batch_size must be a positive number or None, "
                             f"got {max_batch_size!r}")
        if atomic_bsz_range is not None:
            if len(atomic_bsz_range) != 2:
                raise ValueError(f"atomic_bsz_range must be (min, max), got {atomic_bsz_range!r}")
        self._goodput_fn: OptimizingGoodput = goodput_fn
        self._max_batch_size: float | None = max_batch_size
        self._atomic_bsz_range = None if atomic_bsz_range is None else tuple(atomic_bsz_range)
        self._accumulation = bool(accumulation)
        self._mem_size = None if mem_size is None else int(mem_size)
        base = self._goodput(np.ones(1, np.int64), np.ones(1, np.int64))[0]
        if not (math.isfinite(base) and base > 0):
            raise ValueError(f"goodput at 1 node, 1 replica must be positive and finite, got "
                             f"{base!r}; check the goodput model's parameters and batch limits")
        self._base_goodput = float(base)
        self._table: np.ndarray = np.zeros((1, 1))  # table[n, r]; (0, 0) -> 0
        self._memo: dict[tuple[int, int], float] = {(0, 0): 0.0}

    # Properties mirror the constructor so batched builders can group jobs.
    @property
    def goodput_fn(self) -> OptimizingGoodput:
        """The goodput model."""
        return self._goodput_fn

    @property
    def max_batch_size(self) -> float | None:
        """Largest total batch size (``None``: the model's default)."""
        return self._max_batch_size

    @property
    def atomic_bsz_range(self) -> tuple[int | None, ...] | None:
        """``(min, max)`` per-replica batch size, or ``None``."""
        return self._atomic_bsz_range

    @property
    def accumulation(self) -> bool:
        """Whether gradient accumulation may be used."""
        return self._accumulation

    @property
    def base_goodput(self) -> float:
        """Goodput at 1 node, 1 replica."""
        return self._base_goodput

    @property
    def mem_size(self) -> int | None:
        """AdaptDL's memo extent (``None``: grow as asked)."""
        return self._mem_size

    def _goodput(self, nodes: np.ndarray, replicas: np.ndarray) -> np.ndarray:
        goodput, _, _ = self._goodput_fn.optimize(
            nodes, replicas, max_batch_size=self._max_batch_size,
            atomic_bsz_range=self._atomic_bsz_range, accumulation=self._accumulation)
        goodput = np.asarray(goodput, dtype=np.float64).reshape(nodes.shape)
        return np.where(np.isfinite(goodput), np.maximum(goodput, 0.0), 0.0)

    def _speedup(self, nodes: np.ndarray, replicas: np.ndarray) -> np.ndarray:
        """Goodput over the goodput at (1, 1), both from ONE ``optimize`` call: a goodput
        model may evaluate small and large calls at different precisions (a
        ``GoodputFunction`` runs a few configurations in float64 on the host, many in
        the float32 kernel), and the speedup at (1, 1) stays exactly 1."""
        goodput = self._goodput(np.append(nodes, 1), np.append(replicas, 1))
        base = goodput[-1]
        if not (math.isfinite(base) and base > 0):
            base = self._base_goodput
        return goodput[:-1] / base

    def _set_table(self, table: np.ndarray) -> None:
        if table.shape[0] >= self._table.shape[0] and table.shape[1] >= self._table.shape[1]:
            self._table = table

    def table(self, max_nodes: int, max_replicas: int) -> np.ndarray:
        """Dense table ``t[n, r]`` for ``0 <= n <= max_nodes``, ``0 <= r <= max_replicas``.

        Cells with ``n > r`` or with exactly one of ``n``, ``r`` zero are 0.
        The whole table comes from one vectorised goodput call and is memoised
        (grown to power-of-two extents so repeated growth stays cheap).

        Args:
            max_nodes: largest node count needed.
            max_replicas: largest replica count needed.

        Returns:
            float64 array of shape ``(max_nodes + 1, max_replicas + 1)`` (a copy).

        Example:
            >>> class Lin:
            ...     def optimize(self, n, r, **kw): return np.asarray(r, float), None, None
            >>> SpeedupFunction(Lin()).table(2, 3)
            array([[0., 0., 0., 0.],
                   [0., 1., 2., 3.],
                   [0., 0., 2., 3.]])
        """
        max_nodes, max_replicas = int(max_nodes), int(max_replicas)
        if max_nodes < 0 or max_replicas < 0:
            raise ValueError(f"max_nodes ({max_nodes}) and max_replicas ({max_replicas}) "
                             f"must be >= 0")
        have_n, have_r = self._table.shape
        if max_nodes >= have_n or max_replicas >= have_r:
            least = 0 if self._mem_size is None else self._mem_size - 1
            dims = table_dims(max(max_nodes, have_n - 1, min(least, _TABLE_MAX_NODES)),
                              max(max_replicas, have_r - 1, min(least, _TABLE_MAX_REPLICAS)))
            n, r, valid = _grid(*dims)
            table = np.zeros(valid.shape)
            table[valid] = self._speedup(n[valid], r[valid])
            self._table = table
        return self._table[:max_nodes + 1, :max_replicas + 1].copy()

    def __call__(self, num_nodes: Any, num_replicas: Any) -> Any:
        nodes, replicas, scalar = _check_allocation(num_nodes, num_replicas)
        if nodes.size == 0:
            return np.zeros(nodes.shape)
        max_n, max_r = int(nodes.max()), int(replicas.max())
        if max_n <= _TABLE_MAX_NODES and max_r <= _TABLE_MAX_REPLICAS:
            if max_n >= self._table.shape[0] or max_r >= self._table.shape[1]:
                self.table(max_n, max_r)
            out = self._table[nodes, replicas]
        else:
            pairs = np.stack([nodes.ravel(), replicas.ravel()], axis=1)
            uniq, inverse = np.unique(pairs, axis=0, return_inverse=True)
            missing = [i for i, (a, b) in enumerate(uniq) if (int(a), int(b)) not in self._memo]
            if missing:
                idx = np.asarray(missing)
                values = self._speedup(uniq[idx, 0], uniq[idx, 1])
                for i, v in zip(missing, values):
                    self._memo[(int(uniq[i, 0]), int(uniq[i, 1]))] = float(v)
            values = np.array([self._memo[(int(a), int(b))] for a, b in uniq])
            out = values[inverse.ravel()].reshape(nodes.shape)
        if scalar:
            return float(out)
        return np.asarray(out, dtype=np.float64)

    def goodput(self, num_nodes: Any, num_replicas: Any) -> Any:
        """Absolute goodput (``speedup * base_goodput``), comparable across accelerator types.

        Takes and returns what ``speedup(num_nodes, num_replicas)`` does (hence ``Any``):
        ints give a float, int arrays a float64 array.

        Example:
            >>> class Lin:
            ...     def optimize(self, n, r, **kw): return np.asarray(r, float) * 5.0, None, None
            >>> SpeedupFunction(Lin()).goodput(1, 2)
            10.0
        """
        out = self(num_nodes, num_replicas)
        return out * self._base_goodput

    def __getitem__(self, index: tuple[Any, Any]) -> Any:
        if not (isinstance(index, tuple) and len(index) == 2):
            raise TypeError(f"index a SpeedupFunction as speedup[num_nodes, num_replicas], "
                            f"got {index!r}")
        return self(*index)

    def __repr__(self) -> str:
        return (f"SpeedupFunction(max_batch_size={self._max_batch_size!r}, "
                f"atomic_bsz_range={self._atomic_bsz_range!r}, "
                f"accumulation={self._accumulation})")


def _callable_table(fn: Callable, max_nodes: int, max_replicas: int) -> np.ndarray:
    """Table of an arbitrary ``fn(num_nodes, num_replicas)`` evaluated on the integer grid."""
    n, r, valid = _grid(max_nodes, max_replicas)
    table = np.zeros(valid.shape)
    try:
        values = np.asarray(fn(n[valid], r[valid]), dtype=np.float64)
        values = np.broadcast_to(values, n[valid].shape)
    except (TypeError, ValueError):  # scalar-only callables
        values = np.array([float(fn(int(a), int(b))) for a, b in zip(n[valid], r[valid])])
    if not np.all(np.isfinite(values)):
        raise ValueError(f"speedup_fn {fn!r} returned non-finite values")
    table[valid] = np.maximum(values, 0.0)
    return table


def _group_key(fn: SpeedupFunction) -> bool | None:
    """Jobs whose tables can come from one vmapped goodput call share this key."""
    from goodput_jax.model.goodput import GoodputFunction

    if type(fn.goodput_fn) is not GoodputFunction:
        return None
    return fn.accumulation


def speedup_tables(speedup_fns: Sequence[Callable], max_nodes: int,
                   max_replicas: int) -> np.ndarray:
    """Dense speedup tables of many jobs, ``out[i, n, r] = speedup_fns[i](n, r)``.

    Functions that appear several times (jobs sharing one model) are computed
    once. :class:`SpeedupFunction` objects whose goodput model is a
    :class:`~goodput_jax.model.goodput.GoodputFunction` are grouped by
    configuration and evaluated with one vmapped ``optimize_fn`` call per
    group; other callables are evaluated on the integer grid directly.

    Args:
        speedup_fns: one speedup callable per job.
        max_nodes: largest node count needed.
        max_replicas: largest replica count needed.

    Returns:
        float64 array ``(len(speedup_fns), max_nodes + 1, max_replicas + 1)``.

    Example:
        >>> speedup_tables([lambda n, r: r, lambda n, r: 0.5 * r], 1, 2)[:, 1]
        array([[0. , 1. , 2. ],
               [0. , 0.5, 1. ]])
    """
    max_nodes, max_replicas = int(max_nodes), int(max_replicas)
    out = np.zeros((len(speedup_fns), max_nodes + 1, max_replicas + 1))
    unique: dict[int, list[int]] = {}
    fns: dict[int, Callable] = {}
    for i, fn in enumerate(speedup_fns):
        if not callable(fn):
            raise TypeError(f"speedup_fns[{i}] is not callable: {fn!r}")
        unique.setdefault(id(fn), []).append(i)
        fns[id(fn)] = fn
    groups: dict[bool, list[SpeedupFunction]] = {}
    for key, fn in fns.items():
        if isinstance(fn, SpeedupFunction):
            have_n, have_r = fn._table.shape
            if have_n > max_nodes and have_r > max_replicas:
                out[unique[key]] = fn._table[:max_nodes + 1, :max_replicas + 1]
                continue
            group = _group_key(fn)
            if group is not None:
                groups.setdefault(group, []).append(fn)
            else:
                out[unique[key]] = fn.table(max_nodes, max_replicas)
        else:
            out[unique[key]] = _callable_table(fn, max_nodes, max_replicas)
    for members in groups.values():
        tables = _vmapped_tables(members, max_nodes, max_replicas)
        for fn, table in zip(members, tables):
            fn._set_table(table)
            out[unique[id(fn)]] = table[:max_nodes + 1, :max_replicas + 1]
    return out


def goodput_grid(params: np.ndarray, num_nodes: ArrayLike, num_replicas: ArrayLike,
                 accumulation: bool, clean: bool = True) -> np.ndarray:
    """Best goodput of many jobs on a grid of allocations, in ONE jitted ``optimize_fn`` call.

    The batched table kernel of the scheduler: PolluxPolicy's dense speedup tables,
    the simulator's per-job tables and Sia's (type x count) tables all come from it.

    Args:
        params: ``[..., 13]`` per job (or per job and cell): the 7 PerfParams, the 2
            GradParams (|G|^2, tr Sigma), init batch size, max batch size, min and max
            local batch size; broadcast against the allocation arrays.
        num_nodes, num_replicas: allocation arrays (>= 1), broadcastable with
            ``params[..., 0]``.
        accumulation: whether gradient accumulation may be used.
        mem_size: AdaptDL's memo extent (its default is 32). When given, the
            first table computed already covers ``num_nodes, num_replicas <
            mem_size`` (up to 128 nodes x 512 replicas), so later queries in that
            range never call the goodput model again. ``None``: the table grows
            to what is asked (power-of-two extents). Values never depend on it.
        clean: set non-finite or negative values to 0.

    Returns:
        float64 goodput of the broadcast shape.

    Example:
        >>> p = np.array([0.121, 0.00568, 0.0236, 0.00634, 0.0118, 0.00317, 1.14,
        ...               0.00136, 0.000502, 128, 1280, 64, 256])
        >>> g = goodput_grid(p[None, None], np.array([[1, 1]]), np.array([[1, 4]]), False)
        >>> g.shape, bool(g[0, 1] > g[0, 0] > 0)
        ((1, 2), True)
    """
    from goodput_jax.model.goodput import optimize_fn
    from goodput_jax.model.types import GradParams, PerfParams

    params = np.asarray(params)
    col = [params[..., i] for i in range(13)]
    goodput, _, _ = optimize_fn(PerfParams(*col[:7]), GradParams(col[7], col[8]), col[9],
                                num_nodes, num_replicas, col[10], col[11], col[12],
                                accumulation=accumulation)
    goodput = np.asarray(goodput, dtype=np.float64)
    if not clean:
        return goodput
    return np.where(np.isfinite(goodput), np.maximum(goodput, 0.0), 0.0)


def _vmapped_tables(members: list[SpeedupFunction], max_nodes: int,
                    max_replicas: int) -> list[np.ndarray]:
    """Tables of SpeedupFunctions sharing ``accumulation``, from one :func:`goodput_grid` call.

    Job parameters are stacked along a leading axis (padded to a power of two
    so the jitted kernel compiles once per bucket) and broadcast against the
    ``(n, r)`` grid, so the goodput optimisation of every job and every cell
    runs as one XLA computation.
    """
    dims = table_dims(max_nodes, max_replicas)
    for fn in members:
        have_n, have_r = fn._table.shape
        dims = (max(dims[0], have_n - 1), max(dims[1], have_r - 1))
    n, r, valid = _grid(*dims)
    count = len(members)
    padded = _bucket(count, minimum=1)
    rows = []
    from goodput_jax.model.goodput import GoodputFunction

    for fn in members:
        g = fn.goodput_fn
        if not isinstance(g, GoodputFunction):  # _group_key groups these only
            raise TypeError(f"batched tables need a GoodputFunction, got {type(g).__name__}")
        lo, hi = (None, None) if fn.atomic_bsz_range is None else fn.atomic_bsz_range
        rows.append([float(x) for x in g.perf_params] + [float(x) for x in g.grad_params] + [
            float(g.init_batch_size),
            float(g.init_batch_size if fn.max_batch_size is None else fn.max_batch_size),
            float(lo or 1), float(hi or np.inf)])
    rows += [rows[0]] * (padded - count)
    params = np.asarray(rows)[:, None, None, :]  # [F, 1, 1, 13]
    goodput = goodput_grid(params, np.maximum(n, 1)[None], np.maximum(r, 1)[None],
                           members[0].accumulation)[:count]
    base = np.array([fn.base_goodput for fn in members])[:, None, None]
    tables = np.where(valid[None], goodput / base, 0.0)
    # Keep the memo consistent with single-job evaluation at (1, 1).
    tables[:, 1, 1] = np.where(tables[:, 1, 1] > 0, 1.0, tables[:, 1, 1])
    return list(tables)


def goodput_matrix(goodput_fns: Sequence[Mapping[str, Callable] | None], types: Sequence[str],
                   config_type: ArrayLike, config_nodes: ArrayLike, config_gpus: ArrayLike,
                   ) -> np.ndarray:
    """Goodput of every job in every (type, nodes, GPUs) configuration: a dense ``[jobs, configs]``.

    The (type x count) table of each job, batched over jobs: per type, the
    :class:`SpeedupFunction` s of all jobs are evaluated together
    (:func:`speedup_tables`, one vmapped call per group) and scaled by their
    base goodput; objects with a 1-D ``row`` array (goodput by GPU count, e.g. the
    simulator's tables) are gathered in one indexing; other callables are called
    with the configuration arrays.
    A job without a function for a type gets 0 there (it cannot run there).

    Args:
        goodput_fns: per job, ``{type: fn(num_nodes, num_replicas) -> goodput}``
            (``JobInfo.goodput_fns``) or None.
        types: accelerator type names; ``config_type`` indexes into it.
        config_type, config_nodes, config_gpus: int arrays ``[configs]``.

    Returns:
        float64 ``[len(goodput_fns), configs]``, non-negative.

    Example:
        >>> fns = [{"a": lambda n, r: 1.0 * r, "b": lambda n, r: 3.0 * r}, {"a": lambda n, r: r}]
        >>> goodput_matrix(fns, ["a", "b"], [0, 0, 1], [1, 1, 1], [1, 2, 1])
        array([[1., 2., 3.],
               [1., 2., 0.]])
    """
    ctype = np.asarray(config_type, np.int64)
    cnodes = np.asarray(config_nodes, np.int64)
    cgpus = np.asarray(config_gpus, np.int64)
    out = np.zeros((len(goodput_fns), len(ctype)))
    for t, name in enumerate(types):
        cols = np.nonzero(ctype == t)[0]
        if cols.size == 0:
            continue
        rows: list[int] = []
        spd: list[SpeedupFunction] = []
        other: list[tuple[int, Callable]] = []
        table_rows: list[int] = []
        tables_1d: list[np.ndarray] = []
        for j, fns in enumerate(goodput_fns):
            fn = None if fns is None else fns.get(name)
            if fn is None:
                continue
            if isinstance(fn, SpeedupFunction):
                rows.append(j)
                spd.append(fn)
            elif isinstance(fn, RowTable) and isinstance(fn.row, np.ndarray) \
                    and fn.row.ndim == 1:
                table_rows.append(j)  # goodput read from a row indexed by GPU count
                tables_1d.append(fn.row)
            else:
                other.append((j, fn))
        if tables_1d:
            width = max(len(r) for r in tables_1d)
            stacked = np.zeros((len(tables_1d), width))
            for i, r in enumerate(tables_1d):
                stacked[i, :len(r)] = r
            idx = np.minimum(cgpus[cols], width - 1)
            out[np.asarray(table_rows)[:, None], cols[None, :]] = stacked[:, idx]
        if spd:
            tables = speedup_tables(spd, int(cnodes[cols].max()), int(cgpus[cols].max()))
            base = np.array([fn.base_goodput for fn in spd])
            out[np.asarray(rows)[:, None], cols[None, :]] = (
                tables[:, cnodes[cols], cgpus[cols]] * base[:, None])
        for j, fn in other:
            vals = np.asarray(fn(cnodes[cols], cgpus[cols]), dtype=np.float64)
            out[j, cols] = np.broadcast_to(vals, cols.shape)
    return np.where(np.isfinite(out), np.maximum(out, 0.0), 0.0)
