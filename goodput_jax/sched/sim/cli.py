"""``goodput-jax simulate``: run the trace-driven cluster simulator.

Heterogeneous clusters (Sia's setting): ``--cluster sia-64`` runs our SiaPolicy and the
heterogeneity-unaware Pollux side by side on a Sia workload and prints JCTs, makespan, GPU
hours per job and the policy's round time (median, p95)::

    goodput-jax simulate philly/1 --cluster sia-64
    goodput-jax simulate saturn --all --cluster sia-64

One workload and policy::

    goodput-jax simulate workloads/workload-6.csv --policy pollux --out sim-out

prints the average JCT, the p99 JCT and the makespan, and writes to ``--out``:

- ``<workload>-<policy>.jsonl``: one JSON line per scheduling interval (allocations, batch
  sizes, epochs, progress, goodput of every active job);
- ``<workload>-<policy>.json``: the summary and every job's JCT;
- ``<workload>-<policy>.png``: GPUs allocated per job over time, and the JCT distribution of
  this policy and of every other policy already run on the same workload into ``--out``.

``--all`` runs the 8 workloads (of ``workloads/``, or of the directory given as the
workload argument, e.g. ``workloads-realistic``) under all three policies and prints the
table of average JCTs and Pollux's reductions (plus ``all.png``).

Workloads resolve against the trace data root, so ``6``, ``workload-6`` and
``workloads-1.5/workload-6`` work as well as CSV paths.

Example:
    $ goodput-jax simulate 6 --policy tiresias --no-progress
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from goodput_jax._lazy import extra_of, first_missing, missing_extra_message
from goodput_jax._progress import ProgressBar
from goodput_jax.sched.sim.apps import CLUSTERS, find_traces_dir, find_workload, load_applications
from goodput_jax.sched.sim.cluster import SimResult
from goodput_jax.sched.sim.runner import (
    DEFAULT_HETERO_POLICIES,
    HETERO_POLICIES,
    POLICIES,
    PUBLISHED_REDUCTION,
    PUBLISHED_SIA,
    find_sia_workload,
    run_workload,
)

__all__ = ["POLICY_CHOICES", "add_arguments", "check_arguments", "format_table", "main", "run"]

#: Every ``--policy`` the simulator accepts: the homogeneous ones, then those of a
#: heterogeneous ``--cluster`` (sia, and pollux-typed: the stronger unaware variant).
POLICY_CHOICES: tuple[str, ...] = (*POLICIES, *(p for p in HETERO_POLICIES if p not in POLICIES))
#: The extra the simulator needs, and the modules that stand for it.
SIM_EXTRA, SIM_MODULES = "sim", ("scipy", "matplotlib", "jax")


def _stem(path: Path) -> str:
    parent = path.parent.name
    return path.stem if parent == "workloads" else f"{parent}-{path.stem}"


def _save(result: SimResult, out: Path, stem: str) -> Path:
    path = out / f"{stem}-{result.policy}.json"
    data = result.summary()
    data["jcts"] = result.jcts
    data["unfinished_jobs"] = result.unfinished
    path.write_text(json.dumps(data, indent=1))
    return path


def _load_others(out: Path, stem: str, policy: str) -> list[SimResult]:
    others = []
    for pol in POLICIES:
        f = out / f"{stem}-{pol}.json"
        if pol == policy or not f.is_file():
            continue
        try:
            d = json.loads(f.read_text())
            others.append(SimResult(policy=pol, workload=d.get("workload", stem), jcts=d["jcts"],
                                    unfinished=[], end_time=0.0, makespan=d.get("makespan", 0.0),
                                    wall_time=0.0, num_intervals=0))
        except (ValueError, KeyError):
            continue
    return others


def _fmt(x: float) -> str:
    return f"{x:8.0f}" if math.isfinite(x) else "     n/a"


def format_table(results: dict[str, dict[str, SimResult]]) -> str:
    """Markdown table: average JCT per workload and policy, Pollux's reductions, means.

    Example:
        >>> print(format_table({}))   # doctest: +ELLIPSIS
        | workload | ...
    """
    head = ("| workload | pollux avg JCT (s) | optimus avg JCT (s) | tiresias avg JCT (s) "
            "| reduction vs optimus | reduction vs tiresias |")
    lines = [head, "|" + "---|" * 6]
    reds: dict[str, list[float]] = {"optimus": [], "tiresias": []}
    for w, runs in results.items():
        avg = {p: runs[p].avg_jct if p in runs else float("nan") for p in POLICIES}
        cells = []
        for base in ("optimus", "tiresias"):
            r = 1.0 - avg["pollux"] / avg[base]
            if math.isfinite(r):
                reds[base].append(r)
            cells.append(f"{100 * r:5.1f}%" if math.isfinite(r) else "n/a")
        lines.append(f"| {w} | {_fmt(avg['pollux'])} | {_fmt(avg['optimus'])} | "
                     f"{_fmt(avg['tiresias'])} | {cells[0]} | {cells[1]} |")
    if results:
        mean = {b: sum(v) / len(v) if v else float("nan") for b, v in reds.items()}
        lines.append(f"| mean reduction (paper) | | | | {100 * mean['optimus']:5.1f}% "
                     f"({100 * PUBLISHED_REDUCTION['optimus']:.0f}%) | "
                     f"{100 * mean['tiresias']:5.1f}% "
                     f"({100 * PUBLISHED_REDUCTION['tiresias']:.0f}%) |")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Defines the options of ``goodput-jax simulate`` on ``parser``.

    Args:
        parser: the subcommand's parser (or a fresh ``ArgumentParser``).

    Returns:
        The same parser.

    Example:
        >>> args = add_arguments(argparse.ArgumentParser()).parse_args(
        ...     ["6", "--policy", "tiresias"])
        >>> args.workload, args.policy, args.interval
        ('6', 'tiresias', 60.0)
    """
    parser.add_argument("workload", nargs="?", default=None,
                        help="workload CSV path or name (6, workload-6, workloads-1.5/workload-6)")
    parser.add_argument("--policy", default=None, choices=list(POLICY_CHOICES),
                        help="scheduling policy (default: pollux; with --cluster, sia and "
                             "heterogeneity-unaware pollux side by side; pollux-typed: the "
                             "stronger unaware variant, see docs/simulator.md)")
    parser.add_argument("--cluster", default=None, choices=list(CLUSTERS),
                        help="heterogeneous cluster of the Sia paper (sia-64: 6x4 T4, 3x8 "
                             "RTX 2080Ti, 2x8 A100; sia-N: scaled to N GPUs); the workload is "
                             "then a Sia one: philly/N, saturn/N (Helios), newtrace/N, "
                             "scale_Nx, or with --all a family: philly, saturn, newtrace")
    parser.add_argument("--uncalibrated", action="store_true",
                        help="with --cluster: restarts cost Sia's restart penalty and no "
                             "calibration slowdown (default: the Sia artifact's restore times "
                             "and slowdowns)")
    parser.add_argument("--interval", type=float, default=60.0, metavar="SECONDS",
                        help="scheduling interval in simulated seconds, > 0 (default: 60)")
    parser.add_argument("--interference", type=float, default=0.0,
                        help="slowdown of distributed jobs sharing a node, from 0 up to but "
                             "not including 1 (default: 0)")
    parser.add_argument("--seed", type=int, default=0,
                        help="random seed of the policy search (default: 0)")
    parser.add_argument("--traces", default=None,
                        help="directory of application traces (default: the bundled data)")
    parser.add_argument("--out", default="sim-out",
                        help="output directory for logs, summaries and plots (default: sim-out)")
    parser.add_argument("--all", action="store_true",
                        help="run all 8 workloads with all three policies (ignores --policy) "
                             "and print the table; with --cluster, every workload of the "
                             "family given as the workload (philly, saturn, newtrace) under "
                             "sia and pollux")
    parser.add_argument("--max-jobs", type=int, default=None, metavar="N",
                        help="simulate only the first N jobs of the workload, N >= 1 "
                             "(default: all)")
    parser.add_argument("--no-progress", action="store_true",
                        help="do not draw the progress bar (it is never drawn when stderr "
                             "is not a terminal)")
    return parser


