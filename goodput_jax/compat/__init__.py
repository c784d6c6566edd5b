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
``entries``         Google's entry dicts read as events (for its private helpers)
==================  ==========================================================

Google's private helpers, kept for Google's tests and code that calls them. Google's own
unit tests call five private members of its calculators; the drop-ins keep them with
Google's names and signatures, as thin adaptors that translate Google's entry dicts
(:mod:`~goodput_jax.compat.entries`) into goodput_jax's own rules, each written once:

* ``GoodputCalculator._get_step_times(entries)``: ``{step: seconds to the next start}``
  by :class:`~goodput_jax.compat.step_times.StepTimes`, the rule of ``get_step_deviation``;
* ``GoodputCalculator._fetch_new_entries(query_time)``: reads the store (``refresh``) and
  returns the entries recorded since the last call, up to ``query_time``, as Google's dicts;
* ``GoodputCalculator._get_current_productive_and_unproductive_time(interval_query=False)``:
  productive seconds, ``{BadputType: s}`` (no ``OTHER``), last productive and last recorded
  step, from the attribution engine (the job's, or the last interval's), the numbers
  ``get_job_goodput_details`` reports; on the elastic calculator with the elastic buckets;
* ``ElasticGoodputCalculator._extract_slice_count_entries(entries)`` and
  ``._compute_time_weighted_efficiency(slice_records, start, end)`` (static): the engine's
  slice-count records and :func:`~goodput_jax.compat.elastic.slice_efficiency`.

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
