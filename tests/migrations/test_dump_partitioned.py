"""tools/dump_schema.py and tests/migrations/catalog.py on a partitioned job
table (issue 24, design point 8 of docs/retention.md), the prototype layout of
tests/support/partitioned.py standing in for the layout's migration.

The dump writes partitioned tables with their keys, partitions with their
bounds, each partition's index under its own name and attached to its
parent's; and the day partitions (``job_finished_YYYYMMDD``), whose names and
bounds change with the day the layout was made, as a loop over days counted
from the day the file runs: so sql/schema.sql does not change from one day
to the next, and the file builds what the migration built."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import psycopg

from portqueue.migrate import migrate
from tests.migrations.catalog import schema_catalog
from tests.support.partitioned import partition_job_table, partitioned_schema
from tools.dump_schema import schema_ddl


def test_the_dump_of_a_partitioned_table_builds_it_again(
    new_database: Callable[[str], str],
) -> None:
    made, from_dump = new_database("dump_parts"), new_database("dump_parts_file")
    with partitioned_schema(made, "portqueue"), \
            psycopg.connect(made, autocommit=True) as conn:
        dump = schema_ddl(conn)
        catalog = schema_catalog(conn, "portqueue")
    with psycopg.connect(from_dump, autocommit=True) as conn:
        conn.execute(dump)  # one simple-protocol query, as psql -f runs it
        assert schema_catalog(conn, "portqueue") == catalog

    assert ("job_finished", "job", "FOR VALUES IN ('completed', 'failed', 'cancelled', "
            "'expired')", "RANGE (finished_at)") in catalog["partitions"]
    assert ("job_finished_<day+0>", "job_finished",
            "FOR VALUES FROM ('<day+0> 00:00:00+00') TO ('<day+1> 00:00:00+00')",
            None) in catalog["partitions"]
    # Each partition's index named after the root's (point 8), attached to
    # its parent's, down to the day partitions.
    assert {("job_claim_idx", "job_live_claim_idx"),
            ("job_claim_idx", "job_finished_claim_idx"),
            ("job_finished_claim_idx", "job_finished_<day+0>_claim_idx"),
            } <= set(catalog["attached_indexes"])
    assert "PARTITION BY LIST (status)" in dump
    assert ("ALTER INDEX portqueue.job_claim_idx ATTACH PARTITION "
            "portqueue.job_live_claim_idx;") in dump
    assert "CREATE INDEX job_finished_%s_claim_idx ON portqueue.job_finished_%s " in dump
    # Cloned triggers and constraints come from their parent's, not the file.
    assert "ON portqueue.job_live FOR EACH ROW WHEN (new.notify_finished" not in dump


def test_the_dump_is_the_same_whichever_day_the_layout_was_made(
    new_database: Callable[[str], str],
) -> None:
    today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    dumps = []
    for label, day in (("dump_day_one", today - timedelta(days=40)),
                       ("dump_day_two", today - timedelta(days=39))):
        dsn = new_database(label)
        migrate(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            leaves = partition_job_table(conn, "portqueue", today=day)
            assert f"job_finished_{day:%Y%m%d}" in leaves
            dumps.append(schema_ddl(conn, today=day.date()))
    assert dumps[0] == dumps[1]
    assert f"{today - timedelta(days=40):%Y%m%d}" not in dumps[0]
