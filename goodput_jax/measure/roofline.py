"""Program goodput's roofline: a compiled step's cost, its device's peak, and where each
program's steps sit under the roof, with the peak an upper bound on every step.

* :class:`ProgramCost`: FLOPs and bytes per device per call (``goodput_jax.runtime``
  reads them from XLA); :class:`DevicePeak`: peak FLOP/s and bandwidth (the published
  :data:`PEAK_TABLE`, :func:`lookup_peak`, or a measured peak with its spread).
* :func:`program_stats`: one program's MFU, program goodput and verdict from its step
  times. A step that ran faster than the peak allows proves the peak higher: the peak is
  raised to the rate that step reached (FLOP/s and bytes/s apart), the program's figures
  are computed against it and the raise is kept (``ProgramStats.raised_from``), so MFU and
  program goodput never exceed 1. A program the evidence cannot place on one side of the
  ridge (within :data:`RIDGE_BAND`, widened by the peak's spreads: each rate's and the
  ridge's own, which a raise widens) is ``'ridge'``: "near the ridge", not a verdict that
  flips with the peak's noise.
* :func:`combine_programs`: the job's program goodput, every program against one peak per
  device kind (the highest any of them needed).

``goodput_jax.measure.productivity`` re-exports every public name here.

Example:
    >>> peak = DevicePeak("cpu", 1e11, 1e10, "measured")
    >>> s = program_stats(ProgramCost("jit(f)", 1e10, 0.0, 1e8, "cpu"), peak, [0.05, 0.05])
    >>> s.raised_from is peak, round(s.peak.flops_per_s / 1e9), s.mfu <= 1.0
    (True, 200, True)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any

__all__ = ["PEAK_TABLE", "RIDGE_BAND", "DevicePeak", "ProgramCost", "ProgramGoodput",
           "ProgramStats", "combine_programs", "lookup_peak", "program_stats"]

#: a program whose compute and memory times are within this factor of each other (the
#: factor widened by its peak's measured spreads: ``flops_spread`` or ``bytes_spread`` and
#: ``ridge_spread``, see ``_bound``) sits "near the ridge": bound ``'ridge'``
RIDGE_BAND = 1.5


def _finite(value: Any, name: str) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{name} ({value!r}) must be a finite number")
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} ({value!r}) must be a finite number") from None
    if not math.isfinite(out):
        raise ValueError(f"{name} ({value!r}) must be a finite number")
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class ProgramCost:
    """One compiled step program's cost, per device, from XLA's cost analysis.

    Attributes:
        name: the program's name (``jit(train_step)``).
        flops: floating-point operations per device per call.
        transcendentals: transcendental operations per device per call.
        bytes_accessed: bytes read and written per device per call (HBM traffic estimate).
        device_kind: ``jax.Device.device_kind`` of the devices it runs on.
        num_devices: devices the program is partitioned over (cost is per device).
        peak: the device's peak, when the runtime resolved one (a measured peak on a CPU
            or an unknown device), else None (the calculator looks ``device_kind`` up).

    Example:
        >>> c = ProgramCost("jit(f)", 2e9, 0.0, 1.2e7, "cpu", 1)
        >>> ProgramCost.from_payload(c.to_payload()) == c
        True
    """

    name: str
    flops: float
    transcendentals: float
    bytes_accessed: float
    device_kind: str
    num_devices: int = 1
    peak: DevicePeak | None = None

    def __post_init__(self) -> None:
        for f in ("flops", "transcendentals", "bytes_accessed"):
            v = _finite(getattr(self, f), f)
            if v < 0:
                raise ValueError(f"{f} ({v!r}) must be >= 0")
            object.__setattr__(self, f, v)
        if isinstance(self.num_devices, bool) or not isinstance(self.num_devices, int) \
                or self.num_devices < 1:
            raise ValueError(f"num_devices ({self.num_devices!r}) must be an int >= 1")

    def to_payload(self) -> dict:
        """A JSON-serialisable dict (the ``PROGRAM_COST`` event's payload)."""
        d = {"name": self.name, "flops": self.flops, "transcendentals": self.transcendentals,
             "bytes_accessed": self.bytes_accessed, "device_kind": self.device_kind,
             "num_devices": self.num_devices}
        if self.peak is not None:
            d["peak"] = self.peak.to_payload()
        return d

    @classmethod
    def from_payload(cls, d: dict) -> ProgramCost:
        """Inverse of :meth:`to_payload`."""
        peak = d.get("peak")
        return cls(str(d.get("name", "")), d["flops"], d.get("transcendentals", 0.0),
                   d.get("bytes_accessed", 0.0), str(d.get("device_kind", "")),
                   int(d.get("num_devices", 1)),
                   None if peak is None else DevicePeak.from_payload(peak))


@dataclasses.dataclass(frozen=True, slots=True)
class DevicePeak:
    """A device's peak dense bf16 FLOP/s and memory bandwidth.

    Attributes:
        device_kind: what it is for (``"TPU v5 lite"``, ``"NVIDIA H100 80GB HBM3"``, ``"cpu"``).
        flops_per_s: peak FLOP/s (dense bf16 for accelerators; measured f32 on a CPU).
        bytes_per_s: peak memory bandwidth in bytes/s.
        source: ``'table'`` (published figure, see docs/productivity.md), ``'measured'``
            (the runtime's matmul + copy probe, ``goodput_jax.runtime.measured_peak``) or
            ``'user'``.
        flops_spread / bytes_spread: a measured peak's spread, ``1 - median / best`` of the
            probe's runs (0 for a published or given peak): how far one run can fall short
            of the best, so how far the true rate may lie above the one measured. A rate a
            step raised carries the spread of the steps that raised it.
        ridge_spread: how uncertain the ridge ``flops_per_s / bytes_per_s`` itself is:
            ``1 - lowest / highest`` of the ridges the probe's interleaved rounds measured
            (each round a matmul and a stream under the same load), widened where the two
            rates came from different moments (a cache file merging two probes, a rate a
            step raised). Each spread widens the "near the ridge" band (:data:`RIDGE_BAND`).

    Example:
        >>> DevicePeak("my chip", 1e15, 2e12).ridge_point
        500.0
    """

    device_kind: str
    flops_per_s: float
    bytes_per_s: float
    source: str = "user"
    flops_spread: float = 0.0
    bytes_spread: float = 0.0
    ridge_spread: float = 0.0

    def __post_init__(self) -> None:
        for f in ("flops_per_s", "bytes_per_s"):
            v = _finite(getattr(self, f), f)
            if v <= 0:
                raise ValueError(f"{f} ({v!r}) must be > 0")
            object.__setattr__(self, f, v)
        for f in ("flops_spread", "bytes_spread", "ridge_spread"):
            v = _finite(getattr(self, f), f)
            if not 0.0 <= v < 1.0:
                raise ValueError(f"{f} ({v!r}) must be in [0, 1)")
            object.__setattr__(self, f, v)
        if self.source not in ("table", "measured", "user"):
            raise ValueError(f"source ({self.source!r}) must be 'table', 'measured' or 'user'")

    @property
    def ridge_point(self) -> float:
        """FLOPs per byte where the roofline turns from memory- to compute-bound."""
        return self.flops_per_s / self.bytes_per_s

    def to_payload(self) -> dict:
        d = {"device_kind": self.device_kind, "flops_per_s": self.flops_per_s,
             "bytes_per_s": self.bytes_per_s, "source": self.source}
        if self.flops_spread or self.bytes_spread:
            d.update(flops_spread=self.flops_spread, bytes_spread=self.bytes_spread)
        if self.ridge_spread:
            d["ridge_spread"] = self.ridge_spread
        return d

    @classmethod
    def from_payload(cls, d: dict) -> DevicePeak:
        return cls(str(d.get("device_kind", "")), d["flops_per_s"], d["bytes_per_s"],
                   str(d.get("source", "user")), d.get("flops_spread", 0.0),
                   d.get("bytes_spread", 0.0), d.get("ridge_spread", 0.0))


_T, _G = 1e12, 1e9
#: Published dense bf16 peak FLOP/s and HBM bandwidth per chip (sources in
#: docs/productivity.md). Keys are canonical names; :func:`lookup_peak` maps a JAX
#: ``device_kind`` onto them.
PEAK_TABLE: dict[str, DevicePeak] = {
    "TPU v4": DevicePeak("TPU v4", 275 * _T, 1228 * _G, "table"),
    "TPU v5e": DevicePeak("TPU v5e", 197 * _T, 819 * _G, "table"),
    "TPU v5p": DevicePeak("TPU v5p", 459 * _T, 2765 * _G, "table"),
    "TPU v6e": DevicePeak("TPU v6e", 918 * _T, 1640 * _G, "table"),
    "NVIDIA A100 40GB": DevicePeak("NVIDIA A100 40GB", 312 * _T, 1555 * _G, "table"),
    "NVIDIA A100 80GB": DevicePeak("NVIDIA A100 80GB", 312 * _T, 2039 * _G, "table"),
    "NVIDIA H100 PCIe": DevicePeak("NVIDIA H100 PCIe", 756 * _T, 2000 * _G, "table"),
    "NVIDIA H100 SXM": DevicePeak("NVIDIA H100 SXM", 989 * _T, 3350 * _G, "table"),
    "NVIDIA H200": DevicePeak("NVIDIA H200", 989 * _T, 4800 * _G, "table"),
    "NVIDIA B200": DevicePeak("NVIDIA B200", 2250 * _T, 8000 * _G, "table"),
}

#: (substrings that must all appear in the lower-cased device_kind, table key), in order
_KIND_RULES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("v5 lite",), "TPU v5e"), (("v5e",), "TPU v5e"), (("v5litepod",), "TPU v5e"),
    (("v5p",), "TPU v5p"), (("tpu v5",), "TPU v5p"),
    (("v6 lite",), "TPU v6e"), (("v6e",), "TPU v6e"),
    (("tpu v4",), "TPU v4"),
    (("h200",), "NVIDIA H200"),
    (("h100", "pcie"), "NVIDIA H100 PCIe"), (("h100",), "NVIDIA H100 SXM"),
    (("a100", "40gb"), "NVIDIA A100 40GB"), (("a100",), "NVIDIA A100 80GB"),
    (("b200",), "NVIDIA B200"),
)


