"""Both stores pass the same EventStore contract (tests/measure/store_contract.py).

- ``sqlite``: SQLiteStore on a file in tmp_path.
- ``gcl``: CloudLoggingStore on the real google-cloud-logging client (HTTP
  transport, anonymous credentials) talking to the loopback Cloud Logging
  server of tests/measure/gcl_server.py, with a small read page size so that
  reads cross page boundaries.
"""

from __future__ import annotations

import pytest

from tests.measure.gcl_server import FakeCloudLogging, loopback_only, make_store
from tests.measure.store_contract import StoreContract


class _SQLiteBackend:
    def __init__(self, path):
        self.path = path
        self.opened = []

    def open(self):
        from goodput_jax.measure.stores.sqlite import SQLiteStore

        store = SQLiteStore(self.path)
        self.opened.append(store)
        return store

    def sync(self, store):
        pass

    def close(self):
        for s in self.opened:
            s.close()


class _GCLBackend:
    def __init__(self, server: FakeCloudLogging):
        self.server = server
        self.opened = []

    def open(self):
        store = make_store(self.server, read_page_size=25, batch_size=50)
        self.opened.append(store)
        return store

    def sync(self, store):
        assert store.flush(timeout=10), "Cloud Logging store did not drain"

    def close(self):
        for s in self.opened:
            s.close(timeout=1)
            assert s.dropped_events == 0


@pytest.fixture(scope="module")
def gcl_server():
    with loopback_only(), FakeCloudLogging() as srv:
        yield srv


@pytest.fixture(params=["sqlite", "gcl"])
def backend(request, tmp_path):
    if request.param == "sqlite":
        b = _SQLiteBackend(str(tmp_path / "events.db"))
    else:
        srv = request.getfixturevalue("gcl_server")
        srv.reset()
        b = _GCLBackend(srv)
    yield b
    b.close()


class TestStoreContract(StoreContract):
    pass
