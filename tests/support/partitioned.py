"""A migrated schema's (empty) job table rebuilt as the partitioned layout of
docs/retention.md ("Partitioned history: the design"): ``job`` partitioned by
status into ``job_live`` and ``job_finished``, the latter by day of
``finished_at``, with its indexes and the triggers rewritten for row movement
(point 2 of the design: ``TRIGGERS`` and ``SETTLE_PATCHES``, the DDL the
layout's migration is to take over). Enough to plan the library's statements
against (EXPLAIN) and to run the triggers' work on moved rows; not the key
tables, so not for singleton, debounce or keyed adds."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
from psycopg import sql

LIVE = ("pending", "active", "waiting")
FINISHED = ("completed", "failed", "cancelled", "expired")
DAYS = 3

# Point 2: a status change that moves a row between job_live and job_finished
# fires the DELETE row triggers of the old leaf and the INSERT row triggers of
# the new one, no UPDATE row trigger and no statement trigger. Today's
# triggers stay on the root for the changes within one leaf (pending to
# active, a rescue, waiting to pending, finished to finished); these catch
# the moves, and the INSERT straight into job_live a singleton or debounce
# add must make (point 1). Formatted with {schema} (quoted).
TRIGGERS = """
-- An INSERT into the leaf skips the root's statement trigger job_added_notify.
CREATE TRIGGER job_live_added_notify AFTER INSERT ON {schema}.job_live
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.notify_jobs_added();
-- A retry moves the row back: job_pending_notify's case. An add (through the
-- root or into the leaf) has created_at = now() and is its statement
-- trigger's; a retried row was created by an earlier transaction.
CREATE TRIGGER job_live_arrived_pending_notify AFTER INSERT ON {schema}.job_live
    FOR EACH ROW
    WHEN (NEW.status = 'pending' AND NEW.start_after <= now() AND NEW.created_at < now())
    EXECUTE FUNCTION {schema}.notify_job_pending();
-- A retry of a dependency that ended: the dependents it cancelled wait again
-- (settle_dependents on an INSERT into job_live re-arms).
CREATE TRIGGER job_live_arrived_settle_dependents AFTER INSERT ON {schema}.job_live
    FOR EACH ROW WHEN (NEW.has_dependents)
    EXECUTE FUNCTION {schema}.settle_dependents();
-- The row arrives in job_finished exactly when it finishes (an INSERT of a
-- finished row through the root too: a waiter for it learns it is finished).
CREATE TRIGGER job_finished_arrived_notify AFTER INSERT ON {schema}.job_finished
    FOR EACH ROW WHEN (NEW.notify_finished)
    EXECUTE FUNCTION {schema}.notify_job_finished();
-- dependents_released: set by the completion that released them itself.
-- Without OLD this cannot tell a flag turned on now from one left on by an
-- earlier completion of a retried job: the retry must turn it off.
CREATE TRIGGER job_finished_arrived_settle_dependents AFTER INSERT ON {schema}.job_finished
    FOR EACH ROW WHEN (NEW.has_dependents AND NOT NEW.dependents_released)
    EXECUTE FUNCTION {schema}.settle_dependents();
