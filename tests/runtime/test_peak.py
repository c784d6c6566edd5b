"""Issue 44, items 2 and 3: the measured peak is the best of several shapes and runs, with
its spread, cached on disk per device kind (a later process reads it instead of probing),
and a caller that must not wait (the first step) is never held by the probe.

Every test points the cache at its own tmp dir (``GOODPUT_JAX_CACHE_DIR``).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import textwrap
import threading

import jax
import pytest

from goodput_jax.runtime import peak as peak_mod
from goodput_jax.runtime.peak import (CACHE_ENV, cached_peak, measured_peak, peak_cache_dir,
                                      peak_or_later, prefetch_peak, start_peak_probe)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_probe_is_cached_on_disk_per_device_kind_with_its_spread(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    assert peak_cache_dir() == tmp_path / "cache"
    assert cached_peak() is None  # never probes
    p = measured_peak()
    assert p.source == "measured" and p.flops_per_s > 1e8 and p.bytes_per_s > 1e7
    assert 0.0 <= p.flops_spread < 1.0 and 0.0 <= p.bytes_spread < 1.0
    assert measured_peak() is p and cached_peak() is p
    kind = jax.devices()[0].device_kind
    entry = json.loads((tmp_path / "cache" / "peaks.json").read_text())["peaks"]
    assert list(entry) == [f"{kind}@{platform.node()}"]
    (e,) = entry.values()
    assert e["flops_per_s"] == p.flops_per_s and e["probes"] == 1 and e["probe_s"] > 0
    # a later process reads the file: cached_peak (which never probes) has it at once
    script = tmp_path / "read.py"
    script.write_text(textwrap.dedent("""
        from goodput_jax.runtime.peak import cached_peak
        p = cached_peak()
        print(p.flops_per_s, p.bytes_per_s, p.flops_spread)
        """))
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=180, env=env, check=False)
    assert r.returncode == 0, r.stderr
    assert [float(x) for x in r.stdout.split()] == [p.flops_per_s, p.bytes_per_s, p.flops_spread]
    # each rate in the file is the best any probe measured: a probe again keeps the better
    data = json.loads((tmp_path / "cache" / "peaks.json").read_text())
    (key,) = data["peaks"]
    data["peaks"][key]["flops_per_s"] = 1e15
    (tmp_path / "cache" / "peaks.json").write_text(json.dumps(data))
    again = start_peak_probe(refresh=True).result(timeout=300)
    assert again.flops_per_s == 1e15 and again.bytes_per_s >= min(p.bytes_per_s, again.bytes_per_s)
    assert json.loads((tmp_path / "cache" / "peaks.json").read_text())["peaks"][key]["probes"] == 2
    assert measured_peak() is again
    # a peak a step raised is kept for the next job (each rate the best seen; no probe)
    from goodput_jax.measure.productivity import DevicePeak
    from goodput_jax.runtime.peak import remember_peak

    kept = remember_peak(DevicePeak(kind, 1e9, again.bytes_per_s * 2, "measured"))
    assert kept.flops_per_s == 1e15 and kept.bytes_per_s == again.bytes_per_s * 2
    assert kept.flops_spread == again.flops_spread and measured_peak() is kept
    e = json.loads((tmp_path / "cache" / "peaks.json").read_text())["peaks"][key]
    assert e["probes"] == 2 and e["bytes_per_s"] == kept.bytes_per_s
    with pytest.raises(ValueError, match="is not for this device"):
        remember_peak(DevicePeak("TPU v4", 1.0, 1.0))
    # a device the table knows, or a kind string, is never probed
    assert prefetch_peak("TPU v4") is None and prefetch_peak() is None  # (cached now)


def test_a_caller_that_must_not_wait_is_called_back(tmp_path, monkeypatch):
    """peak_or_later answers None at once while the probe runs (here held until the test
    lets it go, so the order is certain), and calls back with the peak when it ends; a
    cache that cannot be written (its dir is a file) costs nothing but the cache."""
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("")
    monkeypatch.setenv(CACHE_ENV, str(blocked))
    gate = threading.Event()
    real = peak_mod._probe

    def held(dev):
        assert gate.wait(300)
        return real(dev)

    monkeypatch.setattr(peak_mod, "_probe", held)
    got = []
    assert peak_or_later(None, got.append) is None
    probe = start_peak_probe()  # the one running
    assert not probe.done() and got == []
    assert peak_or_later(None, got.append) is None  # asked again: the same probe
    gate.set()
    p = probe.result(timeout=300)
    assert got == [p, p] and p.source == "measured"
    assert peak_or_later(None, got.append) is p and len(got) == 2  # known now: no callback
    assert not (blocked / "peaks.json").exists()
    with pytest.raises(TimeoutError):
        peak_mod.PeakProbe(jax.devices()[0], ("x", "y")).result(timeout=0.0)
