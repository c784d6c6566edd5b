"""Drop-in for ``ml_goodput_measurement.src.goodput_utils``: enums, result shapes and helpers.

This module re-exports ``goodput_jax.compat.utils`` (and Google's enums, ``GCPOptions``
and result shapes from ``goodput_jax.compat``). As in Google's module, its metadata
helpers call this module's ``get_gcp_metadata``: patching it here changes what
``get_cluster_name()`` and the others return.

Example:
    >>> from goodput_jax import goodput_utils
    >>> goodput_utils.compute_ideal_step_time([1.0, 1.5, 1.25, 30.0])
    1.25
"""

from __future__ import annotations

from goodput_jax.compat.enums import BadputType, GoodputType, IntervalMetricType, MetricType
from goodput_jax.compat.info import (
    ElasticIntervalWorkloadMetricDetails,
    ElasticWorkloadMetricDetails,
    GoodputInfo,
    IntervalWorkloadMetricDetails,
    MonitoringWindowType,
    StepInfo,
    WorkloadMetricDetails,
)
from goodput_jax.compat.options import GCPOptions
from goodput_jax.compat.utils import (
    MACHINE_TYPE_TO_ACCELERATOR_TYPE_MAPPING,
    compute_ideal_step_time,
    compute_percentile,
    compute_step_deviation_from_baseline,
    get_accelerator_type,
    get_anomalous_and_normal_step_times,
    get_cluster_name,
    get_extra_time_from_anomalous_steps,
    get_gcp_metadata,
    get_gcp_project_id,
    get_node_zone,
    get_timestamp_from_log_entry,
)

__all__ = [
    "MACHINE_TYPE_TO_ACCELERATOR_TYPE_MAPPING",
    "BadputType",
    "ElasticIntervalWorkloadMetricDetails",
    "ElasticWorkloadMetricDetails",
    "GCPOptions",
    "GoodputInfo",
    "GoodputType",
    "IntervalMetricType",
    "IntervalWorkloadMetricDetails",
    "MetricType",
    "MonitoringWindowType",
    "StepInfo",
    "WorkloadMetricDetails",
    "compute_ideal_step_time",
    "compute_percentile",
    "compute_step_deviation_from_baseline",
    "get_accelerator_type",
    "get_anomalous_and_normal_step_times",
    "get_cluster_name",
    "get_extra_time_from_anomalous_steps",
    "get_gcp_metadata",
    "get_gcp_project_id",
    "get_node_zone",
    "get_timestamp_from_log_entry",
]
