"""ML Productivity Goodput: scheduling x runtime x program goodput, as typed records.

Light core: plain numbers in, frozen dataclasses out; no JAX. The runtime capture
(``goodput_jax.runtime``) reads each compiled step's cost from XLA and hands it here as
a :class:`ProgramCost`; the cluster runtime (or the recorder's elastic/disruption events)
hands a :class:`SchedulingTimeline`.

Definitions (see docs/productivity.md for the sources):

* scheduling goodput = time the job held all its resources / total wall time;
* runtime goodput = productive time / time held (today's goodput, over the held time);
* program goodput = roofline ideal step time / device-true step time;
* ML Productivity Goodput = scheduling x runtime x program;
* ETTR (Meta) = productive time / total wall time including scheduling waits.

Example:
    >>> tl = SchedulingTimeline.of([
    ...     SchedulingSpan(0.0, 30.0, held=False, reason="queued"),
    ...     SchedulingSpan(30.0, 100.0, held=True, reason="running"),
    ... ])
    >>> tl.total_s, tl.held_s, round(tl.scheduling_goodput, 2)
    (100.0, 70.0, 0.7)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable

#: the reasons a span may carry; any other non-empty string is accepted too (free text
#: from a source that knows better), these are the ones the package itself writes.
HELD_REASONS = ("running",)
WAIT_REASONS = ("submitted", "queued", "pending", "stopping", "relaunching",
                "elastic_wait", "elastic_reinit", "disrupted", "restarting")


def _finite(value, name: str) -> float:
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
class SchedulingSpan:
    """One stretch of a job's wall time, with or without its full allocation.

    Attributes:
        start: UTC seconds since the epoch (or any common clock) where the span begins.
        end: where it ends (``end >= start``).
        held: True while the job held every resource it needs (running with its full
            allocation); False while it waited (queued, stopping, relaunching, ...).
        reason: what the job was doing: ``'queued'``, ``'running'``, ``'stopping'``,
            ``'relaunching'``, ``'elastic_wait'``, ... (free text; see ``WAIT_REASONS``).

    Example:
        >>> SchedulingSpan(0.0, 5.0, held=False, reason="queued").duration
        5.0
    """

    start: float
    end: float
    held: bool
    reason: str

    def __post_init__(self) -> None:
        start = _finite(self.start, "start")
        end = _finite(self.end, "end")
        if end < start:
            raise ValueError(f"end ({self.end!r}) must be >= start ({self.start!r})")
        if not isinstance(self.held, bool):
            raise ValueError(f"held ({self.held!r}) must be a bool")
        if not isinstance(self.reason, str) or not self.reason:
            raise ValueError(f"reason ({self.reason!r}) must be a non-empty string")
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "end", end)

    @property
    def duration(self) -> float:
        """``end - start`` in seconds."""
        return self.end - self.start


@dataclasses.dataclass(frozen=True, slots=True)
class SchedulingTimeline:
    """A job's wall time as ordered, non-overlapping :class:`SchedulingSpan` s.

    Gaps between spans are allowed (time nobody accounted for counts in neither the
    held nor the total time); overlaps are refused.

    Example:
        >>> tl = SchedulingTimeline.of([SchedulingSpan(0, 10, True, "running")])
        >>> tl.scheduling_goodput
        1.0
    """

    spans: tuple[SchedulingSpan, ...] = ()

    def __post_init__(self) -> None:
        spans = tuple(self.spans)
        for i, s in enumerate(spans):
            if not isinstance(s, SchedulingSpan):
                raise ValueError(f"spans[{i}] ({s!r}) must be a SchedulingSpan")
        for i in range(1, len(spans)):
            if spans[i].start < spans[i - 1].end - 1e-9:
                raise ValueError(
                    f"spans[{i}] (start {spans[i].start!r}) overlaps spans[{i - 1}] "
                    f"(end {spans[i - 1].end!r}); sort them and remove overlaps")
        object.__setattr__(self, "spans", spans)

    @classmethod
    def of(cls, spans: Iterable[SchedulingSpan]) -> SchedulingTimeline:
        """A timeline from spans in any order (sorted by start)."""
        return cls(tuple(sorted(spans, key=lambda s: (s.start, s.end))))

    @property
    def start(self) -> float | None:
        """The first span's start (None when empty)."""
        return self.spans[0].start if self.spans else None

    @property
    def end(self) -> float | None:
        """The last span's end (None when empty)."""
        return self.spans[-1].end if self.spans else None

    @property
    def total_s(self) -> float:
        """Seconds covered by spans."""
        return float(sum(s.duration for s in self.spans))

    @property
    def held_s(self) -> float:
        """Seconds covered by held spans."""
        return float(sum(s.duration for s in self.spans if s.held))

    @property
    def scheduling_goodput(self) -> float:
        """``held_s / total_s`` as a fraction (1.0 for an empty timeline)."""
        total = self.total_s
        return self.held_s / total if total > 0 else 1.0

    def by_reason(self) -> dict[str, float]:
        """Seconds per reason."""
        out: dict[str, float] = {}
        for s in self.spans:
            out[s.reason] = out.get(s.reason, 0.0) + s.duration
        return out

    def held_windows(self) -> tuple[tuple[float, float], ...]:
        """The held spans as ``(start, end)`` pairs, adjacent ones merged."""
        out: list[list[float]] = []
        for s in self.spans:
            if not s.held:
                continue
            if out and s.start <= out[-1][1] + 1e-9:
                out[-1][1] = max(out[-1][1], s.end)
            else:
                out.append([s.start, s.end])
        return tuple((a, b) for a, b in out)


