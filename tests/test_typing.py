"""The typed contract of the checked rooms cannot rot silently (issue 43, item 8).

mypy checks the bodies (``python -m mypy``, ``[tool.mypy]`` in pyproject.toml, with
``disallow_untyped_defs`` for these rooms); this test holds the public surface as the
package ships it, whatever the checker's configuration says:

1. every public function and every public method of a public class in these rooms
   annotates each parameter and its return (``__init__`` needs no return annotation);
2. an ``Any`` in such a signature is explained in the docstring (the docstring names
   ``Any`` and says why); ``UNEXPLAINED_ANY`` (empty) may only shrink: a new
   unexplained ``Any`` fails, and so does a listed one that was typed or explained;
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
            "goodput_jax.cli", "goodput_jax.model", "goodput_jax.sched")
MODULES = ("goodput_jax", "goodput_jax._lazy", "goodput_jax._progress", "goodput_jax.demo",
           "goodput_jax.goodput", "goodput_jax.goodput_elastic", "goodput_jax.goodput_utils",
           "goodput_jax.monitoring", "goodput_jax.monitoring_elastic",
           "goodput_jax.integrations.fit", "goodput_jax.cluster.api", "goodput_jax.cluster.plan",
           "goodput_jax.cluster.spec", "goodput_jax.cluster.record", "goodput_jax.cluster.local",
           "goodput_jax.cluster.state", "goodput_jax.cluster.options",
           "goodput_jax.cluster.context")
CHECKED_PREFIXES = PACKAGES + MODULES[1:]

_ANY = re.compile(r"\bAny\b")

#: Public signatures with an ``Any`` their docstring does not explain yet. Empty since the
#: rule came in; it only shrinks: type the parameter, or say in the docstring why it is
#: ``Any`` (a name may be parked here only while that is being done).
UNEXPLAINED_ANY: frozenset[str] = frozenset()


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


def _doc(fn: Callable[..., object]) -> str:
    """The docstring that explains ``fn``'s signature: a constructor's may be its class's
    (a dataclass's generated ``__init__`` has none of its own)."""
    doc = inspect.getdoc(fn) or ""
    if fn.__name__ == "__init__":
        module = importlib.import_module(fn.__module__)
        owner = getattr(module, fn.__qualname__.rsplit(".", 1)[0], None)
        doc += "\n" + (inspect.getdoc(owner) or "")
    return doc


def _unexplained_any() -> set[str]:
    out = set()
    for name, fn in FUNCTIONS.items():
        _, present = _annotations(fn)
        if any(_ANY.search(a if isinstance(a, str) else repr(a)) for a in present):
            if not _ANY.search(_doc(fn)):
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
