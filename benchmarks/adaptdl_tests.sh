#!/usr/bin/env bash
# Run AdaptDL 0.2.11's own goodput and fit tests against goodput_jax, with
# only their import line changed:
#
#   fit_test.py:      import adaptdl.goodput as goodput
#                  -> import goodput_jax.model.goodput as goodput
#   goodput_test.py:  from adaptdl.goodput import GoodputFunction, PerfParams, GradParams
#                  -> from goodput_jax import GoodputFunction, PerfParams, GradParams
#
# The tests come from the adaptdl 0.2.11 wheel (pip download, no install).
# Usage: bash benchmarks/adaptdl_tests.sh [pytest args]     (REPEAT=N reruns
# the unseeded fit tests N times and prints each result line)
set -euo pipefail
WORK="${WORK:-$(mktemp -d)}"
PY="${PYTHON:-python}"
"$PY" -m pip download adaptdl==0.2.11 --no-deps -q -d "$WORK/dl"
"$PY" - "$WORK" <<'PYEOF'
import sys, zipfile, glob, pathlib
work = pathlib.Path(sys.argv[1])
whl = zipfile.ZipFile(glob.glob(str(work / "dl" / "adaptdl-0.2.11-*.whl"))[0])
subs = {
    "adaptdl/fit_test.py": ("import adaptdl.goodput as goodput",
                            "import goodput_jax.model.goodput as goodput"),
    "adaptdl/goodput_test.py": ("from adaptdl.goodput import GoodputFunction, PerfParams, GradParams",
                                "from goodput_jax import GoodputFunction, PerfParams, GradParams"),
}
(work / "t").mkdir(exist_ok=True)
for name, (old, new) in subs.items():
    text = whl.read(name).decode()
    assert text.count(old) == 1, f"{name}: import line not found"
    (work / "t" / ("test_" + name.split("/")[1].replace("_test", "_adaptdl"))).write_text(text.replace(old, new))
PYEOF
cd "$WORK/t"
"$PY" -m pytest -q -p no:cacheprovider "$@" test_goodput_adaptdl.py test_fit_adaptdl.py | tail -3
for _ in $(seq 2 "${REPEAT:-1}"); do
    "$PY" -m pytest -q -p no:cacheprovider test_fit_adaptdl.py | tail -1
done
