"""The solver of the step-time fit: bounded parameters, projected L-BFGS, a data-scaled start.

:func:`goodput_jax.model.perf.fit_perf_params` minimises its loss over the seven
``PerfParams`` here: each parameter mapped to an unconstrained value (alphas and betas
``>= 1e-8`` through a log, ``gamma`` in ``[1, 10]`` through a sine), a projected
limited-memory BFGS with a fixed line-search ladder (jittable, vmappable: one
``while_loop``), started from :func:`_data_start`.

Example:
    >>> import jax.numpy as jnp
    >>> u = _to_unconstrained(jnp.array([0.5, 2.0]), jnp.array([False, True]))
    >>> [round(float(x), 4) for x in _from_unconstrained(u, jnp.array([False, True]))]
    [0.5, 2.0]
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from goodput_jax.model import formulas

__all__ = ["FIT_MAX_ITERS"]

#: Iteration cap of the L-BFGS loop (it stops earlier once the gradient is tiny).
FIT_MAX_ITERS = 200
_GAMMA_MAX = 10.0
_TINY = formulas.TINY


def _to_unconstrained(value: jax.Array, is_gamma: jax.Array) -> jax.Array:
    # alpha/beta = 1e-8 + exp(u); gamma = 1 + 9 sin^2(u).
    pos = jnp.log(jnp.maximum(value - _TINY, 1e-30))
    frac = jnp.clip((value - 1.0) / (_GAMMA_MAX - 1.0), 0.0, 1.0)
    gam = jnp.arcsin(jnp.sqrt(frac))
    return jnp.where(is_gamma, gam, pos)


def _from_unconstrained(u: jax.Array, is_gamma: jax.Array) -> jax.Array:
    pos = _TINY + jnp.exp(jnp.minimum(u, 30.0))
    gam = 1.0 + (_GAMMA_MAX - 1.0) * jnp.sin(u) ** 2
    return jnp.where(is_gamma, gam, pos)


# Line-search trial steps, relative to the last accepted step (clipped to <= 2).
_LS_STEPS = (4.0, 2.0, 1.0, 0.5, 0.25, 2.0**-4, 2.0**-7)
_MEMORY = 6

#: The solver loop's state: it, stall, u, s_prev, g_prev, moved, progressed, mem_s, mem_y,
#: valid, t_prev (all arrays).
_Carry = tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array, jax.Array, jax.Array,
               jax.Array, jax.Array, jax.Array, jax.Array]


def _solve_plbfgs(loss: Callable[[jax.Array], jax.Array], u0: jax.Array,
                  free: jax.Array) -> jax.Array:
    """L-BFGS with a parallel (vectorised) line search; no nested loops.

    Each iteration evaluates the gradient at the current point (the only
    gradient site, so it is compiled once), folds the last step into the
    curvature memory (``_MEMORY`` pairs), takes the two-loop direction,
    evaluates the loss at all trial steps ``_LS_STEPS * t`` at once (``t`` =
    the last accepted step, so the trials follow the scale of the problem)
    and moves to the best one if it lowers the loss. A failure clears the
    memory (steepest descent next) and shrinks the trials. Three iterations in
    a row with less than ``ftol`` relative progress, or ``FIT_MAX_ITERS``
    iterations, stop the loop. The body is straight-line code over small
    arrays, so ``vmap`` over jobs costs about one job's ops.
    """
    dt = u0.dtype
    k = u0.shape[0]
    m = _MEMORY
    ftol = 1e-10 if dt == jnp.float64 else 1e-6
    steps = jnp.asarray(_LS_STEPS, dt)
    value_and_grad = jax.value_and_grad(loss)
    batched_loss = jax.vmap(loss)

    def direction(g: jax.Array, mem_s: jax.Array, mem_y: jax.Array,
                  valid: jax.Array) -> jax.Array:
        # Two-loop recursion; memory slot m-1 is the newest.
        q = g
        alphas: dict[int, jax.Array] = {}
        rhos: dict[int, jax.Array] = {}
        for i in reversed(range(m)):
            sy = jnp.dot(mem_s[i], mem_y[i])
            rhos[i] = jnp.where(valid[i], 1.0 / jnp.where(valid[i], sy, 1.0), 0.0)
            alphas[i] = rhos[i] * jnp.dot(mem_s[i], q)
            q = q - alphas[i] * mem_y[i]
        yy = jnp.dot(mem_y[m - 1], mem_y[m - 1])
        sy = jnp.dot(mem_s[m - 1], mem_y[m - 1])
        gnorm = jnp.sqrt(jnp.dot(g, g))
        # Before any curvature pair: a unit-length steepest-descent step.
        h0 = jnp.where(
            valid[m - 1], sy / jnp.where(valid[m - 1], yy, 1.0), 1.0 / jnp.maximum(gnorm, 1e-30)
        )
        r = h0 * q
        for i in range(m):
            b = rhos[i] * jnp.dot(mem_y[i], r)
            r = r + mem_s[i] * (alphas[i] - b)
        return -jnp.where(free, r, 0.0)

    def body(carry: _Carry) -> _Carry:
        it, stall, u, s_prev, g_prev, moved, progressed, mem_s, mem_y, valid, t_prev = carry
        f, g = value_and_grad(u)
        g = jnp.where(free, g, 0.0)
        # Fold the previous step (if it moved) into the memory; forget the
        # memory after a failed line search.
        y_prev = g - g_prev
        curv = moved & (jnp.dot(s_prev, y_prev) > 1e-10 * jnp.dot(y_prev, y_prev))
        shift = lambda mem, v: jnp.concatenate([mem[1:], v[None]], axis=0)
        mem_s = jnp.where(curv, shift(mem_s, s_prev), mem_s)
        mem_y = jnp.where(curv, shift(mem_y, y_prev), mem_y)
        valid = jnp.where(curv, jnp.concatenate([valid[1:], jnp.ones((1,), bool)]), valid) & (
            moved | (it == 0)
        )
        stall = jnp.where(progressed, 0, stall + 1)
        d = direction(g, mem_s, mem_y, valid)
        trial = jnp.minimum(steps * t_prev, 2.0)
        cand = u[None, :] + trial[:, None] * d[None, :]
        fc = batched_loss(cand)
        fc = jnp.where(jnp.isfinite(fc), fc, jnp.inf)
        best = jnp.argmin(fc)
        ok = fc[best] < f
        u_new = jnp.where(ok, cand[best], u)
        progressed = ok & ((f - fc[best]) > ftol * jnp.abs(f))
        # Next trials centre on the accepted step; after a failure, restart wide.
        t_next = jnp.where(ok, jnp.minimum(trial[best], 1.0), 1.0)
        t_next = jnp.where(ok, t_next, jnp.where(t_prev < 1e-3, 1.0, t_prev * 2.0**-8))
        return it + 1, stall, u_new, u_new - u, g, ok, progressed, mem_s, mem_y, valid, t_next

    def keep_going(carry: _Carry) -> jax.Array:
        it, stall, progressed = carry[0], carry[1], carry[6]
        return (it < FIT_MAX_ITERS) & ((stall < 2) | progressed)

    zeros = jnp.zeros((m, k), dt)
    vec = jnp.zeros((k,), dt)
    false = jnp.asarray(False)
    init = (
        jnp.int32(0),
        jnp.int32(0),
        u0,
        vec,
        vec,
        false,
        jnp.asarray(True),
        zeros,
        zeros,
        jnp.zeros((m,), bool),
        jnp.asarray(1.0, dt),
    )
    out = jax.lax.while_loop(keep_going, body, init)
    return out[2]


def _data_start(b: jax.Array, acc: jax.Array, w: jax.Array, count: jax.Array) -> jax.Array:
    """The fit's starting point, on the scale of the data (pure).

    ``(alpha_c, beta_c)`` from a weighted least-squares line of the accumulation
    time over the batch size (the slope kept within ``[1e-3, 1] * mean(T)/mean(b)``,
    the intercept within ``[0.05, 1] * mean(T)``); every network term starts at
    ``alpha_c`` (a large retrogression, ``beta/alpha = 1``);
    ``gamma = 1.001``. On AdaptDL's own test profiles this is :data:`FIT_INIT`'s
    scale; on millisecond steps it starts the solve four orders of magnitude
    closer than the fixed point, whose ``beta_c`` otherwise slides onto its lower
    bound (a plateau of the log-parametrisation).
    """
    bm = jnp.sum(w * b) / count
    am = jnp.sum(w * acc) / count
    var = jnp.sum(w * (b - bm) ** 2)
    slope = jnp.where(var > 0, jnp.sum(w * (b - bm) * (acc - am)) / jnp.where(var > 0, var, 1.0), 0.0)
    beta_c = jnp.clip(slope, 1e-3 * am / bm, am / bm)
    alpha_c = jnp.clip(am - beta_c * bm, 0.05 * am, am)
    return jnp.stack([alpha_c, beta_c, alpha_c, alpha_c, alpha_c, alpha_c, jnp.asarray(1.001, am.dtype)])
