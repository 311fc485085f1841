-- Reading: snapshots, pages and stats. Column lists are explicit: a prepared
-- statement over SELECT * breaks ("cached plan must not change result type")
-- when a migration adds a column under running clients.

-- name: jobs_by_id
-- JSON columns come back as text, decoded by portqueue: drivers differ in
-- whether they decode jsonb (Django's does not), and a JSON string payload
-- must not be mistaken for undecoded text.
SELECT id, queue, status::text AS status, data::text AS data, priority, attempt, max_attempts,
       retry_delay_seconds, backoff_strategy, backoff_factor, backoff_max_delay_seconds,
       backoff_jitter, timeout_seconds, group_id, idempotency_key, singleton_key,
       preferred_instance_key_pattern, schedule_id, scheduled_for, source_job_id,
       created_at, start_after, started_at, finished_at, expire_at,
       retention_ttl_seconds, output::text AS output, errors::text AS errors, progress,
       attrs::text AS attrs, cancel_requested_at,
       retention_completed_ttl_seconds, retention_failed_ttl_seconds,
       depends_on::text[] AS depends_on, flow_id, flow_key
FROM {schema}.job
WHERE id = ANY(%(job_ids)s::uuid[])
ORDER BY seq DESC;

-- name: job_page
-- Newest first. statuses and group_id are optional filters (NULL: any).
SELECT id
FROM {schema}.job
WHERE queue = %(queue)s
  AND (%(statuses)s::text[] IS NULL OR status::text = ANY(%(statuses)s::text[]))
  AND (%(group_id)s::text IS NULL OR group_id = %(group_id)s::text)
ORDER BY seq DESC
LIMIT %(limit)s OFFSET %(offset)s;

-- name: job_count
SELECT count(*) AS total
FROM {schema}.job
WHERE queue = %(queue)s
  AND (%(statuses)s::text[] IS NULL OR status::text = ANY(%(statuses)s::text[]))
  AND (%(group_id)s::text IS NULL OR group_id = %(group_id)s::text);

-- name: queue_stats
-- oldest_pending_seconds: how long the oldest ready job has waited since it
-- became eligible (delayed jobs not yet due are not waiting).
SELECT
    (SELECT paused FROM {schema}.queue WHERE name = %(queue)s) AS paused,
    (SELECT coalesce(jsonb_object_agg(status, n), '{{}}'::jsonb)
     FROM (SELECT status, count(*) AS n FROM {schema}.job
           WHERE queue = %(queue)s GROUP BY status) AS c) AS counts,
    (SELECT extract(epoch FROM now() - min(start_after))::double precision
     FROM {schema}.job
     WHERE queue = %(queue)s AND status = 'pending' AND start_after <= now())
        AS oldest_pending_seconds;

-- name: queue_page
SELECT {queue_info_columns}
FROM {schema}.queue AS q
ORDER BY q.created_at DESC, q.name
LIMIT %(limit)s OFFSET %(offset)s;

-- name: queue_by_name
SELECT {queue_info_columns}
FROM {schema}.queue AS q
WHERE q.name = %(queue)s;

-- name: queue_count
SELECT count(*) AS total FROM {schema}.queue;

-- name: schedule_page
-- last_job_id is not a foreign key: retention prunes spawned jobs and
-- remove_job deletes them, and the schedule row is not written then. It is
-- reported only while that job still exists, so nothing links to a job that
-- is gone (a primary-key look-up per schedule on the page).
SELECT s.id, s.queue, s.cron, s.tz, s.every_seconds, s.next_run_at, s.last_run_at,
       CASE WHEN EXISTS (SELECT FROM {schema}.job AS j WHERE j.id = s.last_job_id)
            THEN s.last_job_id END AS last_job_id,
       s.enabled, s.data::text AS data, s.idempotency_key, s.created_at,
       s.misfire_grace_seconds
FROM {schema}.schedule AS s
WHERE (%(queue)s::text IS NULL OR s.queue = %(queue)s::text)
  AND (%(enabled)s::boolean IS NULL OR s.enabled = %(enabled)s::boolean)
ORDER BY s.created_at DESC, s.id
LIMIT %(limit)s OFFSET %(offset)s;

-- name: schedule_count
SELECT count(*) AS total
FROM {schema}.schedule AS s
WHERE (%(queue)s::text IS NULL OR s.queue = %(queue)s::text)
  AND (%(enabled)s::boolean IS NULL OR s.enabled = %(enabled)s::boolean);

-- fragment: queue_limit_columns
-- A queue's flow-control limits (SPEC §8), read into QueueInfo.
q.global_concurrency, q.partition_concurrency, q.rate_limit, q.rate_limit_period_seconds,
q.rate_limit_per_partition
