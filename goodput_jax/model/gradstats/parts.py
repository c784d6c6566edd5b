"""The parts of one device's batch: ``(S, T)`` from microbatches or halves of it.

* (b) :func:`microbatch_grads`: ``lax.scan`` accumulation in one step;
* (e) :func:`split_grads`: one device, no accumulation: the batch is split in two
  (or more) parts on sampled steps, so the unbiased estimator applies there too;

plus the loops :func:`~goodput_jax.model.gradstats.data_parallel_grads` runs on each
device (static and traced microbatch counts, two accumulators for Adam's floor), the
``sample=`` conditional and :func:`differenced_sqnorms` (this and the previous gradient
as two parts: AdaptDL's one-replica estimator, biased by the parameters' movement between
the two steps; ``gradient_noise_scale(differenced=True)`` only). The helpers across
devices and groups are in :mod:`.collect`, which re-exports these.

Example:
    >>> loss = lambda w, b: jnp.mean((b["x"] * w - b["y"]) ** 2)
    >>> b = {"x": jnp.arange(8.0), "y": jnp.ones(8)}
    >>> microbatch_grads(loss, jnp.float32(0.5), b, 4)[2].count
    4
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from goodput_jax.model.gradstats.estimate import GradSqNorms, _check_positive_int
from goodput_jax.model.gradstats.precondition import Preconditioner, sqnorm

#: A squared norm of a gradient pytree (a float32 scalar).
_Norm = Callable[[Any], jax.Array]

__all__ = [
    "differenced_sqnorms",
    "microbatch_grads",
    "split_grads",
]

def _pre_valid(preconditioner: Preconditioner | None, sample: Any = True) -> Any:
    valid = True if preconditioner is None else preconditioner.valid
    if sample is True:
        return valid
    return jnp.logical_and(jnp.asarray(valid, jnp.bool_), sample)


def _check_sample(sample: Any) -> Any:
    """``sample`` as a Python bool or a scalar bool array (a clear error otherwise)."""
    if isinstance(sample, bool):
        return sample
    if (not isinstance(sample, (jax.Array, np.ndarray, np.bool_)) or np.shape(sample) != ()
            or sample.dtype != np.bool_):
        raise TypeError(
            f"sample ({sample!r}) must be a bool or a scalar bool array, e.g. "
            "gradstats.sample_now(opt_state)"
        )
    return jnp.asarray(sample)


def _zero_like(tree: Any) -> jax.Array:
    """A float32 scalar 0 that varies over the mesh axes the leaves of ``tree`` vary over.

    Inside ``jax.shard_map`` (``check_vma=True``) a value's type records the mesh
    axes it varies over; ``jnp.zeros_like`` keeps them, so the sum of one
    zero per leaf varies over their union, as any reduction of the leaves
    does. Outside ``shard_map`` it is a plain 0 (XLA folds the sum away).
    """
    zero = jnp.zeros([], jnp.float32)
    for x in jax.tree.leaves(tree):
        zero = zero + jnp.zeros_like(x, dtype=jnp.float32, shape=())
    return zero


def _when(sample: Any, fn: Callable[[], jax.Array], like: Any = ()) -> jax.Array:
    """``fn()`` (a float32 scalar) on sampled steps, else 0.0 without doing the work.

    ``sample`` is True (always: no conditional at all), False (never) or a
    traced bool (a ``lax.cond``: skipped steps pay nothing for the norms).
    ``like``: the arrays ``fn()`` reduces, so that the 0 of skipped steps has
    the type of ``fn()``'s result inside ``shard_map`` (see :func:`_zero_like`).
    """
    if sample is True:
        return fn()
    zero = _zero_like(like)
    if sample is False:
        return zero
    return jax.lax.cond(sample, lambda: jnp.asarray(fn(), jnp.float32), lambda: zero)


def differenced_sqnorms(
    grads: Any,
    prev_grads: Any,
    batch_size: Any,
    preconditioner: Preconditioner | None = None,
) -> GradSqNorms:
    """``(S, T)`` of the differenced estimator: this and the previous step's gradient as two parts.

    Typed ``Any``: ``grads`` and ``prev_grads`` are pytrees (any structure of arrays), ``batch_size`` a Python value or a traced JAX array.

    Example:
        >>> g, p = {"w": jnp.array([1.0, 0.0])}, {"w": jnp.array([0.0, 1.0])}
        >>> [float(v) for v in differenced_sqnorms(g, p, 8)[:2]]
        [1.0, 0.5]
    """
    s = 0.5 * (sqnorm(grads, preconditioner) + sqnorm(prev_grads, preconditioner))
    mean = jax.tree.map(
        lambda a, b: 0.5 * (a.astype(jnp.float32) + b.astype(jnp.float32)), grads, prev_grads
    )
    t = sqnorm(mean, preconditioner)
    return GradSqNorms(s, t, 2, 2 * jnp.asarray(batch_size), _pre_valid(preconditioner))


# --------------------------------------------------------------------------- collection helpers


def _leading_size(batch: Any, name: str = "batch") -> int:
    leaves = jax.tree.leaves(batch)
    if not leaves:
        raise ValueError(f"{name} is empty; it must be a pytree of arrays with a batch axis")
    sizes = {int(x.shape[0]) if jnp.ndim(x) else -1 for x in leaves}
    if len(sizes) != 1 or -1 in sizes:
        raise ValueError(
            f"{name} leaves must share one leading batch axis; got leading sizes {sorted(sizes)}"
        )
    return sizes.pop()


def _split(batch: Any, parts: int, name: str) -> Any:
    size = _leading_size(batch)
    if size % parts:
        raise ValueError(f"batch size ({size}) is not divisible by {name} ({parts})")
    return jax.tree.map(lambda x: x.reshape((parts, size // parts) + x.shape[1:]), batch)


def _barrier_norm(preconditioner: Preconditioner | None) -> _Norm:
    """``sqnorm`` with ``preconditioner``, for a loop over microbatches. Adam: the
    multipliers 1/(sqrt(nu)+e) are loop-invariant, and XLA would hoist them out of the loop
    into a gradient-sized buffer that lives through it; a barrier ties nu to each
    microbatch's gradient, so each norm stays one fused reduction over (g, nu)."""
    if preconditioner is None:
        return sqnorm
    pre = preconditioner

    def norm(tree: Any) -> jax.Array:
        tree, nu = jax.lax.optimization_barrier((tree, pre.nu))
        return sqnorm(tree, pre._replace(nu=nu))

    return norm


