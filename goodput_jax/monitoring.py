"""Drop-in for ``from ml_goodput_measurement import monitoring`` (newer MaxText).

This module re-exports ``goodput_jax.compat.monitor`` and ``GCPOptions``.

Example:
    >>> from goodput_jax import monitoring
    >>> monitoring.GoodputMonitor.__name__
    'GoodputMonitor'
"""

from goodput_jax.compat.monitor import GoodputMonitor
from goodput_jax.compat.options import GCPOptions

__all__ = ["GCPOptions", "GoodputMonitor"]
