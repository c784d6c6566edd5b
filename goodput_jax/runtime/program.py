"""A compiled step's cost from XLA, and the device's peak: the runtime side of program goodput.

* :func:`program_cost`: FLOPs, transcendentals and bytes accessed of ``fn`` at ``args``,
  per device (the partitioned program's numbers: sharding accounted for), from
  ``fn.lower(*args).compile().cost_analysis()``, plus the matrix products that analysis
  leaves out (:func:`matmul_counts`: cuBLAS calls on a GPU, loop iterations beyond the
  first). For a function already called with these shapes, lowering and compiling hit
  JAX's caches: no compilation is added (``benchmarks/step_recorder_bench.py`` counts
  them); the read takes 0.1 ms for a small program on a 2-core CPU, 1.1 ms for an
  8-layer MLP's AdamW step (docs/productivity.md).
* :func:`device_peak`: the device's peak FLOP/s and memory bandwidth, from the published
  table (:data:`goodput_jax.measure.productivity.PEAK_TABLE`, overridable), or, on a CPU
  or a device not in the table, :func:`measured_peak` (``goodput_jax.runtime.peak``): a
  matmul and streaming probe of several shapes, run once per machine and device kind on
  its own thread and cached on disk, labelled ``'measured'``, with its spread.

:class:`~goodput_jax.runtime.StepRecorder` calls these when a step program is compiled
(or first called) and records the result with
:meth:`~goodput_jax.measure.recorder.GoodputRecorder.record_program_cost`.

Example:
    >>> import jax, jax.numpy as jnp
    >>> f = jax.jit(lambda a, b: a @ b)
    >>> a = jnp.ones((128, 128))
    >>> program_cost(f, a, a).flops == 2 * 128 ** 3
    True
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import math
import re
from typing import Any

from goodput_jax.measure.productivity import DevicePeak, ProgramCost, lookup_peak
from goodput_jax.runtime.peak import (
    PEAK_PROBE,
    cached_peak,
    measured_peak,
    peak_or_later,
    prefetch_peak,
    start_peak_probe,
    wait_for_probes,
)

logger = logging.getLogger(__name__)

__all__ = ["PEAK_PROBE", "MatmulCounts", "cached_peak", "device_peak", "matmul_counts", "measured_peak",
           "peak_or_later", "prefetch_peak", "program_cost", "start_peak_probe",
           "wait_for_probes"]


def _devices_of(args: Any, kwargs: dict) -> tuple[Any, ...]:
    import jax

    for leaf in jax.tree_util.tree_leaves((args, kwargs)):
        sharding = getattr(leaf, "sharding", None)
        if isinstance(leaf, jax.Array) and sharding is not None:
            return tuple(sorted(sharding.device_set, key=lambda d: d.id))
    return (jax.devices()[0],)


def _first(ca: Any) -> dict:
    if isinstance(ca, (list, tuple)):  # older JAX: one dict per partition / program
        ca = ca[0] if ca else {}
    return dict(ca or {})


# -------------------------------------------------------------- matmuls in the compiled HLO
# XLA's cost analysis leaves matrix products out or short in two places (seen with jax
# 0.10-0.11): a product the GPU compiler hands to cuBLAS (a ``custom-call`` to
# ``__cublas$gemm`` / ``__cublas$lt$matmul``) counts no FLOPs and no bytes, and a loop body
# (``while``: ``lax.scan`` over layers, ``fori_loop``) counts once, not once per iteration.
# ``matmul_counts`` reads the compiled module's text and counts each product itself
# (2 x output elements x contracted size; bytes: operands and result), with the loops'
# known trip counts; ``program_cost`` adds what the analysis left out.

_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4,
          "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16,
          "s4": 0.5, "u4": 0.5, "s2": 0.25, "u2": 0.25}
_ARRAY = re.compile(r"(\w+)\[([\d,]*)\]")
_CALLEE = re.compile(r"\b(calls|to_apply|body|condition|branch_computations|true_computation|"
                     r"false_computation)=(\{[^}]*\}|%[^\s,]+)")
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
_DOT = re.compile(r" = (\S+) dot\(%([^\s,)]+), %([^\s,)]+)\)[^\n]*?"
                  r"lhs_contracting_dims=\{([\d,]*)\}")
_LIB = re.compile(r" = (\([^\n]*?\)(?= )|\S+) custom-call\(%([^\s,)]+), %([^\s,)]+)[^\n]*?"
                  r'custom_call_target="[^"]*(?:gemm|matmul)[^"]*"[^\n]*?'
                  r'"lhs_contracting_dimensions":\[([^\]]*)\]')
_CALL_KEYS = ("calls=", "to_apply=", "body=", "branch_computations=", "true_computation=",
              "false_computation=")
_OPERAND = re.compile(r"%([^\s,)]+)")


@dataclasses.dataclass(slots=True)
class MatmulCounts:
    """Matrix products of a compiled module, counted from its HLO text (per device).

    Attributes:
        dot_flops / dot_bytes: XLA ``dot`` instructions, each counted once (as XLA's cost
            analysis counts them).
        dot_flops_looped / dot_bytes_looped: the same, times their loops' trip counts.
        gemm_flops / gemm_bytes: library calls (cuBLAS custom calls), each counted once.
        gemm_flops_looped / gemm_bytes_looped: the same, times their loops' trip counts.
    """

    dot_flops: float = 0.0
    dot_bytes: float = 0.0
    dot_flops_looped: float = 0.0
    dot_bytes_looped: float = 0.0
    gemm_flops: float = 0.0
    gemm_bytes: float = 0.0
    gemm_flops_looped: float = 0.0
    gemm_bytes_looped: float = 0.0

    def add(self, gemm: bool, flops: float, nbytes: float, runs: int) -> None:
        """One product of ``flops`` and ``nbytes``, run ``runs`` times per program call."""
        if gemm:
            self.gemm_flops += flops
            self.gemm_bytes += nbytes
            self.gemm_flops_looped += runs * flops
            self.gemm_bytes_looped += runs * nbytes
        else:
            self.dot_flops += flops
            self.dot_bytes += nbytes
            self.dot_flops_looped += runs * flops
            self.dot_bytes_looped += runs * nbytes


def _arrays(shape_text: str) -> list[tuple[str, list[int]]]:
    return [(dt, [int(d) for d in dims.split(",") if d])
            for dt, dims in _ARRAY.findall(shape_text)]


def _nbytes(arrays: list[tuple[str, list[int]]]) -> float:
    # the 8-bit floats (f8e4m3fn, f8e5m2, ...) take a byte; an unknown type counts 4
    return float(sum(_BYTES.get(dt, 1 if dt.startswith("f8") else 4) * math.prod(dims)
                     for dt, dims in arrays))


def _runs(entry: str, calls: dict[str, list[tuple[str, int]]]) -> dict[str, int]:
    """How often each computation runs per call of ``entry`` (the call graph is a DAG:
    the sum over its call sites)."""
    order: list[str] = []
    seen = {entry}
    stack = [(entry, iter(calls.get(entry, ())))]
    while stack:  # post-order without recursion (deep nestings)
        comp, it = stack[-1]
        for callee, _k in it:
            if callee not in seen:
                seen.add(callee)
                stack.append((callee, iter(calls.get(callee, ()))))
                break
        else:
            stack.pop()
            order.append(comp)
    runs = {entry: 1}
    for comp in reversed(order):  # callers before callees
        for callee, k in calls.get(comp, ()):
            runs[callee] = runs.get(callee, 0) + runs.get(comp, 0) * k
    return runs


def matmul_counts(hlo_text: str) -> MatmulCounts:
    """Count the matrix products of a compiled module's HLO text (``compiled.as_text()``).

    A product's FLOPs are 2 x its output elements x the product of the left operand's
    contracting dimensions; its bytes are its operands' and its (first) result's. A product
    inside a ``while`` body with a known trip count is multiplied by it (nested loops
    multiply); fusions, calls and conditional branches count once per call site. Only the
    computations that hold a product or a call are read line by line.

    Example:
        >>> text = chr(10).join([
        ...     "ENTRY %main (a: f32[8,4], b: f32[4,2]) -> f32[8,2] {",
        ...     "  %a = f32[8,4]{1,0} parameter(0)",
        ...     "  %b = f32[4,2]{1,0} parameter(1)",
        ...     "  ROOT %d = f32[8,2]{1,0} dot(%a, %b), lhs_contracting_dims={1}, "
        ...     "rhs_contracting_dims={0}",
        ...     "}"])
        >>> matmul_counts(text).dot_flops == 2 * 8 * 2 * 4
        True
    """
    counts = MatmulCounts()
    comps: dict[str, str] = {}  # computation -> its text (HLO separates them by blank lines)
    entry = None
    for chunk in hlo_text.split("\n\n"):
        chunk = chunk.strip("\n")
        head = chunk[:chunk.find("\n")] if "\n" in chunk else chunk
        if not head.endswith("{") or "%" not in head:
            continue
        name = head[head.index("%") + 1:].split(None, 1)[0].split("(", 1)[0]
        comps[name] = chunk
        if head.startswith("ENTRY"):
            entry = name
    if entry is None:
        return counts
    if " while(" not in hlo_text:  # no loop: every computation runs once per call site
        runs = dict.fromkeys(comps, 1)
    else:
        runs = _runs(entry, _calls(comps))
    for name, chunk in comps.items():
        n = runs.get(name, 0)
        if not n:
            continue
        for gemm, pattern, token in ((False, _DOT, " dot("), (True, _LIB, "custom-call(")):
            if token not in chunk:
                continue
            for m in pattern.finditer(chunk):
                shape, lhs_name, rhs_name, dims = m.groups()
                lhs = _arrays(_shape_of(chunk, lhs_name))
                result = _arrays(shape)[:1]  # a library call's second result is its workspace
                if not lhs or not result:
                    continue
                try:
                    contracted = math.prod(lhs[0][1][int(d.strip('" '))]
                                           for d in dims.split(",") if d.strip('" '))
                except (IndexError, ValueError):
                    continue
                rhs = _arrays(_shape_of(chunk, rhs_name))
                nbytes = _nbytes(result) + _nbytes(lhs) + _nbytes(rhs)
                counts.add(gemm, 2.0 * math.prod(result[0][1]) * contracted, nbytes, n)
    return counts


def _calls(comps: dict[str, str]) -> dict[str, list[tuple[str, int]]]:
    """Each computation's callees with how often one run of it runs them (a ``while``
    body: its known trip count; everything else once per call site)."""
    calls: dict[str, list[tuple[str, int]]] = {}
    for name, chunk in comps.items():
        if not any(k in chunk for k in _CALL_KEYS):
            continue
        out = calls[name] = []
        for line in chunk.split("\n"):
            if "=%" not in line and "={%" not in line:
                continue
            found = _CALLEE.findall(line)
            trip = 1
            if " while(" in line:
                t = _TRIP.search(line)
                trip = int(t.group(1)) if t else 1
            for key, val in found:
                for callee in _OPERAND.findall(val):
                    out.append((callee.rstrip("}"), trip if key in ("body", "condition") else 1))
    return calls


def _shape_of(chunk: str, name: str) -> str:
    """The shape text of instruction ``%name`` in one computation's text ('' if absent)."""
    i = chunk.find("%" + name + " = ")
    if i < 0:
        return ""
    return chunk[i + len(name) + 4:].split(" ", 1)[0]


