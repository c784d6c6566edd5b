"""Every link between the repository's markdown pages resolves: README.md and docs/*.md.

A relative link must name a file or directory of the repository, and a ``#fragment`` an
anchor of the page it points to: a heading (GitHub's slug: lower case, punctuation
dropped, spaces to hyphens, ``-1``, ``-2`` for repeats) or an explicit
``<a id=...>`` / ``<a name=...>``. External links (``http:``, ``mailto:``) are not
fetched (tests never leave 127.0.0.1).
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_IMAGE = re.compile(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)>?")
_REF_DEF = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.MULTILINE)
_HTML_HREF = re.compile(r"""<a\s[^>]*href=["']([^"']+)["']""", re.IGNORECASE)
_HTML_ANCHOR = re.compile(r"""<a\s[^>]*(?:id|name)=["']([^"']+)["']""", re.IGNORECASE)
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$", re.MULTILINE)


def _prose(text: str) -> str:
    """The page without fenced code blocks (links there are examples, not links)."""
    return _FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading.

    Example: ``slug("4. Use it in your training loop")`` is
    ``"4-use-it-in-your-training-loop"``.
    """
    text = re.sub(r"<[^>]+>", "", heading)                 # inline HTML
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links keep their text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)                   # punctuation goes, _ and - stay
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = _prose(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    seen: dict[str, int] = {}
    for m in _HEADING.finditer(text):
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    found |= set(_HTML_ANCHOR.findall(text))
    return found


def links(path: Path) -> list[str]:
    text = _prose(path.read_text(encoding="utf-8"))
    no_code = _CODE.sub("", text)
    return (_LINK.findall(no_code) + _IMAGE.findall(no_code) + _REF_DEF.findall(no_code)
            + _HTML_HREF.findall(text))


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    bad = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # http:, mailto:, ...
            continue
        file_part, _, fragment = target.partition("#")
        dest = path if not file_part else (path.parent / unquote(file_part)).resolve()
        if not dest.exists():
            shown = dest.relative_to(root) if dest.is_relative_to(root) else dest
            bad.append(f"{target}: {shown} does not exist")
            continue
        if not dest.is_relative_to(root):
            bad.append(f"{target}: outside the repository")
            continue
        if fragment and dest.suffix == ".md" and unquote(fragment) not in anchors(dest):
            bad.append(f"{target}: no anchor #{fragment} in {dest.relative_to(root)}")
    return bad


def test_the_slug_rule():
    assert slug("4. Use it in your training loop") == "4-use-it-in-your-training-loop"
    assert slug("`GoodputHooks(job, ...)`: the hooks") == "goodputhooksjob--the-hooks"
    assert slug("MaxText") == "maxtext"


def test_the_checker_finds_a_broken_link(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# Top\n\n[ok](#top) [gone](#nowhere) [file](missing.md)\n"
                    "```\n[in code](#ignored)\n```\n")
    assert broken_links(page.resolve(), root=tmp_path.resolve()) == ["#nowhere: no anchor #nowhere in p.md",
                                  "missing.md: missing.md does not exist"]


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_intra_repo_link_resolves(page):
    assert broken_links(page) == []


def test_the_readme_leads_to_every_page_and_notebook():
    """README.md links every docs page and names every notebook (issue 28: it listed three
    notebooks of four and linked neither docs/adaptive.md nor docs/architecture.md)."""
    readme = ROOT / "README.md"
    linked = {(readme.parent / t.partition("#")[0]).resolve() for t in links(readme)
              if not re.match(r"^[a-z][a-z0-9+.-]*:", t)}
    missing = [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "docs").glob("*.md"))
               if p.resolve() not in linked]
    missing += [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "notebooks").glob("*.ipynb"))
                if p.resolve() not in linked]
    assert missing == []
