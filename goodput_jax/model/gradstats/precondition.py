"""Adam-type preconditioning of the gradient norms, found in any optax state.

For Adam-type optimizers the statistics are taken of the preconditioned
gradient ``g / (sqrt(nu_hat) + eps)``; :func:`auto_preconditioner` finds
``nu`` in an optax state tree (chains, ``inject_hyperparams``, ``MultiSteps``)
so the same train step serves SGD and Adam. :func:`sqnorm` computes a
(preconditioned) squared norm as one fused reduction per leaf.

Example:
    >>> import optax
    >>> auto_preconditioner(optax.adam(1e-3).init({"w": jnp.zeros(2)})) is not None
    True
"""

from __future__ import annotations

import functools
import math
import sys
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

__all__ = [
    "DEFAULT_MIN_COUNT",
    "Preconditioner",
    "adam_preconditioner",
    "auto_preconditioner",
    "find_adam_state",
    "nu_switch_factor",
    "rescale_nu",
    "sqnorm",
]


#: Adam steps the second moment must rest on before the preconditioned statistics are
#: taken (:func:`adam_preconditioner`'s ``min_count``). Over the first steps
#: ``nu_hat`` is the square of one to a few gradients, and ``g / sqrt(nu_hat)`` of
#: another batch's gradient is heavy-tailed (one ``nu`` element near 0 makes the norm
#: enormous): samples of that time were 1e2-1e6x the later truth.
DEFAULT_MIN_COUNT = 20


