"""Checkpoint state of the training hooks: a JSON-safe dict and its typed, parsed form.

:func:`to_state_dict` writes what :meth:`GoodputHooks.state_dict` returns (profile, fit,
statistics, configuration); :func:`parse_state_dict` reads it back as a
:class:`HooksState` that :meth:`GoodputHooks.load_state_dict` applies.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from goodput_jax.integrations.profile import StepProfile
from goodput_jax.integrations.publish import finite_or_none
from goodput_jax.model.types import GradParams, PerfParams

__all__ = ["HooksState", "parse_state_dict", "to_state_dict"]


class HooksState(NamedTuple):
    """A parsed :meth:`GoodputHooks.state_dict` (the profile stays JSON for the profile).

    Attributes:
        profile: ``[[key, entry_json], ...]`` (:meth:`StepProfile.load_json`).
        seen: ``[[key, steps_seen], ...]``.
        perf_params: the fit, or None.
        grad_params: the gradient statistics, or None.
        grad_count: steps behind them (``math.inf`` when unknown).
        model_error: the fit's median relative error (nan when unknown).
        atomic_bsz, accum_steps, num_replicas, num_nodes: the configuration.
    """

    profile: list
    seen: list
    perf_params: PerfParams | None
    grad_params: GradParams | None
    grad_count: float
    model_error: float
    atomic_bsz: int
    accum_steps: int
    num_replicas: int
    num_nodes: int


def to_state_dict(profile: StepProfile, *, perf_params: PerfParams | None,
                  grad_params: GradParams | None, grad_count: float, model_error: float,
                  atomic_bsz: int, accum_steps: int, num_replicas: int, num_nodes: int) -> dict:
    """JSON-safe state (every pending step of ``profile`` folded in first).

    Example:
        >>> s = to_state_dict(StepProfile(), perf_params=None, grad_params=GradParams(1.0, 2.0),
        ...                   grad_count=math.inf, model_error=float("nan"), atomic_bsz=8,
        ...                   accum_steps=0, num_replicas=1, num_nodes=1)
        >>> s["grad_params"], s["grad_count"], parse_state_dict(s).grad_count
        ([1.0, 2.0], None, inf)
    """
    prof, seen = profile.to_json()
    return {
        "profile": prof,
        "seen": seen,
        "perf_params": None if perf_params is None else list(perf_params),
        "grad_params": None if grad_params is None else [grad_params.sqr, grad_params.var],
        "grad_count": finite_or_none(grad_count),
        "model_error": finite_or_none(model_error),
        "atomic_bsz": atomic_bsz,
        "accum_steps": accum_steps,
        "num_replicas": num_replicas,
        "num_nodes": num_nodes,
    }


def parse_state_dict(state: dict) -> HooksState:
    """Inverse of :func:`to_state_dict` (missing optional keys: None / nan / inf)."""
    pp, gp, err = state.get("perf_params"), state.get("grad_params"), state.get("model_error")
    return HooksState(
        profile=list(state["profile"]),
        seen=list(state.get("seen", [])),
        perf_params=None if pp is None else PerfParams(*(float(x) for x in pp)),
        grad_params=None if gp is None else GradParams(float(gp[0]), float(gp[1])),
        grad_count=float(state.get("grad_count") or math.inf),
        model_error=float("nan") if err is None else float(err),
        atomic_bsz=int(state["atomic_bsz"]),
        accum_steps=int(state["accum_steps"]),
        num_replicas=int(state["num_replicas"]),
        num_nodes=int(state["num_nodes"]),
    )
