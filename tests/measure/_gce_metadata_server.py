"""A fake GCE metadata server on 127.0.0.1 (a real HTTP server, for the real lookup code).

It answers ``/computeMetadata/v1/<path>`` from a dict, only to requests carrying
``Metadata-Flavor: Google`` (403 otherwise, as the real server), with that header
on every answer; unknown paths are 404. ``stall=True`` accepts connections and
never answers (a server that hangs); ``flavor=False`` answers 404 to everything
without the header (a web server that is not a metadata server: Google's auth
library's probe says "not on GCE" at once, without retrying).
"""

from __future__ import annotations

import http.server
import socket
import threading
from typing import Self

DEFAULT_VALUES = {
    "project/project-id": "fake-proj",
    "instance/zone": "projects/123456789/zones/us-central2-b",
    "instance/machine-type": "projects/123456789/machineTypes/ct5lp-hightpu-4t",
    "instance/id": "4242",
    "instance/attributes/cluster-name": "fake-cluster",
}


class FakeMetadataServer:
    """``with FakeMetadataServer() as md: os.environ["GCE_METADATA_HOST"] = md.host``."""

    def __init__(self, values: dict[str, str] | None = None, *, stall: bool = False,
                 flavor: bool = True):
        self.values = dict(DEFAULT_VALUES if values is None else values)
        self.stall = stall
        self.flavor = flavor
        self.requests: list[tuple[str, str | None]] = []  # (path, Metadata-Flavor header)

    def __enter__(self) -> Self:
        if self.stall:
            self._sock = socket.socket()
            self._sock.bind(("127.0.0.1", 0))
            self._sock.listen(8)
            self.port = self._sock.getsockname()[1]
            return self
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                flavor = self.headers.get("Metadata-Flavor")
                outer.requests.append((self.path, flavor))
                prefix = "/computeMetadata/v1/"
                if not outer.flavor:
                    self._answer(404, "not found")
                elif flavor != "Google":
                    self._answer(403, "Missing Metadata-Flavor:Google header.")
                elif self.path.startswith(prefix) and self.path[len(prefix):] in outer.values:
                    self._answer(200, outer.values[self.path[len(prefix):]])
                else:
                    self._answer(404, "not found")

            def _answer(self, code: int, body: str) -> None:
                data = body.encode()
                self.send_response(code)
                if outer.flavor:
                    self.send_header("Metadata-Flavor", "Google")
                self.send_header("Content-Type", "application/text")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):  # quiet
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __exit__(self, *exc) -> None:
        if self.stall:
            self._sock.close()
            return
        self._server.shutdown()
        self._server.server_close()


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
