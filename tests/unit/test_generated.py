"""portqueue/client.py is generated from portqueue/async_client.py (STYLE 11)."""

from __future__ import annotations

from pathlib import Path

from tools.generate_sync_client import TARGET, generate


def test_sync_client_is_its_regeneration() -> None:
    assert Path(TARGET).read_text(encoding="utf-8") == generate(), (
        "portqueue/client.py is stale: run `python tools/generate_sync_client.py` "
        "(edit portqueue/async_client.py, never client.py)")
