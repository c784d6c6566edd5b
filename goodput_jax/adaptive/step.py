"""The adaptive train step: data parallel, accumulation with a traced count, in-step LR scaling.

:func:`make_train_step` turns ``loss_fn(params, batch) -> mean loss`` and an
optax optimizer from :func:`adaptive_optimizer` into one jitted step

``train_step(params, opt_state, batch, num_micro) -> (params, opt_state, loss)``

whose batch holds ``S`` microbatch slots, ``batch[k]`` of shape ``[R * b, ...]``
(``R`` replicas x atomic batch ``b``), sharded over the mesh's data axis. Only
the first ``num_micro`` slots are used: the accumulation loop is a
``lax.fori_loop`` whose trip count is the traced ``num_micro``, so changing the
number of accumulation steps within the same slot count does not recompile
(slot counts are powers of two: :func:`slots_for`). Padded slots are never
computed.

The statistics are gradstats' own (one in-step statistics path): inside ``jax.shard_map``
the step calls :func:`goodput_jax.model.gradstats.data_parallel_grads` with the traced
microbatch count (``num_active``), the optimizer's Adam preconditioner
(:func:`~goodput_jax.model.gradstats.auto_preconditioner`, so an Adam user gets the
statistics of the preconditioned gradient, as in a hand-written gradstats step) and the
sampling decision of ``gradient_noise_scale(every=k)`` (the norms are skipped inside a
``lax.cond`` on unsampled steps). With several replicas the parts of ``S`` are the
replicas' accumulated gradients (``parts="device"``: ``R`` parts of ``n * b`` examples, a
static count, one norm per replica); with one replica the micro-steps (``n`` parts of
``b`` examples, a traced count). One ``psum`` carries the gradients together with
``[loss, S]``, and ``T`` is the squared norm of the averaged gradient, taken on every
device (``Parts(..., slice_total=False)``: no collective beyond the plain step's). The learning rate
follows the scaling rule of :func:`goodput_jax.model.scaling.scale_by_rule`, with this
step's total batch ``R * b * num_micro`` passed as a traced value: a new batch size never
recompiles the optimizer.

Example:
    >>> import jax, jax.numpy as jnp, optax  # doctest: +SKIP
    >>> tx = adaptive_optimizer(optax.sgd(0.1), init_batch_size=32,
    ...                         rule="adascale")  # doctest: +SKIP
    >>> step = make_train_step(lambda p, b: jnp.mean((b["x"] * p - b["y"]) ** 2),
    ...                        tx)  # doctest: +SKIP
"""

from __future__ import annotations

import concurrent.futures
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from goodput_jax.model import gradstats
from goodput_jax.model.buckets import bucket
from goodput_jax.model.scaling import ScaleByRuleState, scale_by_rule

__all__ = ["adaptive_optimizer", "data_mesh", "make_train_step", "progress_of", "slots_for"]


def slots_for(num_micro: int) -> int:
    """Microbatch slots for ``num_micro`` microbatches: the next power of two.

    Example:
        >>> [slots_for(n) for n in (1, 2, 3, 5)]
        [1, 2, 4, 8]
    """
    return bucket(int(num_micro), 1)


def data_mesh(devices: Any = None, axis_name: str = "data") -> Mesh:
    """A 1-D data-parallel mesh over ``devices`` (default: all).

    Example:
        >>> data_mesh().axis_names
        ('data',)

    ``Any``: ``devices`` is a sequence of JAX devices (or None for all), which JAX types
    loosely.
    """
    devs = np.asarray(jax.devices() if devices is None else devices)
    return Mesh(devs.reshape(-1), (axis_name,))


