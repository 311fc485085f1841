-- Managing: retry, cancel, remove, pause and resume. Every transition is a
-- guarded UPDATE/DELETE whose returned rows say whether it happened.

-- name: retry_job
-- Re-arms a settled job's own row. Never an active one: clearing its lease
-- would let a second worker claim it while the first still runs it; and a
-- pending job is already queued, so it is left as it is (retry_blocker).
-- lease_token is kept: it only ever grows, so a run fenced out before the
-- retry can never match the token of a later claim. Errors stay as history.
-- A singleton job is not re-armed while another job holds its key (the
-- unique index would raise and abort the caller's transaction).
UPDATE {schema}.job AS j
SET status = 'pending',
    attempt = 0,
    start_after = now(),
    expire_at = now() + make_interval(secs => j.expire_in_seconds),
    started_at = NULL,
    finished_at = NULL,
    output = NULL,
    progress = NULL,
    cancel_requested_at = NULL,
    lease_expires_at = NULL,
    worker_id = NULL
WHERE j.id = %(job_id)s
  AND j.status NOT IN ('active', 'pending', 'waiting')
  AND (j.singleton_key IS NULL OR NOT EXISTS (
        SELECT FROM {schema}.job AS other
        WHERE other.queue = j.queue AND other.singleton_key = j.singleton_key
          AND other.status IN ('pending', 'active') AND other.id <> j.id))
RETURNING j.id, j.queue, j.status::text AS status, j.start_after;

-- name: savepoint
-- retry_job's UPDATE can meet a singleton key taken by a concurrent add that
-- committed after the NOT EXISTS check looked; the savepoint lets it recover
-- without aborting the caller's transaction.
SAVEPOINT portqueue_retry;

-- name: release_savepoint
RELEASE SAVEPOINT portqueue_retry;

-- name: rollback_to_savepoint
ROLLBACK TO SAVEPOINT portqueue_retry;

-- name: retry_blocker
-- Why retry_job re-armed nothing: the job is pending already (the row
-- itself), or another live job holds its singleton key. No row: the job is
-- unknown or active.
SELECT j.id, j.queue, j.status::text AS status, j.start_after
FROM {schema}.job AS j
WHERE j.id = %(job_id)s AND j.status IN ('pending', 'waiting')
UNION ALL
SELECT other.id, other.queue, other.status::text AS status, other.start_after
FROM {schema}.job AS j
JOIN {schema}.job AS other
  ON other.queue = j.queue AND other.singleton_key = j.singleton_key
 AND other.status IN ('pending', 'active') AND other.id <> j.id
WHERE j.id = %(job_id)s AND j.status NOT IN ('active', 'pending', 'waiting');

-- name: cancel_job
-- pending -> cancelled at once; active -> the cancel request is recorded and
-- announced on the cancel channel, so whichever worker runs it sets the
-- handler's signal (the worker's poll re-reads cancel_requested_at too).
-- The row lock makes the two branches exclusive against a concurrent claim.
WITH target AS (
    SELECT id, status FROM {schema}.job WHERE id = %(job_id)s FOR UPDATE
),
cancelled AS (
    UPDATE {schema}.job AS j
    SET status = 'cancelled', finished_at = now()
    FROM target
    WHERE j.id = target.id AND target.status IN ('pending', 'waiting')
    RETURNING j.id
),
signalled AS (
    UPDATE {schema}.job AS j
    SET cancel_requested_at = coalesce(j.cancel_requested_at, now())
    FROM target
    WHERE j.id = target.id AND target.status = 'active'
    RETURNING j.id, pg_notify(%(cancel_channel)s, j.id::text)
)
SELECT target.status::text AS previous_status,
       EXISTS (SELECT FROM cancelled) AS cancelled,
       EXISTS (SELECT FROM signalled) AS signalled
FROM target;

-- name: remove_job
DELETE FROM {schema}.job
WHERE id = %(job_id)s AND status <> 'active'
RETURNING id;

-- name: remove_jobs_by_id
WITH removed AS (
    DELETE FROM {schema}.job
    WHERE id = ANY(%(job_ids)s::uuid[]) AND status <> 'active'
    RETURNING 1
)
SELECT count(*) AS removed FROM removed;

-- name: remove_jobs_by_status
-- statuses never contains 'active' (validated before this runs).
WITH removed AS (
    DELETE FROM {schema}.job
    WHERE queue = %(queue)s AND status::text = ANY(%(statuses)s::text[])
      AND status <> 'active'
    RETURNING 1
)
SELECT count(*) AS removed FROM removed;

-- name: remove_schedule
DELETE FROM {schema}.schedule WHERE id = %(schedule_id)s RETURNING id;

-- name: pause_queue
INSERT INTO {schema}.queue AS q (name, paused, paused_at)
VALUES (%(queue)s, %(mode)s, now())
ON CONFLICT (name) DO UPDATE
SET paused = excluded.paused, paused_at = now(), updated_at = now()
RETURNING q.name, q.paused, q.created_at, q.concurrency, q.max_attempts,
          q.retry_delay_seconds, q.backoff_strategy, q.backoff_factor,
          q.backoff_max_delay_seconds, q.backoff_jitter, q.expire_in_seconds,
          q.retention_ttl_seconds, q.retention_keep_completed, q.retention_keep_failed,
          q.timeout_seconds, q.lease_seconds, q.dead_letter_queue;

-- name: resume_queue
INSERT INTO {schema}.queue AS q (name)
VALUES (%(queue)s)
ON CONFLICT (name) DO UPDATE
SET paused = NULL, paused_at = NULL, updated_at = now()
RETURNING q.name, q.paused, q.created_at, q.concurrency, q.max_attempts,
          q.retry_delay_seconds, q.backoff_strategy, q.backoff_factor,
          q.backoff_max_delay_seconds, q.backoff_jitter, q.expire_in_seconds,
          q.retention_ttl_seconds, q.retention_keep_completed, q.retention_keep_failed,
          q.timeout_seconds, q.lease_seconds, q.dead_letter_queue;

-- name: remove_queue
-- Removes a queue with no unfinished job: its row, its schedules (else they
-- would spawn into it again) and its finished jobs, in one statement. With
-- unfinished jobs (pending, active, or any status not finished) it removes
-- nothing and says how many there are. The queue's row is locked first, so
-- two removals, or a removal and a pause, do not interleave. A job added
-- concurrently, by a transaction that commits after this one read the jobs,
-- is kept and runs; the next add to the queue creates its row again.
WITH target AS (
    SELECT q.name FROM {schema}.queue AS q WHERE q.name = %(queue)s FOR UPDATE
),
unfinished AS (
    SELECT count(*) AS jobs FROM {schema}.job
    WHERE queue = %(queue)s
      AND status NOT IN ('completed', 'failed', 'cancelled', 'expired')
),
removable AS (
    SELECT t.name FROM target AS t, unfinished AS u WHERE u.jobs = 0
),
removed_jobs AS (
    DELETE FROM {schema}.job AS j USING removable AS r WHERE j.queue = r.name
    RETURNING 1
),
removed_schedules AS (
    DELETE FROM {schema}.schedule AS s USING removable AS r WHERE s.queue = r.name
    RETURNING 1
),
removed_queue AS (
    DELETE FROM {schema}.queue AS q USING removable AS r WHERE q.name = r.name
    RETURNING 1
)
SELECT EXISTS (SELECT FROM target) AS found,
       (SELECT jobs FROM unfinished) AS unfinished,
       (SELECT count(*) FROM removed_queue) AS removed;
