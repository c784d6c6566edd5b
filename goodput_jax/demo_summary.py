"""The demo's summary text: the fitted step-time model, the gradient noise and the
suggestion (:func:`format_model_summary`), and Adam's nu rescales at the demo's batch
switches (:func:`format_nu_rescales`); ``goodput-jax demo`` prints both.
"""

from __future__ import annotations

import math
from typing import Any

from goodput_jax.report.labels import accumulation_note, format_duration, plural

__all__ = ["format_model_summary", "format_nu_rescales"]


def format_model_summary(hooks: Any) -> str:
    """The fitted step-time model, gradient noise and the suggestion, as text.

    Args:
        hooks: the :class:`~goodput_jax.integrations.hooks.GoodputHooks` of the run.

    Returns:
        A multi-line string (says so when the model is not fitted yet).

    Example:
        >>> print(format_model_summary(hooks))  # doctest: +SKIP
    """
    from goodput_jax.adaptive import default_atomic_sizes
    from goodput_jax.model.gradstats import noise_scale

    lines = ["Pollux model (from the training hooks)"]
    gp = hooks.grad_params
    m0 = hooks.init_batch_size
    if gp is None:
        lines.append("  gradient noise: no statistics collected")
    else:
        scale = float(noise_scale(gp, m0))  # inf when |G|^2 is 0
        # GradParams.var is the variance of an M0-sample batch gradient, tr(Sigma)/M0
        lines.append(f"  gradient noise: |G|^2 = {gp.sqr:.4g}, tr(Sigma)/M0 = {gp.var:.4g} "
                     f"(the variance of an M0 = {m0} sample batch gradient)")
        lines.append(f"  gradient noise scale B_noise = tr(Sigma) / |G|^2 = {scale:.4g} samples")
    fn = hooks.goodput_function()
    if gp is not None and fn is not None:
        bs = hooks.batch_size
        lines.append(f"  statistical efficiency at batch {bs}: {fn.efficiency(bs):.3f}"
                     f" (at 4x: {fn.efficiency(4 * bs):.3f})")
    p = hooks.perf_params
    if p is None:
        lines.append("  step-time model: not fitted (no profiled steps)")
    else:
        n = sum(1 for e in hooks.profile.values() if e.optim_count)
        lines.append(f"  step-time model fitted to {n} profiled configurations:")
        d = format_duration
        lines.append(f"    compute  T_c(b) = {d(p.alpha_c)} + {d(p.beta_c)} * b")
        if max((r for _n, r, _b in hooks.profile_table()), default=1) > 1:
            lines.append(f"    network  T_r(r) = {d(p.alpha_r)} + {d(p.beta_r)} * (r - 2)   "
                         f"[across nodes: {d(p.alpha_n)} + {d(p.beta_n)} * (r - 2)]")
        else:  # the fit keeps AdaptDL's 1e-8 s placeholders: nothing was measured
            lines.append("    network  not fitted (every profiled configuration ran on one "
                         "replica: no all-reduce to time)")
        lines.append(f"    overlap  gamma = {p.gamma:.3f}   (T = (T_c^g + T_r^g)^(1/g))")
        # the statistic the fit used (warm-up steps dropped; a quantile, not a mean that a
        # stalled step skews)
        qname = ("median" if hooks.profile_quantile == 0.5
                 else f"{hooks.profile_quantile:.0%} quantile")
        for (nn_, r, b), (_accum, optim, count) in hooks.profile_table().items():
            model_ms = float("nan")
            if fn is not None:
                model_ms = r * b / float(fn.throughput(nn_, r, b, 0)) * 1e3
            lines.append(f"    profiled r={r} b={b:<4d} measured {optim * 1e3:8.3f} ms ({qname})"
                         f"  model {model_ms:8.3f} ms  ({count} steps timed for the fit)")
        lines.append("    (steps timed for the fit: this process's, warm-up steps dropped; "
                     "the roofline counts every run's productive steps)")
        if math.isfinite(hooks.model_error):
            lines.append(f"    model error on the profiled configurations: "
                         f"{hooks.model_error * 100:.1f}% (median)")
    sug = hooks.suggest()
    if sug is None:
        lines.append("  suggestion: none yet (needs both a fit and gradient statistics)")
        return "\n".join(lines)
    # the confidence comes first: every predicted speedup below is read in its light
    if sug.confident:
        lines.append(f"  confidence: the step-time model is {sug.model_error:.0%} off the "
                     f"{sug.profiled_configs} profiled configurations (median; confident at "
                     f"<= 15%)")
        rough = ""
    else:
        why = (f"only {sug.profiled_configs} profiled configuration"
               + ("" if sug.profiled_configs == 1 else "s")
               if sug.profiled_configs < 2 else
               f"the step-time model is {sug.model_error:.0%} off the profiled "
               f"configurations (median; confident at <= 15%)")
        lines.append(f"  LOW CONFIDENCE: {why}; the predicted speedups below are rough")
        rough = " (low confidence)"
    reps = plural(hooks.num_replicas, "replica")
    lines.append(
        f"  suggested for {reps}: batch {sug.batch_size} "
        f"(atomic {sug.atomic_bsz} x {sug.accum_steps + 1} micro-steps x {reps}), "
        f"efficiency {sug.efficiency:.3f}")
    lines.append(
        f"  predicted speedup {sug.predicted_speedup:.2f}x{rough} over the current batch "
        f"{hooks.batch_size} (goodput {sug.current_goodput:.1f} -> {sug.goodput:.1f} "
        f"samples/s at M0-equivalent progress)")
    if sug.best_batch_size != sug.batch_size:
        lines.append(
            f"  (the smallest batch within 5% of the best predicted goodput: the optimum, "
            f"batch {sug.best_batch_size} at {sug.best_goodput:.1f} samples/s, sits on a "
            f"flat curve)")
    note = accumulation_note(sug, hooks.local_bsz_bounds)
    if note:
        lines.append(f"  {note}")
    sizes = default_atomic_sizes(hooks)
    run = hooks.suggest(atomic_sizes=sizes)
    micro = "1-8 micro-steps" if hooks.gradient_accumulation else "no accumulation"
    lines.append(
        f"  on AdaptiveBatchSize's buckets (micro-batches {', '.join(map(str, sizes))}, "
        f"{micro}: no new compiles):")
    lines.append(
        f"    batch {run.batch_size} (atomic {run.atomic_bsz} x {run.accum_steps + 1} "
        f"micro-steps x {reps}), efficiency {run.efficiency:.3f}, "
        f"predicted speedup {run.predicted_speedup:.2f}x{rough}"
        + ("" if run.best_batch_size == run.batch_size else
           f" (within 5% of the best, batch {run.best_batch_size})"))
    return "\n".join(lines)


