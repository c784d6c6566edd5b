"""Drop-in for ``ml_goodput_measurement.monitoring_elastic`` (MaxText's elastic monitor).

Example:
    >>> from goodput_jax import monitoring_elastic
    >>> monitoring_elastic.ElasticGoodputMonitor.__mro__[1].__name__
    'GoodputMonitor'
"""

from __future__ import annotations

import datetime
import os
from typing import Any

from goodput_jax.goodput import GCPOptions, GoodputMonitor
from goodput_jax.goodput_elastic import ElasticGoodputCalculator

__all__ = ["ElasticGoodputMonitor", "GCPOptions"]


class ElasticGoodputMonitor(GoodputMonitor):
    """:class:`goodput_jax.goodput.GoodputMonitor` on an :class:`ElasticGoodputCalculator`.

    Google's constructor (no ``pathway_enabled``: elastic jobs run on Pathways). The
    badput tags include ``badput/elastic_slice_down``, ``badput/elastic_scale_up`` and
    ``badput/elastic_reinitialization``; with ``include_slice_efficiency`` the tags
    ``goodput/stepping_slice_efficiency`` and ``goodput/available_slice_efficiency``
    (and the Cloud Monitoring metrics, when enabled) carry the slice efficiency.

    Example:
        >>> m = ElasticGoodputMonitor("j", "goodput_j", "/tmp/tb", 30,
        ...                           store=":memory:")            # doctest: +SKIP
    """

    elastic_tags = True

    def __init__(
        self,
        job_name: str,
        logger_name: str | None,
        tensorboard_dir: str | os.PathLike,
        upload_interval: float | None = None,
        monitoring_enabled: bool = False,
        include_badput_breakdown: bool = False,
        include_step_deviation: bool = False,
        include_slice_efficiency: bool = False,
        configured_ideal_step_time: float | None = None,
        step_deviation_interval_seconds: float | None = 10,
        gcp_options: GCPOptions | None = None,
        skip_final_flush: bool = False,
        final_flush_timeout_seconds: float | None = 30.0,
        gcs_sync_interval_seconds: int = 3600,
        cache_dir: str | os.PathLike = "/tmp",
        max_logs_retention_period: datetime.timedelta | None = None,
        **kwargs: Any,
    ):
        self.include_slice_efficiency = bool(include_slice_efficiency)
        if kwargs.get("calculator") is None:
            from goodput_jax.measure.stores import resolve_store

            store = kwargs.pop("store", None)
            self._owns_elastic_store = store is None or isinstance(store, str)
            kwargs["calculator"] = ElasticGoodputCalculator(
                job_name, logger_name, using_pathways=True,
                max_logs_retention_period=max_logs_retention_period,
                store=resolve_store(store), clock=kwargs.get("clock"),
                configured_ideal_step_time=configured_ideal_step_time)
        super().__init__(
            job_name, logger_name, tensorboard_dir, upload_interval, monitoring_enabled,
            True, include_badput_breakdown, include_step_deviation, configured_ideal_step_time,
            step_deviation_interval_seconds, gcp_options, skip_final_flush,
            final_flush_timeout_seconds, gcs_sync_interval_seconds, cache_dir,
            max_logs_retention_period, **kwargs)
        if getattr(self, "_owns_elastic_store", False):
            self._owns_store = True

    def upload_goodput(self) -> dict[str, float]:
        values = super().upload_goodput()
        if values and self.include_slice_efficiency:
            d = self.calculator.get_job_goodput_details()
            extra = {f"goodput/{k}": float(d[k]) for k in
                     ("stepping_slice_efficiency", "available_slice_efficiency") if k in d}
            if extra:
                self.write_scalars(int(d.get("last_productive_step", 0)), extra)
                values.update(extra)
        return values
