"""Differential test: the same recorder calls through ml-goodput-measurement 0.2.3 and goodput_jax.

Replays the scenarios of ``tests/measure/reference_scenarios.py`` (clean run,
crash and restart, three runs, 100k steps) through both libraries' ``goodput``
modules via their ``cloud_logger=`` seam, and prints goodput and every shared
badput bucket side by side (percentage points).

The reference runs in its own venv:
    python -m venv /work/venvs/ref && /work/venvs/ref/bin/pip install ml-goodput-measurement==0.2.3

Usage:
    python benchmarks/reference_diff.py --ref-python /work/venvs/ref/bin/python
    python benchmarks/reference_diff.py --ref-python ... --record tests/measure/data/reference_0_2_3.json
    python benchmarks/reference_diff.py --quick            # without steps_100k
    python benchmarks/reference_diff.py --fixture tests/measure/data/reference_0_2_3.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.measure.reference_scenarios import SCENARIOS, replay, scenario


def run_ours(names) -> dict:
    from goodput_jax import goodput

    out = {}
    for name in names:
        t = time.perf_counter()
        out[name] = replay(goodput, scenario(name), job=name)
        out[name]["seconds"] = time.perf_counter() - t
    return out


def run_ours_maxtext() -> dict:
    """MaxText's wrapper calls through goodput_jax's drop-in module, SQLite store, own clock."""
    import tempfile

    from goodput_jax import goodput
    from tests.measure.reference_scenarios import breakdown_pct, maxtext_calls, replay_maxtext

    now = [0.0]
    with tempfile.TemporaryDirectory() as d:
        store = f"sqlite:///{d}/goodput.db"
        replay_maxtext(goodput, maxtext_calls(), "maxtext", lambda t: now.__setitem__(0, t),
                       store=store, clock=lambda: now[0])
        calc = goodput.GoodputCalculator("maxtext", "goodput_maxtext", store=store,
                                         clock=lambda: now[0])
        g, badput, _ = calc.get_job_goodput(include_badput_breakdown=True)
        calc.store.close()
    return breakdown_pct(g, badput)


_REF_MAXTEXT = r"""
import datetime as dt, json, sys, tempfile, logging
logging.disable(logging.WARNING)
sys.path.insert(0, sys.argv[1])
import ml_goodput_measurement.src.goodput as gm
from ml_goodput_measurement import goodput
from tests.measure.reference_scenarios import ListLogger, breakdown_pct, maxtext_calls, replay_maxtext
now = [0.0]
class FakeNow(dt.datetime):
    @classmethod
    def now(cls, tz=None): return dt.datetime.fromtimestamp(now[0], tz or dt.timezone.utc)
gm.datetime.datetime = FakeNow
log = ListLogger()
replay_maxtext(goodput, maxtext_calls(), "maxtext", lambda t: now.__setitem__(0, t),
               cloud_logger=log)
calc = goodput.GoodputCalculator("maxtext", "goodput_maxtext", log, cache_dir=tempfile.mkdtemp())
g, badput, _ = calc.get_job_goodput(include_badput_breakdown=True)
print(json.dumps(breakdown_pct(g, badput)))
"""


def run_reference_maxtext(python: str) -> dict:
    r = subprocess.run([python, "-c", _REF_MAXTEXT, ROOT], capture_output=True, text=True,
                       timeout=600, check=False)
    if r.returncode:
        raise SystemExit(f"reference MaxText run failed:\n{r.stderr[-4000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def run_reference(python: str, names) -> dict:
    code = (
        "import json, sys, time, logging\n"
        "logging.disable(logging.WARNING)\n"
        f"sys.path.insert(0, {ROOT!r})\n"
        "from ml_goodput_measurement import goodput\n"
        "import ml_goodput_measurement\n"
        "from tests.measure.reference_scenarios import replay, scenario\n"
        "out = {}\n"
        f"for name in {list(names)!r}:\n"
        "    t = time.perf_counter()\n"
        "    out[name] = replay(goodput, scenario(name), job=name, cache_dir=sys.argv[1])\n"
        "    out[name]['seconds'] = time.perf_counter() - t\n"
        "print(json.dumps(out))\n"
    )
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run([python, "-c", code, d], capture_output=True, text=True, timeout=3600,
                           check=False)
    if r.returncode:
        raise SystemExit(f"reference run failed:\n{r.stderr[-4000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def table(ref: dict, ours: dict) -> tuple[str, float]:
    lines = []
    worst = 0.0
    for name, o in ours.items():
        if name not in ref:
            continue
        r = ref[name]
        lines.append(f"\n{name}")
        lines.append(f"  {'':<42}{'reference':>11}{'goodput_jax':>13}{'diff pp':>10}")
        rows = [("goodput", r["goodput"], o["goodput"])]
        for k in sorted(r["badput"]):
            if k in o["badput"]:
                rows.append((f"badput {k}", r["badput"][k], o["badput"][k]))
        for label, a, b in rows:
            worst = max(worst, abs(a - b))
            lines.append(f"  {label:<42}{a:>11.3f}{b:>13.3f}{b - a:>+10.3f}")
        if "seconds" in r and "seconds" in o:
            lines.append(f"  {'replay + query seconds':<42}{r['seconds']:>11.2f}{o['seconds']:>13.2f}")
    return "\n".join(lines), worst


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref-python", help="python of a venv with ml-goodput-measurement 0.2.3")
    ap.add_argument("--fixture", help="compare with recorded reference numbers (JSON) instead")
    ap.add_argument("--record", help="write the reference numbers to this JSON file")
    ap.add_argument("--quick", action="store_true", help="skip steps_100k")
    args = ap.parse_args(argv)
    names = [n for n in SCENARIOS if not (args.quick and n == "steps_100k")]
    if args.ref_python:
        ref = run_reference(args.ref_python, names)
        ref["maxtext_wrapper"] = run_reference_maxtext(args.ref_python)
    elif args.fixture:
        with open(args.fixture) as f:
            ref = json.load(f)["scenarios"]
    else:
        ap.error("give --ref-python or --fixture")
    if args.record:
        import importlib.metadata as md  # noqa: F401

        with open(args.record, "w") as f:
            json.dump({"library": "ml-goodput-measurement 0.2.3",
                       "produced_by": "benchmarks/reference_diff.py --ref-python ... --record",
                       "scenarios": {k: {kk: vv for kk, vv in v.items() if kk != "seconds"}
                                     for k, v in ref.items()}}, f, indent=1, sort_keys=True)
        print(f"wrote {args.record}")
    ours = run_ours(names)
    ours["maxtext_wrapper"] = run_ours_maxtext()
    text, worst = table(ref, ours)
    print(text)
    print(f"\nlargest difference: {worst:.3f} pp (acceptance: <= 1 pp)")
    return 0 if worst <= 1.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
