"""Checking the Sia solver: random small instances and their exact optimum (scipy ``milp``).

Test support (not shipped in the package): used by ``tests/sched/test_sia.py`` and by
``benchmarks/policy_bench.py --hetero --gap`` to report the gap between
:func:`~goodput_jax.sched.sia.solve_assignment` and the exact integer optimum. Needs
scipy (a dependency of JAX).

Example:
    >>> prob = random_problem(0)
    >>> cost, choice = exact_choice(prob)
    >>> cost <= prob.objective(solve_problem(prob)) + 1e-9
    True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from goodput_jax.sched.sia import SiaConfigs, SiaPolicy, sia_configs, solve_assignment
from goodput_jax.sched.types import JobInfo

__all__ = ["SiaProblem", "exact_choice", "random_problem", "solve_problem"]


@dataclass
class SiaProblem:
    """One round's assignment problem: Sia's cost matrix and the cluster."""

    cost: np.ndarray  # [jobs, configs], inf = not allowed
    configs: SiaConfigs
    capacity: np.ndarray
    previous: np.ndarray
    lambda_n: float

    def objective(self, choice: np.ndarray) -> float:
        """Sia's objective of ``choice`` (inf if it breaks a capacity).

        Example:
            >>> p = random_problem(1)
            >>> p.objective(np.full(len(p.cost), -1)) == p.lambda_n * len(p.cost)
            True
        """
        choice = np.asarray(choice)
        used = np.zeros(len(self.capacity))
        for j, k in enumerate(choice):
            if k >= 0:
                used[self.configs.ctype[k]] += self.configs.gpus[k]
        if np.any(used > self.capacity + 1e-9):
            return float("inf")
        picked = self.cost[np.arange(len(choice)), np.maximum(choice, 0)]
        return float(np.sum(np.where(choice >= 0, picked, self.lambda_n)))


def _power_law(scale: float, exponent: float):
    """A goodput function ``scale * replicas ** exponent`` (its own closure per job)."""
    return lambda nodes, replicas: scale * np.asarray(replicas, float) ** exponent


def random_problem(seed: int, max_jobs: int = 8, num_types: int = 2) -> SiaProblem:
    """A random Sia round: up to ``max_jobs`` jobs on ``num_types`` GPU types.

    Each type has 1-3 nodes of 4 or 8 GPUs and a speed; each job has a concave
    goodput curve per type (``speed * gpus ** a``, ``a`` in [0.3, 1]), a random
    replica cap, age and restart count, and maybe a current configuration.

    Example:
        >>> random_problem(3).cost.shape[0] <= 8
        True
    """
    rng = np.random.default_rng(seed)
    names = [f"type{t}" for t in range(num_types)]
    cluster = {n: (int(rng.integers(1, 4)), int(rng.choice([4, 8]))) for n in names}
    speed = {n: float(rng.uniform(0.5, 4.0)) for n in names}
    configs = sia_configs(cluster)
    policy = SiaPolicy(resource="gpu")
    num_jobs = int(rng.integers(2, max_jobs + 1))
    jobs = []
    for _ in range(num_jobs):
        a = float(rng.uniform(0.3, 1.0))
        affinity = {n: speed[n] * float(rng.uniform(0.6, 1.6)) for n in names}
        fns = {n: _power_law(affinity[n], a) for n in names}
        cap = int(rng.choice([1, 2, 4, 8, 16, 32]))
        jobs.append(JobInfo({"gpu": 1}, lambda n, r: r, 0.0, 0, cap, goodput_fns=fns,
                            age=float(rng.uniform(0, 4000)),
                            num_restarts=int(rng.integers(0, 4))))
    previous = np.full(num_jobs, -1, np.int64)
    for j in range(num_jobs):
        if rng.random() < 0.5:
            previous[j] = int(rng.integers(0, len(configs)))
    cap = np.array([cluster[n][0] * cluster[n][1] for n in names], np.float32)
    configs = SiaConfigs(configs.types, configs.ctype, configs.nodes, configs.gpus, cap,
                         configs.gpus_per_node)
    cost = policy.cost_matrix(jobs, configs, previous, now=0.0)
    return SiaProblem(cost, configs, cap, previous, policy.lambda_n)


def solve_problem(problem: SiaProblem) -> np.ndarray:
    """The JAX solver's choice for ``problem``.

    Example:
        >>> solve_problem(random_problem(0)).ndim
        1
    """
    gain = problem.lambda_n - problem.cost
    return solve_assignment(gain, problem.configs.ctype, problem.configs.gpus,
                            problem.capacity, previous=problem.previous)


def exact_choice(problem: SiaProblem) -> tuple[float, np.ndarray]:
    """Exact optimum of ``problem`` with ``scipy.optimize.milp`` (binary ``x[j, c]``).

    Returns:
        ``(objective, choice)``.

    Example:
        >>> obj, choice = exact_choice(random_problem(2))
        >>> obj == random_problem(2).objective(choice)
        True
    """
    from scipy.optimize import Bounds, LinearConstraint, milp

    cost = problem.cost
    J, K = cost.shape
    ok = np.isfinite(cost)
    # Minimise sum x * (cost - lambda_n) + lambda_n * J over allowed cells.
    c = np.where(ok, cost - problem.lambda_n, 0.0).ravel()
    ub = ok.astype(float).ravel()
    rows = []
    lo, hi = [], []
    for j in range(J):
        a = np.zeros((J, K))
        a[j] = 1.0
        rows.append(a.ravel())
        lo.append(0.0)
        hi.append(1.0)
    for t in range(len(problem.capacity)):
        a = np.zeros((J, K))
        a[:, problem.configs.ctype == t] = problem.configs.gpus[problem.configs.ctype == t]
        rows.append(a.ravel())
        lo.append(0.0)
        hi.append(float(problem.capacity[t]))
    res = milp(c, integrality=np.ones_like(c), bounds=Bounds(np.zeros_like(ub), ub),
               constraints=LinearConstraint(np.array(rows), lo, hi))
    if not res.success:
        raise RuntimeError(f"milp failed: {res.message}")
    x = np.round(res.x).reshape(J, K)
    choice = np.where(x.sum(1) > 0, x.argmax(1), -1)
    return problem.objective(choice), choice