def run(argv: list[str] | None = None) -> int:
    """The simulator's own command (``goodput-jax-sim``, ``python -m goodput_jax.sched.sim``).

    Parses ``argv`` with :func:`add_arguments` and runs :func:`main`; a user error
    (bad workload, cluster or option value) is one line on stderr and exit status 2.

    Example:
        >>> run(["6", "--policy", "tiresias", "--max-jobs", "4", "--no-progress"])  # doctest: +SKIP
        0
    """
    import sys

    # Every help text states its own default, so the formatter adds none.
    parser = argparse.ArgumentParser(
        prog="goodput-jax-sim",
        description="Trace-driven cluster simulator: Pollux, its baselines, and Sia on "
                    "heterogeneous clusters (same options as 'goodput-jax simulate'). Needs "
                    f"the '{SIM_EXTRA}' extra: pip install \"goodput-jax[{SIM_EXTRA}]\".",
        formatter_class=argparse.HelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}",
                        help="print the version and exit")
    args = add_arguments(parser).parse_args(argv)
    try:
        missing = first_missing(SIM_MODULES)
        if missing is not None:  # before anything is read or written
            raise _MissingExtra(missing_extra_message(SIM_EXTRA, missing, "goodput-jax-sim"))
        return int(main(args) or 0)
    except ModuleNotFoundError as e:
        extra = extra_of(e.name)
        if extra is None or e.name is None:
            raise
        message = missing_extra_message(extra, e.name, "goodput-jax-sim")
    except (_MissingExtra, ValueError, LookupError, OSError) as e:
        message = str(e) or type(e).__name__
    except KeyboardInterrupt:
        print("goodput-jax-sim: interrupted", file=sys.stderr)
        return 130
    print(f"goodput-jax-sim: error: {' '.join(message.split())}", file=sys.stderr)
    return 2


