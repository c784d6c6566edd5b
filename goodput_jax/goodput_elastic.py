"""Drop-in for ``ml_goodput_measurement.goodput_elastic`` (MaxText's elastic training path).

The elastic recorder adds slice counts, waits for slices and re-initialisation
to the goodput recorder; the elastic calculator reports them as the
``ELASTIC_SLICE_DOWN`` / ``ELASTIC_SCALE_UP`` (a wait whose event type contains
``scale_up``) and ``ELASTIC_REINITIALIZATION`` badput buckets, with
accelerator-initialisation and training-preparation time inside a
re-initialisation counted as re-initialisation, and the time-weighted
``stepping_slice_efficiency`` / ``available_slice_efficiency``.
This module re-exports ``goodput_jax.compat.elastic``.

Example:
    >>> from goodput_jax import goodput_elastic
    >>> rec = goodput_elastic.ElasticGoodputRecorder("job", "goodput_job", False)
    >>> rec.record_elastic_slice_counts(2, 4, 3)  # disabled: a no-op
"""

from __future__ import annotations

from goodput_jax.compat.calculator import GoodputCalculator  # noqa: F401
from goodput_jax.compat.elastic import (
    ElasticGoodputCalculator,
    ElasticGoodputRecorder,
    slice_efficiency,
)
from goodput_jax.compat.enums import (  # noqa: F401  (Google's entry keys, as in its module)
    _ACTIVE_SLICES,
    _AVAILABLE_SLICES,
    _ELASTIC_REINIT_END_TIME,
    _ELASTIC_REINIT_START_TIME,
    _ELASTIC_SLICE_COUNTS_TIMESTAMP,
    _ELASTIC_WAIT_END_TIME,
    _ELASTIC_WAIT_EVENT_TYPE,
    _ELASTIC_WAIT_START_TIME,
    _JOB_NAME,
    _TOTAL_SLICES,
    BadputType,
)
from goodput_jax.compat.recorder import GoodputRecorder
from goodput_jax.measure.events import EventKind  # noqa: F401

__all__ = ["ElasticGoodputCalculator", "ElasticGoodputRecorder", "GoodputRecorder",
           "slice_efficiency"]
