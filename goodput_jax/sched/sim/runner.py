"""One-call entry points: run a workload under a policy, and the published reference numbers.

Example:
    >>> from goodput_jax.sched.sim.runner import run_workload
    >>> res = run_workload("6", "tiresias")          # doctest: +SKIP
    >>> print(f"{res.avg_jct:.0f} s")                 # doctest: +SKIP
    3493 s
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from goodput_jax.sched.sim.apps import Application, find_workload, load_applications
from goodput_jax.sched.sim.cluster import (
    AdaptiveModel,
    SimResult,
    load_workload,
    make_jobs,
    simulate,
)
from goodput_jax.sched.sim.options import WorkloadOptions, with_keywords

if TYPE_CHECKING:
    from goodput_jax.sched.sim import policies

__all__ = [
    "DEFAULT_HETERO_POLICIES",
    "HETERO_POLICIES",
    "POLICIES",
    "PUBLISHED_REDUCTION",
    "PUBLISHED_SIA",
    "PUBLISHED_WORKLOAD6",
    "SimPolicy",
    "find_sia_workload",
    "make_sim_policy",
    "run_workload",
]

POLICIES = ("pollux", "optimus", "tiresias")
#: Policies on a heterogeneous cluster (``--cluster sia-64``): our SiaPolicy; ``pollux``,
#: heterogeneity-unaware Pollux as the Sia artifact runs it (the baseline); ``pollux-typed``,
#: a stronger unaware variant (real nodes, limits of the type it runs on; see
#: docs/simulator.md).
HETERO_POLICIES = ("sia", "pollux", "pollux-typed")
#: What ``--cluster`` runs side by side unless ``--policy`` says otherwise.
DEFAULT_HETERO_POLICIES = ("sia", "pollux")
#: Sia paper, Table 3 (64 GPUs, 3 types): mean average JCT (h) per workload family.
PUBLISHED_SIA = {"philly": {"sia": 0.6, "pollux": 1.0}, "saturn": {"sia": 0.7, "pollux": 1.0},
                 "newtrace": {"sia": 0.7, "pollux": 1.5}}

#: Average JCT (s) the Pollux paper reports for workload-6 at load 1.0.
PUBLISHED_WORKLOAD6 = {"pollux": 2446.0, "optimus": 5302.0, "tiresias": 3470.0}
#: Mean reduction of Pollux's average JCT over the 8 workloads at load 1.0 (paper).
PUBLISHED_REDUCTION = {"optimus": 0.52, "tiresias": 0.32}


class SimPolicy(NamedTuple):
    """What the simulator runs for a policy name: the policy and the goodput model its
    adaptive jobs use (``None`` for the baselines)."""

    policy: policies.SimPolicy
    model: AdaptiveModel | None


def make_sim_policy(policy: str, *, seed: int = 0, p: float = -1.0,
                    cluster: Mapping[str, tuple[int, int]] | None = None) -> SimPolicy:
    """The simulator's policy and goodput model for a policy name.

    (Not :func:`goodput_jax.cluster.make_policy`, which builds the cluster runtime's
    policy object alone.)

    ``"sia"`` needs the heterogeneous ``cluster``; ``"pollux"`` on such a cluster is the
    heterogeneity-unaware Pollux as the Sia artifact runs it
    (:class:`~.pollux_adapter.UnawarePolluxAdapter`), ``"pollux-typed"`` the stronger
    unaware variant (our PolluxPolicy on the real nodes, batch limits of the current type).

    Raises:
        ValueError: for an unknown name.

    Example:
        >>> make_sim_policy("tiresias").policy.name
        'tiresias'
    """
    from goodput_jax.sched.sim.policies import OptimusPolicy, TiresiasPolicy

    if policy == "sia":
        if cluster is None:
            raise ValueError("policy 'sia' needs a heterogeneous cluster (e.g. --cluster sia-64)")
        from goodput_jax.sched.sim.sia_adapter import SiaAdapter, SiaModel

        sia_model = SiaModel(cluster)
        return SimPolicy(SiaAdapter(sia_model, cluster), sia_model)

    if policy == "tiresias":
        return SimPolicy(TiresiasPolicy(), None)
    if policy == "optimus":
        return SimPolicy(OptimusPolicy(), None)
    if policy in ("pollux", "pollux-typed"):
        from goodput_jax.sched.sim.pollux_adapter import (
            PolluxAdapter,
            PolluxModel,
            UnawarePolluxAdapter,
        )

        if policy == "pollux" and cluster is not None:
            from goodput_jax.sched.sim.apps import SIA_UNAWARE_REFERENCE_TYPE

            ref = (SIA_UNAWARE_REFERENCE_TYPE if SIA_UNAWARE_REFERENCE_TYPE in cluster
                   else next(iter(cluster)))
            model = PolluxModel(table_type=ref)
            return SimPolicy(UnawarePolluxAdapter(model, cluster, p=p, seed=seed), model)
        if policy == "pollux-typed" and cluster is None:
            raise ValueError("policy 'pollux-typed' needs a heterogeneous cluster "
                             "(e.g. --cluster sia-64)")
        model = PolluxModel()
        adapter = PolluxAdapter(model, p=p, seed=seed)
        adapter.name = policy
        return SimPolicy(adapter, model)
    raise ValueError(f"policy must be one of {', '.join(POLICIES + HETERO_POLICIES[::2])}, "
                     f"got {policy!r}")


def find_sia_workload(workload: str | os.PathLike[str], data: str | os.PathLike[str] | None = None,
                      ) -> Path:
    """Resolve a workload of the Sia data: a CSV path, or ``FAMILY/N`` / ``FAMILY/workload-N``
    (family ``philly``, ``saturn`` (Helios) or ``newtrace``), or ``scale_Nx``.

    Raises:
        FileNotFoundError: if nothing matches.

    Example:
        >>> find_sia_workload("philly/1").name
        'workload-1.csv'
    """
    from goodput_jax.sched.sim.apps import find_sia_dir

    p = Path(workload).expanduser()
    if p.is_file():
        return p
    root = find_sia_dir(data) / "workloads"
    s = str(workload).replace("helios", "saturn")
    fam, _, rest = s.partition("/")
    cands = [root / s, root / f"{s}.csv"]
    if rest:
        cands += [root / fam / f"{rest}.csv", root / fam / f"workload-{rest}.csv"]
    cands += [root / "scale" / s / "workload-1.csv"]
    for c in cands:
        if c.is_file():
            return c
    raise FileNotFoundError(f"Sia workload {str(workload)!r} not found (looked under {root}: "
                            "philly/N, saturn/N, newtrace/N, scale_Nx)")


def run_workload(workload: str | os.PathLike[str], policy: str, *,
                 options: WorkloadOptions | None = None,
                 apps: Mapping[str, Application | Mapping[str, Application]] | None = None,
                 log_path: str | os.PathLike[str] | None = None,
                 progress: Callable[[int, int, float], None] | None = None,
                 **keywords: Any) -> SimResult:
    """Simulate one workload CSV under ``policy`` ("pollux", "optimus" or "tiresias").

    Args:
        workload: CSV path or a name resolved by :func:`~.apps.find_workload` (``"6"``).
        policy: policy name.
        options: :class:`~.options.WorkloadOptions` (``traces``, ``seed``, ``p``,
            ``max_jobs``, ``calibrated``, ``cluster`` and the cluster settings); on a
            heterogeneous ``cluster`` the workload and the per-type traces come from the
            Sia data (``traces`` names its root).
        apps: preloaded applications (to share interpolation caches between runs).
        log_path: JSON Lines per-interval log.
        progress: callback ``(finished, total, sim_time)``.
        **keywords: ``WorkloadOptions`` fields as keywords (``max_jobs=20``; ``Any``: the
            fields differ in type, ``WorkloadOptions`` checks them), applied over
            ``options``.

    Returns:
        The :class:`~.cluster.SimResult`.

    Example:
        >>> run_workload("6", "optimus", max_jobs=20).avg_jct > 0    # doctest: +SKIP
        True
    """
    opts = with_keywords(WorkloadOptions, options, keywords, "run_workload")
    traces, cluster = opts.traces, opts.cluster
    if cluster is not None:
        from goodput_jax.sched.sim.apps import CLUSTERS, load_typed_applications

        if isinstance(cluster, str):
            if cluster not in CLUSTERS:
                raise ValueError(f"cluster must be one of {', '.join(CLUSTERS)}, "
                                 f"got {cluster!r}")
            cluster = CLUSTERS[cluster]
        path = find_sia_workload(workload, traces)
        apps = apps if apps is not None else load_typed_applications(list(cluster), traces)
        if policy not in HETERO_POLICIES:
            raise ValueError(f"on a heterogeneous cluster the policy must be one of "
                             f"{', '.join(HETERO_POLICIES)}, got {policy!r}")
    else:
        path = find_workload(workload, traces)
        apps = apps if apps is not None else load_applications(traces)
    rows = load_workload(path, max_jobs=opts.max_jobs)
    pol, model = make_sim_policy(policy, seed=opts.seed, p=opts.p, cluster=cluster)
    jobs = make_jobs(rows, apps, policy, calibrated=opts.calibrated)
    label = f"{Path(path).parent.name}/{Path(path).stem}"
    return simulate(jobs, pol, model=model, options=opts.sim_options(cluster),
                    log_path=log_path, workload=label, progress=progress)
