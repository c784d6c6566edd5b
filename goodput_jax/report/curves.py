"""The modelled goodput curves of a job, computed by :mod:`goodput_jax.model` from its hints.

The training hooks publish a :class:`~goodput_jax.model.hints.Hints` record with
the fitted step-time model and gradient statistics. From it,
:func:`model_curves` asks :class:`~goodput_jax.model.goodput.GoodputFunction`
for goodput (samples/s of useful progress, counted in M0-equivalent samples)
against the total batch size at the current replica count, and the best goodput
per replica count, and marks the replica counts beyond what was profiled.

Example:
    >>> model_curves(None) is None
    True
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

from goodput_jax.model.hints import Hints

__all__ = ["ModelCurves", "model_curves", "parse_hints"]


@dataclasses.dataclass
class ModelCurves:
    """Goodput curves of the fitted model (from a job's hints).

    Goodput here is the modelled rate of useful progress: throughput (samples/s)
    x statistical efficiency, in M0-equivalent samples per second.

    Attributes:
        batch_sizes, goodput_vs_batch, efficiency_vs_batch: the batch-size
            curve at the current replicas (best accumulation for each batch).
        replicas, goodput_vs_replicas: best goodput per replica count.
        profiled_replicas: the largest replica count the step-time model was
            fitted on (``max(maxProfiledReplicas, numReplicas)``); larger counts
            are extrapolated.
        current: ``(batch_size, replicas, goodput)`` of the running configuration.
        suggested: ``(batch_size, replicas, goodput)`` of the suggestion, or None.
        hints: the :class:`Hints` they came from.
        profiled_replica_counts: the replica counts known to have been profiled,
            ascending: those given to :func:`model_curves`, else the two the hints
            prove (``maxProfiledReplicas`` and the running ``numReplicas``). The
            counts in between were not necessarily measured.
    """

    batch_sizes: list[float]
    goodput_vs_batch: list[float]
    efficiency_vs_batch: list[float]
    replicas: list[int]
    goodput_vs_replicas: list[float]
    profiled_replicas: int
    current: tuple[int, int, float]
    suggested: tuple[int, int, float] | None
    hints: Hints
    profiled_replica_counts: tuple[int, ...] = ()

    @property
    def extrapolated_replicas(self) -> list[int]:
        """Replica counts on the curve beyond :attr:`profiled_replicas`."""
        return [r for r in self.replicas if r > self.profiled_replicas]


def parse_hints(raw: Hints | Mapping[str, Any] | None) -> Hints | None:
    """The typed hints from what the store returned (``get_latest_hints()``).

    Args:
        raw: a :class:`Hints`, its JSON mapping, or None.

    Raises:
        TypeError / ValueError: the mapping is not valid hints (names the key).

    Example:
        >>> parse_hints({"initBatchSize": 64}).init_batch_size
        64
    """
    if raw is None or isinstance(raw, Hints):
        return raw
    return Hints.from_json(raw)


def model_curves(hints: Hints | Mapping[str, Any] | None, points: int = 48, *,
                 profiled_replicas: Iterable[int] | None = None) -> ModelCurves | None:
    """The goodput-vs-batch-size and goodput-vs-replicas curves from a job's hints.

    Args:
        hints: the job's latest hints (``GoodputCalculator.get_latest_hints()``
            or a :class:`Hints`).
        points: number of batch sizes on the curve.
        profiled_replicas: the replica counts the step-time model was profiled on,
            when the caller knows them (the hints carry only the largest); None: the
            largest and the running count.

    Returns:
        :class:`ModelCurves`, or None when the hints lack a fitted model
        (``perfParams``, ``gradParams``, ``initBatchSize``).

    Raises:
        TypeError / ValueError: the hints mapping is malformed (see :class:`Hints`).

    Example:
        >>> model_curves({"initBatchSize": 8}) is None
        True
    """
    h = parse_hints(hints)
    if h is None or h.perf_params is None or h.grad_params is None or not h.init_batch_size:
        return None
    import numpy as np

    from goodput_jax.model.goodput import GoodputFunction

    fn = GoodputFunction(h.perf_params, h.grad_params, h.init_batch_size)
    m0 = h.init_batch_size
    n = h.num_nodes or 1
    r = h.num_replicas or 1
    atomic = h.atomic_bsz or max(1, m0 // r)
    accum = h.accum_steps or 0
    max_bs = h.max_batch_size or m0
    lo, hi = h.local_bsz_bounds or (None, None)
    accumulation = h.gradient_accumulation
    hi_b = float(hi) if hi else math.inf
    top = max(max_bs, r * atomic * (accum + 1), 2 * m0)
    bs = np.unique(np.round(np.geomspace(max(m0, r * (lo or 1)), top, points)).astype(int))
    gvb, evb, keep = [], [], []
    for b in bs:
        local = b / r
        steps = max(0, math.ceil(local / hi_b) - 1) if accumulation and math.isfinite(hi_b) else 0
        a = max(1, math.ceil(local / (steps + 1)))
        if not accumulation and a > hi_b:
            continue
        if r * a * (steps + 1) < m0:
            continue
        keep.append(float(r * a * (steps + 1)))
        gvb.append(float(fn.evaluate(n, r, a, steps)))
        evb.append(float(fn.efficiency(r * a * (steps + 1))))
    cur = (r * atomic * (accum + 1), r, float(fn.evaluate(n, r, atomic, accum)))
    sug = None
    if h.suggested_batch_size:
        sa = h.suggested_atomic_bsz or max(1, h.suggested_batch_size // r)
        ss = h.suggested_accum_steps or 0
        sug = (r * sa * (ss + 1), r, float(fn.evaluate(n, r, sa, ss)))
    profiled = max(h.max_profiled_replicas or 0, r)
    if profiled_replicas is None:
        counts = {r} | ({h.max_profiled_replicas} if h.max_profiled_replicas else set())
    else:
        counts = {int(c) for c in profiled_replicas}
        if any(c < 1 for c in counts):
            raise ValueError(f"profiled_replicas ({sorted(counts)!r}) must be counts >= 1")
        profiled = max([profiled, *counts])
    max_r = max(8, 2 * r, 2 * profiled)
    reps = list(range(1, max_r + 1))
    gvr = []
    for rr in reps:
        g, _b, _s = fn.optimize(min(n, rr), rr, max_batch_size=max(max_bs, rr * (lo or 1)),
                                atomic_bsz_range=(lo, hi), accumulation=accumulation)
        gvr.append(float(g))
    return ModelCurves(keep, gvb, evb, reps, gvr, profiled, cur, sug, h,
                       profiled_replica_counts=tuple(sorted(counts)))
