"""Flax NNX adapter: the gradient statistics, the hooks and the adaptive step with NNX modules.

An NNX model and its :class:`flax.nnx.Optimizer` hold their arrays in
:class:`flax.nnx.Variable` boxes (``Param``, ``OptArray``, ``OptVariable``); the
statistics readers and the adaptive step work on plain pytrees of arrays. This module
is the one place that converts (``nnx.split`` / ``nnx.merge`` / ``nnx.as_pure``):

* :func:`opt_state` the optimizer's optax state as plain arrays, so
  :func:`get_grad_stats` / :func:`get_grad_params` / :func:`stats_summary` read an
  ``nnx.Optimizer`` (``gradstats.get_grad_params(optimizer.opt_state)`` itself raises
  ``TypeError: '>' not supported between instances of 'OptArray' and 'int'``);
* :func:`grads_and_stats` in an ``nnx.jit`` step: the loss, the gradients (an
  ``nnx.State`` that ``optimizer.update`` takes) and the norms
  (:class:`~goodput_jax.model.gradstats.GradSqNorms`) of
  :func:`goodput_jax.model.gradstats.microbatch_grads`, preconditioned with the
  optimizer's own Adam second moment;
* :func:`split_loss` an NNX ``loss_fn(model, batch)`` as the ``loss_fn(params, batch)``
  and the parameters that :func:`goodput_jax.adaptive.make_train_step` trains
  (``nnx.update(model, params)`` writes them back).

An NNX step hands its statistics to :class:`~goodput_jax.integrations.GoodputHooks`
by returning ``stats_summary(optimizer)`` with its loss (the hooks take any
:class:`~goodput_jax.model.gradstats.StatsSummary` in a step's outputs: no extra
device program)::

    @nnx.jit
    def train_step(model, optimizer, batch):
        loss, grads, sq = gnnx.grads_and_stats(loss_fn, model, optimizer, batch, 2)
        optimizer.update(model, grads, grad_sqnorms=sq)
        return loss, gnnx.stats_summary(optimizer)

Example:
    >>> import optax
    >>> from flax import nnx
    >>> from goodput_jax.model import gradstats as gs
    >>> model = nnx.Linear(2, 1, rngs=nnx.Rngs(0))
    >>> opt = nnx.Optimizer(model, optax.chain(gs.gradient_noise_scale(8), optax.adamw(1e-3)),
    ...                     wrt=nnx.Param)
    >>> get_grad_params(opt).sqr
    0.0
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
from flax import nnx

from goodput_jax.model import gradstats
from goodput_jax.model.types import GradParams

__all__ = ["get_grad_params", "get_grad_stats", "grads_and_stats", "opt_state", "split_loss",
           "stats_summary"]


def opt_state(optimizer: Any) -> Any:
    """The optax state of an ``nnx.Optimizer`` (or of its ``opt_state``) as plain arrays.

    Works inside and outside ``nnx.jit``; a plain optax state passes through unchanged.

    Example:
        >>> import optax
        >>> opt = nnx.Optimizer(nnx.Linear(2, 1, rngs=nnx.Rngs(0)), optax.sgd(0.1),
        ...                     wrt=nnx.Param)
        >>> opt_state(opt)
        (EmptyState(), EmptyState())
    """
    state = optimizer.opt_state if isinstance(optimizer, nnx.Optimizer) else optimizer
    return nnx.as_pure(state)


def get_grad_stats(optimizer: Any) -> gradstats.GradStatsState:
    """:func:`goodput_jax.model.gradstats.get_grad_stats` of an ``nnx.Optimizer``.

    Raises:
        ValueError: its transformation has no ``gradient_noise_scale``.

    Example:
        >>> import optax
        >>> from goodput_jax.model import gradstats as gs
        >>> opt = nnx.Optimizer(nnx.Linear(2, 1, rngs=nnx.Rngs(0)),
        ...                     optax.chain(gs.gradient_noise_scale(8), optax.sgd(0.1)),
        ...                     wrt=nnx.Param)
        >>> int(get_grad_stats(opt).count)
        0
    """
    return gradstats.get_grad_stats(opt_state(optimizer))


def get_grad_params(optimizer: Any) -> GradParams:
    """The smoothed :class:`GradParams` of an ``nnx.Optimizer``, as Python floats outside a
    trace (device scalars inside one).

    Example:
        >>> import optax
        >>> from goodput_jax.model import gradstats as gs
        >>> opt = nnx.Optimizer(nnx.Linear(2, 1, rngs=nnx.Rngs(0)),
        ...                     optax.chain(gs.gradient_noise_scale(8), optax.sgd(0.1)),
        ...                     wrt=nnx.Param)
        >>> get_grad_params(opt).sqr
        0.0
    """
    gp = gradstats.get_grad_params(opt_state(optimizer))
    if any(isinstance(x, jax.core.Tracer) for x in gp):
        return gp
    return GradParams(float(gp.sqr), float(gp.var))


def stats_summary(optimizer: Any) -> gradstats.StatsSummary:
    """The :class:`~goodput_jax.model.gradstats.StatsSummary` ``(count, sqr, var)`` of an
    ``nnx.Optimizer``'s statistics: return it from the step, and
    :class:`~goodput_jax.integrations.GoodputHooks` reads it (a few scalars computed in
    the step's own program).

    Example:
        >>> import optax
        >>> from goodput_jax.model import gradstats as gs
        >>> opt = nnx.Optimizer(nnx.Linear(2, 1, rngs=nnx.Rngs(0)),
        ...                     optax.chain(gs.gradient_noise_scale(8), optax.sgd(0.1)),
        ...                     wrt=nnx.Param)
        >>> [round(float(v), 6) for v in stats_summary(opt)]
        [0.0, 0.0, 1e-06]
    """
    return gradstats.stats_summary(get_grad_stats(optimizer))


def split_loss(loss_fn: Callable[[Any, Any], Any], model: nnx.Module,
               wrt: Any = nnx.Param) -> tuple[Callable[[Any, Any], Any], Any]:
    """An NNX ``loss_fn(model, batch)`` as ``(pure_loss_fn(params, batch), params)``.

    ``params`` are the model's ``wrt`` variables (an ``nnx.State``: a pytree of arrays);
    the rest of the model (buffers, RNG state) is closed over as it is now. Train
    ``params`` with any functional step (:func:`goodput_jax.adaptive.make_train_step`,
    :func:`goodput_jax.model.gradstats.microbatch_grads`) and write them back with
    ``nnx.update(model, params)``.

    Raises:
        TypeError: ``model`` is not an ``nnx.Module``, or ``loss_fn`` is not callable.

    Example:
        >>> import jax.numpy as jnp
        >>> model = nnx.Linear(2, 1, rngs=nnx.Rngs(0))
        >>> loss, params = split_loss(lambda m, b: jnp.mean(m(b) ** 2), model)
        >>> loss(params, jnp.zeros((4, 2))).shape
        ()
    """
    if not isinstance(model, nnx.Module):
        raise TypeError(f"model ({model!r:.80}) must be a flax.nnx.Module")
    if not callable(loss_fn):
        raise TypeError(f"loss_fn ({loss_fn!r}) must be callable as loss_fn(model, batch)")
    graphdef, params, *rest = nnx.split(model, wrt, ...)  # two filters: one rest state

    def pure_loss_fn(p: Any, batch: Any) -> Any:
        return loss_fn(nnx.merge(graphdef, p, *rest, copy=True), batch)

    return pure_loss_fn, params


def grads_and_stats(loss_fn: Callable[[Any, Any], Any], model: nnx.Module, optimizer: Any,
                    batch: Any, num_microbatches: int = 4, *,
                    preconditioner: Callable[[Any], Any] | None = gradstats.auto_preconditioner,
                    sample: Any = True) -> tuple[Any, Any, gradstats.GradSqNorms]:
    """``(loss, grads, norms)`` of an NNX model, inside an ``nnx.jit`` step.

    :func:`goodput_jax.model.gradstats.microbatch_grads` over ``num_microbatches``
    equal parts of ``batch``, on the model's ``nnx.Param`` variables, preconditioned with
    ``preconditioner(opt_state(optimizer))`` (Adam's bias-corrected second moment with
    the default; None: the raw gradient). Hand ``grads`` and the norms to the optimizer:
    ``optimizer.update(model, grads, grad_sqnorms=norms)``.

    Example:
        >>> import jax.numpy as jnp, optax
        >>> from goodput_jax.model import gradstats as gs
        >>> model = nnx.Linear(2, 1, rngs=nnx.Rngs(0))
        >>> opt = nnx.Optimizer(model, optax.chain(gs.gradient_noise_scale(8), optax.sgd(0.1)),
        ...                     wrt=nnx.Param)
        >>> @nnx.jit
        ... def step(model, opt, x):
        ...     loss, grads, sq = grads_and_stats(lambda m, b: jnp.mean(m(b) ** 2), model, opt, x, 2)
        ...     opt.update(model, grads, grad_sqnorms=sq)
        ...     return loss, stats_summary(opt)
        >>> loss, summary = step(model, opt, jnp.ones((8, 2)))
        >>> int(summary.count)
        1
    """
    pure_loss_fn, params = split_loss(loss_fn, model)
    pre = None if preconditioner is None else preconditioner(opt_state(optimizer))
    return gradstats.microbatch_grads(pure_loss_fn, params, batch, num_microbatches,
                                      preconditioner=pre, sample=sample)
