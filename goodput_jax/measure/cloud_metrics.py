"""Which Cloud Monitoring metrics a job's goodput becomes: types, labels, resources.

:class:`CloudMetrics` maps one upload's values (a calculator's details, step statistics,
interval details, hang check, stragglers, ML Productivity Goodput) to metric dicts
(``metric_type``, ``value``, ``metric_labels``, ``resource_type``, ``resource_labels``);
:class:`~goodput_jax.measure.cloud_monitoring.CloudMonitoringExporter` sends them.
Goodput, badput and step deviation as Google Cloud Monitoring time series.

What ml-goodput-measurement's monitor sends when ``GCPOptions`` ask for it, with
the same metric types and labels, on the ``compute.googleapis.com/Workload``
resource (``location``, ``workload_id`` = the job, ``replica_id``):

=========================================================  ===================================
``compute.googleapis.com/workload/goodput_time``           productive seconds
                                                           (``goodput_source=TOTAL``)
``compute.googleapis.com/workload/badput_time``            seconds per ``badput_source`` (Google's
                                                           names; custom badput as
                                                           ``CUSTOM_BADPUT_EVENTS.<TYPE>``)
``compute.googleapis.com/workload/disruptions``            disruptions (int)
``compute.googleapis.com/workload/max_productive_steps``   last productive step (int)
``compute.googleapis.com/workload/total_elapsed_time``     job seconds
``compute.googleapis.com/workload/step_time_deviation``    mean absolute step deviation (s; also
                                                           the step-deviation uploader's metric)
``compute.googleapis.com/workload/performance``            ideal step time (s), its one meaning
=========================================================  ===================================

Badput sources as Google's library sends them: never ``DATA_LOADING_ASYNC``;
``ELASTIC_*`` only from an elastic monitor; ``INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION``
and ``RECOMPILATION`` (goodput_jax's own) only when they hold time.

With the rolling-window uploader (``rolling_window_size`` = the window in seconds):

=========================================================  ===================================
``compute.googleapis.com/workload/interval_goodput``       goodput of the window (%,
                                                           ``goodput_source=TOTAL``)
``compute.googleapis.com/workload/interval_badput``        badput of the window (%) per
                                                           ``badput_source``
=========================================================  ===================================

Elastic jobs with ``include_slice_efficiency``:
``compute.googleapis.com/workload/stepping_slice_efficiency`` and
``.../available_slice_efficiency`` (``window_type=CUMULATIVE``, ``rolling_window_size=0``
from the goodput upload; ``window_type=INTERVAL`` from the rolling window). All as
ml-goodput-measurement names and labels them.

Hang detection (goodput_jax's own, see ``docs/maxtext.md``; sent only when the monitor
has a hang threshold):

=========================================================  ===================================
``compute.googleapis.com/workload_process/heartbeat``      True while the job steps, False once
                                                           it is hung (MaxText's metric type,
                                                           ``WorkloadProcess`` resource)
``custom.googleapis.com/goodput_jax/seconds_since_last_step``  seconds since the job's last step
                                                           (``generic_task`` resource)
``custom.googleapis.com/goodput_jax/hung``                 True when past the hang threshold
=========================================================  ===================================

Stragglers (goodput_jax's own; only when several hosts record the job; ``generic_task``
resource; ``rolling_window_size`` = the monitor's straggler window in seconds, ``0`` for the
whole job):

=================================================================  ===========================
``custom.googleapis.com/goodput_jax/straggler_lost_time``          seconds the other hosts
                                                                   waited for ``host`` (one
                                                                   series per slowest host)
``custom.googleapis.com/goodput_jax/straggler_share``              ``host``'s share of the
                                                                   straggler time (%)
``custom.googleapis.com/goodput_jax/straggler_total_lost_time``    all hosts' lost time (s)
=================================================================  ===========================

ML Productivity Goodput (goodput_jax's own, issue 35; ``generic_task`` resource, no metric
labels; sent only when the monitor is asked to, ``send_productivity_metrics=True``, so no
custom metric is created in a project unasked; each in %, and only when the figure exists:
no program cost recorded, no program goodput, MFU or product):

=================================================================  ===========================
``custom.googleapis.com/goodput_jax/scheduling_goodput``           held time / job time
``custom.googleapis.com/goodput_jax/runtime_goodput``              productive / held time
``custom.googleapis.com/goodput_jax/program_goodput``              roofline ideal / actual
                                                                   step time
``custom.googleapis.com/goodput_jax/ml_productivity_goodput``      the product of the three
``custom.googleapis.com/goodput_jax/ettr``                         productive / job time
                                                                   (Meta's ETTR)
``custom.googleapis.com/goodput_jax/mfu``                          model FLOPs utilisation
=================================================================  ===========================

Example:
    >>> from goodput_jax.goodput import GCPOptions
    >>> CloudMetrics(GCPOptions(project_id="p", location="us-c1"), "job").resource_labels()
    {'location': 'us-c1', 'workload_id': 'job', 'replica_id': '0'}
"""

