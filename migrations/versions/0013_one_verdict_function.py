"""One verdict function for dependents of several jobs.

Migration 0011 carried the verdict on a dependent of several jobs (released,
cancelled naming the dependency that did not complete, or still waiting) as
a CTE written twice: once in the row trigger ``settle_dependents`` (a
completion) and once in ``settle_dependents_of`` (the loop for failures,
cancels, expiries, removals). Both now call ``dependency_verdicts``, one SQL
function the planner inlines, so the rules live in one place. Behaviour and
plans are 0011's.

Revision ID: 0013
Revises: 0012
"""

from alembic import context, op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

# Written out whole, as a migration is frozen; the downgrade restores 0011's
# two functions as 0011 wrote them and drops the verdict function.
UPGRADE = """
-- The verdict on each dependent of several jobs that waits for one of
-- parents: released (every dependency completed, or each finished and it
-- runs anyway), or cancelled (a dependency did not complete: failed_id, and
-- the message its DependencyFailed entry takes); a dependent still waiting
-- for another is not returned. One SELECT, STABLE and with no settings of
-- its own, so the planner inlines it into the statement that calls it and
-- it reads that statement's snapshot, as the CTE it replaces did: the caller
-- locks the dependents first, in a statement of its own. Its body is not
-- checked here: a fresh schema runs every migration in one transaction, and
-- 'waiting' (added to job_status by 0010) cannot be used in it yet.
SET LOCAL check_function_bodies = off;
CREATE FUNCTION {schema}.dependency_verdicts(parents uuid[])
RETURNS TABLE (id uuid, failed_id uuid, released boolean, message text)
LANGUAGE sql STABLE
AS $$
WITH deps AS (
    SELECT c.id, c.on_dependency_failure IS NOT DISTINCT FROM 'run' AS runs,
           dep.id AS dep_id, dep.ord,
           coalesce(p.status::text, 'removed') AS state
    FROM {schema}.job AS c
    CROSS JOIN LATERAL unnest(c.depends_on) WITH ORDINALITY AS dep (id, ord)
    LEFT JOIN {schema}.job AS p ON p.id = dep.id
    WHERE c.depends_on && parents AND cardinality(c.depends_on) > 1
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
SELECT v.id, v.failed_id, v.released, v.message FROM verdicted AS v
$$;
RESET check_function_bodies;

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
        FROM {schema}.dependency_verdicts(ARRAY[parent]) AS s
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
CREATE OR REPLACE FUNCTION {schema}.settle_dependents_of(
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
                WITH settled AS (
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
                    FROM {schema}.dependency_verdicts(shared) AS s
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
CREATE OR REPLACE FUNCTION {schema}.settle_dependents_of(
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

DROP FUNCTION {schema}.dependency_verdicts(uuid[]);
"""


def upgrade() -> None:
    op.execute(UPGRADE.format(schema=context.config.attributes["quoted_schema"]))


def downgrade() -> None:
    op.execute(DOWNGRADE.format(schema=context.config.attributes["quoted_schema"]))
