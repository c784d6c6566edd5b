"""The one lazy re-export mechanism behind the curated package APIs (PEP 562).

``goodput_jax``, ``goodput_jax.model`` and ``goodput_jax.sched`` list their public
names in a ``{name: module}`` table; a name's module is imported on first use, so
``import goodput_jax`` starts no JAX. This module imports nothing from the package.

A name whose module needs an optional dependency that is not installed fails with a
``ModuleNotFoundError`` that names the extra bringing it (:data:`EXTRA_OF_MODULE`,
``pip install "goodput-jax[model]"``); the command-line tools use the same table.

Example:
    >>> ns = {}
    >>> getattr_, dir_ = lazy_exports("pkg", {"sqrt": "math"}, ns)
    >>> getattr_("sqrt")(4.0), ns["sqrt"] is getattr_("sqrt"), dir_()
    (2.0, True, ['sqrt'])
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

#: The optional-dependency group (``pip install "goodput-jax[EXTRA]"``) that brings a module.
EXTRA_OF_MODULE: dict[str, str] = {
    "flax": "demo",
    "orbax": "demo",
    "matplotlib": "report",
    "scipy": "sim",
    "google": "gcp",
    "ray": "cluster",
    "jax": "model",
    "jaxlib": "model",
    "optax": "model",
}


def extra_of(module: str | None) -> str | None:
    """The extra that brings ``module`` (or its top-level package), or None.

    Example:
        >>> extra_of("jax.numpy"), extra_of("json")
        ('model', None)
    """
    return EXTRA_OF_MODULE.get((module or "").split(".")[0])


def missing_extra_message(extra: str, module: str, what: str) -> str:
    """The one-line message for ``what`` needing ``extra`` (``module`` is not installed).

    Example:
        >>> print(missing_extra_message("sim", "scipy", "goodput-jax-sim"))
        goodput-jax-sim needs the 'sim' extra (scipy is not installed): pip install "goodput-jax[sim]"
    """  # noqa: E501 (a doctest's one-line output)
    return (f"{what} needs the {extra!r} extra ({module} is not installed): "
            f"pip install \"goodput-jax[{extra}]\"")


def has_module(name: str) -> bool:
    """Whether ``name`` can be imported, without importing it (a missing parent counts).

    Example:
        >>> has_module("json"), has_module("no_such_module_xyz")
        (True, False)
    """
    if name in sys.modules:
        return sys.modules[name] is not None
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package is missing or blocked
        return False


def first_missing(modules: Iterable[str]) -> str | None:
    """The first of ``modules`` that cannot be imported, or None when all can.

    Example:
        >>> first_missing(["json", "no_such_module_xyz"])
        'no_such_module_xyz'
    """
    return next((m for m in modules if not has_module(m)), None)


def lazy_exports(
    package: str,
    exports: Mapping[str, str],
    namespace: dict[str, Any],
    *,
    modules: Mapping[str, str] | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Module-level ``__getattr__`` and ``__dir__`` for a package's curated API.

    Args:
        package: the package's dotted name (for the error message).
        exports: public name -> module that defines it.
        namespace: the package's ``globals()``; a resolved name is cached there.
        modules: public name -> submodule exported as a module (``goodput_jax.goodput``).

    Returns:
        ``(__getattr__, __dir__)`` to assign in the package's ``__init__``.

    Raises:
        AttributeError: (from ``__getattr__``) a name that is not exported.
        ModuleNotFoundError: (from ``__getattr__``) the name's module needs an extra that
            is not installed; the message names it (``pip install "goodput-jax[model]"``).

    ``Any``: the exported values are whatever the modules define (classes, functions,
    constants).
    """
    submodules = dict(modules or {})

    def __getattr__(name: str) -> Any:
        if name in submodules:
            return importlib.import_module(submodules[name])
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        try:
            imported = importlib.import_module(module)
        except ModuleNotFoundError as e:
            extra = extra_of(e.name)
            if extra is None or e.name is None:
                raise
            raise ModuleNotFoundError(missing_extra_message(extra, e.name, f"{package}.{name}"),
                                      name=e.name) from e
        value = getattr(imported, name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(exports) | set(submodules)
                      | {k for k in namespace if not k.startswith("_")})

    return __getattr__, __dir__
