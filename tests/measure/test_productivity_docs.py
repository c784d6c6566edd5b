"""docs/productivity.md: every python block runs and prints what the text after it says."""

from __future__ import annotations

import contextlib
import io
import pathlib
import re

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "productivity.md"


def _blocks() -> list[tuple[str, list[str]]]:
    """(code, the lines the page says it prints) for each python block."""
    text = DOC.read_text()
    out = []
    for m in re.finditer(r"```python\n(.*?)```\n", text, re.S):
        after = text[m.end():].lstrip("\n")
        said: list[str] = []
        if after.startswith("prints "):
            sentence = re.split(r"[:.](?:\s|$)", after, maxsplit=1)[0]
            said = re.findall(r"`([^`]*)`", sentence)
        out.append((m.group(1), said))
    return out


def test_every_block_runs_and_prints_what_the_page_says(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    blocks = _blocks()
    assert len(blocks) >= 4
    for i, (code, said) in enumerate(blocks):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(compile(code, f"docs/productivity.md block {i}", "exec"), {})  # noqa: S102
        assert said, f"block {i} has no 'prints ...' line after it"
        assert buf.getvalue().splitlines() == said, (i, buf.getvalue())
