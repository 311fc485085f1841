-- Producing: adding one-off jobs and recurring schedules.
-- {schema} is the quoted schema identifier; every value is a bound parameter.

-- Adding jobs is four statements built from the fragments below: a batch
-- sends each column as one typed array, a single keyed job as scalars (no
-- set-returning functions to run); and a job with an idempotency or
-- singleton key needs ON CONFLICT, which the common keyless job does
-- without. The commonest add of all, one keyless job to a queue that exists
-- and takes adds, is a plain INSERT … SELECT first (add_job_to_open_queue),
-- and add_unkeyed_jobs, for a batch of one, only when that inserts nothing: a
-- queue's first add or one refused by a pause, too rare for a scalar variant
-- of their own to pay for its statement. Each of these variants stays only
-- while bench/add_variants.py measures it cheaper than what would run without
-- it (docs/performance.md).
--
-- An entry's retry, expiry and timeout fall back to the queue's defaults,
-- then to the built-in ones, and the job stores the resolved values, so later
-- changes to a queue's defaults do not rewrite jobs already queued. Retention
-- is the exception: it stays NULL unless the job sets it, and is resolved
-- when pruning. A queue paused with mode 'all' takes nothing and reports it
-- in a 'paused' row. The queue's row is created on first use.

-- name: add_jobs
WITH {create_queue_on_first_use}, {queue_defaults}, {entries_from_arrays},
{insert_entries}
{keyed_insert_end}

-- name: add_job
WITH {create_queue_on_first_use}, {queue_defaults}, {entry_from_scalars},
{insert_entries}
{keyed_insert_end}

-- name: add_unkeyed_jobs
WITH {create_queue_on_first_use}, {queue_defaults}, {entries_from_arrays},
{insert_entries}
{unkeyed_insert_end}

-- name: add_job_to_open_queue
-- One keyless job, as add_unkeyed_jobs adds it, but only to a queue whose row
-- exists and that is not paused for adds: then it is one INSERT … SELECT with
-- no CTE, which spares the server add_unkeyed_jobs's five (their scans, the
-- queue INSERT's set-up). It inserts nothing otherwise, and the caller runs
-- add_unkeyed_jobs, which creates the queue's row or reports the pause.
{job_insert}
FROM ({scalar_entry}) AS e
{into_open_queue}

-- fragment: into_open_queue
JOIN {schema}.queue AS d ON d.name = %(queue)s AND d.paused IS DISTINCT FROM 'all'
RETURNING j.start_after, j.created_at

-- fragment: queue_defaults
defaults AS (
    SELECT * FROM {schema}.queue WHERE name = %(queue)s
)

-- fragment: entries_from_arrays
-- One array per column, in entry order; an option no entry sets comes as an
-- empty array.
entries AS (
    -- ROWS FROM zips the columns by position, padding short ones with NULLs.
    -- The data comes as one JSON array: one jsonb parse for the batch, and
    -- a JSON null payload stays a jsonb null (the column is NOT NULL).
    SELECT * FROM ROWS FROM (
        unnest(%(id)s::uuid[]), jsonb_array_elements(%(data)s::jsonb),
        unnest(%(priority)s::integer[]), unnest(%(start_after_seconds)s::double precision[]),
        unnest(%(max_attempts)s::integer[]), unnest(%(retry_delay_seconds)s::integer[]),
        unnest(%(backoff_strategy)s::text[]), unnest(%(backoff_factor)s::double precision[]),
        unnest(%(backoff_max_delay_seconds)s::integer[]), unnest(%(backoff_jitter)s::boolean[]),
        unnest(%(expire_in_seconds)s::integer[]), unnest(%(retention_ttl_seconds)s::integer[]),
        unnest(%(timeout_seconds)s::integer[]),
        unnest(%(preferred_instance_key_pattern)s::text[]),
        unnest(%(idempotency_key)s::text[]), unnest(%(singleton_key)s::text[]),
        unnest(%(group_id)s::text[]), unnest(%(attrs)s::jsonb[]),
        unnest(%(retention_completed_ttl_seconds)s::integer[]),
        unnest(%(retention_failed_ttl_seconds)s::integer[]),
        unnest(%(partition_key)s::text[]), unnest(%(debounce_key)s::text[])
    ) WITH ORDINALITY AS e (
        id, payload, priority, start_after_seconds, max_attempts, retry_delay_seconds,
        backoff_strategy, backoff_factor, backoff_max_delay_seconds, backoff_jitter,
        expire_in_seconds, retention_ttl_seconds, timeout_seconds,
        preferred_instance_key_pattern, idempotency_key, singleton_key, group_id, attrs,
        retention_completed_ttl_seconds, retention_failed_ttl_seconds,
        partition_key, debounce_key, ord)
)