def _value_and_grad(loss_fn: Callable, has_aux: bool) -> Callable:
    return jax.value_and_grad(loss_fn, has_aux=has_aux)


def _accumulate(
    loss_fn: Callable,
    params: Any,
    batch: Any,
    num_microbatches: int,
    preconditioner: Preconditioner | None,
    has_aux: bool,
    sample: Any = True,
) -> tuple[Any, Any, Any, jax.Array, _Norm]:
    """Mean loss, aux (stacked), mean gradient, mean per-microbatch squared norm, norm used.

    The last item is the norm function the scan used (``norm(tree)``), or the plain
    preconditioned norm when no scan ran.
    """
    vg = _value_and_grad(loss_fn, has_aux)
    if num_microbatches == 1:
        value, grads = vg(params, batch)
        loss, aux = value if has_aux else (value, None)
        if has_aux:
            aux = jax.tree.map(lambda x: jnp.expand_dims(x, 0), aux)
        local = _when(sample, lambda: sqnorm(grads, preconditioner), (grads, preconditioner))
        return loss, aux, grads, local, functools.partial(sqnorm, preconditioner=preconditioner)
    micro = _split(batch, num_microbatches, "num_microbatches")
    # Adam: the multipliers 1/(sqrt(nu)+e) are loop-invariant, and XLA would
    # hoist them out of the scan into a gradient-sized buffer that lives through
    # the loop. The barrier ties nu to this microbatch's gradient, so each norm
    # stays one fused reduction over (g, nu): no buffer, and measured faster
    # than the materialised multipliers (one pass less over memory).
    norm = _barrier_norm(preconditioner)

    def body(carry: tuple[Any, jax.Array, jax.Array], mb: Any,
             ) -> tuple[tuple[Any, jax.Array, jax.Array], Any]:
        acc, sq, loss_sum = carry
        value, g = vg(params, mb)
        loss, aux = value if has_aux else (value, None)
        acc = jax.tree.map(lambda a, x: a + x.astype(a.dtype), acc, g)
        part = _when(sample, lambda: norm(g), (g, preconditioner))
        return (acc, sq + part, loss_sum + loss.astype(jnp.float32)), aux

    # Inside shard_map the scan carry varies over the union of the inputs'
    # varying mesh axes (the gradients and norms vary over a subset of them).
    zero = _zero_like((params, batch, preconditioner))

    def zeros(shape: tuple[int, ...], dtype: Any) -> jax.Array:
        return jnp.zeros(shape, dtype) + zero.astype(dtype)

    acc0 = jax.tree.map(lambda p: zeros(p.shape, jnp.promote_types(p.dtype, jnp.float32)), params)
    (acc, sq, loss_sum), aux = jax.lax.scan(body, (acc0, zero, zero), micro)
    inv = 1.0 / num_microbatches
    grads = jax.tree.map(lambda a, p: (a * inv).astype(p.dtype), acc, params)
    return loss_sum * inv, (aux if has_aux else None), grads, sq * inv, norm


