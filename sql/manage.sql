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
SET {rearmed}
WHERE j.id = %(job_id)s
  AND {rearmable}
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
{cancel_writes}
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
RETURNING {queue_info_columns};

-- name: resume_queue
-- Its workers hear of it at once, as of an add: its pending jobs waited only
-- for the resume, and would otherwise wait for each worker's next poll.
WITH resumed AS (
    INSERT INTO {schema}.queue AS q (name)
    VALUES (%(queue)s)
    ON CONFLICT (name) DO UPDATE
    SET paused = NULL, paused_at = NULL, updated_at = now()
    RETURNING {queue_info_columns}
)
SELECT resumed.*
FROM resumed CROSS JOIN LATERAL pg_notify(%(job_channel)s, resumed.name) AS woken;

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

-- fragment: rearmed
-- What retry_job and retry_jobs set on a row they re-arm (named j).
-- dependents_released is turned off: it stands for the completion that set
-- it, and on a partitioned job table (docs/retention.md, partitioned history)
-- the trigger a later end fires sees only the new row, not the flag's change.
status = 'pending',
    attempt = 0,
    start_after = now(),
    expire_at = now() + make_interval(secs => j.expire_in_seconds),
    started_at = NULL,
    finished_at = NULL,
    output = NULL,
    progress = NULL,
    cancel_requested_at = NULL,
    lease_expires_at = NULL,
    worker_id = NULL,
    dependents_released = false

-- fragment: rearmable
-- Which rows (named j) retry_job and retry_jobs may re-arm: settled ones,
-- and no singleton job while another live job holds its key.
j.status NOT IN ('active', 'pending', 'waiting')
  AND (j.singleton_key IS NULL OR NOT EXISTS (
        SELECT FROM {schema}.job AS other
        WHERE other.queue = j.queue AND other.singleton_key = j.singleton_key
          AND other.status IN ('pending', 'active') AND other.id <> j.id))

-- name: retry_jobs_by_id
-- retry_jobs by id: every settled job named is re-armed as retry_job re-arms
-- one; active and pending ones are left as they are (fragment retry_chosen).
WITH chosen AS (
    SELECT j.id, j.queue, j.singleton_key, j.seq
    FROM {schema}.job AS j
    WHERE j.id = ANY(%(job_ids)s::uuid[]) AND j.status NOT IN ('active', 'pending', 'waiting')
),
{retry_chosen}

-- name: retry_jobs_by_status
-- statuses never contains 'active' or 'pending' (validated before this runs).
WITH chosen AS (
    SELECT j.id, j.queue, j.singleton_key, j.seq
    FROM {schema}.job AS j
    WHERE j.queue = %(queue)s AND j.status::text = ANY(%(statuses)s::text[])
      AND j.status NOT IN ('active', 'pending', 'waiting')
),
{retry_chosen}

-- fragment: retry_chosen
-- The rest of a retry_jobs statement: re-arms the rows of a CTE named chosen
-- (id, queue, singleton_key, seq) and counts them, in one statement. Of
-- several chosen jobs sharing a singleton key only the newest is re-armed:
-- two re-armed at once would both pass rearmable's NOT EXISTS and then
-- violate the unique index. A key taken by a concurrent add that commits
-- after the check still raises; retry_jobs retries from a savepoint then.
keyed AS (
    SELECT c.id,
           c.singleton_key IS NULL
           OR row_number() OVER (PARTITION BY c.queue, c.singleton_key
                                 ORDER BY c.seq DESC) = 1 AS first_of_key
    FROM chosen AS c
),
retried AS (
    UPDATE {schema}.job AS j
    SET {rearmed}
    FROM keyed AS k
    WHERE j.id = k.id AND k.first_of_key AND {rearmable}
    RETURNING 1
)
SELECT count(*) AS retried FROM retried;

-- name: cancel_jobs_by_id
-- cancel_jobs by id: each job named is cancelled (pending) or signalled
-- (active) as cancel_job does it (fragment cancel_targets). Rows are locked
-- in id order, so two bulk cancels over the same jobs cannot deadlock.
WITH target AS (
    SELECT id, status FROM {schema}.job
    WHERE id = ANY(%(job_ids)s::uuid[])
    ORDER BY id
    FOR UPDATE
),
{cancel_targets}

-- name: cancel_jobs_by_status
-- statuses holds only 'pending', 'waiting' and 'active' (validated before this runs).
WITH target AS (
    SELECT id, status FROM {schema}.job
    WHERE queue = %(queue)s AND status::text = ANY(%(statuses)s::text[])
    ORDER BY id
    FOR UPDATE
),
{cancel_targets}

-- fragment: cancel_writes
-- cancel_job's and cancel_jobs' writes, over a locked CTE named target (id,
-- status): pending jobs end cancelled at once; active ones get their cancel
-- request recorded and announced on the cancel channel, so whichever worker
-- runs them sets the handler's signal.
cancelled AS (
    UPDATE {schema}.job AS j
    SET status = 'cancelled', finished_at = now()
    FROM target
    WHERE j.id = target.id AND target.status IN ('pending', 'waiting')
      AND j.status IN ('pending', 'waiting')
    RETURNING j.id
),
signalled AS (
    UPDATE {schema}.job AS j
    SET cancel_requested_at = coalesce(j.cancel_requested_at, now())
    FROM target
    WHERE j.id = target.id AND target.status = 'active' AND j.status = 'active'
    RETURNING j.id, pg_notify(%(cancel_channel)s, j.id::text)
)

