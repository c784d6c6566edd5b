"""Application model of the trace-driven simulator: measured step times and training curves.

Each application (bert, cifar10, deepspeech2, imagenet, ncf, yolov3) is a directory of
CSV traces measured by the Pollux authors on nodes of 4 NVIDIA T4 GPUs (see the README
shipped beside them in ``goodput_jax/sched/sim/data``):

- ``placements.csv``: step and sync time for a placement (one digit per node = replicas on
  that node) and a per-replica batch size;
- ``scalability.csv``: extra (num_nodes, num_replicas, local_bsz) measurements up to 16 nodes;
- ``validation-BSZ.csv``: one row per epoch of a run at total batch size BSZ with the
  cumulative scale-invariant progress, the optimizer iterations and the gradient statistics.

Interpolation rules (the authors'):

- step/sync time of a measured placement (rotation invariant): piecewise linear in the local
  batch size; of any other placement: linear (Delaunay) over (num_nodes, num_replicas,
  local_bsz) on the per-(nodes, replicas, bsz) means of the placements plus the
  scalability rows, with num_nodes capped at 16;
- iterations and gradient statistics at a batch size between two validated sizes: linear in
  the batch size between the two neighbours (clamped outside the validated range).

Every interpolation result is cached: a simulation asks the same few thousand questions
millions of times.

The Sia data (``traces/APP/placements-TYPE.csv`` per accelerator type) shares files with the
Pollux traces: its validation curves are the same runs, and its ``aws`` type (nodes of 4 T4)
is the Pollux measurement. The packaged copy ships each such file once, under ``traces/``;
a Sia root that sits inside a Pollux data root (``data/sia`` inside ``data/``) may leave
them out, and :func:`sia_trace_file` finds them in the Pollux twin.

Example:
    >>> from goodput_jax.sched.sim.apps import load_applications
    >>> apps = load_applications()                       # doctest: +SKIP
    >>> step, sync = apps["cifar10"].get_throughput((1, 3), 128)   # doctest: +SKIP
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = [
    "APP_SETTINGS",
    "CLUSTERS",
    "SIA_RESTART_PENALTIES",
    "Application",
    "canonical_placement",
    "find_sia_dir",
    "find_traces_dir",
    "find_workload",
    "load_applications",
    "load_typed_applications",
    "sia_trace_file",
]

# Per-application settings used by the authors: epochs to finish, and bounds that differ from
# the default rule (init/max batch size = smallest/largest validated size, local bsz bounds =
# min/max local_bsz in placements.csv).
APP_SETTINGS: dict[str, dict[str, int]] = {
    "bert": {"max_epochs": 2},
    "cifar10": {"max_epochs": 100},
    "ncf": {"max_epochs": 10},
    "imagenet": {"max_epochs": 90},
    "deepspeech2": {"max_epochs": 80},
    "yolov3": {"max_epochs": 50, "max_local_bsz": 8},
}

#: Heterogeneous clusters: type -> (nodes, GPUs per node). ``sia-64`` is the Sia paper's
#: main setting (6 x 4 T4 on AWS, 3 x 8 RTX 2080Ti, 2 x 8 A100); ``sia-Nx`` scales it N times.
CLUSTERS: dict[str, dict[str, tuple[int, int]]] = {
    "sia-64": {"aws": (6, 4), "rtx": (3, 8), "dgx-ext": (2, 8)},
    **{f"sia-{64 * n}": {"aws": (6 * n, 4), "rtx": (3 * n, 8), "dgx-ext": (2 * n, 8)}
       for n in (2, 4, 8, 16, 32)},
}
#: Restart penalty (s) per application in Sia's objective (the artifact's
#: ``sia.py:get_restart_penalty``, others 30 s): the re-allocation factor's penalty.
SIA_RESTART_PENALTIES = {"deepspeech2": 25.0, "imagenet": 250.0, "cifar10": 30.0,
                         "bert": 120.0, "yolov3": 45.0}
#: Checkpoint-restore time (s) a (re-)allocated job spends without progress in the Sia
#: artifact's simulator (``applications.py``, ``Application.rescale_time``; others 30 s).
SIA_RESCALE_TIMES = {"cifar10": 50.0, "deepspeech2": 25.0, "bert": 120.0, "yolov3": 80.0,
                     "imagenet": 250.0, "ncf": 15.0}
#: Calibration of the Sia artifact's simulator (``simulator_config.py``, ``SLOWDOWNS``): a
#: job's simulated goodput is divided by its application's slowdown (real runs were that
#: much slower than the traces). The policies' models never see it.
SIA_SLOWDOWNS = {"cifar10": 1.8, "imagenet": 1.2, "yolov3": 1.2, "bert": 1.2,
                 "deepspeech2": 1.2, "ncf": 1.5}
#: GPUs of each type the Sia authors profiled on (``cluster_max_physical_nnodes`` x GPUs per
#: node); the artifact's heterogeneity-unaware Pollux caps every job at the smallest of
#: ``min(GPUs of the type in the simulated cluster, these)`` over the types.
SIA_PROFILED_GPUS = {"aws": 64, "rtx": 24, "dgx-ext": 16}
#: The type whose batch-size limits the artifact's heterogeneity-unaware Pollux uses for its
#: speedup functions and replica cap (hard-coded ``"aws"``, the T4 nodes).
SIA_UNAWARE_REFERENCE_TYPE = "aws"
#: Tie-break of the artifact's unaware cluster when an allocation has as many GPUs of two
#: types (``fix_allocations_by_dropping``: the faster type is kept).
SIA_TYPE_PRIORITY = {"dgx-ext": 0, "azure": 1, "quad": 2, "rtx": 3, "aws": 4}
#: The accelerator type the Pollux traces were measured on: Sia's ``aws`` nodes (4 x T4).
#: The Sia artifact's ``placements-aws.csv`` / ``scalability-aws.csv`` are byte-identical to
#: the Pollux ``placements.csv`` / ``scalability.csv``.
POLLUX_TRACE_TYPE = "aws"
#: Per-type overrides of the authors (deepspeech2 fits only 57 samples per RTX 2080Ti).
SIA_TYPE_SETTINGS = {("deepspeech2", "rtx"): {"max_local_bsz": 57}}

_ENV_VAR = "GOODPUT_JAX_TRACES"
_SIA_ENV_VAR = "GOODPUT_JAX_SIA_DATA"
_PACKAGED = Path(__file__).resolve().parent / "data"


def _is_traces_dir(path: Path) -> bool:
    return (path / "cifar10" / "placements.csv").is_file()


def find_traces_dir(traces: str | os.PathLike[str] | None = None) -> Path:
    """Locate the application traces: a directory holding ``APP/placements.csv``.

    Search order: the ``traces`` argument, ``$GOODPUT_JAX_TRACES``, ``../shared/pollux-sim``
    relative to the repository and to the working directory, then the copy shipped in the
    package (``goodput_jax/sched/sim/data``). A path may name the data root (holding
    ``traces/`` and ``workloads*/``) or the ``traces/`` directory itself.

    Args:
        traces: explicit directory, or None to search.

    Returns:
        The traces directory (its parent usually holds the ``workloads*/`` directories).

    Raises:
        FileNotFoundError: if an explicit path is not a trace directory, or nothing is found.

    Example:
        >>> (find_traces_dir() / "bert").is_dir()   # doctest: +SKIP
        True
    """
    for name, value in (("traces", traces), (_ENV_VAR, os.environ.get(_ENV_VAR))):
        if value:
            p = Path(value).expanduser()
            for cand in (p / "traces", p):
                if _is_traces_dir(cand):
                    return cand
            raise FileNotFoundError(
                f"{name}={str(value)!r} is not a Pollux trace directory "
                "(expected traces/APP/placements.csv or APP/placements.csv under it)"
            )
    repo = Path(__file__).resolve().parents[3]
    for cand in (repo.parent / "shared" / "pollux-sim", Path.cwd().parent / "shared" / "pollux-sim",
                 Path.cwd() / "shared" / "pollux-sim", _PACKAGED):
        if _is_traces_dir(cand / "traces"):
            return cand / "traces"
    raise FileNotFoundError(
        "Pollux traces not found: pass --traces DIR, set $GOODPUT_JAX_TRACES, or place "
        "them at ../shared/pollux-sim"
    )


def find_workload(workload: str | os.PathLike[str], traces: str | os.PathLike[str] | None = None,
                  ) -> Path:
    """Resolve a workload: an existing CSV path, or a name relative to the data root.

    ``"workloads/workload-6.csv"``, ``"workload-6"`` and ``"6"`` all name workload 6 at load
    1.0; ``"workloads-realistic/workload-6"`` names the realistic variant.

    Raises:
        FileNotFoundError: if nothing matches.

    Example:
        >>> find_workload("6").name     # doctest: +SKIP
        'workload-6.csv'
    """
    p = Path(workload).expanduser()
    if p.is_file():
        return p
    root = find_traces_dir(traces).parent
    s = str(workload)
    cands = [root / s, root / f"{s}.csv", root / "workloads" / s, root / "workloads" / f"{s}.csv",
             root / "workloads" / f"workload-{s}.csv"]
    for c in cands:
        if c.is_file():
            return c
    raise FileNotFoundError(f"workload {s!r} not found (looked under {root})")


def canonical_placement(placement: Iterable[int]) -> tuple[int, ...]:
    """Drop empty nodes and return the smallest rotation (placements are rotation invariant).

    Example:
        >>> canonical_placement((3, 0, 1))
        (1, 3)
    """
    p = tuple(int(x) for x in placement if int(x) > 0)
    if not p:
        return ()
    return min(p[i:] + p[:i] for i in range(len(p)))


def _read_csv(path: Path) -> dict[str, np.ndarray]:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if len(rows) < 2:
        raise ValueError(f"trace file {path} has no data rows")
    header, body = rows[0], rows[1:]
    cols = {}
    for j, name in enumerate(header):
        vals = [r[j] for r in body]
        cols[name] = np.asarray(vals, dtype=np.str_ if name == "placement" else np.float64)
    return cols


@dataclass
class _Curve:
    """One validation run at a fixed total batch size (arrays indexed by epoch)."""

    progress: np.ndarray
    iteration: np.ndarray
    metric: np.ndarray
    grad_sqr: np.ndarray
    grad_var: np.ndarray


@dataclass
class Application:
    """Measured behaviour of one application, with cached interpolation.

    Attributes:
        name: application name.
        init_batch_size, max_batch_size: smallest / largest validated total batch size
            (unless overridden).
        min_local_bsz, max_local_bsz: per-replica (atomic) batch size bounds.
        max_epochs: epochs to finish.
    """

    name: str
    validation: dict[int, _Curve]
    placements: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray, np.ndarray]]
    nd_points: np.ndarray  # [K, 3] (num_nodes, num_replicas, local_bsz)
    nd_values: np.ndarray  # [K, 2] (step_time, sync_time)
    max_epochs: int
    init_batch_size: int = 0
    max_batch_size: int = 0
    min_local_bsz: int = 0
    max_local_bsz: int = 0
    _tput_cache: dict[tuple[tuple[int, ...], float], tuple[float, float]] = field(
        default_factory=dict, repr=False)
    _stats_cache: dict[tuple[float, int], tuple[float, float]] = field(
        default_factory=dict, repr=False)
    # scipy's LinearNDInterpolator, built on first use: points [Q, 3] -> values [Q, 2]
    _nd_interp: Callable[[Sequence[Sequence[float]]], np.ndarray] | None = field(
        default=None, repr=False)
    nd_fallbacks: int = 0  # queries outside the measured hull (r * b > max batch size, ...)

    @classmethod
    def from_dir(cls, trace_dir: str | os.PathLike[str], *, max_epochs: int,
                 init_batch_size: int | None = None, max_batch_size: int | None = None,
                 min_local_bsz: int | None = None,
                 max_local_bsz: int | None = None, accelerator_type: str | None = None,
                 ) -> Application:
        """Load one application's CSV traces.

        ``accelerator_type`` selects ``placements-TYPE.csv`` / ``scalability-TYPE.csv``
        (the Sia data); the validation curves do not depend on it.

        Example:
            >>> app = Application.from_dir("traces/cifar10", max_epochs=100)  # doctest: +SKIP
        """
        d = Path(trace_dir)
        if max_epochs < 1:
            raise ValueError(f"max_epochs must be >= 1, got {max_epochs}")
        validation: dict[int, _Curve] = {}
        vdir = d
        if accelerator_type is not None and not any(d.glob("validation-*.csv")):
            vdir = _pollux_twin(d) or d  # a packaged Sia directory shares them
        for path in sorted(vdir.glob("validation-*.csv")):
            bsz = int(path.stem.split("-")[-1])
            c = _read_csv(path)
            validation[bsz] = _Curve(c["progress"], c["iteration"], c["metric"],
                                     c["grad_sqr"], c["grad_var"])
        if not validation:
            raise FileNotFoundError(f"no validation-*.csv in {d}")
        if accelerator_type is None:
            pl_path, sc_path = d / "placements.csv", d / "scalability.csv"
        else:
            pl_path = _typed_file(d, "placements", accelerator_type)
            sc_path = _typed_file(d, "scalability", accelerator_type)
        pl = _read_csv(pl_path)
        sc = _read_csv(sc_path)
        placements: dict[tuple[int, ...], list[tuple[float, float, float]]] = {}
        groups: dict[tuple[int, int, float], list[tuple[float, float]]] = {}
        for p, b, st, sy in zip(pl["placement"], pl["local_bsz"], pl["step_time"],
                                pl["sync_time"]):
            key = canonical_placement(int(ch) for ch in str(p))
            placements.setdefault(key, []).append((b, st, sy))
            groups.setdefault((len(key), sum(key), b), []).append((st, sy))
        pl_arrays = {}
        for key, rows in placements.items():
            arr = np.asarray(sorted(rows))
            # Average duplicate bsz rows (if any) so np.interp sees strictly increasing xs.
            xs, inv = np.unique(arr[:, 0], return_inverse=True)
            st = np.bincount(inv, arr[:, 1]) / np.bincount(inv)
            sy = np.bincount(inv, arr[:, 2]) / np.bincount(inv)
            pl_arrays[key] = (xs, st, sy)
        pts = [k for k in groups]
        vals = [np.mean(groups[k], axis=0) for k in pts]
        pts += list(zip(sc["num_nodes"], sc["num_replicas"], sc["local_bsz"]))
        vals += list(zip(sc["step_time"], sc["sync_time"]))
        bszs = sorted(validation)
        return cls(
            name=d.name,
            validation=validation,
            placements=pl_arrays,
            nd_points=np.asarray(pts, dtype=np.float64),
            nd_values=np.asarray(vals, dtype=np.float64),
            max_epochs=int(max_epochs),
            init_batch_size=int(init_batch_size or bszs[0]),
            max_batch_size=int(max_batch_size or bszs[-1]),
            min_local_bsz=int(min_local_bsz or pl["local_bsz"].min()),
            max_local_bsz=int(max_local_bsz or pl["local_bsz"].max()),
        )

    # ----------------------------------------------------------------- training curve
    @property
    def num_epochs_traced(self) -> int:
        """Number of epochs in the shortest validation trace."""
        return min(len(c.progress) for c in self.validation.values())

    def get_progress(self, epoch: int) -> float:
        """Cumulative scale-invariant progress at the end of ``epoch`` epochs (0 at epoch 0)."""
        if epoch <= 0:
            return 0.0
        prog = self.validation[self.init_batch_size].progress
        return float(prog[min(epoch, len(prog)) - 1])

    @property
    def target_progress(self) -> float:
        """Progress at which a job finishes (end of its last epoch)."""
        return self.get_progress(self.max_epochs)

    def get_completion_epoch(self, batch_size: float) -> int:
        """Epoch count after which a job finishes (the authors' rule: ``max_epochs``)."""
        return self.max_epochs

    def _bracket(self, batch_size: float) -> tuple[int, int, float]:
        """Neighbouring validated sizes and the weight of the upper one (linear in bsz)."""
        bszs = sorted(self.validation)
        b = float(batch_size)
        if b <= bszs[0]:
            return bszs[0], bszs[0], 0.0
        if b >= bszs[-1]:
            return bszs[-1], bszs[-1], 0.0
        hi_idx = int(np.searchsorted(bszs, b))
        lo, hi = bszs[hi_idx - 1], bszs[hi_idx]
        if hi == b:
            return hi, hi, 0.0
        return lo, hi, (b - lo) / (hi - lo)

    def get_iteration(self, batch_size: float, epoch: int) -> float:
        """Optimizer iterations to finish ``epoch`` epochs at total ``batch_size``.

        Example:
            >>> app.get_iteration(128, 1)    # doctest: +SKIP
            390.0
        """
        if epoch <= 0:
            return 0.0
        lo, hi, w = self._bracket(batch_size)
        a = self.validation[lo].iteration
        b = self.validation[hi].iteration
        ia, ib = min(epoch, len(a)) - 1, min(epoch, len(b)) - 1
        return float((1.0 - w) * a[ia] + w * b[ib])

    def get_grad_stats(self, batch_size: float, epoch: int) -> tuple[float, float]:
        """Gradient statistics ``(grad_sqr, grad_var)`` during ``epoch`` (0-based) at
        ``batch_size``.

        Example:
            >>> sqr, var = app.get_grad_stats(256, 0)    # doctest: +SKIP
        """
        key = (float(batch_size), int(epoch))
        hit = self._stats_cache.get(key)
        if hit is not None:
            return hit
        lo, hi, w = self._bracket(batch_size)
        ca, cb = self.validation[lo], self.validation[hi]
        ia = min(max(int(epoch), 0), len(ca.grad_sqr) - 1)
        ib = min(max(int(epoch), 0), len(cb.grad_sqr) - 1)
        sqr = (1.0 - w) * ca.grad_sqr[ia] + w * cb.grad_sqr[ib]
        var = (1.0 - w) * ca.grad_var[ia] + w * cb.grad_var[ib]
        out = (float(sqr), float(var))
        self._stats_cache[key] = out
        return out

    # ----------------------------------------------------------------- throughput
    def _nd(self, num_nodes: int, num_replicas: int, local_bsz: float) -> tuple[float, float]:
        if self._nd_interp is None:
            from scipy.interpolate import LinearNDInterpolator  # jax depends on scipy

            self._nd_interp = LinearNDInterpolator(self.nd_points, self.nd_values)
        out = np.asarray(self._nd_interp([[num_nodes, num_replicas, local_bsz]]))[0]
        if not np.all(np.isfinite(out)):
            # Outside the convex hull of the measurements (only configurations whose total
            # batch exceeds the application's maximum, which the simulator never runs):
            # use the nearest measured (nodes, replicas) group, linear over bsz there.
            self.nd_fallbacks += 1
            d = (np.abs(self.nd_points[:, 0] - num_nodes) * 1000
                 + np.abs(self.nd_points[:, 1] - num_replicas))
            sel = d == d.min()
            pts, vals = self.nd_points[sel], self.nd_values[sel]
            order = np.argsort(pts[:, 2])
            xs = pts[order, 2]
            out = np.array([np.interp(local_bsz, xs, vals[order, 0]),
                            np.interp(local_bsz, xs, vals[order, 1])])
        return float(out[0]), float(out[1])

    def get_throughput(self, placement: Sequence[int], local_bsz: float) -> tuple[float, float]:
        """Step time and sync time (s) of one optimizer step without accumulation.

        Args:
            placement: replicas per node, e.g. ``(1, 3)``; empty nodes are ignored.
            local_bsz: per-replica (atomic) batch size.

        Returns:
            ``(step_time, sync_time)``.

        Raises:
            ValueError: if the placement is empty or ``local_bsz`` is not positive.

        Example:
            >>> app.get_throughput((4, 4), 64)   # doctest: +SKIP
            (0.09, 0.02)
        """
        key = (tuple(placement), float(local_bsz))
        hit = self._tput_cache.get(key)
        if hit is not None:
            return hit
        p = canonical_placement(placement)
        if not p:
            raise ValueError(f"placement {tuple(placement)!r} holds no replicas")
        if not local_bsz > 0:
            raise ValueError(f"local_bsz must be > 0, got {local_bsz!r}")
        meas = self.placements.get(p)
        if meas is not None:
            xs, st, sy = meas
            out = (float(np.interp(local_bsz, xs, st)), float(np.interp(local_bsz, xs, sy)))
        else:
            out = self._nd(min(len(p), 16), sum(p), float(local_bsz))
        self._tput_cache[key] = out
        return out


def load_applications(traces: str | os.PathLike[str] | None = None,
                      settings: Mapping[str, Mapping[str, int]] | None = None,
                      ) -> dict[str, Application]:
    """Load every application under ``<data root>/traces`` with the authors' settings.

    Args:
        traces: data root or traces directory (see :func:`find_traces_dir`).
        settings: per-application overrides of :data:`APP_SETTINGS`.

    Returns:
        ``{name: Application}``.

    Example:
        >>> apps = load_applications()                   # doctest: +SKIP
        >>> apps["bert"].init_batch_size, apps["bert"].max_batch_size   # doctest: +SKIP
        (12, 384)
    """
    root = find_traces_dir(traces)
    cfg = {k: dict(v) for k, v in APP_SETTINGS.items()}
    for k, v in (settings or {}).items():
        cfg.setdefault(k, {}).update(v)
    apps = {}
    for name, kw in cfg.items():
        d = root / name
        if not d.is_dir():
            raise FileNotFoundError(f"application trace directory missing: {d}")
        if "max_epochs" not in kw:
            raise ValueError(f"settings for application {name!r} lack max_epochs")
        apps[name] = Application.from_dir(d, accelerator_type=None, **kw)
    return apps


def _is_sia_dir(path: Path) -> bool:
    return any((path / "traces" / "cifar10").glob("placements-*.csv"))


def _pollux_twin(sia_app_dir: Path) -> Path | None:
    """The same application's Pollux trace directory, when the Sia root sits inside a Pollux
    data root (the packaged copy: ``data/sia/traces/APP`` -> ``data/traces/APP``)."""
    twin = sia_app_dir.parent.parent.parent / "traces" / sia_app_dir.name
    return twin if (twin / "placements.csv").is_file() else None


def _typed_file(app_dir: Path, kind: str, accelerator_type: str) -> Path:
    """``app_dir/KIND-TYPE.csv``, or its Pollux twin for the Pollux type (else the own path,
    which then does not exist)."""
    own = app_dir / f"{kind}-{accelerator_type}.csv"
    if own.is_file() or accelerator_type != POLLUX_TRACE_TYPE:
        return own
    twin = _pollux_twin(app_dir)
    return twin / f"{kind}.csv" if twin is not None and (twin / f"{kind}.csv").is_file() else own


def sia_trace_file(app: str, kind: str, accelerator_type: str,
                   data: str | os.PathLike[str] | None = None) -> Path:
    """The Sia trace file of one application, kind and accelerator type, wherever it is kept.

    A Sia root inside a Pollux data root (the packaged copy) keeps the files it shares with
    the Pollux traces once, there: the ``aws`` type's files are the Pollux
    ``placements.csv`` / ``scalability.csv``.

    Args:
        app: application name (``cifar10``, ...).
        kind: ``placements`` or ``scalability``.
        accelerator_type: ``aws``, ``rtx``, ``dgx-ext``, ...
        data: the Sia data root (see :func:`find_sia_dir`), or None to search.

    Raises:
        ValueError: ``kind`` is not ``placements`` or ``scalability``.
        FileNotFoundError: no such file.

    Example:
        >>> sia_trace_file("cifar10", "placements", "rtx").name
        'placements-rtx.csv'
    """
    if kind not in ("placements", "scalability"):
        raise ValueError(f"kind ({kind!r}) must be 'placements' or 'scalability'")
    path = _typed_file(find_sia_dir(data) / "traces" / app, kind, accelerator_type)
    if not path.is_file():
        raise FileNotFoundError(f"no {kind} trace of {app!r} on {accelerator_type!r}: {path}")
    return path


def find_sia_dir(data: str | os.PathLike[str] | None = None) -> Path:
    """Locate the Sia data root (``traces/APP/placements-TYPE.csv`` and ``workloads/``).

    Search order: ``data``, ``$GOODPUT_JAX_SIA_DATA``, ``../shared/sia-sim`` relative to
    the repository and the working directory, then the copy shipped in the package
    (``goodput_jax/sched/sim/data/sia``).

    Raises:
        FileNotFoundError: if an explicit path is not a Sia data root, or nothing is found.

    Example:
        >>> (find_sia_dir() / "workloads" / "philly").is_dir()   # doctest: +SKIP
        True
    """
    for name, value in (("data", data), (_SIA_ENV_VAR, os.environ.get(_SIA_ENV_VAR))):
        if value:
            p = Path(value).expanduser()
            for cand in (p, p.parent):
                if _is_sia_dir(cand):
                    return cand
            raise FileNotFoundError(f"{name}={str(value)!r} is not a Sia data root "
                                    "(expected traces/APP/placements-TYPE.csv under it)")
    repo = Path(__file__).resolve().parents[3]
    for cand in (repo.parent / "shared" / "sia-sim", Path.cwd().parent / "shared" / "sia-sim",
                 _PACKAGED / "sia"):
        if _is_sia_dir(cand):
            return cand
    raise FileNotFoundError("Sia data not found: pass --traces DIR or set $GOODPUT_JAX_SIA_DATA")


def load_typed_applications(types: Sequence[str], data: str | os.PathLike[str] | None = None,
                            settings: Mapping[str, Mapping[str, int]] | None = None,
                            ) -> dict[str, dict[str, Application]]:
    """Every application measured on every accelerator type: ``{app: {type: Application}}``.

    Applications lacking a type's traces are skipped (``gpt_pmp`` is not loaded).
    ``settings`` overrides per application (e.g. ``{"cifar10": {"max_epochs": 10}}``).

    Example:
        >>> apps = load_typed_applications(["aws", "dgx-ext"])    # doctest: +SKIP
        >>> sorted(apps["cifar10"])                              # doctest: +SKIP
        ['aws', 'dgx-ext']
    """
    root = find_sia_dir(data) / "traces"
    out: dict[str, dict[str, Application]] = {}
    for name, kw in APP_SETTINGS.items():
        d = root / name
        if not all(_typed_file(d, "placements", t).is_file() for t in types):
            continue
        # Local batch bounds come from each type's own measurements (an A100 holds more
        # than a T4), so the Pollux-on-T4 override of yolov3 does not apply here.
        base = {"max_epochs": kw["max_epochs"], **dict((settings or {}).get(name, {}))}
        out[name] = {t: Application.from_dir(d, accelerator_type=t,
                                             **{**base, **SIA_TYPE_SETTINGS.get((name, t), {})})
                     for t in types}
    if not out:
        raise FileNotFoundError(f"no application has traces for all of {list(types)} in {root}")
    return out