def _accumulate_traced(
    loss_fn: Callable,
    params: Any,
    batch: Any,
    num_microbatches: int,
    num_active: jax.Array,
    preconditioner: Preconditioner | None,
    micro_norms: bool,
    sample: Any = True,
) -> tuple[Any, Any, jax.Array]:
    """Mean loss, mean gradient and mean per-microbatch squared norm (0 unless
    ``micro_norms``) over the first ``num_active`` of ``num_microbatches`` microbatches.

    A ``lax.fori_loop`` with the traced trip count ``num_active``: one compiled program
    serves every count up to ``num_microbatches``, and the microbatches past
    ``num_active`` are never read.
    """
    vg = _value_and_grad(loss_fn, False)
    micro = _split(batch, num_microbatches, "num_microbatches")
    norm = _barrier_norm(preconditioner)  # as in _accumulate

    def body(i: jax.Array, carry: tuple[Any, jax.Array, jax.Array],
             ) -> tuple[Any, jax.Array, jax.Array]:
        acc, sq, loss_sum = carry
        mb = jax.tree.map(lambda x: jax.lax.dynamic_index_in_dim(x, i, 0, keepdims=False), micro)
        loss, g = vg(params, mb)
        acc = jax.tree.map(lambda a, x: a + x.astype(a.dtype), acc, g)
        if micro_norms:
            sq = sq + _when(sample, lambda: norm(g), (g, preconditioner))
        return acc, sq, loss_sum + loss.astype(jnp.float32)

    zero = _zero_like((params, batch, preconditioner))

    def zeros(p: jax.Array) -> jax.Array:
        dt = jnp.promote_types(p.dtype, jnp.float32)
        return jnp.zeros(p.shape, dt) + zero.astype(dt)

    acc0 = jax.tree.map(zeros, params)
    acc, sq, loss_sum = jax.lax.fori_loop(0, num_active, body, (acc0, zero, zero))
    inv = 1.0 / num_active.astype(jnp.float32)
    grads = jax.tree.map(lambda a, p: (a * inv.astype(a.dtype)).astype(p.dtype), acc, params)
    return loss_sum * inv, grads, sq * inv


