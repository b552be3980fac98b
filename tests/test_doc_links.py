"""Links between the project's Markdown pages: every relative link names a file that exists,
and every ``#anchor`` names a heading of its page, as GitHub spells headings' anchors. The
results pages link to each other's sections by long titles that change as seeds land; a title
edited without its links leaves a reader at the top of a thousand-line page."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
LINK = re.compile(r"\]\(([^)\s]+)\)")  # [text](target): the target, up to its closing bracket
FENCE = re.compile(r"^(```|~~~)")
HTML_ANCHOR = re.compile(r"<a (?:id|name)=\"([^\"]+)\"")


def prose(text: str) -> list[str]:
    """The page's lines outside fenced code blocks (code may hold brackets that are not links)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped (hyphens and underscores
    kept), each space a hyphen."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


@cache  # a page is linked to many times: read its headings once
def anchors(page: Path) -> frozenset[str]:
    """Every heading's anchor on ``page`` (a repeated heading gets ``-1``, ``-2``... as on GitHub)
    and every ``<a id="...">`` it sets by hand."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose(page.read_text()):
        found |= set(HTML_ANCHOR.findall(line))
        if not line.startswith("#"):
            continue
        base = slug(line.lstrip("#"))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


def local_links(page: Path) -> list[tuple[str, str]]:
    """``(file part, anchor)`` of each link on ``page`` that stays in the repository."""
    out = []
    for line in prose(page.read_text()):
        for target in LINK.findall(line):
            if re.match(r"^[a-z]+:", target):  # https:, mailto: and the like
                continue
            path, _, anchor = target.partition("#")
            out.append((path, anchor))
    return out


def test_the_slug_is_github_s():
    assert slug(" Growth against the 90% baseline, seeds 958-962: a partial view (test split)") == (
        "growth-against-the-90-baseline-seeds-958-962-a-partial-view-test-split"
    )
    assert slug("`--recipe airbench` screened (seed 1000)") == "--recipe-airbench-screened-seed-1000"


def broken_links(page: Path) -> list[str]:
    broken = []
    for path, anchor in local_links(page):
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{path}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            broken.append(f"{path}#{anchor}: no such heading")
    return broken


def test_a_renamed_heading_or_a_missing_file_is_found(tmp_path):
    (tmp_path / "other.md").write_text('# Seeds 958-960 of five\n\n- <a id="by-hand"></a>Set by hand\n')
    page = tmp_path / "page.md"
    page.write_text(
        "# Results\n\n## Results\n\n[ok](other.md#seeds-958-960-of-five), [ok](#results-1), "
        "[ok](other.md#by-hand), [web](https://example.org/x#y)\n"
        "[renamed](other.md#seeds-958-961-of-five) [gone](gone.md) [here](#nothing)\n"
        "```\n[in code](nowhere.md)\n```\n"
    )
    assert broken_links(page) == [
        "other.md#seeds-958-961-of-five: no such heading",
        "gone.md: no such file",
        "#nothing: no such heading",
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_names_a_file_and_a_heading_that_exist(page):
    assert not broken_links(page)
