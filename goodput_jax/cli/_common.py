"""What every subcommand shares: the parser class, user errors, extras, read-only stores.

A *user error* (bad argument, missing file, corrupt store, missing extra) ends the
command with exit code 2 and exactly one line on stderr,
``goodput-jax <command>: error: <message>``, never a traceback.

Example:
    >>> one_line("a\\n  b")
    'a b'
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from goodput_jax._lazy import (
    EXTRA_OF_MODULE,
    extra_of,
    first_missing,
    has_module,
    missing_extra_message,
)

if TYPE_CHECKING:
    from goodput_jax.measure.stores import EventStore

#: Exit code of every user error (as argparse uses for bad arguments).
USAGE_ERROR = 2

__all__ = ["EXTRA_OF_MODULE", "USAGE_ERROR", "HelpFormatter", "MissingExtraError", "Parser",
           "UserError", "check_output_file", "default_store_url", "has_module",
           "nonnegative_float", "one_line", "open_store_for_reading", "positive_float",
           "positive_int", "require_extra", "resolve_job", "run_command", "store_url"]


class UserError(Exception):
    """An error the user can fix; the message is printed as one line (exit code 2)."""


class MissingExtraError(UserError):
    """A command needs an optional dependency group that is not installed."""

    def __init__(self, extra: str, module: str, what: str):
        super().__init__(missing_extra_message(extra, module, what))
        self.extra, self.module = extra, module


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows each option's default and keeps the descriptions' line breaks.

    A help text that already states its default (``(default: ...)``) is kept as is,
    and flags (default False) or options without a default (None) get none appended.
    """

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default" in text or any(action.default is v for v in (None, False, argparse.SUPPRESS)):
            return text
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line (``prog: error: ...``), exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"{self.prog}: error: {one_line(message)} "
                               f"(see {self.prog} --help)\n")


def one_line(message: Any) -> str:
    """Collapse a message onto one line (an error is printed as exactly one line).

    Example:
        >>> one_line("first\\nsecond")
        'first second'

    ``Any``: this is where the caller's value is checked (anything may come in; a one-line error
    names the argument and the value).
    """
    return " ".join(str(message).split())


def require_extra(extra: str, modules: tuple[str, ...], what: str) -> None:
    """Raise :class:`MissingExtraError` naming ``extra`` unless all ``modules`` import.

    Example:
        >>> require_extra("test", ("json",), "this doctest")
    """
    missing = first_missing(modules)
    if missing is not None:
        raise MissingExtraError(extra, missing, what)


def _finite_float(text: str, ok: Callable[[float], bool], what: str) -> float:
    """Parse ``text`` as a finite float accepted by ``ok``, else an argparse type error."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not ok(value) or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number {what}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0.

    Example:
        >>> positive_float("0.5")
        0.5
    """
    return _finite_float(text, lambda v: v > 0, "> 0")


def nonnegative_float(text: str) -> float:
    """argparse type: a finite number >= 0.

    Example:
        >>> nonnegative_float("0")
        0.0
    """
    return _finite_float(text, lambda v: v >= 0, ">= 0")


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1.

    Example:
        >>> positive_int("4")
        4
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be an integer >= 1")
    return value


def store_url(text: str) -> str:
    """argparse type: a non-empty store URL (an empty one would silently mean the default).

    Example:
        >>> store_url("sqlite:///goodput.db")
        'sqlite:///goodput.db'
    """
    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"{text!r} is empty; give sqlite:///PATH or gcl://PROJECT/LOGGER, or leave the "
            "option out for $GOODPUT_JAX_STORE / sqlite:///goodput.db")
    return text


def check_output_file(flag: str, path: str) -> None:
    """Refuse an output ``path`` that cannot be written as a file, before anything is written.

    Raises:
        UserError: ``path`` is empty, a directory, or in a directory that does not exist.

    Example:
        >>> try:
        ...     check_output_file("--html", "/")
        ... except UserError as e:
        ...     print(e)
        --html ('/') is a directory; give a file path such as '/report.html'
    """
    if not path.strip():
        raise UserError(f"{flag} ({path!r}) must be a file path")
    if os.path.isdir(path):
        suffix = ".png" if "png" in flag else ".html"
        raise UserError(f"{flag} ({path!r}) is a directory; give a file path such as "
                        f"{os.path.join(path, 'report' + suffix)!r}")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UserError(f"{flag} ({path!r}): directory {parent!r} does not exist")


def default_store_url() -> str:
    """``$GOODPUT_JAX_STORE`` or the embedded default ``sqlite:///goodput.db``.

    Example:
        >>> default_store_url().startswith(("sqlite://", "gcl://")) or True
        True
    """
    from goodput_jax.measure.stores import DEFAULT_STORE_URL, ENV_VAR

    return os.environ.get(ENV_VAR) or DEFAULT_STORE_URL


