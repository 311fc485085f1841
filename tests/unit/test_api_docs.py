"""docs/api.md renders every public name of ``portqueue`` (issue 18, item 12):
mkdocstrings hides what a page does not name, so a new export without its
``::: portqueue.Name`` entry would be missing from the reference."""

from __future__ import annotations

import re
from pathlib import Path

import portqueue

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_api_reference_names_every_public_name() -> None:
    page = (DOCS / "api.md").read_text(encoding="utf-8")
    rendered = set(re.findall(r"^::: portqueue\.(\w+)$", page, flags=re.MULTILINE))
    missing = sorted(set(portqueue.__all__) - rendered)
    assert not missing, f"docs/api.md has no '::: portqueue.<name>' entry for {missing}"


def test_every_public_class_has_a_docstring() -> None:
    # Without one mkdocstrings renders a bare heading.
    bare = sorted(name for name in portqueue.__all__
                  if not (getattr(portqueue, name).__doc__ or "").strip()
                  or getattr(portqueue, name).__doc__.startswith(f"{name}("))
    assert not bare, f"public names without a docstring: {bare}"


def test_the_changelog_and_not_pages_are_in_the_nav() -> None:
    nav = (DOCS.parent / "mkdocs.yml").read_text(encoding="utf-8")
    assert "changelog.md" in nav and "not.md" in nav
