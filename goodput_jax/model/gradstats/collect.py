"""Collection helpers: ``(S, T)`` from inside the user's train step, four ways.

* (a) :func:`data_parallel_grads` under ``jax.shard_map``: the loss and ``S``
  ride in the gradients' own all-reduce, ``T`` needs one scalar collective;
* (b) :func:`microbatch_grads`: ``lax.scan`` accumulation in one step (in :mod:`.parts`);
* (c) accumulation across calls: :func:`goodput_jax.model.gradstats.multi_steps`
  (an optax wrapper, in :mod:`.transform`);
* (d) :func:`grouped_grads`: plain ``jit`` with an explicit group axis;
* (e) :func:`split_grads`: one device, no accumulation: the batch is split in two
  (or more) parts on sampled steps, so the unbiased estimator applies there too (in
  :mod:`.parts`);

plus :func:`differenced_sqnorms` (in :mod:`.parts`). The seam: :mod:`.parts` splits one
device's batch (microbatches, halves); this module spans devices and groups (a mesh axis,
a group axis) and re-exports the one-device helpers, so every name stays importable from
here. Each returns a :class:`GradSqNorms` for ``tx.update(..., grad_sqnorms=...)``;
``sample=`` skips the norms on unsampled steps inside a ``lax.cond``.

Only public JAX APIs are used: the mesh-axis bookkeeping inside ``shard_map``
goes through ``jnp.zeros_like`` and ``lax.axis_index`` (no reading of abstract
value fields), and Explicit mesh axes are recognised from the mesh's
``axis_types`` (no trying one API and catching its error).

Example:
    >>> loss = lambda w, b: jnp.mean((b["x"] * w - b["y"]) ** 2)
    >>> b = {"x": jnp.arange(8.0), "y": jnp.ones(8)}
    >>> grouped_grads(loss, jnp.float32(0.5), b, 4)[2].count
    4
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from goodput_jax.model.gradstats.estimate import GradSqNorms, _check_positive_int
from goodput_jax.model.gradstats.parts import (
    _accumulate,
    _accumulate_traced,
    _accumulate_traced_halves,
    _check_num_active,
    _check_sample,
    _leading_size,
    _ordered_after,
    _pre_valid,
    _split,
    _split_or_plain,
    _value_and_grad,
    _when,
    _zero_like,
    differenced_sqnorms,
    microbatch_grads,
    split_grads,
)
from goodput_jax.model.gradstats.precondition import Preconditioner, _pre_leaf_sqsum, sqnorm

__all__ = [
    "Parts",
    "data_parallel_grads",
    "differenced_sqnorms",
    "grouped_grads",
    "microbatch_grads",
    "split_grads",
]

@dataclasses.dataclass(frozen=True)
class Parts:
    """What the parts of ``S`` are in :func:`data_parallel_grads`, and how ``T`` is read.

    Attributes:
        kind: ``"microbatch"``: every device's microbatches (``count = devices *
            microbatches``); ``"device"``: each device's accumulated gradient, one norm per
            device (``count = devices``, static even when ``num_active`` is traced).
        slice_total: ``T`` from a 1/devices slice per device plus one scalar collective
            (True), or from the whole averaged gradient on every device with no collective
            (False: the step keeps the plain step's collectives, at one more read).

    Example:
        >>> Parts("replica")
        Traceback (most recent call last):
        ValueError: parts ('replica') must be 'microbatch' or 'device'
    """

    kind: str = "microbatch"
    slice_total: bool = True

    def __post_init__(self) -> None:
        if self.kind not in ("microbatch", "device"):
            raise ValueError(f"parts ({self.kind!r}) must be 'microbatch' or 'device'")
        if not isinstance(self.slice_total, bool):
            raise TypeError(f"slice_total ({self.slice_total!r}) must be a bool")


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
    parts: str | Parts = "microbatch",
) -> tuple[Any, Any, GradSqNorms]:
    """Mode (a): data-parallel gradient inside ``jax.shard_map`` with ``(S, T)``.

    Typed ``Any``: ``params`` and ``batch`` are pytrees (any structure of arrays), ``axis_name`` a mesh axis name or a tuple of them, ``sample`` and ``num_active`` a Python value or a traced JAX array; the loss and aux are the loss function's own.

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
        parts: what the parts of ``S`` are and how ``T`` is read: a :class:`Parts`, or
            its ``kind`` alone (``"microbatch"``: every device's microbatches;
            ``"device"``: one norm per device's accumulated gradient, ``count =
            devices``; with one device that is ``count = 1``: no statistics).

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
    how = parts if isinstance(parts, Parts) else Parts(parts)
    slice_total = how.slice_total
    per_device = how.kind == "device"
    pv = _vary_over(params, axis_name)
    one_part = devices == 1 and n == 1 and not per_device and not has_aux
    # The parts are the devices' whole gradients (parts="device", or one microbatch each):
    # with Adam the norms wait for the mean gradient and take the preconditioner Adam
    # applies in this step (Preconditioner.updated), not nu before this step's gradient.
    # Adam with a known b2: the one-device paths take two parts whose norms wait for the
    # step's mean gradient, with nu floored at it (_halves_after, _accumulate_traced_halves)
    floor_pre = (preconditioner if preconditioner is not None and preconditioner.b2 is not None
                 else None)
    floored = floor_pre is not None
    after_pre = (floor_pre if devices > 1 and (per_device or (num_active is None and n == 1))
                 else None)
    after = after_pre is not None
    total1 = None
    count: int | jax.Array
    used: int | jax.Array
    if num_active is None and one_part and local_size % 2 == 0:
        # One device, one part: split the batch in two (on sampled steps) so that the
        # unbiased estimator applies, with the preconditioner given here; a count of 1
        # would leave it to the differenced estimator in the transformation, which sees
        # the preconditioner only when it is passed to tx.update as well.
        loss, grads, local, total1 = _split_or_plain(loss_fn, pv, batch, 2, preconditioner,
                                                     sample)
        aux, count, used = None, 2, local_size
    elif num_active is None and devices == 1 and n > 1 and floor_pre is not None \
            and not per_device and not has_aux:
        # One device accumulating microbatches, with Adam: two parts, S and T with nu
        # floored at the step's mean gradient (as a traced count does, below)
        loss, grads, local, total1 = _accumulate_traced_halves(
            loss_fn, pv, batch, n, jnp.int32(n), floor_pre, sample)
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
            def loop() -> tuple[jax.Array, Any, jax.Array, jax.Array]:
                if floor_pre is not None:  # two parts, S and T, nu floored at the mean gradient
                    return _accumulate_traced_halves(loss_fn, pv, batch, n, active,
                                                     floor_pre, sample)
                loss1, grads1, local1 = _accumulate_traced(loss_fn, pv, batch, n, active,
                                                           preconditioner, True, sample)
                return loss1, grads1, local1, _when(
                    sample, lambda: sqnorm(grads1, preconditioner), (grads1, preconditioner))

            def halves() -> tuple[Any, Any, jax.Array, jax.Array]:
                first = jax.tree.map(lambda x: x[: local_size // n], batch)
                return _split_or_plain(loss_fn, pv, first, 2, preconditioner, sample)

            def as_f32(out: tuple[Any, Any, jax.Array, jax.Array],
                       ) -> tuple[jax.Array, Any, jax.Array, jax.Array]:
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
    if after_pre is not None:
        pre_before: Preconditioner = after_pre
        # Adam: the norms (S of each device's gradient, T of the mean) with the
        # preconditioner Adam applies in this step, nu after this step's mean gradient
        # (Preconditioner.updated): nu before it can be ~0 where this batch's gradient
        # is not. S then waits for the mean gradient: one more scalar psum.
        loss = jnp.asarray(loss, jnp.float32) / devices
        summed, loss = jax.lax.psum((grads, loss), axis_name)
        mean = jax.tree.map(lambda x: x * jnp.asarray(1.0 / devices, x.dtype), summed)

        def norms() -> jax.Array:
            pre = pre_before.updated(mean)
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

    Typed ``Any``: ``params`` and ``batch`` are pytrees (any structure of arrays), ``group_sharding`` a sharding or a mesh spec, ``sample`` a Python value or a traced JAX array; the loss and aux are the loss function's own.

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
