"""docs/cli.md documents every option of every command (STYLE 11: docs match the code)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer

from portqueue.cli import app

DOC = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")
COMMANDS = typer.main.get_command(app).commands  # type: ignore[attr-defined]
# Documented once, under "What every command shares".
SHARED = {"--dsn", "--schema", "--help"}


def section(command: str) -> str:
    """The text under the `### …` heading that names ``command``."""
    for block in re.split(r"^### ", DOC, flags=re.MULTILINE)[1:]:
        heading, _, body = block.partition("\n")
        if command in heading.split():
            return body
    raise AssertionError(f"docs/cli.md has no ### section for {command!r}")


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_option_is_documented(name: str) -> None:
    body = section(name)
    # Typer carries its own copy of click: tell options by their kind, not their class.
    options = {opt for param in COMMANDS[name].params if param.param_type_name == "option"
               for opt in (*param.opts, *param.secondary_opts)}
    missing = sorted(opt for opt in options - SHARED
                     if not re.search(re.escape(opt) + r"(?![\w-])", body))
    assert not missing, f"docs/cli.md, section {name!r}, does not mention {missing}"