-- fragment: entry_from_scalars
entries AS (
    {scalar_entry}
)

-- fragment: scalar_entry
-- The same columns as entries_from_arrays, for one job.
    SELECT %(id)s::uuid AS id, %(data)s::jsonb AS payload, %(priority)s::integer AS priority,
           %(start_after_seconds)s::double precision AS start_after_seconds,
           %(max_attempts)s::integer AS max_attempts,
           %(retry_delay_seconds)s::integer AS retry_delay_seconds,
           %(backoff_strategy)s::text AS backoff_strategy,
           %(backoff_factor)s::double precision AS backoff_factor,
           %(backoff_max_delay_seconds)s::integer AS backoff_max_delay_seconds,
           %(backoff_jitter)s::boolean AS backoff_jitter,
           %(expire_in_seconds)s::integer AS expire_in_seconds,
           %(retention_ttl_seconds)s::integer AS retention_ttl_seconds,
           %(timeout_seconds)s::integer AS timeout_seconds,
           %(preferred_instance_key_pattern)s::text AS preferred_instance_key_pattern,
           %(idempotency_key)s::text AS idempotency_key,
           %(singleton_key)s::text AS singleton_key, %(group_id)s::text AS group_id,
           %(attrs)s::jsonb AS attrs,
           %(retention_completed_ttl_seconds)s::integer AS retention_completed_ttl_seconds,
           %(retention_failed_ttl_seconds)s::integer AS retention_failed_ttl_seconds,
           %(partition_key)s::text AS partition_key,
           %(debounce_key)s::text AS debounce_key, 1::bigint AS ord

-- fragment: insert_entries
-- The INSERT of the entries, up to its conflict handling.
inserted AS (
    {job_insert}
    FROM entries AS e
    LEFT JOIN defaults AS d ON true
    WHERE d.paused IS DISTINCT FROM 'all'

-- fragment: job_insert
-- The INSERT of entries (alias e) with their queue's defaults (alias d), up
-- to its FROM.
    INSERT INTO {schema}.job AS j (
        id, queue, data, {entry_job_columns},
        idempotency_key, singleton_key, debounce_key)
    SELECT
        e.id, %(queue)s, e.payload, {entry_job_values},
        e.idempotency_key, e.singleton_key, e.debounce_key

-- fragment: entry_job_columns
-- The job columns an entry (alias e) and its queue's defaults (alias d) give
-- every add, in the order of entry_job_values: job_insert's and
-- graph_insert's.
        priority, start_after,
        max_attempts, retry_delay_seconds, backoff_strategy, backoff_factor,
        backoff_max_delay_seconds, backoff_jitter,
        expire_in_seconds, expire_at, retention_ttl_seconds, timeout_seconds,
        preferred_instance_key_pattern, group_id, attrs,
        retention_completed_ttl_seconds, retention_failed_ttl_seconds, partition_key

-- fragment: entry_job_values
        coalesce(e.priority, 0),
        now() + make_interval(secs => coalesce(e.start_after_seconds, 0)),
        {resolved_retry_policy},
        coalesce(e.expire_in_seconds, d.expire_in_seconds),
        -- expiry bounds the wait from eligibility, so a delayed job cannot
        -- expire before it could ever start
        -- (summed as double precision: each may be up to 2^31 - 1, and an
        -- integer overflow here would abort a caller's transaction)
        now() + make_interval(secs => coalesce(e.start_after_seconds, 0)::double precision
                                      + coalesce(e.expire_in_seconds, d.expire_in_seconds)),
        e.retention_ttl_seconds,
        coalesce(e.timeout_seconds, d.timeout_seconds),
        e.preferred_instance_key_pattern, e.group_id,
        -- the add span's trace context (portqueue.metrics.tracing), when tracing
        coalesce(e.attrs, '{{}}'::jsonb),
        e.retention_completed_ttl_seconds, e.retention_failed_ttl_seconds, e.partition_key

-- fragment: keyed_insert_end
-- A duplicate idempotency or singleton key is skipped by ON CONFLICT DO
-- NOTHING rather than raised: a unique violation would abort the caller's
-- transaction. The caller looks up the winners of skipped entries afterwards
-- (find_conflicts).
    -- Rows are inserted in key order, not entry order: a duplicate key waits
    -- for the transaction that inserted it, so two batches naming the same
    -- keys in different orders would each wait for the other (deadlock, one
    -- of them aborted). Results are matched back to entries by id.
    ORDER BY e.idempotency_key, e.singleton_key, e.ord
    ON CONFLICT DO NOTHING
    RETURNING j.id, j.status, j.start_after, j.created_at
)
-- id as text: the entry's own id (UUIDv7's canonical text) matches it as is.
SELECT 'added' AS outcome, id::text AS id, status::text AS status, start_after, created_at
FROM inserted
UNION ALL
SELECT 'paused', NULL::text, NULL::text, NULL::timestamptz, NULL::timestamptz
FROM defaults WHERE paused = 'all'

