"""The device's measured peak: probed once per machine off the training thread, cached on
disk per device kind, with its spread.

A device the published table (:data:`goodput_jax.measure.productivity.PEAK_TABLE`) does not
know, a CPU first of all, gets a measured peak: the best of several matmul shapes (FLOP/s)
and of several streaming shapes (bytes/s), in interleaved rounds so that both rates see the same
load. The best rate is the peak; ``1 - median / best`` of the best shape's runs is its
spread (:class:`~goodput_jax.measure.productivity.DevicePeak` ``flops_spread`` /
``bytes_spread``), ``1 - lowest / highest`` of the rounds' ridges the ridge's
(``ridge_spread``). The peak is only a bound where no step beats it: the calculator raises
it to what a faster step reached (``goodput_jax.measure.roofline``).

Where it lives:

* this process: one peak per cache file and device kind (``measured_peak() is
  measured_peak()``);
* the cache file, ``peaks.json`` under :func:`peak_cache_dir` (``$GOODPUT_JAX_CACHE_DIR``,
  else ``$XDG_CACHE_HOME/goodput_jax``, else ``~/.cache/goodput_jax``), one entry per device
  kind and host, each rate the best any probe on this machine measured: a later process
  reads it (well under 1 ms) instead of probing;
* the probe itself runs on its own thread (:func:`start_peak_probe`): a caller that must
  not wait (``StepRecorder``'s first step) asks :func:`peak_or_later`, which answers from
  the caches or has the probe call it back when it ends, so the probe's time lands in no
  bucket of the job.

Example:
    >>> measured_peak().source  # doctest: +SKIP
    'measured'
    >>> CACHE_ENV
    'GOODPUT_JAX_CACHE_DIR'
"""

from __future__ import annotations

import json
import logging
import math
import os
import platform
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from goodput_jax.measure.productivity import DevicePeak, lookup_peak

logger = logging.getLogger(__name__)

__all__ = ["CACHE_ENV", "PEAK_PROBE", "PeakProbe", "cached_peak", "measured_peak", "peak_cache_dir",
           "peak_or_later", "prefetch_peak", "remember_peak", "start_peak_probe",
           "wait_for_probes"]

#: the environment variable that moves the peak cache (tests point it at a tmp dir)
CACHE_ENV = "GOODPUT_JAX_CACHE_DIR"
#: the custom badput bucket of a wait for the probe (``StepRecorder.close()`` of a job shorter
#: than the first probe on its machine); the probe itself is booked nowhere
PEAK_PROBE = "peak probe"
_FILE = "peaks.json"

_LOCK = threading.Lock()
_PEAKS: dict[tuple[str, str], DevicePeak] = {}  # (cache file, key) -> peak
_PROBES: dict[tuple[str, str], PeakProbe] = {}  # (cache file, key) -> the probe (running or done)


def peak_cache_dir() -> Path:
    """The package's per-machine cache directory (the measured peaks' ``peaks.json``, the
    step-time fit's compiled program in ``fit-xla/``): ``$GOODPUT_JAX_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/goodput_jax``, else ``~/.cache/goodput_jax``.

    Example:
        >>> peak_cache_dir().name in ("goodput_jax",) or "GOODPUT_JAX_CACHE_DIR" in os.environ
        True
    """
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "goodput_jax" if xdg else Path.home() / ".cache" / "goodput_jax"


def _device(device: Any) -> Any:
    if device is not None:
        return device
    import jax

    return jax.devices()[0]


def _where(dev: Any) -> tuple[str, str]:
    """(the cache file, the device's key in it: its kind and this host)."""
    return (str(peak_cache_dir() / _FILE), f"{dev.device_kind}@{platform.node()}")


