"""The one attribution engine: turns a job's events into time per bucket.

The incremental calculator, its cold (columnar) path and the report's timeline
all feed this engine; each rule is written once (see ``docs/semantics.md``):

* :mod:`~goodput_jax.measure.engine.rules`: the decisions every path takes (who
  owns the time between two events, whether a load blocks, the window clip);
* :mod:`~goodput_jax.measure.engine.core`: :class:`Engine`, its state and the row
  loop that applies each event (runs, hosts, spans, steps, segments);
* :mod:`~goodput_jax.measure.engine.columns`: the vectorised path for runs of
  simple rows (no device ends), by the same rules and state transitions;
* :mod:`~goodput_jax.measure.engine.query`: what every query adds without
  changing the state (the live tail, inferred program startup, Orbax's flat
  checkpoint statistics);
* :mod:`~goodput_jax.measure.engine.codes`: bucket indices, kind codes, span
  tables, :class:`StreamKeys`.

Default rules are ml-goodput-measurement 0.2.3's, where both libraries measure
the same thing:

* A *stream* is the events of one ``(run_id, host)``. A new stream, or a
  repeated ``JOB_START`` in the same stream, starts a new *run*; if the previous
  run had no ``JOB_END`` it crashed: its in-flight step and the downtime until
  the new run's first event are infrastructure recovery.
* A step lasts from its start to the next step's start (or ``JOB_END``); a
  host-side ``STEP_END`` does not end it. A ``STEP_START`` whose number is <= a
  live step rolls back: the redone steps are wasted progress, and a new
  *segment* begins.
* Program startup is inferred per segment (first step time minus the mean of
  the segment's other steps, the step closed by ``JOB_END`` excluded), unless
  the run recorded ``COMPILATION`` events: then measured compile time
  (``recompile=False``) is program startup and ``recompile=True`` compiles are
  ``RECOMPILATION``; both are taken out of the time they fell in.
* Data loading: the first load of each run and of each segment is synchronous
  badput; later loads are ``DATA_LOADING_ASYNC`` (reported, not subtracted).
* When a stream records ``STEP_DEVICE_END``, a step is the device's busy
  interval: from ``max(start_N, device_end_{N-1})`` to ``device_end_N``. One
  rule for every span kind: while the device still runs a step, that time is
  the step's, whatever badput span is open (a data load, a checkpoint save or
  restore waiting for the device, a custom span); only the device's idle time
  goes to the open badput span (data loading is then synchronous) or ``OTHER``.
* Within a stream the time between two consecutive events goes to the
  innermost open badput span, else the device's open step, else ``OTHER``; so
  goodput plus all badput buckets is 100 %.

Example:
    >>> from goodput_jax.measure.engine import Engine
    >>> from goodput_jax.measure.engine.codes import B_OTHER
    >>> eng = Engine()
    >>> rows = [(0, 0, 0.0, None, None), (2, 0, 10.0, 0, None), (2, 0, 20.0, 1, None),
    ...         (1, 0, 30.0, None, None)]
    >>> eng.feed(rows)
    >>> productive, acc, _ = eng.totals(30.0)
    >>> productive, acc[B_OTHER]
    (20.0, 10.0)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from goodput_jax._lazy import lazy_exports

#: public name -> the module that defines it (imported on first use)
_EXPORTS: dict[str, str] = {
    "Engine": "goodput_jax.measure.engine.core",
    "merge_intervals": "goodput_jax.measure.engine.codes",
    "StreamKeys": "goodput_jax.measure.engine.codes",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports("goodput_jax.measure.engine", _EXPORTS, globals())

if TYPE_CHECKING:  # pragma: no cover
    from goodput_jax.measure.engine.codes import (  # noqa: F401
        StreamKeys,
        merge_intervals,
    )
    from goodput_jax.measure.engine.core import (  # noqa: F401
        Engine,
    )
