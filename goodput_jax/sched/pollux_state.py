"""What :class:`goodput_jax.sched.pollux.PolluxPolicy` keeps between cycles, and reports.

:class:`PolluxCarry` (the cycle count and last population, saved by a scheduler that
restarts) and :class:`CycleStats` (the last cycle's diagnostics).

Example:
    >>> carry = PolluxCarry(3)
    >>> PolluxCarry.from_json(carry.to_json()) == carry
    True
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["CycleStats", "PolluxCarry"]


@dataclass
class CycleStats:
    """Diagnostics of the last :meth:`PolluxPolicy.optimize` call.

    Attributes:
        objective: power-mean objective of the returned allocation.
        greedy_objective: objective of the greedy allocation built from scratch
            (worst fit: new jobs go to the emptiest node).
        grown_objective: objective of the previous allocation grown greedily
            (first fit).
        previous_objective: objective of the (repaired) previous allocation.
        utility: total speedup per accelerator of the returned allocation.
        desired_nodes: the autoscaling answer.
        seconds: wall time of the cycle.
    """

    objective: float
    greedy_objective: float
    grown_objective: float
    previous_objective: float
    utility: float
    desired_nodes: int
    seconds: float


@dataclass(frozen=True, eq=False)
class PolluxCarry:
    """What :meth:`PolluxPolicy.optimize` carries from one cycle into the next.

    The cycle count (folded into the search's PRNG key) and the last population
    with its fitness, keyed by job and node. A scheduler that restarts (the cluster
    runtime's controller) saves it after each cycle and gives it to
    :meth:`PolluxPolicy.restore`, so that its next cycles decide as a policy that
    never stopped would (same seed, same inputs).

    Attributes:
        cycle: cycles run so far.
        job_keys: the last cycle's jobs, in the population's row order.
        node_keys: its nodes, in column order.
        population: int32 ``[population, jobs, nodes]`` replicas per job and node
            (None before the first cycle).
        fitness: float32 ``[population]`` (None before the first cycle).

    Example:
        >>> carry = PolluxCarry(0)
        >>> carry.cycle, carry.population is None
        (0, True)
        >>> PolluxCarry.from_json(carry.to_json()) == carry
        True
    """

    cycle: int
    job_keys: tuple[Hashable, ...] = ()
    node_keys: tuple[Hashable, ...] = ()
    population: np.ndarray | None = None
    fitness: np.ndarray | None = None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PolluxCarry):
            return NotImplemented
        def same(a: np.ndarray | None, b: np.ndarray | None) -> bool:
            return (a is None and b is None) or (
                a is not None and b is not None and bool(np.array_equal(a, b)))
        return (self.cycle == other.cycle and tuple(self.job_keys) == tuple(other.job_keys)
                and tuple(self.node_keys) == tuple(other.node_keys)
                and same(self.population, other.population)
                and same(self.fitness, other.fitness))

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (keys must be strings or integers; -inf fitness as None).

        Its values are ``Any``: JSON values of several types (an int, key lists, nested
        lists of ints, floats or None).

        Raises:
            TypeError: a job or node key that JSON cannot hold.
        """
        for name, keys in (("job_keys", self.job_keys), ("node_keys", self.node_keys)):
            for k in keys:
                if not isinstance(k, (str, int)) or isinstance(k, bool):
                    raise TypeError(f"PolluxCarry.{name}: key {k!r} is not a string or an "
                                    f"integer, so it cannot be saved as JSON")
        fit = None if self.fitness is None else [
            float(x) if np.isfinite(x) else None for x in np.asarray(self.fitness)]
        pop = None if self.population is None else np.asarray(self.population).tolist()
        return {"cycle": int(self.cycle), "job_keys": list(self.job_keys),
                "node_keys": list(self.node_keys), "population": pop, "fitness": fit}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PolluxCarry:
        """Parse :meth:`to_json`'s dict.

        ``data`` maps to ``Any``: parsed JSON, checked here field by field.

        Raises:
            ValueError: a malformed carry (it names the field).
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"PolluxCarry: expected a JSON object, got {data!r:.80}")
        cycle = data.get("cycle")
        if not isinstance(cycle, int) or isinstance(cycle, bool) or cycle < 0:
            raise ValueError(f"PolluxCarry.cycle ({cycle!r}) must be an integer >= 0")
        jobs, nodes = tuple(data.get("job_keys") or ()), tuple(data.get("node_keys") or ())
        pop, fit = data.get("population"), data.get("fitness")
        if (pop is None) != (fit is None):
            raise ValueError("PolluxCarry: population and fitness must both be set or both None")
        if pop is not None:
            pop = np.asarray(pop, np.int32)
            fit = np.asarray([-np.inf if x is None else x for x in fit or ()], np.float32)
            if pop.ndim != 3 or len(fit) != len(pop) or pop.shape[1] < len(jobs) \
                    or pop.shape[2] < len(nodes):
                raise ValueError(f"PolluxCarry: population shape {pop.shape} does not fit "
                                 f"{len(fit)} fitness values, {len(jobs)} jobs, {len(nodes)} nodes")
        return cls(cycle, jobs, nodes, pop, fit)