def _read(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        peaks = data.get("peaks") if isinstance(data, dict) else None
        return peaks if isinstance(peaks, dict) else {}
    except (OSError, ValueError):
        return {}


def _from_file(path: str, key: str, kind: str) -> DevicePeak | None:
    e = _read(path).get(key)
    if not isinstance(e, dict):
        return None
    try:
        return DevicePeak(kind, e["flops_per_s"], e["bytes_per_s"], "measured",
                          e.get("flops_spread", 0.0), e.get("bytes_spread", 0.0),
                          e.get("ridge_spread", 0.0))
    except (KeyError, TypeError, ValueError):
        return None


def _write(path: str, key: str, peak: DevicePeak, seconds: float, probed: bool = True
           ) -> DevicePeak:
    """Merge ``peak`` into the cache file (each rate the best seen; the rates' spreads of the
    newest probe; the ridge's spread covering every ridge the merge saw) and return the
    merged peak; a cache that cannot be written is skipped."""
    old = _from_file(path, key, peak.device_kind)
    if old is not None:
        fl, bw = max(peak.flops_per_s, old.flops_per_s), max(peak.bytes_per_s, old.bytes_per_s)
        # the merged rates may come from two probes at different loads: the ridge's spread
        # covers the new probe's ridge, the old one's and the merged one's
        ridges = (peak.ridge_point, old.ridge_point, fl / bw)
        keep = (1.0 - max(peak.ridge_spread, old.ridge_spread)) * min(ridges) / max(ridges)
        peak = DevicePeak(peak.device_kind, fl, bw, "measured", peak.flops_spread,
                          peak.bytes_spread, min(1.0 - keep, 0.99))
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        peaks = _read(path)
        e = peaks.get(key)
        prev: dict = e if isinstance(e, dict) else {}
        try:
            n = int(prev.get("probes", 0))
        except (TypeError, ValueError):  # a damaged entry: counted afresh
            n = 0
        peaks[key] = {"flops_per_s": peak.flops_per_s, "bytes_per_s": peak.bytes_per_s,
                      "flops_spread": peak.flops_spread, "bytes_spread": peak.bytes_spread,
                      "ridge_spread": peak.ridge_spread, "probes": n + probed,
                      "probe_s": round(seconds, 4) if probed else prev.get("probe_s", 0.0),
                      "updated": time.time()}
        fd, tmp = tempfile.mkstemp(prefix=".peaks-", dir=os.path.dirname(path))
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"version": 1, "peaks": peaks}, f, indent=1, sort_keys=True)
        os.replace(tmp, path)  # atomic: a reader sees the old file or the new one
    except OSError as e:
        logger.info("goodput runtime: the peak cache %s was not written (%s)", path, e)
    return peak


# ---------------------------------------------------------------------------------- the probe
def _timed(fn: Any, *args: Any) -> float:
    """Seconds of one run of ``fn(*args)``."""
    t = time.perf_counter()
    fn(*args).block_until_ready()
    return time.perf_counter() - t


def _best_of(rates: list[list[float]]) -> tuple[float, float]:
    """(the best rate, ``1 - median / best`` of the runs of the shape that gave it)."""
    best_runs = max(rates, key=max)
    best = max(best_runs)
    ordered = sorted(best_runs)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])
    return best, min(max(1.0 - median / best, 0.0), 0.99)


def _summary(kind: str, flops: list[list[float]], streams: list[list[float]]) -> DevicePeak:
    """The peak from the probe's rates, ``flops[shape][round]`` (FLOP/s) and
    ``streams[shape][round]`` (bytes/s), each round run under the same load.

    Each rate is the best of all its shapes and rounds with its spread (:func:`_best_of`).
    The ridge's spread is ``1 - lowest / highest`` of the ridges each round measured (its
    best matmul over its best stream) and the peak's own: under a changing load the FLOP
    rate and the bandwidth are not depressed alike, so one probe's ridge can sit several
    times from the next one's; this says by how much it moved while the probe ran.
    """
    f, fs = _best_of(flops)
    b, bs = _best_of(streams)
    rounds = min(len(r) for r in flops + streams)
    ridges = [f / b] + [max(r[i] for r in flops) / max(r[i] for r in streams)
                        for i in range(rounds)]
    rs = min(max(1.0 - min(ridges) / max(ridges), 0.0), 0.99)
    return DevicePeak(kind, f, b, "measured", fs, bs, rs)