# ----------------------------------------------------------------------------- program goodput
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
            (a matmul + copy probe on this process's device) or ``'user'``.

    Example:
        >>> DevicePeak("my chip", 1e15, 2e12).ridge_point
        500.0
    """

    device_kind: str
    flops_per_s: float
    bytes_per_s: float
    source: str = "user"

    def __post_init__(self) -> None:
        for f in ("flops_per_s", "bytes_per_s"):
            v = _finite(getattr(self, f), f)
            if v <= 0:
                raise ValueError(f"{f} ({v!r}) must be > 0")
            object.__setattr__(self, f, v)
        if self.source not in ("table", "measured", "user"):
            raise ValueError(f"source ({self.source!r}) must be 'table', 'measured' or 'user'")

    @property
    def ridge_point(self) -> float:
        """FLOPs per byte where the roofline turns from memory- to compute-bound."""
        return self.flops_per_s / self.bytes_per_s

    def to_payload(self) -> dict:
        return {"device_kind": self.device_kind, "flops_per_s": self.flops_per_s,
                "bytes_per_s": self.bytes_per_s, "source": self.source}

    @classmethod
    def from_payload(cls, d: dict) -> DevicePeak:
        return cls(str(d.get("device_kind", "")), d["flops_per_s"], d["bytes_per_s"],
                   str(d.get("source", "user")))


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
        peak: the :class:`DevicePeak` it is measured against.
        first_step: the first step run with it.
        num_steps: productive steps attributed to it.
        step_time_s: their median device-true step time.
        compute_time_s: ``flops / peak FLOP/s``.
        memory_time_s: ``bytes / peak bandwidth``.
        ideal_step_time_s: the roofline's step time, ``max(compute, memory)``.
        mfu: ``compute_time_s / step_time_s`` (model FLOPs utilisation, as a fraction).
        program_goodput: ``ideal_step_time_s / step_time_s`` (fraction).
        bound: ``'compute'`` or ``'memory'`` (the larger of the two times).
        arithmetic_intensity: FLOPs per byte accessed.
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

    def as_dict(self) -> dict:
        """Flat JSON-ready dict (the cost's and peak's figures prefixed)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name not in ("cost", "peak")}
        out.update(name=self.cost.name, flops=self.cost.flops,
                   bytes_accessed=self.cost.bytes_accessed, device_kind=self.cost.device_kind,
                   peak_flops_per_s=self.peak.flops_per_s, peak_bytes_per_s=self.peak.bytes_per_s,
                   peak_source=self.peak.source)
        return out


