"""Every ``python`` block of ``docs/migrating-from-ml-goodput-measurement.md`` runs as it
stands (in a temporary working directory: the drop-in's default store is ``./goodput.db``)."""

from __future__ import annotations

import pathlib
import re

import pytest

PAGE = pathlib.Path(__file__).parents[2] / "docs" / "migrating-from-ml-goodput-measurement.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)


def test_the_page_has_its_blocks():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_block_runs_as_it_stands(code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GOODPUT_JAX_STORE", raising=False)
    exec(compile(code, PAGE.name, "exec"), {"__name__": "__doc_block__"})
