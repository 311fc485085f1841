-- Maintenance: small services run by every worker, acting from one at a
-- time (a transaction-scoped advisory lock), in bounded batches.

-- name: try_maintenance_lock
SELECT pg_try_advisory_xact_lock(%(key)s) AS acquired;

-- name: lead_maintenance
-- Take or renew a role ('maintenance', 'scheduler') for this worker until
-- now() + seconds, unless another worker's term is still running. leads:
-- whether this worker has it now; seconds_left: until the current term ends
-- (this worker's or the other's), when to ask again.
WITH took AS (
    INSERT INTO {schema}.maintenance_leader AS l (role, worker_id, until)
    VALUES (%(role)s, %(worker_id)s, now() + make_interval(secs => %(seconds)s))
    ON CONFLICT (role) DO UPDATE SET worker_id = excluded.worker_id, until = excluded.until
    WHERE l.until < now() OR l.worker_id = excluded.worker_id
    RETURNING until
)
SELECT EXISTS (SELECT FROM took) AS leads,
       extract(epoch FROM coalesce(
           (SELECT until FROM took),
           (SELECT until FROM {schema}.maintenance_leader WHERE role = %(role)s)) - now()
       )::float8 AS seconds_left;

-- name: resign_maintenance
-- A stopping worker hands its roles on at once instead of at its term's end.
DELETE FROM {schema}.maintenance_leader WHERE worker_id = %(worker_id)s;

