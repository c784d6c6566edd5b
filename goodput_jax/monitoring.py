"""Drop-in for ``from ml_goodput_measurement import monitoring`` (newer MaxText).

This module re-exports ``goodput_jax.compat.monitor`` and ``GCPOptions`` (and, as Google's
module offers them, its enums, calculator and metric-details shapes).

Example:
    >>> from goodput_jax import monitoring
    >>> monitoring.GoodputMonitor.__name__
    'GoodputMonitor'
"""

from goodput_jax.compat.calculator import GoodputCalculator  # noqa: F401
from goodput_jax.compat.enums import BadputType, IntervalMetricType, MetricType  # noqa: F401
from goodput_jax.compat.info import (  # noqa: F401
    IntervalWorkloadMetricDetails,
    MonitoringWindowType,
    WorkloadMetricDetails,
)
from goodput_jax.compat.monitor import GoodputMonitor
from goodput_jax.compat.options import GCPOptions

__all__ = ["GCPOptions", "GoodputMonitor"]