-- fragment: unkeyed_insert_end
-- No entry has a key: nothing can conflict but a UUIDv7 collision (74 random
-- bits), which should fail loudly anyway. So the insert skips ON CONFLICT,
-- whose speculative insertion probes every unique index first and writes an
-- extra WAL record per row, and the sort
-- that only orders keys. Every entry is inserted pending, at now() plus its
-- delay, so one row says so rather than a row per job: the caller checks the
-- count and works out each start_after from now(), and each created_at (the
-- column's default, now()) as now() itself. The row also says whether
-- the queue refused the jobs, being paused for adds.
    RETURNING j.id
)
SELECT count(*) AS added, now() AS now,
       coalesce((SELECT paused = 'all' FROM defaults), false) AS paused
FROM inserted

-- name: find_conflicts
-- The rows that won against skipped entries: an idempotency key holds for as
-- long as its job is retained; a singleton key only while pending or active.
SELECT id, status::text AS status, start_after, created_at, idempotency_key, singleton_key
FROM {schema}.job
WHERE queue = %(queue)s
  AND (idempotency_key = ANY(%(idempotency_keys)s::text[])
       OR (singleton_key = ANY(%(singleton_keys)s::text[])
           AND status IN ('pending', 'active')));

-- name: now
SELECT now() AS now;

-- name: add_schedule
-- A recurring add stores a schedule, not a job: the scheduler spawns one job
-- per tick from it. Dedup by idempotency key is against schedules only.
WITH {create_queue_on_first_use},
defaults AS (
    SELECT paused FROM {schema}.queue WHERE name = %(queue)s
),
inserted AS (
    INSERT INTO {schema}.schedule AS s (
        id, queue, cron, tz, every_seconds, next_run_at, data, job_options, idempotency_key,
        misfire_grace_seconds)
    SELECT %(id)s, %(queue)s, %(cron)s, %(tz)s, %(every_seconds)s, %(next_run_at)s,
           %(data)s::jsonb, %(job_options)s::jsonb, %(idempotency_key)s,
           %(misfire_grace_seconds)s
    WHERE NOT EXISTS (SELECT FROM defaults WHERE paused = 'all')
    ON CONFLICT DO NOTHING
    RETURNING s.id, s.next_run_at
)
SELECT 'added' AS outcome, id, next_run_at FROM inserted
UNION ALL
SELECT 'paused', NULL::uuid, NULL::timestamptz FROM defaults WHERE paused = 'all';

-- name: declare_schedule
-- A named recurring add (schedule key): the schedule is the code's
-- declaration, so adding it again, at every deploy, updates the one row the
-- name holds (the unique index schedule_idempotency_key_uq) instead of adding
-- a second schedule or keeping a stale one. next_run_at moves only when the
-- timing changed: a redeploy must neither skip nor postpone the next tick.
-- The returned id is the existing row's when there was one, which is how the
-- caller tells an update from an insert.
WITH {create_queue_on_first_use},
defaults AS (
    SELECT paused FROM {schema}.queue WHERE name = %(queue)s
),
declared AS (
    INSERT INTO {schema}.schedule AS s (
        id, queue, cron, tz, every_seconds, next_run_at, data, job_options, idempotency_key,
        misfire_grace_seconds)
    SELECT %(id)s, %(queue)s, %(cron)s, %(tz)s, %(every_seconds)s, %(next_run_at)s,
           %(data)s::jsonb, %(job_options)s::jsonb, %(idempotency_key)s,
           %(misfire_grace_seconds)s
    WHERE NOT EXISTS (SELECT FROM defaults WHERE paused = 'all')
    ON CONFLICT (queue, idempotency_key) WHERE idempotency_key IS NOT NULL DO UPDATE SET
        cron = excluded.cron,
        tz = excluded.tz,
        every_seconds = excluded.every_seconds,
        next_run_at = CASE
            WHEN (s.cron, s.tz, s.every_seconds)
                 IS NOT DISTINCT FROM (excluded.cron, excluded.tz, excluded.every_seconds)
            THEN s.next_run_at ELSE excluded.next_run_at END,
        data = excluded.data,
        job_options = excluded.job_options,
        misfire_grace_seconds = excluded.misfire_grace_seconds,
        updated_at = now()
    RETURNING s.id, s.next_run_at
)
SELECT 'added' AS outcome, id, next_run_at FROM declared
UNION ALL
SELECT 'paused', NULL::uuid, NULL::timestamptz FROM defaults WHERE paused = 'all';