def _accumulate_traced_halves(
    loss_fn: Callable,
    params: Any,
    batch: Any,
    num_microbatches: int,
    num_active: jax.Array,
    preconditioner: Preconditioner,
    sample: Any = True,
) -> tuple[jax.Array, Any, jax.Array, jax.Array]:
    """Mean loss, mean gradient, ``S`` and ``T`` over the first ``num_active`` (>= 2) of
    ``num_microbatches`` microbatches, as two parts, with Adam's preconditioner floored at
    the step's mean gradient (:meth:`Preconditioner.updated`), as on several devices.

    The microbatches are summed into two accumulators, the first ``h = num_active // 2``
    and the rest (``a`` and ``b`` examples): ``S = (a |G_a|^2 + b |G_b|^2) / (a + b)`` has
    the expectation of two equal halves' ``S`` (``|g|^2 + 2 tr(Sigma) / (a + b)``) for any
    ``h``, so ``count`` is 2. Each microbatch's norm with ``nu`` from before the step (the
    per-microbatch ``S``) cannot take the floor, which needs the mean of them all: in one
    device's accumulation loop a microbatch that activates a ReLU unit no earlier batch
    had gave ``g / eps`` (the adaptive benchmark's CNN with AdamW, two microbatches of 128:
    the noise scale read 6e4x the per-example truth, then infinite). The cost: a second
    float32 gradient accumulator in the loop (one gradient's size)."""
    vg = _value_and_grad(loss_fn, False)
    micro = _split(batch, num_microbatches, "num_microbatches")
    h = num_active // 2

    def body(i: jax.Array, carry: tuple[Any, jax.Array]) -> tuple[Any, jax.Array]:
        acc, loss_sum = carry
        mb = jax.tree.map(lambda x: jax.lax.dynamic_index_in_dim(x, i, 0, keepdims=False), micro)
        loss, g = vg(params, mb)
        acc = jax.tree.map(lambda a, x: a + x.astype(a.dtype), acc, g)
        return acc, loss_sum + loss.astype(jnp.float32)

    zero = _zero_like((params, batch, preconditioner))

    def zeros(p: jax.Array) -> jax.Array:  # as _accumulate: float32 at least (float64 parameters stay float64)
        dt = jnp.promote_types(p.dtype, jnp.float32)
        return jnp.zeros(p.shape, dt) + zero.astype(dt)

    acc0 = jax.tree.map(zeros, params)
    # two loops, one accumulator each (one pass per microbatch, as the plain loop)
    acc_a, loss_sum = jax.lax.fori_loop(0, h, body, (acc0, zero))
    acc_b, loss_sum = jax.lax.fori_loop(h, num_active, body, (acc0, loss_sum))
    k = num_active.astype(jnp.float32)
    fa, fb = h.astype(jnp.float32), (num_active - h).astype(jnp.float32)
    mean = jax.tree.map(lambda a, b: (a + b) / k, acc_a, acc_b)

    def local() -> jax.Array:
        pre = preconditioner.updated(mean)
        return (sqnorm(acc_a, pre) / fa + sqnorm(acc_b, pre) / fb) / k

    like = (mean, preconditioner)
    s = _when(sample, local, like)
    t = _when(sample, lambda: sqnorm(mean, preconditioner.updated(mean)), like)
    grads = jax.tree.map(lambda m, p: m.astype(p.dtype), mean, params)
    return loss_sum / k, grads, s, t


def _check_num_active(num_active: Any, num_microbatches: int) -> jax.Array:
    """``num_active`` as an int32 scalar (a clear error otherwise; a concrete value is
    checked against ``num_microbatches``)."""
    if isinstance(num_active, bool) or np.ndim(num_active) != 0 or not (
            jnp.issubdtype(jnp.result_type(num_active), jnp.integer)):
        raise TypeError(f"num_active ({num_active!r}) must be an integer scalar (int32 array "
                        "or int)")
    if isinstance(num_active, (int, np.integer)) and not 1 <= num_active <= num_microbatches:
        raise ValueError(f"num_active ({num_active}) must be in [1, num_microbatches "
                         f"({num_microbatches})]")
    return jnp.asarray(num_active, jnp.int32)


