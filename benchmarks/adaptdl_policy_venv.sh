#!/usr/bin/env bash
# Build an isolated venv with AdaptDL's scheduler policy (adaptdl-sched 0.2.11,
# pymoo 0.5.0, numpy 1.23.5 with np.int) for benchmarks/policy_bench.py.
# benchmarks/adaptdl_venv.sh covers only the goodput model (adaptdl); the
# policy lives in the separate adaptdl-sched package.
#
#   bash benchmarks/adaptdl_policy_venv.sh       # -> benchmarks/.venv-adaptdl-policy
#   PYTHON=python3.10 VENV=/tmp/v bash benchmarks/adaptdl_policy_venv.sh
#
# Both packages are installed with --no-deps: their declared dependencies
# (torch, kubernetes, prometheus clients) are not imported by the policy code.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${VENV:-$HERE/.venv-adaptdl-policy}"
if [[ -z "${PYTHON:-}" ]]; then
    # numpy 1.23.5 ships wheels for CPython 3.8-3.11; prefer a real binary over a pyenv shim.
    for cand in python3.10 python3.9 python3.11 python3.8 python3; do
        if command -v "$cand" >/dev/null 2>&1 && "$cand" --version >/dev/null 2>&1; then
            PYTHON="$cand"; break
        fi
    done
fi
echo "building $VENV with $("$PYTHON" --version 2>&1)"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade "pip<25" "setuptools<70" wheel
"$VENV/bin/python" -m pip install --quiet --only-binary=numpy,scipy \
    numpy==1.23.5 scipy==1.10.1 autograd pymoo==0.5.0 python-dateutil
"$VENV/bin/python" -m pip install --quiet --no-deps adaptdl==0.2.11 adaptdl-sched==0.2.11
"$VENV/bin/python" - <<'PY'
import numpy, pymoo
from adaptdl_sched.policy.pollux import PolluxPolicy
from adaptdl_sched.policy.utils import JobInfo, NodeInfo
print("adaptdl-sched policy OK: numpy", numpy.__version__, "pymoo", pymoo.__version__)
PY
