"""A loopback stand-in for the Cloud Logging v2 REST API, for tests and benchmarks.

There is no official Cloud Logging emulator. This server implements the two
calls the store makes, closely enough for the real ``google-cloud-logging``
client (HTTP transport) to talk to it:

- ``POST /v2/entries:write``: top-level ``logName`` / ``resource`` / ``labels``
  defaults, ``insertId`` and ``timestamp`` filled in when missing, duplicates
  (same log, timestamp and insertId) dropped as the service does, numbers in
  ``jsonPayload`` turned into doubles (protobuf ``Struct`` semantics).
- ``POST /v2/entries:list``: ``resourceNames``, a real parser for the subset of
  the Logging query language the store uses (comparisons ``= != < <= > >= :``
  on ``logName``, ``timestamp``, ``insertId``, ``severity``, ``labels.*``,
  ``jsonPayload.*``; ``AND`` / ``OR`` / ``NOT`` / ``-``, parentheses, implicit
  AND; quoted strings with backslash escapes; string comparisons are
  case-insensitive, as in the real language), ``orderBy timestamp asc|desc``
  (ties by insertId), ``pageSize`` and a ``pageToken`` that resumes after the
  last returned entry.

Faults are injectable: :meth:`FakeCloudLogging.fail` answers the next N calls of
a method with an HTTP error (500, 429, 503, 400, ...), ``latency_s`` delays
every call, and :meth:`FakeCloudLogging.hold` blocks calls until released.

Example:
    >>> with FakeCloudLogging() as srv:                   # doctest: +SKIP
    ...     client = srv.client("proj")
"""

from __future__ import annotations

import base64
import bisect
import contextlib
import datetime as _dt
import http.server
import json
import re
import threading
import time
from typing import Any, Self

_TS_RE = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})$"
)


def parse_rfc3339_nanos(value: str) -> int:
    """RFC 3339 timestamp -> integer nanoseconds since the epoch (ValueError if malformed)."""
    m = _TS_RE.match(value)
    if not m:
        raise ValueError(f"bad timestamp {value!r}")
    y, mo, d, h, mi, s, frac, tz = m.groups()
    base = _dt.datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), tzinfo=_dt.UTC)
    if tz != "Z":
        sign = 1 if tz[0] == "+" else -1
        base -= sign * _dt.timedelta(hours=int(tz[1:3]), minutes=int(tz[4:6]))
    secs = int((base - _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)).total_seconds())
    nanos = int((frac or "0").ljust(9, "0"))
    return secs * 1_000_000_000 + nanos


def format_rfc3339_nanos(nanos: int) -> str:
    secs, frac = divmod(nanos, 1_000_000_000)
    base = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC) + _dt.timedelta(seconds=secs)
    return base.strftime("%Y-%m-%dT%H:%M:%S") + f".{frac:09d}Z"


class FilterSyntaxError(ValueError):
    pass


# ----------------------------------------------------------------- filter language
_TOKEN_RE = re.compile(
    r"""\s*(?:
        (?P<lpar>\() | (?P<rpar>\)) |
        (?P<op>>=|<=|!=|=|<|>|:) |
        (?P<str>"(?:[^"\\]|\\.)*") |
        (?P<word>[^\s()"=<>!:]+)
    )""",
    re.VERBOSE,
)


def _tokenize(text: str) -> list[tuple[str, str]]:
    out = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if not m or m.end() == pos:
            raise FilterSyntaxError(f"unexpected character at {pos} in filter {text!r}")
        pos = m.end()
        kind = m.lastgroup
        val = m.group(kind)
        if kind == "str":
            val = re.sub(r"\\(.)", r"\1", val[1:-1])
        out.append((kind, val))
    return out


