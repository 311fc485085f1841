BEGIN;

CREATE SCHEMA IF NOT EXISTS "portqueue";

CREATE TABLE portqueue.alembic_version (
    version_num VARCHAR(32) NOT NULL, 
    CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)
);

-- Running upgrade  -> 0001

CREATE TYPE "portqueue".job_status AS ENUM
    ('pending', 'active', 'completed', 'failed', 'cancelled', 'expired');

CREATE TABLE "portqueue".queue (
    name                       text PRIMARY KEY
                               CHECK (char_length(name) BETWEEN 1 AND 128),
    paused                     text CHECK (paused IN ('processing', 'all')),
    paused_at                  timestamptz,
    concurrency                integer CHECK (concurrency > 0),
    max_attempts               integer CHECK (max_attempts >= 1),
    retry_delay_seconds        integer CHECK (retry_delay_seconds >= 0),
    backoff_strategy           text CHECK (backoff_strategy IN ('fixed', 'linear', 'exponential')),
    backoff_factor             double precision CHECK (backoff_factor >= 1),
    backoff_max_delay_seconds  integer CHECK (backoff_max_delay_seconds >= 0),
    backoff_jitter             boolean,
    expire_in_seconds          integer CHECK (expire_in_seconds > 0),
    retention_ttl_seconds      integer CHECK (retention_ttl_seconds >= 0),
    retention_keep_completed   integer CHECK (retention_keep_completed >= 0),
    retention_keep_failed      integer CHECK (retention_keep_failed >= 0),
    timeout_seconds            integer CHECK (timeout_seconds > 0),
    lease_seconds              integer CHECK (lease_seconds > 0),
    dead_letter_queue          text CHECK (char_length(dead_letter_queue) BETWEEN 1 AND 128),
    created_at                 timestamptz NOT NULL DEFAULT now(),
    updated_at                 timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE "portqueue".job (
    id                              uuid PRIMARY KEY,
    -- insertion order: ties on priority and start_after are claimed in this order
    seq                             bigint GENERATED ALWAYS AS IDENTITY,
    queue                           text NOT NULL CHECK (char_length(queue) BETWEEN 1 AND 128),
    status                          "portqueue".job_status NOT NULL DEFAULT 'pending',
    data                            jsonb NOT NULL,
    priority                        integer NOT NULL DEFAULT 0,
    attempt                         integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts                    integer NOT NULL DEFAULT 1 CHECK (max_attempts >= 1),
    retry_delay_seconds             integer NOT NULL DEFAULT 0 CHECK (retry_delay_seconds >= 0),
    backoff_strategy                text NOT NULL DEFAULT 'fixed'
                                    CHECK (backoff_strategy IN ('fixed', 'linear', 'exponential')),
    backoff_factor                  double precision NOT NULL DEFAULT 2 CHECK (backoff_factor >= 1),
    backoff_max_delay_seconds       integer CHECK (backoff_max_delay_seconds >= 0),
    backoff_jitter                  boolean NOT NULL DEFAULT false,
    timeout_seconds                 integer CHECK (timeout_seconds > 0),
    expire_in_seconds               integer CHECK (expire_in_seconds > 0),
    expire_at                       timestamptz,
    retention_ttl_seconds           integer CHECK (retention_ttl_seconds >= 0),
    group_id                        text,
    idempotency_key                 text,
    singleton_key                   text,
    preferred_instance_key_pattern  text,
    schedule_id                     uuid,
    scheduled_for                   timestamptz,
    source_job_id                   uuid,
    created_at                      timestamptz NOT NULL DEFAULT now(),
    start_after                     timestamptz NOT NULL DEFAULT now(),
    started_at                      timestamptz,
    finished_at                     timestamptz,
    output                          jsonb,
    errors                          jsonb NOT NULL DEFAULT '[]'::jsonb,
    progress                        double precision CHECK (progress BETWEEN 0 AND 1),
    attrs                           jsonb NOT NULL DEFAULT '{}'::jsonb,
    cancel_requested_at             timestamptz,
    lease_token                     bigint,
    lease_expires_at                timestamptz,
    worker_id                       uuid,
    -- finished_at is set exactly when the job is in a terminal state
    CONSTRAINT job_finished_at_matches_status CHECK (
        (finished_at IS NOT NULL) = (status IN ('completed', 'failed', 'cancelled', 'expired'))),
    -- an active job always has a lease a rescuer can judge
    CONSTRAINT job_active_has_lease CHECK (
        status <> 'active' OR (lease_token IS NOT NULL AND lease_expires_at IS NOT NULL)),
    CONSTRAINT job_attempt_within_max CHECK (attempt <= max_attempts)
);

-- The claim: ready jobs of one queue in priority, start_after, insertion order.
-- Partial, so its size follows the backlog, not the history.
CREATE INDEX job_claim_idx ON "portqueue".job (queue, priority DESC, start_after, seq)
    WHERE status = 'pending';
-- The lease rescuer scans only running jobs.
CREATE INDEX job_lease_idx ON "portqueue".job (lease_expires_at) WHERE status = 'active';
-- The expirer scans only pending jobs that can expire.
CREATE INDEX job_expire_idx ON "portqueue".job (expire_at)
    WHERE status = 'pending' AND expire_at IS NOT NULL;
-- The pruner and count caps: finished jobs per queue and status, by age.
CREATE INDEX job_finished_idx ON "portqueue".job (queue, status, finished_at)
    WHERE finished_at IS NOT NULL;
-- The read API lists a queue newest first.
CREATE INDEX job_queue_seq_idx ON "portqueue".job (queue, seq DESC);
CREATE INDEX job_group_idx ON "portqueue".job (group_id) WHERE group_id IS NOT NULL;
-- First writer wins, for as long as the row is retained.
CREATE UNIQUE INDEX job_idempotency_key_uq ON "portqueue".job (queue, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- At most one pending or active job per singleton key.
CREATE UNIQUE INDEX job_singleton_key_uq ON "portqueue".job (queue, singleton_key)
    WHERE singleton_key IS NOT NULL AND status IN ('pending', 'active');
-- Exactly one job per schedule tick, however many schedulers race.
CREATE UNIQUE INDEX job_schedule_tick_uq ON "portqueue".job (schedule_id, scheduled_for)
    WHERE schedule_id IS NOT NULL;

CREATE TABLE "portqueue".schedule (
    id                uuid PRIMARY KEY,
    queue             text NOT NULL CHECK (char_length(queue) BETWEEN 1 AND 128),
    cron              text,
    tz                text NOT NULL DEFAULT 'UTC',
    every_seconds     integer CHECK (every_seconds > 0),
    next_run_at       timestamptz NOT NULL,
    last_run_at       timestamptz,
    last_job_id       uuid,
    enabled           boolean NOT NULL DEFAULT true,
    data              jsonb NOT NULL,
    -- the options stamped onto every spawned job (priority, retry, expiry, …)
    job_options       jsonb NOT NULL DEFAULT '{}'::jsonb,
    idempotency_key   text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT schedule_one_mode CHECK ((cron IS NULL) <> (every_seconds IS NULL))
);
CREATE INDEX schedule_due_idx ON "portqueue".schedule (next_run_at) WHERE enabled;
CREATE INDEX schedule_queue_idx ON "portqueue".schedule (queue, created_at DESC);
CREATE UNIQUE INDEX schedule_idempotency_key_uq ON "portqueue".schedule (queue, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

CREATE TABLE "portqueue".worker (
    id             uuid PRIMARY KEY,
    instance_key   text,
    hostname       text NOT NULL,
    pid            integer NOT NULL,
    queues         text[] NOT NULL DEFAULT '{}',
    concurrency    integer NOT NULL CHECK (concurrency > 0),
    started_at     timestamptz NOT NULL DEFAULT now(),
    last_seen_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX worker_last_seen_idx ON "portqueue".worker (last_seen_at);

-- Wake-ups: one NOTIFY per statement and queue (not per row), only for jobs
-- that are ready now. The payload is the queue name, never job data.
CREATE FUNCTION "portqueue".notify_jobs_added() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_SCHEMA || '.job', q.queue)
    FROM (SELECT DISTINCT queue FROM added
          WHERE status = 'pending' AND start_after <= now()) AS q;
    RETURN NULL;
END
$$;

CREATE TRIGGER job_added_notify AFTER INSERT ON "portqueue".job
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION "portqueue".notify_jobs_added();

-- A job put back to pending (retry, rescue, release) wakes claimers too;
-- Postgres folds identical notifications within a transaction into one.
CREATE FUNCTION "portqueue".notify_job_pending() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_SCHEMA || '.job', NEW.queue);
    RETURN NULL;
END
$$;

CREATE TRIGGER job_pending_notify AFTER UPDATE OF status ON "portqueue".job
    FOR EACH ROW
    WHEN (NEW.status = 'pending' AND OLD.status <> 'pending' AND NEW.start_after <= now())
    EXECUTE FUNCTION "portqueue".notify_job_pending();

INSERT INTO portqueue.alembic_version (version_num) VALUES ('0001') RETURNING portqueue.alembic_version.version_num;

-- Running upgrade 0001 -> 0002

-- Set by add_job_and_wait / wait_for_job: the statement that finishes such a
-- job sends its id on "<schema>.finished". Jobs nobody waits for send nothing,
-- so the hot completion path pays no NOTIFY per job.
ALTER TABLE "portqueue".job ADD COLUMN notify_finished boolean NOT NULL DEFAULT false;

CREATE FUNCTION "portqueue".notify_job_finished() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_SCHEMA || '.finished', NEW.id::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER job_finished_notify AFTER UPDATE OF status ON "portqueue".job
    FOR EACH ROW
    WHEN (NEW.notify_finished AND NEW.finished_at IS NOT NULL AND OLD.finished_at IS NULL)
    EXECUTE FUNCTION "portqueue".notify_job_finished();

UPDATE portqueue.alembic_version SET version_num='0002' WHERE portqueue.alembic_version.version_num = '0001';

-- Running upgrade 0002 -> 0003

-- The pruner's per-job retention: finished jobs with their own ttl, by ttl
-- then age. It finds the distinct ttls by a loose index scan and, for each,
-- reads only the range already past it, so a pass does not read every
-- retained row (job_finished_idx serves jobs that use their queue's ttl).
CREATE INDEX job_retention_ttl_idx ON "portqueue".job (retention_ttl_seconds, finished_at)
    WHERE retention_ttl_seconds IS NOT NULL AND finished_at IS NOT NULL;

UPDATE portqueue.alembic_version SET version_num='0003' WHERE portqueue.alembic_version.version_num = '0002';

-- Running upgrade 0003 -> 0004

-- NULL (the default, and every schedule made before this revision): a tick
-- missed while no scheduler ran is spawned once, however late. A number: a
-- tick found more than that many seconds after its instant is skipped with
-- the other missed ones, and the schedule moves on to its next tick.
ALTER TABLE "portqueue".schedule
    ADD COLUMN misfire_grace_seconds integer CHECK (misfire_grace_seconds > 0);

UPDATE portqueue.alembic_version SET version_num='0004' WHERE portqueue.alembic_version.version_num = '0003';

-- Running upgrade 0004 -> 0005

ALTER TABLE "portqueue".worker DROP CONSTRAINT worker_concurrency_check;

ALTER TABLE "portqueue".worker ADD CONSTRAINT worker_concurrency_check CHECK (concurrency >= 0);

UPDATE portqueue.alembic_version SET version_num='0005' WHERE portqueue.alembic_version.version_num = '0004';

-- Running upgrade 0005 -> 0006

ALTER TABLE "portqueue".job
    DROP CONSTRAINT job_queue_check,
    DROP CONSTRAINT job_attempt_check,
    DROP CONSTRAINT job_retry_delay_seconds_check,
    DROP CONSTRAINT job_backoff_factor_check,
    DROP CONSTRAINT job_backoff_max_delay_seconds_check,
    DROP CONSTRAINT job_timeout_seconds_check,
    DROP CONSTRAINT job_expire_in_seconds_check,
    DROP CONSTRAINT job_retention_ttl_seconds_check,
    DROP CONSTRAINT job_progress_check;

UPDATE portqueue.alembic_version SET version_num='0006' WHERE portqueue.alembic_version.version_num = '0005';

-- Running upgrade 0006 -> 0007

-- The newest error's message (errors is a JSON array, newest last), written
-- by the statements that add an error.
ALTER TABLE "portqueue".job ADD COLUMN error text;

UPDATE "portqueue".job SET error = errors -> -1 ->> 'message'
WHERE errors <> '[]'::jsonb;

-- Dead-letter copies by the job they came from, for the pruner.
CREATE INDEX job_source_job_idx ON "portqueue".job (source_job_id)
    WHERE source_job_id IS NOT NULL;

UPDATE portqueue.alembic_version SET version_num='0007' WHERE portqueue.alembic_version.version_num = '0006';

-- Running upgrade 0007 -> 0008

ALTER TABLE "portqueue".queue
    ADD COLUMN retention_completed_ttl_seconds integer
        CHECK (retention_completed_ttl_seconds >= 0),
    ADD COLUMN retention_failed_ttl_seconds integer
        CHECK (retention_failed_ttl_seconds >= 0);

-- No CHECK on the job's two (migration 0006: the client validates them, and
-- each CHECK of the job table costs every write of a row).
ALTER TABLE "portqueue".job
    ADD COLUMN retention_completed_ttl_seconds integer,
    ADD COLUMN retention_failed_ttl_seconds integer;

-- The pruner's ranges of jobs with an outcome's ttl of their own, by ttl and age.
CREATE INDEX job_retention_completed_ttl_idx
    ON "portqueue".job (retention_completed_ttl_seconds, finished_at)
    WHERE retention_completed_ttl_seconds IS NOT NULL AND status = 'completed';
CREATE INDEX job_retention_failed_ttl_idx
    ON "portqueue".job (retention_failed_ttl_seconds, finished_at)
    WHERE retention_failed_ttl_seconds IS NOT NULL
      AND status IN ('failed', 'cancelled', 'expired');

UPDATE portqueue.alembic_version SET version_num='0008' WHERE portqueue.alembic_version.version_num = '0007';

-- Running upgrade 0008 -> 0009

ALTER TABLE "portqueue".queue
    ADD COLUMN global_concurrency integer CHECK (global_concurrency > 0),
    ADD COLUMN partition_concurrency integer CHECK (partition_concurrency > 0),
    ADD COLUMN rate_limit integer CHECK (rate_limit > 0),
    ADD COLUMN rate_limit_period_seconds integer CHECK (rate_limit_period_seconds > 0),
    ADD COLUMN rate_limit_per_partition boolean,
    -- a rate is a count and its window, or nothing
    ADD CONSTRAINT queue_rate_limit_whole CHECK (
        (rate_limit IS NULL) = (rate_limit_period_seconds IS NULL));

ALTER TABLE "portqueue".job
    ADD COLUMN partition_key text,
    ADD COLUMN debounce_key text,
    ADD COLUMN limited boolean NOT NULL DEFAULT false;

-- The limited claim: each partition key's ready jobs in claim order, and the
-- distinct keys by a loose index scan over it.
CREATE INDEX job_partition_idx ON "portqueue".job
    (queue, partition_key, priority DESC, start_after, seq)
    WHERE status = 'pending' AND partition_key IS NOT NULL;
-- The limited claim counts a queue's active jobs (per key) from this.
CREATE INDEX job_limited_active_idx ON "portqueue".job (queue, partition_key)
    WHERE status = 'active' AND limited;
-- At most one pending job per debounce key: a debounced add updates it.
CREATE UNIQUE INDEX job_debounce_key_uq ON "portqueue".job (queue, debounce_key)
    WHERE debounce_key IS NOT NULL AND status = 'pending';

CREATE TABLE "portqueue".queue_start (
    queue          text NOT NULL,
    -- '' when the rate is counted for the whole queue
    partition_key  text NOT NULL,
    started_at     timestamptz NOT NULL,
    starts         integer NOT NULL CHECK (starts > 0)
);
CREATE INDEX queue_start_idx ON "portqueue".queue_start (queue, started_at);

CREATE TABLE "portqueue".throttle_window (
    queue           text NOT NULL,
    key             text NOT NULL,
    job_id          uuid NOT NULL,
    window_ends_at  timestamptz NOT NULL,
    PRIMARY KEY (queue, key)
);

-- A slot of a limited queue freed (its job completed, failed, was cancelled,
-- rescued or released): wake the workers waiting for one. Jobs of other
-- queues only evaluate the WHEN.
CREATE TRIGGER job_slot_freed_notify AFTER UPDATE OF status ON "portqueue".job
    FOR EACH ROW
    WHEN (OLD.limited AND OLD.status = 'active' AND NEW.status <> 'active')
    EXECUTE FUNCTION "portqueue".notify_job_pending();

UPDATE portqueue.alembic_version SET version_num='0009' WHERE portqueue.alembic_version.version_num = '0008';

-- Running upgrade 0009 -> 0010

ALTER TYPE "portqueue".job_status ADD VALUE IF NOT EXISTS 'waiting';

ALTER TABLE "portqueue".job
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
CREATE INDEX job_waiting_on_idx ON "portqueue".job USING gin (depends_on)
    WITH (fastupdate = off)
    WHERE depends_on IS NOT NULL
      AND status NOT IN ('pending', 'active', 'completed', 'failed', 'cancelled', 'expired');
-- Dependents cancelled by a failed dependency, which retrying it re-arms.
CREATE INDEX job_cancelled_dependent_idx ON "portqueue".job USING gin (depends_on)
    WHERE depends_on IS NOT NULL AND status = 'cancelled';
CREATE INDEX job_flow_idx ON "portqueue".job (flow_id, seq) WHERE flow_id IS NOT NULL;

-- Fan-out: publish(topic) adds one job to each subscribed queue.
CREATE TABLE "portqueue".subscription (
    topic       text NOT NULL CHECK (char_length(topic) BETWEEN 1 AND 128),
    queue       text NOT NULL CHECK (char_length(queue) BETWEEN 1 AND 128),
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, queue)
);

CREATE FUNCTION "portqueue".settle_dependents() RETURNS trigger
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
        PERFORM FROM "portqueue".job AS c
        WHERE c.depends_on @> ARRAY[parent] AND c.status = 'cancelled'
          AND c.errors -> -1 ->> 'type' = 'DependencyFailed'
          AND c.errors -> -1 ->> 'dependency_id' = parent::text
        ORDER BY c.id
        FOR UPDATE OF c;
        UPDATE "portqueue".job AS c
        SET status = 'waiting', finished_at = NULL
        WHERE c.depends_on @> ARRAY[parent] AND c.status = 'cancelled'
          AND c.errors -> -1 ->> 'type' = 'DependencyFailed'
          AND c.errors -> -1 ->> 'dependency_id' = parent::text
          AND NOT EXISTS (
              SELECT FROM unnest(c.depends_on) AS dep (id)
              LEFT JOIN "portqueue".job AS p ON p.id = dep.id
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
    UPDATE "portqueue".job AS c
    SET status = CASE WHEN (state = 'completed' OR c.on_dependency_failure IS NOT DISTINCT FROM 'run') THEN 'pending' ELSE 'cancelled' END::"portqueue".job_status,
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
    PERFORM FROM "portqueue".job AS c
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
        FROM "portqueue".job AS c
        CROSS JOIN LATERAL unnest(c.depends_on) WITH ORDINALITY AS dep (id, ord)
        LEFT JOIN "portqueue".job AS p ON p.id = dep.id
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
    UPDATE "portqueue".job AS c
    SET status = CASE WHEN s.released THEN 'pending' ELSE 'cancelled' END::"portqueue".job_status,
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

CREATE TRIGGER job_settle_dependents AFTER UPDATE OF status ON "portqueue".job
    FOR EACH ROW
    WHEN (NEW.has_dependents AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION "portqueue".settle_dependents();

CREATE TRIGGER job_removed_settle_dependents AFTER DELETE ON "portqueue".job
    FOR EACH ROW
    WHEN (OLD.has_dependents)
    EXECUTE FUNCTION "portqueue".settle_dependents();

UPDATE portqueue.alembic_version SET version_num='0010' WHERE portqueue.alembic_version.version_num = '0009';

COMMIT;