def _hlo_text(compiled: Any) -> str:
    """The compiled (per-device) module's text without op metadata: about 2/3 of the
    characters, printed and read in about half the time of ``compiled.as_text()``, which
    is the fallback where jaxlib's print options are not there."""
    try:
        # jaxlib 0.10-0.11: the module's printer and its options (a stub-less extension
        # module: imported by name, typed Any)
        _hlo = importlib.import_module("jaxlib._hlo")

        opts = _hlo.HloPrintOptions()
        opts.print_metadata = False
        (module,) = compiled.runtime_executable().hlo_modules()
        return module.to_string(opts)
    except Exception:  # noqa: BLE001 - another jaxlib, several modules: the public text
        return compiled.as_text()


def _corrected(flops: float, nbytes: float, counts: MatmulCounts) -> tuple[float, float]:
    """XLA's ``flops`` and ``bytes`` with the products it left out added: loop iterations
    beyond the first, and library calls where the analysis holds less than the products
    counted once (it left them out; a later XLA that counts them is not counted twice)."""
    flops += counts.dot_flops_looped - counts.dot_flops
    nbytes += counts.dot_bytes_looped - counts.dot_bytes
    if counts.gemm_flops:
        if flops < counts.dot_flops_looped + counts.gemm_flops:  # the calls are not in it
            flops += counts.gemm_flops_looped
            nbytes += counts.gemm_bytes_looped
        else:
            flops += counts.gemm_flops_looped - counts.gemm_flops
            nbytes += counts.gemm_bytes_looped - counts.gemm_bytes
    return flops, nbytes