-- name: rescue_lapsed
-- Jobs whose lease lapsed (worker killed, host lost, stalled) go back to
-- pending, or to failed when their attempts are spent. One guarded UPDATE,
-- no read-then-write: rows are locked in id order (SKIP LOCKED passes over a
-- row being completed right now) and the WHERE re-checks status and lease
-- on the locked row, so a job completed or heartbeated meanwhile is left
-- untouched and each lapsed attempt is rescued exactly once.
-- A job failed here is copied to its queue's dead-letter queue by the same
-- fragment as in fail_jobs: a job that kills its worker on every attempt
-- ends here, and it is the very job a dead-letter queue exists for.
WITH lapsed AS (
    SELECT id
    FROM {schema}.job
    WHERE status = 'active' AND lease_expires_at < now()
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
rescued AS (
    UPDATE {schema}.job AS j
    SET status = (CASE WHEN j.attempt >= j.max_attempts THEN 'failed' ELSE 'pending' END)
                     ::{schema}.job_status,
        finished_at = CASE WHEN j.attempt >= j.max_attempts THEN now() END,
        errors = j.errors || jsonb_build_array(jsonb_build_object(
            'attempt', j.attempt,
            'type', 'LeaseExpired',
            'message', 'the worker running this attempt stopped renewing its lease',
            'traceback', NULL,
            'at', now())),
        error = 'the worker running this attempt stopped renewing its lease',
        lease_expires_at = NULL,
        worker_id = NULL
    FROM lapsed
    WHERE j.id = lapsed.id AND j.status = 'active' AND j.lease_expires_at < now()
    RETURNING j.id, j.queue, j.status, j.data, j.priority, j.group_id
),
dead_letter AS (
    SELECT r.*, q.dead_letter_queue
    FROM rescued AS r
    JOIN {schema}.queue AS q ON q.name = r.queue
    WHERE r.status = 'failed' AND q.dead_letter_queue IS NOT NULL
),
{dead_letter_copy}
SELECT r.id, r.status::text AS status, r.queue
FROM rescued AS r;

-- name: disable_jit
-- For this transaction only: the pruner's statements look expensive to the
-- planner (per-queue and per-ttl look-ups whose LIMITs it cannot see
-- through), and JIT compiling them costs far more than running them.
SELECT set_config('jit', 'off', true);

-- name: set_statement_timeout
-- For this transaction only: a maintenance batch never holds locks for long.
SELECT set_config('statement_timeout', %(milliseconds)s, true);

-- name: expire_pending
-- Pending jobs past their expire_at were not started in time: they end
-- 'expired' (the claim does the same to one it meets first). Locked in id
-- order, SKIP LOCKED passes over a row a claimer holds right now, and the
-- WHERE re-checks the locked row, so a job claimed meanwhile is left alone.
-- Candidates come from job_expire_idx (pending jobs that can expire).
WITH due AS (
    SELECT id
    FROM {schema}.job
    WHERE status = 'pending' AND expire_at IS NOT NULL AND expire_at <= now()
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.job AS j
SET status = 'expired',
    finished_at = now()
FROM due
WHERE j.id = due.id AND j.status = 'pending' AND j.expire_at <= now()
RETURNING j.id;

-- name: prune_work
-- The pruner's work list: each retention rule and range that has at least
-- one job to delete now. Finished jobs (completed, failed, cancelled,
-- expired) go when either rule says so:
--   * by age ('queue_ttl', 'own_ttl', 'own_completed_ttl', 'own_failed_ttl'):
--     finished longer ago than the first ttl set of: the job's own for its
--     outcome (retention_completed_ttl_seconds for completed jobs,
--     retention_failed_ttl_seconds for failed, cancelled and expired ones),
--     the job's retention_ttl_seconds, the queue's two likewise, the
--     client's per-outcome defaults, the client default
--     (%(default_ttl_seconds)s); ttl 0 means "as soon as it finished", and
--     %(forever)s (FOREVER) never: such ranges are not listed at all;
--   * by count ('count'): beyond the newest retention_keep_completed
--     completed, or retention_keep_failed failed, jobs of a queue, else the
--     client's caps; a cap of %(forever)s turns the client's off.
-- Each item is then pruned in batches by its own statement below, each batch
-- starting where the last one ended, so a pass reads every index range once
-- rather than once per batch (rows deleted by earlier batches stay in the
-- index until vacuum, and rescanning them made a long prune quadratic).
-- The distinct job-level ttls are found by a loose index scan on
-- job_retention_ttl_idx (the recursive CTE), not by reading every row.
WITH RECURSIVE own_ttls AS (
    (SELECT j.retention_ttl_seconds AS ttl
     FROM {schema}.job AS j
     WHERE j.retention_ttl_seconds IS NOT NULL AND j.finished_at IS NOT NULL
     ORDER BY j.retention_ttl_seconds
     LIMIT 1)
    UNION ALL
    SELECT (SELECT j.retention_ttl_seconds
            FROM {schema}.job AS j
            WHERE j.retention_ttl_seconds > t.ttl AND j.finished_at IS NOT NULL
            ORDER BY j.retention_ttl_seconds
            LIMIT 1)
    FROM own_ttls AS t
    WHERE t.ttl IS NOT NULL
),
-- The same loose scans for the outcomes' own ttls, on their partial indexes.
own_completed_ttls AS (
    (SELECT j.retention_completed_ttl_seconds AS ttl
     FROM {schema}.job AS j
     WHERE j.retention_completed_ttl_seconds IS NOT NULL AND j.status = 'completed'
     ORDER BY j.retention_completed_ttl_seconds
     LIMIT 1)
    UNION ALL
    SELECT (SELECT j.retention_completed_ttl_seconds
            FROM {schema}.job AS j
            WHERE j.retention_completed_ttl_seconds > t.ttl AND j.status = 'completed'
            ORDER BY j.retention_completed_ttl_seconds
            LIMIT 1)
    FROM own_completed_ttls AS t
    WHERE t.ttl IS NOT NULL
),
own_failed_ttls AS (
    (SELECT j.retention_failed_ttl_seconds AS ttl
     FROM {schema}.job AS j
     WHERE j.retention_failed_ttl_seconds IS NOT NULL
       AND j.status IN ('failed', 'cancelled', 'expired')
     ORDER BY j.retention_failed_ttl_seconds
     LIMIT 1)
    UNION ALL
    SELECT (SELECT j.retention_failed_ttl_seconds
            FROM {schema}.job AS j
            WHERE j.retention_failed_ttl_seconds > t.ttl
              AND j.status IN ('failed', 'cancelled', 'expired')
            ORDER BY j.retention_failed_ttl_seconds
            LIMIT 1)
    FROM own_failed_ttls AS t
    WHERE t.ttl IS NOT NULL
),
queue_ttls AS (
    SELECT q.name, f.status,
           coalesce(CASE WHEN f.status = 'completed' THEN q.retention_completed_ttl_seconds
                         ELSE q.retention_failed_ttl_seconds END,
                    q.retention_ttl_seconds,
                    CASE WHEN f.status = 'completed' THEN %(default_completed_ttl_seconds)s::integer
                         ELSE %(default_failed_ttl_seconds)s::integer END,
                    %(default_ttl_seconds)s) AS ttl
    FROM {schema}.queue AS q
    CROSS JOIN unnest('{{completed,failed,cancelled,expired}}'::{schema}.job_status[]) AS f (status)
),
count_caps AS (
    SELECT c.* FROM (
        SELECT q.name, 'completed'::{schema}.job_status AS status,
               coalesce(q.retention_keep_completed, %(default_keep_completed)s::integer) AS keep
        FROM {schema}.queue AS q
        UNION ALL
        SELECT q.name, 'failed'::{schema}.job_status,
               coalesce(q.retention_keep_failed, %(default_keep_failed)s::integer)
        FROM {schema}.queue AS q
    ) AS c
    WHERE c.keep IS NOT NULL AND c.keep < %(forever)s
)
SELECT 'own_ttl' AS rule, NULL::text AS queue, NULL::text AS status, t.ttl, NULL::integer AS keep
FROM own_ttls AS t
WHERE t.ttl IS NOT NULL AND t.ttl < %(forever)s
  AND EXISTS (SELECT FROM {schema}.job AS j
              WHERE j.retention_ttl_seconds = t.ttl AND j.finished_at IS NOT NULL
                AND j.finished_at <= now() - make_interval(secs => t.ttl)
                AND {prune_no_own_outcome_ttl})
UNION ALL
SELECT 'own_completed_ttl', NULL, NULL, t.ttl, NULL
FROM own_completed_ttls AS t
WHERE t.ttl IS NOT NULL AND t.ttl < %(forever)s
  AND EXISTS (SELECT FROM {schema}.job AS j
              WHERE j.retention_completed_ttl_seconds = t.ttl AND j.status = 'completed'
                AND j.finished_at <= now() - make_interval(secs => t.ttl))
UNION ALL
SELECT 'own_failed_ttl', NULL, NULL, t.ttl, NULL
FROM own_failed_ttls AS t
WHERE t.ttl IS NOT NULL AND t.ttl < %(forever)s
  AND EXISTS (SELECT FROM {schema}.job AS j
              WHERE j.retention_failed_ttl_seconds = t.ttl
                AND j.status IN ('failed', 'cancelled', 'expired')
                AND j.finished_at <= now() - make_interval(secs => t.ttl))
UNION ALL
SELECT 'queue_ttl', p.name, p.status::text, p.ttl, NULL
FROM queue_ttls AS p
WHERE p.ttl < %(forever)s
  AND EXISTS (SELECT FROM {schema}.job AS j
              WHERE j.queue = p.name AND j.status = p.status AND j.finished_at IS NOT NULL
                AND j.finished_at <= now() - make_interval(secs => p.ttl)
                AND j.retention_ttl_seconds IS NULL
                AND {prune_no_own_outcome_ttl})
UNION ALL
SELECT 'count', k.name, k.status::text, NULL, k.keep
FROM count_caps AS k
WHERE EXISTS (SELECT FROM {schema}.job AS j
              WHERE j.queue = k.name AND j.status = k.status AND j.finished_at IS NOT NULL
              ORDER BY j.finished_at DESC
              OFFSET k.keep
              LIMIT 1);

-- The prune_by_* statements delete one batch of one work item. They share
-- a shape:
--   * candidates: the next %(limit)s rows of the item's index range, in
--     (finished_at, id) order, after the previous batch's last row
--     (%(after_finished_at)s, %(after_id)s; NULL for the first batch); the
--     plain finished_at >= bound is what lets the index scan start there;
--   * doomed: the candidates locked in id order (a fixed order, so two
--     deleters can never deadlock), passing over rows someone holds, and only
--     if finished_at is still the value they were chosen by: the lock
--     re-checks that on the current row, so a job retried (finished_at NULL)
--     or retried and finished again since is not deleted;
--   * kept whatever the rules say: the source of a dead-letter copy, for as
--     long as the copy exists (its errors are the failure's history, and
--     retry_job(job_id=copy.source_job_id) is the documented redrive; found
--     by job_source_job_idx), and a job a waiter asked to be told of
--     (notify_finished), for %(waited_grace_seconds)s after it finished, so
--     that wait_for_job / add_job_and_wait read its result instead of
--     finding it gone when its retention is 0;
--   * the result: how many were deleted, how many candidates there were (a
--     short batch ends the item) and the last candidate, where the next
--     batch starts.
--
-- The candidates' keyset condition and everything after the candidates are
-- the same in all of them: the fragments below.

-- fragment: prune_no_own_outcome_ttl
-- A job that set no ttl of its own for the outcome it had: such a job is in
-- the range of that ttl (prune_by_own_completed_ttl, prune_by_own_failed_ttl)
-- and nowhere else. Two ORs rather than a CASE: the planner estimates each
-- from the columns' statistics (mostly NULL), where a CASE gets a guess that
-- made it scan the whole table instead of job_finished_idx.
(j.retention_completed_ttl_seconds IS NULL OR j.status <> 'completed')
AND (j.retention_failed_ttl_seconds IS NULL OR j.status = 'completed')

-- fragment: prune_after_last_batch
-- Rows after the previous batch's last one, in (finished_at, id) order. The
-- plain finished_at bound is what lets the index scan start there.
j.finished_at >= coalesce(%(after_finished_at)s::timestamptz, '-infinity')
AND (j.finished_at, j.id) > (coalesce(%(after_finished_at)s::timestamptz, '-infinity'),
                             coalesce(%(after_id)s::uuid, '00000000-0000-0000-0000-000000000000'::uuid))

-- fragment: prune_batch_tail
doomed AS (
    SELECT j.id
    FROM candidates AS c
    JOIN {schema}.job AS j ON j.id = c.id
    WHERE j.finished_at = c.finished_at
      AND NOT EXISTS (SELECT FROM {schema}.job AS dead_letter_copy
                      WHERE dead_letter_copy.source_job_id = j.id)
      AND NOT (j.notify_finished
               AND j.finished_at > now() - make_interval(secs => %(waited_grace_seconds)s))
      -- a dependency whose dependents still wait: they read its output when they run
      AND NOT (j.has_dependents
               AND EXISTS (SELECT FROM {schema}.job AS dependent
                           WHERE dependent.depends_on @> ARRAY[j.id]
                             AND dependent.status = 'waiting'))
    ORDER BY j.id
    FOR UPDATE OF j SKIP LOCKED
),
deleted AS (
    DELETE FROM {schema}.job AS j USING doomed WHERE j.id = doomed.id RETURNING j.id
)
SELECT (SELECT count(*) FROM deleted) AS deleted,
       (SELECT count(*) FROM candidates) AS candidates,
       last.finished_at AS last_finished_at, last.id AS last_id
FROM (SELECT 1) AS one
LEFT JOIN LATERAL (SELECT c.finished_at, c.id FROM candidates AS c
                   ORDER BY c.finished_at DESC, c.id DESC LIMIT 1) AS last ON true

-- name: prune_by_queue_ttl
-- Jobs without a ttl of their own, past their queue's (or the default) ttl:
-- a range of job_finished_idx (queue, status, finished_at).
WITH candidates AS (
    SELECT j.id, j.finished_at
    FROM {schema}.job AS j
    WHERE j.queue = %(queue)s AND j.status = %(status)s::{schema}.job_status
      AND j.finished_at IS NOT NULL
      AND j.finished_at <= now() - make_interval(secs => %(ttl)s)
      AND j.retention_ttl_seconds IS NULL
      AND {prune_no_own_outcome_ttl}
      AND {prune_after_last_batch}
    ORDER BY j.finished_at, j.id
    LIMIT %(limit)s
),
{prune_batch_tail};

-- name: prune_by_own_ttl
-- Jobs with retention_ttl_seconds = %(ttl)s, past it: a range of
-- job_retention_ttl_idx (retention_ttl_seconds, finished_at).
WITH candidates AS (
    SELECT j.id, j.finished_at
    FROM {schema}.job AS j
    WHERE j.retention_ttl_seconds = %(ttl)s
      AND j.finished_at IS NOT NULL
      AND j.finished_at <= now() - make_interval(secs => %(ttl)s)
      AND {prune_no_own_outcome_ttl}
      AND {prune_after_last_batch}
    ORDER BY j.finished_at, j.id
    LIMIT %(limit)s
),
{prune_batch_tail};

-- name: prune_by_count
-- Jobs of one queue and status older than its newest %(keep)s: the first
-- row not kept is found by reading job_finished_idx newest first past the
-- kept ones (so a cap costs about that many index entries per batch), and
-- it and everything older goes, oldest first. Newest means latest
-- finished_at, then highest id. A job kept FOREVER by its own retention
-- counts among the newest but is never a candidate.
WITH boundary AS (
    SELECT j.finished_at, j.id
    FROM {schema}.job AS j
    WHERE j.queue = %(queue)s AND j.status = %(status)s::{schema}.job_status
      AND j.finished_at IS NOT NULL
    ORDER BY j.finished_at DESC, j.id DESC
    OFFSET %(keep)s
    LIMIT 1
),
candidates AS (
    SELECT j.id, j.finished_at
    FROM boundary AS b
    JOIN {schema}.job AS j
      ON j.queue = %(queue)s AND j.status = %(status)s::{schema}.job_status
     AND j.finished_at IS NOT NULL
     AND j.finished_at <= b.finished_at
     AND (j.finished_at, j.id) <= (b.finished_at, b.id)
     AND coalesce(CASE WHEN j.status = 'completed' THEN j.retention_completed_ttl_seconds
                       ELSE j.retention_failed_ttl_seconds END,
                  j.retention_ttl_seconds) IS DISTINCT FROM %(forever)s
     AND {prune_after_last_batch}
    ORDER BY j.finished_at, j.id
    LIMIT %(limit)s
),
{prune_batch_tail};

-- name: prune_by_own_completed_ttl
-- Completed jobs with retention_completed_ttl_seconds = %(ttl)s, past it: a
-- range of job_retention_completed_ttl_idx.
WITH candidates AS (
    SELECT j.id, j.finished_at
    FROM {schema}.job AS j
    WHERE j.retention_completed_ttl_seconds = %(ttl)s AND j.status = 'completed'
      AND j.finished_at <= now() - make_interval(secs => %(ttl)s)
      AND {prune_after_last_batch}
    ORDER BY j.finished_at, j.id
    LIMIT %(limit)s
),
{prune_batch_tail};

-- name: prune_by_own_failed_ttl
-- Failed, cancelled and expired jobs with retention_failed_ttl_seconds =
-- %(ttl)s, past it: a range of job_retention_failed_ttl_idx.
WITH candidates AS (
    SELECT j.id, j.finished_at
    FROM {schema}.job AS j
    WHERE j.retention_failed_ttl_seconds = %(ttl)s
      AND j.status IN ('failed', 'cancelled', 'expired')
      AND j.finished_at <= now() - make_interval(secs => %(ttl)s)
      AND {prune_after_last_batch}
    ORDER BY j.finished_at, j.id
    LIMIT %(limit)s
),
{prune_batch_tail};

-- name: reap_workers
-- Forgets worker instances not seen for ten heartbeats, and never sooner
-- than %(min_seconds)s. A worker heartbeats every lease_seconds / 3 of its
-- shortest-leased queue (queue.lease_seconds, written when it starts), so a
-- worker with hour-long leases is not mistaken for a dead one. Only the
-- worker table is touched: a dead worker's jobs are the rescuer's, by lease.
WITH dead AS (
    SELECT w.id
    FROM {schema}.worker AS w
    WHERE w.last_seen_at < now() - make_interval(secs => greatest(
        %(min_seconds)s::double precision,
        10 * coalesce((SELECT min(q.lease_seconds) FROM {schema}.queue AS q
                       WHERE q.name = ANY (w.queues)),
                      %(default_lease_seconds)s) / 3.0))
    ORDER BY w.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {schema}.worker AS w
USING dead
WHERE w.id = dead.id
RETURNING w.id;

-- name: prune_throttle_windows
-- Throttle windows that have ended (SPEC §8): a key's next add starts a new
-- window whether or not the old row is there, so a row past its end only
-- takes space (keys never used again would keep theirs forever). Oldest
-- first from throttle_window_ends_idx; SKIP LOCKED passes over a row an add
-- is renewing right now, and the DELETE re-checks the locked row, so a
-- window renewed meanwhile is kept.
WITH ended AS (
    SELECT t.queue, t.key
    FROM {schema}.throttle_window AS t
    WHERE t.window_ends_at <= now()
    ORDER BY t.window_ends_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {schema}.throttle_window AS t
USING ended
WHERE t.queue = ended.queue AND t.key = ended.key AND t.window_ends_at <= now()
RETURNING t.key;
