"""A scheduler pass with nothing due is one statement (``schedule_due_in``),
not a transaction of five round trips: with the default 1 s interval those
were most of what the scheduler's leader sent. With a tick due, the pass
spawns it as before. Statements are counted on the client, by a cursor class
that records what it sends to the real server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, ClassVar

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from portqueue import PortQueue
from portqueue import maintenance_operations as ops
from portqueue.maintenance.scheduler import Scheduler
from tests.pgbouncer import mode
from tests.support.rows import count_rows, spawned_jobs
from tests.support.services import settings_for

Db = psycopg.Connection[Any]


class RecordingCursor(psycopg.AsyncCursor[Any]):
    sent: ClassVar[list[str]] = []

    async def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        RecordingCursor.sent.append(str(query))
        return await super().execute(query, params, **kwargs)


@pytest.fixture
async def recording_pool(pg_dsn: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    # Autocommit, as a worker's pool is.
    async with AsyncConnectionPool(
            mode.client_dsn(pg_dsn), min_size=1, max_size=1, open=False,
            kwargs={**mode.connection_kwargs(), "autocommit": True,
                    "cursor_factory": RecordingCursor}) as pool:
        RecordingCursor.sent.clear()
        yield pool


async def test_a_pass_with_nothing_due_is_one_statement(
    pq: PortQueue, pg_dsn: str, schema: str, recording_pool: AsyncConnectionPool[Any],
) -> None:
    pq.add_job(queue="hourly", data={}, schedule={"start_every_seconds": 3600})
    settings = settings_for(pg_dsn, schema)
    scheduler = Scheduler(settings, recording_pool)
    assert await scheduler.run_once() == 0
    assert RecordingCursor.sent == [
        ops.schedule_due_in(settings.queries, passed_over=[]).sql]
    # The next pass comes within an interval (jittered), not an hour later.
    assert scheduler.next_sleep() <= scheduler.interval * 1.2


async def test_a_pass_with_a_tick_due_spawns_it(
    pq: PortQueue, db: Db, pg_dsn: str, schema: str,
    recording_pool: AsyncConnectionPool[Any],
) -> None:
    added = pq.add_job(queue="due", data={}, schedule={"start_every_seconds": 3600})
    assert added.schedule_id
    db.execute(psycopg.sql.SQL("UPDATE {} SET next_run_at = now() - interval '1 second' "
                               "WHERE id = %s").format(psycopg.sql.Identifier(schema, "schedule")),
               [added.schedule_id])
    settings = settings_for(pg_dsn, schema)
    assert await Scheduler(settings, recording_pool).run_once() == 1
    assert len(spawned_jobs(db, schema, added.schedule_id)) == 1
    assert count_rows(db, schema, "job") == 1
    lock = ops.lock_due_schedules(settings.queries, limit=100, passed_over=[]).sql
    assert lock in RecordingCursor.sent
