"""The typed contract of the checked rooms cannot rot silently (issue 43, item 8).

mypy checks the bodies (``python -m mypy``, ``[tool.mypy]`` in pyproject.toml, with
``disallow_untyped_defs`` for these rooms); this test holds the public surface as the
package ships it, whatever the checker's configuration says:

1. every public function and every public method of a public class in these rooms
   annotates each parameter and its return (``__init__`` needs no return annotation);
2. an ``Any`` in such a signature is explained in the docstring (the docstring names
   ``Any`` and says why); the signatures that predate the rule are listed in
   ``UNEXPLAINED_ANY`` and the list can only shrink: a new unexplained ``Any`` fails, and
   so does a listed one that was typed or explained (drop it from the list);
3. ``py.typed`` ships beside the package.

Public = exported through the module's ``__all__``; a module without ``__all__``
exports every non-underscore function or class defined in it.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import goodput_jax

#: the rooms whose public API is fully typed (the others are a baseline in pyproject.toml)
PACKAGES = ("goodput_jax.measure", "goodput_jax.compat", "goodput_jax.adaptive",
            "goodput_jax.cli")
MODULES = ("goodput_jax", "goodput_jax._lazy", "goodput_jax._progress", "goodput_jax.demo",
           "goodput_jax.goodput", "goodput_jax.goodput_elastic", "goodput_jax.goodput_utils",
           "goodput_jax.monitoring", "goodput_jax.monitoring_elastic",
           "goodput_jax.integrations.fit")
CHECKED_PREFIXES = PACKAGES + MODULES[1:]

_ANY = re.compile(r"\bAny\b")

#: Public signatures with an ``Any`` their docstring does not explain yet (the baseline
#: when the rule came in). Only shrinks: type the parameter, or say in the docstring why
#: it is ``Any``, then remove the name here.
UNEXPLAINED_ANY = frozenset({
    "goodput_jax._lazy.lazy_exports",
    "goodput_jax.adaptive.checkpoint.manager",
    "goodput_jax.adaptive.checkpoint.restore",
    "goodput_jax.adaptive.checkpoint.save",
    "goodput_jax.adaptive.controller.AdaptiveBatchSize.__init__",
    "goodput_jax.adaptive.controller.AdaptiveBatchSize.batch_like",
    "goodput_jax.adaptive.controller.AdaptiveBatchSize.next_batch",
    "goodput_jax.adaptive.controller.AdaptiveBatchSize.prepare_opt_state",
    "goodput_jax.adaptive.controller.AdaptiveBatchSize.step",
    "goodput_jax.adaptive.controller.default_atomic_sizes",
    "goodput_jax.adaptive.data.ArraySource.__init__",
    "goodput_jax.adaptive.data.ArraySource.take",
    "goodput_jax.adaptive.data.IterableSource.take",
    "goodput_jax.adaptive.data.as_source",
    "goodput_jax.adaptive.decisions.PrecompilingStep.is_compiled",
    "goodput_jax.adaptive.decisions.PrecompilingStep.precompile",
    "goodput_jax.adaptive.decisions.SwitchDecisions.batch_like",
    "goodput_jax.adaptive.decisions.SwitchDecisions.stats_stable",
    "goodput_jax.adaptive.options.AdaptiveOptions.with_keywords",
    "goodput_jax.adaptive.step.data_mesh",
    "goodput_jax.adaptive.step.make_train_step",
    "goodput_jax.adaptive.step.progress_of",
    "goodput_jax.cli._common.Parser.error",
    "goodput_jax.cli._common.one_line",
    "goodput_jax.cli._common.resolve_job",
    "goodput_jax.compat.calculator.GoodputCalculator.__init__",
    "goodput_jax.compat.calculator.GoodputCalculator.get_job_goodput_details",
    "goodput_jax.compat.calculator.GoodputCalculator.get_job_goodput_with_exclusions",
    "goodput_jax.compat.elastic.ElasticGoodputCalculator.get_job_goodput_details",
    "goodput_jax.compat.elastic.ElasticGoodputMonitor.__init__",
    "goodput_jax.compat.enums.BadputType.of",
    "goodput_jax.compat.maxtext.create_goodput_monitor",
    "goodput_jax.compat.maxtext.create_goodput_recorder",
    "goodput_jax.compat.maxtext.from_maxtext_config",
    "goodput_jax.compat.maxtext.get_goodput_job_name",
    "goodput_jax.compat.maxtext.maybe_instrument_checkpoint_manager",
    "goodput_jax.compat.maxtext.maybe_monitor_goodput",
    "goodput_jax.compat.maxtext.maybe_record_goodput",
    "goodput_jax.compat.maxtext.record_goodput",
    "goodput_jax.compat.monitor.GoodputMonitor.__init__",
    "goodput_jax.compat.monitor.GoodputMonitor.start_rolling_window_goodput_uploader",
    "goodput_jax.compat.monitor.GoodputMonitor.upload_rolling_window_goodput",
    "goodput_jax.compat.monitor.google_monitor_options",
    "goodput_jax.compat.options.check_flag",
    "goodput_jax.compat.options.check_positive",
    "goodput_jax.compat.options.cloud_logger_store",
    "goodput_jax.compat.options.recorder_options",
    "goodput_jax.compat.options.to_ts",
    "goodput_jax.compat.recorder.GoodputRecorder.__init__",
    "goodput_jax.compat.utils.get_timestamp_from_log_entry",
    "goodput_jax.measure.calculator.GoodputCalculator.__init__",
    "goodput_jax.measure.calculator.GoodputCalculator.get_job_goodput_details",
    "goodput_jax.measure.calculator.GoodputCalculator.timeline",
    "goodput_jax.measure.cloud_metrics.CloudMetrics.goodput_metrics",
    "goodput_jax.measure.cloud_metrics.CloudMetrics.productivity_metrics",
    "goodput_jax.measure.cloud_metrics.CloudMetrics.step_deviation_metrics",
    "goodput_jax.measure.cloud_metrics.CloudMetrics.straggler_metrics",
    "goodput_jax.measure.cloud_monitoring.CloudMonitoringExporter.__init__",
    "goodput_jax.measure.cloud_monitoring.CloudMonitoringExporter.send_goodput",
    "goodput_jax.measure.cloud_monitoring.CloudMonitoringExporter.send_productivity",
    "goodput_jax.measure.cloud_monitoring.make_client",
    "goodput_jax.measure.engine.codes.payload",
    "goodput_jax.measure.engine.core.Engine.feed",
    "goodput_jax.measure.engine.rules.window_ends",
    "goodput_jax.measure.events.check_job_name",
    "goodput_jax.measure.events.check_step",
    "goodput_jax.measure.events.to_timestamp",
    "goodput_jax.measure.monitor.GoodputMonitor.__init__",
    "goodput_jax.measure.monitor.GoodputMonitor.clock",
    "goodput_jax.measure.monitor_calculator.MonitoredCalculator.get_job_goodput",
    "goodput_jax.measure.monitor_calculator.MonitoredCalculator.get_job_goodput_details",
    "goodput_jax.measure.monitor_calculator.MonitoredCalculator.get_job_goodput_interval",
    "goodput_jax.measure.monitor_calculator.MonitoredCalculator.get_latest_hints",
    "goodput_jax.measure.monitor_options.check_windows",
    "goodput_jax.measure.monitor_options.monitor_options",
    "goodput_jax.measure.monitor_options.nonnegative_seconds",
    "goodput_jax.measure.monitor_options.positive_seconds",
    "goodput_jax.measure.options.RecorderOptions.__init__",
    "goodput_jax.measure.options.RecorderOptions.merged",
    "goodput_jax.measure.protocols.StepRecording.add_span_start_listener",
    "goodput_jax.measure.protocols.StepRecording.remove_span_start_listener",
    "goodput_jax.measure.protocols.require_step_recording",
    "goodput_jax.measure.recorder.GoodputRecorder.__init__",
    "goodput_jax.measure.recorder.GoodputRecorder.add_span_start_listener",
    "goodput_jax.measure.recorder.GoodputRecorder.remove_span_start_listener",
    "goodput_jax.measure.recorder_spans.check_label",
    "goodput_jax.measure.results.check_ideal",
    "goodput_jax.measure.results.estimate_ideal_step_time",
    "goodput_jax.measure.results.mad_limit",
    "goodput_jax.measure.sink.StepSink.__init__",
    "goodput_jax.measure.sink.StepSink.put",
    "goodput_jax.measure.stores.base.BasicStore.read_events",
    "goodput_jax.measure.stores.base.EventStore.read_columns",
    "goodput_jax.measure.stores.base.RowColumns.read_columns",
    "goodput_jax.measure.stores.base.RowStoreAdapter.read_events",
    "goodput_jax.measure.stores.base.as_event_store",
    "goodput_jax.measure.stores.cloud_logger.CloudLoggerStore.__init__",
    "goodput_jax.measure.stores.cloud_logger.CloudLoggerStore.read_events",
    "goodput_jax.measure.stores.cloud_logger.from_entry",
    "goodput_jax.measure.stores.cloud_logging.CloudLoggingStore.__init__",
    "goodput_jax.measure.stores.cloud_logging.CloudLoggingStore.from_url",
    "goodput_jax.measure.stores.cloud_logging.CloudLoggingStore.stats",
    "goodput_jax.measure.stores.cloud_logging_options.CloudLoggingOptions.__init__",
    "goodput_jax.measure.stores.cloud_logging_options.CloudLoggingOptions.merged",
    "goodput_jax.measure.stores.cloud_logging_options.validate_logger_name",
    "goodput_jax.measure.stores.cloud_logging_options.validate_project",
    "goodput_jax.measure.stores.open_store",
    "goodput_jax.measure.stores.sqlite.PendingSQLiteStore.read_columns",
    "goodput_jax.measure.stores.sqlite.PendingSQLiteStore.read_events",
    "goodput_jax.measure.stores.sqlite.SQLiteStore.append_raw",
    "goodput_jax.measure.stores.sqlite.SQLiteStore.read_columns",
    "goodput_jax.measure.stores.sqlite.SQLiteStore.read_events",
    "goodput_jax.measure.stores.sqlite.SQLiteStore.read_rows",
    "goodput_jax.measure.tags.JsonHints.to_json",
    "goodput_jax.measure.tags.badput_scalars",
    "goodput_jax.measure.tags.finite_number",
    "goodput_jax.measure.tags.hint_scalars",
    "goodput_jax.measure.tags.productivity_scalars",
    "goodput_jax.measure.tags.straggler_scalars",
    "goodput_jax.measure.tensorboard.LocalEventFile.add_event",
    "goodput_jax.measure.tensorboard.RemoteEventFile.add_event",
})


def _module_names() -> list[str]:
    names = list(MODULES)
    for package in PACKAGES:
        names.append(package)
        mod = importlib.import_module(package)
        names += [m.name for m in pkgutil.walk_packages(mod.__path__, package + ".")
                  if not m.name.endswith("__main__")]
    return names


def _checked(obj: object) -> bool:
    module = getattr(obj, "__module__", None) or ""
    return any(module == p or module.startswith(p + ".") for p in CHECKED_PREFIXES)


def _public(module_name: str) -> Iterator[tuple[str, object]]:
    mod = importlib.import_module(module_name)
    exported = getattr(mod, "__all__", None)
    if exported is None:
        exported = [n for n, v in vars(mod).items()
                    if not n.startswith("_") and (inspect.isfunction(v) or inspect.isclass(v))
                    and getattr(v, "__module__", None) == module_name]
    for name in exported:
        obj = getattr(mod, name)
        if (inspect.isfunction(obj) or inspect.isclass(obj)) and _checked(obj):
            yield name, obj


def _functions() -> dict[str, Callable[..., object]]:
    """Every public function and public method of the checked rooms, by qualified name
    (an object exported twice is checked once, under its defining module)."""
    out: dict[str, Callable[..., object]] = {}
    for module_name in _module_names():
        for _, obj in _public(module_name):
            if inspect.isfunction(obj):
                out[f"{obj.__module__}.{obj.__qualname__}"] = obj
                continue
            assert inspect.isclass(obj)
            for attr, value in vars(obj).items():
                if attr.startswith("_") and attr != "__init__":
                    continue
                if isinstance(value, (staticmethod, classmethod)):
                    value = value.__func__
                elif isinstance(value, property):
                    value = value.fget
                # only what the class itself defines (not a Protocol's or NamedTuple's
                # generated methods)
                if inspect.isfunction(value) and value.__qualname__.startswith(
                        obj.__qualname__ + "."):
                    out[f"{obj.__module__}.{value.__qualname__}"] = value
    return out


def _annotations(fn: Callable[..., object]) -> tuple[list[str], list[object]]:
    """(the names of unannotated parameters (and "return"), the annotations present)."""
    sig = inspect.signature(fn)
    missing, present = [], []
    for p in sig.parameters.values():
        if p.name in ("self", "cls") and p.kind is p.POSITIONAL_OR_KEYWORD:
            continue
        if p.annotation is inspect.Parameter.empty:
            missing.append(p.name)
        else:
            present.append(p.annotation)
    if fn.__name__ != "__init__":
        if sig.return_annotation is inspect.Signature.empty:
            missing.append("return")
        else:
            present.append(sig.return_annotation)
    return missing, present


FUNCTIONS = _functions()


def test_the_checked_rooms_export_functions():
    # the walk finds the API (a broken walk must not pass every check vacuously)
    assert len(FUNCTIONS) > 300
    for name in ("goodput_jax.measure.recorder.GoodputRecorder.record_step_start_time",
                 "goodput_jax.measure.calculator.GoodputCalculator.get_job_goodput",
                 "goodput_jax.compat.calculator.GoodputCalculator.get_job_goodput",
                 "goodput_jax.adaptive.controller.AdaptiveBatchSize.step",
                 "goodput_jax.cli.main"):
        assert name in FUNCTIONS, name


def test_every_public_signature_is_annotated():
    unannotated = {}
    for name, fn in FUNCTIONS.items():
        missing, _ = _annotations(fn)
        if missing:
            unannotated[name] = missing
    assert not unannotated, f"public signatures without annotations: {unannotated}"


def _unexplained_any() -> set[str]:
    out = set()
    for name, fn in FUNCTIONS.items():
        _, present = _annotations(fn)
        if any(_ANY.search(a if isinstance(a, str) else repr(a)) for a in present):
            if not _ANY.search(inspect.getdoc(fn) or ""):
                out.add(name)
    return out


def test_any_in_a_public_signature_is_explained():
    found = _unexplained_any()
    new = sorted(found - UNEXPLAINED_ANY)
    assert not new, ("Any in a public signature without a reason in its docstring "
                     f"(type it, or say why it is Any): {new}")
    fixed = sorted(UNEXPLAINED_ANY - found)
    assert not fixed, f"typed or explained now: remove from UNEXPLAINED_ANY: {fixed}"


def test_the_rule_sees_an_unannotated_function():
    def untyped(a, b: int):  # (the case the rule catches)
        return a

    def typed(a: int, b: int) -> int:
        return a

    assert _annotations(untyped)[0] == ["a", "return"]
    assert _annotations(typed)[0] == []


def test_py_typed_ships():
    pkg = Path(goodput_jax.__file__).parent
    assert (pkg / "py.typed").is_file()
    text = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert re.search(r'^"goodput_jax" = \[[^\]]*"py\.typed"', text, re.M), \
        "pyproject.toml's package-data must ship goodput_jax/py.typed"
