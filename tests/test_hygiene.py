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


# ----------------------------------------------------------------- the simulator's data
DATA = ROOT / "goodput_jax" / "sched" / "sim" / "data"
#: byte-identical copies still shipped twice, with the reason (the list only shrinks)
KNOWN_COPIES: dict[str, str] = {}


def test_the_simulator_data_ships_each_file_once():
    import hashlib

    groups: dict[str, list[str]] = {}
    for path in DATA.rglob("*.csv"):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        groups.setdefault(digest, []).append(path.relative_to(DATA).as_posix())
    copies = set()
    for paths in groups.values():  # the shortest path is the copy that is kept
        copies |= set(sorted(paths, key=lambda p: (len(p), p))[1:])
    assert sorted(k for k in copies if k not in KNOWN_COPIES) == []
    assert sorted(k for k in KNOWN_COPIES if k not in copies) == []  # fixed: drop the entry


def test_a_sia_root_inside_a_pollux_root_finds_the_shared_files(tmp_path):
    """The Sia loader reads the aws type and the validation curves from the Pollux twin."""
    pytest.importorskip("scipy")  # the simulator's extra
    from goodput_jax.sched.sim.apps import Application, sia_trace_file

    root = tmp_path / "data"
    pollux, sia = root / "traces" / "cifar10", root / "sia" / "traces" / "cifar10"
    pollux.mkdir(parents=True)
    sia.mkdir(parents=True)
    for f in (DATA / "traces" / "cifar10").iterdir():
        (pollux / f.name).write_bytes(f.read_bytes())
    for name in ("placements-rtx.csv", "scalability-rtx.csv"):  # only its own type
        (sia / name).write_bytes((DATA / "sia" / "traces" / "cifar10" / name).read_bytes())
    assert sia_trace_file("cifar10", "placements", "aws", data=root / "sia") \
        == pollux / "placements.csv"
    assert sia_trace_file("cifar10", "scalability", "rtx", data=root / "sia") \
        == sia / "scalability-rtx.csv"
    with pytest.raises(FileNotFoundError, match="dgx-ext"):
        sia_trace_file("cifar10", "placements", "dgx-ext", data=root / "sia")
    typed = Application.from_dir(sia, max_epochs=100, accelerator_type="aws")
    plain = Application.from_dir(pollux, max_epochs=100)
    assert sorted(typed.validation) == sorted(plain.validation) == [128, 256, 512, 1024, 2048,
                                                                     4096]
    assert typed.get_throughput((1, 3), 128.0) == plain.get_throughput((1, 3), 128.0)
    rtx = Application.from_dir(sia, max_epochs=100, accelerator_type="rtx")
    assert sorted(rtx.validation) == sorted(plain.validation)