def microbatch_grads(
    loss_fn: Callable,
    params: Any,
    batch: Any,
    num_microbatches: int,
    *,
    preconditioner: Preconditioner | None = None,
    has_aux: bool = False,
    sample: Any = True,
) -> tuple[Any, Any, GradSqNorms]:
    """Mode (b): gradient accumulation over microbatches in a ``lax.scan``, with ``(S, T)``.

    Typed ``Any``: ``params`` and ``batch`` are pytrees (any structure of arrays), ``sample`` a Python value or a traced JAX array; the loss is the loss function's own.

    Splits every leaf of ``batch`` along its leading axis into
    ``num_microbatches`` equal microbatches, accumulates ``grad(loss_fn)`` over
    them in a scan (one gradient-sized accumulator, as any accumulation needs)
    and adds each microbatch's squared norm to a scalar on the way. ``loss_fn``
    must return the *mean* loss over its microbatch.

    With two microbatches and an Adam preconditioner that knows its ``b2``
    (:func:`auto_preconditioner`'s; no ``has_aux``), both gradients are kept (a scan's
    two outputs: the memory of the accumulating scan's sum and current gradient) and the
    norms take ``nu`` floored at their mean (:meth:`Preconditioner.updated`), as
    :func:`split_grads` does: a microbatch's norm with ``nu`` from before the step is
    ``g / eps`` in the elements of a ReLU unit no earlier batch activated. More
    microbatches keep ``nu`` as it is (the floor would need a second gradient-sized
    buffer through the loop; docs/concepts.md).

    Args:
        loss_fn: ``loss_fn(params, microbatch) -> loss`` (or ``(loss, aux)``).
        params: parameters pytree.
        batch: pytree of arrays with a shared leading batch axis.
        num_microbatches: number of microbatches (>= 1; 1 gives ``count = 1``, from
            which :func:`gradient_noise_scale` takes no statistics: use 2 on one device).
        preconditioner: from :func:`auto_preconditioner`, or None.
        has_aux: as in ``jax.value_and_grad``; aux comes back stacked over microbatches.
        sample: whether this step takes the statistics: True (every step),
            or a scalar bool array such as :func:`sample_now` ``(opt_state)``
            for ``gradient_noise_scale(..., every=k)``; on other steps the
            norms are skipped inside a ``lax.cond`` and cost nothing.

    Returns:
        ``(loss, grads, sqnorms)`` with ``loss`` the mean loss (``(loss, aux)``
        when ``has_aux``), ``grads`` the mean gradient and ``sqnorms`` a
        :class:`GradSqNorms` to pass to ``tx.update(..., grad_sqnorms=sqnorms)``.

    Example:
        >>> loss = lambda w, b: jnp.mean((b["x"] * w - b["y"]) ** 2)
        >>> b = {"x": jnp.arange(8.0), "y": jnp.ones(8)}
        >>> l, g, sq = microbatch_grads(loss, jnp.float32(0.5), b, 4)
        >>> sq.count, sq.batch_size
        (4, 8)
    """
    n = _check_positive_int(num_microbatches, "num_microbatches")
    size = _leading_size(batch)
    sample = _check_sample(sample)
    if n == 2 and preconditioner is not None and preconditioner.b2 is not None \
            and not has_aux:
        # Adam, two microbatches: both gradients kept (a scan's two outputs, the memory of
        # the accumulating scan's sum and current one), norms with nu floored at their mean
        _split(batch, n, "num_microbatches")  # its divisibility error, by this name
        loss, grads, local, total = _split_or_plain(loss_fn, params, batch, 2, preconditioner,
                                                    sample)
        grads = _ordered_after(grads, total + local)
        return loss, grads, GradSqNorms(local, total, n, size,
                                        _pre_valid(preconditioner, sample))
    loss, aux, grads, local, norm = _accumulate(loss_fn, params, batch, n, preconditioner,
                                                has_aux, sample)
    total = _when(sample, lambda: norm(grads), (grads, preconditioner))
    if preconditioner is not None:
        grads = _ordered_after(grads, total)
    out = (loss, aux) if has_aux else loss
    return out, grads, GradSqNorms(local, total, n, size, _pre_valid(preconditioner, sample))


