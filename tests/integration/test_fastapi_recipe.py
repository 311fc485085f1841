"""SPEC §10: the FastAPI recipe (docs/examples/fastapi_app.py), run with
FastAPI's TestClient: the lifespan starts and stops the worker, the endpoint's
job commits with its row (and not without it), the dashboard answers."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
import pytest

from tests.support.rows import count_jobs
from tests.support.waiting import wait_until
from tests.support.workers import finished_row, wait_for_worker_threads_to_end

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "fastapi_app.py"


def _load(monkeypatch: pytest.MonkeyPatch, dsn: str, schema: str) -> ModuleType:
    monkeypatch.setenv("PORTQUEUE_DSN", dsn)
    monkeypatch.setenv("PORTQUEUE_SCHEMA", schema)
    spec = importlib.util.spec_from_file_location("fastapi_app", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "fastapi_app", module)
    spec.loader.exec_module(module)
    return module


def test_the_fastapi_recipe_enqueues_in_the_request_transaction_and_runs_the_job(
        monkeypatch: pytest.MonkeyPatch, pg_dsn: str, schema: str,
        db: psycopg.Connection[Any]) -> None:
    db.execute("DROP TABLE IF EXISTS public.signups")
    recipe = _load(monkeypatch, pg_dsn, schema)
    try:
        with TestClient(recipe.app, base_url="http://localhost") as client:
            created = client.post("/signups", json={"email": "a@b.com"})
            assert created.status_code == 200, created.text
            job_id = created.json()["job_id"]
            row = wait_until(lambda: finished_row(db, schema, job_id), what="the welcome job")
            assert (row["status"], row["output"]) == ("completed", {"sent_to": "a@b.com"})
            assert row["data"] == {"user_id": created.json()["user_id"], "email": "a@b.com"}
            # A request that fails after the add commits neither row.
            refused = client.post("/signups", json={"email": None})
            assert refused.status_code == 422
            assert client.get("/portqueue/").status_code == 200
        wait_for_worker_threads_to_end()
        assert db.execute("SELECT count(*) FROM public.signups").fetchone()[0] == 1
        assert count_jobs(db, schema) == 1
    finally:
        db.execute("DROP TABLE IF EXISTS public.signups")


def test_the_recipe_page_shows_the_tested_file() -> None:
    page = (ROOT / "docs" / "fastapi.md").read_text(encoding="utf-8")
    assert EXAMPLE.read_text(encoding="utf-8") in page
