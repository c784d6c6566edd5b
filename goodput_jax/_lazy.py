"""The one lazy re-export mechanism behind the curated package APIs (PEP 562).

``goodput_jax``, ``goodput_jax.model`` and ``goodput_jax.sched`` list their public
names in a ``{name: module}`` table; a name's module is imported on first use, so
``import goodput_jax`` starts no JAX. This module imports nothing from the package.

Example:
    >>> ns = {}
    >>> getattr_, dir_ = lazy_exports("pkg", {"sqrt": "math"}, ns)
    >>> getattr_("sqrt")(4.0), ns["sqrt"] is getattr_("sqrt"), dir_()
    (2.0, True, ['sqrt'])
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


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
    """
    submodules = dict(modules or {})

    def __getattr__(name: str) -> Any:
        if name in submodules:
            return importlib.import_module(submodules[name])
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(exports) | set(submodules)
                      | {k for k in namespace if not k.startswith("_")})

    return __getattr__, __dir__