-- name: find_schedule_by_key
SELECT id, next_run_at
FROM {schema}.schedule
WHERE queue = %(queue)s AND idempotency_key = %(idempotency_key)s;

-- fragment: create_queue_on_first_use
-- The CTE that creates %(queue)s's row on its first add; the NOT EXISTS keeps
-- that a plain read on every later add.
new_queue AS (
    INSERT INTO {schema}.queue (name)
    SELECT %(queue)s
    WHERE NOT EXISTS (SELECT FROM {schema}.queue WHERE name = %(queue)s)
    ON CONFLICT DO NOTHING
)

-- fragment: resolved_retry_policy
-- The retry columns of a job being added, from its own options (alias e),
-- else its queue's defaults (alias d), else the built-in ones. A job's retry
-- policy is taken whole or not at all: a job that sets max_attempts does not
-- inherit the queue's backoff cap. Shared by add_jobs and spawn_scheduled_jobs.
coalesce(e.max_attempts, d.max_attempts, 1),
coalesce(e.retry_delay_seconds, d.retry_delay_seconds, 0),
coalesce(e.backoff_strategy, d.backoff_strategy, 'fixed'),
coalesce(e.backoff_factor, d.backoff_factor, 2),
CASE WHEN e.max_attempts IS NOT NULL THEN e.backoff_max_delay_seconds
     ELSE d.backoff_max_delay_seconds END,
coalesce(e.backoff_jitter, d.backoff_jitter, false)

-- name: begin_pattern_check
-- A preferred_instance_key_pattern is accepted when PostgreSQL compiles and
-- evaluates it within a deadline (portqueue.operations.check_patterns). The
-- check runs in a savepoint that is always rolled back: the deadline set in
-- it ends with it, and a refused pattern's error never aborts a caller's
-- transaction. Nothing is written inside it.
SAVEPOINT portqueue_pattern_check;

-- name: pattern_check_deadline
SELECT set_config('statement_timeout', %(milliseconds)s, true);

