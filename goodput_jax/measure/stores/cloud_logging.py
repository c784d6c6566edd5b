"""Google Cloud Logging event store (extra ``gcp``).

Every host of a multi-host job can write here and the calculator can read from
anywhere, which is what the seed library uses. Events become structured
``jsonPayload`` entries of one log (``projects/PROJECT/logs/LOGGER``), labelled
with ``job``, ``run`` and ``host``, timestamped with the event's own time and
given a sortable, retry-stable ``insertId``.

Writes are synchronous: :meth:`CloudLoggingStore.append` sends its events in
batches of ``batch_size`` and returns once each batch is written or dropped,
retrying transient errors (429, 500, 502, 503, 504, connection errors) with
capped exponential backoff for at most ``retry_deadline`` seconds per batch.
The store has no queue or thread of its own: the
:class:`~goodput_jax.measure.recorder.GoodputRecorder` is the one asynchronous
buffer, and its writer thread is the one that waits on the network. A batch
that still fails at the deadline, or fails permanently, is dropped, logged and
counted (:attr:`CloudLoggingStore.dropped_events`), so ``append`` does not
raise for service errors.

Reads page forward (``orderBy timestamp asc``; ties by ``insertId``) from a
cursor, always with an explicit ``timestamp>=`` filter (without one the client
library silently restricts a query to the last 24 hours). Cloud Logging orders
by timestamp, not by arrival, and hosts flush at different times, so each read
re-scans ``read_overlap_seconds`` before the cursor's high-water mark and skips
entries it has already returned: an entry that arrives up to that much later
than newer ones is still delivered exactly once.

Names that go into filter strings (job, run) are quoted and escaped, so that a
job called ``x" OR labels.job="y`` reads only its own entries; names with
control characters are rejected. Project and logger names are validated.
Credentials come only from an injected client or the client library's standard
discovery, and are never logged or put in an error message.

Example:
    >>> from google.cloud import logging as gcl                       # doctest: +SKIP
    >>> store = CloudLoggingStore(client=gcl.Client(project="my-proj"),
    ...                           logger_name="goodput_my_run")      # doctest: +SKIP
    >>> store.append(events); store.flush()                            # doctest: +SKIP
    >>> events, cursor = store.read_events("my_run")                  # doctest: +SKIP
"""

from __future__ import annotations

import atexit
import datetime as _dt
import itertools
import logging
import random
import threading
import time
import urllib.parse
import uuid
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

from goodput_jax.measure.events import Event
from goodput_jax.measure.stores.base import RowColumns, StoreError
from goodput_jax.measure.stores.cloud_logging_options import (
    DEFAULT_READ_OVERLAP_SECONDS,
    CloudLoggingOptions,
    check_endpoint,
    check_int,
    check_nonneg,
    quote_filter_value,
    validate_logger_name,
    validate_project,
)
from goodput_jax.measure.stores.cloud_logging_wire import (
    EPOCH,
    CloudLoggingCursor,
    error_text,
    parse_ts,
    service_errors,
    transient_errors,
    ts_to_datetime,
    ts_to_iso,
    utc_iso,
)

__all__ = ["DEFAULT_READ_OVERLAP_SECONDS", "SCHEMA_KEY", "SCHEMA_VERSION", "CloudLoggingCursor",
           "CloudLoggingOptions", "CloudLoggingStore", "quote_filter_value",
           "validate_logger_name", "validate_project"]

_log = logging.getLogger(__name__)

#: Key added to every jsonPayload written by this store (identifies our entries).
SCHEMA_KEY = "goodput_jax_schema"
SCHEMA_VERSION = "event/1"