def program_stats(cost: ProgramCost, peak: DevicePeak, step_times: Iterable[float],
                  first_step: int = 0) -> ProgramStats:
    """Roofline position, MFU and program goodput of a program from its step times.

    Example:
        >>> c = ProgramCost("f", flops=1e12, transcendentals=0, bytes_accessed=1e9,
        ...                 device_kind="x")
        >>> s = program_stats(c, DevicePeak("x", 1e14, 1e12), [0.02, 0.02])
        >>> round(s.mfu, 3), round(s.program_goodput, 3), s.bound
        (0.5, 0.5, 'compute')
    """
    import numpy as np

    times = np.asarray(step_times if isinstance(step_times, np.ndarray) else list(step_times),
                       dtype=np.float64).ravel()
    n = int(times.size)
    med = float(np.median(times)) if n else math.nan
    comp = cost.flops / peak.flops_per_s
    mem = cost.bytes_accessed / peak.bytes_per_s
    ideal = max(comp, mem)
    ok = n > 0 and med > 0
    return ProgramStats(
        cost=cost, peak=peak, first_step=int(first_step), num_steps=n, step_time_s=med,
        compute_time_s=comp, memory_time_s=mem, ideal_step_time_s=ideal,
        mfu=comp / med if ok else math.nan,
        program_goodput=ideal / med if ok else math.nan,
        bound="compute" if comp >= mem else "memory",
        arithmetic_intensity=cost.flops / cost.bytes_accessed if cost.bytes_accessed > 0 else math.inf,
    )


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

    def as_dict(self) -> dict:
        """JSON-ready dict (``programs`` as a list of :meth:`ProgramStats.as_dict`)."""
        return {"program_goodput": self.program_goodput, "mfu": self.mfu,
                "num_steps": self.num_steps, "programs": [p.as_dict() for p in self.programs]}


def combine_programs(programs: Iterable[ProgramStats]) -> ProgramGoodput:
    """The job's :class:`ProgramGoodput` from its programs (weighted by step time).

    Example:
        >>> c = ProgramCost("f", 1e12, 0, 1e9, "x")
        >>> p = DevicePeak("x", 1e14, 1e12)
        >>> round(combine_programs([program_stats(c, p, [0.02])]).program_goodput, 3)
        0.5
    """
    progs = tuple(programs)
    used = [p for p in progs if p.num_steps > 0 and p.step_time_s > 0]
    actual = sum(p.step_time_s * p.num_steps for p in used)
    if actual <= 0:
        return ProgramGoodput(progs, math.nan, math.nan, 0)
    ideal = sum(p.ideal_step_time_s * p.num_steps for p in used)
    comp = sum(p.compute_time_s * p.num_steps for p in used)
    return ProgramGoodput(progs, ideal / actual, comp / actual, sum(p.num_steps for p in used))


# ----------------------------------------------------------------------------- the product
@dataclasses.dataclass(frozen=True, slots=True)
class ProductivityGoodput:
    """ML Productivity Goodput and its three factors (fractions in [0, 1]).

    Attributes:
        scheduling_goodput: ``held_s / total_s``.
        runtime_goodput: ``productive_s / held_s``.
        program_goodput: roofline ideal / device-true step time (NaN when no program cost
            was recorded; the product is then NaN too).
        ml_productivity_goodput: the product of the three.
        ettr: Meta's effective training time ratio, ``productive_s / total_s``.
        mfu: model FLOPs utilisation of the productive steps.
        total_s: wall time of the job, waits included.
        held_s: time the job held all its resources.
        productive_s: productive step time.
        scheduling_source: ``'timeline'`` (a given :class:`SchedulingTimeline`, e.g. the
            cluster runtime's) or ``'events'`` (derived from the recorder's events).
        timeline: the scheduling timeline used (None when the factors came from the
            calculator's running totals; ``get_scheduling_timeline()`` gives the spans).
        program: the :class:`ProgramGoodput` behind ``program_goodput``.
    """

    scheduling_goodput: float
    runtime_goodput: float
    program_goodput: float
    ml_productivity_goodput: float
    ettr: float
    mfu: float
    total_s: float
    held_s: float
    productive_s: float
    scheduling_source: str
    timeline: SchedulingTimeline | None
    program: ProgramGoodput

    def as_dict(self) -> dict:
        """The scalars as a flat JSON-ready dict (what a report row or a monitor writes).

        Example:
            >>> tl = SchedulingTimeline.of([SchedulingSpan(0, 10, True, "running")])
            >>> productivity(tl, 5.0, ProgramGoodput((), 0.5, 0.4, 1)).as_dict()["ettr"]
            0.5
        """
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in ("timeline", "program")}


