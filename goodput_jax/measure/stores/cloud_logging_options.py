"""What a :class:`~goodput_jax.measure.stores.cloud_logging.CloudLoggingStore` is configured
with (:class:`CloudLoggingOptions`), and the names it accepts (project, log id, filter values).

Example:
    >>> CloudLoggingOptions(project="my-proj", logger_name="goodput_run1").batch_size
    500
    >>> CloudLoggingOptions(batch_size=0)
    Traceback (most recent call last):
    ...
    ValueError: batch_size (0) must be in [1, 1000]
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

__all__ = ["DEFAULT_READ_OVERLAP_SECONDS", "CloudLoggingOptions", "quote_filter_value",
           "validate_logger_name", "validate_project"]

#: Seconds before the cursor's high-water mark that each read re-scans.
DEFAULT_READ_OVERLAP_SECONDS = 120.0

_PROJECT_RE = re.compile(r"^(?:[a-z0-9][a-z0-9.\-]*:)?[a-z][a-z0-9\-]{0,61}[a-z0-9]$")
_LOG_ID_RE = re.compile(r"^[A-Za-z0-9_\-./]{1,511}$")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def quote_filter_value(value: str, *, name: str = "value") -> str:
    """Quote a string for a Cloud Logging filter, so it can only ever be a literal.

    Backslashes and double quotes are escaped; everything else (``OR``, ``AND``,
    parentheses, ``=``) is inert inside the quotes. Control characters cannot be
    expressed safely and are rejected.

    Raises:
        TypeError: ``value`` is not a string.
        ValueError: ``value`` contains a control character.

    Example:
        >>> quote_filter_value('a" OR labels.job="b')
        '"a\\\\" OR labels.job=\\\\"b"'
    """
    if not isinstance(value, str):
        raise TypeError(f"{name} ({value!r}) must be a string, not {type(value).__name__}")
    if _CONTROL_RE.search(value):
        raise ValueError(
            f"{name} ({value!r}) contains a control character, which cannot be used "
            "in a Cloud Logging filter"
        )
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def validate_project(project: Any) -> str:
    """Validate a Google Cloud project id (``my-proj`` or ``example.com:my-proj``).

    ``Any``: this is where the caller's value is checked (anything may come in; a one-line error
    names the argument and the value).
    """
    if not isinstance(project, str) or not _PROJECT_RE.match(project):
        raise ValueError(
            f"project ({project!r}) is not a valid Google Cloud project id "
            "(lowercase letters, digits and hyphens, optionally 'domain:' prefixed)"
        )
    return project


def validate_logger_name(logger_name: Any) -> str:
    """Validate a Cloud Logging log id: letters, digits, ``_ - . /``, at most 511 chars.

    ``Any``: this is where the caller's value is checked (anything may come in; a one-line error
    names the argument and the value).
    """
    if not isinstance(logger_name, str) or not _LOG_ID_RE.match(logger_name):
        raise ValueError(
            f"logger_name ({logger_name!r}) must be 1-511 characters from "
            "[A-Za-z0-9_-./]"
        )
    return logger_name


def check_int(name: str, value: Any, lo: int, hi: int | None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} ({value!r}) must be an int")
    if value < lo or (hi is not None and value > hi):
        rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ValueError(f"{name} ({value!r}) must be {rng}")


def check_nonneg(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} ({value!r}) must be a number")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} ({value!r}) must be finite and >= 0")


def check_endpoint(endpoint: str) -> None:
    parts = urllib.parse.urlsplit(endpoint)
    if parts.scheme == "https" and parts.hostname:
        return
    if parts.scheme == "http" and parts.hostname in ("127.0.0.1", "localhost", "::1"):
        return
    raise ValueError(
        f"api_endpoint ({endpoint!r}) must be https://HOST, or http:// to a loopback host"
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class CloudLoggingOptions:
    """A Cloud Logging store's configuration, validated once (one-line errors).

    Attributes:
        client: an existing ``google.cloud.logging.Client`` (injected, as in
            orbax's ``CloudLoggerOptions(client=...)``). If None, one is built
            from ``project`` / ``credentials`` / ``client_options`` with the
            library's standard credential discovery.
        project: Google Cloud project id; defaults to the client's project.
        credentials: optional ``google.auth`` credentials for a client built here.
        logger_name: the log id (``projects/P/logs/<logger_name>``).
        resource: the monitored resource written with each entry (a
            ``google.cloud.logging.Resource`` or a dict with ``type`` and
            ``labels``). If None, the library detects it (GCE/GKE/...) once.
        batch_size: entries per ``entries.write`` call (1-1000).
        max_queue: accepted for compatibility (validated, >= 1); the store has
            no queue (the recorder's ``max_queue`` bounds buffered events).
        flush_interval: accepted for compatibility (validated, >= 0); writes
            happen inside ``append`` (the recorder's ``flush_interval`` sets how
            often they happen).
        retry_initial, retry_max: first and largest backoff between retries (s).
        retry_deadline: how long one batch is retried after transient errors
            before it is dropped and counted (s); a service that stays unavailable
            does not hold the caller (and every later event) forever.
        read_page_size: entries per ``entries.list`` page (1-1000).
        read_overlap_seconds: how far before the cursor each read re-scans for
            late-arriving entries (s).
        start_time: lower bound of every read (UTC seconds or aware datetime);
            default: the epoch.
        client_options: passed to a client built here (e.g. ``api_endpoint``).
        use_grpc: transport of a client built here (None: the library default).
        close_timeout: how long ``close`` (and interpreter exit) waits for
            writes in progress in other threads before interrupting their retries (s).

    ``Any``: ``client``, ``credentials``, ``resource`` and ``client_options`` are google-cloud-
    logging and google-auth objects, passed through to the client as they are.
    """

    client: Any = None
    project: str | None = None
    credentials: Any = None
    logger_name: str = "goodput_jax"
    resource: Any = None
    batch_size: int = 500
    max_queue: int = 100_000
    flush_interval: float = 0.5
    retry_initial: float = 0.5
    retry_max: float = 30.0
    retry_deadline: float = 600.0
    read_page_size: int = 1000
    read_overlap_seconds: float = DEFAULT_READ_OVERLAP_SECONDS
    start_time: float | _dt.datetime | None = None
    client_options: Any = None
    use_grpc: bool | None = None
    close_timeout: float = 10.0

    def __post_init__(self) -> None:
        validate_logger_name(self.logger_name)
        check_int("batch_size", self.batch_size, 1, 1000)
        check_int("max_queue", self.max_queue, 1, None)
        check_int("read_page_size", self.read_page_size, 1, 1000)
        for name in ("flush_interval", "retry_initial", "retry_max", "retry_deadline",
                     "read_overlap_seconds", "close_timeout"):
            check_nonneg(name, getattr(self, name))
        if self.client is None:
            if self.project is not None:
                validate_project(self.project)
        elif self.credentials is not None or self.client_options is not None:
            raise ValueError("pass either client= or credentials=/client_options=, not both")
        st = self.start_time
        if isinstance(st, _dt.datetime):
            if st.tzinfo is None:
                raise ValueError(f"start_time ({st!r}) must be timezone-aware")
        elif st is not None:
            check_nonneg("start_time", st)

    @classmethod
    def merged(cls, options: CloudLoggingOptions | None,
               keywords: Mapping[str, Any]) -> CloudLoggingOptions:
        """THE translation of the store's keywords into options: ``options`` (or the
        defaults) with the keywords (each a field of this class) replacing its fields.

        Raises:
            TypeError: an unknown keyword, or ``options`` of another type.

        Example:
            >>> CloudLoggingOptions.merged(None, {"batch_size": 8}).batch_size
            8

        ``Any``: the old keyword arguments, each checked as it becomes a field of the options
        (an unknown one is a one-line TypeError).
        """
        if options is not None and not isinstance(options, cls):
            raise TypeError(f"options ({options!r}) must be a CloudLoggingOptions")
        if not keywords:
            return options or cls()
        unknown = sorted(set(keywords) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise TypeError(f"CloudLoggingStore() got unexpected keyword argument(s) {unknown}")
        return cls(**keywords) if options is None else dataclasses.replace(options, **keywords)
