#!/usr/bin/env bash
# Build an isolated venv with AdaptDL 0.2.11 (the Pollux reference) for
# benchmarks/model_bench.py. It needs an old stack (numpy 1.23.5 still has
# np.int), so it lives in its own venv next to this script.
#
#   bash benchmarks/adaptdl_venv.sh            # -> benchmarks/.venv-adaptdl
#   PYTHON=python3.10 VENV=/tmp/v bash benchmarks/adaptdl_venv.sh
#
# adaptdl is installed with --no-deps: its declared dependencies include torch
# (trainer side), which the model code (adaptdl.goodput) does not import.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${VENV:-$HERE/.venv-adaptdl}"
if [[ -z "${PYTHON:-}" ]]; then
    # numpy 1.23.5 ships wheels for CPython 3.8-3.11. pyenv shims of
    # non-global versions fail when run, so test each candidate by running it.
    cands=(python3.10 python3.9 python3.11 python3.8 python3)
    if command -v pyenv >/dev/null 2>&1; then
        for v in $(pyenv versions --bare 2>/dev/null | grep -E '^3\.(10|9|11|8)\.' | sort -r); do
            cands=("$(pyenv root)/versions/$v/bin/python" "${cands[@]}")
        done
    fi
    for cand in "${cands[@]}"; do
        if "$cand" -c 'import sys; assert (3, 8) <= sys.version_info[:2] <= (3, 11)' >/dev/null 2>&1; then
            PYTHON="$cand"; break
        fi
    done
fi
if [[ -z "${PYTHON:-}" ]]; then
    echo "no CPython 3.8-3.11 found (numpy 1.23.5 has no wheels for newer ones); set PYTHON=" >&2
    exit 1
fi
echo "building $VENV with $("$PYTHON" --version 2>&1)"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade "pip<25" "setuptools<70" wheel
"$VENV/bin/python" -m pip install --quiet --only-binary=numpy,scipy \
    numpy==1.23.5 scipy==1.10.1 autograd pymoo==0.5.0
"$VENV/bin/python" -m pip install --quiet --no-deps adaptdl==0.2.11
"$VENV/bin/python" - <<'PY'
import numpy, scipy, adaptdl
from adaptdl.goodput import GoodputFunction, PerfParams, GradParams, fit_perf_params
fn = GoodputFunction(PerfParams(0.121, 0.00568, 0.0236, 0.00634, 0.0118, 0.00317, 1.14),
                     GradParams(0.00136, 0.000502), 128)
print("adaptdl OK:", fn.optimize(1, 3), "numpy", numpy.__version__, "scipy", scipy.__version__)
PY