class Preconditioner(NamedTuple):
    """Adam-type preconditioning ``g -> g / (sqrt(nu / bias_correction) + eps)``.

    It holds the optimizer's own second-moment buffers and two scalars; the
    per-parameter multipliers are computed inside each norm's fused reduction,
    so no gradient-sized buffer is materialised for them.

    Attributes:
        nu: second-moment pytree with the gradients' structure.
        bias_correction: scalar ``1 - b2 ** count`` (1 while invalid).
        eps: Adam's epsilon.
        valid: scalar bool; False while the second moment is still empty.
        b2: Adam's ``b2`` (None: unknown). With it, :meth:`updated` floors ``nu`` at
            this step's share of Adam's own, which the collection helpers apply where
            the step's mean gradient is known before the norms
            (:func:`data_parallel_grads` with the devices' whole gradients as the parts:
            the adaptive step's path on several replicas; and on one device, where the
            parts are two: :func:`split_grads` with two parts, ``data_parallel_grads``'s
            one-device paths, the adaptive step on one replica).
    """

    nu: Any
    bias_correction: Any
    eps: Any
    valid: Any
    b2: Any = None

    def updated(self, grads: Any) -> Preconditioner:
        """The preconditioner with ``nu`` floored at ``(1 - b2) * grads**2``, ``grads`` this
        step's mean gradient: the share of this gradient in the ``nu`` Adam divides this
        step's update by, so no element is preconditioned more strongly than Adam does.

        Typed ``Any``: ``grads`` is pytrees (any structure of arrays).

        ``nu`` before the step (``self``) is exactly 0 where every earlier gradient was 0
        (a ReLU unit that no batch so far has activated) while this batch's gradient is
        not: ``g / (sqrt(nu) + eps)`` is then ~``g / eps``, and such elements made the
        estimates 1e2-1e6x the truth (the adaptive benchmark's CNN). Elsewhere ``nu`` is
        unchanged (a floor, not Adam's ``b2 * nu + (1 - b2) * g**2``, whose correlation
        with this batch's noise moved the estimate 1.5x on the truth test's CNN); the
        bias correction is unchanged. ``self`` when ``b2`` is None.

        Example:
            >>> pre = Preconditioner({"w": jnp.array([0.0, 1.0])}, jnp.float32(0.5), 1e-8,
            ...                      True, 0.9)
            >>> [round(float(v), 3) for v in pre.updated({"w": jnp.array([2.0, 2.0])}).nu["w"]]
            [0.4, 1.0]
        """
        if self.b2 is None:
            return self
        b2 = jnp.asarray(self.b2, jnp.float32)
        leaves = jax.tree.leaves(grads)
        nus, tree = jax.tree.flatten(self.nu)
        if len(nus) != len(leaves):
            raise ValueError(
                f"preconditioner has {len(nus)} leaves but the gradient has {len(leaves)}; "
                "it must have the gradient's structure"
            )
        new = [jnp.maximum(nu.astype(jnp.float32),
                           (1.0 - b2) * jnp.square(g.astype(jnp.float32)))
               for nu, g in zip(nus, leaves)]
        return self._replace(nu=jax.tree.unflatten(tree, new))

    def scales(self) -> Any:
        """The multipliers ``1 / (sqrt(nu_hat) + eps)`` as a pytree (materialised; typed
        ``Any``: a pytree shaped like ``nu``, any structure)."""
        return jax.tree.map(self._scale_leaf, self.nu)

    def _scale_leaf(self, nu: Any) -> jax.Array:
        nu_hat = nu.astype(jnp.float32) / self.bias_correction
        return jnp.where(self.valid, 1.0 / (jnp.sqrt(nu_hat) + self.eps), 1.0)

    def _norm_scalars(self) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``(valid, c, e)`` with ``(g / (sqrt(nu / bc) + eps))^2 == c * (g / (sqrt(nu) + e))^2``.

        ``c = bc`` and ``e = eps * sqrt(bc)``: the bias correction leaves the
        per-element work, which is then one sqrt and ONE divide (instead of a
        divide by ``bc``, a sqrt and a reciprocal). ``c`` is 1 while invalid.
        """
        valid = jnp.asarray(self.valid, jnp.bool_)
        bc = jnp.asarray(self.bias_correction, jnp.float32)
        c = jnp.where(valid, bc, 1.0)
        e = jnp.asarray(self.eps, jnp.float32) * jnp.sqrt(jnp.where(valid, bc, 1.0))
        return valid, c, e


def _pre_leaf_sqsum(x: Any, nu: Any, valid: Any, e: Any) -> jax.Array:
    """``sum((x / (sqrt(nu) + e))^2)`` (``sum(x^2)`` while invalid), one fused reduction."""
    y = x.astype(jnp.float32)
    y = jnp.where(valid, y / (jnp.sqrt(nu.astype(jnp.float32)) + e), y)
    return jnp.sum(jnp.square(y))


# --------------------------------------------------------------------------- pure estimators


def sqnorm(tree: Any, preconditioner: Preconditioner | None = None) -> jax.Array:
    """Squared L2 norm of a pytree in float32, optionally preconditioned elementwise.

    Typed ``Any``: ``tree`` is pytrees (any structure of arrays).

    Example:
        >>> float(sqnorm({"a": jnp.array([3.0]), "b": jnp.array([4.0])}))
        25.0
    """
    leaves = jax.tree.leaves(tree)
    if preconditioner is None:
        terms = [jnp.sum(jnp.square(x.astype(jnp.float32))) for x in leaves]
    else:
        pleaves = jax.tree.leaves(preconditioner.nu)
        if len(pleaves) != len(leaves):
            raise ValueError(
                f"preconditioner has {len(pleaves)} leaves but the gradient has {len(leaves)}; "
                "it must have the gradient's structure"
            )
        valid, c, e = preconditioner._norm_scalars()
        terms = [_pre_leaf_sqsum(x, nu, valid, e) for x, nu in zip(leaves, pleaves)]
        if terms:
            return c * functools.reduce(jnp.add, terms)
    if not terms:
        return jnp.zeros([], jnp.float32)
    return functools.reduce(jnp.add, terms)


_ADAM_LIKE = (optax.ScaleByAdamState, optax.ScaleByAmsgradState)


def find_adam_state(opt_state: Any) -> Any | None:
    """The first Adam-like state (``ScaleByAdamState`` / ``ScaleByAmsgradState``) in a tree.

    Typed ``Any``: ``opt_state`` and the Adam state found are optax states (untyped upstream).

    Searches any optax state tree: chains, ``inject_hyperparams``, ``MultiSteps``,
    ``multi_transform`` and wrappers built here.

    Example:
        >>> tx = optax.chain(optax.clip(1.0), optax.adam(1e-3))
        >>> type(find_adam_state(tx.init({"w": jnp.zeros(2)}))).__name__
        'ScaleByAdamState'
        >>> find_adam_state(optax.sgd(0.1).init({"w": jnp.zeros(2)})) is None
        True
    """
    found = [
        x
        for x in jax.tree.leaves(opt_state, is_leaf=lambda x: isinstance(x, _ADAM_LIKE))
        if isinstance(x, _ADAM_LIKE)
    ]
    return found[0] if found else None


def _nnx_variable() -> type | None:
    """Flax NNX's ``Variable`` class when ``flax.nnx`` is loaded, else None.

    An ``nnx.Optimizer`` (whose state sits in ``OptVariable`` boxes) can only exist once
    ``flax.nnx`` is imported, so this never imports flax (the ``model`` extra has no flax).
    """
    nnx = sys.modules.get("flax.nnx")
    return None if nnx is None else nnx.Variable


def rescale_nu(opt_state: Any, factor: Any) -> Any:
    """``opt_state`` with every Adam-like second moment multiplied by ``factor``.

    Typed ``Any``: ``opt_state`` is an optax state (untyped upstream), ``factor`` a Python value or a traced JAX array.

    ``nu`` of each ``ScaleByAdamState`` (and ``nu`` and ``nu_max`` of each
    ``ScaleByAmsgradState``) found the way :func:`find_adam_state` finds them (chains,
    ``inject_hyperparams``, ``MultiSteps``, ``multi_transform``); ``mu``, ``count`` and
    everything else are the same arrays, and each leaf keeps its dtype and sharding. A
    state with no Adam-like part (SGD) comes back as it is. Pure JAX: ``factor`` may be
    a Python number or a traced scalar (it also runs inside ``jit``).

    An optax state (plain arrays) is not changed: a copy is returned. A Flax NNX
    ``nnx.Optimizer``, or its ``opt_state`` (arrays in ``OptVariable`` boxes), is rescaled
    **in place**, each ``nu`` box getting the new array, and returned itself:
    ``gradstats.rescale_nu(optimizer, f)`` (also inside ``nnx.jit``); an
    ``nnx.jit`` step on it runs the same compiled program afterwards (same shapes and
    dtypes). :meth:`~goodput_jax.adaptive.AdaptiveBatchSize.prepare_opt_state` takes an
    ``nnx.Optimizer`` the same way.

    At a batch-size switch, ``nu`` still holds the old batch size's gradients for about
    ``1 / (1 - b2)`` steps: scale it by :func:`nu_switch_factor` so that Adam's update at
    the new batch size is what the ``adam`` scaling rule assumes
    (:class:`~goodput_jax.adaptive.AdaptiveBatchSize` does this at its switches).

    Example:
        >>> st = optax.adam(1e-3).init({"w": jnp.zeros(2)})
        >>> st = optax.adam(1e-3).update({"w": jnp.array([2.0, 4.0])}, st)[1]
        >>> new = rescale_nu(st, 0.5)
        >>> [float(v) for v in new[0].nu["w"] / st[0].nu["w"]], new[0].mu is st[0].mu
        ([0.5, 0.5], True)
        >>> sgd = optax.sgd(0.1).init({"w": jnp.zeros(2)})
        >>> rescale_nu(sgd, 0.5) is sgd
        True

        Flax NNX, in place:

        >>> from flax import nnx
        >>> model = nnx.Linear(2, 1, rngs=nnx.Rngs(0))
        >>> opt = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)
        >>> _ = opt.update(model, nnx.grad(lambda m: jnp.sum(m(jnp.ones((1, 2)))))(model))
        >>> before = float(opt.opt_state[0].nu["bias"][...][0])
        >>> rescale_nu(opt, 0.5) is opt, float(opt.opt_state[0].nu["bias"][...][0]) / before
        (True, 0.5)
    """
    adam_states = [
        x
        for x in jax.tree.leaves(opt_state, is_leaf=lambda x: isinstance(x, _ADAM_LIKE))
        if isinstance(x, _ADAM_LIKE)
    ]
    if not adam_states:
        return opt_state

    def scale(leaf: Any) -> Any:
        return (leaf * factor).astype(leaf.dtype)

    variable = _nnx_variable()
    if variable is not None:
        # Flax NNX: the second moments sit in mutable boxes; give each its new array
        boxes = [v for st in adam_states
                 for part in ((st.nu, st.nu_max) if isinstance(st, optax.ScaleByAmsgradState)
                              else (st.nu,))
                 for v in jax.tree.leaves(part, is_leaf=lambda x: isinstance(x, variable))]
        if boxes and all(isinstance(v, variable) for v in boxes):
            for v in boxes:
                v.set_value(scale(v.get_value()))
            return opt_state

    def visit(x: Any) -> Any:
        if isinstance(x, optax.ScaleByAmsgradState):
            return x._replace(nu=jax.tree.map(scale, x.nu), nu_max=jax.tree.map(scale, x.nu_max))
        if isinstance(x, optax.ScaleByAdamState):
            return x._replace(nu=jax.tree.map(scale, x.nu))
        return x

    return jax.tree.map(visit, opt_state, is_leaf=lambda x: isinstance(x, _ADAM_LIKE))


def nu_switch_factor(noise_scale: float, old_batch_size: float,
                     new_batch_size: float) -> float | None:
    """The factor for :func:`rescale_nu` at a switch from ``old_batch_size`` to ``new_batch_size``.

    The expected change of ``E[g**2]``: a batch of ``M`` examples has
    ``E|g|**2 = |G|**2 + tr(Sigma) / M = |G|**2 * (1 + phi / M)``, with ``phi`` the
    gradient noise scale ``tr(Sigma) / |G|**2`` in samples (Pollux's ``phi``, the
    hooks' ``M0 * var / sqr``), so the factor is ``(1 + phi / M_new) / (1 + phi / M_old)``:
    ``M_old / M_new`` when noise dominates, 1 when it does not. None (rescale nothing)
    when ``phi`` is not finite and positive (``sqr <= 0`` reads, statistics not taken
    yet) or a batch size is not positive.

    Example:
        >>> round(nu_switch_factor(1e9, 32, 2048), 4)   # noise dominates: M_old / M_new
        0.0156
        >>> round(nu_switch_factor(96.0, 32, 96), 4)
        0.5
        >>> nu_switch_factor(float("inf"), 32, 64) is None
        True
    """
    phi, m_old, m_new = float(noise_scale), float(old_batch_size), float(new_batch_size)
    if not (math.isfinite(phi) and phi > 0) or not (m_old > 0 and m_new > 0):
        return None
    return (1.0 + phi / m_new) / (1.0 + phi / m_old)


def _inject_hyperparam(opt_state: Any, name: str) -> Any | None:
    states = [
        x
        for x in jax.tree.leaves(
            opt_state, is_leaf=lambda x: isinstance(x, optax.InjectHyperparamsState)
        )
        if isinstance(x, optax.InjectHyperparamsState)
    ]
    for st in states:
        if name in st.hyperparams:
            return st.hyperparams[name]
    return None


def adam_preconditioner(adam_state: Any, *, b2: Any = 0.999, eps: Any = 1e-8,
                        min_count: int = DEFAULT_MIN_COUNT) -> Preconditioner:
    """``1 / (sqrt(nu_hat) + eps)`` from an Adam state, ``nu_hat = nu / (1 - b2**count)``.

    Typed ``Any``: ``adam_state`` is optax's Adam state (untyped upstream), ``b2`` and ``eps`` a Python value or a traced JAX array.

    Invalid (``valid`` False, scale 1: the statistics skip the step) until the state has
    seen ``min_count`` updates, so that ``nu_hat`` rests on enough gradients (see
    :data:`DEFAULT_MIN_COUNT`). ``min_count=1`` is AdaptDL's rule (from the first
    update on).

    Example:
        >>> st = optax.ScaleByAdamState(jnp.int32(1), {"w": jnp.zeros(1)}, {"w": jnp.array([0.004])})
        >>> round(float(adam_preconditioner(st, min_count=1).scales()["w"][0]), 3)
        0.5
        >>> bool(adam_preconditioner(st).valid)
        False
    """
    min_count = _check_min_count(min_count)
    count = jnp.asarray(adam_state.count)
    valid = count >= min_count
    b2 = jnp.asarray(b2, jnp.float32)
    corr = jnp.where(valid, 1.0 - b2 ** jnp.maximum(count, 1).astype(jnp.float32), 1.0)
    return Preconditioner(nu=adam_state.nu, bias_correction=corr,
                          eps=jnp.asarray(eps, jnp.float32), valid=valid, b2=b2)


def _check_min_count(min_count: Any) -> int:
    if isinstance(min_count, bool) or not isinstance(min_count, int) or min_count < 1:
        raise ValueError(f"min_count ({min_count!r}) must be a positive integer")
    return min_count


def auto_preconditioner(
    opt_state: Any, *, b2: Any | None = None, eps: Any | None = None,
    min_count: int = DEFAULT_MIN_COUNT,
) -> Preconditioner | None:
    """The Adam preconditioner when ``opt_state`` holds an Adam-like state, else None.

    Typed ``Any``: ``opt_state`` is an optax state (untyped upstream), ``b2`` and ``eps`` a Python value or a traced JAX array.

    Call it on the optimizer state at the start of the train step and pass the
    result to the collection helpers (and to :func:`gradient_noise_scale`'s
    update as ``preconditioner=``): the same step then does the right thing for
    SGD and Adam. ``b2``/``eps`` default to values found in an
    ``optax.inject_hyperparams`` state, else to optax.adam's defaults
    (0.999, 1e-8); pass them when your Adam uses others. ``min_count``: the
    statistics wait for that many Adam updates (:func:`adam_preconditioner`).

    Example:
        >>> params = {"w": jnp.zeros(2)}
        >>> auto_preconditioner(optax.sgd(0.1).init(params)) is None
        True
        >>> auto_preconditioner(optax.adamw(1e-3).init(params)) is not None
        True
    """
    adam_state = find_adam_state(opt_state)
    if adam_state is None:
        return None
    if b2 is None:
        b2 = _inject_hyperparam(opt_state, "b2")
        b2 = 0.999 if b2 is None else b2
    if eps is None:
        eps = _inject_hyperparam(opt_state, "eps")
        eps = 1e-8 if eps is None else eps
    return adam_preconditioner(adam_state, b2=b2, eps=eps, min_count=min_count)