class _MissingExtra(Exception):
    """The simulator's extra is not installed (the message says how to install it)."""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("goodput-jax")
    except PackageNotFoundError:  # a source tree on sys.path, not installed
        return "(not installed)"


def check_arguments(args: argparse.Namespace) -> None:
    """Validate the options of :func:`add_arguments`, before anything is read or written.

    Raises:
        ValueError: naming the option and its value (``--interval (-1.0) must be ...``).

    Example:
        >>> check_arguments(add_arguments(argparse.ArgumentParser()).parse_args(
        ...     ["6", "--interval", "-1"]))
        Traceback (most recent call last):
        ...
        ValueError: --interval (-1.0) must be a finite number of simulated seconds > 0
    """
    interval = float(args.interval)
    if not (math.isfinite(interval) and interval > 0):
        raise ValueError(f"--interval ({args.interval!r}) must be a finite number of "
                         "simulated seconds > 0")
    interference = float(getattr(args, "interference", 0.0))
    if not (math.isfinite(interference) and 0.0 <= interference < 1.0):
        raise ValueError(f"--interference ({args.interference!r}) must be a number from 0 up "
                         "to but not including 1")
    if args.max_jobs is not None and args.max_jobs < 1:
        raise ValueError(f"--max-jobs ({args.max_jobs!r}) must be an integer >= 1")
    out = Path(args.out)
    if not str(args.out).strip():
        raise ValueError(f"--out ({args.out!r}) must be a directory path")
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out ({args.out!r}) exists and is not a directory")