def _split_or_plain(
    loss_fn: Callable,
    params: Any,
    batch: Any,
    parts: int,
    preconditioner: Preconditioner | None,
    sample: Any,
) -> tuple[Any, Any, jax.Array, jax.Array]:
    """Mean loss, mean gradient, ``S`` and ``T``: the batch split in ``parts`` on sampled
    steps (a ``lax.scan`` of ``parts`` gradients), one plain gradient on the others (``S``
    and ``T`` 0 there). A traced ``sample`` picks the branch in a ``lax.cond``."""

    def split() -> tuple[Any, Any, jax.Array, jax.Array]:
        if parts == 2 and preconditioner is not None and preconditioner.b2 is not None:
            return _halves_after(loss_fn, params, batch, preconditioner)
        loss, _, grads, local, norm = _accumulate(loss_fn, params, batch, parts,
                                                  preconditioner, False, True)
        return loss, grads, local, norm(grads)

    def plain() -> tuple[Any, Any, jax.Array, jax.Array]:
        loss, grads = _value_and_grad(loss_fn, False)(params, batch)
        zero = _zero_like((grads, preconditioner))
        return loss, grads, zero, zero

    if sample is True:
        return split()
    if sample is False:
        return plain()

    def as_f32(out: tuple[Any, Any, jax.Array, jax.Array],
               ) -> tuple[jax.Array, Any, jax.Array, jax.Array]:
        loss, grads, local, total = out
        return (jnp.asarray(loss, jnp.float32), grads, jnp.asarray(local, jnp.float32),
                jnp.asarray(total, jnp.float32))

    return jax.lax.cond(sample, lambda: as_f32(split()), lambda: as_f32(plain()))


def _halves_after(
    loss_fn: Callable, params: Any, batch: Any, preconditioner: Preconditioner
) -> tuple[Any, Any, jax.Array, jax.Array]:
    """Mean loss, mean gradient, ``S`` and ``T`` of the batch in two halves, with Adam's
    preconditioner floored at this step's mean gradient (:meth:`Preconditioner.updated`),
    as the devices' whole gradients are on several devices: ``nu`` before this step is
    exactly 0 in the elements of a ReLU unit no earlier batch activated, and a half that
    activates one gives ``g / eps`` (one device, the adaptive benchmark's CNN with AdamW:
    the noise scale read 1e5-7e6x the per-example truth, or infinite).

    The two halves' gradients come out of a ``lax.scan`` as its stacked outputs (two
    gradients, where the accumulating scan holds its sum and the current one), so the
    norms wait for their mean without a second pass over the batch."""
    vg = _value_and_grad(loss_fn, False)

    def body(carry: None, half: Any) -> tuple[None, tuple[jax.Array, Any]]:
        loss, g = vg(params, half)
        return carry, (jnp.asarray(loss, jnp.float32), g)

    _, (losses, pair) = jax.lax.scan(body, None, _split(batch, 2, "parts"))
    mean = jax.tree.map(lambda g: (g[0].astype(jnp.float32) + g[1].astype(jnp.float32)) * 0.5,
                        pair)
    pre = preconditioner.updated(mean)
    local = (sqnorm(jax.tree.map(lambda g: g[0], pair), pre)
             + sqnorm(jax.tree.map(lambda g: g[1], pair), pre)) * 0.5
    grads = jax.tree.map(lambda m, p: m.astype(p.dtype), mean, params)
    return (losses[0] + losses[1]) * 0.5, grads, local, sqnorm(mean, pre)


