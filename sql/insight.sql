-- Operator reads across queues (the dashboard's workers, failures and
-- activity pages, `portqueue workers` and `portqueue failures`).

-- name: worker_list
-- Running jobs are counted from the job table (worker_id on active rows), so
-- the figure is what the rescuer would judge, not what the worker believes.
SELECT w.id, w.instance_key, w.hostname, w.pid, w.queues, w.concurrency,
       w.started_at, w.last_seen_at,
       extract(epoch FROM now() - w.last_seen_at)::double precision AS seen_seconds_ago,
       coalesce(a.running, 0) AS running
FROM {schema}.worker AS w
LEFT JOIN (SELECT worker_id, count(*) AS running
           FROM {schema}.job
           WHERE status = 'active' AND worker_id IS NOT NULL
           GROUP BY worker_id) AS a ON a.worker_id = w.id
ORDER BY w.hostname, w.pid, w.started_at, w.id
LIMIT %(limit)s OFFSET %(offset)s;

-- name: worker_count
SELECT count(*) AS total FROM {schema}.worker;

-- name: failure_page
-- Newest failure first, every queue unless one is named. error is the
-- column (the newest error's message), read here so the list needs no
-- decoding of the errors array.
SELECT id, error
FROM {schema}.job
WHERE status = 'failed'
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
ORDER BY finished_at DESC, seq DESC
LIMIT %(limit)s OFFSET %(offset)s;

-- name: failure_count
SELECT count(*) AS total
FROM {schema}.job
WHERE status = 'failed'
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text);
-- name: matching_job_ids
-- The ids a bulk action works through: the same filters as job_page, or
-- any queue when queue is NULL; oldest first, at most %(limit)s.
SELECT id
FROM {schema}.job
WHERE (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND status::text = ANY(%(statuses)s::text[])
  AND (%(group_id)s::text IS NULL OR group_id = %(group_id)s::text)
ORDER BY seq
LIMIT %(limit)s;

-- name: matching_job_count
SELECT count(*) AS total
FROM {schema}.job
WHERE (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND status::text = ANY(%(statuses)s::text[])
  AND (%(group_id)s::text IS NULL OR group_id = %(group_id)s::text);

-- name: activity
-- Per bucket of %(bucket_seconds)s seconds over the last %(buckets)s buckets
-- (the newest one still filling): jobs completed and failed, and the start
-- latency (started_at - start_after: from when the attempt became eligible)
-- of the attempts that started in it. started_at holds a job's latest
-- attempt only, so an earlier attempt's start is not counted. No index
-- leads with finished_at or started_at, so both sides read the job rows
-- (docs/performance.md has the cost); the dashboard runs it on each reload.
WITH bounds AS (
    SELECT to_timestamp((floor(extract(epoch FROM now()) / %(bucket_seconds)s) + 1
                         - %(buckets)s) * %(bucket_seconds)s) AS since
),
settled AS (
    SELECT floor(extract(epoch FROM j.finished_at - b.since) / %(bucket_seconds)s)::int AS i,
           count(*) FILTER (WHERE j.status = 'completed') AS completed,
           count(*) FILTER (WHERE j.status = 'failed') AS failed
    FROM {schema}.job AS j, bounds AS b
    WHERE j.finished_at >= b.since AND j.status IN ('completed', 'failed')
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
    GROUP BY 1
),
started AS (
    SELECT floor(extract(epoch FROM j.started_at - b.since) / %(bucket_seconds)s)::int AS i,
           avg(extract(epoch FROM j.started_at - j.start_after))::double precision
               AS latency_mean,
           percentile_cont(0.95) WITHIN GROUP (
               ORDER BY extract(epoch FROM j.started_at - j.start_after))::double precision
               AS latency_p95
    FROM {schema}.job AS j, bounds AS b
    WHERE j.started_at >= b.since
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
    GROUP BY 1
)
SELECT s.i, b.since + make_interval(secs => s.i * %(bucket_seconds)s) AS starts_at,
       coalesce(d.completed, 0) AS completed, coalesce(d.failed, 0) AS failed,
       t.latency_mean, t.latency_p95
FROM bounds AS b
CROSS JOIN generate_series(0, %(buckets)s - 1) AS s(i)
LEFT JOIN settled AS d ON d.i = s.i
LEFT JOIN started AS t ON t.i = s.i
ORDER BY s.i;
