"""Fitting the step-time model to a profile: the fit, its errors, the background worker.

* :func:`fit_profile`: :class:`PerfParams` fitted to a profile table
  (:meth:`goodput_jax.integrations.profile.StepProfile.compute`), weighted by the
  sample counts, with the model's relative error on each configuration;
* :func:`model_errors`: those errors for given parameters (a restored fit);
* :class:`RefitPool`: one background worker, never two refits at once;
* :func:`precompile_fit_once`: the fit's program compiled once per process, in the
  background, with the interpreter's exit waiting for it; and once per machine: the
  compiled program is kept in a persistent compilation cache of the fit's own
  (:func:`fit_cache_dir`), so a second process loads it instead of compiling.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from goodput_jax.model.formulas import predict_optim_time_np
from goodput_jax.model.types import PerfParams

__all__ = ["FIT_CACHE_ENV", "PRECOMPILE_EXIT_WAIT", "FitSnapshot", "RefitPool", "fit_cache_dir",
           "fit_profile", "model_errors", "precompile_fit_once"]

#: Environment variable: the fit's compilation cache directory, or ``0`` / ``off`` for none.
FIT_CACHE_ENV = "GOODPUT_JAX_FIT_CACHE"

#: Longest the interpreter's exit waits for the fit's background compile, in seconds.
PRECOMPILE_EXIT_WAIT = 60.0
_precompile_lock = threading.Lock()
_precompile_waiter: threading.Thread | None = None


def fit_cache_dir() -> str | None:
    """Where the step-time fit's compiled program is kept between processes, or None (off).

    ``$GOODPUT_JAX_FIT_CACHE`` (``0``, ``off`` or empty: off), else ``fit-xla`` in the
    package's cache directory (``$GOODPUT_JAX_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/goodput_jax``, else ``~/.cache/goodput_jax``).

    Example:
        >>> d = fit_cache_dir()   # e.g. '/home/me/.cache/goodput_jax/fit-xla'
        >>> d is None or d.endswith("fit-xla") or d == os.environ[FIT_CACHE_ENV]
        True
    """
    env = os.environ.get(FIT_CACHE_ENV)
    if env is not None:
        return None if env.strip().lower() in ("", "0", "off", "false", "no") else env
    from goodput_jax.runtime.peak import peak_cache_dir  # the package's one cache root

    return os.path.join(peak_cache_dir(), "fit-xla")


@contextlib.contextmanager
def _fit_cache(path: str | None) -> Iterator[None]:
    """JAX's persistent compilation cache at ``path`` while the fit compiles, then as it was.

    Only when the user has set no cache of their own (then theirs keeps the fit too, and
    nothing is changed). JAX's cache is process-wide: a compile on another thread during
    this window (the fit's lowering and compile, or its load from the cache: about 0.1 s
    once cached) is cached there too. ``docs/adaptive.md`` says so.
    """
    import jax
    from jax.experimental.compilation_cache import compilation_cache as cc

    cfg: Any = jax.config  # its options are attributes made at run time
    if (path is None or cfg.jax_compilation_cache_dir
            or not cfg.jax_enable_compilation_cache):
        yield
        return
    old_min = cfg.jax_persistent_cache_min_compile_time_secs
    try:
        os.makedirs(path, exist_ok=True)
        cfg.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        cfg.update("jax_compilation_cache_dir", path)
        cc.reset_cache()  # JAX decides once whether a cache is used: decide again
    except Exception:  # a cache is an optimisation only
        logging.getLogger(__name__).warning("goodput: no fit cache at %s", path, exc_info=True)
    try:
        yield
    finally:
        cfg.update("jax_compilation_cache_dir", None)
        cfg.update("jax_persistent_cache_min_compile_time_secs", old_min)
        cc.reset_cache()


def precompile_fit_once() -> threading.Thread:
    """Start compiling the step-time fit in the background, once per process; exit waits for it.

    :func:`goodput_jax.model.perf.precompile_fit` compiles on a daemon thread. An
    interpreter that exits while XLA is still compiling there aborts
    (``terminate called after throwing an instance of ''``, status 134): the
    finalising interpreter kills the thread when the compiler hands back the GIL.
    This starts that compile once per process and a NON-daemon thread that waits
    for it, at most :data:`PRECOMPILE_EXIT_WAIT` seconds; the interpreter joins
    non-daemon threads before its exit handlers (JAX's backend teardown among
    them) and before killing daemon threads, so a short script that ends during
    the compile waits for it (about two seconds) and exits cleanly. Later calls
    return the same waiter. :class:`GoodputHooks` calls it on the primary process.

    The compile goes through a persistent compilation cache of the fit's own
    (:func:`fit_cache_dir`, unless the user set JAX's cache: then through theirs), so
    only the first process on a machine compiles; later ones load the program.

    Returns:
        The waiter thread (``join()`` it to wait for the compile).

    Example:
        >>> precompile_fit_once() is precompile_fit_once()
        True
    """
    global _precompile_waiter
    with _precompile_lock:
        if _precompile_waiter is None:
            from goodput_jax.model.perf import precompile_fit

            done = threading.Event()

            def compile_cached() -> None:
                with _fit_cache(fit_cache_dir()):
                    precompile_fit().join(PRECOMPILE_EXIT_WAIT)
                done.set()

            compiling = threading.Thread(target=compile_cached, name="goodput-fit-cache",
                                         daemon=True)
            compiling.start()

            def wait() -> None:
                done.wait(PRECOMPILE_EXIT_WAIT)

            _precompile_waiter = threading.Thread(
                target=wait, name="goodput-fit-compile-wait", daemon=False)
            _precompile_waiter.start()
        return _precompile_waiter


def _columns(table: dict) -> tuple[list, tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    keys = list(table)
    nrb = (np.array([k[0] for k in keys]), np.array([k[1] for k in keys]),
           np.array([k[2] for k in keys]))
    return keys, nrb, np.array([table[k][1] for k in keys], float)


def model_errors(params: PerfParams, table: dict) -> dict[tuple[int, int, int], float]:
    """Relative error of the predicted optimizer-step time on each configuration of ``table``.

    ``table`` maps ``(nodes, replicas, atomic_bsz)`` to ``(accum, optim, n)``.

    Example:
        >>> p = PerfParams(0.1, 0.01, 0.0, 0.0, 0.0, 0.0, 1.0)
        >>> {k: round(v, 3) for k, v in model_errors(p, {(1, 1, 10): (0.2, 0.25, 5)}).items()}
        {(1, 1, 10): 0.2}
    """
    if not table:
        return {}
    keys, (n, r, b), opt = _columns(table)
    errs = np.abs(predict_optim_time_np(params, n, r, b) - opt) / opt
    return {k: float(e) for k, e in zip(keys, np.atleast_1d(errs))}


def fit_profile(table: dict, window: int) -> tuple[PerfParams, float, dict]:
    """Fit :class:`PerfParams` to a profile table; ``(params, median error, errors)``.

    Each configuration is weighted by its sample count, at most ``window`` (the
    samples its statistic was taken over).

    Example:
        >>> table = {(1, 1, 8): (0.1, 0.1, 9), (1, 1, 16): (0.18, 0.18, 9)}
        >>> params, err, errs = fit_profile(table, 64)  # doctest: +SKIP
    """
    from goodput_jax.model.perf import fit_perf_params

    keys, (n, r, b), opt = _columns(table)
    acc = np.array([table[k][0] for k in keys])
    weights = np.array([min(table[k][2], window) for k in keys], float)
    params = fit_perf_params(n, r, b, acc, opt, weights=weights)
    errs = model_errors(params, table)
    return params, float(np.median(list(errs.values()))), errs


class RefitPool:
    """One background worker for refits: :meth:`submit` starts one unless one is in flight.

    Example:
        >>> pool = RefitPool()
        >>> pool.submit(lambda: None), pool.wait(), pool.close()
        (True, None, None)
    """

    def __init__(self) -> None:
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._future: concurrent.futures.Future | None = None

    def busy(self) -> bool:
        """Whether a refit is in flight."""
        return self._future is not None and not self._future.done()

    def submit(self, fn: Callable[[], None]) -> bool:
        """Run ``fn`` on the worker; False (and nothing started) while one is in flight."""
        if self.busy():
            return False
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="goodput-refit")
        self._future = self._executor.submit(fn)
        return True

    def wait(self, timeout: float | None = None) -> None:
        """Wait for the refit in flight (if any); re-raises its exception."""
        if self._future is not None:
            self._future.result(timeout)

    def close(self) -> None:
        """Wait for the worker and stop it (a later :meth:`submit` starts a new one)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None


class FitSnapshot:
    """What the last fit saw: each configuration's statistic and the gradient noise scale.

    :meth:`changed` says whether a periodic refit would learn anything.

    Example:
        >>> snap = FitSnapshot({(1, 1, 8): (0.1, 0.1, 9)}, noise_scale=2.0)
        >>> snap.changed({(1, 1, 8): (0.1, 0.104, 9)}, 2.0, tolerance=0.05)
        False
        >>> snap.changed({(1, 1, 8): (0.1, 0.2, 9)}, 2.0, tolerance=0.05)
        True
    """

    def __init__(self, table: dict, noise_scale: float | None):
        self.times = {k: v[1] for k, v in table.items()}
        self.noise_scale = noise_scale

    def forget(self, config: tuple[int, int, int]) -> None:
        """Drop ``(nodes, replicas, atomic_bsz)``: the next check refits its new times."""
        self.times.pop(config, None)

    def changed(self, table: dict, noise_scale: float | None, tolerance: float) -> bool:
        """A configuration is new or gone, or its statistic or the noise scale moved by more
        than ``tolerance`` (a fraction) since the snapshot."""
        fitted, gns = self.times, self.noise_scale
        if table.keys() != fitted.keys():
            return True
        if any(abs(v[1] - fitted[k]) > tolerance * fitted[k] for k, v in table.items()):
            return True
        return (noise_scale is None) != (gns is None) or (
            noise_scale is not None and gns is not None
            and abs(noise_scale - gns) > tolerance * abs(gns))
