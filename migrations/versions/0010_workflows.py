"""Workflows: dependencies between jobs, flows, fan-out subscriptions (SPEC §9).

A job that depends on others is added ``waiting`` and names them in
``depends_on``. It is never claimed (the claim index is partial on
``pending``, so waiting jobs cost the claim nothing) until the row trigger
below releases it: when each of its dependencies has completed it becomes
``pending``; when one ends failed, cancelled or expired (or is removed) it
ends ``cancelled`` with a ``DependencyFailed`` error, unless it was added with
``on_dependency_failure = 'run'``.

Release runs inside the transaction that settles the dependency, whatever
statement does it (a worker's completion or failure, ``job.transaction()``,
cancel, expiry, rescue, removal): a child can never be left waiting after its
last parent finished. The trigger fires only for jobs with ``has_dependents``
(set by the add of a dependent, under the parent's row lock), so a job
nothing depends on pays one boolean test per status change. It locks the
waiting children in id order first, then reads their parents in a new
statement: two parents completing at once in two transactions serialise on
the child's row, and the second sees the first's commit.

``ALTER TYPE … ADD VALUE`` runs inside this migration's transaction
(PostgreSQL 12 and later allow it), but the new value cannot be used before
that commits: nothing below names ``'waiting'`` outside a function body,
which PostgreSQL parses only when the function first runs.

Revision ID: 0010
Revises: 0009
"""

from alembic import context, op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TYPE {schema}.job_status ADD VALUE IF NOT EXISTS 'waiting';

ALTER TABLE {schema}.job
    ADD COLUMN depends_on uuid[],
    ADD COLUMN on_dependency_failure text,
    ADD COLUMN has_dependents boolean NOT NULL DEFAULT false,
    -- some dependent waits for other jobs too (the trigger's slower path)
    ADD COLUMN has_shared_dependents boolean NOT NULL DEFAULT false,
    ADD COLUMN flow_id uuid,
    ADD COLUMN flow_key text;

-- A finished job's waiting dependents. Partial: only waiting jobs are in
-- it, so a job without dependencies adds no entry, and a dependent's release
-- (to pending), claim and completion write none either. No fast update: its
-- pending list would be read whole by every look-up, one per completion of a
-- dependency. The predicate names the other statuses, as 'waiting' cannot be
-- named before this transaction commits; PostgreSQL proves status =
-- 'waiting' implies it.
CREATE INDEX job_waiting_on_idx ON {schema}.job USING gin (depends_on)
    WITH (fastupdate = off)
    WHERE depends_on IS NOT NULL
      AND status NOT IN ('pending', 'active', 'completed', 'failed', 'cancelled', 'expired');
-- Dependents cancelled by a failed dependency, which retrying it re-arms.
CREATE INDEX job_cancelled_dependent_idx ON {schema}.job USING gin (depends_on)
    WHERE depends_on IS NOT NULL AND status = 'cancelled';
CREATE INDEX job_flow_idx ON {schema}.job (flow_id, seq) WHERE flow_id IS NOT NULL;

-- Fan-out: publish(topic) adds one job to each subscribed queue.
CREATE TABLE {schema}.subscription (
    topic       text NOT NULL CHECK (char_length(topic) BETWEEN 1 AND 128),
    queue       text NOT NULL CHECK (char_length(queue) BETWEEN 1 AND 128),
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, queue)
);

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

# PostgreSQL cannot drop a value from an enum without rewriting every table
# that uses it: 'waiting' stays in job_status. Jobs still waiting would lose
# the dependencies they wait for, so the downgrade refuses while any exists.
DOWNGRADE = """
DO $$
BEGIN
    IF EXISTS (SELECT FROM {schema}.job WHERE status::text = 'waiting') THEN
        RAISE EXCEPTION 'jobs are still waiting for dependencies: let them run or cancel them';
    END IF;
END
$$;
DROP TRIGGER job_removed_settle_dependents ON {schema}.job;
DROP TRIGGER job_settle_dependents ON {schema}.job;
DROP FUNCTION {schema}.settle_dependents();
DROP TABLE {schema}.subscription;
DROP INDEX {schema}.job_flow_idx;
DROP INDEX {schema}.job_cancelled_dependent_idx;
DROP INDEX {schema}.job_waiting_on_idx;
ALTER TABLE {schema}.job
    DROP COLUMN flow_key,
    DROP COLUMN flow_id,
    DROP COLUMN has_shared_dependents,
    DROP COLUMN has_dependents,
    DROP COLUMN on_dependency_failure,
    DROP COLUMN depends_on
"""




def upgrade() -> None:
    op.execute(UPGRADE.format(schema=context.config.attributes["quoted_schema"]))


def downgrade() -> None:
    op.execute(DOWNGRADE.format(schema=context.config.attributes["quoted_schema"]))
