"""A failure cascades down a chain of dependents in a loop, not by nesting.

Under migration 0010 each dependent a failure cancelled fired the row trigger
``settle_dependents`` again, inside the statement of the one before: a chain
a few hundred jobs deep hit ``max_stack_depth``, and the error rolled back
the statement that failed its head (a worker's batch of outcomes, a cancel,
an expiry pass). Now a dependency that ends failed, cancelled or expired (or
is removed), and one retried, hand their dependents to
``settle_dependents_of``, which settles them and then, round after round,
the dependents of those it cancelled or re-armed, each round one statement
per kind for the whole round. The triggers its own statements fire see the
trigger depth it runs at in the setting ``portqueue.settling`` and return at
once: the loop settles what it ends. The rules are 0010's.

A completion, the common case, settles as under 0010, in the row trigger
itself: releasing its dependents cascades no further (a job released is
pending, not finished). Settling a whole statement's completions at once,
from a transition table, was tried and measured slower in a worker's drain
(docs/performance.md, "deps-perf").

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

# Written out whole, as a migration is frozen: the settling SET and the
# verdict CTEs appear once per statement that uses them, and the downgrade
# restores 0010's row trigger function as 0010 wrote it.
UPGRADE = """
CREATE OR REPLACE FUNCTION {schema}.settle_dependents() RETURNS trigger
LANGUAGE plpgsql
-- The statements below take the parent's id as a parameter, and a custom
-- plan for each call (the default, as the GIN estimates differ) cost more to
-- plan than to run.
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    parent uuid;
    state text;
BEGIN
    IF current_setting('portqueue.settling', true) = (pg_trigger_depth() - 1)::text THEN
        -- Written by settle_dependents_of, which settles what it ends.
        RETURN NULL;
    END IF;
    IF TG_OP = 'DELETE' THEN
        parent := OLD.id;
        state := 'removed';
    ELSE
        parent := NEW.id;
        state := NEW.status::text;
    END IF;
    IF TG_OP = 'UPDATE' AND state IN ('pending', 'waiting')
       AND OLD.status::text IN ('failed', 'cancelled', 'expired') THEN
        -- A retried dependency: the dependents it cancelled wait again.
        PERFORM {schema}.settle_dependents_of(NULL, NULL, NULL, ARRAY[parent]);
        RETURN NULL;
    END IF;
    IF state IN ('failed', 'cancelled', 'expired', 'removed') THEN
        PERFORM {schema}.settle_dependents_of(
            ARRAY[parent], ARRAY[state],
            CASE WHEN (CASE WHEN TG_OP = 'DELETE' THEN OLD.has_shared_dependents
                            ELSE NEW.has_shared_dependents END)
                 THEN ARRAY[parent] END,
            NULL);
        RETURN NULL;
    END IF;
    IF state <> 'completed' THEN
        RETURN NULL;
    END IF;
    -- Completed: its dependents waiting for it alone become pending, their
    -- own delay counting from now. One statement, and no other dependency's
    -- transaction can race for them.
    UPDATE {schema}.job AS c
    
    SET status = CASE WHEN true THEN 'pending' ELSE 'cancelled' END::{schema}.job_status,
        start_after = CASE WHEN true THEN now() + (c.start_after - c.created_at)
                           ELSE c.start_after END,
        expire_at = CASE WHEN true
                         THEN now() + (c.start_after - c.created_at)
                              + make_interval(secs => c.expire_in_seconds)
                         ELSE c.expire_at END,
        finished_at = CASE WHEN true THEN NULL ELSE now() END,
        errors = CASE WHEN true THEN c.errors
                      ELSE c.errors || jsonb_build_array(jsonb_build_object(
                          'type', 'DependencyFailed', 'message', NULL::text,
                          'dependency_id', NULL::text, 'attempt', c.attempt,
                          'at', now())) END,
        error = CASE WHEN true THEN c.error ELSE NULL::text END
    WHERE c.depends_on = ARRAY[parent] AND c.status = 'waiting';
    IF NOT NEW.has_shared_dependents THEN
        RETURN NULL;
    END IF;
    -- Dependents of several jobs: lock them first, then read their
    -- dependencies in a statement of its own, whose snapshot includes every
    -- transaction that held one of these locks before.
    PERFORM FROM {schema}.job AS c
    WHERE c.depends_on @> ARRAY[parent] AND cardinality(c.depends_on) > 1
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
    WHERE c.depends_on && ARRAY[parent] AND cardinality(c.depends_on) > 1
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
)
        UPDATE {schema}.job AS c
        
    SET status = CASE WHEN s.released THEN 'pending' ELSE 'cancelled' END::{schema}.job_status,
        start_after = CASE WHEN s.released THEN now() + (c.start_after - c.created_at)
                           ELSE c.start_after END,
        expire_at = CASE WHEN s.released
                         THEN now() + (c.start_after - c.created_at)
                              + make_interval(secs => c.expire_in_seconds)
                         ELSE c.expire_at END,
        finished_at = CASE WHEN s.released THEN NULL ELSE now() END,
        errors = CASE WHEN s.released THEN c.errors
                      ELSE c.errors || jsonb_build_array(jsonb_build_object(
                          'type', 'DependencyFailed', 'message', s.message,
                          'dependency_id', s.failed_id::text, 'attempt', c.attempt,
                          'at', now())) END,
        error = CASE WHEN s.released THEN c.error ELSE s.message END
        FROM verdicted AS s
        WHERE c.id = s.id;
    END IF;
    RETURN NULL;