-- name: check_pattern
-- Compiles the pattern (or takes it from the session's cache) and matches it
-- once, as a claim would. Also run by workers to judge a pattern for their
-- own key (portqueue.worker.patterns).
SELECT %(instance_key)s::text ~ %(pattern)s::text AS matches;

-- name: end_pattern_check
ROLLBACK TO SAVEPOINT portqueue_pattern_check;

-- name: release_pattern_check
RELEASE SAVEPOINT portqueue_pattern_check;

-- name: add_throttled_job
-- One job with a throttle key (SPEC §8): the first add of a window takes the
-- key's row in throttle_window and inserts its job, in one statement, so the
-- job exists exactly when the window names it. A later add in the window
-- inserts nothing (ON CONFLICT's WHERE keeps the row, and its lock makes a
-- concurrent add wait for the first one's commit, so one job is created
-- however many race); the caller then reads the window's job
-- (find_throttled) in a statement of its own, which sees that commit.
WITH {create_queue_on_first_use}, {queue_defaults}, {entry_from_scalars},
throttled AS (
    INSERT INTO {schema}.throttle_window AS t (queue, key, job_id, window_ends_at)
    SELECT %(queue)s, %(throttle_key)s, %(id)s::uuid,
           now() + make_interval(secs => %(throttle_seconds)s)
    WHERE NOT EXISTS (SELECT FROM defaults WHERE paused = 'all')
    ON CONFLICT (queue, key) DO UPDATE
    SET job_id = excluded.job_id, window_ends_at = excluded.window_ends_at
    WHERE t.window_ends_at <= now()
    RETURNING t.job_id
),
inserted AS (
    {job_insert}
    FROM entries AS e
    LEFT JOIN defaults AS d ON true
    WHERE d.paused IS DISTINCT FROM 'all' AND e.id IN (SELECT job_id FROM throttled)
    RETURNING j.id, j.status, j.start_after, j.created_at
)
{one_added_or_paused};

-- name: find_throttled
-- The job a throttle key's open window let through; status NULL if it was
-- removed since.
SELECT t.job_id::text AS id, j.status::text AS status, j.start_after, j.created_at
FROM {schema}.throttle_window AS t
LEFT JOIN {schema}.job AS j ON j.id = t.job_id
WHERE t.queue = %(queue)s AND t.key = %(throttle_key)s;

-- name: add_debounced_job
-- One job with a debounce key (SPEC §8): inserted pending at now() plus the
-- debounce delay, or, while a job of the key is still pending (the unique
-- index job_debounce_key_uq), that job takes this add's data and its
-- start_after moves to now() plus the delay, never past its first add plus
-- max_wait_seconds. ON CONFLICT makes it one atomic step: concurrent adds of
-- a key update one row in turn, and a job claimed meanwhile is no longer in
-- the index, so the next add inserts a new one.
WITH {create_queue_on_first_use}, {queue_defaults}, {entry_from_scalars},
inserted AS (
    {job_insert}
    FROM entries AS e
    LEFT JOIN defaults AS d ON true
    WHERE d.paused IS DISTINCT FROM 'all'
    ON CONFLICT (queue, debounce_key) WHERE debounce_key IS NOT NULL AND status = 'pending'
    DO UPDATE SET
        data = excluded.data,
        -- greatest: an add whose transaction began earlier (an earlier now())
        -- but commits later does not bring the start forward again.
        start_after = greatest(j.start_after, least(
            excluded.start_after,
            j.created_at + make_interval(secs => %(debounce_max_wait_seconds)s)))
    RETURNING j.id, j.status, j.start_after, j.created_at
)
{one_added_or_paused};

-- fragment: one_added_or_paused
-- The result of add_throttled_job and add_debounced_job: the row inserted (or
-- updated), or 'paused' for a queue that takes no adds.
SELECT 'added' AS outcome, id::text AS id, status::text AS status, start_after, created_at
FROM inserted
UNION ALL
SELECT 'paused', NULL::text, NULL::text, NULL::timestamptz, NULL::timestamptz
FROM defaults WHERE paused = 'all'

-- Workflows (SPEC §9): jobs that depend on others, flows, fan-out by topic.
-- Dependent jobs take statements of their own, so the adds above stay as
-- they are for every job without dependencies.

-- name: lock_dependencies
-- The existing jobs that jobs about to be added depend on, locked until the
-- add commits: a dependency's completion waits for the add, then finds the
-- new dependents (settle_dependents); or the add waits for the completion,
-- then reads it completed and counts it done. Read before anything is
-- written, so an unknown id is refused with nothing written.
SELECT id::text AS id, status::text AS status
FROM {schema}.job
WHERE id = ANY(%(job_ids)s::uuid[])
ORDER BY id
FOR NO KEY UPDATE;

-- name: add_graph_jobs
-- Jobs of any queues with their dependencies, in one statement: the client
-- decided each entry's status (waiting, pending, or cancelled with a
-- DependencyFailed entry in failure) from the locked dependencies, and which
-- entries others of the batch depend on (has_dependents). A queue paused for
-- adds refuses the whole batch.
WITH {entries_from_arrays},
graph AS (
    SELECT NULL::uuid AS id, g.*
    FROM ROWS FROM (
        unnest(%(queue_names)s::text[]), unnest(%(statuses)s::text[]),
        jsonb_array_elements(%(depends_on)s::jsonb), unnest(%(on_dependency_failure)s::text[]),
        unnest(%(has_dependents)s::boolean[]), unnest(%(has_shared_dependents)s::boolean[]),
        unnest(%(flow_key)s::text[]), unnest(%(failure)s::jsonb[])
    ) WITH ORDINALITY AS g (queue, status, depends_on, on_dependency_failure, has_dependents,
                            has_shared_dependents, flow_key, failure, ord)
),
{graph_paused},
new_queues AS (
    INSERT INTO {schema}.queue (name)
    SELECT DISTINCT g.queue FROM graph AS g
    WHERE NOT EXISTS (SELECT FROM {schema}.queue AS q WHERE q.name = g.queue)
      AND NOT EXISTS (SELECT FROM paused)
    ON CONFLICT DO NOTHING
),
parents AS (
    UPDATE {schema}.job AS p
    SET has_dependents = true,
        has_shared_dependents = p.has_shared_dependents
                                OR p.id = ANY(%(shared_parents)s::uuid[])
    WHERE p.id = ANY(%(parents)s::uuid[])
      -- A dependency not completed is written even when its flags are set
      -- already: a completion waiting for this add's lock then finds a newer
      -- version of the row than its snapshot read, and leaves the release of
      -- this add's dependents to the row trigger (complete_jobs).
      AND (p.status <> 'completed'
           OR NOT (p.has_dependents AND (p.has_shared_dependents
                                         OR NOT p.id = ANY(%(shared_parents)s::uuid[]))))
      AND NOT EXISTS (SELECT FROM paused)
),
{graph_insert};