def adaptive_optimizer(
    base: optax.GradientTransformation,
    init_batch_size: int,
    *,
    rule: str = "adascale",
    schedule: Callable | None = None,
    smoothing: float = 0.999,
    base_warmup_epochs: float | None = None,
    data_size: int | None = None,
    every: int = 1,
) -> optax.GradientTransformationExtraArgs:
    """``chain(gradient_noise_scale(M0, every=every), base, scale_by_rule(rule, M0))``.

    ``base`` is the optimizer tuned at ``init_batch_size``; the rule (one of
    ``adascale``, ``adam``, ``linear``, ``sqrt``, ``legw``) scales its updates
    for the step's batch size, and ``schedule`` (optional) is evaluated at the
    scale-invariant progress. ``every``: take the gradient statistics on one step in
    ``every`` (:func:`make_train_step` skips the norms on the others).

    Example:
        >>> tx = adaptive_optimizer(optax.sgd(0.1), 32)
        >>> st = tx.init({"w": jnp.zeros(2)})
        >>> float(progress_of(st))
        0.0
    """
    return optax.chain(
        gradstats.gradient_noise_scale(init_batch_size, smoothing=smoothing, every=every),
        base,
        scale_by_rule(rule, init_batch_size, schedule=schedule,
                      base_warmup_epochs=base_warmup_epochs, data_size=data_size),
    )


def progress_of(opt_state: Any) -> jax.Array:
    """Scale-invariant progress (sum of AdaScale gains) from a :func:`adaptive_optimizer` state.

    Example:
        >>> float(progress_of(adaptive_optimizer(optax.sgd(0.1), 8).init(jnp.zeros(1))))
        0.0

    ``Any``: params, optimizer state and batches are JAX pytrees, which have no static type.
    """
    found = [x for x in jax.tree.leaves(opt_state,
                                        is_leaf=lambda x: isinstance(x, ScaleByRuleState))
             if isinstance(x, ScaleByRuleState)]
    if not found:
        raise ValueError("opt_state has no ScaleByRuleState (build it with adaptive_optimizer)")
    return found[0].progress