def productivity(timeline: SchedulingTimeline, productive_s: float, program: ProgramGoodput,
                 source: str = "timeline") -> ProductivityGoodput:
    """Combine a scheduling timeline, productive time and program goodput.

    Productive time above the held time (a timeline that missed some held time) is
    clipped, so runtime goodput stays <= 1.

    Example:
        >>> tl = SchedulingTimeline.of([SchedulingSpan(0, 20, False, "queued"),
        ...                             SchedulingSpan(20, 100, True, "running")])
        >>> pg = ProgramGoodput((), 0.5, 0.4, 10)
        >>> r = productivity(tl, 60.0, pg)
        >>> r.scheduling_goodput, r.runtime_goodput, round(r.ml_productivity_goodput, 6), r.ettr
        (0.8, 0.75, 0.3, 0.6)
    """
    return productivity_of(timeline.total_s, timeline.held_s, productive_s, program, source,
                           timeline)


def productivity_of(total_s: float, held_s: float, productive_s: float, program: ProgramGoodput,
                    source: str = "events", timeline: SchedulingTimeline | None = None
                    ) -> ProductivityGoodput:
    """:func:`productivity` from the totals (seconds of wall time, held, productive).

    Example:
        >>> productivity_of(100.0, 80.0, 60.0, ProgramGoodput((), 0.5, 0.4, 1)).ettr
        0.6
    """
    total, held = float(total_s), float(held_s)
    prod = min(max(float(productive_s), 0.0), held)
    sched = held / total if total > 0 else math.nan
    runtime = prod / held if held > 0 else math.nan
    return ProductivityGoodput(
        scheduling_goodput=sched, runtime_goodput=runtime,
        program_goodput=program.program_goodput,
        ml_productivity_goodput=sched * runtime * program.program_goodput,
        ettr=prod / total if total > 0 else math.nan, mfu=program.mfu,
        total_s=total, held_s=held, productive_s=prod, scheduling_source=source,
        timeline=timeline, program=program)


#: timeline categories (the engine's) during which a job outside the cluster runtime did
#: not hold its resources: waiting for slices, and the downtime after a disruption
NOT_HELD_CATEGORIES = {
    "ELASTIC_SLICE_DOWN": "elastic_wait",
    "ELASTIC_SCALE_UP": "elastic_wait",
}


def timeline_from_segments(segments: Iterable, crashes: Iterable = (), restarts: Iterable = ()
                           ) -> SchedulingTimeline:
    """A :class:`SchedulingTimeline` from the calculator's attributed time slices.

    Held unless waiting: elastic waits for slices (``ELASTIC_SLICE_DOWN`` /
    ``ELASTIC_SCALE_UP``) and, after a crash, the downtime until the next run's first
    event (``'relaunching'``) are not held; everything else (steps, loading, saves,
    re-initialisation, compiles) is held time.

    Args:
        segments: ``[start, end, category, ...]`` slices (``GoodputCalculator.timeline``).
        crashes: ``(time, run)`` of the last event of each crashed run.
        restarts: ``(time, run)`` of the first event of each later run.

    Example:
        >>> segs = [[0, 10, "PRODUCTIVE"], [10, 14, "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"],
        ...         [14, 20, "PRODUCTIVE"]]
        >>> tl = timeline_from_segments(segs, crashes=[(10, 0)], restarts=[(14, 1)])
        >>> tl.held_s, tl.total_s
        (16.0, 20.0)
    """
    down: list[tuple[float, float]] = []
    rs = sorted(float(t) for t, _ in restarts)
    for t, _ in crashes:
        nxt = next((r for r in rs if r >= float(t)), None)
        if nxt is not None and nxt > float(t):
            down.append((float(t), nxt))
    spans: list[SchedulingSpan] = []

    def add(a: float, b: float, held: bool, reason: str) -> None:
        if b <= a:
            return
        last = spans[-1] if spans else None
        if last is not None and last.held == held and last.reason == reason \
                and abs(last.end - a) < 1e-9:
            spans[-1] = SchedulingSpan(last.start, b, held, reason)
        else:
            spans.append(SchedulingSpan(a, b, held, reason))

    for seg in sorted(segments, key=lambda s: (float(s[0]), float(s[1]))):
        a, b, cat = float(seg[0]), float(seg[1]), str(seg[2])
        if spans and a < spans[-1].end:
            a = spans[-1].end
        if cat in NOT_HELD_CATEGORIES:
            add(a, b, False, NOT_HELD_CATEGORIES[cat])
            continue
        # split the slice where it overlaps a downtime window
        pos = a
        for d0, d1 in down:
            if d1 <= pos or d0 >= b:
                continue
            add(pos, max(pos, d0), True, "running")
            add(max(pos, d0), min(b, d1), False, "relaunching")
            pos = min(b, d1)
        add(pos, b, True, "running")
    return SchedulingTimeline(tuple(spans))
