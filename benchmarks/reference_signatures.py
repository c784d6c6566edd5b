"""Snapshot the public signatures of ml-goodput-measurement 0.2.3 (run in its venv).

    /work/venvs/ref/bin/python benchmarks/reference_signatures.py \
        > tests/measure/data/reference_0_2_3_signatures.json

``tests/measure/test_signature_drift.py`` compares goodput_jax's drop-in modules
with this snapshot, so that a drift of either side is caught.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json

CLASSES = {
    "goodput": ["GoodputRecorder", "GoodputCalculator"],
    "monitoring": ["GoodputMonitor"],
    "goodput_elastic": ["ElasticGoodputRecorder", "ElasticGoodputCalculator"],
    "monitoring_elastic": ["ElasticGoodputMonitor"],
}


def _default(p: inspect.Parameter):
    if p.default is inspect.Parameter.empty:
        return {"required": True}
    d = p.default
    if d is None or isinstance(d, (bool, int, float, str)):
        return {"default": d}
    return {"default_repr": type(d).__name__}


def snapshot() -> dict:
    out: dict = {"modules": {}}
    for mod_name, classes in CLASSES.items():
        mod = importlib.import_module(f"ml_goodput_measurement.src.{mod_name}")
        mods = out["modules"].setdefault(mod_name, {})
        for cls_name in classes:
            cls = getattr(mod, cls_name)
            methods = {}
            for name, fn in inspect.getmembers(cls, inspect.isfunction):
                if name.startswith("_") and name != "__init__":
                    continue
                sig = inspect.signature(fn)
                methods[name] = [
                    {"name": p.name, "kind": p.kind.name, **_default(p)}
                    for p in sig.parameters.values() if p.name != "self"
                ]
            mods[cls_name] = methods
    gcp = importlib.import_module("ml_goodput_measurement.src.goodput_utils").GCPOptions
    out["GCPOptions"] = [{"name": f.name, "default": f.default} for f in dataclasses.fields(gcp)]
    bt = importlib.import_module("ml_goodput_measurement.src.goodput_utils").BadputType
    out["BadputType"] = {m.name: m.value for m in bt}
    return out


if __name__ == "__main__":
    print(json.dumps(snapshot(), indent=1, sort_keys=True))
