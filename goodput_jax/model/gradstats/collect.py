"""Collection helpers: ``(S, T)`` from inside the user's train step, four ways.

* (a) :func:`data_parallel_grads` under ``jax.shard_map``: the loss and ``S``
  ride in the gradients' own all-reduce, ``T`` needs one scalar collective;
* (b) :func:`microbatch_grads`: ``lax.scan`` accumulation in one step;
* (c) accumulation across calls: :func:`goodput_jax.model.gradstats.multi_steps`
  (an optax wrapper, in :mod:`.transform`);
* (d) :func:`grouped_grads`: plain ``jit`` with an explicit group axis;
* (e) :func:`split_grads`: one device, no accumulation: the batch is split in two
  (or more) parts on sampled steps, so the unbiased estimator applies there too;

plus :func:`differenced_sqnorms` (this and the previous gradient as two parts:
AdaptDL's one-replica estimator, biased by the parameters' movement between the
two steps).
Each returns a :class:`GradSqNorms` for ``tx.update(..., grad_sqnorms=...)``;
``sample=`` skips the norms on unsampled steps inside a ``lax.cond``.

Only public JAX APIs are used: the mesh-axis bookkeeping inside ``shard_map``
goes through ``jnp.zeros_like`` and ``lax.axis_index`` (no reading of abstract
value fields), and Explicit mesh axes are recognised from the mesh's
``axis_types`` (no trying one API and catching its error).

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
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from goodput_jax.model.gradstats.estimate import GradSqNorms, _check_positive_int
from goodput_jax.model.gradstats.precondition import Preconditioner, _pre_leaf_sqsum, sqnorm

__all__ = [
    "data_parallel_grads",
    "differenced_sqnorms",
    "grouped_grads",
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
    sizes = {int(x.shape[0]) if getattr(x, "ndim", 0) else -1 for x in leaves}
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
) -> tuple[Any, Any, Any, jax.Array, Callable | None]:
    """Mean loss, aux (stacked), mean gradient, mean per-microbatch squared norm, norm used.

    The last item is the norm function the scan used (``norm(tree)``) or None
    when no scan ran.
    """
    vg = _value_and_grad(loss_fn, has_aux)
    if num_microbatches == 1:
        value, grads = vg(params, batch)
        loss, aux = value if has_aux else (value, None)
        if has_aux:
            aux = jax.tree.map(lambda x: jnp.expand_dims(x, 0), aux)
        local = _when(sample, lambda: sqnorm(grads, preconditioner), (grads, preconditioner))
        return loss, aux, grads, local, None
    micro = _split(batch, num_microbatches, "num_microbatches")
    # Adam: the multipliers 1/(sqrt(nu)+e) are loop-invariant, and XLA would
    # hoist them out of the scan into a gradient-sized buffer that lives through
    # the loop. The barrier ties nu to this microbatch's gradient, so each norm
    # stays one fused reduction over (g, nu): no buffer, and measured faster
    # than the materialised multipliers (one pass less over memory).
    if preconditioner is None:
        norm = sqnorm
    else:
        def norm(tree):
            tree, nu = jax.lax.optimization_barrier((tree, preconditioner.nu))
            return sqnorm(tree, preconditioner._replace(nu=nu))

    def body(carry, mb):
        acc, sq, loss_sum = carry
        value, g = vg(params, mb)
        loss, aux = value if has_aux else (value, None)
        acc = jax.tree.map(lambda a, x: a + x.astype(a.dtype), acc, g)
        part = _when(sample, lambda: norm(g), (g, preconditioner))
        return (acc, sq + part, loss_sum + loss.astype(jnp.float32)), aux

    # Inside shard_map the scan carry varies over the union of the inputs'
    # varying mesh axes (the gradients and norms vary over a subset of them).
    zero = _zero_like((params, batch, preconditioner))

    def zeros(shape, dtype):
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
    if preconditioner is None:
        norm = sqnorm
    else:  # as in _accumulate: keep nu tied to each microbatch's gradient (no hoisting)
        def norm(tree):
            tree, nu = jax.lax.optimization_barrier((tree, preconditioner.nu))
            return sqnorm(tree, preconditioner._replace(nu=nu))

    def body(i, carry):
        acc, sq, loss_sum = carry
        mb = jax.tree.map(lambda x: jax.lax.dynamic_index_in_dim(x, i, 0, keepdims=False), micro)
        loss, g = vg(params, mb)
        acc = jax.tree.map(lambda a, x: a + x.astype(a.dtype), acc, g)
        if micro_norms:
            sq = sq + _when(sample, lambda: norm(g), (g, preconditioner))
        return acc, sq, loss_sum + loss.astype(jnp.float32)

    zero = _zero_like((params, batch, preconditioner))
    def zeros(p):
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

    def body(i, carry):
        acc, loss_sum = carry
        mb = jax.tree.map(lambda x: jax.lax.dynamic_index_in_dim(x, i, 0, keepdims=False), micro)
        loss, g = vg(params, mb)
        acc = jax.tree.map(lambda a, x: a + x.astype(a.dtype), acc, g)
        return acc, loss_sum + loss.astype(jnp.float32)

    zero = _zero_like((params, batch, preconditioner))

    def zeros(p):  # as _accumulate: float32 at least (float64 parameters stay float64)
        dt = jnp.promote_types(p.dtype, jnp.float32)
        return jnp.zeros(p.shape, dt) + zero.astype(dt)

    acc0 = jax.tree.map(zeros, params)
    # two loops, one accumulator each (one pass per microbatch, as the plain loop)
    acc_a, loss_sum = jax.lax.fori_loop(0, h, body, (acc0, zero))
    acc_b, loss_sum = jax.lax.fori_loop(h, num_active, body, (acc0, loss_sum))
    k = num_active.astype(jnp.float32)
    fa, fb = h.astype(jnp.float32), (num_active - h).astype(jnp.float32)
    mean = jax.tree.map(lambda a, b: (a + b) / k, acc_a, acc_b)

    def local():
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
        num_microbatches: number of microbatches (>= 1; 1 gives ``count = 1``,
            for which :func:`gradient_noise_scale` uses the differenced estimator).
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
    if norm is None:
        norm = functools.partial(sqnorm, preconditioner=preconditioner)
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

    def split():
        if parts == 2 and preconditioner is not None and preconditioner.b2 is not None:
            return _halves_after(loss_fn, params, batch, preconditioner)
        loss, _, grads, local, norm = _accumulate(loss_fn, params, batch, parts,
                                                  preconditioner, False, True)
        return loss, grads, local, norm(grads)

    def plain():
        loss, grads = _value_and_grad(loss_fn, False)(params, batch)
        zero = _zero_like((grads, preconditioner))
        return loss, grads, zero, zero

    if sample is True:
        return split()
    if sample is False:
        return plain()

    def as_f32(out):
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

    def body(carry, half):
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

    The one-device alternative to the differenced estimator (which takes this and the
    previous step's gradient as the two parts, so the parameters' movement between the
    steps counts as noise: measured 1.2-3.3x high in training). On a sampled step the
    batch is split into ``parts`` equal parts whose gradients are taken one after the
    other (a ``lax.scan``, as :func:`microbatch_grads`) and averaged: the same FLOPs as
    one gradient of the whole batch, at ``parts`` times smaller matrix products and one
    gradient-sized accumulator. On the other steps (``sample`` False, e.g.
    :func:`sample_now` with ``gradient_noise_scale(M0, every=k)``) it is the plain
    gradient of the whole batch, in a ``lax.cond``. ``loss_fn`` must return the mean
    loss of its batch. Use ``gradient_noise_scale(M0, differenced=False)`` with it (no
    previous gradient to keep). With two parts and an Adam preconditioner that knows its
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


def _axis_names(axis_name: Any) -> tuple:
    return tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)


def _vary_over(tree: Any, axis_name: Any) -> Any:
    """Every leaf, unchanged in value, made varying over ``axis_name`` inside ``shard_map``.

    Adds an exact zero derived from ``lax.axis_index(axis_name)``, which varies
    over exactly those axes: leaves that already vary over them keep their
    type, the others become varying (as ``lax.pcast(..., to="varying")`` would
    make them, without having to ask which ones already are). XLA removes the
    add of a constant zero.
    """
    zero = jnp.zeros_like(jax.lax.axis_index(axis_name), dtype=jnp.float32)
    return jax.tree.map(lambda x: x + zero.astype(x.dtype), tree)


def data_parallel_grads(
    loss_fn: Callable,
    params: Any,
    batch: Any,
    axis_name: Any,
    *,
    num_microbatches: int = 1,
    preconditioner: Preconditioner | None = None,
    has_aux: bool = False,
    sample: Any = True,
    num_active: Any = None,
    parts: str = "microbatch",
    slice_total: bool = True,
) -> tuple[Any, Any, GradSqNorms]:
    """Mode (a): data-parallel gradient inside ``jax.shard_map`` with ``(S, T)``.

    Call it inside the shard_map'ed train step with the *local* batch shard.
    It takes each device's gradient (of its own microbatches when
    ``num_microbatches > 1``), adds up its squared norm *before* the
    cross-device mean, then does the usual ``pmean`` of the gradients plus ONE
    scalar collective (``psum`` of ``[loss, local S, partial T]``). ``T``, the
    squared norm of the averaged gradient, is split: each device reduces a
    1/devices slice of it, so the statistics cost each device about one pass
    over its gradient plus 1/devices of one.

    ``check_vma`` pitfall: with ``check_vma=True`` (the default) the gradient
    with respect to *replicated* parameters comes back already summed over
    the devices, so a per-device norm of it is the norm of the total. The
    helper therefore makes the parameters ``varying`` over ``axis_name`` first
    (leaves that already vary keep their type), which yields true per-device
    gradients.

    Args:
        loss_fn: ``loss_fn(params, local_batch) -> mean loss`` (or ``(loss, aux)``).
        params: parameters (replicated over ``axis_name``).
        batch: this device's batch shard.
        axis_name: the data-parallel mesh axis name (or a tuple of names).
        num_microbatches: microbatches per device (accumulated with ``lax.scan``).
        preconditioner: from :func:`auto_preconditioner`, or None.
        has_aux: as in ``jax.value_and_grad``; aux stays per device (stacked
            over microbatches), it is not reduced.
        sample: whether this step takes the statistics: True (every step),
            or a scalar bool array such as :func:`sample_now` ``(opt_state)``
            for ``gradient_noise_scale(..., every=k)``; on other steps the
            norms are skipped inside a ``lax.cond`` and cost nothing.
        num_active: use only the first ``num_active`` microbatches (a traced int32
            scalar, ``1 <= num_active <= num_microbatches``): the accumulation is a
            ``lax.fori_loop`` with that trip count, so one compiled step serves every
            count (the others are padding, never read). ``None``: all, in a ``lax.scan``.
            Not with ``has_aux``. On one device a single active microbatch is split in
            two (``count`` 2, the unbiased estimator) rather than left to the
            differenced one. On one device with an Adam preconditioner that knows its
            ``b2``, the parts are two whatever the count (one microbatch in halves;
            several: the first ``num_active // 2`` and the rest, summed in two
            accumulators, a second gradient-sized float32 buffer), and ``S`` and ``T``
            take ``nu`` floored at the step's mean gradient
            (:meth:`Preconditioner.updated`); the same with a static
            ``num_microbatches > 1`` (``count`` 2).
        parts: what the parts of ``S`` are. ``"microbatch"``: every device's
            microbatches (``count = devices * microbatches``); ``"device"``: each
            device's accumulated gradient, one norm per device instead of one per
            microbatch (``count = devices``, static even when ``num_active`` is traced;
            with one device that is the differenced estimator's ``count = 1``).
        slice_total: ``T`` from a 1/devices slice per device plus one scalar
            collective (True), or from the whole averaged gradient on every device
            with no collective (False: the step keeps the plain step's collectives,
            at one more read of the gradient).

    Returns:
        ``(loss, grads, sqnorms)``: mean loss over all devices, the gradient
        averaged over devices (replicated), and :class:`GradSqNorms` with
        ``count = devices * num_microbatches`` (see ``parts`` and ``num_active``)
        and the global batch size (of the microbatches used).

    Example:
        >>> # inside jax.shard_map(step, mesh=mesh, in_specs=(P(), P("data")), out_specs=...)
        >>> # loss, grads, sq = data_parallel_grads(loss_fn, params, batch, "data")
    """
    n = _check_positive_int(num_microbatches, "num_microbatches")
    names = _axis_names(axis_name)
    devices = 1
    for a in names:
        devices *= int(jax.lax.axis_size(a))
    local_size = _leading_size(batch)
    sample = _check_sample(sample)
    if parts not in ("microbatch", "device"):
        raise ValueError(f"parts ({parts!r}) must be 'microbatch' or 'device'")
    if not isinstance(slice_total, bool):
        raise TypeError(f"slice_total ({slice_total!r}) must be a bool")
    per_device = parts == "device"
    pv = _vary_over(params, axis_name)
    one_part = devices == 1 and n == 1 and not per_device and not has_aux
    # The parts are the devices' whole gradients (parts="device", or one microbatch each):
    # with Adam the norms wait for the mean gradient and take the preconditioner Adam
    # applies in this step (Preconditioner.updated), not nu before this step's gradient.
    after = (preconditioner is not None and preconditioner.b2 is not None and devices > 1
             and (per_device or (num_active is None and n == 1)))
    # Adam with a known b2: the one-device paths take two parts whose norms wait for the
    # step's mean gradient, with nu floored at it (_halves_after, _accumulate_traced_halves)
    floored = preconditioner is not None and preconditioner.b2 is not None
    total1 = None
    if num_active is None and one_part and local_size % 2 == 0:
        # One device, one part: split the batch in two (on sampled steps) so that the
        # unbiased estimator applies, with the preconditioner given here; a count of 1
        # would leave it to the differenced estimator in the transformation, which sees
        # the preconditioner only when it is passed to tx.update as well.
        loss, grads, local, total1 = _split_or_plain(loss_fn, pv, batch, 2, preconditioner,
                                                     sample)
        aux, count, used = None, 2, local_size
    elif num_active is None and devices == 1 and n > 1 and floored and not per_device \
            and not has_aux:
        # One device accumulating microbatches, with Adam: two parts, S and T with nu
        # floored at the step's mean gradient (as a traced count does, below)
        loss, grads, local, total1 = _accumulate_traced_halves(
            loss_fn, pv, batch, n, jnp.int32(n), preconditioner, sample)
        aux, count, used = None, 2, local_size
    elif num_active is None:
        loss, aux, grads, local, _ = _accumulate(loss_fn, pv, batch, n, preconditioner, has_aux,
                                                 False if per_device or after else sample)
        count, used = devices * n, local_size * devices
    else:
        if has_aux:
            raise ValueError("has_aux is not supported with num_active (a traced microbatch "
                             "count)")
        active = _check_num_active(num_active, n)
        aux = None
        used = active * (local_size // n) * devices
        if devices == 1 and not per_device and (local_size // n) % 2 == 0:
            # One device: a single active microbatch would give count 1 (the differenced
            # estimator); split it in two instead, as with a static count (same gradient).
            # T comes out of each branch with the preconditioner that branch's S took (the
            # halves floor nu at their mean gradient, :func:`_halves_after`): S and T of
            # one preconditioner, or their difference is not the noise.
            def loop():
                if floored:  # two parts, S and T with nu floored at the mean gradient
                    return _accumulate_traced_halves(loss_fn, pv, batch, n, active,
                                                     preconditioner, sample)
                loss1, grads1, local1 = _accumulate_traced(loss_fn, pv, batch, n, active,
                                                           preconditioner, True, sample)
                return loss1, grads1, local1, _when(
                    sample, lambda: sqnorm(grads1, preconditioner), (grads1, preconditioner))

            def halves():
                first = jax.tree.map(lambda x: x[: local_size // n], batch)
                return _split_or_plain(loss_fn, pv, first, 2, preconditioner, sample)

            def as_f32(out):
                return (jnp.asarray(out[0], jnp.float32), out[1],
                        jnp.asarray(out[2], jnp.float32), jnp.asarray(out[3], jnp.float32))

            loss, grads, local, total1 = jax.lax.cond(active == 1, lambda: as_f32(halves()),
                                                      lambda: as_f32(loop()))
            count = (jnp.int32(2) if floored
                     else jnp.where(active == 1, 2, active).astype(jnp.int32))
        else:
            loss, grads, local = _accumulate_traced(loss_fn, pv, batch, n, active,
                                                    preconditioner, not per_device, sample)
            count = devices * active if not per_device else devices
    if per_device and not after:  # one part per device: the norm of its accumulated gradient
        local = _when(sample, lambda: sqnorm(grads, preconditioner), (grads, preconditioner))
    if per_device:
        count = devices
    if after:
        # Adam: the norms (S of each device's gradient, T of the mean) with the
        # preconditioner Adam applies in this step, nu after this step's mean gradient
        # (Preconditioner.updated): nu before it can be ~0 where this batch's gradient
        # is not. S then waits for the mean gradient: one more scalar psum.
        loss = jnp.asarray(loss, jnp.float32) / devices
        summed, loss = jax.lax.psum((grads, loss), axis_name)
        mean = jax.tree.map(lambda x: x * jnp.asarray(1.0 / devices, x.dtype), summed)

        def norms():
            pre = preconditioner.updated(mean)
            s = jax.lax.psum(sqnorm(grads, pre), axis_name) / devices
            return jnp.stack([s, sqnorm(mean, pre)])

        if sample is True:
            st = norms()
        else:  # the mean and nu do not vary over the mesh axes: neither do the norms
            zeros = jnp.zeros([2], jnp.float32) + _zero_like((mean, preconditioner))
            st = zeros if sample is False else jax.lax.cond(sample, norms, lambda: zeros)
        mean = _ordered_after(mean, st[0] + st[1])
        out = (loss, aux) if has_aux else loss
        sq = GradSqNorms(st[0], st[1], count, used, _pre_valid(preconditioner, sample))
        return out, mean, sq
    inv = 1.0 / devices
    # The loss and the local S ride in the gradients' own all-reduce (one tuple
    # collective, as the plain step's pmean of the gradients).
    head = [jnp.asarray(loss, jnp.float32) * inv, local * inv]
    if total1 is not None:  # one device: T is already known, it rides along too
        head.append(jnp.asarray(total1, jnp.float32))
    summed, head = jax.lax.psum((grads, jnp.stack(head)), axis_name)
    grads = jax.tree.map(lambda x: x * jnp.asarray(inv, x.dtype), summed)
    if total1 is not None:
        total = head[2]
    elif slice_total:
        # T: each device reduces only its 1/devices slice of the summed gradient
        # (scaled to the mean afterwards, a scalar); one scalar collective sums it.
        total = _when(sample, lambda: jax.lax.psum(
            _sliced_sqnorm(summed, preconditioner, axis_name, devices), axis_name) * (inv * inv))
    else:  # T of the whole (replicated) mean gradient on every device: no collective
        total = _when(sample, lambda: sqnorm(grads, preconditioner), (grads, preconditioner))
    if preconditioner is not None:
        # one device's two parts: S read nu as well, after the mean gradient
        grads = _ordered_after(grads, total if total1 is None else total + head[1])
    out = (head[0], aux) if has_aux else head[0]
    sq = GradSqNorms(head[1], total, count, used, _pre_valid(preconditioner, sample))
    return out, grads, sq


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


def _sliced_sqnorm(
    grads: Any, preconditioner: Preconditioner | None, axis_name: Any, devices: int
) -> jax.Array:
    """This device's share of ``sqnorm(grads)``: a 1/devices slice of every leaf.

    A leaf with an axis divisible by ``devices`` contributes its slice (no copy:
    the slice fuses into the reduction); any other leaf contributes its full
    squared norm divided by ``devices``. Summed over devices this is exact.
    """
    idx = jax.lax.axis_index(axis_name)
    leaves = jax.tree.leaves(grads)
    nus = jax.tree.leaves(preconditioner.nu) if preconditioner is not None else [None] * len(leaves)
    if len(nus) != len(leaves):
        raise ValueError(
            f"preconditioner has {len(nus)} leaves but the gradient has {len(leaves)}; "
            "it must have the gradient's structure"
        )
    if preconditioner is not None:
        valid, c, e = preconditioner._norm_scalars()
    total = jnp.zeros([], jnp.float32)
    for x, nu in zip(leaves, nus):
        axis = next((a for a, d in enumerate(x.shape) if d % devices == 0 and d >= devices), None)
        if axis is not None and devices > 1:
            k = x.shape[axis] // devices
            x = jax.lax.dynamic_slice_in_dim(x, idx * k, k, axis=axis)
            nu = None if nu is None else jax.lax.dynamic_slice_in_dim(nu, idx * k, k, axis=axis)
            weight = 1.0
        else:
            weight = 1.0 / devices
        if nu is None:
            total = total + weight * jnp.sum(jnp.square(x.astype(jnp.float32)))
        else:
            total = total + weight * _pre_leaf_sqsum(x, nu, valid, e)
    return total if preconditioner is None else c * total


def _spec_axes(spec: PartitionSpec) -> set[str]:
    """The mesh axis names a ``PartitionSpec`` shards over."""
    names: set[str] = set()
    for entry in spec:
        if entry is None:
            continue
        names.update(entry if isinstance(entry, tuple) else (entry,))
    return names


def _uses_explicit_axes(sharding: Any) -> bool:
    """Whether ``sharding`` shards over an ``AxisType.Explicit`` mesh axis.

    A ``NamedSharding`` carries its mesh; a bare ``PartitionSpec`` refers to the
    mesh set with ``jax.set_mesh``. Other shardings have no axis types.
    """
    if isinstance(sharding, NamedSharding):
        mesh, spec = sharding.mesh, sharding.spec
    elif isinstance(sharding, PartitionSpec):
        mesh, spec = jax.sharding.get_abstract_mesh(), sharding
    else:
        return False
    types = dict(zip(mesh.axis_names, mesh.axis_types))
    return any(types.get(a) == AxisType.Explicit for a in _spec_axes(spec))


def _constrain(x: Any, sharding: Any) -> Any:
    """``reshard`` onto Explicit mesh axes, ``with_sharding_constraint`` otherwise."""
    if _uses_explicit_axes(sharding):
        return jax.sharding.reshard(x, sharding)
    return jax.lax.with_sharding_constraint(x, sharding)


def grouped_grads(
    loss_fn: Callable,
    params: Any,
    batch: Any,
    num_groups: int,
    *,
    preconditioner: Preconditioner | None = None,
    has_aux: bool = False,
    group_sharding: Any = None,
    sample: Any = True,
) -> tuple[Any, Any, GradSqNorms]:
    """Mode (d): plain ``jit`` with automatic sharding, via an explicit group axis.

    Reshapes the batch to ``[num_groups, B / num_groups, ...]`` and takes one
    gradient per group with ``jax.vmap``; ``S`` is the mean of the per-group
    squared norms and the gradient is their mean.

    Cost: unlike modes (a) and (b) this *materialises* ``num_groups``
    gradients (the vmap output, ``num_groups x |params|``). When the batch is
    sharded over the data axis and ``num_groups`` equals that axis size, pass
    ``group_sharding`` (e.g. ``NamedSharding(mesh, P("data"))``) so each device
    holds only its own group's gradient: the memory then matches plain data
    parallelism plus nothing, and the group mean lowers to the same all-reduce.
    Without it, XLA may replicate the stacked gradients (``num_groups`` times
    the gradient memory per device). The FLOPs equal the ungrouped step's.

    Args:
        loss_fn: ``loss_fn(params, group_batch) -> mean loss`` (or ``(loss, aux)``).
        params: parameters.
        batch: pytree with leading batch axis divisible by ``num_groups``.
        num_groups: number of groups (>= 2 for an unbiased estimate).
        preconditioner: from :func:`auto_preconditioner`, or None.
        has_aux: as in ``jax.value_and_grad``; aux comes back stacked over groups.
        group_sharding: optional sharding for the leading (group) axis of the
            stacked per-group gradients.
        sample: whether this step takes the statistics: True (every step),
            or a scalar bool array such as :func:`sample_now` ``(opt_state)``
            for ``gradient_noise_scale(..., every=k)``; on other steps the
            norms are skipped inside a ``lax.cond`` and cost nothing.

    Returns:
        ``(loss, grads, sqnorms)`` like :func:`microbatch_grads`.

    Example:
        >>> loss = lambda w, b: jnp.mean((b["x"] * w - b["y"]) ** 2)
        >>> b = {"x": jnp.arange(8.0), "y": jnp.ones(8)}
        >>> grouped_grads(loss, jnp.float32(0.5), b, 2)[2].count
        2
    """
    n = _check_positive_int(num_groups, "num_groups")
    sample = _check_sample(sample)
    size = _leading_size(batch)
    groups = _split(batch, n, "num_groups")
    vg = _value_and_grad(loss_fn, has_aux)
    value, g = jax.vmap(vg, in_axes=(None, 0))(params, groups)
    if group_sharding is not None:
        g = jax.tree.map(lambda x: _constrain(x, group_sharding), g)
    loss, aux = value if has_aux else (value, None)
    local = _when(sample, lambda: jnp.mean(jax.vmap(lambda t: sqnorm(t, preconditioner))(g)),
                  (g, preconditioner))
    grads = jax.tree.map(lambda x: jnp.mean(x.astype(jnp.float32), axis=0).astype(x.dtype), g)
    total = _when(sample, lambda: sqnorm(grads, preconditioner), (grads, preconditioner))
    if preconditioner is not None:  # both norms read nu: order both before the update
        grads = _ordered_after(grads, total + local)
    mean_loss = jnp.mean(loss.astype(jnp.float32))
    out = (mean_loss, aux) if has_aux else mean_loss
    return out, grads, GradSqNorms(local, total, n, size, _pre_valid(preconditioner, sample))


# --------------------------------------------------------------------------- optax transformation