-- fragment: cancel_targets
-- The rest of a cancel_jobs statement: its writes, then the ids cancelled
-- (the client's job_cancelled callbacks), how many were signalled and how
-- many had finished already.
{cancel_writes}
SELECT (SELECT coalesce(array_agg(id::text), '{{}}') FROM cancelled) AS cancelled_ids,
       (SELECT count(*) FROM signalled) AS signalled,
       (SELECT count(*) FROM target WHERE status NOT IN ('pending', 'waiting', 'active'))
           AS already_finished,
       (SELECT count(*) FROM target) AS found;

-- name: redrive_copies
-- redrive: the dead-letter copies of a queue still waiting (pending), each
-- with the queue of the job it copies, oldest first. Locked for the rest of
-- the redrive's transaction (a concurrent redrive passes over them), which
-- adds each copy's data back to that queue and then completes the copy
-- (complete_redriven). A copy whose source was removed has no queue to go
-- back to and is left where it is. LIMIT NULL: every copy.
-- The source is looked up by primary key, one per copy (the LIMIT keeps the
-- subquery from being flattened): as a plain join, the planner misjudged how
-- many copies there are and hashed the whole job table.
SELECT c.id::text AS id, c.data::text AS data, c.priority, c.group_id,
       s.queue AS source_queue
FROM {schema}.job AS c
CROSS JOIN LATERAL (
    SELECT s.queue FROM {schema}.job AS s WHERE s.id = c.source_job_id LIMIT 1
) AS s
WHERE c.queue = %(queue)s AND c.status = 'pending' AND c.source_job_id IS NOT NULL
ORDER BY c.seq
LIMIT %(limit)s
FOR UPDATE OF c SKIP LOCKED;

-- name: complete_redriven
-- The copies redriven, completed with the new job's id as their output, so
-- each says where its data went. pending -> completed: the copy itself never
-- ran; the new job in the source queue will.
-- Pinned to the primary key, as complete_jobs is: the recordset cannot be
-- sized, and the planner would otherwise scan every pending job.
WITH r AS MATERIALIZED (
    SELECT * FROM jsonb_to_recordset(%(copies)s::jsonb) AS r (id uuid, job_id text)
),
done AS (
    UPDATE {schema}.job AS j
    SET status = 'completed', finished_at = now(),
        output = jsonb_build_object('redriven_job_id', r.job_id)
    FROM r
    WHERE j.id = ANY (ARRAY(SELECT r.id FROM r))
      AND j.id = r.id AND j.status::text = 'pending'
      AND j.status IN ('pending', 'active', 'waiting')
    RETURNING 1
)
SELECT count(*) AS completed FROM done;

-- name: set_queue_limits
-- Flow-control limits (SPEC §8), created with the queue's row if need be.
-- Each limit is written only when its set_* flag is true (a NULL value then
-- removes it); the others keep their stored value. Also what a worker writes
-- at start for the limits its code declares, and only those.
INSERT INTO {schema}.queue AS q (
    name, global_concurrency, partition_concurrency, rate_limit, rate_limit_period_seconds,
    rate_limit_per_partition)
VALUES (%(queue)s, %(global_concurrency)s, %(partition_concurrency)s, %(rate_limit)s,
        %(rate_limit_period_seconds)s, %(rate_limit_per_partition)s)
ON CONFLICT (name) DO UPDATE SET
    global_concurrency = CASE WHEN %(set_global_concurrency)s
                              THEN excluded.global_concurrency ELSE q.global_concurrency END,
    partition_concurrency = CASE WHEN %(set_partition_concurrency)s
                                 THEN excluded.partition_concurrency
                                 ELSE q.partition_concurrency END,
    rate_limit = CASE WHEN %(set_rate_limit)s THEN excluded.rate_limit ELSE q.rate_limit END,
    rate_limit_period_seconds = CASE WHEN %(set_rate_limit)s
                                     THEN excluded.rate_limit_period_seconds
                                     ELSE q.rate_limit_period_seconds END,
    rate_limit_per_partition = CASE WHEN %(set_rate_limit)s
                                    THEN excluded.rate_limit_per_partition
                                    ELSE q.rate_limit_per_partition END,
    updated_at = now()
RETURNING {queue_info_columns};

-- fragment: queue_info_columns
-- A queue's row as QueueInfo reads it (operations.queue_info).
q.name, q.paused, q.created_at, q.concurrency, q.max_attempts,
          q.retry_delay_seconds, q.backoff_strategy, q.backoff_factor,
          q.backoff_max_delay_seconds, q.backoff_jitter, q.expire_in_seconds,
          q.retention_ttl_seconds, q.retention_keep_completed, q.retention_keep_failed,
          q.timeout_seconds, q.lease_seconds, q.dead_letter_queue,
          q.retention_completed_ttl_seconds, q.retention_failed_ttl_seconds,
          {queue_limit_columns}
