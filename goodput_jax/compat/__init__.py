"""The Google and MaxText drop-ins, built on ``goodput_jax.measure``'s public seams.

ml-goodput-measurement 0.2.3's API (its constructors, enums, result shapes,
TensorBoard layout and Cloud Monitoring metrics) and MaxText's goodput helpers,
one module a job:

==================  ==========================================================
``enums``           Google's enums, its entry keys and its badput-breakdown shape
``options``         ``GCPOptions`` and the argument checks the drop-ins share
``recorder``        ``GoodputRecorder`` with Google's constructor
``calculator``      ``GoodputCalculator`` with Google's API and interval rule
``monitor``         ``GoodputMonitor``: Google's layout, Cloud Monitoring, hangs
``maxtext``         MaxText's config flags and wrapper helpers
``elastic``         the elastic recorder, calculator and monitor
``utils``           ``goodput_utils``: ideal step time, deviation baseline, GCE metadata
``info``            Google's result shapes and the calculator's last result
``step_times``      Google's step times and step deviation, read from the store
==================  ==========================================================

Users import them from the thin modules at Google's and MaxText's import paths,
which re-export these names: ``goodput_jax.goodput``, ``goodput_jax.goodput_elastic``,
``goodput_jax.goodput_utils``, ``goodput_jax.monitoring`` and
``goodput_jax.monitoring_elastic``.

Example:
    >>> from goodput_jax import goodput
    >>> from goodput_jax.compat import recorder
    >>> goodput.GoodputRecorder is recorder.GoodputRecorder
    True
"""
