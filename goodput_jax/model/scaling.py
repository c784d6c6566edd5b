"""Learning-rate scaling rules for a batch size ``scale`` times the initial one.

When the batch grows from ``M0`` to ``M = scale * M0`` the learning rate must
change with it. The rules here (as in AdaptDL) give the multiplier:

* ``adascale``: ``gain = (var + sqr) / (var / scale + sqr)``, the AdaScale gain,
  between 1 (no noise: a bigger batch buys nothing) and ``scale`` (pure noise);
* ``adam``: ``sqrt(gain)``, for Adam-type optimizers;
* ``linear``: ``scale``;
* ``sqrt``: ``sqrt(scale)``;
* ``legw``: linear-epoch gradual warm-up to ``sqrt(scale)`` over
  ``base_warmup_epochs * scale * data_size / batch_size`` scale-invariant iterations.

Training *progress* is counted in scale-invariant iterations: every step adds
the AdaScale gain, i.e. how many ``M0``-batch steps the step is worth. A base
schedule evaluated at the progress (instead of the step count) keeps its shape
whatever the batch size.

:func:`scale_by_rule` is the optax form: put it last in a chain; its update
takes ``grad_params=`` (from :func:`goodput_jax.model.gradstats.get_grad_params`)
and ``batch_size=`` as extra arguments.

Example:
    >>> from goodput_jax.model.types import GradParams
    >>> round(float(adascale_gain(GradParams(sqr=1.0, var=3.0), 4.0)), 4)
    2.2857
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax.typing import ArrayLike

from goodput_jax.model import formulas
from goodput_jax.model.types import GradParams

__all__ = [
    "RULES",
    "ScaleByRuleState",
    "adam_gain",
    "adascale_gain",
    "legw_factor",
    "linear_factor",
    "rule_factor",
    "scale_by_rule",
    "sqrt_factor",
]

RULES = ("adascale", "adam", "linear", "sqrt", "legw")
_MIN_VAR = 1e-6


def adascale_gain(grad_params: GradParams, scale: ArrayLike) -> jax.Array:
    """AdaScale gain ``(var + sqr) / (var / scale + sqr)``, with ``var >= 1e-6``, ``sqr >= 0``.

    The efficiency's gain (:func:`goodput_jax.model.formulas.gain`, the one formula) on
    the clamped statistics: 1 where the denominator is not > 0 (NaN statistics
    included).

    Example:
        >>> float(adascale_gain(GradParams(sqr=0.0, var=1.0), 8.0))
        8.0
    """
    var = jnp.maximum(jnp.asarray(grad_params.var, jnp.float32), _MIN_VAR)
    sqr = jnp.maximum(jnp.asarray(grad_params.sqr, jnp.float32), 0.0)
    return formulas.gain(jnp, sqr, var, jnp.asarray(scale, jnp.float32))


def adam_gain(grad_params: GradParams, scale: ArrayLike) -> jax.Array:
    """Square root of the AdaScale gain (the rule for Adam-type optimizers).

    Example:
        >>> float(adam_gain(GradParams(sqr=0.0, var=1.0), 4.0))
        2.0
    """
    return jnp.sqrt(adascale_gain(grad_params, scale))


def linear_factor(scale: ArrayLike) -> jax.Array:
    """Linear scaling: ``scale``.

    Example:
        >>> float(linear_factor(4.0))
        4.0
    """
    return jnp.asarray(scale, jnp.float32)


def sqrt_factor(scale: ArrayLike) -> jax.Array:
    """Square-root scaling: ``sqrt(scale)``.

    Example:
        >>> float(sqrt_factor(4.0))
        2.0
    """
    return jnp.sqrt(jnp.asarray(scale, jnp.float32))


def legw_factor(
    progress: ArrayLike, scale: ArrayLike, *, base_warmup_epochs: float, data_size: int, batch_size: ArrayLike
) -> jax.Array:
    """LEGW: warm up linearly to ``sqrt(scale)`` over ``base_warmup_epochs * scale`` epochs.

    The warm-up lasts ``base_warmup_epochs * scale * data_size / batch_size``
    iterations, measured in scale-invariant progress.

    Example:
        >>> float(legw_factor(50.0, 4.0, base_warmup_epochs=1, data_size=100, batch_size=4))
        1.0
    """
    scale = jnp.asarray(scale, jnp.float32)
    total = (
        jnp.asarray(base_warmup_epochs, jnp.float32)
        * scale
        * jnp.asarray(data_size, jnp.float32)
        / jnp.asarray(batch_size, jnp.float32)
    )
    top = jnp.sqrt(scale)
    progress = jnp.asarray(progress, jnp.float32)
    return jnp.where(progress < total, top * progress / total, top)


def _check_rule(rule: Any) -> str:
    if rule not in RULES:
        raise ValueError(f"rule ({rule!r}) must be one of {', '.join(RULES)}")
    return rule


def rule_factor(
    rule: str,
    scale: ArrayLike,
    *,
    grad_params: GradParams | None = None,
    progress: ArrayLike = 0.0,
    base_warmup_epochs: float | None = None,
    data_size: int | None = None,
    batch_size: ArrayLike | None = None,
) -> jax.Array:
    """The learning-rate multiplier of ``rule`` (one of :data:`RULES`).

    Raises:
        ValueError: unknown rule; ``adascale``/``adam`` without ``grad_params``;
            ``legw`` without its arguments.

    Example:
        >>> float(rule_factor("sqrt", 9.0))
        3.0
    """
    _check_rule(rule)
    if rule in ("adascale", "adam"):
        if grad_params is None:
            raise ValueError(f"rule {rule!r} needs grad_params (the gradient statistics)")
        return adascale_gain(grad_params, scale) if rule == "adascale" else adam_gain(
            grad_params, scale
        )
    if rule == "linear":
        return linear_factor(scale)
    if rule == "sqrt":
        return sqrt_factor(scale)
    if base_warmup_epochs is None or data_size is None or batch_size is None:
        raise ValueError("rule 'legw' needs base_warmup_epochs, data_size and batch_size")
    return legw_factor(
        progress, scale, base_warmup_epochs=base_warmup_epochs, data_size=data_size,
        batch_size=batch_size,
    )


# The functional form (not the class form ruff's UP014 asks for): a field named ``count``
# shadows ``tuple.count`` (a method), which the class form declares as an incompatible
# override (mypy); the functional form types the same fields.
ScaleByRuleState = NamedTuple("ScaleByRuleState", [  # noqa: UP014 (see above)
    ("count", jax.Array),
    ("progress", jax.Array),
    ("factor", jax.Array),
    ("gain", jax.Array),
])
ScaleByRuleState.__doc__ = """State of :func:`scale_by_rule`.

    Attributes:
        count: optimizer steps taken (int32).
        progress: scale-invariant iterations so far (sum of AdaScale gains).
        factor: the last learning-rate multiplier applied (rule x schedule).
        gain: the last AdaScale gain.
    """


def scale_by_rule(
    rule: str,
    init_batch_size: float,
    *,
    schedule: Callable[[jax.Array], Any] | None = None,
    base_warmup_epochs: float | None = None,
    data_size: int | None = None,
) -> optax.GradientTransformationExtraArgs:
    """optax transformation that multiplies the updates by a scaling rule's factor.

    Typed ``Any``: ``schedule`` returns a number or an array (optax's schedules are untyped).

    Put it after the base optimizer (whose learning rate is the one tuned at
    ``init_batch_size``), e.g.
    ``optax.chain(gradient_noise_scale(M0), optax.sgd(lr), scale_by_rule("adascale", M0))``.
    The update's extra arguments are ``grad_params`` (current
    :class:`GradParams`; required by ``adascale``/``adam``, used by all rules to
    count progress) and ``batch_size`` (this step's total batch; default
    ``init_batch_size``). Without ``grad_params`` progress advances by
    ``scale`` per step (the perfect-scaling assumption).

    The multiplier is ``rule_factor * schedule(progress)`` when ``schedule`` is
    given: a base schedule in scale-invariant iterations (use a base optimizer
    learning rate of 1.0 then, or a constant one as its peak).

    Args:
        rule: one of :data:`RULES`.
        init_batch_size: ``M0``.
        schedule: optional ``progress -> multiplier`` (e.g. an optax schedule).
        base_warmup_epochs: LEGW only.
        data_size: LEGW only, samples per epoch.

    Returns:
        ``optax.GradientTransformationExtraArgs`` with :class:`ScaleByRuleState`.

    Example:
        >>> from goodput_jax.model.types import GradParams
        >>> tx = scale_by_rule("adascale", 32)
        >>> st = tx.init({"w": jnp.zeros(1)})
        >>> u, st = tx.update({"w": jnp.ones(1)}, st, grad_params=GradParams(1.0, 3.0), batch_size=128)
        >>> round(float(u["w"][0]), 4), round(float(st.progress), 4)
        (2.2857, 2.2857)
    """
    _check_rule(rule)
    if isinstance(init_batch_size, bool) or not isinstance(init_batch_size, numbers.Real) or not (
        math.isfinite(init_batch_size) and init_batch_size > 0
    ):
        raise ValueError(f"init_batch_size ({init_batch_size!r}) must be a positive number")
    if rule == "legw":
        if base_warmup_epochs is None or not base_warmup_epochs > 0:
            raise ValueError(f"base_warmup_epochs ({base_warmup_epochs!r}) must be > 0 for 'legw'")
        if data_size is None or not data_size > 0:
            raise ValueError(f"data_size ({data_size!r}) must be > 0 for 'legw'")
    m0 = float(init_batch_size)

    def init_fn(params):
        del params
        # Distinct buffers per leaf (a donated state must not alias).
        return ScaleByRuleState(jnp.zeros([], jnp.int32), jnp.zeros([], jnp.float32),
                                jnp.ones([], jnp.float32), jnp.ones([], jnp.float32))

    def update_fn(updates, state, params=None, *, grad_params=None, batch_size=None, **extra):
        del params, extra
        bs = m0 if batch_size is None else batch_size
        scale = jnp.asarray(bs, jnp.float32) / m0
        if grad_params is None:
            if rule in ("adascale", "adam"):
                raise ValueError(
                    f"scale_by_rule({rule!r}) needs grad_params= in update (e.g. "
                    "gradstats.get_grad_params(opt_state))"
                )
            gain = scale
        else:
            gain = adascale_gain(grad_params, scale)
            gain = jnp.where(jnp.isfinite(gain), gain, scale)
        factor = rule_factor(
            rule, scale, grad_params=grad_params, progress=state.progress,
            base_warmup_epochs=base_warmup_epochs, data_size=data_size, batch_size=bs,
        )
        factor = jnp.where(jnp.isfinite(factor), factor, 1.0)
        if schedule is not None:
            factor = factor * jnp.asarray(schedule(state.progress), jnp.float32)
        new_updates = jax.tree.map(lambda u: (u * factor).astype(u.dtype), updates)
        new_state = ScaleByRuleState(
            count=(state.count + 1).astype(jnp.int32),
            progress=(state.progress + gain).astype(jnp.float32),
            factor=jnp.asarray(factor, jnp.float32),
            gain=jnp.asarray(gain, jnp.float32),
        )
        return new_updates, new_state

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)
