"""A loopback GCS emulator (``gcp-storage-emulator``, in memory, on 127.0.0.1, a free port)
that gcsfs reaches through ``STORAGE_EMULATOR_HOST``; Google's auth library's "am I on GCE"
probe is pointed at a loopback web server that is not a metadata server, so it answers "no"
at once and nothing leaves 127.0.0.1."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

import pytest


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@contextlib.contextmanager
def gcs_emulator(monkeypatch: pytest.MonkeyPatch, bucket: str = "tb-bucket") -> Iterator[str]:
    """Run the emulator with ``bucket``; yields its ``http://127.0.0.1:PORT`` endpoint."""
    server_mod = pytest.importorskip("gcp_storage_emulator.server")
    pytest.importorskip("gcsfs")
    import fsspec

    from tests.measure._gce_metadata_server import FakeMetadataServer

    port = _free_port()
    server = server_mod.create_server("127.0.0.1", port, in_memory=True, default_bucket=bucket)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    with FakeMetadataServer(flavor=False) as not_metadata:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", endpoint)
        monkeypatch.setenv("GCE_METADATA_HOST", not_metadata.host)
        monkeypatch.setenv("GCE_METADATA_IP", not_metadata.host)
        fsspec.filesystem("gs").clear_instance_cache()  # no instance bound to another endpoint
        try:
            yield endpoint
        finally:
            fsspec.filesystem("gs").clear_instance_cache()
            server.stop()
