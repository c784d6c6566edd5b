"""The search: which configurations a job may run, and the best of them by the model.

* :func:`feasible_configs`: the ``(atomic_bsz, accum_steps)`` rows a job may run on a
  list of micro-batch sizes: within ``local_bsz_bounds``, a total batch between
  ``init_batch_size`` and a cap. The ONE feasibility rule:
  :meth:`GoodputHooks.suggest` (``atomic_sizes=``) and
  :meth:`goodput_jax.adaptive.AdaptiveBatchSize.candidates` both use it.
* :func:`search`: the smallest total batch within a tolerance of the best predicted
  goodput, as a :class:`Suggestion`, never predicted slower than the running
  configuration when that one is itself a candidate. One replica follows the rule of
  many: its per-replica batch grows within ``local_bsz_bounds`` and accumulation is
  used beyond them (AdaptDL's optimizer instead holds one replica's per-replica batch
  at ``init_batch_size``, so one replica always suggested its starting batch; that rule
  stays the default of :meth:`GoodputFunction.optimize`, the schedulers' reference).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, NamedTuple

import numpy as np

from goodput_jax.model.formulas import efficiency_np, goodput_np

__all__ = ["SearchLimits", "Suggestion", "feasible_configs", "search"]


class Suggestion(NamedTuple):
    """What :meth:`GoodputHooks.suggest` recommends.

    Attributes:
        atomic_bsz: per-replica micro-batch size.
        accum_steps: extra accumulation steps (0 = none), AdaptDL's convention.
        batch_size: total batch ``num_replicas * atomic_bsz * (accum_steps + 1)``.
        goodput: predicted goodput of the suggestion.
        current_goodput: predicted goodput of the running configuration.
        predicted_speedup: ``goodput / current_goodput``.
        efficiency: statistical efficiency of the suggested batch size.
        num_replicas: the replica count the suggestion is for.
        model_error: median relative error of the step-time model on the
            profiled configurations (nan before a fit).
        profiled_configs: number of profiled configurations behind the fit.
        confident: ``model_error <= 0.15`` and at least two profiled
            configurations (one configuration fixes ``alpha_c`` by assumption).
        best_batch_size: total batch of the goodput's argmax (the suggestion is
            the smallest batch within the tolerance of it).
        best_goodput: predicted goodput at ``best_batch_size``.
        with_accumulation_batch_size, with_accumulation_speedup: when the job does not
            allow gradient accumulation, the suggestion the same search would make with
            it (total batch, predicted speedup over the running configuration), so a
            report can say what the limit costs (it pays where the per-replica batch
            bound holds the batch back and the all-reduce is worth amortising). 0 / nan
            when accumulation is allowed, or with ``atomic_sizes``.
    """

    atomic_bsz: int
    accum_steps: int
    batch_size: int
    goodput: float
    current_goodput: float
    predicted_speedup: float
    efficiency: float
    num_replicas: int = 0
    model_error: float = float("nan")
    profiled_configs: int = 0
    confident: bool = False
    best_batch_size: int = 0
    best_goodput: float = float("nan")
    with_accumulation_batch_size: int = 0
    with_accumulation_speedup: float = float("nan")


def feasible_configs(num_replicas: int, atomic_sizes: Any, max_accum_steps: int, *,
                     init_batch_size: int, max_batch_size: float,
                     local_bsz_bounds: tuple[int | None, int | None] = (None, None),
                     ) -> np.ndarray:
    """Feasible ``(atomic_bsz, accum_steps)`` rows, shape ``(k, 2)`` int64, sizes ascending.

    A row is feasible when ``atomic_bsz`` is within ``local_bsz_bounds`` (either may
    be None), ``accum_steps`` is in ``0..max_accum_steps`` and the total batch
    ``num_replicas * atomic_bsz * (accum_steps + 1)`` is in
    ``[init_batch_size, max_batch_size]``.

    Raises:
        ValueError: ``atomic_sizes`` is not a non-empty list of positive integers.

    Example:
        >>> feasible_configs(2, [4, 8, 16], 1, init_batch_size=16, max_batch_size=32).tolist()
        [[4, 1], [8, 0], [8, 1], [16, 0]]
    """
    try:
        sizes = sorted({int(b) for b in atomic_sizes})
        bad = any(isinstance(b, bool) or not isinstance(b, numbers.Integral) or b < 1
                  for b in atomic_sizes)
    except (TypeError, ValueError):
        bad = True
    if bad or not sizes:
        raise ValueError(f"atomic_sizes ({atomic_sizes!r}) must be a non-empty list of "
                         f"positive integers")
    lo, hi = local_bsz_bounds
    rows = [(b, s) for b in sizes if (lo is None or b >= lo) and (hi is None or b <= hi)
            for s in range(int(max_accum_steps) + 1)
            if init_batch_size <= num_replicas * b * (s + 1) <= max_batch_size]
    return np.array(rows, dtype=np.int64).reshape(-1, 2)


def _discrete(fn: Any, nodes: int, reps: int, rows: np.ndarray,
              tolerance: float) -> tuple[tuple, tuple]:
    """(argmax, smallest total within ``tolerance`` of it) over ``rows``, each
    ``(goodput, atomic_bsz, accum_steps)``."""
    total = reps * rows[:, 0] * (rows[:, 1] + 1)
    good = np.asarray(goodput_np(fn.perf_params, fn.grad_params, fn.init_batch_size, nodes,
                                 reps, rows[:, 0], rows[:, 1]))
    i = int(np.argmax(good))
    top = (float(good[i]), int(rows[i, 0]), int(rows[i, 1]))
    # smallest total within the tolerance; among equal totals, the best goodput
    ok = np.flatnonzero(good >= (1.0 - tolerance) * good[i])
    j = int(ok[np.lexsort((-good[ok], total[ok]))[0]])
    return top, (float(good[j]), int(rows[j, 0]), int(rows[j, 1]))


def _continuous(fn: Any, nodes: int, reps: int, cap: int, init_batch_size: int,
                bounds: tuple, accumulation: bool, tolerance: float) -> tuple[tuple, tuple]:
    def best_under(c: int) -> tuple[float, int, int]:
        # one replica follows the rule of many (its per-replica batch grows within the
        # bounds), as feasible_configs and AdaptiveBatchSize do; AdaptDL's fixed-M0 rule
        # stays the default of GoodputFunction.optimize (the schedulers' reference)
        return fn.optimize(nodes, reps, max_batch_size=c, atomic_bsz_range=bounds,
                           accumulation=accumulation, adaptdl_single_replica=False)

    top = pick = best_under(cap)
    if tolerance > 0:
        # The best goodput under a batch cap grows with the cap: bisect for the
        # smallest cap that reaches the target (to 1%), scalar numpy calls.
        target = (1.0 - tolerance) * top[0]
        lo, hi = init_batch_size, cap
        first = best_under(lo)
        if first[0] >= target:
            pick = first
        else:
            while hi - lo > max(1, lo // 100):
                mid = (lo + hi) // 2
                cand = best_under(mid)
                if cand[0] >= target:
                    hi, pick = mid, cand
                else:
                    lo = mid
    return top, pick


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchLimits:
    """What a :func:`search` may choose from, validated once.

    Attributes:
        max_batch_size: the total batch cap (at least the model's ``init_batch_size``).
        local_bsz_bounds: ``(min, max)`` samples per replica per micro-step (None: open).
        gradient_accumulation: whether extra micro-steps may build a larger batch.
        tolerance: fraction of the optimum given up for a smaller batch, in ``[0, 1)``.
        atomic_sizes: None: the model's continuous optimum; a list of micro-batch sizes:
            only :func:`feasible_configs` of them (a jittable step compiles a few sizes).
        max_accum_steps: extra micro-steps at most with ``gradient_accumulation``.

    Example:
        >>> SearchLimits(max_batch_size=0)
        Traceback (most recent call last):
        ValueError: max_batch_size (0) must be >= 1
    """

    max_batch_size: int
    local_bsz_bounds: tuple[int | None, int | None] = (None, None)
    gradient_accumulation: bool = False
    tolerance: float = 0.05
    atomic_sizes: Any = None
    max_accum_steps: int = 7

    def __post_init__(self) -> None:
        if int(self.max_batch_size) < 1:
            raise ValueError(f"max_batch_size ({self.max_batch_size}) must be >= 1")
        if not 0.0 <= float(self.tolerance) < 1.0:
            raise ValueError(f"tolerance ({self.tolerance}) must be in [0, 1)")
        if int(self.max_accum_steps) < 0:
            raise ValueError(f"max_accum_steps ({self.max_accum_steps}) must be >= 0")


def search(fn: Any, limits: SearchLimits, *, num_nodes: int, num_replicas: int,
           current: tuple[int, int, int, int], model_error: float = float("nan"),
           profiled_configs: int = 0) -> Suggestion:
    """The smallest batch within ``limits.tolerance`` of the best predicted goodput of ``fn``.

    Args:
        fn: a :class:`~goodput_jax.model.goodput.GoodputFunction`.
        limits: the job's limits and the candidates (:class:`SearchLimits`).
        num_nodes, num_replicas: the placement to plan for.
        current: the running ``(nodes, replicas, atomic_bsz, accum_steps)``.
        model_error, profiled_configs: the fit's quality, carried into the suggestion.

    Returns:
        The :class:`Suggestion`. When the running configuration is itself a candidate
        (same placement, within the limits, on the list if one is given) and the pick is
        predicted slower than it (the tolerance can give that up), the running
        configuration is returned (speedup 1): a switch is never predicted to lose.

    Raises:
        ValueError: ``atomic_sizes`` with no feasible configuration.
    """
    max_batch_size, local_bsz_bounds = limits.max_batch_size, limits.local_bsz_bounds
    tolerance, atomic_sizes = limits.tolerance, limits.atomic_sizes
    gradient_accumulation = limits.gradient_accumulation
    m0 = int(fn.init_batch_size)
    accum_top = int(limits.max_accum_steps) if limits.gradient_accumulation else 0
    cur_n, cur_r, cur_b, cur_s = current
    if atomic_sizes is not None:
        rows = feasible_configs(num_replicas, atomic_sizes, accum_top, init_batch_size=m0,
                                max_batch_size=max_batch_size, local_bsz_bounds=local_bsz_bounds)
        if not len(rows):
            raise ValueError(
                f"atomic_sizes ({atomic_sizes!r}): no size within local_bsz_bounds "
                f"{local_bsz_bounds} gives a total batch between init_batch_size "
                f"({m0}) and {max_batch_size} on {num_replicas} replica(s)")
        top, pick = _discrete(fn, num_nodes, num_replicas, rows, tolerance)
        on_list = bool(np.any((rows[:, 0] == cur_b) & (rows[:, 1] == cur_s)))
    else:
        top, pick = _continuous(fn, num_nodes, num_replicas, max_batch_size, m0,
                                local_bsz_bounds, gradient_accumulation, tolerance)
        lo, hi = local_bsz_bounds
        on_list = ((lo is None or cur_b >= lo) and (hi is None or cur_b <= hi)
                   and (cur_s == 0 or gradient_accumulation)
                   and cur_r * cur_b * (cur_s + 1) <= max_batch_size)
    cur_total = cur_r * cur_b * (cur_s + 1)
    current_goodput = float("nan")
    if cur_total >= m0:  # below it: no comparable goodput
        current_goodput = float(goodput_np(fn.perf_params, fn.grad_params, m0, cur_n, cur_r,
                                           cur_b, cur_s))
    goodput, bsz, steps = pick
    if (on_list and (num_nodes, num_replicas) == (cur_n, cur_r)
            and current_goodput > 0 and goodput < current_goodput):
        goodput, bsz, steps = current_goodput, cur_b, cur_s
    total = num_replicas * int(bsz) * (int(steps) + 1)
    speedup = float(goodput) / current_goodput if current_goodput > 0 else float("nan")
    acc_total, acc_speedup = 0, float("nan")
    if atomic_sizes is None and not gradient_accumulation:
        _, (acc_good, acc_b, acc_s) = _continuous(fn, num_nodes, num_replicas, max_batch_size,
                                                  m0, local_bsz_bounds, True, tolerance)
        acc_total = num_replicas * int(acc_b) * (int(acc_s) + 1)
        if current_goodput > 0:
            acc_speedup = float(acc_good) / current_goodput
    return Suggestion(
        atomic_bsz=int(bsz), accum_steps=int(steps), batch_size=total,
        goodput=float(goodput), current_goodput=current_goodput, predicted_speedup=speedup,
        efficiency=float(efficiency_np(fn.grad_params, m0, total)),
        num_replicas=num_replicas, model_error=model_error, profiled_configs=profiled_configs,
        confident=bool(profiled_configs >= 2 and math.isfinite(model_error)
                       and model_error <= 0.15),
        best_batch_size=num_replicas * int(top[1]) * (int(top[2]) + 1),
        best_goodput=float(top[0]),
        with_accumulation_batch_size=acc_total,
        with_accumulation_speedup=acc_speedup,
    )