class CloudLoggingStore(RowColumns):
    """Event store on Google Cloud Logging; ``append`` writes synchronously, in batches.

    Args:
        options: a :class:`CloudLoggingOptions` (client or project, logger name, batching,
            retries, reads); validated once.
        **keywords: its fields as keywords (``client=..., logger_name=...``), translated
            into ``options`` in one place (:meth:`CloudLoggingOptions.merged`).

    Example:
        >>> store = CloudLoggingStore(project="my-proj",
        ...                           logger_name="goodput_run1")  # doctest: +SKIP
        >>> store.append([ev])  # once written (or dropped and counted)  # doctest: +SKIP
        >>> store.stats()["written"]  # doctest: +SKIP
        1
    """

    def __init__(self, *, options: CloudLoggingOptions | None = None, **keywords: Any) -> None:
        """``Any``: Google's or MaxText's objects (a ``google.cloud.logging`` logger, a MaxText
        config, an orbax manager) from libraries without type information, duck-typed as their
        code does.
        """
        o = self.options = CloudLoggingOptions.merged(options, keywords)
        self.logger_name = o.logger_name
        client = o.client
        if client is None:
            try:
                from google.cloud import logging as gcl
            except ImportError as e:  # pragma: no cover - depends on the install
                raise ImportError(
                    "CloudLoggingStore needs google-cloud-logging: pip install 'goodput-jax[gcp]'"
                ) from e
            kw: dict[str, Any] = {"project": o.project, "credentials": o.credentials}
            if o.client_options is not None:
                kw["client_options"] = o.client_options
            if o.use_grpc is not None:
                kw["_use_grpc"] = o.use_grpc
            client = gcl.Client(**kw)
        self._client = client
        self.project = validate_project(o.project if o.project is not None else client.project)
        self.log_name = (
            f"projects/{self.project}/logs/{urllib.parse.quote(self.logger_name, safe='')}"
        )
        self.url = f"gcl://{self.project}/{self.logger_name}"
        self._resource_arg = o.resource
        self._resource_dict: dict | None = None
        self.batch_size = int(o.batch_size)
        self.max_queue = int(o.max_queue)
        self.flush_interval = float(o.flush_interval)
        self.retry_initial = float(o.retry_initial)
        self.retry_max = float(o.retry_max)
        self.retry_deadline = float(o.retry_deadline)
        self.read_page_size = int(o.read_page_size)
        self.read_overlap_seconds = float(o.read_overlap_seconds)
        self.close_timeout = float(o.close_timeout)
        st = o.start_time
        if st is None:
            self._start = EPOCH
        elif isinstance(st, _dt.datetime):
            self._start = st
        else:
            self._start = ts_to_datetime(float(st))

        # Write state (counters are updated by whichever threads call append).
        self._cond = threading.Condition()
        self._in_flight = 0  # events inside append() calls now
        self._closed = False
        self._abort = threading.Event()  # retries give up now (close deadline passed)
        self._id_prefix = uuid.uuid4().hex[:12]
        self._seq = itertools.count()
        #: Events dropped (retry deadline passed, permanent error, or store closed mid-write).
        self.dropped_events = 0
        #: Events acknowledged by the service.
        self.written_events = 0
        #: Write attempts that failed with a transient error and were retried.
        self.retries = 0
        #: Entries skipped on read (foreign entries, diagnostics, undecodable).
        self.skipped_entries = 0
        self.last_error: str | None = None
        self._transient = transient_errors()
        _register_atexit(self)

    # ------------------------------------------------------------------ factory
    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> CloudLoggingStore:
        """Open ``gcl://PROJECT/LOGGER``.

        Two optional query parameters make a local endpoint reachable (used by
        tests and air-gapped setups): ``api_endpoint=http://127.0.0.1:PORT``
        (plain http only to a loopback host) and ``anonymous=1`` (no
        credentials). Anything else is passed in ``kwargs``.

        Example:
            >>> CloudLoggingStore.from_url("gcl://my-proj/goodput_run1")  # doctest: +SKIP

        ``Any``: the old keyword arguments, each checked as it becomes a field of the options
        (an unknown one is a one-line TypeError).
        """
        if not isinstance(url, str) or not url.startswith("gcl://"):
            raise ValueError(f"url ({url!r}) must look like gcl://PROJECT/LOGGER")
        parsed = urllib.parse.urlsplit(url)
        project = parsed.netloc
        logger_name = parsed.path.lstrip("/")
        if not project or not logger_name:
            raise ValueError(f"url ({url!r}) must look like gcl://PROJECT/LOGGER")
        validate_project(project)
        validate_logger_name(logger_name)
        query = urllib.parse.parse_qs(parsed.query, keep_blank_values=True)
        unknown = set(query) - {"api_endpoint", "anonymous"}
        if unknown:
            raise ValueError(
                f"url ({url!r}) has unknown query parameter(s) {sorted(unknown)}; "
                "allowed: api_endpoint, anonymous"
            )
        if "client" not in kwargs:
            if "api_endpoint" in query:
                endpoint = query["api_endpoint"][-1]
                check_endpoint(endpoint)
                kwargs.setdefault("client_options", {"api_endpoint": endpoint})
                if endpoint.startswith("http://"):
                    kwargs.setdefault("use_grpc", False)
            if query.get("anonymous", ["0"])[-1] in ("1", "true", "yes"):
                from google.auth.credentials import AnonymousCredentials

                kwargs.setdefault("credentials", AnonymousCredentials())
        store = cls(project=project, logger_name=logger_name, **kwargs)
        if parsed.query and "client" not in kwargs:
            store.url = url  # keeps api_endpoint/anonymous, so the URL reopens this store
        return store

    def __repr__(self) -> str:
        return f"CloudLoggingStore({self.url!r})"

    # ------------------------------------------------------------------ writes
    @property
    def pending(self) -> int:
        """Events inside :meth:`append` calls of other threads (0 when idle)."""
        with self._cond:
            return self._in_flight

    def append(self, events: Sequence[Event]) -> None:
        """Write events now, in batches of ``batch_size``; returns when each batch is done.

        Every event is validated first; a bad one raises and nothing is written.
        Transient errors are retried with backoff for at most ``retry_deadline``
        seconds per batch; a batch that still fails then, or fails permanently,
        is dropped, logged and counted in :attr:`dropped_events` (not raised).

        Raises:
            TypeError / ValueError: an item is not a valid :class:`Event`.
            StoreError: the store is closed.

        Example:
            >>> store.append(events)  # doctest: +SKIP
            >>> store.stats()["written"] == len(events)  # doctest: +SKIP
            True
        """
        events = [events] if isinstance(events, Event) else list(events)
        for i, ev in enumerate(events):
            if not isinstance(ev, Event):
                raise TypeError(f"events[{i}] ({ev!r}) must be an Event, not {type(ev).__name__}")
            ev.validate()
        if not events:
            return
        with self._cond:
            if self._closed:
                raise StoreError(f"{self!r} is closed")
            entries = [self._to_entry(ev) for ev in events]  # insertIds in append order
            self._in_flight += len(entries)
        try:
            bs = self.batch_size
            for i in range(0, len(entries), bs):
                batch = entries[i:i + bs]
                if self._abort.is_set():
                    self._drop(entries[i:], "store closed before they were written")
                    return
                try:
                    self._send_with_retry(batch)
                except Exception as e:  # noqa: BLE001 - e.g. resource detection failed
                    self.last_error = error_text(e)
                    self._drop(batch, f"unexpected write error ({self.last_error})")
        finally:
            with self._cond:
                self._in_flight -= len(entries)
                self._cond.notify_all()

    def _to_entry(self, ev: Event) -> dict:
        payload = ev.to_dict()
        payload[SCHEMA_KEY] = SCHEMA_VERSION
        seq = next(self._seq)
        return {
            "logName": self.log_name,
            "jsonPayload": payload,
            "timestamp": ts_to_iso(ev.timestamp),
            # Sortable within one writer: equal timestamps keep append order.
            "insertId": f"{self._id_prefix}-{seq:012d}",
            "labels": {"job": ev.job_name, "run": ev.run_id, "host": str(ev.host)},
            "severity": "INFO",
        }

    def _resource(self) -> dict:
        if self._resource_dict is None:
            res = self._resource_arg
            if res is None:
                from google.cloud.logging_v2.handlers._monitored_resources import detect_resource

                res = detect_resource(self.project)
            if isinstance(res, dict):
                if "type" not in res:
                    raise ValueError(f"resource ({res!r}) needs a 'type'")
                self._resource_dict = {"type": res["type"], "labels": dict(res.get("labels") or {})}
            else:
                self._resource_dict = res._to_dict()
        return self._resource_dict

    def _send_with_retry(self, batch: list[dict]) -> None:
        from google.api_core import exceptions as gexc

        delay = self.retry_initial
        deadline = time.monotonic() + self.retry_deadline
        while True:
            try:
                self._write(batch)
                with self._cond:
                    self.written_events += len(batch)
                return
            except self._transient as e:
                self.last_error = error_text(e)
                if self._abort.is_set():
                    self._drop(batch, f"store closed after a transient error ({self.last_error})")
                    return
                if time.monotonic() >= deadline:
                    self._drop(batch, f"still failing after retrying for {self.retry_deadline:g}s "
                                      f"({self.last_error})")
                    return
                with self._cond:
                    self.retries += 1
                _log.warning(
                    "%r: transient write error (%s), retrying %d event(s) in <= %.3gs",
                    self, self.last_error, len(batch), delay,
                )
                # Full jitter in [delay/2, delay]; close() interrupts it.
                self._abort.wait(min(delay * (0.5 + 0.5 * random.random()),
                                     max(deadline - time.monotonic(), 0.0)))
                delay = min(max(delay * 2, 1e-3), self.retry_max)
            except gexc.BadRequest as e:
                # One bad entry fails an all-or-nothing batch: bisect to isolate it.
                self.last_error = error_text(e)
                if len(batch) > 1:
                    mid = len(batch) // 2
                    self._send_with_retry(batch[:mid])
                    self._send_with_retry(batch[mid:])
                else:
                    self._drop(batch, f"rejected by Cloud Logging ({self.last_error})")
                return
            except Exception as e:  # noqa: BLE001 - permanent (401, 403, 404, ...) or unexpected
                self.last_error = error_text(e)
                self._drop(batch, f"write failed permanently ({self.last_error})")
                return

    def _drop(self, batch: list[dict], why: str) -> None:
        if not batch:
            return
        with self._cond:
            self.dropped_events += len(batch)
        _log.error("%r: dropped %d event(s): %s", self, len(batch), why)

    def _write(self, entries: list[dict]) -> None:
        self._client.logging_api.write_entries(
            entries,
            logger_name=self.log_name,
            resource=self._resource(),
            partial_success=False,
        )

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until no :meth:`append` is in progress in another thread.

        ``append`` writes synchronously, so after it returns there is nothing
        to flush: this returns True at once unless another thread is writing.

        Args:
            timeout: seconds to wait at most (None: no limit).

        Returns:
            True when nothing is pending, False on timeout.

        Example:
            >>> store.flush(timeout=5.0)  # doctest: +SKIP
            True
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._in_flight:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(0.1 if remaining is None else min(remaining, 0.1))
        return True

    def close(self, timeout: float | None = None) -> None:
        """Refuse new writes, wait (at most ``timeout``, default ``close_timeout``) for
        writes in progress in other threads, then make their retries give up.

        Batches given up this way are counted in :attr:`dropped_events`. Idempotent.

        Example:
            >>> store.close()  # doctest: +SKIP
        """
        timeout = self.close_timeout if timeout is None else timeout
        check_nonneg("timeout", timeout)
        with self._cond:
            if self._closed:
                return
            self._closed = True
        drained = self.flush(timeout)
        self._abort.set()
        if not drained:
            _log.error(
                "%r: closed with %d event(s) still being written after %.3gs; "
                "their retries stop and failing batches are dropped",
                self, self.pending, timeout,
            )
        with _ATEXIT_LOCK:
            _LIVE.discard(self)

    def stats(self) -> dict[str, Any]:
        """Counters: written, dropped, retries, pending, skipped, last_error.

        Example:
            >>> store.stats()["dropped"]  # doctest: +SKIP
            0

        ``Any``: the values are JSON-like (numbers, strings, lists, nested dicts), as stored or
        uploaded.
        """
        return {
            "written": self.written_events,
            "dropped": self.dropped_events,
            "retries": self.retries,
            "pending": self.pending,
            "skipped": self.skipped_entries,
            "last_error": self.last_error,
        }

    # ------------------------------------------------------------------ reads
    def build_filter(
        self,
        job_name: str | None = None,
        since: _dt.datetime | None = None,
        run_id: str | None = None,
    ) -> str:
        """The filter string of a read: this log, an explicit time bound, and
        optionally one job / one run (quoted with :func:`quote_filter_value`).

        Example:
            >>> store.build_filter("job")  # doctest: +SKIP
            'logName="projects/p/logs/l" AND timestamp>="1970-01-01T00:00:00.000000Z" AND labels.job="job"'
        """  # noqa: E501 (a doctest's one-line output)
        since = self._start if since is None else max(since, self._start)
        parts = [
            f"logName={quote_filter_value(self.log_name, name='log_name')}",
            f"timestamp>={quote_filter_value(utc_iso(since))}",
        ]
        if job_name is not None:
            parts.append(f"labels.job={quote_filter_value(job_name, name='job_name')}")
        if run_id is not None:
            parts.append(f"labels.run={quote_filter_value(run_id, name='run_id')}")
        return " AND ".join(parts)

    def _list(self, filter_: str) -> Iterable[Any]:
        from google.cloud.logging_v2 import ASCENDING

        return self._client.list_entries(
            resource_names=[f"projects/{self.project}"],
            filter_=filter_,
            order_by=ASCENDING,
            page_size=self.read_page_size,
        )

    def _decode(self, entry: Any, job_name: str | None) -> Event | None:
        payload = getattr(entry, "payload", None)
        if not isinstance(payload, dict) or payload.get(SCHEMA_KEY) != SCHEMA_VERSION:
            self.skipped_entries += 1  # diagnostic entry or someone else's
            return None
        try:
            ev = Event.from_dict(payload)
        except (ValueError, TypeError) as e:
            self.skipped_entries += 1
            _log.warning("%r: skipped undecodable entry %s: %s", self, entry.insert_id, e)
            return None
        if job_name is not None and ev.job_name != job_name:
            # The filter's `=` is case-insensitive in Cloud Logging: "Job" matches "job".
            self.skipped_entries += 1
            return None
        return ev

    def read_events(
        self, job_name: str, cursor: CloudLoggingCursor | None = None, limit: int | None = None
    ) -> tuple[list[Event], CloudLoggingCursor]:
        """Events of ``job_name`` after ``cursor``, oldest first, at most ``limit``.

        Writes in progress in other threads are waited for first (``append`` itself
        is synchronous, so events appended before this call are readable).

        Raises:
            TypeError / ValueError: bad ``job_name``, ``cursor`` or ``limit``.
            StoreError: the service failed (message names the store).

        Example:
            >>> events, cur = store.read_events("job")          # doctest: +SKIP
            >>> more, cur = store.read_events("job", cur)       # doctest: +SKIP
        """
        quote_filter_value(job_name, name="job_name")
        if limit is not None:
            check_int("limit", limit, 1, None)
        if cursor is not None and not isinstance(cursor, CloudLoggingCursor):
            raise TypeError(
                f"cursor ({cursor!r}) must be None or a cursor returned by this store"
            )
        if self.pending:
            self.flush(self.close_timeout)
        if cursor is None:
            since = None
            seen: dict[str, str] = {}
            high = None
        else:
            high = parse_ts(cursor.high_water)
            since = high - _dt.timedelta(seconds=self.read_overlap_seconds)
            seen = {iid: ts for ts, iid in cursor.seen}
        out: list[Event] = []
        try:
            for entry in self._list(self.build_filter(job_name, since)):
                iid = entry.insert_id or ""
                if iid in seen:
                    continue
                ts = entry.timestamp
                ts_iso = utc_iso(ts) if ts is not None else None
                ev = self._decode(entry, job_name)
                if ts_iso is not None:
                    seen[iid] = ts_iso
                    if high is None or ts > high:
                        high = ts
                if ev is not None:
                    out.append(ev)
                    if limit is not None and len(out) >= limit:
                        break
        except service_errors() as e:
            raise StoreError(
                f"{self!r}: reading job {job_name!r} failed: {error_text(e)}") from None
        if high is None:
            return out, cursor if cursor is not None else CloudLoggingCursor(utc_iso(self._start))
        low = utc_iso(high - _dt.timedelta(seconds=self.read_overlap_seconds))
        kept = tuple(sorted((ts, iid) for iid, ts in seen.items() if ts >= low))
        return out, CloudLoggingCursor(utc_iso(high), kept)

    def list_jobs(self) -> list[str]:
        """Names of all jobs with at least one event in this log (scans the log)."""
        if self.pending:
            self.flush(self.close_timeout)
        jobs: set[str] = set()
        try:
            for entry in self._list(self.build_filter()):
                ev = self._decode(entry, None)
                if ev is not None:
                    jobs.add(ev.job_name)
        except service_errors() as e:
            raise StoreError(f"{self!r}: listing jobs failed: {error_text(e)}") from None
        return sorted(jobs)


_LIVE: weakref.WeakSet[CloudLoggingStore] = weakref.WeakSet()
_ATEXIT_LOCK = threading.Lock()
_ATEXIT_REGISTERED = False


def _register_atexit(store: CloudLoggingStore) -> None:
    global _ATEXIT_REGISTERED
    with _ATEXIT_LOCK:
        _LIVE.add(store)
        if not _ATEXIT_REGISTERED:
            atexit.register(_close_all)
            _ATEXIT_REGISTERED = True


def _close_all() -> None:
    for store in list(_LIVE):
        try:
            store.close()
        except Exception:  # noqa: BLE001 - best effort at exit
            _log.exception("closing %r at exit failed", store)