from __future__ import annotations

import enum
import math
from typing import Any

from goodput_jax.measure.badput import GOOGLE_NAMES
from goodput_jax.measure.gce_metadata import GCPTarget

__all__ = ["CUSTOM_PREFIX", "HEARTBEAT_METRIC", "PROCESS_RESOURCE_TYPE", "RESOURCE_TYPE",
           "TASK_RESOURCE_TYPE", "CloudMetrics", "series_key"]

RESOURCE_TYPE = "compute.googleapis.com/Workload"
PROCESS_RESOURCE_TYPE = "compute.googleapis.com/WorkloadProcess"
TASK_RESOURCE_TYPE = "generic_task"
_PREFIX = "compute.googleapis.com/workload/"
HEARTBEAT_METRIC = "compute.googleapis.com/workload_process/heartbeat"
CUSTOM_PREFIX = "custom.googleapis.com/goodput_jax/"

#: not sent (as the reference: asynchronous loading is not an activity to report)
_EXCLUDED = {"DATA_LOADING_ASYNC"}
#: sent only by an elastic monitor (``elastic=True``), as only Google's elastic
#: calculator has them
_ELASTIC_SOURCES = {"ELASTIC_SLICE_DOWN", "ELASTIC_SCALE_UP", "ELASTIC_REINITIALIZATION"}
#: sent only when they hold time: Google's calculator has infrastructure recovery only
#: after a disruption and no recompilation bucket at all (goodput_jax's own)
_ONLY_WHEN_NONZERO = {"INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION", "RECOMPILATION"}


def series_key(metric: dict) -> tuple:
    """What identifies a metric dict's time series: its type, labels, resource type
    and resource labels (two points with the same key are points of one series)."""
    return (metric["metric_type"], tuple(sorted(metric["metric_labels"].items())),
            metric.get("resource_type", RESOURCE_TYPE),
            tuple(sorted(metric["resource_labels"].items())))