def format_nu_rescales(rescales: list[dict]) -> str:
    """Adam's ``nu`` rescales at run 2's batch-size switches, as text (two lines).

    Example:
        >>> print(format_nu_rescales([{"step": 50, "from": 64, "to": 128,
        ...                            "noise_scale": 96.0, "factor": 0.8}]))
        Adam's nu rescaled at 1 batch-size switch by nu_switch_factor(noise scale): x0.8 to x0.8
          first: step 50, batch 64 -> 128, B_noise = 96 samples, nu x 0.8
        >>> print(format_nu_rescales([]))
        Adam's nu rescaled at no batch-size switch (no finite noise scale at any switch)
    """
    if not rescales:
        return ("Adam's nu rescaled at no batch-size switch (no finite noise scale at any "
                "switch)")
    first = rescales[0]
    fs = [r["factor"] for r in rescales]
    n = len(rescales)
    return (f"Adam's nu rescaled at {n} batch-size switch{'' if n == 1 else 'es'} by "
            f"nu_switch_factor(noise scale): x{min(fs):.4g} to x{max(fs):.4g}\n"
            f"  first: step {first['step']}, batch {first['from']} -> {first['to']}, "
            f"B_noise = {first['noise_scale']:.6g} samples, nu x {first['factor']:.6g}")