END
$$;

-- Settles the dependents of jobs that ended without completing (ids, their
-- outcomes in states; shared: those of them a dependent of several jobs
-- waits for) and of jobs retried (rearmed), then those of the dependents it
-- cancelled or re-armed, round after round. Its settings hold for its own
-- statements only: generic plans (a custom plan for each call cost more to
-- make than to run), and no sequential scan of the job table, whatever its
-- statistics say: a table analysed before its dependents were added looks as
-- if none waits, and the planner then scans every job to find them.
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
                
    SET status = CASE WHEN (p.state = 'completed' OR c.on_dependency_failure IS NOT DISTINCT FROM 'run') THEN 'pending' ELSE 'cancelled' END::{schema}.job_status,
        start_after = CASE WHEN (p.state = 'completed' OR c.on_dependency_failure IS NOT DISTINCT FROM 'run') THEN now() + (c.start_after - c.created_at)
                           ELSE c.start_after END,
        expire_at = CASE WHEN (p.state = 'completed' OR c.on_dependency_failure IS NOT DISTINCT FROM 'run')
                         THEN now() + (c.start_after - c.created_at)
                              + make_interval(secs => c.expire_in_seconds)
                         ELSE c.expire_at END,
        finished_at = CASE WHEN (p.state = 'completed' OR c.on_dependency_failure IS NOT DISTINCT FROM 'run') THEN NULL ELSE now() END,
        errors = CASE WHEN (p.state = 'completed' OR c.on_dependency_failure IS NOT DISTINCT FROM 'run') THEN c.errors
                      ELSE c.errors || jsonb_build_array(jsonb_build_object(
                          'type', 'DependencyFailed', 'message', ('dependency ' || p.id || ' ended ' || p.state),
                          'dependency_id', p.id::text, 'attempt', c.attempt,
                          'at', now())) END,
        error = CASE WHEN (p.state = 'completed' OR c.on_dependency_failure IS NOT DISTINCT FROM 'run') THEN c.error ELSE ('dependency ' || p.id || ' ended ' || p.state) END
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
                    
    SET status = CASE WHEN s.released THEN 'pending' ELSE 'cancelled' END::{schema}.job_status,
        start_after = CASE WHEN s.released THEN now() + (c.start_after - c.created_at)
                           ELSE c.start_after END,
        expire_at = CASE WHEN s.released
                         THEN now() + (c.start_after - c.created_at)
                              + make_interval(secs => c.expire_in_seconds)
                         ELSE c.expire_at END,
        finished_at = CASE WHEN s.released THEN NULL ELSE now() END,
        errors = CASE WHEN s.released THEN c.errors
                      ELSE c.errors || jsonb_build_array(jsonb_build_object(
                          'type', 'DependencyFailed', 'message', s.message,
                          'dependency_id', s.failed_id::text, 'attempt', c.attempt,
                          'at', now())) END,
        error = CASE WHEN s.released THEN c.error ELSE s.message END
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

