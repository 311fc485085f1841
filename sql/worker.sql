-- Consuming: registration, claims, fenced completions and failures, the
-- touch that carries heartbeats, progress and attrs, and release on abort.
-- Every write for an attempt matches (id, lease_token, status = 'active'):
-- zero rows means the lease was lost and the write is refused.

-- name: upsert_queue
-- A worker writes the defaults it declares for its queues when it starts,
-- so producers elsewhere and maintenance see them. An option it does not
-- declare (NULL) keeps the stored value.
INSERT INTO {schema}.queue AS q (
    name, concurrency, max_attempts, retry_delay_seconds, backoff_strategy, backoff_factor,
    backoff_max_delay_seconds, backoff_jitter, expire_in_seconds, retention_ttl_seconds,
    retention_keep_completed, retention_keep_failed, timeout_seconds, lease_seconds,
    dead_letter_queue, retention_completed_ttl_seconds, retention_failed_ttl_seconds)
VALUES (
    %(queue)s, %(concurrency)s, %(max_attempts)s, %(retry_delay_seconds)s,
    %(backoff_strategy)s, %(backoff_factor)s, %(backoff_max_delay_seconds)s,
    %(backoff_jitter)s, %(expire_in_seconds)s, %(retention_ttl_seconds)s,
    %(retention_keep_completed)s, %(retention_keep_failed)s, %(timeout_seconds)s,
    %(lease_seconds)s, %(dead_letter_queue)s, %(retention_completed_ttl_seconds)s,
    %(retention_failed_ttl_seconds)s)
ON CONFLICT (name) DO UPDATE SET
    concurrency = coalesce(excluded.concurrency, q.concurrency),
    max_attempts = coalesce(excluded.max_attempts, q.max_attempts),
    retry_delay_seconds = coalesce(excluded.retry_delay_seconds, q.retry_delay_seconds),
    backoff_strategy = coalesce(excluded.backoff_strategy, q.backoff_strategy),
    backoff_factor = coalesce(excluded.backoff_factor, q.backoff_factor),
    backoff_max_delay_seconds =
        coalesce(excluded.backoff_max_delay_seconds, q.backoff_max_delay_seconds),
    backoff_jitter = coalesce(excluded.backoff_jitter, q.backoff_jitter),
    expire_in_seconds = coalesce(excluded.expire_in_seconds, q.expire_in_seconds),
    retention_ttl_seconds = coalesce(excluded.retention_ttl_seconds, q.retention_ttl_seconds),
    retention_keep_completed =
        coalesce(excluded.retention_keep_completed, q.retention_keep_completed),
    retention_keep_failed = coalesce(excluded.retention_keep_failed, q.retention_keep_failed),
    timeout_seconds = coalesce(excluded.timeout_seconds, q.timeout_seconds),
    lease_seconds = coalesce(excluded.lease_seconds, q.lease_seconds),
    dead_letter_queue = coalesce(excluded.dead_letter_queue, q.dead_letter_queue),
    retention_completed_ttl_seconds =
        coalesce(excluded.retention_completed_ttl_seconds, q.retention_completed_ttl_seconds),
    retention_failed_ttl_seconds =
        coalesce(excluded.retention_failed_ttl_seconds, q.retention_failed_ttl_seconds),
    updated_at = now();

-- name: register_worker
-- At start, and on every heartbeat: a worker the reaper forgot while it was
-- merely slow (a long GC pause, a stalled host) comes back on its next beat.
INSERT INTO {schema}.worker AS w (id, instance_key, hostname, pid, queues, concurrency)
VALUES (%(id)s, %(instance_key)s, %(hostname)s, %(pid)s, %(queues)s, %(concurrency)s)
ON CONFLICT (id) DO UPDATE SET last_seen_at = now();

-- name: unregister_worker
DELETE FROM {schema}.worker WHERE id = %(id)s;

