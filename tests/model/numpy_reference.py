"""Independent float64 numpy implementation of the Pollux goodput model.

Written separately from ``goodput_jax.model`` (direct formulas, ``np.select``,
``np.geomspace``, scipy L-BFGS-B) so that parity tests compare two codes, and
so the benchmark has a plain-numpy baseline. Same semantics as documented in
``goodput_jax.model.goodput`` / ``goodput_jax.model.perf``: zero goodput for
candidates outside the atomic range, tolerance-aware ceil, plain RMSE of logs.
"""

from __future__ import annotations

import numpy as np
import scipy.optimize

NUM_CANDIDATES = 50
_EPS = 1e-8


def accum_time(p, b):
    return p[0] + p[1] * np.asarray(b, np.float64)


def network_time(p, n, r):
    n = np.asarray(n, np.float64)
    r = np.asarray(r, np.float64)
    conds = [n > 1, r > 1]
    alpha = np.select(conds, [p[2], p[4]], _EPS)
    beta = np.select(conds, [p[3], p[5]], _EPS)
    return alpha + beta * np.maximum(r - 2, _EPS)


def optim_time(p, n, r, b):
    a = accum_time(p, b)
    net = network_time(p, n, r)
    g = p[6]
    return (a**g + net**g) ** (1.0 / g)


def throughput(p, n, r, b, s):
    r = np.asarray(r, np.float64)
    b = np.asarray(b, np.float64)
    s = np.asarray(s, np.float64)
    total = s * accum_time(p, b) + optim_time(p, n, r, b)
    return r * b * (s + 1) / total


def efficiency(grad, m0, batch):
    sqr, var = grad
    scale = np.asarray(batch, np.float64) / m0
    denom = var / scale + sqr
    with np.errstate(divide="ignore", invalid="ignore"):
        gain = np.where(denom > 0, (var + sqr) / denom, 1.0)
    return gain / scale


def goodput(p, grad, m0, n, r, b, s):
    r = np.asarray(r, np.float64)
    b = np.asarray(b, np.float64)
    s = np.asarray(s, np.float64)
    return throughput(p, n, r, b, s) * efficiency(grad, m0, r * b * (s + 1))


def _ceil(x):
    return np.ceil(x - _EPS * np.maximum(1.0, np.abs(x)))


def optimize(p, grad, m0, n, r, max_batch_size=None, atomic_bsz_range=None, accumulation=False):
    """Returns (goodput, atomic_bsz, accum_steps) arrays of the broadcast shape."""
    max_bs = m0 if max_batch_size is None else max_batch_size
    lo, hi = atomic_bsz_range or (None, None)
    lo = lo or 1
    hi = hi or max_bs
    shape = np.broadcast(n, r).shape
    n = np.broadcast_to(np.asarray(n, np.float64), shape).ravel()
    r = np.broadcast_to(np.asarray(r, np.float64), shape).ravel()
    min_bs = np.maximum(m0, lo * r)
    batch = np.geomspace(min_bs, max_bs, NUM_CANDIDATES)  # [C, K]
    local = batch / r
    if accumulation:
        s = np.maximum(_ceil(local / hi) - 1, 0)
        force = (r == 1) & (local > m0 * (1 + _EPS))
        s = np.where(force, np.maximum(s, 1), s)
        b = _ceil(local / (s + 1))
    else:
        s = np.zeros_like(local)
        b = np.where(r == 1, float(m0), _ceil(local))
    g = goodput(p, grad, m0, n, r, b, s)
    g = np.where((lo <= b) & (b <= hi), g, 0.0)
    idx = np.argmax(g, axis=0)
    cols = np.arange(g.shape[1])
    return (
        g[idx, cols].reshape(shape),
        b[idx, cols].astype(np.int64).reshape(shape),
        s[idx, cols].astype(np.int64).reshape(shape),
    )


def fit_loss(p, n, r, b, t_acc, t_opt):
    p = np.asarray(p, np.float64)
    pred_acc = accum_time(p, b)
    pred_opt = optim_time(p, n, r, b)
    err1 = np.sqrt(np.mean((np.log(pred_acc) - np.log(t_acc)) ** 2))
    err2 = np.sqrt(np.mean((np.log(pred_opt) - np.log(t_opt)) ** 2))
    reg1 = 1e-3 * (p[6] - 1) ** 2
    reg2 = 1e-2 * ((p[3] / p[2]) ** 2 + (p[5] / p[4]) ** 2)
    return err1 + err2 + reg1 + reg2


def fit(n, r, b, t_acc, t_opt):
    """scipy L-BFGS-B fit with the same init, bounds, freezing and prior."""
    n, r, b, t_acc, t_opt = (np.asarray(x, np.float64) for x in (n, r, b, t_acc, t_opt))
    x0 = [0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 1.001]
    lower = [1e-8] * 6 + [1.0]
    upper = [np.inf] * 6 + [10.0]
    frozen = {}
    if len(np.unique(b)) == 1:
        frozen[0] = np.mean(t_acc) / 2
    if not np.any(n > 1):
        frozen[2] = frozen[3] = 1e-8
    if not np.any((n == 1) & (r > 1)):
        frozen[4] = frozen[5] = 1e-8
    if not np.any(r > 2):
        frozen[3] = frozen[5] = 1e-8
    for i, v in frozen.items():
        x0[i] = lower[i] = upper[i] = v
    res = scipy.optimize.minimize(
        fit_loss,
        x0,
        args=(n, r, b, t_acc, t_opt),
        method="L-BFGS-B",
        bounds=list(zip(lower, upper)),
    )
    x = res.x.copy()
    if not np.any(n > 1):
        x[2] = max(x[2], 1.1 * x[4])
        x[3] = max(x[3], 1.1 * x[5])
    return x