class _Parser:
    """Recursive descent: or := and (OR and)*; and := unary ([AND] unary)*;
    unary := (NOT|-) unary | '(' or ')' | field op value."""

    def __init__(self, text: str):
        self.toks = _tokenize(text)
        self.i = 0

    def peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> tuple[str, str]:
        tok = self.peek()
        if tok is None:
            raise FilterSyntaxError("unexpected end of filter")
        self.i += 1
        return tok

    def parse(self):
        if not self.toks:
            return ("true",)
        node = self.parse_or()
        if self.peek() is not None:
            raise FilterSyntaxError(f"unexpected token {self.peek()[1]!r}")
        return node

    def parse_or(self):
        node = self.parse_and()
        while self.peek() == ("word", "OR"):
            self.take()
            node = ("or", node, self.parse_and())
        return node

    def parse_and(self):
        node = self.parse_unary()
        while True:
            tok = self.peek()
            if tok is None or tok[0] == "rpar" or tok == ("word", "OR"):
                return node
            if tok == ("word", "AND"):
                self.take()
            node = ("and", node, self.parse_unary())

    def parse_unary(self):
        tok = self.take()
        if tok == ("word", "NOT"):
            return ("not", self.parse_unary())
        if tok[0] == "word" and tok[1] == "-":
            return ("not", self.parse_unary())
        if tok[0] == "lpar":
            node = self.parse_or()
            if self.take()[0] != "rpar":
                raise FilterSyntaxError("missing )")
            return node
        if tok[0] != "word" or tok[1] in ("AND", "OR"):
            raise FilterSyntaxError(f"expected a field name, got {tok[1]!r}")
        op = self.take()
        if op[0] != "op":
            # A bare word would be a global text search in the real language; not needed here.
            raise FilterSyntaxError(f"expected an operator after {tok[1]!r}, got {op[1]!r}")
        val = self.take()
        if val[0] not in ("str", "word"):
            raise FilterSyntaxError(f"expected a value after {op[1]!r}")
        return ("cmp", tok[1], op[1], val[1])


def _field(entry: dict, path: str) -> Any:
    cur: Any = entry
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _evaluate(node, entry: dict) -> bool:
    kind = node[0]
    if kind == "true":
        return True
    if kind == "and":
        return _evaluate(node[1], entry) and _evaluate(node[2], entry)
    if kind == "or":
        return _evaluate(node[1], entry) or _evaluate(node[2], entry)
    if kind == "not":
        return not _evaluate(node[1], entry)
    _, field, op, value = node
    actual = _field(entry, field)
    if actual is None:
        return op == "!="
    if field in ("timestamp", "receiveTimestamp"):
        a, b = parse_rfc3339_nanos(actual), parse_rfc3339_nanos(value)
    elif isinstance(actual, (int, float)) and not isinstance(actual, bool):
        try:
            a, b = float(actual), float(value)
        except ValueError:
            a, b = str(actual), value
    else:
        # The Logging query language compares strings case-insensitively.
        a, b = str(actual).casefold(), value.casefold()
    if op == ":":
        return str(b).lower() in str(a).lower()
    return {
        "=": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b,
    }[op]