-- name: claim
-- One statement claims up to each queue's free slots: ready jobs in priority,
-- start_after, insertion order, skipping rows other claimers hold (SKIP LOCKED)
-- and queues paused in any mode. The LATERAL keeps one index scan per queue
-- on job_claim_idx (pending jobs with neither a pattern nor a partition key),
-- one on job_claim_keyed_idx (a key, no pattern: split off so that
-- claim_limited finds a per-key queue's jobs without a key without reading
-- its keyed ones), plus one on job_claim_patterned_idx per pattern the worker
-- matches, merged in claim order: the cost follows the number claimed, not
-- the backlog. The attempt is
-- counted here, so a job that kills its worker every time still runs out of
-- attempts. A job found past its expire_at is never started: the same
-- statement marks it expired. lease_token only grows: it is the fencing token
-- every later write for this attempt must match.
--
-- No pattern is evaluated here: a pattern PostgreSQL refuses would fail the
-- whole claim, and one slow to compile would slow every claim. The worker
-- passes the patterns it has judged (portqueue.worker.patterns): those that
-- match its key, and those that do not. Jobs of a pattern it does not match
-- are never read: they are in job_claim_patterned_idx, under their pattern,
-- and the claim reads only the matching patterns' ranges there. The patterns
-- present and not judged yet are found by one probe per distinct pattern of
-- the queue's pending jobs (a loose index scan, skipped by one probe when no
-- pending job anywhere names a pattern), and come back as 'unjudged' rows
-- carrying the pattern (in data_json), taking no slot; the worker judges them
-- before its next claim.
WITH RECURSIVE wanted AS (
    {wanted_queues(
        queues => %(queues)s::text[], slots => %(slots)s::integer[],
        lease_seconds => %(lease_seconds)s::integer[])}
),
{plain_range},
-- Each queue's ready jobs with a partition key and no pattern (a queue
-- without a limit ignores the key): one range scan per queue, skipped by one
-- probe of the index's first entry when no pending job anywhere has a key,
-- so a worker of many queues pays one probe, not one per queue. (ORDER BY
-- pins the probe to job_claim_keyed_idx: an EXISTS may be planned as a
-- scan of the table.)
keyed AS (
    {wanted_range(
        range => j.preferred_instance_key_pattern IS NULL AND j.partition_key IS NOT NULL)}
    WHERE (SELECT j.queue FROM {schema}.job AS j
           WHERE j.status = 'pending' AND j.preferred_instance_key_pattern IS NULL
             AND j.partition_key IS NOT NULL
           ORDER BY j.queue LIMIT 1) IS NOT NULL
),
-- Each queue's ready jobs of each pattern the worker matches.
matched AS (
    SELECT c.*, wanted.queue, wanted.slots
    FROM wanted
    CROSS JOIN unnest(%(matching_patterns)s::text[]) AS p (pattern)
    CROSS JOIN LATERAL (
        {ready_range(
            queue => wanted.queue, clock => now(), limit => wanted.slots,
            lease_seconds => wanted.lease_seconds,
            range => j.preferred_instance_key_pattern = p.pattern)}
    ) AS c
),
-- One range alone when only it has ready jobs (no ranking: the plain jobs,
-- or the keyed ones); else all, the first slots of each queue in claim order
-- (the rows locked past them are not claimed, and free at the claim's commit).
candidates AS (
    SELECT p.id, p.expired, p.pattern, p.queue, p.lease_seconds
    FROM plain AS p
    WHERE NOT EXISTS (SELECT FROM matched) AND NOT EXISTS (SELECT FROM keyed)
    UNION ALL
    SELECT k.id, k.expired, k.pattern, k.queue, k.lease_seconds
    FROM keyed AS k
    WHERE NOT EXISTS (SELECT FROM matched) AND NOT EXISTS (SELECT FROM plain)
    UNION ALL
    SELECT r.id, r.expired, r.pattern, r.queue, r.lease_seconds
    FROM (
        SELECT u.*, row_number() OVER (PARTITION BY u.queue
                                       ORDER BY u.priority DESC, u.start_after, u.seq) AS rank
        FROM (SELECT * FROM plain UNION ALL SELECT * FROM keyed
              UNION ALL SELECT * FROM matched) AS u
        WHERE EXISTS (SELECT FROM matched)
           OR (EXISTS (SELECT FROM keyed) AND EXISTS (SELECT FROM plain))
    ) AS r
    WHERE r.rank <= r.slots
),
{present_patterns(queues => wanted AS w)},
claimed AS (
    UPDATE {schema}.job AS j
    SET {claim_set}
    FROM candidates AS c
    -- The planner cannot size LIMIT wanted.slots (a column, not a constant) and
    -- guesses a tenth of the backlog, then joins back to job with a hash or
    -- merge join over the whole table. Naming the claimed ids as an array pins
    -- the join to primary-key lookups: the claim costs what it claims. The
    -- status names where the rows are, so on a partitioned job table the
    -- UPDATE is planned (and locks) the live partition only (retention.md).
    WHERE j.id = c.id AND j.id = ANY (ARRAY(SELECT c.id FROM candidates AS c))
      AND j.status = 'pending'
    -- The columns of portqueue.worker.state.Claimed, in its order: each row
    -- becomes one as a plain tuple. Text, not uuid or jsonb: the worker passes
    -- ids and data on as they come, and decoding them per row into objects it
    -- does not need is most of what reading a claim costs.
    RETURNING {claimed_columns}
)
SELECT * FROM claimed
UNION ALL
{unjudged_markers}
UNION ALL
{limited_markers(queues => %(queues)s::text[], slots => %(slots)s::integer[])};

-- name: claim_plain
-- claim, while no pending job anywhere names a pattern or has a partition key
-- (the common case): the plain ranges alone, without the keyed and matched
-- ranges, their merge and the pattern probes. A lighter statement: a one-job
-- claim took 0.41 ms against claim's 0.53-0.62, the commit's flush left
-- out (docs/performance.md, "latency (session 2026-12-03)"), most of it
-- what the executor sets up for claim's larger plan. It checks the case
-- itself, in its own snapshot, by the first entries of job_claim_patterned_idx
-- and job_claim_keyed_idx (ORDER BY pins each probe to its index, see keyed
-- in claim): when either holds a job it claims nothing and says so, one
-- 'mixed' row, and the worker claims with claim at once (worker/fetcher.py).
-- So it claims what claim would: with no such job pending, claim's keyed and
-- matched ranges are empty and no pattern is left to judge.
WITH mixed AS MATERIALIZED (
    SELECT (SELECT j.queue FROM {schema}.job AS j
            WHERE j.status = 'pending' AND j.preferred_instance_key_pattern IS NOT NULL
            ORDER BY j.queue LIMIT 1) IS NOT NULL
           OR (SELECT j.queue FROM {schema}.job AS j
               WHERE j.status = 'pending' AND j.preferred_instance_key_pattern IS NULL
                 AND j.partition_key IS NOT NULL
               ORDER BY j.queue LIMIT 1) IS NOT NULL AS found
),
-- The arrays are read through a subquery: a custom plan then sizes them as a
-- generic one does (a parameter array counts ten), so the plan cache keeps the
-- generic plan from the sixth call whatever the backlog. Given as constants, a
-- custom plan knows a worker's one queue, the generic plan's estimate loses
-- against it once the backlog is large, and every claim was planned again:
-- 203 plans for 202 claims, 0.65 ms each, in the bench's drain
-- (docs/performance.md, "latency (session 2026-12-03)").
wanted AS (
    {wanted_queues(
        queues => (SELECT %(queues)s::text[]),
        slots => (SELECT %(slots)s::integer[]),
        lease_seconds => (SELECT %(lease_seconds)s::integer[]))}
      AND NOT (SELECT m.found FROM mixed AS m)
),
{plain_range},
claimed AS (
    UPDATE {schema}.job AS j
    SET {claim_set}
    FROM plain AS c
    -- As in claim: the ids as an array pin the join to primary-key lookups.
    WHERE j.id = c.id AND j.id = ANY (ARRAY(SELECT p.id FROM plain AS p))
      AND j.status = 'pending'
    RETURNING {claimed_columns}
)
SELECT * FROM claimed
UNION ALL
SELECT NULL, NULL, 'mixed', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL
FROM mixed AS m
WHERE m.found
UNION ALL
{limited_markers(
    queues => (SELECT %(queues)s::text[]), slots => (SELECT %(slots)s::integer[]))};

-- fragment: wanted_queues(queues, slots, lease_seconds)
-- The queues a claim (claim, claim_plain) asks for, with their slots and
-- leases (the three arrays, of one length).
SELECT w.queue, w.slots, w.lease_seconds
FROM unnest({queues}, {slots}, {lease_seconds})
     AS w (queue, slots, lease_seconds)
WHERE w.slots > 0
  -- A queue with a limit is claimed by claim_limited only, so a claim in
  -- flight when a limit is set cannot run past it (flow-control.md).
  AND NOT EXISTS (
      SELECT FROM {schema}.queue AS q
      WHERE q.name = w.queue
        AND (q.paused IS NOT NULL OR q.global_concurrency IS NOT NULL
             OR q.partition_concurrency IS NOT NULL OR q.rate_limit IS NOT NULL))

-- fragment: plain_range
-- Each wanted queue's ready jobs with neither a pattern nor a key: one range
-- scan of job_claim_idx (claim, claim_plain).
plain AS (
    {wanted_range(
        range => j.preferred_instance_key_pattern IS NULL AND j.partition_key IS NULL)}
)

-- fragment: wanted_range(range)
-- Each wanted queue's ready jobs in range, with the queue and its slots: one
-- range scan per queue (claim's plain and keyed ranges, claim_plain's plain).
SELECT c.*, wanted.queue, wanted.slots
FROM wanted
CROSS JOIN LATERAL (
    {ready_range(
        queue => wanted.queue, clock => now(), limit => wanted.slots,
        lease_seconds => wanted.lease_seconds, range => {range})}
) AS c

-- fragment: present_patterns(queues)
-- The distinct patterns of the pending jobs of each of queues (a relation
-- aliased w, with a queue column), one probe of job_claim_patterned_idx each
-- (a loose index scan), skipped by one probe when no pending job anywhere
-- names a pattern (claim, claim_limited): the patterns a claim reports
-- unjudged (unjudged_markers).
present (queue, pattern) AS (
    SELECT w.queue, (
        SELECT j.preferred_instance_key_pattern FROM {schema}.job AS j
        WHERE j.queue = w.queue AND j.status = 'pending'
          AND j.preferred_instance_key_pattern IS NOT NULL
        ORDER BY j.preferred_instance_key_pattern LIMIT 1)
    FROM {queues}
    WHERE EXISTS (
        SELECT FROM {schema}.job AS j
        WHERE j.status = 'pending' AND j.preferred_instance_key_pattern IS NOT NULL)
    UNION ALL
    SELECT p.queue, (
        SELECT j.preferred_instance_key_pattern FROM {schema}.job AS j
        WHERE j.queue = p.queue AND j.status = 'pending'
          AND j.preferred_instance_key_pattern > p.pattern
        ORDER BY j.preferred_instance_key_pattern LIMIT 1)
    FROM present AS p
    WHERE p.pattern IS NOT NULL
)

-- fragment: unjudged_markers
-- The patterns present (present_patterns) the worker has judged neither way:
-- one 'unjudged' row each, the pattern in data_json, taking no slot; at most
-- 64 a claim (the worker judges a few of them before its next claim).
(SELECT NULL, p.queue, 'unjudged', p.pattern, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
        NULL, NULL, NULL, NULL, NULL, NULL
 FROM present AS p
 WHERE p.pattern IS NOT NULL
   AND p.pattern NOT IN (SELECT unnest(%(matching_patterns)s::text[]))
   AND p.pattern NOT IN (SELECT unnest(%(refused_patterns)s::text[]))
 LIMIT 64)

-- fragment: limited_markers(queues, slots)
-- A queue passed over for its limits says so ('limited' row): the worker
-- claims it with claim_limited from then on, learning of a limit from the
-- claim itself rather than by reading the queues' limits on the side
-- (claim, claim_plain).
SELECT NULL, w.queue, 'limited', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL
FROM unnest({queues}, {slots}) AS w (queue, slots)
WHERE w.slots > 0
  AND EXISTS (
      SELECT FROM {schema}.queue AS q
      WHERE q.name = w.queue
        AND (q.global_concurrency IS NOT NULL OR q.partition_concurrency IS NOT NULL
             OR q.rate_limit IS NOT NULL))

-- name: complete_jobs
-- Fenced, batched completions. status is 'completed', or 'cancelled' for a
-- handler that returned after its cancel signal. Entries may omit progress
-- and attrs (NULL: nothing new to write). The result is one row: the ids
-- completed, as one array, so reading it costs no row per job.
-- slots_freed_queues: the queues of these jobs the worker claims with
-- claim_limited. Their wake-up for a freed slot is sent here, once per queue,
-- and their rows' limited flag turned off, so the row trigger
-- job_slot_freed_notify (one PL/pgSQL call per job) skips them (migration
-- 0018); a limited job of another queue still wakes through the trigger.
WITH d AS MATERIALIZED (
    SELECT *
    FROM jsonb_to_recordset(%(jobs)s::jsonb) AS d (id uuid, lease_token bigint, status text,
                                                    output jsonb, progress double precision,
                                                    attrs jsonb)
),
completed AS (
    UPDATE {schema}.job AS j
    SET status = d.status::{schema}.job_status,
        output = d.output,
        finished_at = now(),
        lease_expires_at = NULL,
        progress = coalesce(d.progress, j.progress),
        attrs = CASE WHEN d.attrs IS NULL THEN j.attrs ELSE j.attrs || d.attrs END,
        -- The released CTE below releases this job's dependents from this
        -- statement's snapshot. When the row it completes is the version
        -- that snapshot reads (the TID scan finds it), no add committed in
        -- between (an add of a dependent writes a dependency that is not
        -- completed), so that release is the whole of it and the row trigger
        -- settle_dependents does not fire (its WHEN: the flag turned on).
        -- A newer version (an add committed while this waited for its lock)
        -- leaves the flag off, and the trigger finds that add's dependent.
        dependents_released = CASE
            WHEN d.status = 'completed' AND j.has_dependents AND NOT j.has_shared_dependents
            THEN EXISTS (SELECT FROM {schema}.job AS seen
                         WHERE seen.ctid = j.ctid AND seen.id = j.id)
            ELSE j.dependents_released END,
        limited = j.limited AND j.queue <> ALL (%(slots_freed_queues)s::text[])
    FROM d
    -- Pinned to the primary key, so a completion costs what it completes: the
    -- planner cannot size the recordset and would otherwise scan job_lease_idx
    -- (every running job, and every completed one not yet vacuumed away). The
    -- status is compared as text so that partial index's predicate cannot match;
    -- the IN, which implies no partial index's predicate, names the live
    -- statuses so that a partitioned job table is pruned to its live partition.
    WHERE j.id = ANY (ARRAY(SELECT d.id FROM d))
      AND j.id = d.id AND j.lease_token = d.lease_token AND j.status::text = 'active'
      AND j.status IN ('pending', 'active', 'waiting')
    RETURNING j.id, j.status, j.has_dependents, j.queue
),
-- The dependents waiting for one of these alone become pending here, in one
-- UPDATE for the batch: one probe of job_waiting_on_idx for every completed
-- job that has dependents, where the row trigger settle_dependents would run
-- a statement for each. The trigger still runs after this statement for a
-- job whose dependents_released stayed off (see above), and settles what this
-- did not: dependents of several jobs, and a dependent whose add committed
-- after this statement's snapshot (its add locked the dependency, so this
-- completion waited for it). It then finds these already pending. Nothing is
-- probed in a batch whose jobs have no dependents.
released AS (
    UPDATE {schema}.job AS c
    SET status = 'pending',
        start_after = now() + (c.start_after - c.created_at),
        expire_at = now() + (c.start_after - c.created_at)
                    + make_interval(secs => c.expire_in_seconds)
    WHERE c.depends_on && ARRAY(SELECT p.id FROM completed AS p
                                WHERE p.has_dependents AND p.status::text = 'completed')
      AND cardinality(c.depends_on) = 1 AND c.status = 'waiting'
),
slots_freed AS (
    SELECT pg_notify(%(job_channel)s, f.queue)
    FROM (SELECT DISTINCT done.queue FROM completed AS done
          WHERE done.queue = ANY (%(slots_freed_queues)s::text[])) AS f
)
-- (a CTE of no data-modifying statement runs only where it is read)
SELECT coalesce(array_agg(done.id::text), '{{}}') AS ids
FROM completed AS done CROSS JOIN (SELECT count(*) FROM slots_freed) AS woken;