def main(args: argparse.Namespace) -> int:
    """Runs ``goodput-jax simulate`` with the options of :func:`add_arguments`.

    Returns:
        The exit status (0).

    Example:
        >>> main(add_arguments(argparse.ArgumentParser()).parse_args(
        ...     ["6", "--policy", "tiresias", "--max-jobs", "4"]))   # doctest: +SKIP
        0
    """
    from goodput_jax.sched.sim.plots import plot_run, plot_table

    check_arguments(args)
    if getattr(args, "cluster", None):
        return _main_hetero(args)
    if args.policy is None:
        args.policy = "pollux"
    if args.policy not in POLICIES:
        raise ValueError(f"policy {args.policy!r} needs a heterogeneous cluster: add "
                         "--cluster sia-64")
    if not args.all and args.workload is None:
        raise ValueError("workload is required (a CSV path or a name such as 6), or use --all")
    path = None if args.all else find_workload(args.workload, args.traces)
    files: list[Path] = []
    if args.all:
        root = find_traces_dir(args.traces).parent
        wdir = Path(args.workload) if args.workload else root / "workloads"
        if not wdir.is_dir():
            wdir = root / str(args.workload)
        files = sorted(wdir.glob("workload-*.csv"), key=lambda p: int(p.stem.split("-")[-1]))
        if not files:
            raise FileNotFoundError(f"no workload-*.csv in {wdir}")
    apps = load_applications(args.traces)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)  # only once every argument has been checked
    common = {"apps": apps, "traces": args.traces, "interval": args.interval,
              "interference": args.interference, "seed": args.seed, "max_jobs": args.max_jobs}
    show = not args.no_progress
    if args.all:
        results: dict[str, dict[str, SimResult]] = {}
        for f in files:
            stem = _stem(f)
            results[stem] = {}
            for pol in POLICIES:
                bar = ProgressBar(label=f"{stem} {pol}", enabled=show)
                res = run_workload(f, pol, log_path=out / f"{stem}-{pol}.jsonl", progress=bar,
                                   **common)
                bar.close()
                _save(res, out, stem)
                results[stem][pol] = res
        print(format_table(results))
        print(f"plot: {plot_table(results, out / 'all.png')}")
        return 0
    if path is None:  # (found above unless --all)
        raise ValueError("workload is required (a CSV path or a name such as 6), or use --all")
    stem = _stem(path)
    bar = ProgressBar(label=args.policy, enabled=show)
    res = run_workload(path, args.policy, log_path=out / f"{stem}-{args.policy}.jsonl",
                       progress=bar, **common)
    bar.close()
    _save(res, out, stem)
    png = plot_run(res, out / f"{stem}-{args.policy}.png",
                   others=_load_others(out, stem, args.policy), total_gpus=64)
    print(f"policy {res.policy} on {res.workload}: {len(res.jcts)} jobs finished"
          + (f", {len(res.unfinished)} unfinished" if res.unfinished else ""))
    print(f"average JCT {res.avg_jct:.0f} s ({res.avg_jct / 3600:.2f} h)")
    print(f"p99 JCT     {res.p99_jct:.0f} s ({res.p99_jct / 3600:.2f} h)")
    print(f"makespan    {res.makespan:.0f} s ({res.makespan / 3600:.2f} h)")
    print(f"wall time   {res.wall_time:.1f} s (policy {res.policy_time:.1f} s, model "
          f"{res.model_time:.1f} s)")
    print(f"log: {res.log_path}\nplot: {png}")
    return 0


