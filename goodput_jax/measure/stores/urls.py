"""Opening a store by URL: ``open_store(url)`` picks SQLite or Cloud Logging from a URL, or
from ``$GOODPUT_JAX_STORE``, or falls back to ``sqlite:///./goodput.db``;
``resolve_store`` takes a store or a URL.
"""

from __future__ import annotations

import os
from typing import Any

from goodput_jax.measure.stores.base import (
    EventStore,
    as_event_store,
)

DEFAULT_STORE_URL = "sqlite:///goodput.db"
ENV_VAR = "GOODPUT_JAX_STORE"

__all__ = ["DEFAULT_STORE_URL", "ENV_VAR", "open_store", "resolve_store"]


def open_store(url: str | None = None, *, reader: bool = False, **kwargs: Any) -> EventStore:
    """Open the store named by ``url`` (or ``$GOODPUT_JAX_STORE``, or ./goodput.db).

    Supported: ``sqlite:///relative/path`` and ``sqlite:////absolute/path``
    (SQLAlchemy's convention), a bare file path, and ``gcl://PROJECT/LOGGER`` (needs the
    ``gcp`` extra).
    With ``reader=True`` (the calculator's) a SQLite file that does not exist is not
    created: it is read as empty until a recorder creates it
    (:class:`~goodput_jax.measure.stores.sqlite.PendingSQLiteStore`).

    ``Any``: the old keyword arguments, each checked as it becomes a field of the options (an
    unknown one is a one-line TypeError).
    """
    if url is None:
        url = os.environ.get(ENV_VAR) or DEFAULT_STORE_URL
    if not isinstance(url, str) or not url:
        raise ValueError(f"store url ({url!r}) must be a non-empty string")
    if url.startswith("gcl://"):
        from goodput_jax.measure.stores.cloud_logging import CloudLoggingStore

        return CloudLoggingStore.from_url(url, **kwargs)
    if url.startswith("sqlite://"):
        # SQLAlchemy convention: sqlite:///rel/path, sqlite:////abs/path
        path = url[len("sqlite:///"):] if url.startswith("sqlite:///") else ""
        if not path:
            raise ValueError(f"store url ({url!r}) has no path")
    elif "://" in url:
        raise ValueError(
            f"store url ({url!r}) has an unknown scheme; use sqlite:///PATH or gcl://PROJECT/LOGGER"
        )
    else:
        path = url
    from goodput_jax.measure.stores.sqlite import PendingSQLiteStore, SQLiteStore

    if reader and path != ":memory:" and not os.path.exists(path):
        return PendingSQLiteStore(path, **kwargs)
    return SQLiteStore(path, **kwargs)


def resolve_store(store: EventStore | str | None, *, reader: bool = False) -> EventStore:
    """Accept an EventStore instance, a URL, or None (environment / default).

    A :class:`BasicStore` (no ``flush`` / columnar read) comes back wrapped in a
    :class:`RowStoreAdapter`. ``reader=True``: see :func:`open_store` (creates no file).
    """
    if store is None or isinstance(store, str):
        return open_store(store, reader=reader)
    return as_event_store(store)
