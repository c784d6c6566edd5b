"""Drop-in for ``from ml_goodput_measurement import monitoring`` (newer MaxText).

Example:
    >>> from goodput_jax import monitoring
    >>> monitoring.GoodputMonitor.__name__
    'GoodputMonitor'
"""

from goodput_jax.goodput import GCPOptions, GoodputMonitor

__all__ = ["GCPOptions", "GoodputMonitor"]