def format_hetero_table(results: dict[str, dict[str, SimResult]]) -> str:
    """Markdown table of a heterogeneous comparison: per workload and policy, JCTs, makespan,
    GPU hours per job, policy round times; then per policy the family means.

    Example:
        >>> print(format_hetero_table({}))   # doctest: +ELLIPSIS
        | workload | policy | ...
    """
    lines = [("| workload | policy | avg JCT (h) | p99 JCT (h) | makespan (h) | GPU h / job "
              "| unfinished | round median (ms) | round p95 (ms) |"), "|" + "---|" * 9]
    for w, runs in results.items():
        for pol, r in runs.items():
            d = r.summary()
            lines.append(f"| {w} | {pol} | {r.avg_jct / 3600:.3f} | {r.p99_jct / 3600:.2f} | "
                         f"{r.makespan / 3600:.2f} | {d['gpu_hours_per_job']:.2f} | "
                         f"{len(r.unfinished)} | {1000 * r.round_median:.1f} | "
                         f"{1000 * r.round_p95:.1f} |")
    pols = sorted({p for runs in results.values() for p in runs})
    for pol in pols:
        avg = [runs[pol].avg_jct / 3600 for runs in results.values() if pol in runs]
        if avg:
            lines.append(f"| **mean** | {pol} | {sum(avg) / len(avg):.3f} | | | | | | |")
    if {"sia", "pollux"} <= set(pols):
        red = [1 - runs["sia"].avg_jct / runs["pollux"].avg_jct for runs in results.values()
               if "sia" in runs and "pollux" in runs]
        if red:
            lines.append(f"| **sia vs pollux** | | {-100 * sum(red) / len(red):+.1f}% (mean "
                         f"per-workload change of avg JCT) | | | | | | |")
    return "\n".join(lines)


def _family_files(name: str) -> list[Path]:
    from goodput_jax.sched.sim.apps import find_sia_dir

    fam = name.replace("helios", "saturn")
    d = find_sia_dir() / "workloads" / fam
    files = sorted(d.glob("workload-*.csv"), key=lambda p: int(p.stem.split("-")[-1]))
    if not files:
        raise FileNotFoundError(f"no workload-*.csv in {d} (families: philly, saturn, newtrace)")
    return files


def _main_hetero(args: argparse.Namespace) -> int:
    from goodput_jax.sched.sim.apps import load_typed_applications
    from goodput_jax.sched.sim.plots import plot_run, plot_table

    cluster = CLUSTERS[args.cluster]
    policies = [args.policy] if args.policy else list(DEFAULT_HETERO_POLICIES)
    for pol in policies:
        if pol not in HETERO_POLICIES:
            raise ValueError(f"on a heterogeneous cluster --policy must be one of "
                             f"{', '.join(HETERO_POLICIES)}, got {pol!r}")
    if args.workload is None:
        raise ValueError("workload is required: philly/1, saturn/3, newtrace/2, scale_8x, "
                         "or a family with --all")
    files = _family_files(args.workload) if args.all else [
        find_sia_workload(args.workload, args.traces)]
    apps = load_typed_applications(list(cluster), args.traces)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)  # only once every argument has been checked
    results: dict[str, dict[str, SimResult]] = {}
    for f in files:
        stem = f"{args.cluster}-{f.parent.name}-{f.stem}"
        results[stem] = {}
        for pol in policies:
            bar = ProgressBar(label=f"{f.parent.name}/{f.stem} {pol}",
                              enabled=not args.no_progress)
            res = run_workload(f, pol, traces=args.traces, apps=apps, interval=args.interval,
                               seed=args.seed, max_jobs=args.max_jobs,
                               log_path=out / f"{stem}-{pol}.jsonl", progress=bar,
                               cluster=cluster,
                               calibrated=not getattr(args, "uncalibrated", False))
            bar.close()
            _save(res, out, stem)
            results[stem][pol] = res
        runs = results[stem]
        first = next(iter(runs.values()))
        png = plot_run(first, out / f"{stem}-{first.policy}.png",
                       others=[r for p, r in runs.items() if p != first.policy])
        print(f"plot: {png}")
    print(format_hetero_table(results))
    fam = files[0].parent.name
    if fam in PUBLISHED_SIA:
        pub = PUBLISHED_SIA[fam]
        print(f"published (Sia paper, Table 3, {fam}): sia {pub['sia']} h, pollux "
              f"{pub['pollux']} h average JCT")
    if len(results) > 1:
        print(f"plot: {plot_table(results, out / f'{args.cluster}-{fam}-all.png')}")
    return 0
