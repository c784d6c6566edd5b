"""Compile time of the policies: precompiling, the persistent cache, compile counts.

A policy's first round pays the XLA compilation of its jitted search
(:class:`~goodput_jax.sched.pollux.PolluxPolicy`: seconds at 100 jobs on 64
nodes; :class:`~goodput_jax.sched.sia.SiaPolicy`: about a second). The arrays are
padded to power-of-two buckets of jobs (Pollux: at least 16, Sia: at least 8),
nodes and configurations (:func:`goodput_jax.model.buckets.bucket`), so a round
compiles only when the problem moves into a bucket (or changes a static
argument) not seen before in the process. Three tools:

* :func:`precompile` (``policy.precompile(jobs, nodes, ...)``): runs the
  policy's programs once on a problem like the real one, on a copy of the
  policy (its cycle counter, carried population and statistics are untouched,
  so the decisions that follow are those of a policy never precompiled), for
  the given job counts (the jobs are repeated to reach each count);
* :func:`enable_compilation_cache`: JAX's persistent compilation cache in a
  directory (every program, however small), so a restarted process loads the
  compiled programs instead of compiling them (checked on CPU with this JAX);
* :class:`CompileCounter`: counts XLA compilations (``jax.monitoring``), for
  tests and benchmarks that must not rely on wall time.

Example:
    >>> from goodput_jax.sched import JobInfo, NodeInfo, SiaPolicy
    >>> nodes = {0: NodeInfo({"gpu": 4}, False, "t4")}
    >>> jobs = {"a": JobInfo({"gpu": 1}, lambda n, r: r, 0.0, 0, 4)}
    >>> info = SiaPolicy(resource="gpu").precompile(jobs, nodes, job_counts=[1, 5])
    >>> info["job_counts"]
    [1, 5]
"""

from __future__ import annotations

import copy
import os
import threading
import time
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Protocol, Self, TypedDict

import jax

from goodput_jax.sched.types import JobInfo, NodeInfo

__all__ = ["CompileCounter", "Optimizable", "PrecompileInfo", "enable_compilation_cache",
           "precompile", "repeat_jobs"]

_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_HIT_EVENT = "/jax/compilation_cache/cache_hits"
_lock = threading.Lock()


class _Totals(TypedDict):
    compiles: int
    compile_seconds: float
    cache_hits: int


_totals: _Totals = {"compiles": 0, "compile_seconds": 0.0, "cache_hits": 0}
_installed = False


def _on_duration(event: str, duration_secs: float, **kwargs: str | int) -> None:
    if event == _COMPILE_EVENT:
        with _lock:
            _totals["compiles"] += 1
            _totals["compile_seconds"] += float(duration_secs)


def _on_event(event: str, **kwargs: str | int) -> None:
    if event == _HIT_EVENT:
        with _lock:
            _totals["cache_hits"] += 1


def _install() -> None:
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
    jax.monitoring.register_event_duration_secs_listener(_on_duration)
    jax.monitoring.register_event_listener(_on_event)


class CompileCounter:
    """Counts XLA compilations in this process while it is open (all threads).

    Attributes (after or during the ``with`` block):
        compiles: backend compilations (a program loaded from the persistent
            cache counts too: it is one more program this process had to get);
        cache_hits: of which were loaded from the persistent cache;
        compile_seconds: time spent in them.

    Example:
        >>> import jax.numpy as jnp
        >>> with CompileCounter() as c:
        ...     _ = jax.jit(lambda x: x * 3 + 1)(jnp.arange(7.0))
        >>> c.compiles >= 1
        True
    """

    def __init__(self) -> None:
        _install()
        self._start = _totals.copy()
        self._end: _Totals | None = None

    def __enter__(self) -> Self:
        with _lock:
            self._start = _totals.copy()
        self._end = None
        return self

    def __exit__(self, *exc: object) -> None:
        with _lock:
            self._end = _totals.copy()

    def _now(self) -> _Totals:
        if self._end is not None:
            return self._end
        with _lock:
            return _totals.copy()

    @property
    def compiles(self) -> int:
        return self._now()["compiles"] - self._start["compiles"]

    @property
    def cache_hits(self) -> int:
        return self._now()["cache_hits"] - self._start["cache_hits"]

    @property
    def compile_seconds(self) -> float:
        return self._now()["compile_seconds"] - self._start["compile_seconds"]


