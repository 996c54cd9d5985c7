"""Every relative link in the docs reaches a file that exists, and a heading in it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from samples import REPO

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.M)
ANCHOR = re.compile(r'<a id="([^"]+)"></a>')
PAGES = sorted([REPO / "README.md", *REPO.glob("docs/**/*.md"), *REPO.glob("examples/**/*.md")])


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[`*_]", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = page.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # no headings in code blocks
    return {slug(h) for h in HEADING.findall(text)} | set(ANCHOR.findall(text))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_each_relative_link_reaches_its_file_and_heading(page: Path) -> None:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans: a regex is not a link
    broken = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        found = (page.parent / path).resolve() if path else page
        if not found.exists():
            broken.append(f"{target}: no such file")
        elif anchor and found.suffix == ".md" and anchor not in anchors(found):
            broken.append(f"{target}: no heading #{anchor}")
    assert not broken, broken


def test_every_example_directory_says_what_it_shows_needs_and_does() -> None:
    """A README in each: what it shows, what it needs, how to run it, what you should see."""
    folders = sorted({p.parent for p in (REPO / "examples").rglob("*")
                      if p.is_file() and p.suffix in (".yaml", ".py")})
    missing = []
    for folder in folders:
        readme = folder / "README.md"
        text = readme.read_text(encoding="utf-8") if readme.exists() else ""
        if not all(word in text for word in ("**Shows**", "**Needs**", "**Run**",
                                             "**You should see**")):
            missing.append(str(folder.relative_to(REPO)))
    assert missing == [], f"no README saying Shows/Needs/Run/You should see: {missing}"
