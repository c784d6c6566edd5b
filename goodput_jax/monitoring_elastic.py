"""Drop-in for ``ml_goodput_measurement.monitoring_elastic`` (MaxText's elastic monitor).

This module re-exports ``goodput_jax.compat.elastic``'s monitor.

Example:
    >>> from goodput_jax import monitoring_elastic
    >>> monitoring_elastic.ElasticGoodputMonitor.__mro__[1].__name__
    'GoodputMonitor'
"""

from __future__ import annotations

from goodput_jax.compat.elastic import ElasticGoodputCalculator, ElasticGoodputMonitor  # noqa: F401
from goodput_jax.compat.monitor import GoodputMonitor  # noqa: F401
from goodput_jax.compat.options import GCPOptions

__all__ = ["ElasticGoodputMonitor", "GCPOptions"]
