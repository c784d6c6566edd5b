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

from __future__ import annotations

from typing import TYPE_CHECKING

from goodput_jax._lazy import lazy_exports

#: public name -> the module that defines it (imported on first use)
_EXPORTS: dict[str, str] = {
    "attach": "goodput_jax.runtime.compile",
    "attached": "goodput_jax.runtime.compile",
    "Attachment": "goodput_jax.runtime.compile",
    "BackendInit": "goodput_jax.runtime.backend",
    "CheckpointRecording": "goodput_jax.runtime.contracts",
    "CompileRecording": "goodput_jax.runtime.contracts",
    "detach": "goodput_jax.runtime.compile",
    "device_peak": "goodput_jax.runtime.program",
    "finish_steps": "goodput_jax.runtime.steps",
    "HooksRecording": "goodput_jax.runtime.contracts",
    "init_backend": "goodput_jax.runtime.backend",
    "JobRecording": "goodput_jax.runtime.contracts",
    "listener": "goodput_jax.runtime.compile",
    "matmul_counts": "goodput_jax.runtime.program",
    "MatmulCounts": "goodput_jax.runtime.program",
    "measured_init": "goodput_jax.runtime.backend",
    "measured_peak": "goodput_jax.runtime.program",
    "OneStepLateTimer": "goodput_jax.runtime.timer",
    "program_cost": "goodput_jax.runtime.program",
    "start_job": "goodput_jax.runtime.backend",
    "StepRecorder": "goodput_jax.runtime.steps",
    "StepRecording": "goodput_jax.runtime.contracts",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports("goodput_jax.runtime", _EXPORTS, globals())

if TYPE_CHECKING:  # pragma: no cover
    from goodput_jax.runtime.backend import (  # noqa: F401
        BackendInit,
        init_backend,
        measured_init,
        start_job,
    )
    from goodput_jax.runtime.compile import (  # noqa: F401
        attach,
        attached,
        Attachment,
        detach,
        listener,
    )
    from goodput_jax.runtime.contracts import (  # noqa: F401
        CheckpointRecording,
        CompileRecording,
        HooksRecording,
        JobRecording,
        StepRecording,
    )
    from goodput_jax.runtime.program import (  # noqa: F401
        device_peak,
        matmul_counts,
        MatmulCounts,
        measured_peak,
        program_cost,
    )
    from goodput_jax.runtime.steps import (  # noqa: F401
        finish_steps,
        StepRecorder,
    )
    from goodput_jax.runtime.timer import (  # noqa: F401
        OneStepLateTimer,
    )
