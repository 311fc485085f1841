"""``with_settings``: a client derived from another, some settings replaced
(what ``portqueue worker --dsn/--schema/--instance-key`` and the Prometheus
reader use instead of the client's private settings). It keeps the
registrations, has a pool of its own, and leaves the original untouched."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from portqueue import AsyncPortQueue, InvalidArgument, PortQueue


def test_a_derived_client_runs_the_originals_handlers_with_its_own_settings(
    pg_dsn: str, schema: str, db: psycopg.Connection[Any],
) -> None:
    original = PortQueue("postgresql://nobody@127.0.0.1:1/none", schema="elsewhere",
                         instance_key="a")
    ran: list[str] = []
    original.handler("derived")(lambda job: ran.append(job.id))
    with original.with_settings(dsn=pg_dsn, schema=schema, instance_key="b",
                                application_name="derived") as derived:
        assert (derived.dsn, derived.schema, derived.instance_key) == (pg_dsn, schema, "b")
        assert (original.dsn, original.schema, original.instance_key) == (
            "postgresql://nobody@127.0.0.1:1/none", "elsewhere", "a")
        job_id = derived.add_job(queue="derived", data={}).job_id
        assert derived.drain(["derived"]).completed == 1
        assert ran == [job_id]
        row = db.execute("SELECT count(*) FROM pg_stat_activity "
                         "WHERE application_name = 'derived:client'").fetchone()
        assert row is not None and row[0] >= 1
    # Nothing given: the same settings.
    same = original.with_settings()
    assert (same.dsn, same.schema, same.instance_key) == (original.dsn, "elsewhere", "a")


@pytest.mark.parametrize(("argument", "value"), [
    ("pool_max_size", 0), ("schema", "not a schema!"), ("dsn", ""),
    ("application_name", "x" * 41)])
def test_a_bad_setting_is_refused_naming_it(argument: str, value: Any) -> None:
    original = PortQueue("postgresql://nobody@127.0.0.1:1/none")
    with pytest.raises(InvalidArgument) as refused:
        original.with_settings(**{argument: value})
    assert refused.value.argument == argument


def test_the_async_client_derives_an_async_client(pg_dsn: str, schema: str) -> None:
    async def main() -> None:
        original = AsyncPortQueue(pg_dsn, schema=schema)
        async with original.with_settings(pool_min_size=0, pool_max_size=1) as derived:
            assert isinstance(derived, AsyncPortQueue)
            assert (await derived.add_job(queue="derived-async", data={})).job_id
        await original.aclose()

    asyncio.run(main())
