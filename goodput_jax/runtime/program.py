"""A compiled step's cost from XLA, and the device's peak: the runtime side of program goodput.

* :func:`program_cost`: FLOPs, transcendentals and bytes accessed of ``fn`` at ``args``,
  per device (the partitioned program's numbers: sharding accounted for), from
  ``fn.lower(*args).compile().cost_analysis()``. For a function already called with
  these shapes, lowering and compiling hit JAX's caches: no compilation is added
  (``benchmarks/step_recorder_bench.py`` counts them) and the read takes well under a
  millisecond.
* :func:`device_peak`: the device's peak FLOP/s and memory bandwidth, from the published
  table (:data:`goodput_jax.measure.productivity.PEAK_TABLE`, overridable), or, on a CPU
  or a device not in the table, :func:`measured_peak`: a short matmul and copy probe, run
  once per process and device kind (cached), labelled ``'measured'``.

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

import logging
import math
import threading
import time
from typing import Any

from goodput_jax.measure.productivity import DevicePeak, ProgramCost, lookup_peak

logger = logging.getLogger(__name__)

__all__ = ["device_peak", "measured_peak", "program_cost"]

_PEAKS: dict[str, DevicePeak] = {}
_PEAK_LOCK = threading.Lock()


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


def program_cost(fn: Any, *args: Any, **kwargs: Any) -> ProgramCost:
    """XLA's cost analysis of the jitted ``fn`` called with ``args``, per device.

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
    devices = _devices_of(args, kwargs)
    name = getattr(fn, "__name__", None) or repr(fn)
    return ProgramCost(
        name=f"jit({name})", flops=max(float(ca.get("flops", 0.0)), 0.0),
        transcendentals=max(float(ca.get("transcendentals", 0.0)), 0.0),
        bytes_accessed=max(float(ca.get("bytes accessed", 0.0)), 0.0),
        device_kind=str(devices[0].device_kind), num_devices=len(devices))


def _best(fn: Any, *args: Any, reps: int) -> float:
    fn(*args).block_until_ready()
    best = math.inf
    for _ in range(reps):
        t = time.perf_counter()
        fn(*args).block_until_ready()
        best = min(best, time.perf_counter() - t)
    return best


def _probe(device: Any, out: list) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    cpu = device.platform == "cpu"
    dtype = jnp.float32 if cpu else jnp.bfloat16
    mm = jax.jit(lambda a, b: a @ b)
    flops = 0.0
    for n in ((384, 768) if cpu else (4096, 8192)):  # the best of two sizes, 5 runs each
        a = jax.device_put(jnp.asarray(np.random.default_rng(0).standard_normal((n, n)), dtype),
                           device)
        flops = max(flops, 2.0 * n ** 3 / _best(mm, a, a, reps=5))
    m = (8 if cpu else 256) * 2 ** 20  # float32 elements: 32 MiB (CPU) / 1 GiB
    scale = jax.jit(lambda x: x * 1.000001)
    x = jax.device_put(jnp.ones((m,), jnp.float32), device)
    out.append((flops, 2.0 * 4 * m / _best(scale, x, reps=3)))


def measured_peak(device: Any = None) -> DevicePeak:
    """A measured peak for ``device`` (default: the first device), cached per process.

    Square matmuls (384² and 768² float32 on a CPU, 4096² and 8192² bfloat16 elsewhere;
    the best of 5 runs of each) give FLOP/s, a scale of a 32 MiB (CPU) / 1 GiB array
    (read + write; best of 3) gives bytes/s. It runs on its own thread, so an attached
    recorder does not count its compiles as the training thread's (0.3-2 s on a 2-core CPU,
    once per process; longer on a loaded machine).

    Example:
        >>> measured_peak().source
        'measured'
    """
    import jax

    dev = device if device is not None else jax.devices()[0]
    kind = str(dev.device_kind)
    with _PEAK_LOCK:
        hit = _PEAKS.get(kind)
        if hit is not None:
            return hit
        out: list = []
        th = threading.Thread(target=_probe, args=(dev, out), name="goodput-peak-probe",
                              daemon=True)
        th.start()
        th.join()
        if not out:
            raise RuntimeError(f"the peak probe on {kind!r} failed (see the log)")
        peak = _PEAKS[kind] = DevicePeak(kind, out[0][0], out[0][1], "measured")
        return peak


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
