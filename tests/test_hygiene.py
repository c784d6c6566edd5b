"""Repository hygiene: what is tracked stays small and source-like.

A 10.6 MB wheel once sat at the top level (two thirds of the tracked tree); this test
keeps binaries and build artefacts out. It reads ``git ls-files`` and is skipped
outside a git checkout (e.g. an unpacked sdist).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: the largest file the repository may track (the biggest today, docs/api.md, is ~0.3 MB)
MAX_TRACKED_BYTES = 1_000_000
#: build artefacts that .gitignore keeps out and no commit may add
ARTEFACT_SUFFIXES = (".whl", ".tar.gz", ".egg", ".so", ".pyc")


def _tracked_files() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    proc = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, timeout=60,
                          check=False)
    if proc.returncode != 0:
        pytest.skip(f"git ls-files failed: {proc.stderr.decode(errors='replace').strip()}")
    return [p for p in proc.stdout.decode().split("\0") if p]


def test_no_tracked_file_is_over_1_mb():
    big = {}
    for rel in _tracked_files():
        path = ROOT / rel
        if path.is_file() and not path.is_symlink():  # deleted in the work tree: not counted
            size = os.path.getsize(path)
            if size > MAX_TRACKED_BYTES:
                big[rel] = size
    assert big == {}, f"tracked files over {MAX_TRACKED_BYTES} bytes: {big}"


def test_no_build_artefacts_are_tracked():
    bad = [rel for rel in _tracked_files() if rel.endswith(ARTEFACT_SUFFIXES)]
    assert bad == []


def test_gitignore_keeps_build_artefacts_out():
    patterns = (ROOT / ".gitignore").read_text().split()
    for pattern in ("*.whl", "build/", "dist/", "*.egg-info/"):
        assert pattern in patterns, pattern