-- name: subscribe
-- The queue's row is created too, so publish finds every subscriber's
-- defaults (and pause) in it.
WITH new_queue AS (
    INSERT INTO {schema}.queue (name) VALUES (%(queue)s) ON CONFLICT DO NOTHING
),
added AS (
    INSERT INTO {schema}.subscription (topic, queue) VALUES (%(topic)s, %(queue)s)
    ON CONFLICT DO NOTHING
    RETURNING 1
)
SELECT count(*) AS added FROM added;

-- name: unsubscribe
DELETE FROM {schema}.subscription WHERE topic = %(topic)s AND queue = %(queue)s RETURNING 1;

-- name: publish
-- One job for each queue subscribed to the topic, in one statement; none
-- when nobody subscribes. Each copy gets an id of its own here (the client
-- cannot know how many there are).
WITH {entry_from_scalars},
graph AS (
    SELECT gen_random_uuid() AS id, s.queue, 'pending'::text AS status,
           '[]'::jsonb AS depends_on, NULL::text AS on_dependency_failure,
           false AS has_dependents, false AS has_shared_dependents, NULL::text AS flow_key,
           NULL::jsonb AS failure,
           1::bigint AS ord
    FROM {schema}.subscription AS s
    WHERE s.topic = %(topic)s
),
{graph_paused},
{graph_insert};

-- name: flow_jobs
-- Every job of a flow, in insertion order, with its key in the flow.
SELECT id
FROM {schema}.job
WHERE flow_id = %(flow_id)s
ORDER BY seq;

-- fragment: graph_paused
paused AS (
    SELECT q.name FROM {schema}.queue AS q
    WHERE q.name IN (SELECT g.queue FROM graph AS g) AND q.paused = 'all'
)

-- fragment: graph_insert
-- The INSERT of entries (alias e) zipped with their graph columns (alias g)
-- and their queues' defaults (alias d), and its result rows.
inserted AS (
    INSERT INTO {schema}.job AS j (
        id, queue, data, {entry_job_columns},
        status, depends_on, on_dependency_failure, has_dependents, has_shared_dependents,
        flow_id, flow_key, finished_at, errors, error)
    SELECT
        coalesce(g.id, e.id), g.queue, e.payload, {entry_job_values},
        g.status::{schema}.job_status,
        CASE WHEN jsonb_array_length(g.depends_on) > 0
             THEN ARRAY(SELECT jsonb_array_elements_text(g.depends_on)::uuid) END,
        g.on_dependency_failure, g.has_dependents, g.has_shared_dependents, %(flow_id)s::uuid,
        g.flow_key,
        CASE WHEN g.failure IS NOT NULL THEN now() END,
        CASE WHEN g.failure IS NULL THEN '[]'::jsonb
             ELSE jsonb_build_array(g.failure || jsonb_build_object('at', now())) END,
        g.failure ->> 'message'
    FROM entries AS e
    JOIN graph AS g ON g.ord = e.ord
    LEFT JOIN {schema}.queue AS d ON d.name = g.queue
    WHERE NOT EXISTS (SELECT FROM paused)
    ORDER BY e.ord
    RETURNING j.id, j.queue, j.status, j.start_after, j.created_at
)
SELECT 'added' AS outcome, id::text AS id, queue, status::text AS status, start_after,
       created_at
FROM inserted
UNION ALL
SELECT 'paused', NULL::text, name, NULL::text, NULL::timestamptz, NULL::timestamptz
FROM paused
