#!/usr/bin/env bash
# Build an isolated venv with Google's ml-goodput-measurement 0.2.3 for the
# side-by-side run of benchmarks/calculator_bench.py. It is NOT a dependency of
# goodput_jax and never touches the project's environment.
#
#   bash benchmarks/ref_goodput_venv.sh /tmp/refvenv
#   python benchmarks/calculator_bench.py --ref-python /tmp/refvenv/bin/python
set -euo pipefail
dest="${1:-/tmp/goodput-ref-venv}"
python3 -m venv "$dest"
"$dest/bin/pip" install --quiet "ml-goodput-measurement==0.2.3"
"$dest/bin/python" -c "import ml_goodput_measurement.src.goodput as g; print('reference ok:', g.__file__)"
