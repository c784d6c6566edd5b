"""Readers: the statistics (and the sampling decision) out of an optimizer state.

Example:
    >>> import optax
    >>> from goodput_jax.model.gradstats.transform import gradient_noise_scale
    >>> st = optax.chain(gradient_noise_scale(32, every=4), optax.sgd(0.1)).init(jnp.ones(2))
    >>> int(get_grad_stats(st).count), sample_every(st), bool(sample_now(st))
    (0, 4, True)
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp  # noqa: F401 - the docstring examples use it
import numpy as np

from goodput_jax.model.gradstats.estimate import (
    NO_HELPER_NOTE,
    GradStatsState,
    StatsSummary,
    as_stats_summary,
    grad_params_from_stats,
    is_stats_summary,
)
from goodput_jax.model.gradstats.transform import GradientNoiseScaleState
from goodput_jax.model.types import GradParams

__all__ = ["get_grad_params", "get_grad_stats", "sample_every", "sample_now", "stats_note"]


def get_grad_stats(opt_state: Any) -> GradStatsState:
    """The first :class:`GradStatsState` in an optimizer state tree.

    Typed ``Any``: ``opt_state`` is an optax state (untyped upstream).

    Raises:
        ValueError: when ``opt_state`` holds none (no :func:`gradient_noise_scale`
            or :func:`multi_steps` in the optimizer).
    """
    found = [
        x
        for x in jax.tree.leaves(opt_state, is_leaf=lambda x: isinstance(x, GradStatsState))
        if isinstance(x, GradStatsState)
    ]
    if not found:
        raise ValueError(
            "opt_state holds no gradient statistics: put goodput_jax.gradient_noise_scale(...) "
            "first in the optax chain (or use gradstats.multi_steps)"
        )
    st = found[0]
    # Flax NNX keeps optimizer state in boxes (``OptArray``), one array each: unbox them,
    # so ``get_grad_params(optimizer.opt_state)`` reads an nnx.Optimizer as it reads optax
    leaves = jax.tree.leaves(st)
    return GradStatsState(*leaves) if len(leaves) == len(st) else st


def _holds_stats(tree: Any) -> bool:
    return any(isinstance(x, GradStatsState) for x in jax.tree.leaves(
        tree, is_leaf=lambda x: isinstance(x, GradStatsState)))


def _noise_scale_state(opt_state: Any) -> GradientNoiseScaleState:
    found = [
        x
        for x in jax.tree.leaves(opt_state,
                                 is_leaf=lambda x: isinstance(x, GradientNoiseScaleState))
        if isinstance(x, GradientNoiseScaleState)
    ]
    if not found:
        raise ValueError(
            "opt_state holds no gradient_noise_scale state: put "
            "goodput_jax.gradient_noise_scale(...) first in the optax chain"
        )
    return found[0]


def sample_every(opt_state: Any) -> int | None:
    """The ``every`` of the :func:`gradient_noise_scale` in ``opt_state``, as a Python int.

    Typed ``Any``: ``opt_state`` is an optax state (untyped upstream).

    A train-step builder calls it on a concrete optimizer state (outside ``jit``) to
    decide statically whether to pass ``sample=sample_now(opt_state)`` (``every > 1``)
    or leave ``sample=True`` (no conditional). Reading it waits for that one scalar.
    Returns None when the state is abstract (traced, or ``jax.ShapeDtypeStruct``).

    Raises:
        ValueError: when ``opt_state`` holds no :func:`gradient_noise_scale` state.

    Example:
        >>> import optax
        >>> from goodput_jax.model.gradstats.transform import gradient_noise_scale
        >>> sample_every(optax.chain(gradient_noise_scale(32, every=4), optax.sgd(0.1))
        ...              .init({"w": jnp.ones(2)}))
        4
    """
    every = _noise_scale_state(opt_state).every
    if isinstance(every, jax.core.Tracer) or not isinstance(every, (int, np.integer, np.ndarray,
                                                                    jax.Array)):
        return None
    return int(every)


def sample_now(opt_state: Any) -> jax.Array:
    """Whether this step takes the statistics (scalar bool), for the helpers' ``sample=``.

    Typed ``Any``: ``opt_state`` is an optax state (untyped upstream).

    True on steps ``0, every, 2 * every, ...`` of the :func:`gradient_noise_scale`
    found in ``opt_state`` (always True with ``every=1``). Call it on the
    optimizer state at the start of the train step, before the update. Under
    ``jit`` it is a traced bool, so the helpers then use a ``lax.cond`` even
    with ``every=1``; leave ``sample`` at its default (True) there instead.

    Raises:
        ValueError: when ``opt_state`` holds no :func:`gradient_noise_scale` state.

    Example:
        >>> import optax
        >>> from goodput_jax.model.gradstats.transform import gradient_noise_scale
        >>> tx = optax.chain(gradient_noise_scale(32, every=4), optax.sgd(0.1))
        >>> bool(sample_now(tx.init({"w": jnp.ones(2)})))
        True
    """
    found = _noise_scale_state(opt_state)
    return (found.step % found.every) == 0


def get_grad_params(opt_state: Any) -> GradParams:
    """Current smoothed :class:`GradParams` (arrays) read from an optimizer state.

    Typed ``Any``: ``opt_state`` is an optax state (untyped upstream).

    Example:
        >>> import optax
        >>> from goodput_jax.model.gradstats.transform import gradient_noise_scale
        >>> tx = optax.chain(gradient_noise_scale(32), optax.sgd(0.1))
        >>> float(get_grad_params(tx.init({"w": jnp.ones(2)})).sqr)
        0.0
    """
    return grad_params_from_stats(get_grad_stats(opt_state))


def stats_note(value: Any) -> str | None:
    """Why no gradient noise statistics are shown, or None when nothing needs saying.

    Typed ``Any``: ``value`` is anything a caller holds (checked here).

    :data:`NO_HELPER_NOTE` (one line, naming the helper that fixes it:
    ``microbatch_grads(loss_fn, params, batch, 2, preconditioner=pre)`` on one device)
    where the updates brought one gradient each (no collection helper) and no unbiased
    sample came since: the state is flagged ``biased`` and its summary is
    ``(0, nan, nan)``. None before the first sample of a step that has a helper (Adam's
    first updates, ``every=k``), or once there are statistics.

    Args:
        value: a :class:`StatsSummary` (or the ``[count, sqr, var]`` vector), a
            :class:`GradStatsState`, or an optimizer state holding one (optax, or a Flax
            NNX ``nnx.Optimizer``'s ``opt_state``). Device values are read back: a caller
            that already read the summary back passes that (no second transfer).

    Raises:
        ValueError: ``value`` holds no gradient statistics (as :func:`get_grad_stats`).

    Example:
        >>> import optax
        >>> from goodput_jax.model.gradstats.transform import gradient_noise_scale
        >>> tx = optax.chain(gradient_noise_scale(32), optax.sgd(0.1))
        >>> st = tx.init({"w": jnp.ones(2)})
        >>> stats_note(st) is None
        True
        >>> _, st = tx.update({"w": jnp.ones(2)}, st)  # a plain step: no helper
        >>> "microbatch_grads(" in stats_note(st)
        True
    """
    if isinstance(value, GradStatsState):
        st = value
    elif isinstance(value, StatsSummary) or (is_stats_summary(value) and not _holds_stats(value)):
        count, sqr, _ = as_stats_summary(value, "value")
        return NO_HELPER_NOTE if count <= 0 and math.isnan(sqr) else None  # NaN: not shown
    else:
        st = get_grad_stats(value)
    biased = bool(np.asarray(jax.device_get(st.biased)))
    return NO_HELPER_NOTE if biased else None
