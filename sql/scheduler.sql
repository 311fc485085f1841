-- Scheduling: spawning one job per schedule tick. Run by every process with
-- a scheduler; exactly-once comes from the row locks and the unique tick key,
-- not from electing one scheduler.

-- name: lock_due_schedules
-- Due-ness is the database clock's. FOR UPDATE SKIP LOCKED: a schedule being
-- spawned by another scheduler is passed over, never waited for, so any
-- number of schedulers share the due rows without blocking each other. The
-- lock is held until the spawn below commits, which is also what makes
-- remove_schedule final: its DELETE waits for an in-flight spawn, and no
-- scheduler can lock the row after it. Re-checked on the locked row version,
-- so a schedule advanced by a scheduler that committed meanwhile is no longer
-- due. now() is returned so the next tick is computed from the same clock.
-- passed_over: the rows this scheduler could not advance (logged once); left
-- in, a batch full of them would hold every other due schedule back.
SELECT s.id, s.cron, s.tz, s.every_seconds, s.next_run_at, s.misfire_grace_seconds,
       now() AS now
FROM {schema}.schedule AS s
WHERE s.enabled AND s.next_run_at <= now()
  AND s.id <> ALL(%(passed_over)s::uuid[])
ORDER BY s.next_run_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: spawn_scheduled_jobs
-- One statement per batch, in the transaction holding the schedule rows: each
-- schedule's job for its tick (scheduled_for = the tick, start_after = the
-- tick) and the schedule's advance to its next tick commit together or not
-- at all. The unique index job_schedule_tick_uq (schedule_id, scheduled_for)
-- is the last word: should two schedulers ever hold the same tick, the
-- second INSERT does nothing. ON CONFLICT DO NOTHING rather than an error,
-- because a unique violation would abort the whole batch: a tick whose job
-- collides with a pending/active job of the same singleton_key is skipped
-- (the template's singleton key means "never two at once"), and the schedule
-- still advances. Options resolve against the queue's current defaults
-- exactly as add_jobs does. A queue paused with mode 'all' refuses adds, so
-- its ticks are skipped too (and reported as such). A tick the scheduler
-- found past its schedule's misfire grace (spawn = false) only advances it.
-- A tick with no following one (next_run_at NULL: a cron whose year field is
-- over) is spawned like any other, then its schedule is disabled, keeping
-- that last tick in next_run_at.
WITH ticks AS (
    SELECT t.schedule_id, t.job_id, t.scheduled_for, t.next_run_at, t.spawn
    FROM jsonb_to_recordset(%(ticks)s::jsonb) AS t (
        schedule_id uuid, job_id uuid, scheduled_for timestamptz, next_run_at timestamptz,
        spawn boolean)
),
due AS (
    SELECT t.schedule_id, t.job_id, t.scheduled_for, s.queue, s.data, o.*
    FROM ticks AS t
    JOIN {schema}.schedule AS s ON s.id = t.schedule_id AND t.spawn
    CROSS JOIN LATERAL jsonb_to_record(s.job_options) AS o (
        priority integer, max_attempts integer, retry_delay_seconds integer,
        backoff_strategy text, backoff_factor double precision,
        backoff_max_delay_seconds integer, backoff_jitter boolean,
        expire_in_seconds integer, retention_ttl_seconds integer, timeout_seconds integer,
        preferred_instance_key_pattern text, singleton_key text, group_id text,
        retention_completed_ttl_seconds integer, retention_failed_ttl_seconds integer)
),
spawned AS (
    INSERT INTO {schema}.job AS j (
        id, queue, data, priority, start_after,
        max_attempts, retry_delay_seconds, backoff_strategy, backoff_factor,
        backoff_max_delay_seconds, backoff_jitter,
        expire_in_seconds, expire_at, retention_ttl_seconds, timeout_seconds,
        preferred_instance_key_pattern, singleton_key, group_id,
        schedule_id, scheduled_for, retention_completed_ttl_seconds, retention_failed_ttl_seconds)
    SELECT
        e.job_id, e.queue, e.data, coalesce(e.priority, 0), e.scheduled_for,
        {resolved_retry_policy},
        coalesce(e.expire_in_seconds, d.expire_in_seconds),
        -- expiry bounds the wait from when the job could first start: a tick
        -- spawned late (a misfire) still gets its whole window, rather than
        -- being born expired
        greatest(e.scheduled_for, now())
            + make_interval(secs => coalesce(e.expire_in_seconds, d.expire_in_seconds)),
        e.retention_ttl_seconds,
        coalesce(e.timeout_seconds, d.timeout_seconds),
        e.preferred_instance_key_pattern, e.singleton_key, e.group_id,
        e.schedule_id, e.scheduled_for,
        e.retention_completed_ttl_seconds, e.retention_failed_ttl_seconds
    FROM due AS e
    LEFT JOIN {schema}.queue AS d ON d.name = e.queue
    WHERE d.paused IS DISTINCT FROM 'all'
    -- key order, as in add_jobs: two statements inserting the same singleton
    -- keys in different orders could otherwise each wait for the other
    ORDER BY e.singleton_key, e.schedule_id
    ON CONFLICT DO NOTHING
    RETURNING j.id, j.schedule_id
),
advanced AS (
    UPDATE {schema}.schedule AS s
    SET next_run_at = coalesce(t.next_run_at, s.next_run_at),
        enabled = t.next_run_at IS NOT NULL,
        last_run_at = CASE WHEN sp.id IS NULL THEN s.last_run_at ELSE now() END,
        last_job_id = coalesce(sp.id, s.last_job_id),
        updated_at = now()
    FROM ticks AS t
    LEFT JOIN spawned AS sp ON sp.schedule_id = t.schedule_id
    WHERE s.id = t.schedule_id
)
SELECT d.schedule_id, d.scheduled_for, sp.id AS job_id,
       coalesce(q.paused = 'all', false) AS paused
FROM due AS d
LEFT JOIN spawned AS sp ON sp.schedule_id = d.schedule_id
LEFT JOIN {schema}.queue AS q ON q.name = d.queue;

-- name: schedule_due_in
-- How long until the earliest enabled schedule this scheduler can advance is
-- due (0 or less: one is due now; NULL: none). One autocommit statement: a
-- pass with nothing due spends this, not a transaction of five round trips
-- (BEGIN, the timeout, the lock, the next due, COMMIT), which with the default
-- 1 s interval were most of the statements a scheduler's leader sent.
-- passed_over as in lock_due_schedules. Served by schedule_due_idx.
SELECT extract(epoch FROM min(s.next_run_at) - clock_timestamp())::double precision AS seconds
FROM {schema}.schedule AS s
WHERE s.enabled AND s.id <> ALL(%(passed_over)s::uuid[]);

-- name: next_schedule_due
-- How long until the next enabled schedule falls due (NULL: none), so a
-- scheduler sleeps until then rather than a whole interval and ticks are
-- spawned on time. Rows already due are not counted: they are held by
-- another scheduler (which spawns them) or could not be advanced (logged,
-- passed over).
-- clock_timestamp(), not now(): the transaction began before this pass's work.
-- Served by schedule_due_idx.
SELECT extract(epoch FROM min(s.next_run_at) - clock_timestamp())::double precision AS seconds
FROM {schema}.schedule AS s
WHERE s.enabled AND s.next_run_at > now();
