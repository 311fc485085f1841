"""Dependents are settled once per statement, and a cascade is a loop.

Migration 0010's row trigger ran an ``UPDATE`` of its own for every finished
job with dependents: a batched completion of a hundred dependencies ran a
hundred release statements, each paying the set-up of an ``UPDATE`` of the
job table (its indexes, its triggers) for one row, several times what the
completion itself cost per row. And a failure ran down a chain by nesting:
each dependent it cancelled fired the trigger again inside the one before,
so a chain a few hundred jobs deep hit ``max_stack_depth`` and rolled back
the statement that failed its head.

Now one statement-level trigger per ``UPDATE`` and ``DELETE`` of the job
table reads the rows the statement wrote (its transition table) and settles
the dependents of all of them together, with the same statements as before
taking arrays of jobs instead of one. What they end (dependents cancelled,
and so ended in their turn; dependents re-armed by a retried dependency) it
settles in the next round of a loop, not in a nested trigger: the trigger
fired by its own statements sees the depth it runs at in the setting
``portqueue.settling`` and returns at once. A statement that writes no job
with dependents pays one scan of its own rows. The rules are 0010's.

A transition table cannot be captured for a column list (``UPDATE OF
status``), so the trigger sees every ``UPDATE``; it takes a job's status as
written, and settling is idempotent (a job already released or cancelled is
no longer ``waiting``), so a statement that rewrites a finished job without
changing its status settles nothing twice. Statement-level triggers with
transition tables are allowed on a partitioned table, and see the rows of
every partition.

Revision ID: 0011
Revises: 0010
"""

from alembic import context, op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

# The SET of both settling UPDATEs (alias c, a dependent): {released} says
# whether it becomes pending (else it ends cancelled), {message} and
# {failed_id} name the dependency that did not complete.
SETTLE = """
    SET status = CASE WHEN {released} THEN 'pending' ELSE 'cancelled' END::{schema}.job_status,
        start_after = CASE WHEN {released} THEN now() + (c.start_after - c.created_at)
                           ELSE c.start_after END,
        expire_at = CASE WHEN {released}
                         THEN now() + (c.start_after - c.created_at)
                              + make_interval(secs => c.expire_in_seconds)
                         ELSE c.expire_at END,
        finished_at = CASE WHEN {released} THEN NULL ELSE now() END,
        errors = CASE WHEN {released} THEN c.errors
                      ELSE c.errors || jsonb_build_array(jsonb_build_object(
                          'type', 'DependencyFailed', 'message', {message},
                          'dependency_id', {failed_id}::text, 'attempt', c.attempt,
                          'at', now())) END,
        error = CASE WHEN {released} THEN c.error ELSE {message} END"""

