"""docs/api.md is generated from the rooms' exports (``docs/gen_api.py``) and kept current:
a public name added, renamed or re-documented without regenerating fails here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_api_reference_is_generated_from_the_exports_and_current():
    proc = subprocess.run([sys.executable, str(ROOT / "docs" / "gen_api.py"), "--check"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:] + (
        "\nregenerate it: python docs/gen_api.py")
