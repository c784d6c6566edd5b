"""Measurements taken from the live JAX runtime, fed to a GoodputRecorder.

* :func:`attach`: every JAX compilation (``jax.monitoring``'s trace, lowering
  and backend-compile spans) recorded with its measured duration; repeats of a
  program after training started are recompiles.
* :func:`init_backend` / :func:`start_job`: the backend start-up (accelerator
  initialisation) timed, and recorded as the first events of the run.
* :class:`StepRecorder`: step ends taken on the device (outputs ready, observed
  off the training thread), so asynchronous dispatch is measured, not guessed;
  :func:`finish_steps` waits until those of a recorder are all recorded.
* :mod:`~goodput_jax.runtime.contracts`: what each door needs of a recorder, as
  ``runtime_checkable`` protocols (:class:`StepRecording`, :class:`CompileRecording`,
  :class:`JobRecording`, :class:`CheckpointRecording`, :class:`HooksRecording`), checked at
  construction with a one-line error naming the missing members.
* :func:`program_cost` / :func:`device_peak` / :func:`measured_peak`: a compiled step's
  FLOPs and bytes from XLA (with the matrix products XLA's analysis leaves out counted
  from the compiled HLO: :func:`matmul_counts`), and the device's peak (program goodput;
  the StepRecorder records them).

Importing this package does not import JAX (each function does, when called).

Example:
    >>> import jax  # doctest: +SKIP
    >>> from goodput_jax import goodput, runtime  # doctest: +SKIP
    >>> init = runtime.init_backend()  # doctest: +SKIP
    >>> rec = goodput.GoodputRecorder("run1", "goodput_run1",
    ...                               logging_enabled=(init.process_index == 0))  # doctest: +SKIP
    >>> runtime.start_job(rec)  # doctest: +SKIP
"""

from goodput_jax.runtime.backend import BackendInit, init_backend, measured_init, start_job
from goodput_jax.runtime.compile import Attachment, attach, attached, detach, listener
from goodput_jax.runtime.contracts import (
    CheckpointRecording,
    CompileRecording,
    HooksRecording,
    JobRecording,
    StepRecording,
)
from goodput_jax.runtime.program import (
    MatmulCounts,
    device_peak,
    matmul_counts,
    measured_peak,
    program_cost,
)
from goodput_jax.runtime.steps import StepRecorder, finish_steps
from goodput_jax.runtime.timer import OneStepLateTimer

__all__ = [
    "Attachment",
    "BackendInit",
    "CheckpointRecording",
    "CompileRecording",
    "HooksRecording",
    "JobRecording",
    "MatmulCounts",
    "OneStepLateTimer",
    "StepRecorder",
    "StepRecording",
    "attach",
    "attached",
    "detach",
    "device_peak",
    "finish_steps",
    "init_backend",
    "listener",
    "matmul_counts",
    "measured_init",
    "measured_peak",
    "program_cost",
    "start_job",
]
