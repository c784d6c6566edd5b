#!/usr/bin/env bash
# Run ml-goodput-measurement 0.2.3's public unit tests against goodput_jax, changing only
# the imports ([cloud_goodput.]ml_goodput_measurement.src.X -> goodput_jax.X), the way a
# migrating user would.
#
# Usage: FILES="goodput_test.py ..." bash benchmarks/google_tests/run.sh [TESTS_DIR] [pytest args]
#   TESTS_DIR: the reference's tests: a checkout of github.com/AI-Hypercomputer/ml-goodput-measurement
#   at v0.2.3 (ml_goodput_measurement/tests) or the wheel's copy (identical but for the import
#   prefix); default: the wheel in /work/venvs/ref
#   (python -m venv /work/venvs/ref && /work/venvs/ref/bin/pip install ml-goodput-measurement==0.2.3).
#   The tests need absl-py (the reference's test dependency).
#
# Expected: 46 passed (three of them call private helpers of Google's calculators, which
# the drop-ins keep as adaptors; benchmarks/google_tests/README.md).
#
# Not run: monitoring_elastic_test.py, monitoring_test.py, gcp_metrics_test.py,
# cloud_logging_test.py, goodput_cache_test.py, checkpoint_badput_calculator_test.py,
# exclusion_utils_test.py: they patch or test Google-only services and private modules
# (gcp_metrics, the Cloud Logging client, the on-disk cache, Orbax's logger, exclusion_utils).
set -euo pipefail
SRC=${1:-/work/venvs/ref/lib/python3.11/site-packages/ml_goodput_measurement/tests}
shift || true
OUT=$(mktemp -d)
HERE=$(cd "$(dirname "$0")/../.." && pwd)
cp "$SRC/conftest.py" "$OUT/"
# absltest's create_tempdir() reads --test_tmpdir: parse absl's flags once under pytest
printf '\nfrom absl import flags as _flags\n_flags.FLAGS.mark_as_parsed()\n' >> "$OUT/conftest.py"
for f in goodput_test.py goodput_elastic_test.py goodput_utils_test.py; do
  sed -E -e 's/^from (cloud_goodput\.)?ml_goodput_measurement\.src import (goodput|goodput_utils|goodput_elastic|monitoring|monitoring_elastic)$/from goodput_jax import \2/' \
      "$SRC/$f" > "$OUT/$f"
done
cd "$OUT"
FILES=${FILES:-goodput_test.py goodput_elastic_test.py goodput_utils_test.py}
rc=0
PYTHONPATH="$HERE" python -m pytest -q -p no:cacheprovider -rfE "$@" $FILES 2>&1 | tail -80 || rc=$?
exit $rc