def split_grads(
    loss_fn: Callable,
    params: Any,
    batch: Any,
    *,
    parts: int = 2,
    preconditioner: Preconditioner | None = None,
    sample: Any = True,
) -> tuple[Any, Any, GradSqNorms]:
    """Mode (e): one device, no accumulation, an unbiased ``(S, T)``: the batch in ``parts``.

    Typed ``Any``: ``params`` and ``batch`` are pytrees (any structure of arrays), ``sample`` a Python value or a traced JAX array; the loss is the loss function's own.

    The one-device alternative to the differenced estimator (which takes this and the
    previous step's gradient as the two parts, so the parameters' movement between the
    steps counts as noise: up to 2e6x the per-example truth in training, now only an
    explicit opt-in). On a sampled step the
    batch is split into ``parts`` equal parts whose gradients are taken one after the
    other (a ``lax.scan``, as :func:`microbatch_grads`) and averaged: the same FLOPs as
    one gradient of the whole batch, at ``parts`` times smaller matrix products and one
    gradient-sized accumulator. On the other steps (``sample`` False, e.g.
    :func:`sample_now` with ``gradient_noise_scale(M0, every=k)``) it is the plain
    gradient of the whole batch, in a ``lax.cond``. ``loss_fn`` must return the mean
    loss of its batch. With two parts and an Adam preconditioner that knows its
    ``b2`` (:func:`auto_preconditioner`'s), the two halves' gradients are kept (a
    ``lax.scan``'s stacked outputs) and both norms take ``nu`` floored at their mean
    (:meth:`Preconditioner.updated`), as on several devices.

    Args:
        loss_fn: ``loss_fn(params, batch) -> mean loss``.
        params: parameters pytree.
        batch: pytree of arrays with a shared leading axis divisible by ``parts``.
        parts: parts of a sampled step (>= 2).
        preconditioner: from :func:`auto_preconditioner`, or None.
        sample: True (every step), False, or a scalar bool array (:func:`sample_now`).

    Returns:
        ``(loss, grads, sqnorms)`` like :func:`microbatch_grads`, with
        ``sqnorms.count == parts`` (static) and ``sqnorms.valid`` False on unsampled
        steps.

    Example:
        >>> loss = lambda w, b: jnp.mean((b["x"] * w - b["y"]) ** 2)
        >>> b = {"x": jnp.arange(8.0), "y": jnp.ones(8)}
        >>> split_grads(loss, jnp.float32(0.5), b)[2].count
        2
    """
    parts = _check_positive_int(parts, "parts")
    if parts < 2:
        raise ValueError(f"parts ({parts}) must be at least 2")
    size = _leading_size(batch)
    if size % parts:
        raise ValueError(f"batch size ({size}) is not divisible by parts ({parts})")
    sample = _check_sample(sample)
    loss, grads, local, total = _split_or_plain(loss_fn, params, batch, parts, preconditioner,
                                                sample)
    if preconditioner is not None:
        grads = _ordered_after(grads, total + local)
    return loss, grads, GradSqNorms(local, total, parts, size, _pre_valid(preconditioner, sample))


def _ordered_after(grads: Any, scalar: jax.Array) -> Any:
    """``grads`` unchanged in value, but data-dependent on ``scalar``.

    The preconditioned ``T`` reads the optimizer's ``nu``, and so does the
    optimizer's update, which then overwrites ``nu`` in place (a donated
    state). With no data path between the two, XLA cannot prove the read
    comes first and copies every ``nu`` leaf at the start of the step
    (measured: +5 % step time for the MLP on CPU). Adding an exact zero
    derived from ``T`` to the returned gradients orders the read before the
    update; the add fuses into the optimizer's elementwise loop. The zero is
    finite even when ``T`` is not (no NaN leaks into the gradients).
    """
    zero = jnp.clip(jnp.nan_to_num(scalar, nan=0.0, posinf=0.0, neginf=0.0), -1.0, 1.0) * 0.0
    return jax.tree.map(lambda x: x + zero.astype(x.dtype), grads)
