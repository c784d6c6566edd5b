"""Plots of simulation results (matplotlib, Agg backend, PNG files).

Example:
    >>> plot_run(result, "sim-out/w6-pollux.png", others=[tiresias_result])  # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from goodput_jax.sched.sim.cluster import SimResult

if TYPE_CHECKING:  # matplotlib is the sim extra's; imported on first plot
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["plot_run", "plot_table"]


def _plt() -> ModuleType:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def _jct_cdf(ax: Axes, results: Mapping[str, Sequence[float]]) -> None:
    for label, jcts in results.items():
        x = np.sort(np.asarray(list(jcts), dtype=np.float64)) / 3600.0
        if x.size == 0:
            continue
        y = np.arange(1, x.size + 1) / x.size
        ax.step(x, y, where="post", label=f"{label} (avg {np.mean(x):.2f} h)")
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (h, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("JCT distribution")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def plot_run(result: SimResult, path: str | os.PathLike[str],
             others: Sequence[SimResult] = (), total_gpus: int | None = None) -> Path:
    """Two panels: GPUs allocated per job over time (stacked), and the JCT distribution of
    this run and of ``others`` (other policies on the same workload).

    Args:
        result: the run to draw.
        path: PNG file to write.
        others: more runs for the JCT panel.
        total_gpus: draw the cluster capacity line.

    Returns:
        The PNG path.
    """
    plt = _plt()
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(13, 4.5), gridspec_kw={"width_ratios": [3, 2]})
    times = np.array([t for t, _ in result.timeline]) / 3600.0
    names = sorted({k for _, g in result.timeline for k in g})
    if names and times.size:
        grid = np.zeros((len(names), times.size))
        index = {k: i for i, k in enumerate(names)}
        for c, (_, gpus) in enumerate(result.timeline):
            for k, v in gpus.items():
                grid[index[k], c] = v
        cmap = plt.get_cmap("tab20")
        ax0.stackplot(times, grid, colors=[cmap(i % 20) for i in range(len(names))],
                      step="post", linewidth=0)
    total_gpus = total_gpus or result.total_gpus or None
    if total_gpus:
        ax0.axhline(total_gpus, color="k", lw=0.9, ls="--",
                    label=f"cluster capacity ({total_gpus} GPUs)")
        ax0.set_ylim(0, total_gpus * 1.12)
        ax0.legend(loc="upper right", fontsize=8)
    _hour_ticks(ax0, float(times.max()) if times.size else 1.0)
    ax0.set_xlabel("simulated time (h)")
    ax0.set_ylabel("GPUs allocated (stacked, one colour per job)")
    unfinished = f", {len(result.unfinished)} unfinished" if result.unfinished else ""
    ax0.set_title(f"{result.policy} on {result.workload}: {len(names)} jobs{unfinished}")
    runs = {result.policy: list(result.jcts.values())}
    for o in others:
        runs.setdefault(o.policy, list(o.jcts.values()))
    _jct_cdf(ax1, runs)
    return _save(plt, fig, path)


def _hour_ticks(ax: Axes, span_h: float) -> None:
    """Whole-hour ticks at 1, 2, 3, 6, 12 or 24 h steps (at most ~10 ticks)."""
    from matplotlib.ticker import MultipleLocator

    for step in (1, 2, 3, 6, 12, 24, 48, 96):
        if span_h / step <= 10:
            break
    ax.xaxis.set_major_locator(MultipleLocator(step))
    ax.set_xlim(0, max(span_h, step))


def _save(plt: ModuleType, fig: Figure, path: str | os.PathLike[str]) -> Path:
    """Lay out, write the PNG (creating its folder) and free the figure."""
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def plot_table(results: Mapping[str, Mapping[str, SimResult]],
               path: str | os.PathLike[str]) -> Path:
    """Average JCT per workload and policy (bars) and pooled JCT distributions.

    Args:
        results: ``{workload: {policy: SimResult}}``.
        path: PNG file to write.
    """
    plt = _plt()
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(13, 4.5))
    workloads = list(results)
    policies = sorted({p for r in results.values() for p in r})
    width = 0.8 / max(len(policies), 1)
    for i, pol in enumerate(policies):
        vals = [results[w][pol].avg_jct / 3600.0 if pol in results[w] else np.nan
                for w in workloads]
        ax0.bar(np.arange(len(workloads)) + i * width, vals, width, label=pol)
    ax0.set_xticks(np.arange(len(workloads)) + 0.4 - width / 2)
    ax0.set_xticklabels(workloads, rotation=30, fontsize=8)
    ax0.set_xlabel("workload")
    ax0.set_ylabel("average JCT (h, finished jobs)")
    ax0.set_title("average job completion time per workload")
    ax0.legend(title="policy")
    pooled = {pol: [x for w in workloads if pol in results[w]
                    for x in results[w][pol].jcts.values()] for pol in policies}
    _jct_cdf(ax1, pooled)
    return _save(plt, fig, path)
