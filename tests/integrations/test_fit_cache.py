"""The step-time fit's compile, once per machine (issue 44 item 8).

The fit compiles inside a window where JAX's persistent compilation cache points at the fit's
own directory; outside it the user's configuration is as it was. A tiny program stands in
for the fit (the fit's own compile takes seconds; ``benchmarks/hooks_compile_bench.py``
measures it across two processes).
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp

from goodput_jax.integrations import fit


def _entries(path) -> list[str]:
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


def test_fit_cache_dir_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(fit.FIT_CACHE_ENV, str(tmp_path / "c"))
    assert fit.fit_cache_dir() == str(tmp_path / "c")
    for off in ("0", "off", ""):
        monkeypatch.setenv(fit.FIT_CACHE_ENV, off)
        assert fit.fit_cache_dir() is None
    monkeypatch.delenv(fit.FIT_CACHE_ENV)
    monkeypatch.setenv("GOODPUT_JAX_CACHE_DIR", str(tmp_path / "root"))  # the package's root
    assert fit.fit_cache_dir() == str(tmp_path / "root" / "fit-xla")
    monkeypatch.delenv("GOODPUT_JAX_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert fit.fit_cache_dir() == str(tmp_path / "goodput_jax" / "fit-xla")


def test_the_window_caches_and_then_restores(tmp_path):
    cfg = jax.config
    assert not cfg.jax_compilation_cache_dir  # the test process set no cache of its own
    before = cfg.jax_persistent_cache_min_compile_time_secs
    path = tmp_path / "fit-xla"

    def inside(x):
        return jnp.sin(x) * 3.0 + 1.25

    with fit._fit_cache(str(path)):
        jax.jit(inside)(jnp.ones(7)).block_until_ready()
    cached = _entries(path)
    assert any("inside" in e for e in cached), cached
    # as it was: no cache dir, the user's threshold back; a compile now is not cached
    assert not cfg.jax_compilation_cache_dir
    assert cfg.jax_persistent_cache_min_compile_time_secs == before
    jax.jit(lambda x: jnp.cos(x) - 0.5)(jnp.ones(5)).block_until_ready()
    assert _entries(path) == cached


def test_a_users_own_cache_is_left_alone(tmp_path):
    cfg = jax.config
    mine = str(tmp_path / "users")
    cfg.update("jax_compilation_cache_dir", mine)
    try:
        with fit._fit_cache(str(tmp_path / "fit-xla")):
            assert cfg.jax_compilation_cache_dir == mine
        assert cfg.jax_compilation_cache_dir == mine
        assert not (tmp_path / "fit-xla").exists()
    finally:
        cfg.update("jax_compilation_cache_dir", None)
        from jax.experimental.compilation_cache import compilation_cache as cc
        cc.reset_cache()


def test_off_means_no_window(tmp_path):
    with fit._fit_cache(None):
        assert not jax.config.jax_compilation_cache_dir


def test_fit_after_precompile_is_the_cached_program(monkeypatch, tmp_path):
    """The refit after the background compile reuses that program (no second compile)."""
    monkeypatch.setenv(fit.FIT_CACHE_ENV, str(tmp_path / "fit-xla"))  # writes in tmp only
    table = {(1, 1, 8): (0.1, 0.1, 9), (1, 1, 16): (0.18, 0.18, 9)}
    fit.precompile_fit_once().join()
    compiles: list[str] = []
    on = [True]

    def listen(event: str, duration: float, **kw) -> None:
        if on[0] and event == "/jax/core/compile/backend_compile_duration":
            compiles.append(event)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        params, err, _ = fit.fit_profile(table, 64)
    finally:
        on[0] = False
    assert params.beta_c > 0 and err >= 0
    assert compiles == []