def enable_compilation_cache(path: str | os.PathLike | None) -> str | None:
    """Use JAX's persistent compilation cache in ``path`` (``None``: turn it off).

    Every program is cached (minimum compile time 0 s, no minimum size): the
    policies' small helper programs add up too. Takes effect even after this
    process has compiled something (the cache is re-initialised). It is
    process-wide: call it in the process that owns the policies (the
    controller actor does, with ``STATE_DIR/jax-cache``).

    Returns:
        The absolute cache directory, or ``None``.

    Example:
        >>> import tempfile
        >>> d = enable_compilation_cache(tempfile.mkdtemp())
        >>> enable_compilation_cache(None) is None
        True
    """
    from jax.experimental.compilation_cache import compilation_cache as cc

    _install()
    if path is None:
        jax.config.update("jax_compilation_cache_dir", None)
        cc.reset_cache()
        return None
    path = os.path.abspath(os.fspath(path))
    os.makedirs(path, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    cc.reset_cache()
    return path


def repeat_jobs(jobs: Mapping[Hashable, JobInfo], count: int) -> dict[tuple[str, int], JobInfo]:
    """``count`` jobs that cycle through ``jobs`` (keys ``("precompile", i)``).

    Example:
        >>> j = JobInfo({"gpu": 1}, lambda n, r: r, 0.0, 0, 2)
        >>> len(repeat_jobs({"a": j}, 3))
        3
    """
    if not jobs:
        raise ValueError("repeat_jobs: give at least one job")
    if int(count) < 1:
        raise ValueError(f"repeat_jobs: count must be >= 1, got {count!r}")
    infos = list(jobs.values())
    return {("precompile", i): infos[i % len(infos)] for i in range(int(count))}


class Optimizable(Protocol):
    """A policy :func:`precompile` can warm up: PolluxPolicy, SiaPolicy.

    Its ``optimize(jobs, nodes, base_allocations, *extra_args)`` takes ``Any``
    arguments here: the policies' signatures differ past the first three (Pollux
    requires a node template), and :func:`precompile` passes what its caller gives.
    """

    def optimize(self, *args: Any, **kwargs: Any) -> object:
        """One scheduling round (see the policy); ``Any`` arguments: the policies'
        signatures differ (see the class)."""
        ...


class PrecompileInfo(TypedDict):
    """What :func:`precompile` reports (a plain dict).

    Keys:
        seconds: wall time of the compiling rounds.
        compiles: XLA compilations in them (:class:`CompileCounter`).
        cache_hits: of which were loaded from the persistent cache.
        job_counts: the job counts compiled for.
    """

    seconds: float
    compiles: int
    cache_hits: int
    job_counts: list[int]


def precompile(policy: Optimizable, jobs: Mapping[Hashable, JobInfo],
               nodes: Mapping[Hashable, NodeInfo], *, extra_args: Sequence[object] = (),
               base_allocations: Mapping[Hashable, Sequence[Hashable]] | None = None,
               job_counts: Sequence[int] | None = None) -> PrecompileInfo:
    """Compile ``policy``'s programs for ``jobs`` on ``nodes`` before the first round.

    Runs ``optimize(jobs, nodes, base_allocations, *extra_args)`` on a copy of the
    policy, once per job count (``None``: the count of ``jobs``); for another count
    the jobs are repeated (or cut) to reach it, so the padded shapes and static
    arguments are those of a cluster like this one with that many jobs. The policy
    itself is not changed: its later decisions are those of a policy that was never
    precompiled.

    Args:
        policy: a PolluxPolicy or SiaPolicy (their ``precompile`` methods call this).
        jobs, nodes: a problem like the real one (the real one, at startup).
        extra_args: more positional arguments of ``optimize`` (Pollux: the node template).
        base_allocations: the current allocations (``None``: none; the shapes
            do not depend on them).
        job_counts: job counts to compile for.

    Returns:
        ``{"seconds", "compiles", "cache_hits", "job_counts"}``.
    """
    if not jobs or not nodes:
        raise ValueError("precompile: give at least one job and one node")
    counts = [len(jobs)] if job_counts is None else [int(c) for c in job_counts]
    clone = copy.copy(policy)
    for name, value in (("_prev", None), ("_cycle", 0), ("_last_best", None)):
        if hasattr(clone, name):
            setattr(clone, name, value)
    started = time.perf_counter()
    with CompileCounter() as counter:
        for count in counts:
            if count < 1:
                continue
            problem = dict(jobs) if count == len(jobs) else repeat_jobs(jobs, count)
            base = dict(base_allocations or {}) if count == len(jobs) else {}
            clone.optimize(problem, nodes, base, *extra_args)
    return {"seconds": time.perf_counter() - started, "compiles": counter.compiles,
            "cache_hits": counter.cache_hits, "job_counts": counts}
