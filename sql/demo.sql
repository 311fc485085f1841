-- `portqueue demo`: its throwaway schema, and the two numbers of its summary,
-- computed from the job rows (the database clock) rather than from timers.

-- name: demo_schema_comment
-- No row: the schema does not exist. The demo drops only a schema it marked.
SELECT obj_description(oid, 'pg_namespace') AS comment
FROM pg_namespace
WHERE nspname = %(schema)s;

-- name: demo_drop_schema
DROP SCHEMA IF EXISTS {schema} CASCADE;

-- name: demo_mark_schema
-- The mark demo_schema_comment looks for; keep the text in step with demo.py.
COMMENT ON SCHEMA {schema} IS 'portqueue demo: dropped and recreated by every run of portqueue demo';

-- name: demo_lock
-- Session-level: held for the whole run, so a second demo on the same schema
-- fails fast instead of dropping the schema under the first one.
SELECT pg_try_advisory_lock(%(key)s) AS acquired;

-- name: demo_throughput
-- From the first add to the last finish of the jobs added in one statement.
SELECT count(*) AS jobs,
       extract(epoch FROM max(finished_at) - min(created_at))::double precision AS seconds
FROM {schema}.job
WHERE id = ANY(%(job_ids)s::uuid[]) AND status = 'completed';

-- name: demo_latency
-- Commit-to-start: from start_after (now() of the adding transaction, so the
-- insert and its commit are counted too) to started_at (now() of the claim).
-- First attempts only: a retry's start_after is its backoff, not a commit.
SELECT count(*) AS jobs,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - start_after))
           AS p50_seconds,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - start_after))
           AS p99_seconds
FROM {schema}.job
WHERE id = ANY(%(job_ids)s::uuid[]) AND attempt = 1 AND started_at IS NOT NULL;