def lookup_peak(device_kind: str, table: dict[str, DevicePeak] | None = None) -> DevicePeak | None:
    """The published peak of a JAX ``device_kind``, or None when it is not in the table.

    ``table`` (optional) is consulted first, by exact ``device_kind`` and then by canonical
    key, so a user can add or override chips.

    Example:
        >>> lookup_peak("TPU v5 lite").flops_per_s
        197000000000000.0
        >>> lookup_peak("NVIDIA H100 80GB HBM3").device_kind
        'NVIDIA H100 SXM'
        >>> lookup_peak("cpu") is None
        True
    """
    if not isinstance(device_kind, str):
        raise ValueError(f"device_kind ({device_kind!r}) must be a string")
    low = device_kind.lower()
    key = next((k for subs, k in _KIND_RULES if all(s in low for s in subs)), None)
    for tab in (table or {}, PEAK_TABLE):
        if device_kind in tab:
            return tab[device_kind]
        if key is not None and key in tab:
            return tab[key]
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class ProgramStats:
    """Program goodput of one compiled step program.

    Attributes:
        cost: the program's :class:`ProgramCost`.
        peak: the :class:`DevicePeak` it is measured against: the one given, raised where
            a step beat it (``raised_from`` then holds the one given).
        first_step: the first step run with it.
        num_steps: productive steps attributed to it.
        step_time_s: their median device-true step time.
        compute_time_s: ``flops / peak FLOP/s``.
        memory_time_s: ``bytes / peak bandwidth``.
        ideal_step_time_s: the roofline's step time, ``max(compute, memory)``.
        mfu: ``compute_time_s / step_time_s`` (model FLOPs utilisation, as a fraction, <= 1).
        program_goodput: ``ideal_step_time_s / step_time_s`` (fraction, <= 1).
        bound: ``'compute'`` or ``'memory'`` (the larger of the two times), or ``'ridge'``
            when neither is :data:`RIDGE_BAND` times the other at the least favourable end
            of the peak's spreads (``flops_spread``, ``bytes_spread``, ``ridge_spread``).
        arithmetic_intensity: FLOPs per byte accessed.
        raised_from: the peak as given when its steps beat it (None: not raised).
    """

    cost: ProgramCost
    peak: DevicePeak
    first_step: int
    num_steps: int
    step_time_s: float
    compute_time_s: float
    memory_time_s: float
    ideal_step_time_s: float
    mfu: float
    program_goodput: float
    bound: str
    arithmetic_intensity: float
    raised_from: DevicePeak | None = None

    @property
    def verdict(self) -> str:
        """``'compute-bound'``, ``'memory-bound'`` or ``'near the ridge'``."""
        return "near the ridge" if self.bound == "ridge" else f"{self.bound}-bound"

    def as_dict(self) -> dict:
        """Flat JSON-ready dict (the cost's and peak's figures prefixed)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name not in ("cost", "peak", "raised_from")}
        out.update(name=self.cost.name, flops=self.cost.flops,
                   bytes_accessed=self.cost.bytes_accessed, device_kind=self.cost.device_kind,
                   peak_flops_per_s=self.peak.flops_per_s, peak_bytes_per_s=self.peak.bytes_per_s,
                   peak_source=self.peak.source, peak_flops_spread=self.peak.flops_spread,
                   peak_bytes_spread=self.peak.bytes_spread,
                   peak_ridge_spread=self.peak.ridge_spread, verdict=self.verdict,
                   peak_raised=self.raised_from is not None)
        if self.raised_from is not None:
            out.update(peak_raised_from_flops_per_s=self.raised_from.flops_per_s,
                       peak_raised_from_bytes_per_s=self.raised_from.bytes_per_s)
        return out


def _bound(comp: float, mem: float, peak: DevicePeak) -> str:
    """The verdict the evidence supports. The true FLOP/s may lie above the measured one by
    ``1 / (1 - flops_spread)`` (compute time shorter), the bandwidth by ``1 / (1 -
    bytes_spread)`` and the ridge either way by ``1 / (1 - ridge_spread)``: a program is
    compute- (memory-) bound only when its compute (memory) time is still :data:`RIDGE_BAND`
    times the other at the end of that range least favourable to the verdict, else
    ``'ridge'``."""
    if not (comp > 0 and mem > 0):
        return "compute" if comp >= mem else "memory"
    keep = 1.0 - peak.ridge_spread
    if comp / mem * (1.0 - peak.flops_spread) * keep >= RIDGE_BAND:
        return "compute"
    if mem / comp * (1.0 - peak.bytes_spread) * keep >= RIDGE_BAND:
        return "memory"
    return "ridge"


def _against(cost: ProgramCost, peak: DevicePeak, first_step: int, n: int, med: float,
             raised_from: DevicePeak | None) -> ProgramStats:
    """The stats of a program whose steps' median is ``med`` against ``peak`` (one no step
    beats: the fractions are clipped at 1 only against rounding)."""
    comp = cost.flops / peak.flops_per_s
    mem = cost.bytes_accessed / peak.bytes_per_s
    ideal = max(comp, mem)
    ok = n > 0 and med > 0
    return ProgramStats(
        cost=cost, peak=peak, first_step=int(first_step), num_steps=n, step_time_s=med,
        compute_time_s=comp, memory_time_s=mem, ideal_step_time_s=ideal,
        mfu=min(comp / med, 1.0) if ok else math.nan,
        program_goodput=min(ideal / med, 1.0) if ok else math.nan,
        bound=_bound(comp, mem, peak),
        arithmetic_intensity=(cost.flops / cost.bytes_accessed if cost.bytes_accessed > 0
                              else math.inf),
        raised_from=raised_from)


def _raised(peak: DevicePeak, flops_per_s: float, bytes_per_s: float,
            flops_spread: float = 0.0, bytes_spread: float = 0.0) -> DevicePeak:
    """``peak`` with each rate raised to at least the one given (itself when neither is).

    A raised rate carries the larger of its old spread and the one given (the spread of
    the steps or the peak that raised it). Raising one rate moves the ridge by the factor
    it was raised: the two rates now come from different moments (a probe and a step, a
    loaded probe and a quieter step), so the ridge's spread widens to cover both places.
    """
    if flops_per_s <= peak.flops_per_s and bytes_per_s <= peak.bytes_per_s:
        return peak
    f, b = max(peak.flops_per_s, flops_per_s), max(peak.bytes_per_s, bytes_per_s)
    fs = max(peak.flops_spread, flops_spread) if f > peak.flops_per_s else peak.flops_spread
    bs = max(peak.bytes_spread, bytes_spread) if b > peak.bytes_per_s else peak.bytes_spread
    r0, r1 = peak.ridge_point, f / b
    rs = 1.0 - (1.0 - peak.ridge_spread) * min(r0, r1) / max(r0, r1)
    return dataclasses.replace(peak, flops_per_s=f, bytes_per_s=b, flops_spread=min(fs, 0.99),
                               bytes_spread=min(bs, 0.99), ridge_spread=min(rs, 0.99))


def _step_spread(times: Any, med: float) -> float:
    """``1 - p25 / median`` of the steps that are not splits (at least half the median):
    how far the median step falls short of the program's fast steps on this machine."""
    import numpy as np

    whole = times[times >= 0.5 * med]
    if whole.size < 2:
        return 0.0
    return float(min(max(1.0 - float(np.percentile(whole, 25)) / med, 0.0), 0.99))