def _probe(dev: Any, rounds: int = 5, timer: Callable[..., float] = _timed) -> DevicePeak:
    """Run the probe on ``dev`` (this thread): ``rounds`` rounds, each one run of every
    matmul shape and then of every stream, so both rates are measured under the same load
    (a probe that ran its matmuls first and its streams after took them at different loads
    on a busy machine: ridges 19-33 FLOP/byte in three probes a minute apart).
    ``timer(fn, *args)`` times one run (tests give a scripted one)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    cpu = dev.platform == "cpu"
    dtype = jnp.float32 if cpu else jnp.bfloat16
    mm = jax.jit(lambda a, b: a @ b)
    scale = jax.jit(lambda x: x * 1.000001)  # reads and writes each element: 2 x 4 bytes
    add = jax.jit(lambda x, y: x + y)  # two reads and a write: 3 x 4 bytes
    rng = np.random.default_rng(0)
    mats = []  # (args, FLOPs per run)
    for n in ((256, 512, 768, 1024) if cpu else (2048, 4096, 8192)):
        a = jax.device_put(jnp.asarray(rng.standard_normal((n, n)), dtype), dev)
        mats.append(((a, a), 2.0 * n ** 3))
    moves = []  # (fn, args, bytes per run)
    for m in ((8, 16) if cpu else (128, 256)):  # M float32 elements: 32/64 MiB, 0.5/1 GiB
        x = jax.device_put(jnp.ones((m * 2 ** 20,), jnp.float32), dev)
        y = jax.device_put(jnp.full((m * 2 ** 20,), 0.5, jnp.float32), dev)
        nbytes = 4.0 * m * 2 ** 20
        moves += [(scale, (x,), 2 * nbytes), (add, (x, y), 3 * nbytes)]
    for args, _ in mats:  # warm-ups (the compiles)
        mm(*args).block_until_ready()
    for fn, args, _ in moves:
        fn(*args).block_until_ready()
    flops: list[list[float]] = [[] for _ in mats]
    streams: list[list[float]] = [[] for _ in moves]
    for _ in range(rounds):
        for i, (args, work) in enumerate(mats):
            flops[i].append(work / timer(mm, *args))
        for i, (fn, args, nbytes) in enumerate(moves):
            streams[i].append(nbytes / timer(fn, *args))
    return _summary(str(dev.device_kind), flops, streams)


class PeakProbe:
    """One run of the peak probe on its own thread (see :func:`start_peak_probe`).

    Attributes:
        device_kind: the device's kind.
        seconds: how long the probe ran (NaN until it ends).

    Example:
        >>> probe = start_peak_probe()  # doctest: +SKIP
        >>> probe.result().source  # doctest: +SKIP
        'measured'
    """

    def __init__(self, dev: Any, where: tuple[str, str]):
        self.device_kind = str(dev.device_kind)
        self.seconds = math.nan
        self._where = where
        self._done = threading.Event()
        self._peak: DevicePeak | None = None
        self._ended = False
        self._callbacks: list[Callable[[DevicePeak], None]] = []
        self._thread = threading.Thread(target=self._run, args=(dev,), daemon=True,
                                        name="goodput-peak-probe")

    def _run(self, dev: Any) -> None:
        t = time.perf_counter()
        peak = None
        try:
            peak = _probe(dev)
        except Exception:  # noqa: BLE001 - a failed probe leaves the peak unknown
            logger.warning("goodput runtime: the peak probe on %r failed", self.device_kind,
                           exc_info=True)
        self.seconds = time.perf_counter() - t
        if peak is not None:
            peak = _write(*self._where, peak, self.seconds)
        with _LOCK:
            if peak is not None:
                _PEAKS[self._where] = peak
            self._peak = peak
            self._ended = True  # a callback registered from now on is called at once
            callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            if peak is None:
                break
            try:
                cb(peak)
            except Exception:  # noqa: BLE001 - one caller's failure is not the probe's
                logger.warning("goodput runtime: a peak callback failed", exc_info=True)
        self._done.set()  # after the callbacks: a wait for the probe covers what they record

    def done(self) -> bool:
        """Whether the probe has ended (its callbacks called)."""
        return self._done.is_set()

    def result(self, timeout: float | None = None) -> DevicePeak:
        """The measured peak, waiting for the probe (at most ``timeout`` seconds).

        Raises:
            TimeoutError: the probe did not end within ``timeout``.
            RuntimeError: the probe failed (the log says why).
        """
        if not self._done.wait(timeout):
            raise TimeoutError(f"the peak probe on {self.device_kind!r} did not end within "
                               f"{timeout} s")
        if self._peak is None:
            raise RuntimeError(f"the peak probe on {self.device_kind!r} failed (see the log)")
        return self._peak

    def then(self, callback: Callable[[DevicePeak], None]) -> None:
        """Call ``callback(peak)`` when the probe ends (on the probe's thread; now, on this
        one, if it has ended); not at all if it failed."""
        with _LOCK:
            if not self._ended:
                self._callbacks.append(callback)
                return
            peak = self._peak
        if peak is not None:
            callback(peak)


def _known(where: tuple[str, str], kind: str) -> DevicePeak | None:
    """The peak of this process or of the cache file (caller holds ``_LOCK``)."""
    hit = _PEAKS.get(where)
    if hit is None:
        hit = _from_file(where[0], where[1], kind)
        if hit is not None:
            _PEAKS[where] = hit
    return hit


def cached_peak(device: Any = None) -> DevicePeak | None:
    """The measured peak of ``device`` (default: the first device) from this process or the
    cache file, without probing (None when neither has it).

    Example:
        >>> cached_peak() == measured_peak()  # doctest: +SKIP
        True
    """
    dev = _device(device)
    where = _where(dev)
    with _LOCK:
        return _known(where, str(dev.device_kind))


def start_peak_probe(device: Any = None, *, refresh: bool = False) -> PeakProbe:
    """Start the probe of ``device`` (default: the first device) on its own thread and return
    it; the one already started in this process (for this cache file and kind) when there
    is one. ``refresh=True`` probes again even when the peak is cached (the cache keeps the
    best rates of both probes).

    Example:
        >>> start_peak_probe().result().source  # doctest: +SKIP
        'measured'
    """
    dev = _device(device)
    where = _where(dev)
    with _LOCK:
        probe = _PROBES.get(where)
        if probe is not None and not probe._ended:
            return probe
        if probe is not None and probe._peak is not None and not refresh:
            return probe
        probe = _PROBES[where] = PeakProbe(dev, where)
    probe._thread.start()
    return probe


def peak_or_later(device: Any, then: Callable[[DevicePeak], None]) -> DevicePeak | None:
    """The measured peak of ``device`` now when it is known (this process or the cache file),
    else None: the probe runs on its own thread (started unless it runs) and calls
    ``then(peak)`` from it when it ends. The caller never waits for a probe.

    Example:
        >>> got = []
        >>> peak_or_later(None, got.append) is not None or got == []  # doctest: +SKIP
        True
    """
    dev = _device(device)
    where = _where(dev)
    with _LOCK:
        hit = _known(where, str(dev.device_kind))
    if hit is not None:
        return hit
    start_peak_probe(dev).then(then)
    return None


def prefetch_peak(device: Any = None, *, table: dict[str, DevicePeak] | None = None
                  ) -> PeakProbe | None:
    """Start the probe now, before the job's first step, unless the table or a cache knows
    the device (then None): ``StepRecorder`` calls it when it is made.

    Example:
        >>> prefetch_peak("TPU v4") is None
        True
    """
    if isinstance(device, str):
        return None  # a kind, not a device: nothing to probe
    try:
        dev = _device(device)
        if lookup_peak(str(dev.device_kind), table) is not None or cached_peak(dev) is not None:
            return None
        return start_peak_probe(dev)
    except Exception:  # noqa: BLE001 - never break the caller: the first step asks again
        logger.warning("goodput runtime: the peak probe could not start", exc_info=True)
        return None


def wait_for_probes(timeout: float | None = None) -> bool:
    """Wait until every probe this process started has ended and called back (at most
    ``timeout`` seconds in all); True when none is left running. ``StepRecorder.close()``
    calls it when a program's cost still waits for its peak (a job shorter than the first
    probe on its machine), so the cost is recorded before the job ends.

    Example:
        >>> wait_for_probes(0.0) in (True, False)
        True
    """
    end = None if timeout is None else time.monotonic() + timeout
    with _LOCK:
        running = [p for p in _PROBES.values() if not p.done()]
    for p in running:
        left = None if end is None else max(end - time.monotonic(), 0.0)
        if not p._done.wait(left):
            return False
    return True


def remember_peak(peak: DevicePeak, device: Any = None) -> DevicePeak:
    """Keep in the cache a peak this machine's device reached: a peak the calculator raised
    because a step beat it (``ProgramStats.peak`` where ``raised_from`` is set), so the
    next job starts from it. Each rate in the cache stays the best seen; returns the merged
    peak (also this process's from now on).

    Raises:
        ValueError: ``peak`` is for another device kind.

    Example:
        >>> from goodput_jax.measure.productivity import DevicePeak
        >>> remember_peak(DevicePeak("TPU v4", 1.0, 1.0))
        Traceback (most recent call last):
        ...
        ValueError: peak ('TPU v4') is not for this device ('cpu')
    """
    dev = _device(device)
    kind = str(dev.device_kind)
    if peak.device_kind != kind:
        raise ValueError(f"peak ({peak.device_kind!r}) is not for this device ({kind!r})")
    where = _where(dev)
    with _LOCK:
        old = _known(where, kind)
    if old is not None:  # the rates' spreads stay those of the last probe
        peak = DevicePeak(kind, peak.flops_per_s, peak.bytes_per_s, "measured",
                          old.flops_spread, old.bytes_spread,
                          max(old.ridge_spread, peak.ridge_spread))
    merged = _write(*where, DevicePeak(kind, peak.flops_per_s, peak.bytes_per_s, "measured",
                                       peak.flops_spread, peak.bytes_spread,
                                       peak.ridge_spread), 0.0, probed=False)
    with _LOCK:
        _PEAKS[where] = merged
    return merged


def measured_peak(device: Any = None) -> DevicePeak:
    """A measured peak for ``device`` (default: the first device): this process's, else the
    cache file's, else the probe's, waited for (it runs on its own thread, so an attached
    recorder does not count its compiles as the training thread's).

    The probe: square matmuls (256² to 1024² float32 on a CPU, 2048² to 8192² bfloat16
    elsewhere) give FLOP/s; a scale and an add of 32 and 64 MiB arrays on a CPU (0.5 and 1
    GiB elsewhere) give bytes/s; 5 rounds, each one run of every matmul and then every
    stream, so both rates see the same load. The best rate of each is the peak, ``1 -
    median / best`` of its shape's runs its spread, ``1 - lowest / highest`` of the rounds'
    ridges the ridge's spread. About 1-2 s on a quiet 2-core CPU, once per machine (then
    the cache file answers).

    Raises:
        RuntimeError: the probe failed.

    Example:
        >>> measured_peak().source  # doctest: +SKIP
        'measured'
    """
    dev = _device(device)
    where = _where(dev)
    with _LOCK:
        hit = _known(where, str(dev.device_kind))
    if hit is not None:
        return hit
    return start_peak_probe(dev).result()
