"""Drop-in replacement for ``ml_goodput_measurement.goodput``.

Change one import and keep the rest of a MaxText-style training script::

    # from ml_goodput_measurement import goodput
    from goodput_jax import goodput

    recorder = goodput.GoodputRecorder(job_name=run_name, logger_name=f"goodput_{run_name}",
                                       logging_enabled=(jax.process_index() == 0))
    calculator = goodput.GoodputCalculator(job_name=run_name, logger_name=f"goodput_{run_name}")
    monitor = goodput.GoodputMonitor(job_name=run_name, logger_name=f"goodput_{run_name}",
                                     tensorboard_dir=tb_dir, upload_interval=30,
                                     monitoring_enabled=True)

Events go to the local SQLite store (``./goodput.db`` or ``$GOODPUT_JAX_STORE``)
unless a ``store=`` is given.

Example:
    >>> from goodput_jax import goodput
    >>> goodput.BadputType.TPU_INITIALIZATION is goodput.BadputType.ACCELERATOR_INITIALIZATION
    True
"""

from __future__ import annotations

import importlib

from goodput_jax.measure.calculator import BadputType, GoodputCalculator, StepDeviation
from goodput_jax.measure.recorder import GoodputRecorder

__all__ = ["BadputType", "GoodputCalculator", "GoodputMonitor", "GoodputRecorder", "StepDeviation"]  # noqa: F822


def __getattr__(name: str):
    # GoodputMonitor lives in measure/monitor.py (imported lazily: it pulls in TensorBoard).
    if name == "GoodputMonitor":
        value = importlib.import_module("goodput_jax.measure.monitor").GoodputMonitor
        globals()[name] = value
        return value
    raise AttributeError(f"module 'goodput_jax.goodput' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
