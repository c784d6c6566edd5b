"""Event stores: SQLite (embedded default) and Google Cloud Logging.

``open_store(url)`` picks one from a URL, or from ``GOODPUT_JAX_STORE``, or
falls back to ``sqlite:///./goodput.db``. The protocols a store satisfies are in
:mod:`~goodput_jax.measure.stores.base`; the stores in ``sqlite``, ``cloud_logging`` and
``cloud_logger``.

Example:
    >>> store = open_store("sqlite:///tmp/x.db")  # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from goodput_jax._lazy import lazy_exports

#: public name -> the module that defines it (imported on first use)
_EXPORTS: dict[str, str] = {
    "BasicStore": "goodput_jax.measure.stores.base",
    "DEFAULT_STORE_URL": "goodput_jax.measure.stores.urls",
    "ENV_VAR": "goodput_jax.measure.stores.urls",
    "EventStore": "goodput_jax.measure.stores.base",
    "RawEventStore": "goodput_jax.measure.stores.base",
    "RowStoreAdapter": "goodput_jax.measure.stores.base",
    "StoreError": "goodput_jax.measure.stores.base",
    "as_event_store": "goodput_jax.measure.stores.base",
    "open_store": "goodput_jax.measure.stores.urls",
    "resolve_store": "goodput_jax.measure.stores.urls",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports("goodput_jax.measure.stores", _EXPORTS, globals())

if TYPE_CHECKING:  # pragma: no cover
    from goodput_jax.measure.stores.base import (  # noqa: F401
        BasicStore,
        EventStore,
        RawEventStore,
        RowStoreAdapter,
        StoreError,
        as_event_store,
    )
    from goodput_jax.measure.stores.urls import (  # noqa: F401
        DEFAULT_STORE_URL,
        ENV_VAR,
        open_store,
        resolve_store,
    )