UPGRADE = """
DROP TRIGGER job_removed_settle_dependents ON {schema}.job;
DROP TRIGGER job_settle_dependents ON {schema}.job;
DROP FUNCTION {schema}.settle_dependents();

-- The row trigger notes that the statement wrote a job with dependents (as
-- its trigger depth, in the setting portqueue.noted), so that the statement
-- trigger reads its transition table only then: reading it costs a statement
-- several times what evaluating one setting does.
CREATE FUNCTION {schema}.note_dependency_settled() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    noted text := coalesce(current_setting('portqueue.noted', true), '');
BEGIN
    IF current_setting('portqueue.settling', true) = (pg_trigger_depth() - 1)::text THEN
        -- A statement of settle_dependents_of, which settles what it ends.
        RETURN NULL;
    END IF;
    IF strpos(noted, ',' || pg_trigger_depth() || ',') = 0 THEN
        PERFORM set_config('portqueue.noted', noted || ',' || pg_trigger_depth() || ',', true);
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION {schema}.settle_dependents() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    noted text := coalesce(current_setting('portqueue.noted', true), '');
    ids uuid[];
    states text[];
    shared uuid[];
    rearmed uuid[];
BEGIN
    IF strpos(noted, ',' || pg_trigger_depth() || ',') = 0 THEN
        RETURN NULL;
    END IF;
    PERFORM set_config('portqueue.noted', replace(noted, ',' || pg_trigger_depth() || ',', ''),
                       true);
    IF TG_OP = 'DELETE' THEN
        SELECT array_agg(r.id), array_agg('removed'::text),
               array_agg(r.id) FILTER (WHERE r.has_shared_dependents)
        INTO ids, states, shared
        FROM written AS r
        WHERE r.has_dependents;
    ELSE
        SELECT array_agg(r.id) FILTER (WHERE r.status::text NOT IN ('pending', 'active', 'waiting')),
               array_agg(r.status::text) FILTER (
                   WHERE r.status::text NOT IN ('pending', 'active', 'waiting')),
               array_agg(r.id) FILTER (
                   WHERE r.status::text NOT IN ('pending', 'active', 'waiting')
                     AND r.has_shared_dependents),
               -- back to pending or waiting: if it had failed, retried
               array_agg(r.id) FILTER (WHERE r.status::text IN ('pending', 'waiting'))
        INTO ids, states, shared, rearmed
        FROM written AS r
        WHERE r.has_dependents;
    END IF;
    IF ids IS NOT NULL OR rearmed IS NOT NULL THEN
        PERFORM {schema}.settle_dependents_of(ids, states, shared, rearmed);
    END IF;
    RETURN NULL;
END
$$;

-- Settles the dependents of jobs that finished (ids, their outcomes in
-- states; shared: those of them a dependent of several jobs waits for) and
-- of jobs retried (rearmed), then those of the dependents this ended, round
-- after round. Its settings hold for its own statements only: generic plans
-- (a custom plan for each call cost more to make than to run), and no
-- sequential scan of the job table, whatever its statistics say (a table
-- analysed before its dependents were added looks as if none waits, and a
-- scan of every job per completing statement was what made a drain slow).
CREATE FUNCTION {schema}.settle_dependents_of(
    ids uuid[], states text[], shared uuid[], rearmed uuid[]) RETURNS void
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    outer_depth text := current_setting('portqueue.settling', true);
    next_ids uuid[];
    next_shared uuid[];
    next_rearmed uuid[];
    more_ids uuid[];
    more_shared uuid[];
BEGIN
    PERFORM set_config('portqueue.settling', pg_trigger_depth()::text, true);
    WHILE ids IS NOT NULL OR rearmed IS NOT NULL LOOP
        next_ids := NULL;
        next_shared := NULL;
        next_rearmed := NULL;
        IF rearmed IS NOT NULL THEN
            -- The dependents these cancelled wait for them again, unless
            -- another of their dependencies failed too; their own cancelled
            -- dependents follow in the next round.
            PERFORM FROM {schema}.job AS c
            WHERE c.depends_on && rearmed AND c.status = 'cancelled'
              AND c.errors -> -1 ->> 'type' = 'DependencyFailed'
              AND c.errors -> -1 ->> 'dependency_id' = ANY(rearmed::text[])
            ORDER BY c.id
            FOR UPDATE OF c;
            WITH rearming AS (
                UPDATE {schema}.job AS c
                SET status = 'waiting', finished_at = NULL
                WHERE c.depends_on && rearmed AND c.status = 'cancelled'
                  AND c.errors -> -1 ->> 'type' = 'DependencyFailed'
                  AND c.errors -> -1 ->> 'dependency_id' = ANY(rearmed::text[])
                  AND NOT EXISTS (
                      SELECT FROM unnest(c.depends_on) AS dep (id)
                      LEFT JOIN {schema}.job AS p ON p.id = dep.id
                      WHERE dep.id::text <> c.errors -> -1 ->> 'dependency_id'
                        AND coalesce(p.status::text, 'removed')
                            IN ('failed', 'cancelled', 'expired', 'removed'))
                RETURNING c.id, c.has_dependents
            )
            SELECT array_agg(r.id) FILTER (WHERE r.has_dependents) INTO next_rearmed
            FROM rearming AS r;
        END IF;
        IF ids IS NOT NULL THEN
            -- Dependents waiting for one of these alone: its outcome settles
            -- them, and no other dependency's transaction can race for them.
            -- Released, a dependent becomes pending, its own delay counting
            -- from now; else it ends cancelled with a DependencyFailed entry
            -- naming the dependency, and settles its own in the next round.
            WITH settled AS (
                UPDATE {schema}.job AS c
                {settle_alone}
                FROM unnest(ids, states) AS p (id, state)
                WHERE c.depends_on = ARRAY[p.id] AND c.status = 'waiting'
                RETURNING c.id, c.status, c.has_dependents, c.has_shared_dependents
            )
            SELECT array_agg(s.id) FILTER (WHERE s.status::text = 'cancelled' AND s.has_dependents),
                   array_agg(s.id) FILTER (
                       WHERE s.status::text = 'cancelled' AND s.has_shared_dependents)
            INTO next_ids, next_shared
            FROM settled AS s;
        END IF;
        IF shared IS NOT NULL THEN
            -- Dependents of several jobs: lock them first, then read their
            -- dependencies in a statement of its own, whose snapshot includes
            -- every transaction that held one of these locks before.
            PERFORM FROM {schema}.job AS c
            WHERE c.depends_on && shared AND cardinality(c.depends_on) > 1
              AND c.status = 'waiting'
            ORDER BY c.id
            FOR UPDATE OF c;
            IF FOUND THEN
                WITH deps AS (
                    SELECT c.id, c.on_dependency_failure IS NOT DISTINCT FROM 'run' AS runs,
                           dep.id AS dep_id, dep.ord,
                           coalesce(p.status::text, 'removed') AS state
                    FROM {schema}.job AS c
                    CROSS JOIN LATERAL unnest(c.depends_on) WITH ORDINALITY AS dep (id, ord)
                    LEFT JOIN {schema}.job AS p ON p.id = dep.id
                    WHERE c.depends_on && shared AND cardinality(c.depends_on) > 1
                      AND c.status = 'waiting'
                ),
                verdicts AS (
                    SELECT d.id, bool_or(d.runs) AS runs,
                           bool_and(d.state = 'completed') AS all_completed,
                           bool_and(d.state IN ('completed', 'failed', 'cancelled', 'expired',
                                                'removed')) AS all_finished,
                           (array_agg(d.dep_id ORDER BY d.ord) FILTER (
                               WHERE d.state IN ('failed', 'cancelled', 'expired', 'removed')))[1]
                               AS failed_id,
                           (array_agg(d.state ORDER BY d.ord) FILTER (
                               WHERE d.state IN ('failed', 'cancelled', 'expired', 'removed')))[1]
                               AS failed_state
                    FROM deps AS d
                    GROUP BY d.id
                ),
                verdicted AS (
                    SELECT v.id, v.failed_id,
                           v.all_completed OR (v.runs AND v.all_finished) AS released,
                           'dependency ' || v.failed_id || ' ended ' || v.failed_state AS message
                    FROM verdicts AS v
                    WHERE v.all_completed OR (v.runs AND v.all_finished)
                       OR (NOT v.runs AND v.failed_id IS NOT NULL)
                ),
                settled AS (
                    UPDATE {schema}.job AS c
                    {settle_several}
                    FROM verdicted AS s
                    WHERE c.id = s.id
                    RETURNING c.id, c.status, c.has_dependents, c.has_shared_dependents
                )
                SELECT array_agg(s.id) FILTER (
                           WHERE s.status::text = 'cancelled' AND s.has_dependents),
                       array_agg(s.id) FILTER (
                           WHERE s.status::text = 'cancelled' AND s.has_shared_dependents)
                INTO more_ids, more_shared
                FROM settled AS s;
                next_ids := next_ids || more_ids;
                next_shared := next_shared || more_shared;
            END IF;
        END IF;
        ids := next_ids;
        states := CASE WHEN next_ids IS NOT NULL
                       THEN array_fill('cancelled'::text, ARRAY[cardinality(next_ids)]) END;
        shared := next_shared;
        rearmed := next_rearmed;
    END LOOP;
    PERFORM set_config('portqueue.settling', coalesce(outer_depth, ''), true);
END
$$;

-- Claims (pending to active) settle nothing: not noted.
CREATE TRIGGER job_note_settled AFTER UPDATE OF status ON {schema}.job
    FOR EACH ROW
    WHEN (NEW.has_dependents AND OLD.status IS DISTINCT FROM NEW.status
          AND NEW.status <> 'active')
    EXECUTE FUNCTION {schema}.note_dependency_settled();

CREATE TRIGGER job_note_removed AFTER DELETE ON {schema}.job
    FOR EACH ROW
    WHEN (OLD.has_dependents)
    EXECUTE FUNCTION {schema}.note_dependency_settled();

CREATE TRIGGER job_settle_dependents AFTER UPDATE ON {schema}.job
    REFERENCING NEW TABLE AS written
    FOR EACH STATEMENT
    EXECUTE FUNCTION {schema}.settle_dependents();

CREATE TRIGGER job_removed_settle_dependents AFTER DELETE ON {schema}.job
    REFERENCING OLD TABLE AS written
    FOR EACH STATEMENT
    EXECUTE FUNCTION {schema}.settle_dependents()
"""


