"""The words the report shows: bucket names, hint names, units.

One table per vocabulary, shared by the text table (:mod:`goodput_jax.report.text`)
and the plots (:mod:`goodput_jax.report.render`):

* :data:`BUCKET_LABELS` / :data:`OPTIONAL_BUCKETS`: re-exported from
  :mod:`goodput_jax.measure.badput`, which owns the badput vocabulary;
* :data:`HINT_LABELS`: each :class:`goodput_jax.model.hints.Hints` field -> a
  human name, its unit and a one-line meaning.

Example:
    >>> BUCKET_LABELS["UNPRODUCTIVE_CHECKPOINT_SAVE_TIME"]
    'checkpoint save'
    >>> HINT_LABELS["init_batch_size"].unit
    'samples'
"""

from __future__ import annotations

import html
import math
import re
from typing import Any, NamedTuple

# The badput vocabulary (bucket labels) is owned by goodput_jax.measure.badput; re-exported
# here so the report's words are found in one place.
from goodput_jax.measure.badput import BUCKET_LABELS, OPTIONAL_BUCKETS

__all__ = [
    "BUCKET_LABELS",
    "HINT_LABELS",
    "OPTIONAL_BUCKETS",
    "HintLabel",
    "accumulation_note",
    "format_bounds",
    "format_duration",
    "html_text",
    "plural",
    "plural_list",
]


class HintLabel(NamedTuple):
    """How one hint is shown: human name, unit ("" if none), what it means."""

    name: str
    unit: str
    meaning: str


#: Hints field -> how the report shows it (order = the table's order).
HINT_LABELS: dict[str, HintLabel] = {
    "num_replicas": HintLabel("replicas", "devices", "data-parallel replicas the job runs on now"),
    "num_nodes": HintLabel("nodes", "hosts", "hosts those replicas span"),
    "atomic_bsz": HintLabel("per-replica batch", "samples", "samples each replica "
                            "processes per micro-step"),
    "accum_steps": HintLabel("accumulation steps", "micro-steps",
                             "extra micro-steps accumulated before each update"),
    "init_batch_size": HintLabel("initial batch size (M0)", "samples",
                                 "the batch size the job was configured with; goodput is "
                                 "measured in M0-equivalent samples"),
    "max_batch_size": HintLabel("largest batch size allowed", "samples",
                                "upper limit the job accepts for the total batch"),
    "local_bsz_bounds": HintLabel("per-replica batch bounds", "samples",
                                  "[min, max] samples one replica may process per micro-step"),
    "gradient_accumulation": HintLabel("gradient accumulation allowed", "",
                                       "whether larger batches may use extra micro-steps"),
    "max_profiled_replicas": HintLabel("most replicas profiled", "devices",
                                       "largest replica count the step-time model was fitted "
                                       "on; the curves extrapolate beyond it"),
    "accelerator_type": HintLabel("accelerator type", "", "the device type the job runs on"),
    "perf_params": HintLabel("step-time model", "ms (per term)", "fitted step-time parameters: compute "
                             "alpha_c + beta_c * b, network alpha_r/beta_r (one node), "
                             "alpha_n/beta_n (across nodes), overlap gamma"),
    "grad_params": HintLabel("gradient statistics", "", "squared gradient norm |G|^2 (norm) "
                             "and the variance of an M0-sample batch gradient, "
                             "tr(Sigma)/M0 (var)"),
    "gradient_noise_scale": HintLabel("gradient noise scale", "samples",
                                      "batch size at which gradient noise and signal are equal"),
    "grad_stats_note": HintLabel("why no gradient statistics", "",
                                 "the steps' updates brought one gradient each (no collection "
                                 "helper): no noise scale is shown; the note names the helper"),
    "efficiency": HintLabel("statistical efficiency", "0-1", "progress per sample at the "
                            "current batch, relative to batch M0"),
    "suggested_batch_size": HintLabel("suggested batch size", "samples",
                                      "the smallest total batch whose modelled goodput is "
                                      "within the tolerance (default 5%) of the best, on the "
                                      "current replicas"),
    "suggested_atomic_bsz": HintLabel("suggested per-replica batch", "samples",
                                      "per-replica micro-batch of the suggestion"),
    "suggested_accum_steps": HintLabel("suggested accumulation steps", "micro-steps",
                                       "accumulation steps of the suggestion"),
    "predicted_speedup": HintLabel("predicted speedup", "x", "goodput of the suggestion / "
                                   "goodput of the current configuration"),
    "perf_params_by_type": HintLabel("step-time model per accelerator type", "ms (per term)",
                                     "parameters fitted on each observed type"),
    "min_throughput_by_type": HintLabel("throughput at minimum devices, per type", "samples/s",
                                        "Sia's bootstrap profile"),
}


