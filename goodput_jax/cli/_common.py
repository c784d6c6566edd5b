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
import importlib.util
import os
import sqlite3
import sys
from collections.abc import Callable
from typing import Any

#: Exit code of every user error (as argparse uses for bad arguments).
USAGE_ERROR = 2

#: The optional-dependency group (``pip install "goodput-jax[EXTRA]"``) that brings a module.
EXTRA_OF_MODULE: dict[str, str] = {
    "flax": "demo",
    "orbax": "demo",
    "matplotlib": "report",
    "scipy": "sim",
    "google": "gcp",
    "jax": "model",
    "jaxlib": "model",
    "optax": "model",
}


class UserError(Exception):
    """An error the user can fix; the message is printed as one line (exit code 2)."""


class MissingExtraError(UserError):
    """A command needs an optional dependency group that is not installed."""

    def __init__(self, extra: str, module: str, what: str):
        super().__init__(
            f"{what} needs the {extra!r} extra ({module} is not installed): "
            f"pip install \"goodput-jax[{extra}]\""
        )
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

    def error(self, message: str) -> Any:  # noqa: D102 - argparse API
        self.exit(USAGE_ERROR, f"{self.prog}: error: {one_line(message)} "
                               f"(see {self.prog} --help)\n")


def one_line(message: Any) -> str:
    """Collapse a message onto one line (an error is printed as exactly one line).

    Example:
        >>> one_line("first\\nsecond")
        'first second'
    """
    return " ".join(str(message).split())


def has_module(name: str) -> bool:
    """Whether ``name`` can be imported, without importing it (a missing parent counts).

    Example:
        >>> has_module("json"), has_module("no_such_module_xyz")
        (True, False)
    """
    if name in sys.modules:
        return sys.modules[name] is not None
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package is missing or blocked
        return False


def require_extra(extra: str, modules: tuple[str, ...], what: str) -> None:
    """Raise :class:`MissingExtraError` naming ``extra`` unless all ``modules`` import.

    Example:
        >>> require_extra("test", ("json",), "this doctest")
    """
    for module in modules:
        if not has_module(module):
            raise MissingExtraError(extra, module, what)


def _finite_float(text: str, ok, what: str) -> float:
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


def default_store_url() -> str:
    """``$GOODPUT_JAX_STORE`` or the embedded default ``sqlite:///goodput.db``.

    Example:
        >>> default_store_url().startswith(("sqlite://", "gcl://")) or True
        True
    """
    from goodput_jax.measure.stores import DEFAULT_STORE_URL, ENV_VAR

    return os.environ.get(ENV_VAR) or DEFAULT_STORE_URL


def open_store_for_reading(url: str | None):
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

    url = url or default_store_url()
    if url.startswith("gcl://"):
        require_extra("gcp", ("google.cloud.logging",), f"store {url!r}")
        return open_store(url)
    return open_store(url, create=False)


def resolve_job(store: Any, job: str | None) -> str:
    """The job to read: ``job`` if the store holds it, else the store's only job.

    Raises:
        UserError: ``job`` is not in the store (the message lists the jobs that
            are), or ``job`` is None and the store does not hold exactly one job.

    Example:
        >>> resolve_job(store, None)  # doctest: +SKIP
        'demo'
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
        top = (e.name or "").split(".")[0]
        if top not in EXTRA_OF_MODULE:
            raise
        message = str(MissingExtraError(EXTRA_OF_MODULE[top], e.name, f"goodput-jax {command}"))
    except ImportError as e:
        # A store that needs an extra raises ImportError("... pip install ..."); any other
        # ImportError is a bug and keeps its traceback.
        if e.name is not None or "pip install" not in str(e):
            raise
        message = str(e)
    except (UserError, StoreError, ValueError, LookupError, FileNotFoundError,
            NotADirectoryError, PermissionError, sqlite3.DatabaseError) as e:
        message = str(e) or type(e).__name__
    print(f"goodput-jax {command}: error: {one_line(message)}", file=sys.stderr)
    return USAGE_ERROR