def program_stats(cost: ProgramCost, peak: DevicePeak, step_times: Iterable[float],
                  first_step: int = 0) -> ProgramStats:
    """Roofline position, MFU and program goodput of a program from its step times.

    The peak bounds the program's steps: where they moved more FLOPs or bytes per second
    than ``peak`` allows (at their median step time, the time the figures use: one step's
    device-true time can be a split of two, a few us in a queued loop, not the device's
    rate), that rate becomes the peak (``raised_from`` keeps the one given) and the figures
    are computed against it, so MFU and program goodput are <= 1.

    Example:
        >>> c = ProgramCost("f", flops=1e12, transcendentals=0, bytes_accessed=1e9,
        ...                 device_kind="x")
        >>> s = program_stats(c, DevicePeak("x", 1e14, 1e12), [0.02, 0.02])
        >>> round(s.mfu, 3), round(s.program_goodput, 3), s.bound, s.raised_from
        (0.5, 0.5, 'compute', None)
    """
    import numpy as np

    times = np.asarray(step_times if isinstance(step_times, np.ndarray) else list(step_times),
                       dtype=np.float64).ravel()
    n = int(times.size)
    med = float(np.median(times)) if n else math.nan
    used = peak
    if n and med > 0:
        spread = _step_spread(times, med)
        used = _raised(peak, cost.flops / med, cost.bytes_accessed / med, spread, spread)
    return _against(cost, used, first_step, n, med, None if used is peak else peak)