def program_cost(fn: Any, *args: Any, **kwargs: Any) -> ProgramCost:
    """XLA's cost analysis of the jitted ``fn`` called with ``args``, per device, with the
    matrix products it leaves out added (:func:`matmul_counts`).

    Args:
        fn: a ``jax.jit``-ed function (anything with ``.lower(*args, **kwargs)``).
        *args, **kwargs: the call's arguments (arrays, or ``jax.ShapeDtypeStruct``; donated
            arrays are fine: only shapes, dtypes and shardings are read).

    Returns:
        A :class:`~goodput_jax.measure.productivity.ProgramCost` (``peak`` unset).

    Raises:
        TypeError: ``fn`` has no ``lower`` method (it is not jitted).
        ValueError: XLA gave no cost analysis for the program.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> program_cost(jax.jit(jnp.sin), jnp.ones(8)).transcendentals
        8.0
    """
    lower = getattr(fn, "lower", None)
    if not callable(lower):
        raise TypeError(f"fn ({fn!r}) must be a jax.jit-ed function (it has no .lower)")
    compiled = lower(*args, **kwargs).compile()
    ca = _first(compiled.cost_analysis())
    if not any(k in ca for k in ("flops", "transcendentals", "bytes accessed")):
        # (XLA leaves out a count that is zero: jnp.sin has no 'flops')
        raise ValueError(f"XLA gave no cost analysis for {fn!r}: {ca!r}")
    flops = max(float(ca.get("flops", 0.0)), 0.0)
    nbytes = max(float(ca.get("bytes accessed", 0.0)), 0.0)
    text = _hlo_text(compiled)
    if " while(" in text or "custom-call(" in text:  # else XLA's figures miss no product
        flops, nbytes = _corrected(flops, nbytes, matmul_counts(text))
    devices = _devices_of(args, kwargs)
    name = getattr(fn, "__name__", None) or repr(fn)
    return ProgramCost(
        name=f"jit({name})", flops=flops,
        transcendentals=max(float(ca.get("transcendentals", 0.0)), 0.0),
        bytes_accessed=nbytes, device_kind=str(devices[0].device_kind), num_devices=len(devices))


def device_peak(device: Any = None, *, table: dict[str, DevicePeak] | None = None,
                measure: bool = True) -> DevicePeak | None:
    """The peak of ``device`` (default: the first device): the table's, else measured.

    Args:
        device: a ``jax.Device`` or a ``device_kind`` string.
        table: entries that override or extend the published table (see
            :func:`~goodput_jax.measure.productivity.lookup_peak`).
        measure: run :func:`measured_peak` when the kind is not in the table (else None).

    Example:
        >>> device_peak("TPU v4").flops_per_s
        275000000000000.0
    """
    if isinstance(device, str):
        return lookup_peak(device, table)
    import jax

    dev = device if device is not None else jax.devices()[0]
    hit = lookup_peak(str(dev.device_kind), table)
    if hit is not None or not measure:
        return hit
    return measured_peak(dev)