def plural(n: int, word: str) -> str:
    """``n`` and ``word``, plural unless ``n`` is 1.

    Example:
        >>> plural(1, "replica"), plural(4, "replica")
        ('1 replica', '4 replicas')
    """
    return f"{n} {word}{'' if n == 1 else 's'}"


def plural_list(counts: tuple[int, ...], word: str) -> str:
    """Counts joined with "and", then ``word`` (plural unless the only count is 1).

    Example:
        >>> plural_list((2, 4), "replica"), plural_list((1, 2, 4), "replica")
        ('2 and 4 replicas', '1, 2 and 4 replicas')
        >>> plural_list((1,), "replica")
        '1 replica'
    """
    if len(counts) == 1:
        return plural(counts[0], word)
    return f"{', '.join(map(str, counts[:-1]))} and {plural(counts[-1], word)}"


def format_duration(seconds: float, digits: int = 4) -> str:
    """A duration with ``digits`` significant digits in a unit that keeps it readable
    (s, ms, us, ns), so that a slope of 30 ns per sample does not print as 0.0000 ms.

    Example:
        >>> format_duration(1.019e-3), format_duration(4.5e-6), format_duration(3e-8)
        ('1.019 ms', '4.5 us', '30 ns')
        >>> format_duration(2.5), format_duration(0.0), format_duration(float("nan"))
        ('2.5 s', '0 s', 'n/a')
    """
    if not math.isfinite(seconds):
        return "n/a"
    a = abs(seconds)
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")):
        if a >= scale:
            return f"{seconds / scale:.{digits}g} {unit}"
    if a == 0.0:
        return "0 s"
    return f"{seconds:.{digits}g} s"


def format_bounds(bounds: Any, unit: str = "") -> str:
    """A ``(min, max)`` pair where None is no limit, in words.

    Example:
        >>> format_bounds((8, 512)), format_bounds((None, 512)), format_bounds((8, None))
        ('8 to 512', 'at most 512', 'at least 8')
        >>> format_bounds(None), format_bounds((None, None))
        ('no limits', 'no limits')
    """
    lo, hi = (None, None) if bounds is None else tuple(bounds)
    u = f" {unit}" if unit else ""
    if lo is None and hi is None:
        return "no limits"
    if hi is None:
        return f"at least {lo}{u}"
    if lo is None:
        return f"at most {hi}{u}"
    return f"{lo} to {hi}{u}"


def accumulation_note(suggestion: Any, local_bsz_bounds: Any = None) -> str | None:
    """One sentence when the job's ``gradient_accumulation=False`` holds the suggestion back
    by more than 5%: why, and what the model predicts with accumulation; else None.

    Args:
        suggestion: a :class:`~goodput_jax.integrations.search.Suggestion`.
        local_bsz_bounds: the job's per-replica batch bounds.

    Example:
        >>> from goodput_jax.integrations.search import Suggestion
        >>> s = Suggestion(32, 0, 128, 10.0, 10.0, 1.0, 1.0, num_replicas=4,
        ...                with_accumulation_batch_size=1024, with_accumulation_speedup=1.88)
        >>> print(accumulation_note(s, (8, 32)))  # doctest: +NORMALIZE_WHITESPACE
        gradient accumulation is off for this job (gradient_accumulation=False): the
        per-replica batch is capped at 32 samples, so a larger batch needs gradient
        accumulation. With it, the model predicts batch 1024 at 1.88x; pass
        gradient_accumulation=True to allow it.
    """
    acc = suggestion.with_accumulation_speedup
    if not (isinstance(acc, float) and math.isfinite(acc)):
        return None
    here = suggestion.predicted_speedup
    if math.isfinite(here) and acc <= 1.05 * here:
        return None
    hi = None if local_bsz_bounds is None else tuple(local_bsz_bounds)[1]
    why = ("the per-replica batch is capped at " + (f"{hi} samples" if hi else "its bound")
           + ", so a larger batch needs gradient accumulation")
    return (f"gradient accumulation is off for this job (gradient_accumulation=False): {why}. "
            f"With it, the model predicts batch {suggestion.with_accumulation_batch_size} at "
            f"{acc:.2f}x; pass gradient_accumulation=True to allow it.")


def html_text(text: str) -> str:
    """``text`` escaped for HTML, its `backquoted` spans as ``<code>`` (no literal backquotes).

    >>> html_text("call `steps(step, f, x)` & go")
    'call <code>steps(step, f, x)</code> &amp; go'
    """
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))