@dataclasses.dataclass(frozen=True, slots=True)
class ProgramGoodput:
    """Program goodput of a job: each program's :class:`ProgramStats` and the step-time
    weighted whole (``sum(ideal x steps) / sum(actual x steps)``).

    Attributes:
        programs: per program, in the order first seen.
        program_goodput: the job's program goodput (fraction; NaN without programs).
        mfu: the job's MFU, weighted the same way (fraction).
        num_steps: steps covered.
    """

    programs: tuple[ProgramStats, ...]
    program_goodput: float
    mfu: float
    num_steps: int

    @property
    def raised(self) -> tuple[ProgramStats, ...]:
        """The programs measured against a peak raised above the one given."""
        return tuple(p for p in self.programs if p.raised_from is not None)

    def as_dict(self) -> dict:
        """JSON-ready dict (``programs`` as a list of :meth:`ProgramStats.as_dict`)."""
        return {"program_goodput": self.program_goodput, "mfu": self.mfu,
                "num_steps": self.num_steps, "programs": [p.as_dict() for p in self.programs]}


def combine_programs(programs: Iterable[ProgramStats]) -> ProgramGoodput:
    """The job's :class:`ProgramGoodput` from its programs (weighted by step time).

    A device has one peak: every program on a device kind is measured against the highest
    FLOP/s and bandwidth any of them was measured against (a peak one program's steps
    raised raises it for all, each program's figures recomputed).

    Example:
        >>> c = ProgramCost("f", 1e12, 0, 1e9, "x")
        >>> p = DevicePeak("x", 1e14, 1e12)
        >>> round(combine_programs([program_stats(c, p, [0.02])]).program_goodput, 3)
        0.5
    """
    progs = list(programs)
    top: dict[str, DevicePeak] = {}
    for p in progs:
        k = p.cost.device_kind
        top[k] = _raised(top.get(k, p.peak), p.peak.flops_per_s, p.peak.bytes_per_s,
                         p.peak.flops_spread, p.peak.bytes_spread)
    for i, p in enumerate(progs):
        t = top[p.cost.device_kind]
        pk = _raised(p.peak, t.flops_per_s, t.bytes_per_s, t.flops_spread, t.bytes_spread)
        if pk is not p.peak:
            progs[i] = _against(p.cost, pk, p.first_step, p.num_steps, p.step_time_s,
                                p.raised_from or p.peak)
    used = [p for p in progs if p.num_steps > 0 and p.step_time_s > 0]
    actual = sum(p.step_time_s * p.num_steps for p in used)
    if actual <= 0:
        return ProgramGoodput(tuple(progs), math.nan, math.nan, 0)
    ideal = sum(p.ideal_step_time_s * p.num_steps for p in used)
    comp = sum(p.compute_time_s * p.num_steps for p in used)
    return ProgramGoodput(tuple(progs), min(ideal / actual, 1.0), min(comp / actual, 1.0),
                          sum(p.num_steps for p in used))