class CloudMetrics:
    """The metric dicts of one job's uploads (see the module docstring).

    Args:
        gcp_options: a :class:`~goodput_jax.measure.gce_metadata.GCPTarget`
            (``goodput_jax.goodput.GCPOptions``; ``project_id`` required).
        job_name: the workload id.
        elastic: the job may be elastic: send the ``ELASTIC_*`` badput sources (as
            Google's elastic monitor).

    Raises:
        TypeError: ``gcp_options`` is no GCPTarget; ValueError: no ``project_id``.
    """

    def __init__(self, gcp_options: GCPTarget, job_name: str, *, elastic: bool = False):
        if not isinstance(gcp_options, GCPTarget):
            raise TypeError(f"gcp_options ({gcp_options!r}) must be a GCPOptions")
        project = gcp_options.project_id
        if not isinstance(project, str) or not project:
            raise ValueError(f"gcp_options.project_id ({project!r}) must be a non-empty string "
                             "to send metrics to Cloud Monitoring")
        self.options = gcp_options
        self.job_name = job_name
        self.project_name = f"projects/{project}"
        self.elastic = bool(elastic)

    def resource_labels(self) -> dict[str, str]:
        """The ``compute.googleapis.com/Workload`` resource labels."""
        o = self.options
        return {"location": str(o.location or ""), "workload_id": self.job_name,
                "replica_id": str(o.replica_id)}

    def _labels(self, extra: dict) -> dict[str, str]:
        out = {k: str(v) for k, v in extra.items() if v is not None}
        acc = self.options.acc_type
        if acc:
            out["accelerator_type"] = str(acc)
        cluster = self.options.cluster_name
        if cluster:
            out["cluster_name"] = str(cluster)
        return out

    def goodput_metrics(self, details: dict, step_deviation: Any = None, *,
                        include_slice_efficiency: bool = False) -> list[dict]:
        """The metrics of one goodput upload, from a calculator's details (seconds).

        Args:
            details: ``GoodputCalculator.get_job_goodput_details()``.
            step_deviation: ``get_step_statistics()`` / ``StepDeviation`` (optional).
            include_slice_efficiency: also send the job's slice efficiency (elastic
                calculators' ``stepping_slice_efficiency`` / ``available_slice_efficiency``).

        ``Any``: a calculator result (a StepDeviation), read by its fields; this module imports
        no calculator.
        """
        out = [self._m("goodput_time", float(details["productive_time"]),
                       {"goodput_source": "TOTAL"})]
        for bt, secs in details["badput_time"].items():
            name = GOOGLE_NAMES.get(bt.name, bt.name)
            if not self._sends_source(name, secs) or bt.name == "CUSTOM_BADPUT_EVENTS":
                continue
            out.append(self._m("badput_time", float(secs), {"badput_source": name}))
        by_type: dict[str, float] = {}
        for label, secs in details.get("custom_badput_time", {}).items():
            key = str(label).upper()
            by_type[key] = by_type.get(key, 0.0) + float(secs)
        for key, secs in sorted(by_type.items()):
            out.append(self._m("badput_time", secs,
                               {"badput_source": f"CUSTOM_BADPUT_EVENTS.{key}"}))
        out.append(self._m("disruptions", int(details["num_disruptions"]),
                           {"window_type": "cumulative"}))
        out.append(self._m("max_productive_steps", int(details["last_productive_step"]), {}))
        out.append(self._m("total_elapsed_time", float(details["total_time"]),
                           {"window_type": "cumulative"}))
        if step_deviation is not None and step_deviation.num_steps:
            out += self.step_deviation_metrics(step_deviation)
            ideal = float(step_deviation.ideal_step_time)
            if math.isfinite(ideal):  # one meaning: the ideal step time (s), only
                out.append(self._m("performance", ideal, {}, with_labels=False))
        if include_slice_efficiency:
            out += self._slice_efficiency(details, {"window_type": "CUMULATIVE",
                                                    "rolling_window_size": "0"})
        return out

    def _sends_source(self, name: str, value: Any) -> bool:
        """Whether a badput source goes out, as Google's library sends them: never
        asynchronous loading, ``ELASTIC_*`` only from an elastic monitor,
        infrastructure recovery and recompilation only when they hold time."""
        if name in _EXCLUDED or (name in _ELASTIC_SOURCES and not self.elastic):
            return False
        if name in _ONLY_WHEN_NONZERO:
            return isinstance(value, dict) or float(value) > 0
        return True

    def step_deviation_metrics(self, step_deviation: Any) -> list[dict]:
        """``step_time_deviation``: the mean absolute step deviation (s), empty when
        there is no step (the step-deviation uploader's metric, and part of each
        goodput upload).

        ``Any``: a calculator result (a StepDeviation), read by its fields; this module imports
        no calculator.
        """
        if step_deviation is None or not step_deviation.num_steps:
            return []
        mean = float(abs(step_deviation.deviations).mean())
        return [self._m("step_time_deviation", mean, {})] if math.isfinite(mean) else []

    def _slice_efficiency(self, details: dict, labels: dict) -> list[dict]:
        out = []
        for key in ("stepping_slice_efficiency", "available_slice_efficiency"):
            v = details.get(key)
            if v is not None and math.isfinite(float(v)):
                out.append(self._m(key, float(v), labels))
        return out

    def interval_metrics(self, details: dict, *, include_slice_efficiency: bool = False
                         ) -> list[dict]:
        """The metrics of one rolling-window upload, from Google's interval details.

        Args:
            details: ``get_interval_metric_details(start, end)`` of the drop-in
                calculator (``interval_goodput`` {GoodputType: %}, ``interval_badput``
                {BadputType: % or {TYPE: %}}, ``interval_size`` s, and for elastic
                jobs ``stepping_slice_efficiency`` / ``available_slice_efficiency``).
            include_slice_efficiency: also send the window's slice efficiency.

        Returns:
            ``interval_goodput`` / ``interval_badput`` metrics labelled with
            ``rolling_window_size`` (empty when the window had no size).
        """
        size = details.get("interval_size")
        if not size:
            return []
        window = {"rolling_window_size": str(int(size))}
        out = []
        for gtype, pct in (details.get("interval_goodput") or {}).items():
            out.append(self._m("interval_goodput", float(pct),
                               {"goodput_source": gtype.name if isinstance(gtype, enum.Enum)
                                else str(gtype), **window}))
        for bt, pct in (details.get("interval_badput") or {}).items():
            name = GOOGLE_NAMES.get(bt.name, bt.name)
            if not self._sends_source(name, pct):
                continue
            if isinstance(pct, dict):
                for sub, v in sorted(pct.items()):
                    out.append(self._m("interval_badput", float(v),
                                       {"badput_source": f"{name}.{str(sub).upper()}", **window}))
            else:
                out.append(self._m("interval_badput", float(pct),
                                   {"badput_source": name, **window}))
        if include_slice_efficiency:
            out += self._slice_efficiency(details, {**window, "window_type": "INTERVAL"})
        return out

    def hang_metrics(self, seconds_since_last_step: float, hung: bool, *,
                     process_id: str = "0", local_rank: str = "0",
                     instance_id: str | None = None) -> list[dict]:
        """Heartbeat (True while stepping, False once hung), seconds since the last step
        and the hung flag (see the module docstring for types and resources)."""
        hb_labels = {"local_rank": str(local_rank)}
        if instance_id:
            hb_labels["instance_id"] = str(instance_id)
        o = self.options
        process = {"project_id": self.project_name.split("/", 1)[1],
                   "location": str(o.location or ""), "workload_id": self.job_name,
                   "replica_id": str(o.replica_id), "process_id": str(process_id)}
        task = self.task_resource_labels()
        return [
            {"metric_type": HEARTBEAT_METRIC, "value": not hung, "metric_labels": hb_labels,
             "resource_type": PROCESS_RESOURCE_TYPE, "resource_labels": process},
            {"metric_type": CUSTOM_PREFIX + "seconds_since_last_step",
             "value": float(seconds_since_last_step), "metric_labels": {},
             "resource_type": TASK_RESOURCE_TYPE, "resource_labels": task},
            {"metric_type": CUSTOM_PREFIX + "hung", "value": bool(hung), "metric_labels": {},
             "resource_type": TASK_RESOURCE_TYPE, "resource_labels": task},
        ]

    def task_resource_labels(self) -> dict[str, str]:
        """The ``generic_task`` resource labels of goodput_jax's own metrics (stragglers,
        productivity, the hang check's): project, location, namespace ``goodput_jax``,
        job, task (the replica)."""
        o = self.options
        return {"project_id": self.project_name.split("/", 1)[1],
                "location": str(o.location or ""), "namespace": "goodput_jax",
                "job": self.job_name, "task_id": str(o.replica_id)}

    def productivity_metrics(self, result: Any) -> list[dict]:
        """ML Productivity Goodput's factors, product, ETTR and MFU (%) under
        :data:`CUSTOM_PREFIX` (see the module docstring); a figure that does not exist
        (NaN: no program cost recorded, no held time yet) is not sent.

        Args:
            result: ``GoodputCalculator.get_productivity_goodput()``
                (:class:`~goodput_jax.measure.productivity.ProductivityGoodput`).

        Example:
            >>> import math
            >>> from goodput_jax.goodput import GCPOptions
            >>> from goodput_jax.measure.productivity import ProgramGoodput, productivity_of
            >>> exp = CloudMetrics(GCPOptions(project_id="p", location="l"), "job")
            >>> r = productivity_of(100.0, 80.0, 60.0, ProgramGoodput((), math.nan, math.nan, 0))
            >>> [(m["metric_type"].rsplit("/", 1)[1], m["value"])
            ...  for m in exp.productivity_metrics(r)]
            [('scheduling_goodput', 80.0), ('runtime_goodput', 75.0), ('ettr', 60.0)]

        ``Any``: a calculator result (a ProductivityGoodput), read by its fields; this module
        imports no calculator.
        """
        from goodput_jax.measure.tags import PRODUCTIVITY_TAGS, productivity_scalars

        task = self.task_resource_labels()
        return [{"metric_type": CUSTOM_PREFIX + PRODUCTIVITY_TAGS[tag], "value": float(v),
                 "metric_labels": {}, "resource_type": TASK_RESOURCE_TYPE,
                 "resource_labels": dict(task)}
                for tag, v in productivity_scalars(result).items()]

    def straggler_metrics(self, stragglers: Any, *, top: int = 3,
                          window_seconds: float | None = None) -> list[dict]:
        """Per-host lost time and share of the ``top`` slowest hosts, labelled ``host``,
        and the total lost time (see the module docstring); empty for one host.

        Args:
            stragglers: ``GoodputCalculator.get_step_stragglers()``
                (:class:`~goodput_jax.measure.stragglers.Stragglers`).
            top: how many of the slowest hosts get a series.
            window_seconds: the window the stragglers were computed over (None: the job).

        Example:
            >>> from goodput_jax.goodput import GCPOptions
            >>> import numpy as np
            >>> from goodput_jax.measure.events import KIND_CODES, EventKind as K
            >>> from goodput_jax.measure.stragglers import step_stragglers
            >>> st = step_stragglers(np.full(2, KIND_CODES[K.STEP_START]), np.zeros(2, int),
            ...                      np.array([0, 1]), np.array([0.0, 0.5]), np.zeros(2, int))
            >>> exp = CloudMetrics(GCPOptions(project_id="p", location="l"), "job")
            >>> [(m["metric_labels"].get("host"), m["value"]) for m in exp.straggler_metrics(st)]
            [('1', 0.5), ('1', 100.0), (None, 0.5)]

        ``Any``: a calculator result (Stragglers), read by its fields; this module imports no
        calculator.
        """
        if stragglers is None or int(stragglers.num_hosts) <= 1:
            return []
        task = self.task_resource_labels()
        window = {"rolling_window_size": "0" if window_seconds is None
                  else str(int(window_seconds))}
        out = []
        for h in stragglers.slowest(top):
            labels = {**window, "host": str(int(h.host))}
            out.append({"metric_type": CUSTOM_PREFIX + "straggler_lost_time",
                        "value": float(h.lost_time), "metric_labels": labels,
                        "resource_type": TASK_RESOURCE_TYPE, "resource_labels": task})
            out.append({"metric_type": CUSTOM_PREFIX + "straggler_share",
                        "value": 100.0 * float(h.share), "metric_labels": dict(labels),
                        "resource_type": TASK_RESOURCE_TYPE, "resource_labels": task})
        out.append({"metric_type": CUSTOM_PREFIX + "straggler_total_lost_time",
                    "value": float(stragglers.total_lost), "metric_labels": window,
                    "resource_type": TASK_RESOURCE_TYPE, "resource_labels": task})
        return out

    def _m(self, name: str, value: float, labels: dict, *,
           with_labels: bool = True) -> dict:
        return {"metric_type": _PREFIX + name, "value": value,
                "metric_labels": self._labels(labels) if with_labels else {},
                "resource_labels": self.resource_labels()}
