"""Generate ``docs/api.md`` (the API reference) from the package's docstrings.

Usage::

    python docs/gen_api.py            # rewrite docs/api.md
    python docs/gen_api.py --check    # exit 1 if docs/api.md is out of date

Every room listed in :data:`MODULES` contributes its exports (its package's
``__all__``: what is not exported is the room's own; else the public classes and
functions defined in it), each with its
signature and full docstring; a class also lists its public methods and
properties. The output is deterministic (sorted, no memory addresses).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import re
import sys

#: (module, one-line description) in reading order.
MODULES: list[tuple[str, str]] = [
    ("goodput_jax", "Public API (lazy re-exports)."),
    ("goodput_jax.goodput", "Drop-in for `ml_goodput_measurement.goodput`, with MaxText's flags."),
    ("goodput_jax.monitoring", "Drop-in for `ml_goodput_measurement.monitoring`."),
    ("goodput_jax.measure", "The light core: recorder, calculator, monitors, vocabulary."),
    ("goodput_jax.measure.stores", "Event stores: URLs and the protocols."),
    ("goodput_jax.measure.stores.sqlite", "The embedded SQLite store (default)."),
    ("goodput_jax.measure.stores.cloud_logging", "The Google Cloud Logging store."),
    ("goodput_jax.measure.engine", "The one attribution engine: events -> time per bucket."),
    ("goodput_jax.report", "The goodput report (text, timeline, model curves, HTML / PNG)."),
    ("goodput_jax.model", "The model's curated API (lazy re-exports)."),
    ("goodput_jax.model.gradstats", "Gradient noise statistics inside the jitted step."),
    ("goodput_jax.runtime", "Measurements taken from the live JAX runtime."),
    ("goodput_jax.integrations", "GoodputHooks and their options for Flax / MaxText-style loops."),
    ("goodput_jax.integrations.nnx", "Flax NNX adapter: statistics, hooks and adaptive step."),
    ("goodput_jax.integrations.orbax", "Orbax checkpointing with goodput events."),
    ("goodput_jax.adaptive", "Adaptive training: batch size, learning rate, elastic restarts."),
    ("goodput_jax.sched", "Cluster policies by modelled goodput (Pollux, Sia)."),
    ("goodput_jax.sched.sim", "The trace-driven cluster simulator."),
    ("goodput_jax.cluster", "The cluster runtime on Ray."),
    ("goodput_jax.demo", "`goodput-jax demo`."),
    ("goodput_jax.cli", "The `goodput-jax` command (one module per subcommand)."),
]

_ADDR = re.compile(r" at 0x[0-9a-fA-F]+")


def _anchor(module: str) -> str:
    """The link to ``module``'s section, or to its nearest documented package's (a name
    defined in ``model.gradstats.readers`` is documented under ``model.gradstats``)."""
    documented = {name for name, _ in MODULES}
    parts = module.split(".")
    while parts and ".".join(parts) not in documented:
        parts.pop()
    target = ".".join(parts) or module
    return f"[`{module}`](#{target.replace('.', '')})" if parts else f"`{module}`"


def _public_names(mod) -> list[str]:
    names = getattr(mod, "__all__", None)
    if names is None:
        names = [n for n, v in vars(mod).items()
                 if not n.startswith("_") and (inspect.isclass(v) or inspect.isfunction(v))
                 and getattr(v, "__module__", None) == mod.__name__]
    return sorted(n for n in names if not n.startswith("_"))


def _sig(obj) -> str:
    try:
        s = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"
    return _ADDR.sub("", s)


def _doc(obj) -> str:
    d = inspect.getdoc(obj) or ""
    return d.strip()


def _fence(doc: str) -> str:
    """Docstring as markdown: keep it verbatim in a text block (it has reST / doctest bits)."""
    if not doc:
        return "_(no docstring)_\n"
    return "```text\n" + doc + "\n```\n"


def _members(cls) -> list[tuple[str, object]]:
    out = []
    for name, v in sorted(vars(cls).items()):
        if name.startswith("_") and name not in ("__call__",):
            continue
        if isinstance(v, (staticmethod, classmethod)):
            v = v.__func__
        if inspect.isfunction(v) or isinstance(v, property):
            out.append((name, v))
    return out


def _render_object(qual: str, obj) -> list[str]:
    lines: list[str] = []
    if inspect.isclass(obj):
        if issubclass(obj, tuple) and hasattr(obj, "_fields"):
            lines.append(f"### class `{qual}{_sig(obj)}`\n")
        elif issubclass(obj, BaseException) or obj.__init__ is object.__init__:
            lines.append(f"### class `{qual}`\n")
        else:
            lines.append(f"### class `{qual}{_sig(obj)}`\n")
        lines.append(_fence(_doc(obj)))
        if hasattr(obj, "__members__") and isinstance(obj.__members__, dict):
            members = ", ".join(f"`{m}`" for m in obj.__members__)
            lines.append(f"Members: {members}\n")
        for name, m in _members(obj):
            if isinstance(m, property):
                lines.append(f"#### property `{qual}.{name}`\n")
                lines.append(_fence(_doc(m)))
            else:
                sig = _sig(m).replace("(self, ", "(").replace("(self)", "()")
                lines.append(f"#### `{qual}.{name}{sig}`\n")
                lines.append(_fence(_doc(m)))
    elif callable(obj):
        lines.append(f"### `{qual}{_sig(obj)}`\n")
        lines.append(_fence(_doc(obj)))
    else:
        lines.append(f"### `{qual}`\n")
        lines.append(f"Value: `{_ADDR.sub('', _value_repr(obj))[:200]}`\n")
    return lines


def _value_repr(obj: object) -> str:
    """repr(), with a set's elements sorted (a set's order follows the hash seed)."""
    if isinstance(obj, (set, frozenset)):
        inner = ", ".join(sorted(map(repr, obj)))
        return f"{type(obj).__name__}({{{inner}}})" if obj else f"{type(obj).__name__}()"
    return repr(obj)


def generate() -> str:
    """The whole api.md text."""
    out = [
        "# API reference",
        "",
        "Generated from the docstrings by `python docs/gen_api.py`; do not edit by hand.",
        "",
        "## Modules",
        "",
    ]
    for name, desc in MODULES:
        out.append(f"- [`{name}`](#{name.replace('.', '')}): {desc}")
    out.append("")
    for name, desc in MODULES:
        mod = importlib.import_module(name)
        out.append(f"## {name}\n")
        out.append(f"{desc}\n")
        mdoc = _doc(mod)
        if mdoc:
            out.append(_fence(mdoc))
        if name == "goodput_jax":
            out.append("| name | defined in |\n|---|---|")
            for pub in _public_names(mod):
                obj = getattr(mod, pub)
                home = obj.__name__ if inspect.ismodule(obj) else obj.__module__
                out.append(f"| `{pub}` | {_anchor(home)} |")
            out.append("")
            continue
        for pub in _public_names(mod):
            try:
                obj = getattr(mod, pub)
            except AttributeError:
                continue
            if inspect.ismodule(obj):
                out.append(f"### module `{name}.{pub}`\n")
                out.append(f"See {_anchor(obj.__name__)}.\n")
                continue
            out.extend(_render_object(f"{name}.{pub}", obj))
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="fail if docs/api.md is out of date")
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                 "api.md"))
    args = p.parse_args(argv)
    text = generate()
    if args.check:
        try:
            with open(args.out, encoding="utf-8") as f:
                same = f.read() == text
        except FileNotFoundError:
            same = False
        if not same:
            print(f"{args.out} is out of date: run python docs/gen_api.py", file=sys.stderr)
            return 1
        return 0
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {args.out} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
