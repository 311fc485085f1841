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