def upgrade() -> None:
    schema = context.config.attributes["quoted_schema"]
    op.execute(UPGRADE.format(
        schema=schema,
        settle_alone=SETTLE.format(
            schema=schema,
            released="(p.state = 'completed' OR c.on_dependency_failure IS NOT DISTINCT FROM 'run')",
            message="('dependency ' || p.id || ' ended ' || p.state)", failed_id="p.id"),
        settle_several=SETTLE.format(
            schema=schema, released="s.released", message="s.message",
            failed_id="s.failed_id")))


def downgrade() -> None:
    # Back to 0010's row triggers: its upgrade ends with their function and
    # their two CREATE TRIGGERs, run again here as they are.
    from importlib import util
    from pathlib import Path

    spec = util.spec_from_file_location(
        "portqueue_migration_0010", Path(__file__).with_name("0010_workflows.py"))
    assert spec is not None and spec.loader is not None
    previous = util.module_from_spec(spec)
    spec.loader.exec_module(previous)
    row_triggers = previous.UPGRADE[previous.UPGRADE.index("CREATE FUNCTION"):]
    schema = context.config.attributes["quoted_schema"]
    op.execute(f"""
DROP TRIGGER job_removed_settle_dependents ON {schema}.job;
DROP TRIGGER job_settle_dependents ON {schema}.job;
DROP TRIGGER job_note_removed ON {schema}.job;
DROP TRIGGER job_note_settled ON {schema}.job;
DROP FUNCTION {schema}.settle_dependents();
DROP FUNCTION {schema}.note_dependency_settled();
DROP FUNCTION {schema}.settle_dependents_of(uuid[], text[], uuid[], uuid[]);
""" + row_triggers.format(schema=schema))