-- name: fail_jobs
-- Fenced, batched failures. The worker decides retry and delay (the job's
-- policy, dont_autoretry_for); the error joins the row's history, and its
-- message is the row's error (the newest one, for SQL readers). A job that
-- ends failed is copied to its queue's dead-letter queue, if one is set,
-- with source_job_id naming it, so it can be redriven.
WITH failure AS (
    SELECT *
    FROM jsonb_to_recordset(%(jobs)s::jsonb) AS f (id uuid, lease_token bigint, retry boolean,
                                                   delay_seconds double precision, error jsonb,
                                                   status text, progress double precision,
                                                   attrs jsonb)
),
updated AS (
    UPDATE {schema}.job AS j
    SET status = (CASE WHEN f.retry THEN 'pending' ELSE f.status END)::{schema}.job_status,
        start_after = CASE WHEN f.retry THEN now() + make_interval(secs => f.delay_seconds)
                           ELSE j.start_after END,
        finished_at = CASE WHEN f.retry THEN NULL ELSE now() END,
        errors = j.errors || jsonb_build_array(f.error || jsonb_build_object('at', now())),
        error = f.error ->> 'message',
        lease_expires_at = NULL,
        progress = coalesce(f.progress, j.progress),
        attrs = CASE WHEN f.attrs IS NULL THEN j.attrs ELSE j.attrs || f.attrs END
    FROM failure AS f
    WHERE j.id = f.id AND j.lease_token = f.lease_token AND j.status = 'active'
    RETURNING j.id, j.queue, j.status, j.data, j.priority, j.group_id
),
dead_letter AS (
    SELECT u.*, q.dead_letter_queue
    FROM updated AS u
    JOIN {schema}.queue AS q ON q.name = u.queue
    WHERE u.status = 'failed' AND q.dead_letter_queue IS NOT NULL
),
{dead_letter_copy}
SELECT u.id, u.status::text AS status, (SELECT count(*) FROM copied) AS dead_lettered
FROM updated AS u;