-- A limited job that ends frees a slot (a pending one cancelled notifies too:
-- a spare wake-up).
-- A removal: a statement trigger on the root, which fires for a DELETE
-- statement (the rows of every leaf in its transition table) and never for
-- the UPDATE of a move, where the row trigger job_removed_settle_dependents
-- fired for every move of a job with dependents and took it for a removal
-- (a completion's dependents cancelled). One call per DELETE, not per row.
DROP TRIGGER job_removed_settle_dependents ON {schema}.job;
CREATE FUNCTION {schema}.settle_removed_dependents() RETURNS trigger
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    ids uuid[];
    shared uuid[];
BEGIN
    SELECT array_agg(r.id), array_agg(r.id) FILTER (WHERE r.has_shared_dependents)
    INTO ids, shared
    FROM removed AS r WHERE r.has_dependents;
    IF ids IS NOT NULL THEN
        PERFORM {schema}.settle_dependents_of(
            ids, array_fill('removed'::text, ARRAY[cardinality(ids)]), shared, NULL);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER job_removed_settle_dependents AFTER DELETE ON {schema}.job
    REFERENCING OLD TABLE AS removed
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.settle_removed_dependents();
CREATE TRIGGER job_finished_arrived_slot_freed_notify AFTER INSERT ON {schema}.job_finished
    FOR EACH ROW WHEN (NEW.limited)
    EXECUTE FUNCTION {schema}.notify_job_pending();
"""

# settle_dependents (as migration 0013 left it), for row movement: an INSERT
# into job_live re-arms as the UPDATE from an end does. (anchor, replacement)
# pairs on its definition.
SETTLE_PATCHES = (
    ("""    IF TG_OP = 'UPDATE' AND state IN ('pending', 'waiting')
       AND OLD.status::text IN ('failed', 'cancelled', 'expired') THEN""",
     """    IF TG_OP = 'INSERT' AND state IN ('pending', 'waiting') THEN
        -- Arrived in job_live: moved back by a retry (or an add of a job
        -- with dependents, whose re-arm finds nothing).
        PERFORM {schema}.settle_dependents_of(NULL, NULL, NULL, ARRAY[parent]);
        RETURN NULL;
    END IF;
    IF TG_OP = 'UPDATE' AND state IN ('pending', 'waiting')
       AND OLD.status::text IN ('failed', 'cancelled', 'expired') THEN"""),
)


def _settle_dependents_for_moves(db: psycopg.Connection[Any], schema: str) -> None:
    quoted = sql.Identifier(schema).as_string(db)
    ((definition,),) = db.execute(
        "SELECT pg_get_functiondef(%s::regprocedure)",
        [f"{quoted}.settle_dependents()"]).fetchall()
    for anchor, replacement in SETTLE_PATCHES:
        assert definition.count(anchor) == 1, f"settle_dependents changed: {anchor!r}"
        definition = definition.replace(anchor, replacement.replace("{schema}", quoted))
    db.execute(definition)


def _index_named_after_the_roots(
    db: psycopg.Connection[Any], schema: str, definition: str, leaves: list[str]
) -> None:
    """Point 8: the root's index ``job_x_idx`` on the root alone (``ON ONLY``),
    ``<table>_x_idx`` on each partition, attached to its parent's: a plan
    names the leaf's index, and its name says which root index it is."""
    quoted = sql.Identifier(schema).as_string(db)
    name = definition.split(" INDEX ", 1)[1].split(" ", 1)[0]
    on = next(f" ON {prefix}.job " for prefix in (schema, quoted)
              if f" ON {prefix}.job " in definition)
    tables = [("job", None), ("job_live", "job"), ("job_finished", "job")] + [
        (leaf, "job_finished") for leaf in leaves if leaf not in ("job_live",)]
    for table, parent in tables:
        index = table + name.removeprefix("job")
        db.execute(definition.replace(f" {name}{on}", f" {index} ON ONLY {quoted}.{table} ", 1))
        if parent is not None:
            db.execute(sql.SQL("ALTER INDEX {} ATTACH PARTITION {}").format(
                sql.Identifier(schema, parent + name.removeprefix("job")),
                sql.Identifier(schema, index)))


def partition_job_table(
    db: psycopg.Connection[Any], schema: str, today: datetime | None = None
) -> list[str]:
    """Rebuild ``schema``'s empty job table partitioned; returns the leaves' names.

    ``today`` (UTC midnight): the day the day partitions are counted from, as
    if the layout had been made that day."""
    job = sql.Identifier(schema, "job")
    quoted = sql.Identifier(schema).as_string(db)
    indexes = [row[0] for row in db.execute(
        "SELECT pg_get_indexdef(indexrelid) FROM pg_index"
        " WHERE indrelid = %s::regclass AND NOT indisprimary",
        [f"{quoted}.job"]).fetchall()]
    triggers = [row[0] for row in db.execute(
        "SELECT pg_get_triggerdef(oid) FROM pg_trigger"
        " WHERE tgrelid = %s::regclass AND NOT tgisinternal", [f"{quoted}.job"]).fetchall()]
    leaves = ["job_live"]
    with db.transaction():
        db.execute(sql.SQL("ALTER TABLE {} RENAME TO job_single").format(job))
        db.execute(sql.SQL(
            "CREATE TABLE {} (LIKE {} INCLUDING DEFAULTS INCLUDING CONSTRAINTS"
            " INCLUDING IDENTITY) PARTITION BY LIST (status)").format(
            job, sql.Identifier(schema, "job_single")))
        db.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(schema, "job_single")))
        db.execute(sql.SQL("CREATE TABLE {} PARTITION OF {} FOR VALUES IN ({})").format(
            sql.Identifier(schema, "job_live"), job,
            sql.SQL(", ").join(map(sql.Literal, LIVE))))
        db.execute(sql.SQL(
            "CREATE TABLE {} PARTITION OF {} FOR VALUES IN ({}) PARTITION BY RANGE (finished_at)"
        ).format(sql.Identifier(schema, "job_finished"), job,
                 sql.SQL(", ").join(map(sql.Literal, FINISHED))))
        if today is None:
            today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
        # Everything that finished before the first day partition: on a
        # migrated table the former single table (the online migration's
        # job_history), on a new one empty, so both have the same layout; and
        # a row finished in the past (a backdated finished_at, an import) has
        # a place. Not a DEFAULT: DETACH CONCURRENTLY still works (point 5).
        leaves.append("job_history")
        db.execute(sql.SQL(
            "CREATE TABLE {} PARTITION OF {} FOR VALUES FROM (MINVALUE) TO ({})").format(
            sql.Identifier(schema, "job_history"), sql.Identifier(schema, "job_finished"),
            sql.Literal(today - timedelta(days=1))))
        for day in range(-1, DAYS - 1):
            start = today + timedelta(days=day)
            name = f"job_finished_{start:%Y%m%d}"
            leaves.append(name)
            db.execute(sql.SQL(
                "CREATE TABLE {} PARTITION OF {} FOR VALUES FROM ({}) TO ({})").format(
                sql.Identifier(schema, name), sql.Identifier(schema, "job_finished"),
                sql.Literal(start), sql.Literal(start + timedelta(days=1))))
        for leaf in leaves:
            db.execute(sql.SQL("CREATE UNIQUE INDEX ON {} (id)").format(
                sql.Identifier(schema, leaf)))
        for definition in indexes:
            if definition.startswith("CREATE UNIQUE INDEX"):
                # Unique indexes without the partition keys: on the live leaf
                # (the key tables of the design take the others' place).
                definition = definition.replace(
                    f" ON {schema}.job ", f" ON {schema}.job_live ").replace(
                    f' ON "{schema}".job ', f' ON "{schema}".job_live ')
                db.execute(definition)
            else:
                _index_named_after_the_roots(db, schema, definition, leaves)
        for definition in triggers:
            # Today's, on the root: they fire for the changes within one leaf.
            db.execute(definition)
        _settle_dependents_for_moves(db, schema)
        db.execute(TRIGGERS.format(schema=quoted))
    return leaves


@contextmanager
def partitioned_schema(dsn: str, schema: str) -> Iterator[str]:
    """A schema of its own, migrated, its job table partitioned; dropped after."""
    from portqueue.migrate import migrate

    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        migrate(dsn, schema=schema)
        partition_job_table(db, schema)
        yield schema
        db.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
