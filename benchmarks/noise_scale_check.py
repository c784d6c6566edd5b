"""Which gradient noise scale explains the fixed arms of ``adaptive_bench.py``?

Pollux / AdaptDL's statistical efficiency of a total batch ``B`` is
``(phi + M0) / (phi + B)``, with ``phi`` the simple noise scale
``B_simple = tr(Sigma) / |G|^2`` (McCandlish et al. 2018), which the hooks estimate in
the step. McCandlish et al. derive the efficiency from the Hessian-weighted
``B_noise = tr(H Sigma) / (G^T H G)`` and use ``B_simple`` as its cheap stand-in. This
script trains ``adaptive_bench``'s fixed arms (same task, optimizer, AdaScale and
schedule) to the target and, at three points of each run, computes from 16384 training
examples:

* ``B_simple`` from per-example gradients (``vmap``), with ``|G|^2`` bias-corrected;
* ``B_noise`` with Hessian-vector products of the 16384-example loss: ``tr(H Sigma)``
  over 512 per-example deviations (with its standard error), ``G^T H G``
  bias-corrected;
* the hooks' own estimate (``M0 * var / sqr``, the value the goodput model uses).

Then, for the two batch sizes, the measured efficiency ratio (samples each needed to
reach the target) against what each noise scale at the target predicts.

Run: ``python benchmarks/noise_scale_check.py [--seeds 2] [--sizes 1024,2048]``
(about a minute per arm and seed on a 2-core CPU).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import adaptive_bench as ab  # sets the 4 fake CPU devices (XLA_FLAGS) before JAX starts
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree


def noise_scales(loss_fn, params, x, y, n_hessian: int = 512) -> dict:
    """``B_simple`` and ``B_noise`` (in samples) at ``params`` from the examples ``x, y``."""
    flat, unravel = ravel_pytree(params)

    def full(v):
        return loss_fn(unravel(v), {"x": x, "y": y})

    grad_full = jax.grad(full)
    hvp = jax.jit(jax.vmap(lambda v, u: jax.jvp(grad_full, (v,), (u,))[1], in_axes=(None, 0)))

    def one(v, xi, yi):
        return loss_fn(unravel(v), {"x": xi[None], "y": yi[None]})

    per_example = jax.jit(jax.vmap(jax.grad(one), in_axes=(None, 0, 0)))
    chunks = [np.asarray(per_example(flat, x[k:k + 2048], y[k:k + 2048]))
              for k in range(0, len(x), 2048)]
    n = len(x)
    mean = sum(c.sum(0, dtype=np.float64) for c in chunks) / n
    # sum of squared deviations, chunk by chunk in float64 (no n x params float64 copy)
    ss = sum(float(((c.astype(np.float64) - mean) ** 2).sum()) for c in chunks)
    tr_sigma = ss / (n - 1)
    sqr = float(mean @ mean) - tr_sigma / n  # E|mean|^2 = |G|^2 + tr(Sigma) / n
    sel = (chunks[0][:n_hessian].astype(np.float64) - mean).astype(np.float32)
    h_dev = np.concatenate([np.asarray(hvp(flat, jnp.asarray(sel[k:k + 64])))
                            for k in range(0, len(sel), 64)]).astype(np.float64)
    q = (h_dev * sel).sum(1)
    tr_h_sigma, se = float(q.mean()), float(q.std() / np.sqrt(len(q)))
    h_mean = np.asarray(hvp(flat, jnp.asarray(mean[None].astype(np.float32))))[0]
    g_h_g = float(h_mean.astype(np.float64) @ mean) - tr_h_sigma / n
    return {"b_simple": tr_sigma / sqr, "b_noise": tr_h_sigma / g_h_g,
            "tr_h_sigma": tr_h_sigma, "tr_h_sigma_se": se, "g_h_g": g_h_g}


def efficiency(phi: float, m0: int, b: int) -> float:
    """Pollux's ``(phi + M0) / (phi + B)``."""
    return (phi + m0) / (phi + b)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--sizes", type=str, default="1024,2048")
    ap.add_argument("--max-time", type=float, default=40.0, help="seconds of training per arm")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    if len(sizes) != 2 or sizes[0] >= sizes[1]:
        ap.error(f"--sizes ({args.sizes!r}) must be two increasing batch sizes")
    ns = argparse.Namespace(target=0.75, smooth=3, censor=1.5, m0=32, max_batch=max(sizes),
                            lr=0.05, half_life=50000.0, max_time=args.max_time, eval_every=0.5,
                            refit_interval=5.0, adapt_every=5, profile_quantile=0.5,
                            interleave=False, slice=1.0)
    model = ab.MLP()

    def loss_fn(p, b):
        return optax.softmax_cross_entropy_with_integer_labels(model.apply(p, b["x"]),
                                                               b["y"]).mean()

    @jax.jit
    def acc_fn(p, x, y):
        return jnp.mean(jnp.argmax(model.apply(p, x), -1) == y)

    print("# gradient noise scales along the fixed arms (samples); hooks = the goodput model's")
    for seed in range(args.seeds):
        data = ab.make_data(seed)
        (xtr, ytr), _ = data
        idx = np.random.default_rng(5).choice(len(xtr), 16384, replace=False)
        x, y = jnp.asarray(xtr[idx]), jnp.asarray(ytr[idx])
        ends = {}
        for b in sizes:
            arm = ab.Arm(f"fixed-{b}", b, seed, data, ns, model, loss_fn, acc_fn, {})
            for budget in (3.0, 3.0, None):
                arm.advance() if budget is None else arm.advance(budget)
                s = noise_scales(loss_fn, jax.device_get(arm.params), x, y)
                print(f"seed {seed} fixed-{b:<5d} step {arm.step:5d} {arm.samples / 1e6:5.2f}M "
                      f"samples acc {arm.acc:.3f}: B_simple {s['b_simple']:7.0f}  B_noise "
                      f"{s['b_noise']:6.0f} (tr(H Sigma) {s['tr_h_sigma']:.3g} +- "
                      f"{s['tr_h_sigma_se']:.2g}, G^T H G {s['g_h_g']:.3g})  hooks "
                      f"{ab.noise_scale(arm.hooks) or float('nan'):7.0f}", flush=True)
                if arm.done:
                    break
            res = arm.result()
            ends[b] = (res, s, res["noise_scale"])
        (lo, hi) = sizes
        (rl, _, _), (rh, sh, hh) = ends[lo], ends[hi]
        if rl["time"] is None or rh["time"] is None:
            print(f"seed {seed}: an arm did not reach the target; no efficiency ratio")
            continue
        # samples at the interpolated crossing time, as adaptive_bench's efficiency check
        s_lo, s_hi = (r["samples"] * r["time"] / r["stop"] for r in (rl, rh))
        measured = s_lo / s_hi
        preds = ", ".join(
            f"{name} {efficiency(phi, 32, hi) / efficiency(phi, 32, lo):.3f}"
            for name, phi in (("B_simple", sh["b_simple"]), ("B_noise", sh["b_noise"]),
                              ("hooks", hh or float("nan"))))
        print(f"seed {seed}: E({hi}) / E({lo}) measured {measured:.3f} (samples to target "
              f"{s_hi / 1e6:.2f}M / {s_lo / 1e6:.2f}M); "
              f"predicted from the noise scale at fixed-{hi}'s target: {preds}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
