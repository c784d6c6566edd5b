"""``GoodputMonitor`` with ml-goodput-measurement's constructor, TensorBoard layout and
Cloud Monitoring metrics, and MaxText's flags.

Example:
    >>> m = GoodputMonitor("j", "goodput_j", "/tmp/tb-doc", monitor_goodput=False,
    ...                    goodput_upload_interval_seconds=60, store=":memory:")  # doctest: +SKIP
    >>> m.upload_interval, m.monitoring_enabled                                   # doctest: +SKIP
    (60.0, False)
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
from typing import TYPE_CHECKING, Any

from goodput_jax.compat.calculator import GoodputCalculator
from goodput_jax.compat.enums import GoodputType, IntervalMetricType
from goodput_jax.compat.options import LOGGER_NAME, GCPOptions, check_flag, check_positive
from goodput_jax.compat.recorder import flush_live_recorders
from goodput_jax.measure.calculator import GoodputCalculator as _BaseCalculator
from goodput_jax.measure.monitor import GoodputMonitor as _BaseMonitor
from goodput_jax.measure.monitor_options import MonitorOptions, check_windows, monitor_options

if TYPE_CHECKING:
    from goodput_jax.measure.calculator import StepDeviation
    from goodput_jax.measure.cloud_monitoring import CloudMonitoringExporter

__all__ = ["GoodputMonitor", "google_monitor_options"]

_log = logging.getLogger(LOGGER_NAME)


def google_monitor_options(
    upload_interval: float | None, monitoring_enabled: bool, include_badput_breakdown: bool,
    include_step_deviation: bool | None, configured_ideal_step_time: float | None,
    step_deviation_interval_seconds: float | None, final_flush_timeout_seconds: float | None,
    *, monitor_goodput: bool | None = None,
    goodput_upload_interval_seconds: float | None = None,
    monitor_step_time_deviation: bool | None = None,
    extra: dict[str, Any] | None = None,
) -> tuple[MonitorOptions, bool]:
    """Google's and MaxText's monitor arguments as :class:`MonitorOptions`: the one place
    the drop-in's constructor becomes options.

    ``extra`` holds goodput_jax's own (``options=`` and :class:`MonitorOptions` fields
    such as ``hang_threshold_seconds``, ``stop_timeout``, ``tag_layout``); an explicit
    ``stop_timeout`` wins over ``final_flush_timeout_seconds``, and the tag layout is
    Google's (``"reference"``) unless given.

    Returns:
        ``(options, monitor_step_time_deviation)``: the flag says whether
        :meth:`GoodputMonitor.start` also starts the step-deviation uploader.

    Raises:
        ValueError: two arguments that name one setting disagree, or a value is invalid.

    Example:
        >>> o, dev = google_monitor_options(None, False, False, None, None, 10, 30.0,
        ...                                 monitor_goodput=True)
        >>> o.monitoring_enabled, o.badput_tags, o.tag_layout, o.stop_timeout, dev
        (True, False, 'reference', 30.0, False)

    ``Any``: the old keyword arguments, each checked as it becomes a field of the options (an
    unknown one is a one-line TypeError).
    """
    extra = dict(extra or {})
    if upload_interval is None:
        upload_interval = 30.0 if goodput_upload_interval_seconds is None \
            else goodput_upload_interval_seconds
    elif goodput_upload_interval_seconds is not None and \
            float(goodput_upload_interval_seconds) != float(upload_interval):
        raise ValueError(
            f"upload_interval ({upload_interval!r}) and goodput_upload_interval_seconds "
            f"({goodput_upload_interval_seconds!r}) disagree; give one of them")
    mg = check_flag("monitor_goodput", monitor_goodput)
    if mg is not None:
        monitoring_enabled = mg
    dev = check_flag("monitor_step_time_deviation", monitor_step_time_deviation)
    if include_step_deviation is None:
        include_step_deviation = bool(dev)
    elif dev is not None and dev != bool(include_step_deviation):
        raise ValueError(
            f"include_step_deviation ({include_step_deviation!r}) and "
            f"monitor_step_time_deviation ({monitor_step_time_deviation!r}) disagree")
    if final_flush_timeout_seconds is not None:
        extra.setdefault("stop_timeout", check_positive(
            "final_flush_timeout_seconds", final_flush_timeout_seconds))
    extra.setdefault("tag_layout", "reference")
    options = monitor_options(
        extra.pop("options", None), upload_interval=upload_interval,
        monitoring_enabled=bool(monitoring_enabled),
        badput_tags=bool(check_flag("include_badput_breakdown", include_badput_breakdown)),
        include_step_deviation=bool(include_step_deviation),
        configured_ideal_step_time=configured_ideal_step_time,
        step_deviation_interval_seconds=step_deviation_interval_seconds, **extra)
    return options, bool(dev)


class GoodputMonitor(_BaseMonitor):
    """:class:`goodput_jax.measure.monitor.GoodputMonitor` with Google's constructor and layout.

    Writes ml-goodput-measurement's TensorBoard layout: event files in
    ``<tensorboard_dir>/goodput/``, tags ``goodput/goodput``,
    ``badput/<google name>`` (``badput/tpu_initialization``,
    ``badput/data_loading_sync``, ...), ``badput/custom_badput_events/<type>``
    and ``step_deviation``; goodput_jax's extra tags sit beside them
    (``docs/tensorboard_tags.md``).

    Args:
        job_name, logger_name, tensorboard_dir, upload_interval, monitoring_enabled,
        pathway_enabled, include_badput_breakdown, include_step_deviation,
        configured_ideal_step_time, step_deviation_interval_seconds: as in
            Google's library (same defaults). ``upload_interval`` may be omitted when
            ``goodput_upload_interval_seconds`` is given (default 30 s when neither is).
        gcp_options: :class:`GCPOptions`. With ``monitoring_enabled`` and either
            ``enable_gcp_*`` flag, an empty ``project_id``, ``location`` or
            ``acc_type`` is filled from the GCE metadata server (as Google's
            library; ``$GCE_METADATA_HOST`` or ``$GCE_METADATA_ROOT`` names the
            server); with a project and a location, goodput, badput, step deviation,
            rolling-window (and, with a hang threshold, hang) metrics also go to Cloud
            Monitoring (needs the ``gcp`` extra; ``$GOODPUT_JAX_MONITORING_ENDPOINT``
            names another endpoint), within the service's write rules (points of a
            series at least 5 s apart; the stop waits for the held ones, see
            ``docs/maxtext.md``), else a warning says why not.
        skip_final_flush: ``stop_*`` skips the final upload.
        final_flush_timeout_seconds: bound of each ``stop_*`` (s), the wait for held
            Cloud Monitoring points included.
        gcs_sync_interval_seconds, cache_dir: accepted; no on-disk cache to sync.
        max_logs_retention_period: passed to the calculator.
        monitor_goodput: MaxText's flag; when given it decides ``monitoring_enabled``.
        goodput_upload_interval_seconds: MaxText's name for ``upload_interval``.
        monitor_step_time_deviation: MaxText's name for ``include_step_deviation``;
            with it, :meth:`start` also starts the step-deviation uploader.
        rolling_windows_seconds: MaxText's windows (s): :meth:`start` also starts the
            rolling-window uploader, :meth:`stop` stops it first.
        **kwargs: the base monitor's extras (``store``, ``clock``, ``tag_layout``,
            ``hang_threshold_seconds`` ...) and ``gcm_client``: a
            ``monitoring_v3.MetricServiceClient`` to send with.

    Raises:
        ValueError: ``upload_interval`` and ``goodput_upload_interval_seconds``
            disagree, or an interval is not positive.

    Example:
        >>> m = GoodputMonitor("j", "goodput_j", "/tmp/tb-doc", monitor_goodput=False,
        ...                    goodput_upload_interval_seconds=60,
        ...                    store=":memory:")  # doctest: +SKIP
        >>> m.upload_interval, m.monitoring_enabled  # doctest: +SKIP
        (60.0, False)
    """

    #: send and write the slice efficiency (the elastic monitor's option; its drop-in,
    #: ``goodput_jax.monitoring_elastic``, sets it per instance)
    include_slice_efficiency: bool = False

    def __init__(
        self,
        job_name: str,
        logger_name: str | None,
        tensorboard_dir: str | os.PathLike,
        upload_interval: float | None = None,
        monitoring_enabled: bool = False,
        pathway_enabled: bool = False,
        include_badput_breakdown: bool = False,
        include_step_deviation: bool | None = None,
        configured_ideal_step_time: float | None = None,
        step_deviation_interval_seconds: float | None = 10,
        gcp_options: GCPOptions | None = None,
        skip_final_flush: bool = False,
        final_flush_timeout_seconds: float | None = 30.0,
        gcs_sync_interval_seconds: int = 3600,
        cache_dir: str | os.PathLike = "/tmp",
        max_logs_retention_period: datetime.timedelta | None = None,
        *,
        monitor_goodput: bool | None = None,
        goodput_upload_interval_seconds: float | None = None,
        monitor_step_time_deviation: bool | None = None,
        rolling_windows_seconds: Any = None,
        **kwargs: Any,
    ):
        """``Any``: Google's or MaxText's objects (a ``google.cloud.logging`` logger, a MaxText
        config, an orbax manager) from libraries without type information, duck-typed as their
        code does.
        """
        gcm_client = kwargs.pop("gcm_client", None)
        resources = {k: kwargs.pop(k) for k in ("store", "clock", "calculator") if k in kwargs}
        self.rolling_windows_seconds = (None if rolling_windows_seconds is None
                                        else check_windows(rolling_windows_seconds))
        options, self.monitor_step_time_deviation = google_monitor_options(
            upload_interval, monitoring_enabled, include_badput_breakdown,
            include_step_deviation, configured_ideal_step_time,
            step_deviation_interval_seconds, final_flush_timeout_seconds,
            monitor_goodput=monitor_goodput,
            goodput_upload_interval_seconds=goodput_upload_interval_seconds,
            monitor_step_time_deviation=monitor_step_time_deviation, extra=kwargs)
        if gcp_options is not None and not isinstance(gcp_options, GCPOptions) and not all(
                hasattr(gcp_options, f.name) for f in dataclasses.fields(GCPOptions)):
            raise TypeError(f"gcp_options ({gcp_options!r}) must be a GCPOptions")
        self.gcp_options = gcp_options if gcp_options is not None else GCPOptions()
        self.pathway_enabled = bool(pathway_enabled)
        self.skip_final_flush = bool(skip_final_flush)
        self.gcs_sync_interval_seconds = gcs_sync_interval_seconds
        self.cache_dir = os.fspath(cache_dir)
        self.max_logs_retention_period = max_logs_retention_period
        super().__init__(job_name, logger_name, tensorboard_dir, options=options, **resources)
        self._gcm: CloudMonitoringExporter | None = None
        self._defer_gcm_flush = False
        self._google_calc: GoodputCalculator | None = None
        self._google_dev_last = -1  # the last step whose Google deviation was written
        #: what the GCE metadata server said (None when it was not asked)
        self.gce_metadata = None
        opts = self.gcp_options
        if self.monitoring_enabled and (
                opts.enable_gcp_goodput_metrics or opts.enable_gcp_step_deviation_metrics):
            from goodput_jax.measure.cloud_monitoring import (
                CloudMonitoringExporter,
                fill_gcp_options,
            )

            opts, self.gce_metadata = fill_gcp_options(opts)
            self.gcp_options = opts
            if opts.project_id and opts.location:
                self._gcm = CloudMonitoringExporter(opts, job_name, client=gcm_client,
                                                    clock=self._now, elastic=self.elastic_tags)
                _log.info("goodput monitor: sending Cloud Monitoring metrics to project %r, "
                          "location %r", opts.project_id, opts.location)
            else:
                missing = [n for n in ("project_id", "location") if not getattr(opts, n)]
                _log.warning(
                    "goodput monitor: Cloud Monitoring disabled: gcp_options.%s not given and "
                    "not found on the GCE metadata server (%s)", " and ".join(missing),
                    self.gce_metadata.error or "it had no such entry")

    @property
    def include_badput_breakdown(self) -> bool:
        """Google's name for :attr:`badput_tags` (here default False, as Google's)."""
        return self.badput_tags

    @property
    def cloud_monitoring(self) -> CloudMonitoringExporter | None:
        """The :class:`~goodput_jax.measure.cloud_monitoring.CloudMonitoringExporter`
        sending this monitor's metrics (None when Cloud Monitoring is off)."""
        return self._gcm

    def goodput_exporter(self) -> CloudMonitoringExporter | None:
        """:attr:`cloud_monitoring` when ``gcp_options.enable_gcp_goodput_metrics``."""
        return self._gcm if self.gcp_options.enable_gcp_goodput_metrics else None

    def upload_goodput(self) -> dict[str, float]:
        values = super().upload_goodput()
        gcm = self.goodput_exporter()
        if gcm is not None and values:
            calc = self.calculator
            # the measure room's details (seconds, its keys), whichever calculator this is
            details = (_BaseCalculator.get_job_goodput_details(calc)
                       if isinstance(calc, _BaseCalculator) else calc.get_job_goodput_details())
            if self.include_slice_efficiency:  # the elastic calculator's details carry them
                full = calc.get_job_goodput_details()
                details.update({k: full[k] for k in ("stepping_slice_efficiency",
                                                     "available_slice_efficiency") if k in full})
            gcm.send_goodput(details, calc.get_step_statistics(), self._now(),
                             include_slice_efficiency=self.include_slice_efficiency)
        return values

    def upload_hang_status(self, last_step: int | None = None, *, flush: bool = True
                           ) -> dict[str, float]:
        values = super().upload_hang_status(last_step, flush=flush)
        # the hang metrics (custom ones among them) only when a threshold asks for them
        if self._gcm is not None and values and self.hang_threshold_seconds is not None \
                and self.gcp_options.enable_gcp_goodput_metrics:
            md = self.gce_metadata
            self._gcm.send(self._gcm.hang_metrics(
                values["hang/seconds_since_last_step"], bool(values.get("hang/hung", 0.0)),
                instance_id=md.instance_id if md is not None else None), self._now())
        return values

    def _interval_calculator(self) -> GoodputCalculator:
        calc = self.calculator
        if isinstance(calc, GoodputCalculator):  # Google's interval rule is its own
            return calc
        if self._google_calc is None:  # Google's interval rule on the same store
            self._google_calc = GoodputCalculator(self.job_name, self.logger_name,
                                                  store=calc.store, clock=self.clock)
        return self._google_calc

    def upload_rolling_window_goodput(self, window_seconds: Any = None) -> dict[str, float]:
        """Write ``goodput/interval_<W>s`` for each window ending now (Google's interval
        rule, :meth:`GoodputCalculator.get_interval_metric_details`) and, with Cloud
        Monitoring on, send each window's ``interval_goodput`` / ``interval_badput``
        (and slice efficiency for elastic monitors) as Google's rolling-window uploader.

        ``Any``: this is where the caller's value is checked (anything may come in; a one-line
        error names the argument and the value).
        """
        windows = self.rolling_windows if window_seconds is None else check_windows(
            window_seconds)
        now = self._now()
        values: dict[str, float] = {}
        slice_eff = self.include_slice_efficiency
        calc = self._interval_calculator()
        gcm = self.goodput_exporter()
        for w in windows:
            details = calc.get_interval_metric_details(now - w, now)
            g = details.get(IntervalMetricType.INTERVAL_GOODPUT.value) or {}
            if GoodputType.TOTAL in g:
                values[self.window_tag(w)] = float(g[GoodputType.TOTAL])
            if gcm is not None:
                gcm.send_interval(details, now, include_slice_efficiency=slice_eff)
        if values:
            self.write_scalars(self.last_step, values)
        return values

    def step_deviation_points(self, dev: StepDeviation) -> list[tuple[int, float]]:
        """Google's points under ``step_deviation``: the drop-in calculator's
        :meth:`~goodput_jax.compat.calculator.GoodputCalculator.get_step_deviation`
        (|gap from a step's start to the next one's - the ideal|) for each step after the
        last one written, at its value when first written (Google rewrites every step on
        every upload; the latest value per step is the same)."""
        try:
            google = self._interval_calculator().get_step_deviation(
                self.configured_ideal_step_time)
        except ValueError:  # no step times yet, or no ideal (Google skips the cycle)
            return []
        new = [(s, v) for s, v in sorted(google.items()) if s > self._google_dev_last]
        if new:
            self._google_dev_last = new[-1][0]
        return new

    def upload_step_deviation(self) -> dict[str, float]:
        values = super().upload_step_deviation()
        if self._gcm is not None and values and self.gcp_options.enable_gcp_step_deviation_metrics:
            self._gcm.send_step_deviation(self.calculator, self._now())
        return values

    def _stop(self, name: str, timeout: float | None, final: bool = True) -> bool:
        # Every stop_* / close() ends with a final upload: first make this process's
        # recorders of the same job write what they hold (e.g. the job end just recorded).
        if final:
            flush_live_recorders(self.job_name, self.stop_timeout if timeout is None else timeout)
        done = super()._stop(name, timeout, final)
        if not self._defer_gcm_flush:
            self._flush_gcm(timeout)
        return done

    def _flush_gcm(self, timeout: float | None) -> bool:
        """Send the Cloud Monitoring points still held for their series' sampling period,
        waiting until it has passed (see ``docs/maxtext.md``)."""
        if self._gcm is None:
            return True
        return self._gcm.flush(self.stop_timeout if timeout is None else timeout)

    def close(self, timeout: float | None = None) -> bool:
        """Stop every uploader (each after a final upload), send the Cloud Monitoring
        points still held, and close the event file. Idempotent."""
        self._defer_gcm_flush = True
        try:
            ok = super().close(timeout)
        finally:
            self._defer_gcm_flush = False
        return self._flush_gcm(timeout) and ok

    def _final(self, skip_final_flush: bool | None) -> bool:
        skip = self.skip_final_flush if skip_final_flush is None else bool(skip_final_flush)
        return not skip

    def stop_goodput_uploader(  # type: ignore[override]  # Google's parameters
            self, skip_final_flush: bool | None = None, *,
            timeout: float | None = None) -> bool:
        """Stop the goodput uploader, after a final upload unless ``skip_final_flush``."""
        return self._stop("goodput", timeout, self._final(skip_final_flush))

    def stop_step_deviation_uploader(  # type: ignore[override]  # Google's parameters
            self, skip_final_flush: bool | None = None, *,
            timeout: float | None = None) -> bool:
        """Stop the step-deviation uploader, after a final upload unless ``skip_final_flush``."""
        return self._stop("step_deviation", timeout, self._final(skip_final_flush))

    def start_rolling_window_goodput_uploader(self, rolling_windows_seconds: Any) -> bool:
        """Start uploading the goodput of the last ``W`` seconds for each window ``W``.

        Args:
            rolling_windows_seconds: a window length (s) or a list of them (Google's name).

        ``Any``: this is where the caller's value is checked (anything may come in; a one-line
        error names the argument and the value).
        """
        return super().start_rolling_window_goodput_uploader(rolling_windows_seconds)

    def stop_rolling_window_goodput_uploader(  # type: ignore[override]  # Google's parameters
            self, skip_final_flush: bool | None = None, *,
            timeout: float | None = None) -> bool:
        """Stop the rolling-window uploader, after a final upload unless ``skip_final_flush``."""
        return self._stop("rolling_window", timeout, self._final(skip_final_flush))

    def start(self) -> bool:
        """Start the goodput uploader (and the step-deviation one when MaxText asked for it,
        and the rolling-window one when ``rolling_windows_seconds`` was given).

        Returns:
            Whether the goodput uploader runs (False when monitoring is disabled).
        """
        started = self.start_goodput_uploader()
        if started and self.monitor_step_time_deviation:
            self.start_step_deviation_uploader()
        if started and self.rolling_windows_seconds:
            self.start_rolling_window_goodput_uploader(self.rolling_windows_seconds)
        return started

    def stop(self, timeout: float | None = None) -> None:
        """Stop every uploader, each after a final upload (idempotent); the rolling-window
        one first, as MaxText does. Then the Cloud Monitoring points held for their
        series' sampling period are sent, after one wait for it (at most 5 s)."""
        self._defer_gcm_flush = True  # one wait for the sampling period, after all three
        try:
            if self.rolling_windows_seconds:
                self.stop_rolling_window_goodput_uploader(timeout=timeout)
            self.stop_goodput_uploader(timeout=timeout)
            if self.monitor_step_time_deviation:
                self.stop_step_deviation_uploader(timeout=timeout)
        finally:
            self._defer_gcm_flush = False
        self._flush_gcm(timeout)
