"""A small batch of outcomes waits for the worker's other running handlers
(up to LINGER_BATCH outcomes, LINGER_SECONDS), so many processes of few slots
commit fewer, larger batches; an idle worker's lone outcome is not held."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from portqueue.queries import queries_for
from portqueue.worker import completer as completer_module
from portqueue.worker.completer import LINGER_BATCH, Completer


def _completer(running: int) -> Completer:
    # The linger reads only what waits and how many handlers run: no database.
    return Completer(cast(Any, None), queries_for("portqueue"), cast(Any, None), "w",
                     backlog_cap=1000, running=lambda: running)


async def test_a_lone_outcome_of_an_idle_worker_is_not_held(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(completer_module, "LINGER_SECONDS", 30.0)
    completer = _completer(running=0)
    completer.add(cast(Any, object()))
    await asyncio.wait_for(completer._linger(), 5)


async def test_a_small_batch_waits_until_it_holds_linger_batch_outcomes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(completer_module, "LINGER_SECONDS", 30.0)
    completer = _completer(running=LINGER_BATCH)
    completer.add(cast(Any, object()))
    lingering = asyncio.create_task(completer._linger())
    for _ in range(LINGER_BATCH - 2):
        await asyncio.sleep(0.01)
        completer.add(cast(Any, object()))
        assert not lingering.done(), "written before the batch filled"
    completer.add(cast(Any, object()))
    await asyncio.wait_for(lingering, 5)


async def test_the_linger_ends_at_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(completer_module, "LINGER_SECONDS", 0.05)
    completer = _completer(running=5)
    completer.add(cast(Any, object()))
    await asyncio.wait_for(completer._linger(), 5)