def make_train_step(
    loss_fn: Callable[[Any, Any], jax.Array],
    tx: optax.GradientTransformationExtraArgs,
    *,
    mesh: Mesh | None = None,
    axis_name: str = "data",
    donate: bool = True,
    preconditioner: Callable[[Any], Any] | None = gradstats.auto_preconditioner,
) -> Callable:
    """The jitted adaptive step
    ``(params, opt_state, batch, num_micro) -> (params, opt_state, loss)``.

    Args:
        loss_fn: ``loss_fn(params, microbatch) -> mean loss`` over the microbatch.
        tx: from :func:`adaptive_optimizer` (takes ``grad_sqnorms``,
            ``grad_params``, ``preconditioner`` and ``batch_size`` extra arguments).
        mesh: data-parallel mesh (default :func:`data_mesh`).
        axis_name: its data axis.
        donate: donate params and optimizer state.
        preconditioner: ``opt_state -> Preconditioner | None``, the preconditioning of
            the statistics (default :func:`~goodput_jax.model.gradstats.auto_preconditioner`:
            Adam's second moment when the state has one, none for SGD; pass
            ``functools.partial(auto_preconditioner, b2=..., eps=...)`` for an Adam with
            other constants, or None for raw-gradient statistics).

    Returns:
        The jitted step. ``batch`` leaves have shape ``[S, R * b, ...]``
        (:meth:`AdaptiveBatchSize.next_batch` builds them); ``num_micro`` is an
        int32 scalar ``<= S``. Attributes: ``traces()`` counts its traces,
        ``stats_summary()`` the last step's
        :class:`~goodput_jax.model.gradstats.StatsSummary` ``(count, sqr, var)`` of the
        gradient statistics (device scalars computed in the step; :class:`GoodputHooks`
        reads it),
        ``precompile(params, opt_state, batch_like)`` compiles another batch
        shape on a background thread (ahead of a switch), ``is_compiled(batch_like)``,
        ``lower(params, opt_state, batch, num_micro)`` the ``jax.stages.Lowered`` step.

    Example:
        >>> tx = adaptive_optimizer(optax.sgd(0.1), 4)
        >>> step = make_train_step(lambda p, b: jnp.mean((b * p - 1.0) ** 2), tx)
        >>> p, st = jnp.float32(0.0), tx.init(jnp.float32(0.0))
        >>> R = len(jax.devices())
        >>> p, st, loss = step(p, st, jnp.ones((2, 4 * R)), jnp.int32(2))
        >>> round(float(loss), 3)
        1.0

    ``Any``: params, optimizer state and batches are JAX pytrees, which have no static type.
    """
    mesh = data_mesh(axis_name=axis_name) if mesh is None else mesh
    replicas = int(mesh.shape[axis_name])
    if preconditioner is not None and not callable(preconditioner):
        raise TypeError(f"preconditioner ({preconditioner!r}) must be a callable "
                        "opt_state -> Preconditioner | None, or None")
    counter = {"traces": 0}
    # ``every`` of the statistics: read once from the first concrete optimizer state
    # (None until then: a traced sampling decision, always correct).
    every: list = [None]

    # Several replicas: the parts of S are the replicas' accumulated gradients (R parts of
    # n * b examples: a static part count, one norm per replica). One replica: the
    # micro-steps are the parts (a traced count, n parts of b examples).
    parts = "device" if replicas > 1 else "microbatch"

    def grads_and_stats(params: Any, pre: Any, sample: Any, batch: Any,
                        num_micro: Any) -> tuple[Any, Any, Any]:
        """``(loss, grads, GradSqNorms)`` from gradstats inside the shard_map; the
        GradSqNorms' static fields (a Python part count or validity) travel by closure,
        its arrays as outputs."""
        static: dict = {}

        def local(params: Any, pre: Any, sample: Any, batch: Any,
                  num_micro: Any) -> tuple[Any, Any, dict[str, Any]]:
            slots = jax.tree.leaves(batch)[0].shape[0]
            flat = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), batch)
            loss, grads, sq = gradstats.data_parallel_grads(
                loss_fn, params, flat, axis_name, num_microbatches=slots, num_active=num_micro,
                preconditioner=pre, sample=True if sample is None else sample,
                parts=gradstats.Parts(parts, slice_total=False))
            arrays = {}
            for name, value in sq._asdict().items():
                if isinstance(value, (bool, int)):
                    static[name] = value
                else:
                    arrays[name] = value
            return loss, grads, arrays

        loss, grads, arrays = jax.shard_map(
            local, mesh=mesh, in_specs=(P(), P(), P(), P(None, axis_name), P()),
            out_specs=(P(), P(), P()))(params, pre, sample, batch, num_micro)
        return loss, grads, gradstats.GradSqNorms(**arrays, **static)

    def step(params: Any, opt_state: Any, batch: Any,
             num_micro: Any) -> tuple[Any, Any, Any, Any]:
        counter["traces"] += 1
        num_micro = jnp.asarray(num_micro, jnp.int32)
        pre = None if preconditioner is None else preconditioner(opt_state)
        # every > 1 (or not known yet): the norms run on sampled steps only (a lax.cond)
        sample = None if every[0] == 1 else gradstats.sample_now(opt_state)
        loss, grads, sq = grads_and_stats(params, pre, sample, batch, num_micro)
        batch_size = jnp.asarray(sq.batch_size, jnp.float32)
        sq = sq._replace(batch_size=batch_size)
        gp = gradstats.get_grad_params(opt_state)
        updates, opt_state = tx.update(grads, opt_state, params, grad_sqnorms=sq,
                                       grad_params=gp, preconditioner=pre,
                                       batch_size=batch_size)
        # StatsSummary(count, sqr, var) of the smoothed statistics, a fourth output never
        # donated: the hooks keep a reference to it instead of dispatching a copy of the
        # (donated) optimizer state from the training thread
        summary = gradstats.stats_summary(gradstats.get_grad_stats(opt_state))
        return optax.apply_updates(params, updates), opt_state, loss, summary

    rep = NamedSharding(mesh, P())
    # Fixed in/out shardings: freshly initialised (uncommitted) state and the
    # step's own outputs hit the same compiled program.
    jitted = jax.jit(step, donate_argnums=(0, 1) if donate else (),
                     in_shardings=(rep, rep, NamedSharding(mesh, P(None, axis_name)), rep),
                     out_shardings=(rep, rep, rep, rep))

    def place(tree: Any) -> Any:
        # Fresh (uncommitted) state has no mesh in its type; the step's outputs
        # do: put fresh state on the mesh once so both hit one compiled program.
        leaves = jax.tree.leaves(tree)
        if leaves and not (isinstance(leaves[0], jax.Array) and leaves[0].sharding == rep):
            return jax.device_put(tree, rep)
        return tree

    compiled: dict = {}
    futures: dict = {}
    pool: list = []

    def key_of(batch: Any) -> tuple[tuple[tuple[int, ...], str], ...]:
        return tuple((tuple(x.shape), str(x.dtype)) for x in jax.tree.leaves(batch))

    last_summary: list = [None]

    def learn_every(opt_state: Any) -> None:
        if every[0] is None:
            every[0] = gradstats.sample_every(opt_state)

    @functools.wraps(step)
    def train_step(params: Any, opt_state: Any, batch: Any,
                   num_micro: Any) -> tuple[Any, Any, Any]:
        if every[0] is None:
            learn_every(opt_state)
        exe = compiled.get(key_of(batch)) if compiled else None
        if exe is not None:
            p, o, loss, last_summary[0] = exe(place(params), place(opt_state), batch, num_micro)
        else:
            p, o, loss, last_summary[0] = jitted(place(params), place(opt_state), batch, num_micro)
        return p, o, loss

    def stats_summary() -> gradstats.StatsSummary | None:
        """The :class:`~goodput_jax.model.gradstats.StatsSummary` (float32 device scalars) of
        the gradient statistics after the last step, or None before the first: never donated
        (no copy to read it)."""
        return last_summary[0]

    def precompile(params: Any, opt_state: Any, batch_like: Any) -> concurrent.futures.Future:
        """Compile the step for ``batch_like``'s shapes on a background thread (a Future).

        The training loop keeps running meanwhile; :func:`is_compiled` tells
        when a switch to that shape costs no compile.
        """
        k = key_of(batch_like)
        if k in futures:
            return futures[k]
        learn_every(opt_state)
        if not pool:
            pool.append(concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="goodput-aot"))
        def spec(x: Any, sh: Any) -> jax.ShapeDtypeStruct:
            return jax.ShapeDtypeStruct(tuple(np.shape(x) if not hasattr(x, "shape") else x.shape),
                                        x.dtype if hasattr(x, "dtype") else jnp.result_type(x),
                                        sharding=sh)

        abstract = (jax.tree.map(lambda x: spec(x, rep), params),
                    jax.tree.map(lambda x: spec(x, rep), opt_state),
                    jax.tree.map(lambda x: spec(x, batch_sharding), batch_like),
                    jax.ShapeDtypeStruct((), jnp.int32, sharding=rep))

        def work() -> None:
            compiled[k] = jitted.lower(*abstract).compile()

        futures[k] = pool[0].submit(work)
        return futures[k]

    def is_compiled(batch_like: Any) -> bool:
        k = key_of(batch_like)
        f = futures.get(k)
        return k in compiled or (f is not None and f.done() and f.exception() is None
                                 and k in compiled)

    def lower(params: Any, opt_state: Any, batch: Any, num_micro: Any) -> Any:
        """The step lowered for these arguments (``.compile().as_text()`` shows its HLO)."""
        learn_every(opt_state)
        return jitted.lower(place(params), place(opt_state), batch, num_micro)

    batch_sharding = NamedSharding(mesh, P(None, axis_name))
    train_step.stats_summary = stats_summary  # type: ignore[attr-defined]
    train_step.lower = lower  # type: ignore[attr-defined]
    train_step.precompile = precompile  # type: ignore[attr-defined]
    train_step.is_compiled = is_compiled  # type: ignore[attr-defined]

    train_step.traces = lambda: counter["traces"]  # type: ignore[attr-defined]
    train_step.mesh = mesh  # type: ignore[attr-defined]
    train_step.batch_sharding = batch_sharding  # type: ignore[attr-defined]
    train_step.replicated = rep  # type: ignore[attr-defined]
    return train_step