def open_store_for_reading(url: str | None) -> EventStore:
    """Open an existing store; a missing SQLite file is an error and is *not* created.

    Args:
        url: ``sqlite:///PATH``, a file path, ``gcl://PROJECT/LOGGER`` or None
            (``$GOODPUT_JAX_STORE``, else ``sqlite:///goodput.db``).

    Returns:
        The opened :class:`~goodput_jax.measure.stores.EventStore`.

    Raises:
        MissingExtraError: a ``gcl://`` URL without the ``gcp`` extra.
        FileNotFoundError: the SQLite file does not exist.
        StoreError: the file is not a readable goodput_jax store.

    Example:
        >>> open_store_for_reading("sqlite:///no/such/file.db")  # doctest: +SKIP
        FileNotFoundError: store file 'no/such/file.db' does not exist
    """
    from goodput_jax.measure.stores import open_store

    if url is not None and not url.strip():
        raise UserError(f"--store ({url!r}) is empty; give sqlite:///PATH or gcl://PROJECT/LOGGER")
    url = url or default_store_url()
    if url.startswith("gcl://"):
        require_extra("gcp", ("google.cloud.logging",), f"store {url!r}")
        return open_store(url)
    _refuse_empty_sqlite(url)
    return open_store(url, create=False)


def _refuse_empty_sqlite(url: str) -> None:
    """A reader must not initialise a store: refuse an existing SQLite file with no tables.

    Opening such a file (0 bytes, or an empty database) as a store would write the schema
    into it; it is probed read-only here (``mode=ro``) and left untouched.
    """
    if url.startswith("sqlite:///"):
        path = url[len("sqlite:///"):]
    elif "://" in url:
        return  # open_store names the unknown scheme
    else:
        path = url
    if not path or not os.path.isfile(path):
        return  # open_store reports the missing file
    if os.path.getsize(path) > 0:
        uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"
        try:
            conn = sqlite3.connect(uri, uri=True)
            try:
                tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            finally:
                conn.close()
        except sqlite3.DatabaseError:
            return  # not SQLite at all: the store's own error names it
        if tables:
            return
    raise UserError(f"store file {path!r} is empty (no goodput_jax events, no schema); "
                    "the store is only read, so it was left as it is")


def resolve_job(store: Any, job: str | None) -> str:
    """The job to read: ``job`` if the store holds it, else the store's only job.

    Raises:
        UserError: ``job`` is not in the store (the message lists the jobs that
            are), or ``job`` is None and the store does not hold exactly one job.

    Example:
        >>> resolve_job(store, None)  # doctest: +SKIP
        'demo'

    ``Any``: ``store`` is any opened store (an EventStore, or a row store read through its
    adapter).
    """
    jobs = sorted(store.list_jobs())
    listed = ", ".join(map(repr, jobs[:20])) + (f", ... ({len(jobs)} in all)" if len(jobs) > 20
                                                else "")
    if job is None:
        if len(jobs) == 1:
            return jobs[0]
        raise UserError(f"--job is required: store {store.url!r} holds {len(jobs)} jobs"
                        + (f": {listed}" if jobs else ""))
    if job not in jobs:
        raise UserError(f"no goodput events for job {job!r} in store {store.url!r}; "
                        + (f"jobs in the store: {listed}" if jobs else "the store holds no jobs"))
    return job


def run_command(command: str, fn: Callable[[], int]) -> int:
    """Run a subcommand, turning every user error into one stderr line and exit code 2.

    Example:
        >>> run_command("demo", lambda: 0)
        0
    """
    from goodput_jax.measure.stores.base import StoreError

    try:
        return int(fn() or 0)
    except KeyboardInterrupt:
        print(f"goodput-jax {command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` and the like: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except ModuleNotFoundError as e:
        extra = extra_of(e.name)
        if extra is None:
            raise
        message = str(MissingExtraError(extra, e.name or extra, f"goodput-jax {command}"))
    except ImportError as e:
        # A store that needs an extra raises ImportError("... pip install ..."); any other
        # ImportError is a bug and keeps its traceback.
        if e.name is not None or "pip install" not in str(e):
            raise
        message = str(e)
    except (UserError, StoreError, ValueError, LookupError, FileNotFoundError,
            NotADirectoryError, IsADirectoryError, FileExistsError, PermissionError,
            sqlite3.DatabaseError) as e:
        message = str(e) or type(e).__name__
    print(f"goodput-jax {command}: error: {one_line(message)}", file=sys.stderr)
    return USAGE_ERROR
