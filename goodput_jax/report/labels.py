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

from typing import NamedTuple

# The badput vocabulary (bucket labels) is owned by goodput_jax.measure.badput; re-exported
# here so the report's words are found in one place.
from goodput_jax.measure.badput import BUCKET_LABELS, OPTIONAL_BUCKETS

__all__ = ["BUCKET_LABELS", "HINT_LABELS", "OPTIONAL_BUCKETS", "HintLabel"]


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