-- name: touch_jobs
-- The heartbeat: extends the leases of running jobs, writes their latest
-- progress and merges their attrs, all fenced. Jobs missing from the result
-- lost their lease; cancel_requested carries cancel requests to the worker
-- even when their NOTIFY was missed.
-- Pinned to the primary key as complete_jobs is (and for its reason): joined
-- plainly, the planner scanned job_lease_idx, every running job, at every
-- heartbeat of every worker.
WITH h AS MATERIALIZED (
    SELECT *
    FROM jsonb_to_recordset(%(jobs)s::jsonb) AS h (id uuid, lease_token bigint,
                                                   lease_seconds integer,
                                                   progress double precision, attrs jsonb)
)
UPDATE {schema}.job AS j
SET lease_expires_at = now() + make_interval(secs => h.lease_seconds),
    progress = coalesce(h.progress, j.progress),
    attrs = CASE WHEN h.attrs IS NULL THEN j.attrs ELSE j.attrs || h.attrs END
FROM h
WHERE j.id = ANY (ARRAY(SELECT h.id FROM h))
  AND j.id = h.id AND j.lease_token = h.lease_token AND j.status::text = 'active'
  AND j.status IN ('pending', 'active', 'waiting')
RETURNING j.id, j.cancel_requested_at IS NOT NULL AS cancel_requested;

