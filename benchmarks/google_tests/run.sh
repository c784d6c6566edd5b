#!/usr/bin/env bash
# Run ml-goodput-measurement 0.2.3's public unit tests against goodput_jax, changing only
# the imports (ml_goodput_measurement.src.X -> goodput_jax.X), the way a migrating user would.
#
# Usage: bash benchmarks/google_tests/run.sh [REF_SITE_PACKAGES] [pytest args...]
#   REF_SITE_PACKAGES: where ml_goodput_measurement 0.2.3 is installed (its tests ship in the
#   wheel); default /work/venvs/ref/lib/python3.11/site-packages
#   (python -m venv /work/venvs/ref && /work/venvs/ref/bin/pip install ml-goodput-measurement==0.2.3)
set -euo pipefail
REF=${1:-/work/venvs/ref/lib/python3.11/site-packages}
shift || true
SRC="$REF/ml_goodput_measurement/tests"
OUT=$(mktemp -d)
HERE=$(cd "$(dirname "$0")/../.." && pwd)
cp "$SRC/conftest.py" "$OUT/"
# absltest's create_tempdir() reads --test_tmpdir: parse absl's flags once under pytest
printf '\nfrom absl import flags as _flags\n_flags.FLAGS.mark_as_parsed()\n' >> "$OUT/conftest.py"
# goodput_test.py (core), goodput_elastic_test.py, goodput_utils_test.py; monitoring_elastic_test.py
# patches Google's gcp_metrics module (a Google-only service) and is not run
for f in goodput_test.py goodput_elastic_test.py goodput_utils_test.py; do
  sed -e 's/from ml_goodput_measurement\.src import \(goodput\|goodput_utils\|goodput_elastic\|monitoring\|monitoring_elastic\)$/from goodput_jax import \1/' \
      "$SRC/$f" > "$OUT/$f"
done
cd "$OUT"
FILES=${FILES:-goodput_test.py goodput_elastic_test.py goodput_utils_test.py}
PYTHONPATH="$HERE" python -m pytest -q -p no:cacheprovider -rfE "$@" $FILES 2>&1 | tail -80
