"""goodput_jax's drop-in modules keep ml-goodput-measurement 0.2.3's public signatures.

The snapshot ``data/reference_0_2_3_signatures.json`` was written by
``/work/venvs/ref/bin/python benchmarks/reference_signatures.py`` from the installed
reference. Every public method of every class must exist here with the reference's
parameters: same names, same order, same kind (positional / keyword-only) and the same
literal defaults (a parameter the reference requires may have a default here); extra
parameters must have defaults. A change on either side fails this test.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import os

import pytest

SNAPSHOT = os.path.join(os.path.dirname(__file__), "data", "reference_0_2_3_signatures.json")
with open(SNAPSHOT) as _f:
    REF = json.load(_f)

#: (class, method, parameter) -> why our default differs (documented in the migration page)
ALLOWED_DEFAULT_DIFFERENCES = {
    ("GoodputMonitor", "__init__", "gcp_options"): "None means GCPOptions() (no shared instance)",
    ("ElasticGoodputMonitor", "__init__", "gcp_options"): "None means GCPOptions()",
    ("GoodputMonitor", "__init__", "include_step_deviation"):
        "None means MaxText's monitor_step_time_deviation flag decides (False if not given)",
    ("GoodputMonitor", "__init__", "final_flush_timeout_seconds"): "bounded stop, 30 s",
    ("ElasticGoodputMonitor", "__init__", "final_flush_timeout_seconds"): "bounded stop, 30 s",
}

CASES = [(m, c, meth) for m, classes in REF["modules"].items() for c, methods in classes.items()
         for meth in methods]


@pytest.mark.parametrize(("module", "cls", "method"), CASES,
                         ids=[f"{m}.{c}.{f}" for m, c, f in CASES])
def test_public_signature_matches_the_reference(module, cls, method):
    ours_cls = getattr(importlib.import_module(f"goodput_jax.{module}"), cls)
    fn = getattr(ours_cls, method, None)
    assert fn is not None, f"{module}.{cls}.{method} is missing"
    ours = [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]
    by_name = {p.name: p for p in ours}
    ref = REF["modules"][module][cls][method]
    positional = [p.name for p in ours if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    ref_positional = [p["name"] for p in ref if p["kind"] == "POSITIONAL_OR_KEYWORD"]
    assert positional[:len(ref_positional)] == ref_positional, (positional, ref_positional)
    for p in ref:
        if p["kind"] in ("VAR_POSITIONAL", "VAR_KEYWORD"):
            continue
        mine = by_name.get(p["name"])
        assert mine is not None, f"parameter {p['name']} missing"
        if p["kind"] == "KEYWORD_ONLY":
            assert mine.kind in (mine.KEYWORD_ONLY, mine.POSITIONAL_OR_KEYWORD), p["name"]
        if "default" in p and (cls, method, p["name"]) not in ALLOWED_DEFAULT_DIFFERENCES:
            assert mine.default is not inspect.Parameter.empty, p["name"]
            assert mine.default == p["default"], (p["name"], mine.default, p["default"])
    known = {p["name"] for p in ref}
    for p in ours:
        if p.name not in known and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            assert p.default is not inspect.Parameter.empty, f"extra parameter {p.name} is required"


def test_gcp_options_and_badput_types_match():
    from goodput_jax import goodput, monitoring, monitoring_elastic

    for mod in (goodput, monitoring, monitoring_elastic):
        fields = [(f.name, f.default) for f in dataclasses.fields(mod.GCPOptions)]
        assert fields == [(f["name"], f["default"]) for f in REF["GCPOptions"]]
    for name, value in REF["BadputType"].items():
        assert goodput.BadputType[name].value == value, name