def _structify(value: Any) -> Any:
    """protobuf Struct semantics: every number is a double."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, dict):
        return {str(k): _structify(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_structify(v) for v in value]
    raise TypeError(f"not JSON: {value!r}")


class HttpFault(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


_STATUS_NAMES = {
    400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED",
}


class FakeCloudLogging:
    """The in-memory log plus the loopback HTTP server that serves it.

    Attributes:
        entries: every stored entry (API representation), in arrival order.
        calls: ``(method, status)`` of every request, e.g. ``("write", 200)``.
        latency_s: delay added to every request.
    """

    def __init__(self, default_page_size: int = 50, max_page_size: int = 1000):
        self.entries: list[dict] = []
        self._sorted_keys: list[tuple[int, str]] = []
        self._sorted: list[dict] = []
        self._keys: set[tuple[str, int, str]] = set()
        self.calls: list[tuple[str, int]] = []
        self.list_bodies: list[dict] = []
        self.auth_headers: list[str | None] = []
        self.latency_s = 0.0
        self.default_page_size = default_page_size
        self.max_page_size = max_page_size
        self._faults: dict[str, list[tuple[int, str, bool]]] = {"write": [], "list": []}
        self._lock = threading.Lock()
        self._seq = 0
        self._generation = 0
        self._gate = threading.Event()
        self._gate.set()
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --------------------------------------------------------------- control
    @property
    def endpoint(self) -> str:
        assert self._server is not None, "server not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeCloudLogging:
        srv = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                path = self.path.split("?", 1)[0]
                with srv._lock:
                    srv.auth_headers.append(self.headers.get("Authorization"))
                status, body = srv._dispatch(path, raw)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._gate.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def fail(
        self,
        method: str,
        status: int,
        times: int = 1,
        message: str = "injected",
        after_commit: bool = False,
    ) -> None:
        """Answer the next ``times`` calls of ``method`` ("write" or "list") with ``status``.

        With ``after_commit`` the call is carried out first and the error sent
        afterwards (a lost response: the client must retry, the service
        de-duplicates).
        """
        with self._lock:
            self._faults[method].extend([(status, message, after_commit)] * times)

    @contextlib.contextmanager
    def hold(self):
        """Block every request until the context exits (a hung service)."""
        self._gate.clear()
        try:
            yield
        finally:
            self._gate.set()

    def reset(self) -> None:
        with self._lock:
            self._generation += 1
            self.entries.clear()
            self._sorted_keys.clear()
            self._sorted.clear()
            self._keys.clear()
            self.calls.clear()
            self.list_bodies.clear()
            self.auth_headers.clear()
            for v in self._faults.values():
                v.clear()
            self.latency_s = 0.0

    def client(self, project: str = "test-project"):
        """A real ``google.cloud.logging.Client`` pointed at this server (HTTP, anonymous)."""
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import logging as gcl

        return gcl.Client(
            project=project,
            credentials=AnonymousCredentials(),
            _use_grpc=False,
            client_options={"api_endpoint": self.endpoint},
        )

    def count(self, method: str, status: int | None = None) -> int:
        with self._lock:
            return sum(1 for m, s in self.calls if m == method and (status is None or s == status))

    # --------------------------------------------------------------- API
    def _dispatch(self, path: str, raw: bytes) -> tuple[int, dict]:
        method = {"/v2/entries:write": "write", "/v2/entries:list": "list"}.get(path)
        if method is None:
            return 404, _error(404, f"no such method {path}")
        generation = self._generation
        self._gate.wait()
        if self.latency_s:
            time.sleep(self.latency_s)
        if generation != self._generation:
            # Held across a reset(): a previous test's request must not leak into this one.
            return 503, _error(503, "server was reset")
        with self._lock:
            fault = self._faults[method].pop(0) if self._faults[method] else None
        if fault is not None and not fault[2]:
            status, msg, _ = fault
            self._record(method, status)
            return status, _error(status, msg)
        try:
            body = json.loads(raw or b"{}")
            if method == "list":
                with self._lock:
                    self.list_bodies.append(body)
            out = self._write(body) if method == "write" else self._list(body)
            status = 200
        except HttpFault as e:
            out, status = _error(e.status, str(e)), e.status
        except (ValueError, KeyError, TypeError) as e:
            out, status = _error(400, f"{type(e).__name__}: {e}"), 400
        if fault is not None:
            status, msg, _ = fault
            out = _error(status, msg)
        self._record(method, status)
        return status, out

    def _record(self, method: str, status: int) -> None:
        with self._lock:
            self.calls.append((method, status))

    def _write(self, body: dict) -> dict:
        entries = body.get("entries")
        if not isinstance(entries, list) or not entries:
            raise HttpFault(400, "entries must be a non-empty list")
        default_log = body.get("logName")
        default_res = body.get("resource")
        default_labels = body.get("labels") or {}
        prepared = []
        now = time.time_ns()
        for i, e in enumerate(entries):
            e = dict(e)
            log = e.get("logName") or default_log
            if not log or not re.match(r"^projects/[^/]+/logs/[^/]+$", log):
                raise HttpFault(400, f"entries[{i}]: bad or missing logName {log!r}")
            e["logName"] = log
            res = e.get("resource") or default_res
            if not res or "type" not in res:
                raise HttpFault(400, f"entries[{i}]: missing resource")
            e["resource"] = res
            labels = dict(default_labels)
            labels.update(e.get("labels") or {})
            if any(not isinstance(v, str) for v in labels.values()):
                raise HttpFault(400, f"entries[{i}]: label values must be strings")
            if labels:
                e["labels"] = labels
            nanos = parse_rfc3339_nanos(e["timestamp"]) if e.get("timestamp") else now
            e["timestamp"] = format_rfc3339_nanos(nanos)
            e["receiveTimestamp"] = format_rfc3339_nanos(now)
            if "jsonPayload" in e:
                e["jsonPayload"] = _structify(e["jsonPayload"])
            prepared.append((nanos, e))
        with self._lock:
            for nanos, e in prepared:
                if not e.get("insertId"):
                    self._seq += 1
                    e["insertId"] = f"srv{self._seq:012d}"
                key = (e["logName"], nanos, e["insertId"])
                if key in self._keys:
                    continue  # the service de-duplicates retried entries
                self._keys.add(key)
                e["_nanos"] = nanos
                self.entries.append(e)
                k = (nanos, e["insertId"])
                i = bisect.bisect_right(self._sorted_keys, k)
                self._sorted_keys.insert(i, k)
                self._sorted.insert(i, e)
        return {}

    def _list(self, body: dict) -> dict:
        names = body.get("resourceNames")
        if not isinstance(names, list) or not names:
            raise HttpFault(400, "resourceNames is required")
        projects = set()
        for n in names:
            m = re.match(r"^projects/([^/]+)$", n)
            if not m:
                raise HttpFault(400, f"unsupported resource name {n!r}")
            projects.add(m.group(1))
        try:
            tree = _Parser(body.get("filter") or "").parse()
        except FilterSyntaxError as e:
            raise HttpFault(400, f"invalid filter: {e}") from None
        order = (body.get("orderBy") or "timestamp asc").strip()
        if order not in ("timestamp asc", "timestamp desc"):
            raise HttpFault(400, f"unsupported orderBy {order!r}")
        desc = order == "timestamp desc"
        size = int(body.get("pageSize") or self.default_page_size)
        size = max(1, min(size, self.max_page_size))
        after = None
        token = body.get("pageToken")
        if token:
            try:
                tok = json.loads(base64.urlsafe_b64decode(token.encode()))
                after = (int(tok["n"]), str(tok["i"]))
                if tok["f"] != _fingerprint(body):
                    raise ValueError("query changed")
            except (ValueError, KeyError, TypeError) as e:
                raise HttpFault(400, f"invalid pageToken: {e}") from None
        # Entries are kept sorted by (timestamp, insertId): scan from the token's
        # position and stop once a page (plus one, to know about a next page) matched.
        with self._lock:
            keys, entries = self._sorted_keys, self._sorted
            if desc:
                start = len(keys) if after is None else bisect.bisect_left(keys, after)
                order_idx = range(start - 1, -1, -1)
            else:
                start = 0 if after is None else bisect.bisect_right(keys, after)
                order_idx = range(start, len(keys))
            matched = []
            for i in order_idx:
                e = entries[i]
                if e["logName"].split("/")[1] in projects and _evaluate(tree, e):
                    matched.append(e)
                    if len(matched) > size:
                        break
        page = matched[:size]
        out: dict[str, Any] = {
            "entries": [{k: v for k, v in e.items() if k != "_nanos"} for e in page]
        }
        if len(matched) > size:
            last = page[-1]
            tok = {"n": last["_nanos"], "i": last["insertId"], "f": _fingerprint(body)}
            out["nextPageToken"] = base64.urlsafe_b64encode(json.dumps(tok).encode()).decode()
        if not out["entries"]:
            del out["entries"]
        return out


def _fingerprint(body: dict) -> str:
    return json.dumps(
        [body.get("resourceNames"), body.get("filter"), body.get("orderBy")], sort_keys=True
    )


def _error(status: int, message: str) -> dict:
    return {
        "error": {"code": status, "message": message, "status": _STATUS_NAMES.get(status, "UNKNOWN")}
    }


# ----------------------------------------------------------------- pytest helpers
_LOOPBACK = {"127.0.0.1", "::1", "localhost"}


@contextlib.contextmanager
def loopback_only():
    """Patch the metadata-server probe and refuse any socket traffic off the loopback.

    The client library probes the GCE metadata server when it builds a logger
    without an explicit resource (``list_entries`` does); that probe is patched
    to answer "not on GCP". Any other attempt to resolve or connect to a
    non-loopback address raises, so a test cannot leak traffic.
    """
    import socket

    import pytest

    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo

    def _check(address) -> None:
        host = address[0] if isinstance(address, tuple) else address
        if isinstance(host, str) and host not in _LOOPBACK and not host.startswith("/"):
            raise OSError(f"test tried to reach {address!r}, off the loopback")

    def connect(self, address):
        _check(address)
        return real_connect(self, address)

    def connect_ex(self, address):
        _check(address)
        return real_connect_ex(self, address)

    def getaddrinfo(host, *args, **kwargs):
        if host is not None and host not in _LOOPBACK:
            raise OSError(f"test tried to resolve {host!r}, off the loopback")
        return real_getaddrinfo(host, *args, **kwargs)

    def no_metadata(*args, **kwargs):
        return None

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(
            "google.cloud.logging_v2.handlers._monitored_resources.retrieve_metadata_server",
            no_metadata,
        )
        mp.setattr("google.cloud.logging_v2._helpers.retrieve_metadata_server", no_metadata)
        mp.setattr(socket.socket, "connect", connect)
        mp.setattr(socket.socket, "connect_ex", connect_ex)
        mp.setattr(socket, "getaddrinfo", getaddrinfo)
        # google.auth must never probe for credentials or the metadata server.
        mp.setenv("GCE_METADATA_HOST", "127.0.0.1:9")
        mp.setenv("GCE_METADATA_IP", "127.0.0.1:9")
        mp.setenv("NO_GCE_CHECK", "True")
        mp.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
        yield


def global_resource():
    from google.cloud.logging import Resource

    return Resource(type="global", labels={})


def make_store(server: FakeCloudLogging, logger_name: str = "goodput_test", **kwargs):
    """A CloudLoggingStore on a real client pointed at ``server`` (fast retries)."""
    from goodput_jax.measure.stores.cloud_logging import CloudLoggingStore

    kwargs.setdefault("resource", global_resource())
    kwargs.setdefault("retry_initial", 0.001)
    kwargs.setdefault("retry_max", 0.01)
    kwargs.setdefault("flush_interval", 0.005)
    kwargs.setdefault("close_timeout", 2.0)
    return CloudLoggingStore(client=server.client(), logger_name=logger_name, **kwargs)


def _serve_main(argv: list[str] | None = None) -> int:
    """``python -m tests.measure.gcl_server [--latency-ms L]``: serve on a loopback port
    (printed on stdout as the endpoint) until stdin closes. Used by benchmarks so the
    server's CPU time does not share the benchmark process's GIL."""
    import argparse
    import sys

    p = argparse.ArgumentParser()
    p.add_argument("--latency-ms", type=float, default=0.0)
    args = p.parse_args(argv)
    with FakeCloudLogging() as srv:
        srv.latency_s = args.latency_ms / 1e3
        print(srv.endpoint, flush=True)
        sys.stdin.read()
    return 0


if __name__ == "__main__":
    raise SystemExit(_serve_main())