"""

DOWNGRADE = """
DROP TRIGGER job_removed_settle_dependents ON {schema}.job;
DROP TRIGGER job_settle_dependents ON {schema}.job;
DROP FUNCTION {schema}.settle_dependents();
DROP FUNCTION {schema}.settle_dependents_of(uuid[], text[], uuid[], uuid[]);
CREATE FUNCTION {schema}.settle_dependents() RETURNS trigger
LANGUAGE plpgsql
-- The statements below take the parent's id as a parameter, and a custom
-- plan for each call (the default, as the GIN estimates differ) cost more to
-- plan than to run.
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    parent uuid;
    state text;
BEGIN
    IF TG_OP = 'DELETE' THEN
        parent := OLD.id;
        state := 'removed';
    ELSE
        parent := NEW.id;
        state := NEW.status::text;
    END IF;
    IF TG_OP = 'UPDATE' AND state IN ('pending', 'waiting')
       AND OLD.status::text IN ('failed', 'cancelled', 'expired') THEN
        -- A retried dependency: the dependents it cancelled wait for it
        -- again, unless another of their dependencies failed too. Their own
        -- dependents follow, by this trigger on each of them.
        PERFORM FROM {schema}.job AS c
        WHERE c.depends_on @> ARRAY[parent] AND c.status = 'cancelled'
          AND c.errors -> -1 ->> 'type' = 'DependencyFailed'
          AND c.errors -> -1 ->> 'dependency_id' = parent::text
        ORDER BY c.id
        FOR UPDATE OF c;
        UPDATE {schema}.job AS c
        SET status = 'waiting', finished_at = NULL
        WHERE c.depends_on @> ARRAY[parent] AND c.status = 'cancelled'
          AND c.errors -> -1 ->> 'type' = 'DependencyFailed'
          AND c.errors -> -1 ->> 'dependency_id' = parent::text
          AND NOT EXISTS (
              SELECT FROM unnest(c.depends_on) AS dep (id)
              LEFT JOIN {schema}.job AS p ON p.id = dep.id
              WHERE dep.id <> parent
                AND coalesce(p.status::text, 'removed')
                    IN ('failed', 'cancelled', 'expired', 'removed'));
        RETURN NULL;
    END IF;
    IF state NOT IN ('completed', 'failed', 'cancelled', 'expired', 'removed') THEN
        RETURN NULL;
    END IF;
    -- Dependents waiting for this job alone: its outcome settles them, and no
    -- other dependency's transaction can race for them. One statement.
    -- Released, a dependent becomes pending, its own delay counting from now;
    -- else it ends cancelled with a DependencyFailed entry naming this job.
    -- (Both settling statements write the same columns; a migration is
    -- frozen, so each is written out whole.)
    UPDATE {schema}.job AS c
    SET status = CASE WHEN (state = 'completed' OR c.on_dependency_failure IS NOT DISTINCT FROM 'run') THEN 'pending' ELSE 'cancelled' END::{schema}.job_status,
        start_after = CASE WHEN (state = 'completed' OR c.on_dependency_failure IS NOT DISTINCT FROM 'run') THEN now() + (c.start_after - c.created_at)
                           ELSE c.start_after END,
        expire_at = CASE WHEN (state = 'completed' OR c.on_dependency_failure IS NOT DISTINCT FROM 'run')
                         THEN now() + (c.start_after - c.created_at)
                              + make_interval(secs => c.expire_in_seconds)
                         ELSE c.expire_at END,
        finished_at = CASE WHEN (state = 'completed' OR c.on_dependency_failure IS NOT DISTINCT FROM 'run') THEN NULL ELSE now() END,
        errors = CASE WHEN (state = 'completed' OR c.on_dependency_failure IS NOT DISTINCT FROM 'run') THEN c.errors
                      ELSE c.errors || jsonb_build_array(jsonb_build_object(
                          'type', 'DependencyFailed', 'message', ('dependency ' || parent || ' ended ' || state),
                          'dependency_id', parent::text, 'attempt', c.attempt,
                          'at', now())) END,
        error = CASE WHEN (state = 'completed' OR c.on_dependency_failure IS NOT DISTINCT FROM 'run') THEN c.error ELSE ('dependency ' || parent || ' ended ' || state) END
    WHERE c.depends_on = ARRAY[parent] AND c.status = 'waiting';
    IF NOT (CASE WHEN TG_OP = 'DELETE' THEN OLD.has_shared_dependents
                 ELSE NEW.has_shared_dependents END) THEN
        RETURN NULL;
    END IF;
    -- Dependents of several jobs: lock them first, then read their
    -- dependencies in a statement of its own, whose snapshot includes every
    -- transaction that held one of these locks before.
    PERFORM FROM {schema}.job AS c
    WHERE c.depends_on @> ARRAY[parent] AND cardinality(c.depends_on) > 1
      AND c.status = 'waiting'
    ORDER BY c.id
    FOR UPDATE OF c;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    WITH deps AS (
        SELECT c.id, c.on_dependency_failure IS NOT DISTINCT FROM 'run' AS runs,
               dep.id AS dep_id, dep.ord,
               coalesce(p.status::text, 'removed') AS state
        FROM {schema}.job AS c
        CROSS JOIN LATERAL unnest(c.depends_on) WITH ORDINALITY AS dep (id, ord)
        LEFT JOIN {schema}.job AS p ON p.id = dep.id
        WHERE c.depends_on @> ARRAY[parent] AND cardinality(c.depends_on) > 1
          AND c.status = 'waiting'
    ),
    verdicts AS (
        SELECT d.id, bool_or(d.runs) AS runs,
               bool_and(d.state = 'completed') AS all_completed,
               bool_and(d.state IN ('completed', 'failed', 'cancelled', 'expired', 'removed'))
                   AS all_finished,
               (array_agg(d.dep_id ORDER BY d.ord) FILTER (
                   WHERE d.state IN ('failed', 'cancelled', 'expired', 'removed')))[1]
                   AS failed_id,
               (array_agg(d.state ORDER BY d.ord) FILTER (
                   WHERE d.state IN ('failed', 'cancelled', 'expired', 'removed')))[1]
                   AS failed_state
        FROM deps AS d
        GROUP BY d.id
    ),
    settled AS (
        SELECT v.id, v.failed_id,
               v.all_completed OR (v.runs AND v.all_finished) AS released,
               'dependency ' || v.failed_id || ' ended ' || v.failed_state AS message
        FROM verdicts AS v
        WHERE v.all_completed OR (v.runs AND v.all_finished)
           OR (NOT v.runs AND v.failed_id IS NOT NULL)
    )
    UPDATE {schema}.job AS c
    SET status = CASE WHEN s.released THEN 'pending' ELSE 'cancelled' END::{schema}.job_status,
        start_after = CASE WHEN s.released THEN now() + (c.start_after - c.created_at)
                           ELSE c.start_after END,
        expire_at = CASE WHEN s.released
                         THEN now() + (c.start_after - c.created_at)
                              + make_interval(secs => c.expire_in_seconds)
                         ELSE c.expire_at END,
        finished_at = CASE WHEN s.released THEN NULL ELSE now() END,
        errors = CASE WHEN s.released THEN c.errors
                      ELSE c.errors || jsonb_build_array(jsonb_build_object(
                          'type', 'DependencyFailed', 'message', s.message,
                          'dependency_id', s.failed_id::text, 'attempt', c.attempt,
                          'at', now())) END,
        error = CASE WHEN s.released THEN c.error ELSE s.message END
    FROM settled AS s
    WHERE c.id = s.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER job_settle_dependents AFTER UPDATE OF status ON {schema}.job
    FOR EACH ROW
    WHEN (NEW.has_dependents AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION {schema}.settle_dependents();

CREATE TRIGGER job_removed_settle_dependents AFTER DELETE ON {schema}.job
    FOR EACH ROW
    WHEN (OLD.has_dependents)
    EXECUTE FUNCTION {schema}.settle_dependents()
"""


def upgrade() -> None:
    op.execute(UPGRADE.format(schema=context.config.attributes["quoted_schema"]))


def downgrade() -> None:
    op.execute(DOWNGRADE.format(schema=context.config.attributes["quoted_schema"]))
