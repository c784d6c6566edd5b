"""Drop-in training hooks: measured goodput events + the Pollux model, from one object.

A Flax / MaxText-style loop adds two lines::

    hooks = GoodputHooks("my-job", init_batch_size=64, atomic_bsz=64, max_batch_size=1024)
    for i, batch in enumerate(batches):
        state = hooks.step(i, train_step, state, batch)   # was: state = train_step(state, batch)

``hooks.step`` runs the (jitted) step, waits for its outputs, and:

* records the step's start/end through a :class:`GoodputRecorder` (created
  here, or the one passed in), so the calculator and monitor see the job;
* profiles the step time under the current configuration
  ``(num_nodes, num_replicas, atomic_bsz, accum_steps)``, split into the
  accumulation micro-step (compute only) and the optimizer step, excluding
  each configuration's first step (compilation);
* picks up the gradient statistics that :func:`goodput_jax.gradient_noise_scale`
  keeps in the optimizer state anywhere in the step's outputs;
* every ``refit_interval`` seconds of profiled training time, on the primary
  process only, refits :class:`PerfParams`, combines them with the current
  :class:`GradParams` into a :class:`GoodputFunction` and publishes the
  scheduler hints (``recorder.record_hints``) next to the job's events.

:meth:`GoodputHooks.suggest` returns the best ``(atomic_bsz, accum_steps)`` for
the current replicas and the predicted speedup; :meth:`GoodputHooks.hints`
returns the hints dict.

Timing the accumulation split: when each micro-step is its own call (mode (c),
:func:`goodput_jax.model.gradstats.multi_steps`), time the non-final calls with
:meth:`GoodputHooks.accum_step` and the final one with :meth:`GoodputHooks.step`
(AdaptDL's profile semantics). When the accumulation is fused into one call
(mode (b)), the step time ``T`` with ``s`` extra micro-steps is split evenly:
``s`` accumulation samples and one optimizer sample of ``T / (s + 1)`` each;
this slightly overstates the compute time by the amortised synchronisation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import numbers
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, Self

import jax
import numpy as np

from goodput_jax.model import gradstats
from goodput_jax.model.types import GradParams, PerfParams

__all__ = ["GoodputHooks", "ProfileEntry", "Suggestion"]

_log = logging.getLogger(__name__)


@dataclasses.dataclass
class ProfileEntry:
    """Summed step times of one ``(num_nodes, num_replicas, atomic_bsz, accum_steps)``."""

    accum_time: float = 0.0
    accum_count: int = 0
    optim_time: float = 0.0
    optim_count: int = 0


class Suggestion(NamedTuple):
    """What :meth:`GoodputHooks.suggest` recommends for the current replicas.

    Attributes:
        atomic_bsz: per-replica micro-batch size.
        accum_steps: extra accumulation steps (0 = none), AdaptDL's convention.
        batch_size: total batch ``num_replicas * atomic_bsz * (accum_steps + 1)``.
        goodput: predicted goodput of the suggestion.
        current_goodput: predicted goodput of the running configuration.
        predicted_speedup: ``goodput / current_goodput``.
        efficiency: statistical efficiency of the suggested batch size.
    """

    atomic_bsz: int
    accum_steps: int
    batch_size: int
    goodput: float
    current_goodput: float
    predicted_speedup: float
    efficiency: float


def _pos_int(value: Any, name: str, allow_none: bool = False) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} ({value!r}) must be a positive integer")
    return int(value)


def _finite_or_none(x: Any) -> float | None:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


class GoodputHooks:
    """Goodput recording, step-time profiling and Pollux hints for one training loop.

    Args:
        job_name: the job's name (as for :class:`GoodputRecorder`).
        init_batch_size: ``M0``, the total batch size the learning rate was tuned for.
        atomic_bsz: current per-replica micro-batch size (default
            ``init_batch_size // num_replicas``).
        accum_steps: current extra accumulation steps (0 = none).
        max_batch_size: largest total batch the job accepts (default ``init_batch_size``).
        local_bsz_bounds: ``(min, max)`` per-replica batch size; either may be None.
        gradient_accumulation: whether suggestions may use accumulation.
        num_nodes: nodes in use (default ``jax.process_count()``).
        num_replicas: data-parallel replicas (default ``jax.device_count()``).
        recorder: a :class:`GoodputRecorder` to use; by default one is created
            with ``logger_name = f"goodput_{job_name}"`` and ``store``, enabled on
            the primary process.
        store: store (or URL) for the internally created recorder.
        refit_interval: seconds of profiled training time between refits.
        clock: monotonic seconds for step timing (injectable for tests).
        is_primary: whether this process fits and publishes (default
            ``jax.process_index() == 0``).

    Example:
        >>> hooks = GoodputHooks("doc-job", init_batch_size=32, is_primary=False)
        >>> hooks.step(0, lambda x: x + 1, 1)
        2
    """

    def __init__(
        self,
        job_name: str,
        *,
        init_batch_size: int,
        atomic_bsz: int | None = None,
        accum_steps: int = 0,
        max_batch_size: int | None = None,
        local_bsz_bounds: tuple[int | None, int | None] | None = None,
        gradient_accumulation: bool = False,
        num_nodes: int | None = None,
        num_replicas: int | None = None,
        recorder: Any = None,
        store: Any = None,
        refit_interval: float = 30.0,
        clock: Callable[[], float] = time.perf_counter,
        is_primary: bool | None = None,
    ):
        if not isinstance(job_name, str) or not job_name:
            raise ValueError(f"job_name ({job_name!r}) must be a non-empty string")
        self.job_name = job_name
        self.init_batch_size = _pos_int(init_batch_size, "init_batch_size")
        self.num_nodes = _pos_int(
            jax.process_count() if num_nodes is None else num_nodes, "num_nodes"
        )
        self.num_replicas = _pos_int(
            jax.device_count() if num_replicas is None else num_replicas, "num_replicas"
        )
        if self.num_nodes > self.num_replicas:
            raise ValueError(f"num_nodes ({self.num_nodes}) > num_replicas ({self.num_replicas})")
        if atomic_bsz is None:
            atomic_bsz = max(1, self.init_batch_size // self.num_replicas)
        self.atomic_bsz = _pos_int(atomic_bsz, "atomic_bsz")
        if isinstance(accum_steps, bool) or not isinstance(accum_steps, numbers.Integral) or accum_steps < 0:
            raise ValueError(f"accum_steps ({accum_steps!r}) must be a non-negative integer")
        self.accum_steps = int(accum_steps)
        self.max_batch_size = _pos_int(
            self.init_batch_size if max_batch_size is None else max_batch_size, "max_batch_size"
        )
        if self.max_batch_size < self.init_batch_size:
            raise ValueError(
                f"max_batch_size ({self.max_batch_size}) < init_batch_size ({self.init_batch_size})"
            )
        lo, hi = (None, None) if local_bsz_bounds is None else tuple(local_bsz_bounds)
        lo = _pos_int(lo, "local_bsz_bounds[0]", allow_none=True)
        hi = _pos_int(hi, "local_bsz_bounds[1]", allow_none=True)
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"local_bsz_bounds ({local_bsz_bounds!r}) must have min <= max")
        self.local_bsz_bounds = (lo, hi)
        self.gradient_accumulation = bool(gradient_accumulation)
        if not isinstance(refit_interval, numbers.Real) or not refit_interval >= 0:
            raise ValueError(f"refit_interval ({refit_interval!r}) must be a number >= 0")
        self.refit_interval = float(refit_interval)
        if not callable(clock):
            raise TypeError(f"clock ({clock!r}) must be a callable returning seconds")
        self._clock = clock
        self.is_primary = (jax.process_index() == 0) if is_primary is None else bool(is_primary)
        if recorder is None:
            from goodput_jax.measure.recorder import GoodputRecorder

            recorder = GoodputRecorder(
                job_name, f"goodput_{job_name}", logging_enabled=self.is_primary, store=store
            )
            self._owns_recorder = True
        else:
            self._owns_recorder = False
        self.recorder = recorder
        self.profile: dict[tuple[int, int, int, int], ProfileEntry] = {}
        self._seen_optim: set[tuple] = set()
        self._seen_accum: set[tuple] = set()
        self._pending_accum = 0
        self._since_fit = 0.0
        self._grad_stats: Any = None
        self._grad_params: GradParams | None = None
        self.perf_params: PerfParams | None = None
        self.fit_count = 0
        self.last_hints: dict | None = None

    # ------------------------------------------------------------------ configuration
    def _key(self) -> tuple[int, int, int, int]:
        return (self.num_nodes, self.num_replicas, self.atomic_bsz, self.accum_steps)

    def set_config(
        self,
        *,
        atomic_bsz: int | None = None,
        accum_steps: int | None = None,
        num_replicas: int | None = None,
        num_nodes: int | None = None,
    ) -> None:
        """Tell the hooks that the loop now runs another configuration.

        Example:
            >>> hooks = GoodputHooks("j", init_batch_size=8, is_primary=False, num_replicas=1)
            >>> hooks.set_config(atomic_bsz=16, accum_steps=1)
            >>> hooks.atomic_bsz, hooks.accum_steps
            (16, 1)
        """
        if atomic_bsz is not None:
            self.atomic_bsz = _pos_int(atomic_bsz, "atomic_bsz")
        if accum_steps is not None:
            if isinstance(accum_steps, bool) or not isinstance(accum_steps, numbers.Integral) or accum_steps < 0:
                raise ValueError(f"accum_steps ({accum_steps!r}) must be a non-negative integer")
            self.accum_steps = int(accum_steps)
        nodes = self.num_nodes if num_nodes is None else _pos_int(num_nodes, "num_nodes")
        reps = self.num_replicas if num_replicas is None else _pos_int(num_replicas, "num_replicas")
        if nodes > reps:
            raise ValueError(f"num_nodes ({nodes}) > num_replicas ({reps})")
        self.num_nodes, self.num_replicas = nodes, reps
        self._pending_accum = 0

    @property
    def batch_size(self) -> int:
        """Current total batch size ``num_replicas * atomic_bsz * (accum_steps + 1)``."""
        return self.num_replicas * self.atomic_bsz * (self.accum_steps + 1)

    # ------------------------------------------------------------------ timing
    def _timed(self, fn: Callable, args: tuple, kwargs: dict) -> tuple[Any, float]:
        t0 = self._clock()
        out = fn(*args, **kwargs)
        out = jax.block_until_ready(out)
        return out, float(self._clock() - t0)

    def accum_step(self, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        """Run and time one non-final accumulation micro-step (mode (c) loops).

        Example:
            >>> hooks = GoodputHooks("j", init_batch_size=8, is_primary=False, num_replicas=1)
            >>> hooks.accum_step(lambda: 3)
            3
        """
        out, dt = self._timed(fn, args, kwargs)
        key = self._key()
        if key in self._seen_accum:
            entry = self.profile.setdefault(key, ProfileEntry())
            entry.accum_time += dt
            entry.accum_count += 1
            self._since_fit += dt
        else:
            self._seen_accum.add(key)
        self._pending_accum += 1
        return out

    def step(self, step: int, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        """Run one optimizer step ``fn(*args, **kwargs)``, record and profile it.

        Blocks until the outputs are ready (so the time is the device time, and
        the recorded step end is real). Any :class:`GradStatsState` in the
        outputs (e.g. in the returned optimizer state) becomes the current
        gradient statistics. May refit and publish hints afterwards.

        Returns:
            ``fn``'s outputs.
        """
        self.recorder.record_step_start_time(step)
        out, dt = self._timed(fn, args, kwargs)
        self.recorder.record_step_end_time(step)
        self.observe_step_time(dt)
        self.observe_outputs(out)
        self.maybe_refit()
        return out

    @contextlib.contextmanager
    def step_context(self, step: int) -> Iterator[Callable[[Any], None]]:
        """Context-manager form: ``with hooks.step_context(i) as done: out = f(); done(out)``.

        ``done(outputs)`` waits for the outputs and takes the gradient statistics
        from them; without it the time is whatever the block took.
        """
        self.recorder.record_step_start_time(step)
        t0 = self._clock()
        box: list = []

        def done(outputs: Any) -> None:
            box.append(jax.block_until_ready(outputs))

        yield done
        dt = float(self._clock() - t0)
        self.recorder.record_step_end_time(step)
        self.observe_step_time(dt)
        if box:
            self.observe_outputs(box[0])
        self.maybe_refit()

    def observe_step_time(self, seconds: float) -> None:
        """Add one optimizer step of ``seconds`` under the current configuration.

        Each configuration's first step is dropped (compilation). With
        ``accum_steps > 0`` and no :meth:`accum_step` calls since the last step,
        the time is split evenly between the micro-steps (see module docs).
        """
        seconds = float(seconds)
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"seconds ({seconds!r}) must be a finite non-negative number")
        key = self._key()
        pending, self._pending_accum = self._pending_accum, 0
        if key not in self._seen_optim:
            self._seen_optim.add(key)
            return
        entry = self.profile.setdefault(key, ProfileEntry())
        s = self.accum_steps
        if s > 0 and pending == 0:
            part = seconds / (s + 1)
            entry.accum_time += part * s
            entry.accum_count += s
            entry.optim_time += part
        else:
            entry.optim_time += seconds
        entry.optim_count += 1
        self._since_fit += seconds

    def observe_outputs(self, outputs: Any) -> None:
        """Take the gradient statistics from any :class:`GradStatsState` in ``outputs``."""
        found = [
            x
            for x in jax.tree.leaves(
                outputs, is_leaf=lambda x: isinstance(x, gradstats.GradStatsState)
            )
            if isinstance(x, gradstats.GradStatsState)
        ]
        if found:
            # Copy to host now: the step may donate these buffers on its next call.
            self._grad_stats = jax.device_get(found[0])

    def update_grad_params(self, grad_params: Any) -> None:
        """Set the gradient statistics directly (``GradParams`` or an optimizer state)."""
        if isinstance(grad_params, GradParams):
            self._grad_stats = None
            self._grad_params = GradParams(float(grad_params.sqr), float(grad_params.var))
        else:
            self._grad_stats = gradstats.get_grad_stats(grad_params)

    # ------------------------------------------------------------------ model
    @property
    def grad_params(self) -> GradParams | None:
        """Current smoothed :class:`GradParams` as floats, or None before any sample."""
        if self._grad_stats is not None:
            st = jax.device_get(self._grad_stats)
            if int(st.count) > 0:
                gp = gradstats.grad_params_from_stats(st)
                self._grad_params = GradParams(float(gp.sqr), float(gp.var))
            self._grad_stats = None
        return self._grad_params

    def max_profiled_replicas(self) -> int:
        """Largest replica count with an optimizer-step profile (0 when none)."""
        return max((k[1] for k, e in self.profile.items() if e.optim_count), default=0)

    def refit(self) -> PerfParams | None:
        """Refit :class:`PerfParams` to the profile now (keeps the old fit on failure)."""
        from goodput_jax.model.perf import fit_perf_params

        agg: dict[tuple[int, int, int], list[float]] = {}
        for (n, r, b, _s), e in self.profile.items():
            if e.optim_count == 0:
                continue
            a = agg.setdefault((n, r, b), [0.0, 0, 0.0, 0])
            a[0] += e.accum_time
            a[1] += e.accum_count
            a[2] += e.optim_time
            a[3] += e.optim_count
        if not agg:
            return self.perf_params
        keys = sorted(agg)
        optim = np.array([agg[k][2] / agg[k][3] for k in keys])
        accum = np.array([agg[k][0] / agg[k][1] if agg[k][1] else agg[k][2] / agg[k][3] for k in keys])
        try:
            self.perf_params = fit_perf_params(
                np.array([k[0] for k in keys]), np.array([k[1] for k in keys]),
                np.array([k[2] for k in keys]), accum, optim,
            )
            self.fit_count += 1
        except Exception as e:  # noqa: BLE001 - a bad profile must not stop training
            _log.warning("goodput hooks: refitting PerfParams failed (%s); keeping the last fit", e)
        self._since_fit = 0.0
        return self.perf_params

    def maybe_refit(self) -> bool:
        """Refit and publish when ``refit_interval`` seconds of profiled time have passed.

        Only on the primary process. Returns whether it refit.
        """
        if not self.is_primary or self._since_fit < self.refit_interval or not self.profile:
            return False
        if not any(e.optim_count for e in self.profile.values()):
            return False
        self.refit()
        self.publish()
        return True

    def goodput_function(self) -> Any:
        """A :class:`GoodputFunction` of the current fit and statistics, or None."""
        gp = self.grad_params
        if self.perf_params is None or gp is None:
            return None
        from goodput_jax.model.goodput import GoodputFunction

        return GoodputFunction(self.perf_params, gp, self.init_batch_size)

    def suggest(self) -> Suggestion | None:
        """Best ``(atomic_bsz, accum_steps)`` for the current replicas, with the predicted speedup.

        Returns None until both a fit and gradient statistics exist.
        """
        fn = self.goodput_function()
        if fn is None:
            return None
        goodput, bsz, steps = fn.optimize(
            self.num_nodes, self.num_replicas, max_batch_size=self.max_batch_size,
            atomic_bsz_range=self.local_bsz_bounds, accumulation=self.gradient_accumulation,
        )
        current = fn.evaluate(self.num_nodes, self.num_replicas, self.atomic_bsz, self.accum_steps)
        total = self.num_replicas * int(bsz) * (int(steps) + 1)
        speedup = float(goodput) / float(current) if current and current > 0 else float("nan")
        return Suggestion(
            atomic_bsz=int(bsz), accum_steps=int(steps), batch_size=total,
            goodput=float(goodput), current_goodput=float(current),
            predicted_speedup=speedup, efficiency=float(fn.efficiency(total)),
        )

    def hints(self) -> dict:
        """The scheduler hints (AdaptDL names) plus the model's current read-outs.

        Keys: ``perfParams`` (``alpha_c`` .. ``gamma``), ``gradParams``
        (``{"norm", "var"}``), ``initBatchSize``, ``maxBatchSize``,
        ``localBszBounds``, ``gradientAccumulation``, ``maxProfiledReplicas``,
        and, once known, ``gradientNoiseScale`` (samples), ``efficiency`` (of
        the current batch), ``suggestedBatchSize``, ``suggestedAtomicBsz``,
        ``suggestedAccumSteps``, ``predictedSpeedup``; plus the current
        ``numNodes``, ``numReplicas``, ``atomicBsz``, ``accumSteps``. Values are
        JSON-safe (non-finite numbers become None).
        """
        gp = self.grad_params
        out: dict[str, Any] = {
            "perfParams": None if self.perf_params is None else {
                k: _finite_or_none(v) for k, v in self.perf_params._asdict().items()
            },
            "gradParams": None if gp is None else {
                "norm": _finite_or_none(gp.sqr), "var": _finite_or_none(gp.var)
            },
            "initBatchSize": self.init_batch_size,
            "maxBatchSize": self.max_batch_size,
            "localBszBounds": list(self.local_bsz_bounds),
            "gradientAccumulation": self.gradient_accumulation,
            "maxProfiledReplicas": self.max_profiled_replicas(),
            "numNodes": self.num_nodes,
            "numReplicas": self.num_replicas,
            "atomicBsz": self.atomic_bsz,
            "accumSteps": self.accum_steps,
        }
        if gp is not None and gp.sqr > 0:
            out["gradientNoiseScale"] = _finite_or_none(self.init_batch_size * gp.var / gp.sqr)
        fn = self.goodput_function()
        if fn is not None:
            out["efficiency"] = _finite_or_none(fn.efficiency(self.batch_size))
            sug = self.suggest()
            if sug is not None:
                out["suggestedBatchSize"] = sug.batch_size
                out["suggestedAtomicBsz"] = sug.atomic_bsz
                out["suggestedAccumSteps"] = sug.accum_steps
                out["predictedSpeedup"] = _finite_or_none(sug.predicted_speedup)
        return out

    def publish(self) -> dict:
        """Store :meth:`hints` with the job's events (``recorder.record_hints``); returns them."""
        h = self.hints()
        self.last_hints = h
        if self.is_primary:
            self.recorder.record_hints(h)
        return h

    # ------------------------------------------------------------------ lifecycle
    @contextlib.contextmanager
    def job(self) -> Iterator[GoodputHooks]:
        """Job start on enter; on a normal exit: a final refit + hints, then job end."""
        self.recorder.record_job_start_time()
        yield self
        if self.is_primary and any(e.optim_count for e in self.profile.values()):
            self.refit()
            self.publish()
        self.recorder.record_job_end_time()

    def close(self) -> None:
        """Close the recorder if these hooks created it (flushes pending events)."""
        if self._owns_recorder:
            self.recorder.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
