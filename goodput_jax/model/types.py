"""Parameter pytrees of the Pollux goodput model (NamedTuples cross jit and vmap).

Example:
    >>> PerfParams(0.121, 0.00568, 0.0236, 0.00634, 0.0118, 0.00317, 1.14).gamma
    1.14
    >>> GradParams(sqr=0.00136, var=0.000502).var
    0.000502
"""

from __future__ import annotations

from typing import Any, NamedTuple


class PerfParams(NamedTuple):
    """Step-time model parameters (see :mod:`goodput_jax.model.perf`)."""

    alpha_c: Any  # compute time per micro-step, constant part
    beta_c: Any  # compute time per sample
    alpha_n: Any  # multi-node network time, constant part
    beta_n: Any  # multi-node network time per replica beyond 2
    alpha_r: Any  # single-node multi-replica network time, constant part
    beta_r: Any  # single-node network time per replica beyond 2
    gamma: Any  # compute/network overlap exponent, >= 1


class GradParams(NamedTuple):
    """Gradient statistics: ``sqr = |G|^2`` and ``var = tr(Sigma) / M0``.

    ``tr(Sigma)`` is the trace of the per-example gradient covariance and ``M0``
    the initial batch size, so ``var`` is the variance of an ``M0``-sample batch
    gradient, and the gradient noise scale in samples is ``var / sqr * M0``
    (:func:`goodput_jax.model.gradstats.noise_scale`).
    """

    sqr: Any
    var: Any
