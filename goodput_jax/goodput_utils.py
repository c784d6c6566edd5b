"""Drop-in for ``ml_goodput_measurement.src.goodput_utils``: enums and public helpers.

This module re-exports ``goodput_jax.compat.utils`` (and Google's enums and
``GCPOptions`` from ``goodput_jax.compat``).

Example:
    >>> from goodput_jax import goodput_utils
    >>> goodput_utils.compute_ideal_step_time([1.0, 1.5, 1.25, 30.0])
    1.25
"""

from __future__ import annotations

from goodput_jax.compat.enums import BadputType, GoodputType, IntervalMetricType, MetricType
from goodput_jax.compat.options import GCPOptions
from goodput_jax.compat.utils import (
    compute_ideal_step_time,
    get_accelerator_type,
    get_cluster_name,
    get_extra_time_from_anomalous_steps,
    get_gcp_metadata,
    get_gcp_project_id,
    get_node_zone,
    get_timestamp_from_log_entry,
)

__all__ = [
    "BadputType",
    "GCPOptions",
    "GoodputType",
    "IntervalMetricType",
    "MetricType",
    "compute_ideal_step_time",
    "get_accelerator_type",
    "get_cluster_name",
    "get_extra_time_from_anomalous_steps",
    "get_gcp_metadata",
    "get_gcp_project_id",
    "get_node_zone",
    "get_timestamp_from_log_entry",
]
