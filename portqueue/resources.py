"""Where sql/ and migrations/ are: inside the wheel, or at the top of a checkout."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def resource_dir(name: str) -> Path:
    """``_<name>`` inside an installed wheel, else ``<name>`` beside the package."""
    for candidate in (_PACKAGE / f"_{name}", _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"portqueue cannot find its {name}/ directory")