-- name: leased_jobs
-- A pull consumer's attempts, as its writes need them (portqueue.pull): the
-- lease's expiry, which fetch_jobs reports, and the retry policy a failure
-- follows, which fail_job applies as the worker does. Only rows still holding
-- the lease come back (id, token, status 'active'): a missing one is fenced.
-- priority, start_after, seq: fetch_jobs hands its jobs out in claim order
-- (a claim's RETURNING has no order).
-- Pinned to the primary key as complete_jobs is (and for its reason): joined
-- plainly, the planner scanned job_lease_idx, every running job.
WITH l AS MATERIALIZED (
    SELECT * FROM jsonb_to_recordset(%(jobs)s::jsonb) AS l (id uuid, lease_token bigint)
)
SELECT j.id::text AS id, j.lease_expires_at, j.priority, j.start_after, j.seq, j.attempt,
       j.max_attempts, j.retry_delay_seconds, j.backoff_strategy, j.backoff_factor,
       j.backoff_max_delay_seconds, j.backoff_jitter,
       j.cancel_requested_at IS NOT NULL AS cancel_requested
FROM {schema}.job AS j
JOIN l ON j.id = l.id AND j.lease_token = l.lease_token
WHERE j.id = ANY (ARRAY(SELECT l.id FROM l)) AND j.status::text = 'active'
  AND j.status IN ('pending', 'active', 'waiting');

-- name: release_jobs
-- Abort: jobs still running go back to pending at once, without spending the
-- attempt, so nothing waits for a lease to lapse after a deploy. Fenced, so
-- the handlers' late results are refused. The job is eligible again from
-- now: start_after says so, so the next attempt's start latency (metrics,
-- the dashboard's chart) is measured from the release, not from the first
-- start_after, which would count the aborted run as waiting.
UPDATE {schema}.job AS j
SET status = 'pending',
    attempt = greatest(j.attempt - 1, 0),
    start_after = greatest(j.start_after, now()),
    started_at = NULL,
    lease_expires_at = NULL,
    worker_id = NULL
FROM jsonb_to_recordset(%(jobs)s::jsonb) AS r (id uuid, lease_token bigint)
WHERE j.id = r.id AND j.lease_token = r.lease_token AND j.status = 'active'
RETURNING j.id;

-- name: end_sessions
-- Stop: the sessions of sync handlers still holding a job.transaction()
-- connection after their jobs were released or timed out. A thread cannot be
-- interrupted, and closing a connection another thread may be using is not
-- safe, so the server ends them: their transactions roll back and free their
-- locks now, not whenever the stuck handler returns.
SELECT pg_terminate_backend(pid) AS ended
FROM unnest(%(pids)s::integer[]) AS pid;

-- name: watch_job
-- wait_for_job: ask for a finish notification, and read the status in the
-- same statement. Either the job finishes after this commits (and its
-- finishing UPDATE, re-reading the row, sees the flag and notifies), or it
-- had finished before (and this returns its finished_at).
UPDATE {schema}.job
SET notify_finished = true
WHERE id = %(job_id)s
RETURNING id, finished_at IS NOT NULL AS finished;

-- fragment: dead_letter_copy
-- The CTEs that copy each row of a CTE named dead_letter (id, queue's
-- dead_letter_queue, data, priority, group_id) to its dead-letter queue,
-- with source_job_id naming the original, creating the queue row first if
-- needed. Shared by fail_jobs and rescue_lapsed. The copy is a job added to
-- the dead-letter queue: it takes that queue's declared retry, expiry and
-- timeout, resolved as add_jobs resolves them.
dead_letter_queue AS (
    INSERT INTO {schema}.queue (name)
    SELECT DISTINCT dead_letter_queue FROM dead_letter
    ON CONFLICT DO NOTHING
),
copied AS (
    INSERT INTO {schema}.job (
        id, queue, data, priority, group_id, source_job_id,
        max_attempts, retry_delay_seconds, backoff_strategy, backoff_factor,
        backoff_max_delay_seconds, backoff_jitter, expire_in_seconds, expire_at,
        timeout_seconds)
    SELECT gen_random_uuid(), d.dead_letter_queue, d.data, d.priority, d.group_id, d.id,
           coalesce(dq.max_attempts, 1), coalesce(dq.retry_delay_seconds, 0),
           coalesce(dq.backoff_strategy, 'fixed'), coalesce(dq.backoff_factor, 2),
           dq.backoff_max_delay_seconds, coalesce(dq.backoff_jitter, false),
           dq.expire_in_seconds, now() + make_interval(secs => dq.expire_in_seconds),
           dq.timeout_seconds
    FROM dead_letter AS d
    LEFT JOIN {schema}.queue AS dq ON dq.name = d.dead_letter_queue
    RETURNING source_job_id
)

-- name: snooze_jobs
-- A handler raised Snooze: back to pending, to start delay_seconds from now
-- on the database clock, with the attempt the claim counted given back and
-- no error recorded (a snooze is not a failure). Fenced like fail_jobs.
UPDATE {schema}.job AS j
SET status = 'pending',
    attempt = greatest(j.attempt - 1, 0),
    start_after = now() + make_interval(secs => s.delay_seconds),
    started_at = NULL,
    lease_expires_at = NULL,
    worker_id = NULL,
    progress = coalesce(s.progress, j.progress),
    attrs = CASE WHEN s.attrs IS NULL THEN j.attrs ELSE j.attrs || s.attrs END
FROM jsonb_to_recordset(%(jobs)s::jsonb) AS s (id uuid, lease_token bigint,
                                               delay_seconds double precision,
                                               progress double precision, attrs jsonb)
WHERE j.id = s.id AND j.lease_token = s.lease_token AND j.status = 'active'
RETURNING j.id;

-- name: start_delayed_now
-- drain(with_scheduled=True): the delayed jobs and pending retries of the
-- drained queues become ready now, so a test need not wait for them.
UPDATE {schema}.job
SET start_after = now()
WHERE queue = ANY (%(queues)s::text[]) AND status = 'pending' AND start_after > now();

-- name: lock_limited_queue
-- The first statement of a limited claim's transaction: claims of one
-- limited queue take turns on its row, so each counts what the one before
-- it committed. It must be a statement of its own: a READ COMMITTED
-- statement that waits for a lock still reads with the snapshot it began
-- with, and would count active jobs as they were before the claim it waited
-- for.
SELECT q.name FROM {schema}.queue AS q WHERE q.name = %(queue)s FOR NO KEY UPDATE;

-- name: claim_limited
-- claim, for one queue with a limit, run after lock_limited_queue in the
-- same transaction. Its clock is statement_timestamp(), not now() (the
-- transaction's start, before the lock was waited for): a start is stamped
-- after the completion that freed its slot, and the rate window counts the
-- same instants. It claims at most what every limit allows:
--   global_concurrency minus the queue's active jobs;
--   per partition key, partition_concurrency minus the key's active jobs,
--     taking each key's own ready jobs (a key at its limit holds up no
--     other key: no head-of-line blocking); jobs without a key are not
--     limited by it;
--   rate_limit minus the starts recorded in the window (queue_start), for
--     the queue or per key.
-- Active jobs are counted from the rows (job_limited_active_idx: the jobs
-- this statement marked limited), so a completion, a failure, a rescue or a
-- release frees its slot by changing the row, exactly once, whoever does
-- it. Jobs over a limit stay pending: no attempt is spent. Its rows are
-- claim's, plus, for a rate-limited queue that claimed fewer than it asked,
-- one 'rate_limited' row whose data_json is the number of seconds until the
-- window next lets a job start: the worker claims the queue again then,
-- rather than polling.
WITH RECURSIVE limits AS (
    SELECT q.global_concurrency, q.partition_concurrency, q.rate_limit,
           q.rate_limit_period_seconds AS period,
           coalesce(q.rate_limit_per_partition, false) AND q.rate_limit IS NOT NULL
               AS rate_per_key,
           q.partition_concurrency IS NOT NULL
               OR (coalesce(q.rate_limit_per_partition, false) AND q.rate_limit IS NOT NULL)
               AS by_key
    FROM {schema}.queue AS q
    WHERE q.name = %(queue)s AND q.paused IS NULL
),
active AS (
    SELECT j.partition_key, count(*) AS n
    FROM {schema}.job AS j
    WHERE j.queue = %(queue)s AND j.status = 'active' AND j.limited
    GROUP BY j.partition_key
),
recent AS (
    SELECT s.partition_key, sum(s.starts) AS n, min(s.started_at) AS oldest
    FROM {schema}.queue_start AS s
    JOIN limits AS l ON l.rate_limit IS NOT NULL
    WHERE s.queue = %(queue)s AND s.started_at > statement_timestamp() - make_interval(secs => l.period)
    GROUP BY s.partition_key
),
-- How many the whole claim may take: never NULL (LIMIT NULL is no limit).
budget AS (
    SELECT coalesce((
        SELECT greatest(0, least(
            %(slots)s::integer,
            l.global_concurrency - (SELECT coalesce(sum(a.n), 0) FROM active AS a),
            CASE WHEN l.rate_limit IS NOT NULL AND NOT l.rate_per_key
                 THEN l.rate_limit - (SELECT coalesce(sum(r.n), 0) FROM recent AS r) END))
        FROM limits AS l), 0)::integer AS n
),
-- The distinct keys of pending jobs, one index probe each (a loose index
-- scan of job_partition_idx), for queues limited per key only, each with its
-- highest pending priority (the first entry of its range: where the key's
-- claim starts, with no probe of its own).
keys (partition_key, priority) AS (
    (SELECT j.partition_key, j.priority FROM {schema}.job AS j
     WHERE j.queue = %(queue)s AND j.status = 'pending' AND j.partition_key IS NOT NULL
       AND (SELECT l.by_key FROM limits AS l) AND (SELECT b.n FROM budget AS b) > 0
     ORDER BY j.partition_key, j.priority DESC LIMIT 1)
    UNION ALL
    SELECT n.partition_key, n.priority
    FROM keys AS k
    CROSS JOIN LATERAL (
        SELECT j.partition_key, j.priority FROM {schema}.job AS j
        WHERE j.queue = %(queue)s AND j.status = 'pending'
          AND j.partition_key IS NOT NULL AND j.partition_key > k.partition_key
        ORDER BY j.partition_key, j.priority DESC LIMIT 1
    ) AS n
),
keyed AS (
    SELECT c.*
    FROM keys AS k
    CROSS JOIN limits AS l
    CROSS JOIN LATERAL (
        {ready_levels(
            queue => %(queue)s, clock => statement_timestamp(),
            lease_seconds => %(lease_seconds)s::integer, top => k.priority,
            range => j.partition_key = k.partition_key
                     AND (j.preferred_instance_key_pattern IS NULL
                          OR j.preferred_instance_key_pattern IN (
                                 SELECT unnest(%(matching_patterns)s::text[]))),
            limit =>
                greatest(0, least(
                    (SELECT b.n FROM budget AS b),
                    l.partition_concurrency - coalesce(
                        (SELECT a.n FROM active AS a WHERE a.partition_key = k.partition_key), 0),
                    CASE WHEN l.rate_per_key THEN l.rate_limit - coalesce(
                        (SELECT r.n FROM recent AS r WHERE r.partition_key = k.partition_key), 0)
                    END)))}
    ) AS c
),
-- Jobs no key limit applies to: all of them when the queue is not limited
-- per key, else those without a key. Those with neither a key nor a pattern
-- are in job_claim_idx, those with a key (no pattern) in job_claim_keyed_idx,
-- read only when the queue is not limited per key (a one-time filter), so a
-- queue limited per key reads none of its keyed jobs here (migration 0017).
-- Jobs with a pattern are in job_claim_patterned_idx, by pattern: one range
-- per pattern the worker matches, as claim reads them; the patterns not
-- judged yet are found by their own probe (present) and reported.
unkeyed AS (
    SELECT u.* FROM (
        SELECT * FROM (
            {ready_range(
                queue => %(queue)s, clock => statement_timestamp(),
                lease_seconds => %(lease_seconds)s::integer, limit => (SELECT b.n FROM budget AS b),
                range => j.preferred_instance_key_pattern IS NULL AND j.partition_key IS NULL)}
        ) AS plain
        UNION ALL
        SELECT * FROM (
            {ready_range(
                queue => %(queue)s, clock => statement_timestamp(),
                lease_seconds => %(lease_seconds)s::integer, limit => (SELECT b.n FROM budget AS b),
                range => j.preferred_instance_key_pattern IS NULL AND j.partition_key IS NOT NULL
                         AND NOT (SELECT l.by_key FROM limits AS l))}
        ) AS keyed_unlimited
        UNION ALL
        SELECT c.*
        FROM unnest(%(matching_patterns)s::text[]) AS p (pattern)
        CROSS JOIN LATERAL (
            {ready_range(
                queue => %(queue)s, clock => statement_timestamp(),
                lease_seconds => %(lease_seconds)s::integer, limit => (SELECT b.n FROM budget AS b),
                range => j.preferred_instance_key_pattern = p.pattern
                         AND (j.partition_key IS NULL OR NOT (SELECT l.by_key FROM limits AS l)))}
        ) AS c
    ) AS u
    ORDER BY u.priority DESC, u.start_after, u.seq
    LIMIT (SELECT b.n FROM budget AS b)
),
candidates AS (
    SELECT u.* FROM (SELECT * FROM keyed UNION ALL SELECT * FROM unkeyed) AS u
    ORDER BY u.priority DESC, u.start_after, u.seq
    LIMIT (SELECT b.n FROM budget AS b)
),
{present_patterns(queues => (SELECT %(queue)s::text AS queue) AS w)},
claimed AS (
    UPDATE {schema}.job AS j
    SET {claim_set},
        limited = true
    FROM candidates AS c
    WHERE j.id = c.id AND j.id = ANY (ARRAY(SELECT c.id FROM candidates AS c))
      AND j.status = 'pending'
    RETURNING {claimed_columns}, j.partition_key
),
-- The starts of a rate-limited queue, one row per key (or one for the whole
-- queue) and claim; rows out of the window are deleted by the claim that
-- finds them, under the same queue lock.
recorded AS (
    INSERT INTO {schema}.queue_start (queue, partition_key, started_at, starts)
    SELECT %(queue)s, CASE WHEN l.rate_per_key THEN c.partition_key ELSE '' END, statement_timestamp(),
           count(*)
    FROM claimed AS c
    CROSS JOIN limits AS l
    WHERE l.rate_limit IS NOT NULL AND c.status = 'active'
      AND (NOT l.rate_per_key OR c.partition_key IS NOT NULL)
    GROUP BY 2
),
forgotten AS (
    DELETE FROM {schema}.queue_start AS s
    USING limits AS l
    WHERE s.queue = %(queue)s
      AND (l.rate_limit IS NULL OR s.started_at <= statement_timestamp() - make_interval(secs => l.period))
)
SELECT c.id, c.queue, c.status, c.data_json, c.attempt, c.max_attempts, c.group_id,
       c.lease_token, c.timeout_seconds, c.retry_delay_seconds, c.backoff_strategy,
       c.backoff_factor, c.backoff_max_delay_seconds, c.backoff_jitter, c.cancel_requested,
       c.traceparent, c.parent_outputs_json
FROM claimed AS c
UNION ALL
{unjudged_markers}
UNION ALL
-- The earliest moment a start leaves the window: before it, no more can start.
SELECT NULL, %(queue)s, 'rate_limited',
       greatest(0.0, extract(epoch FROM
           coalesce((SELECT min(r.oldest) FROM recent AS r), statement_timestamp())
           + make_interval(secs => l.period) - statement_timestamp()))::text,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM limits AS l
WHERE l.rate_limit IS NOT NULL
  AND (SELECT count(*) FROM claimed) < %(slots)s
UNION ALL
-- A queue that no longer has a limit says so ('unlimited' row; no limit
-- capped the budget, so its jobs were claimed as usual): the worker claims it
-- with claim from then on.
SELECT NULL, %(queue)s, 'unlimited', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL
WHERE NOT EXISTS (
    SELECT FROM {schema}.queue AS q
    WHERE q.name = %(queue)s
      AND (q.global_concurrency IS NOT NULL OR q.partition_concurrency IS NOT NULL
           OR q.rate_limit IS NOT NULL));

-- fragment: ready_range(queue, clock, range, limit, lease_seconds)
-- The one shape of every range a claim reads in index order (claim's plain,
-- keyed and matched ranges; claim_limited's plain and keyed ones): up to
-- limit of queue's pending jobs in range, due by clock, in claim order,
-- skipping rows other claimers hold. range names one claim index's entries
-- (job_claim_idx, job_claim_keyed_idx, or job_claim_patterned_idx for one
-- pattern), whose order is (priority DESC, start_after, seq): ready_levels
-- reads it from its highest priority, found by one probe. clock is now()
-- for claim and statement_timestamp() for claim_limited (a statement after
-- its lock, see there).
{ready_levels(
    queue => {queue}, clock => {clock}, range => {range}, limit => {limit},
    lease_seconds => {lease_seconds},
    top => {highest_priority(queue => {queue}, range => {range}, below => true)})}

-- fragment: highest_priority(queue, range, below)
-- The highest priority of queue's pending jobs in range that satisfy below
-- (a condition on j.priority): one probe of the range's index, its first
-- entry past below. NULL when there is none.
(SELECT j.priority FROM {schema}.job AS j
 WHERE j.queue = {queue} AND j.status = 'pending' AND {range} AND {below}
 ORDER BY j.priority DESC LIMIT 1)

-- fragment: ready_levels(queue, clock, range, limit, lease_seconds, top)
-- ready_range, from priority top down (claim_limited's per-key ranges pass
-- the top its loose scan of the keys found). A scan in the index's order
-- cannot stop at the first job not yet due: a job of a lower priority may be
-- due behind it. So the range is read one priority level at a time (a loose
-- index scan of the levels, highest first), each level's due jobs a range of
-- their own that ends at the first job not due: delayed jobs cost a claim
-- nothing until they are due, whatever their priority, for one more index
-- probe per level visited. The levels are visited lazily, in order (a nested
-- loop over the recursive CTE, no sort): once limit jobs are found no
-- further level is read and no further row locked.
WITH RECURSIVE levels (priority) AS (
    SELECT {top}
    UNION ALL
    SELECT {highest_priority(queue => {queue}, range => {range}, below => j.priority < lv.priority)}
    FROM levels AS lv
    WHERE lv.priority IS NOT NULL
)
SELECT c.* FROM levels AS lv
CROSS JOIN LATERAL (
    {due_jobs(
        queue => {queue}, clock => {clock}, limit => {limit},
        lease_seconds => {lease_seconds}, range => {range} AND j.priority = lv.priority)}
) AS c
WHERE lv.priority IS NOT NULL
LIMIT {limit}

-- fragment: due_jobs(queue, clock, range, limit, lease_seconds)
-- Up to limit of queue's pending jobs in range, due by clock, in claim order,
-- skipping rows other claimers hold: one index scan that stops at limit, and
-- at the first job not due when range is one priority level (ready_range).
-- The columns are what candidates sorts and claim_set reads (pattern is NULL
-- in a range of jobs without one).
SELECT j.id, j.partition_key, j.priority, j.start_after, j.seq,
       (j.expire_at IS NOT NULL AND j.expire_at <= {clock}) AS expired,
       j.preferred_instance_key_pattern AS pattern,
       {lease_seconds} AS lease_seconds
FROM {schema}.job AS j
WHERE j.queue = {queue} AND j.status = 'pending'
  AND {range}
  AND j.start_after <= {clock}
ORDER BY j.priority DESC, j.start_after, j.seq
LIMIT {limit}
FOR UPDATE OF j SKIP LOCKED

-- fragment: claim_set
-- The SET of a claim's UPDATE, from its candidates (alias c: expired,
-- lease_seconds). Shared by claim and claim_limited; statement_timestamp()
-- is now() for the plain claim, a statement of its own (see claim_limited).
status = CASE WHEN c.expired THEN 'expired' ELSE 'active' END::{schema}.job_status,
        attempt = j.attempt + CASE WHEN c.expired THEN 0 ELSE 1 END,
        started_at = CASE WHEN c.expired THEN j.started_at ELSE statement_timestamp() END,
        finished_at = CASE WHEN c.expired THEN statement_timestamp() END,
        lease_token = coalesce(j.lease_token, 0) + 1,
        lease_expires_at = CASE WHEN c.expired THEN NULL
                                ELSE statement_timestamp() + make_interval(secs => c.lease_seconds) END,
        worker_id = %(worker_id)s

-- fragment: claimed_columns
-- What a claim returns per job (see claim). Shared by claim and claim_limited.
j.id::text AS id, j.queue, j.status::text AS status, j.data::text AS data_json,
              j.attempt, j.max_attempts, j.group_id, j.lease_token, j.timeout_seconds,
              j.retry_delay_seconds, j.backoff_strategy, j.backoff_factor,
              j.backoff_max_delay_seconds, j.backoff_jitter,
              j.cancel_requested_at IS NOT NULL AS cancel_requested,
              j.attrs ->> 'traceparent' AS traceparent,
              -- job.parent_outputs: only a job with dependencies reads them
              CASE WHEN j.depends_on IS NOT NULL THEN (
                  SELECT jsonb_object_agg(
                             CASE WHEN j.flow_id IS NOT NULL AND p.flow_id = j.flow_id
                                  THEN p.flow_key ELSE p.id::text END,
                             p.output)::text
                  FROM {schema}.job AS p WHERE p.id = ANY(j.depends_on)) END
                  AS parent_outputs_json

-- name: queue_peers
-- This worker's rank among the live workers of each of these queues (oldest
-- first), and how many there are: the first few listen for the queue's
-- wake-ups, the rest poll (worker/listener.py). Live: seen within a minute
-- (heartbeats come every third of a lease).
SELECT queue, rank, workers FROM (
    SELECT q.queue, w.id,
           row_number() OVER (PARTITION BY q.queue ORDER BY w.started_at, w.id) AS rank,
           count(*) OVER (PARTITION BY q.queue) AS workers
    FROM {schema}.worker AS w, unnest(w.queues) AS q(queue)
    WHERE q.queue = ANY(%(queues)s) AND w.last_seen_at > now() - interval '1 minute'
) AS ranked
WHERE id = %(id)s;
