"""A worker that cannot get all its connections waits for room whatever the
language of the server's refusal (issue 16, noticed: the "server full" check
matched PostgreSQL's English messages only).

psycopg gives no SQLSTATE for a connection refused at start-up, so on a server
with ``lc_messages`` in German the refusal is "zu viele Verbindungen für
Rolle …" and nothing else. Here the worker's role may hold one connection:
its claim session gets it, its LISTEN session is refused. The worker reached
the server with this DSN, so the refusal is a lack of room, not a wrong DSN:
it waits (one warning) and joins once the limit is lifted, instead of logging
"could not connect" at every try and giving up after START_SECONDS."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from portqueue import AsyncPortQueue, PortQueue
from tests.support import localized_server
from tests.support.localized_server import GermanServer
from tests.support.waiting import wait_until_async

pytestmark = pytest.mark.slow

ROLE = "limited"
WAITING_LINE = "the database has no connection free for it"
RETRY_LINE = "could not connect to the database"


@pytest.fixture
def german() -> Iterator[GermanServer]:
    missing = localized_server.available()
    if missing:
        pytest.skip(missing)
    server = GermanServer(max_connections=20)
    try:
        server.start()
        yield server
    finally:
        server.close()


async def test_a_refusal_in_german_after_a_connection_is_waited_for(
    german: GermanServer, caplog: pytest.LogCaptureFixture,
) -> None:
    with psycopg.connect(german.dsn, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {ROLE} LOGIN")
        admin.execute(f"GRANT CREATE ON DATABASE postgres TO {ROLE}")
        dsn = make_conninfo(german.dsn, user=ROLE)
        with PortQueue(dsn) as migrator:
            migrator.migrate()
        admin.execute(f"ALTER ROLE {ROLE} CONNECTION LIMIT 1")
        with pytest.raises(psycopg.OperationalError) as refused, \
                psycopg.connect(dsn), psycopg.connect(dsn):
            pass
        # The premise: German, and no SQLSTATE to go by.
        assert "zu viele Verbindungen" in str(refused.value), refused.value
        assert refused.value.sqlstate is None

        apq = AsyncPortQueue(dsn)

        async def handler(job: Any) -> None:
            return None

        apq.create_queue(queue="q", handler=handler)
        caplog.set_level(logging.INFO, logger="portqueue.worker")
        starting = asyncio.ensure_future(apq.start(maintenance=False, scheduler=False))
        try:
            def said(text: str) -> int:
                return sum(text in record.getMessage() for record in caplog.records)

            await wait_until_async(lambda: said(WAITING_LINE) or said(RETRY_LINE), 30,
                                   "the worker to be refused")
            assert said(WAITING_LINE) == 1 and said(RETRY_LINE) == 0, caplog.text
            assert not starting.done()
            admin.execute(f"ALTER ROLE {ROLE} CONNECTION LIMIT -1")
            await asyncio.wait_for(starting, 30)
            assert said("got its connections after waiting") == 1, caplog.text
            assert said(RETRY_LINE) == 0, caplog.text
        finally:
            if not starting.done():
                starting.cancel()
            await apq.stop()
            await apq.aclose()
