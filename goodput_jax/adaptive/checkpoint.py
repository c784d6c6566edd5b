"""Orbax checkpoints of an adaptive job, restorable onto another device count.

One Orbax step holds two items:

* ``state``: the model parameters and the optimizer state (which carries the
  gradient statistics and the scale-invariant progress), saved as
  ``StandardSave``;
* ``adaptive``: :meth:`AdaptiveBatchSize.state_dict` as JSON (configuration,
  data position, step-time profile and fit).

:func:`restore` rebuilds the arrays replicated on the *current* mesh (a job
restarted on 4 devices restores a checkpoint written on 1), then hands the JSON
to the controller, which keeps the total batch size on the new replica count
and keeps the whole profile, so the published hints show the new configuration
with everything learned before.

Example:
    >>> import tempfile  # doctest: +SKIP
    >>> mngr = manager(tempfile.mkdtemp())  # doctest: +SKIP
    >>> save(mngr, 100, params, opt_state, adaptive)  # doctest: +SKIP
    >>> step, params, opt_state = restore(mngr, params, opt_state, adaptive, mesh)  # doctest: +SKIP
"""

from __future__ import annotations

import os
from typing import Any

import jax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

__all__ = ["manager", "restore", "save"]


def manager(directory: str | os.PathLike, *, max_to_keep: int | None = 3) -> Any:
    """An ``orbax.checkpoint.CheckpointManager`` for :func:`save` / :func:`restore`.

    Example:
        >>> import tempfile
        >>> manager(tempfile.mkdtemp()).latest_step() is None
        True

    ``Any``: Google's or MaxText's objects (a ``google.cloud.logging`` logger, a MaxText config,
    an orbax manager) from libraries without type information, duck-typed as their code does.
    """
    import orbax.checkpoint as ocp

    return ocp.CheckpointManager(
        os.fspath(directory),
        options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True),
        item_names=("state", "adaptive"),
    )


def save(mngr: Any, step: int, params: Any, opt_state: Any, adaptive: Any,
         *, wait: bool = True) -> None:
    """Save ``{params, opt_state}`` and the controller's JSON state as step ``step``.

    ``Any``: params, optimizer state and batches are JAX pytrees, which have no static type.
    """
    import orbax.checkpoint as ocp

    meta = adaptive.state_dict()
    meta["step"] = int(step)
    mngr.save(int(step), args=ocp.args.Composite(
        state=ocp.args.StandardSave({"params": params, "opt_state": opt_state}),
        adaptive=ocp.args.JsonSave(meta),
    ))
    if wait:
        mngr.wait_until_finished()


def restore(mngr: Any, params_like: Any, opt_state_like: Any, adaptive: Any,
            mesh: Mesh, step: int | None = None) -> tuple[int, Any, Any] | None:
    """Restore the latest (or ``step``) checkpoint replicated on ``mesh``; None when there is none.

    ``params_like`` / ``opt_state_like`` give the tree structure, shapes and
    dtypes (e.g. a fresh ``init``); their shardings are ignored.

    Returns:
        ``(step, params, opt_state)``; the controller is restored in place.

    ``Any``: params, optimizer state and batches are JAX pytrees, which have no static type.
    """
    import orbax.checkpoint as ocp

    step = mngr.latest_step() if step is None else step
    if step is None:
        return None
    rep = NamedSharding(mesh, P())
    abstract = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(jax.numpy.shape(x), jax.numpy.result_type(x), sharding=rep),
        {"params": params_like, "opt_state": opt_state_like})
    out = mngr.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract), adaptive=ocp.args.JsonRestore()))
    adaptive.load_state_dict(out["adaptive"])
    return int(out["adaptive"]["step"]), out["state"]["params"], out["state"]["opt_state"]
