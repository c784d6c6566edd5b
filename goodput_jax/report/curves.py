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

__all__ = ["SUGGESTION_TOLERANCE", "ModelCurves", "model_curves", "parse_hints",
           "replica_counts_run"]

#: the suggestion's rule (``GoodputHooks.suggest``'s default): the smallest batch within
#: this fraction of the best modelled goodput
SUGGESTION_TOLERANCE = 0.05


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
        accumulation: whether the job allows gradient accumulation
            (``gradientAccumulation``). The batch curve follows the job's own limits
            and the rule of the job's search (:func:`goodput_jax.model.goodput.batch_plan`
            with ``adaptdl_single_replica=False``, as
            :func:`goodput_jax.integrations.search.search`): the star lies on it.
        batch_sizes_with_accumulation, goodput_with_accumulation,
            efficiency_with_accumulation: when the job does not allow accumulation and
            it would pay (its best goodput more than 5% above the job's), the batch curve
            with it (empty otherwise).
        suggested_with_accumulation: ``(batch_size, replicas, goodput)``: the smallest
            batch on that curve within 5% of its best (the suggestion's rule), or None.
        goodput_vs_replicas_as_configured: when the job does not allow accumulation,
            the best goodput per replica count under its own limits (empty otherwise).
            :attr:`goodput_vs_replicas` always allows accumulation: one replica can
            then run any batch that more replicas run, so the curve is never
            superlinear; without it, one replica is held within its per-replica bound
            while two replicas run twice that, and the curve can jump.
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
    accumulation: bool = True
    batch_sizes_with_accumulation: list[float] = dataclasses.field(default_factory=list)
    goodput_with_accumulation: list[float] = dataclasses.field(default_factory=list)
    efficiency_with_accumulation: list[float] = dataclasses.field(default_factory=list)
    suggested_with_accumulation: tuple[int, int, float] | None = None
    goodput_vs_replicas_as_configured: list[float] = dataclasses.field(default_factory=list)

    @property
    def extrapolated_replicas(self) -> list[int]:
        """Replica counts on the curve beyond :attr:`profiled_replicas`."""
        return [r for r in self.replicas if r > self.profiled_replicas]

    @property
    def own_limit_points(self) -> list[tuple[int, float]]:
        """``(replicas, goodput)`` where the job's own limits (no accumulation) give less
        than the curve with accumulation (by more than 0.5%): the replica plot's hollow
        triangles, and what its caption names. Empty when accumulation is allowed."""
        return [(r, gj) for r, gj, ga in zip(self.replicas, self.goodput_vs_replicas_as_configured,
                                             self.goodput_vs_replicas, strict=False)
                if gj < 0.995 * ga]

    @property
    def accumulation_star(self) -> tuple[int, int, float] | None:
        """The batch plot's hollow star: :attr:`suggested_with_accumulation` when there is a
        suggestion and it is more than 5% above it (else None: not drawn, not captioned)."""
        a, s = self.suggested_with_accumulation, self.suggested
        return a if a is not None and s is not None and a[2] > 1.05 * s[2] else None


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


def replica_counts_run(hints: Hints | None, programs: Iterable[Any]) -> tuple[int, ...] | None:
    """The replica counts the job's steps ran on, read from its recorded step programs.

    The training hooks profile every step they time at its configuration, and the runtime
    records each step program with the devices it runs on
    (:class:`~goodput_jax.measure.productivity.ProgramStats` ``cost.num_devices``). When the
    job is data parallel with one device per replica (its latest program runs on the hints'
    ``numReplicas`` devices), the device counts of the programs that ran productive steps,
    up to the hints' ``maxProfiledReplicas``, are replica counts that were profiled.

    Args:
        hints: the job's hints (None: nothing known).
        programs: the job's program stats (``get_program_goodput().programs``), any order.

    Returns:
        The counts, ascending, with the running and the largest profiled one; None when the
        programs cannot tell (none recorded, or not one device per replica).

    Example:
        >>> from goodput_jax.measure.productivity import DevicePeak, ProgramCost, program_stats
        >>> pk = DevicePeak("cpu", 1e11, 4e9, "measured")
        >>> progs = [program_stats(ProgramCost("f", 1e9, 0, 1e6, "cpu", n), pk, [0.1], s)
        ...          for n, s in ((2, 0), (4, 10))]
        >>> replica_counts_run(Hints(max_profiled_replicas=4, num_replicas=4), progs)
        (2, 4)
    """
    if hints is None or not hints.num_replicas:
        return None
    ran = sorted((p for p in programs if p.num_steps > 0), key=lambda p: p.first_step)
    if not ran or ran[-1].cost.num_devices != hints.num_replicas:
        return None
    top = max(hints.max_profiled_replicas, hints.num_replicas)
    counts = {p.cost.num_devices for p in ran if p.cost.num_devices <= top}
    counts |= {hints.num_replicas} | ({hints.max_profiled_replicas}
                                      if hints.max_profiled_replicas else set())
    return tuple(sorted(counts))


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

    from goodput_jax.model.goodput import GoodputFunction, batch_plan

    fn = GoodputFunction(h.perf_params, h.grad_params, h.init_batch_size)
    m0 = h.init_batch_size
    n = h.num_nodes or 1
    r = h.num_replicas or 1
    atomic = h.atomic_bsz or max(1, m0 // r)
    accum = h.accum_steps or 0
    max_bs = h.max_batch_size or m0
    lo, hi = h.local_bsz_bounds or (None, None)
    accumulation = bool(h.gradient_accumulation)
    top = max(max_bs, r * atomic * (accum + 1), 2 * m0)
    grid = np.unique(np.round(np.geomspace(max(m0, r * (lo or 1)), top, points)).astype(int))

    def batch_curve(acc: bool) -> tuple[list[float], list[float], list[float]]:
        # what the optimizer would run for each total batch (its rule), inside the limits
        a, st = batch_plan(m0, r, grid, hi if hi else math.inf, acc,
                           adaptdl_single_replica=False)
        total = r * a * (st + 1)
        ok = (a >= (lo or 1)) & (a <= (hi or math.inf)) & (total >= m0)
        seen: dict[float, tuple[float, float]] = {}
        for t, aa, ss in zip(total[ok], a[ok], st[ok], strict=True):
            seen.setdefault(float(t), (float(aa), float(ss)))
        sizes = sorted(seen)
        good = [float(fn.evaluate(n, r, int(seen[t][0]), int(seen[t][1]))) for t in sizes]
        return sizes, good, [float(fn.efficiency(t)) for t in sizes]

    keep, gvb, evb = batch_curve(accumulation)
    cur = (r * atomic * (accum + 1), r, float(fn.evaluate(n, r, atomic, accum)))
    sug = None
    if h.suggested_batch_size:
        sa = h.suggested_atomic_bsz or max(1, h.suggested_batch_size // r)
        ss = h.suggested_accum_steps or 0
        sug = (r * sa * (ss + 1), r, float(fn.evaluate(n, r, sa, ss)))
    acc_sizes: list[float] = []
    acc_good: list[float] = []
    acc_eff: list[float] = []
    acc_sug = None
    if not accumulation:
        acc_sizes, acc_good, acc_eff = batch_curve(True)
        if not acc_good or max(acc_good) <= (1.0 + SUGGESTION_TOLERANCE) * max(gvb, default=0.0):
            acc_sizes, acc_good, acc_eff = [], [], []  # accumulation would not pay
        within = [i for i, g in enumerate(acc_good)
                  if g >= (1.0 - SUGGESTION_TOLERANCE) * max(acc_good)]
        if within:
            acc_sug = (int(acc_sizes[within[0]]), r, acc_good[within[0]])
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

    def replica_curve(acc: bool) -> list[float]:
        return [float(fn.optimize(min(n, rr), rr, max_batch_size=max(max_bs, rr * (lo or 1)),
                                  atomic_bsz_range=(lo, hi), accumulation=acc,
                                  adaptdl_single_replica=False)[0])
                for rr in reps]

    gvr = replica_curve(True)
    return ModelCurves(keep, gvb, evb, reps, gvr, profiled, cur, sug, h,
                       profiled_replica_counts=tuple(sorted(counts)),
                       accumulation=accumulation, batch_sizes_with_accumulation=acc_sizes,
                       goodput_with_accumulation=acc_good,
                       efficiency_with_accumulation=acc_eff, suggested_with_accumulation=acc_sug,
                       goodput_vs_replicas_as_configured=[] if accumulation
                       else replica_curve(False))
