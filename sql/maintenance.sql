-- Maintenance: small services run by every worker, acting from one at a
-- time (a transaction-scoped advisory lock), in bounded batches.

-- name: try_maintenance_lock
SELECT pg_try_advisory_xact_lock(%(key)s) AS acquired;

-- name: rescue_lapsed
-- Jobs whose lease lapsed (worker killed, host lost, stalled) go back to
-- pending, or to failed when their attempts are spent. One guarded UPDATE,
-- no read-then-write: rows are locked in id order (SKIP LOCKED passes over a
-- row being completed right now) and the WHERE re-checks status and lease
-- on the locked row, so a job completed or heartbeated meanwhile is left
-- untouched and each lapsed attempt is rescued exactly once.
WITH lapsed AS (
    SELECT id
    FROM {schema}.job
    WHERE status = 'active' AND lease_expires_at < now()
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
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
    lease_expires_at = NULL,
    worker_id = NULL
FROM lapsed
WHERE j.id = lapsed.id AND j.status = 'active' AND j.lease_expires_at < now()
RETURNING j.id, j.status::text AS status;

-- name: set_statement_timeout
-- For this transaction only: a maintenance batch never holds locks for long.
SELECT set_config('statement_timeout', %(milliseconds)s, true);
