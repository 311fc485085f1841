"""SPEC §5, maintenance: the expirer, the pruner (retention by age, by count,
ttl 0, in bounded batches), the reaper, one acting at a time, and run_pass,
against real PostgreSQL.

Finished and lapsed rows are arranged with test-written SQL (the states a
worker would leave), then one service pass runs directly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from portqueue import JobStatus, PortQueue
from portqueue.maintenance import maintenance_services, run_pass, scheduler_services
from portqueue.maintenance.expirer import Expirer
from portqueue.maintenance.pruner import Pruner
from portqueue.maintenance.reaper import Reaper
from portqueue.maintenance.rescuer import lock_key
from tests.support.rows import count_rows, finish, job_row, set_queue, update_job
from tests.support.services import run_once, service_pool, settings_for

Db = psycopg.Connection[Any]
ROOT = Path(__file__).resolve().parents[2]
DAY = 86_400


def insert_jobs(
    db: Db, schema: str, queue: str, count: int, status: str, *,
    finished_ago: float = 0, spacing: float = 1, ttl: int | None = None,
) -> list[str]:
    """``count`` jobs in ``status``; finished ones ``finished_ago`` seconds ago
    and then ``spacing`` seconds apart going back (so "newest" is well defined)."""
    db.execute(sql.SQL("INSERT INTO {} (name) VALUES (%s) ON CONFLICT DO NOTHING").format(
        sql.Identifier(schema, "queue")), [queue])
    finished = status in ("completed", "failed", "cancelled", "expired")
    query = sql.SQL(
        "INSERT INTO {job} (id, queue, data, status, finished_at, retention_ttl_seconds, "
        "                   attempt, lease_token, lease_expires_at) "
        "SELECT gen_random_uuid(), %(queue)s, '{{}}', %(status)s::{status_type}, "
        "CASE WHEN %(finished)s THEN now() - make_interval(secs => %(ago)s + %(spacing)s * g) "
        "END, %(ttl)s, %(active)s::int, "
        "CASE WHEN %(active)s THEN 1 END, CASE WHEN %(active)s THEN now() + interval '1 hour' END "
        "FROM generate_series(0, %(count)s - 1) AS g RETURNING id"
    ).format(job=sql.Identifier(schema, "job"),
             status_type=sql.Identifier(schema, "job_status"))
    rows = db.execute(query, {"queue": queue, "status": status, "finished": finished,
                              "ago": finished_ago, "spacing": spacing, "ttl": ttl,
                              "active": status == "active",
                              "count": count}).fetchall()
    return [str(row[0]) for row in rows]


def remaining(db: Db, schema: str, ids: list[str]) -> set[str]:
    rows = db.execute(sql.SQL("SELECT id FROM {} WHERE id = ANY(%s::uuid[])").format(
        sql.Identifier(schema, "job")), [ids]).fetchall()
    return {str(row[0]) for row in rows}


def prune(dsn: str, schema: str, **options: Any) -> tuple[Pruner, int]:
    pruner, count = run_once(Pruner, dsn, schema, **options)
    assert isinstance(pruner, Pruner)
    return pruner, count


# --- registration ---


def test_workers_start_every_service(pg_dsn: str, schema: str) -> None:
    settings = settings_for(pg_dsn, schema)
    pool = service_pool(pg_dsn)
    assert [s.name for s in maintenance_services(settings, pool)] == [
        "rescuer", "expirer", "pruner", "reaper", "throttles"]
    assert [s.name for s in scheduler_services(settings, pool)] == ["scheduler"]


# --- the expirer ---


def test_expirer_expires_pending_jobs_past_expire_at(
    pq: PortQueue, db: Db, pg_dsn: str, schema: str
) -> None:
    late = [pq.add_job(queue="q", data={}, expire_in_seconds=60).job_id for _ in range(3)]
    on_time = pq.add_job(queue="q", data={}, expire_in_seconds=3600).job_id
    never = pq.add_job(queue="q", data={}).job_id
    running = pq.add_job(queue="q", data={}, expire_in_seconds=60).job_id
    assert all(late) and on_time and never and running
    for job_id in [*late, running]:
        update_job(db, schema, job_id, "expire_at = now() - interval '1 second'")
    update_job(db, schema, running, "status = 'active', attempt = 1, lease_token = 1, "
               "lease_expires_at = now() + interval '1 min', started_at = now()")

    assert run_once(Expirer, pg_dsn, schema)[1] == 3
    for job_id in late:
        row = job_row(db, schema, job_id)
        assert row["status"] == "expired" and row["finished_at"] is not None
        snapshot = pq.get_job(job_id=job_id)
        assert snapshot is not None and snapshot.status is JobStatus.EXPIRED
    assert job_row(db, schema, on_time)["status"] == "pending"
    assert job_row(db, schema, never)["status"] == "pending"
    assert job_row(db, schema, running)["status"] == "active", "only pending jobs expire"
    assert run_once(Expirer, pg_dsn, schema)[1] == 0


def test_expirer_works_in_batches(db: Db, pg_dsn: str, schema: str) -> None:
    ids = insert_jobs(db, schema, "q", 25, "pending")
    db.execute(sql.SQL("UPDATE {} SET expire_at = now() - interval '1 s'").format(
        sql.Identifier(schema, "job")))
    assert run_once(Expirer, pg_dsn, schema, batch_size=10)[1] == 25
    assert count_rows(db, schema, "job", "status = 'expired' AND id = ANY(%s::uuid[])",
                      [ids]) == 25


# --- the pruner: by age ---


def test_pruner_keeps_the_client_default_of_seven_days(db: Db, pg_dsn: str, schema: str) -> None:
    old = [i for status in ("completed", "failed", "cancelled", "expired")
           for i in insert_jobs(db, schema, "q", 2, status, finished_ago=7 * DAY + 60)]
    young = insert_jobs(db, schema, "q", 2, "completed", finished_ago=6 * DAY)
    unfinished = insert_jobs(db, schema, "q", 2, "pending") + insert_jobs(
        db, schema, "q", 1, "active")
    db.execute(sql.SQL("UPDATE {} SET created_at = now() - interval '30 days'").format(
        sql.Identifier(schema, "job")))

    assert prune(pg_dsn, schema)[1] == len(old)
    assert remaining(db, schema, old) == set()
    assert remaining(db, schema, young + unfinished) == set(young + unfinished)
    # A client whose default is shorter prunes those too (never unfinished jobs).
    assert prune(pg_dsn, schema, default_retention_seconds=DAY)[1] == len(young)
    assert remaining(db, schema, unfinished) == set(unfinished)


def test_pruner_prefers_the_jobs_ttl_then_the_queues(db: Db, pg_dsn: str, schema: str) -> None:
    set_queue(db, schema, "hourly", "retention_ttl_seconds = 3600")
    queue_old = insert_jobs(db, schema, "hourly", 3, "completed", finished_ago=7200)
    queue_young = insert_jobs(db, schema, "hourly", 3, "failed", finished_ago=1800)
    # The job's own ttl wins over its queue's, shorter or longer.
    own_short = insert_jobs(db, schema, "hourly", 2, "completed", finished_ago=120, ttl=60)
    own_long = insert_jobs(db, schema, "hourly", 2, "completed", finished_ago=7200, ttl=DAY)
    default_queue = insert_jobs(db, schema, "default", 2, "completed", finished_ago=7200)

    assert prune(pg_dsn, schema)[1] == 5
    assert remaining(db, schema, queue_old + own_short) == set()
    kept = queue_young + own_long + default_queue
    assert remaining(db, schema, kept) == set(kept)


def test_pruner_reads_each_distinct_job_ttl(db: Db, pg_dsn: str, schema: str) -> None:
    # Jobs with their own ttl are found per distinct ttl value (a loose index
    # scan); every value must be visited, not only the first.
    doomed, kept = [], []
    for ttl in (0, 1, 60, 600, 3599):
        doomed += insert_jobs(db, schema, "q", 3, "completed", finished_ago=3600, ttl=ttl)
    for ttl in (7200, DAY):
        kept += insert_jobs(db, schema, "q", 3, "completed", finished_ago=3600, ttl=ttl)
    assert prune(pg_dsn, schema)[1] == len(doomed)
    assert remaining(db, schema, doomed + kept) == set(kept)


def test_ttl_zero_prunes_on_the_next_pass(pq: PortQueue, db: Db, pg_dsn: str,
                                          schema: str) -> None:
    gone = pq.add_job(queue="q", data={}, retention={"ttl_seconds": 0}).job_id
    waiting = pq.add_job(queue="q", data={}, retention={"ttl_seconds": 0}).job_id
    kept = pq.add_job(queue="q", data={}).job_id
    assert gone and waiting and kept
    finish(db, schema, gone, "completed")
    finish(db, schema, kept, "completed")
    assert prune(pg_dsn, schema)[1] == 1
    assert pq.get_job(job_id=gone) is None
    assert pq.get_job(job_id=waiting) is not None, "ttl counts from finishing, not adding"
    assert pq.get_job(job_id=kept) is not None

    set_queue(db, schema, "zero", "retention_ttl_seconds = 0")
    zero = insert_jobs(db, schema, "zero", 4, "failed")
    assert prune(pg_dsn, schema)[1] == 4
    assert remaining(db, schema, zero) == set()


# --- the pruner: by count ---


def test_count_caps_keep_the_newest_completed_and_failed(
    db: Db, pg_dsn: str, schema: str
) -> None:
    set_queue(db, schema, "capped", "retention_keep_completed = 3, retention_keep_failed = 2")
    completed = insert_jobs(db, schema, "capped", 10, "completed", finished_ago=60)
    failed = insert_jobs(db, schema, "capped", 6, "failed", finished_ago=60)
    cancelled = insert_jobs(db, schema, "capped", 4, "cancelled", finished_ago=60)
    pending = insert_jobs(db, schema, "capped", 3, "pending")
    other_queue = insert_jobs(db, schema, "uncapped", 10, "completed", finished_ago=60)

    assert prune(pg_dsn, schema)[1] == 7 + 4
    # insert_jobs makes the first ids the newest finished
    kept = completed[:3] + failed[:2] + cancelled + pending + other_queue
    assert remaining(db, schema, completed + failed + cancelled + pending + other_queue) == set(
        kept)
    assert prune(pg_dsn, schema)[1] == 0, "a cap prunes down to N, then holds"


def test_count_and_age_together_whichever_comes_first(
    db: Db, pg_dsn: str, schema: str
) -> None:
    set_queue(db, schema, "both", "retention_keep_completed = 5, retention_ttl_seconds = 600")
    young = insert_jobs(db, schema, "both", 3, "completed", finished_ago=10)
    old = insert_jobs(db, schema, "both", 3, "completed", finished_ago=900)
    assert prune(pg_dsn, schema)[1] == 3, "under the cap, age still prunes"
    assert remaining(db, schema, young + old) == set(young)

    set_queue(db, schema, "both", "retention_keep_completed = 0")
    assert prune(pg_dsn, schema)[1] == 3, "a cap of 0 keeps no completed job"


# --- the pruner: batches and one at a time ---


def test_pruner_deletes_more_rows_than_one_batch(db: Db, pg_dsn: str, schema: str) -> None:
    set_queue(db, schema, "bulk", "retention_ttl_seconds = 0")
    ids = insert_jobs(db, schema, "bulk", 2_500, "completed", spacing=0.001)
    kept = insert_jobs(db, schema, "bulk", 5, "pending")
    pruner, count = prune(pg_dsn, schema)  # the default batch (1000)
    assert (count, pruner.batches) == (2_500, 3)
    assert remaining(db, schema, ids + kept) == set(kept)

    ids = insert_jobs(db, schema, "bulk", 350, "failed", ttl=0)
    pruner, count = prune(pg_dsn, schema, batch_size=100)
    assert (count, pruner.batches) == (350, 4)
    assert remaining(db, schema, ids) == set()


def test_one_pruner_acts_at_a_time(db: Db, pg_dsn: str, schema: str) -> None:
    ids = insert_jobs(db, schema, "q", 5, "completed", ttl=0)
    with psycopg.connect(pg_dsn, autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s)", [lock_key(schema, "pruner")])
        assert prune(pg_dsn, schema)[1] == 0, "another process holds the pruner's lock"
        assert remaining(db, schema, ids) == set(ids)
        # Released here, not by closing: a closed session's backend frees its
        # locks a moment later, and a fast next pass would still see them.
        other.execute("SELECT pg_advisory_unlock(%s)", [lock_key(schema, "pruner")])
    assert prune(pg_dsn, schema)[1] == 5


def test_pruner_leaves_a_retried_job(pq: PortQueue, db: Db, pg_dsn: str, schema: str) -> None:
    (job_id,) = insert_jobs(db, schema, "q", 1, "failed", ttl=0)
    assert pq.retry_job(job_id=job_id) is not None
    assert prune(pg_dsn, schema)[1] == 0
    assert job_row(db, schema, job_id)["status"] == "pending"


# --- the reaper ---


def insert_worker(db: Db, schema: str, queues: list[str], seen_ago: str) -> str:
    row = db.execute(sql.SQL(
        "INSERT INTO {} (id, hostname, pid, queues, concurrency, last_seen_at) "
        "VALUES (gen_random_uuid(), 'host', 1, %s, 1, now() - %s::interval) RETURNING id"
    ).format(sql.Identifier(schema, "worker")), [queues, seen_ago]).fetchone()
    assert row is not None
    return str(row[0])


def test_reaper_forgets_workers_silent_for_ten_heartbeats(
    db: Db, pg_dsn: str, schema: str
) -> None:
    set_queue(db, schema, "short", "lease_seconds = 60")   # heartbeat 20 s: reaped after 5 min
    set_queue(db, schema, "long", "lease_seconds = 3600")  # heartbeat 20 min: after 200 min
    dead = [insert_worker(db, schema, ["short"], "10 minutes"),
            insert_worker(db, schema, ["long"], "4 hours"),
            insert_worker(db, schema, [], "6 minutes")]
    alive = [insert_worker(db, schema, ["short"], "1 minute"),
             insert_worker(db, schema, ["long", "short"], "4 minutes"),
             insert_worker(db, schema, ["long"], "30 minutes")]
    assert run_once(Reaper, pg_dsn, schema)[1] == 3
    rows = db.execute(sql.SQL("SELECT id FROM {}").format(
        sql.Identifier(schema, "worker"))).fetchall()
    assert {str(row[0]) for row in rows} == set(alive)
    assert not set(dead) & {str(row[0]) for row in rows}


# --- run_pass: one pass of everything, as `portqueue prune` will ---


def test_run_pass_reports_what_each_service_did(
    pq: PortQueue, db: Db, pg_dsn: str, schema: str
) -> None:
    lapsed = pq.add_job(queue="q", data={}, retry={"max_attempts": 2}).job_id
    late = pq.add_job(queue="q", data={}, expire_in_seconds=60).job_id
    assert lapsed and late
    update_job(db, schema, lapsed, "status = 'active', attempt = 1, lease_token = 1, "
               "lease_expires_at = now() - interval '1 s', started_at = now()")
    update_job(db, schema, late, "expire_at = now() - interval '1 s'")
    insert_jobs(db, schema, "q", 3, "completed", ttl=0)
    insert_worker(db, schema, ["q"], "1 hour")

    assert run_pass(pg_dsn, schema=schema) == {
        "rescuer": 1, "expirer": 1, "pruner": 3, "reaper": 1, "throttles": 0}
    assert job_row(db, schema, lapsed)["status"] == "pending"
    # The job expired in this pass is kept for the default 7 days.
    assert job_row(db, schema, late)["status"] == "expired"
    assert run_pass(pg_dsn, schema=schema) == {
        "rescuer": 0, "expirer": 0, "pruner": 0, "reaper": 0, "throttles": 0}
    assert run_pass(pg_dsn, schema=schema, default_retention_seconds=0)["pruner"] == 1


def test_a_rescued_job_out_of_attempts_goes_to_the_dead_letter_queue_with_its_defaults(
    pq: PortQueue, db: Db, pg_dsn: str, schema: str
) -> None:
    """The rescuer's dead-letter copy is the same as a worker's (fail_jobs): a
    job added to the dead-letter queue, with that queue's declared defaults."""
    set_queue(db, schema, "fragile", "dead_letter_queue = 'fragile-dead'")
    set_queue(db, schema, "fragile-dead",
              "max_attempts = 4, retry_delay_seconds = 7, timeout_seconds = 30")
    spent = pq.add_job(queue="fragile", data={"n": 1}, priority=3, group_id="g").job_id
    assert spent
    update_job(db, schema, spent, "status = 'active', attempt = 1, lease_token = 1, "
               "lease_expires_at = now() - interval '1 s', started_at = now()")

    assert run_pass(pg_dsn, schema=schema)["rescuer"] == 1
    assert job_row(db, schema, spent)["status"] == "failed"
    (copy,) = db.execute(sql.SQL("SELECT * FROM {} WHERE source_job_id = %s").format(
        sql.Identifier(schema, "job")), [spent]).fetchall()
    columns = [c.name for c in db.execute(sql.SQL("SELECT * FROM {} LIMIT 0").format(
        sql.Identifier(schema, "job"))).description or []]
    row = dict(zip(columns, copy, strict=True))
    assert (row["queue"], row["status"], row["data"], row["priority"], row["group_id"]) == (
        "fragile-dead", "pending", {"n": 1}, 3, "g")
    assert (row["max_attempts"], row["retry_delay_seconds"], row["timeout_seconds"]) == (
        4, 7, 30)


RUN_PASSES = """
import sys
from portqueue.maintenance import run_pass
totals = {}
for _ in range(int(sys.argv[3])):
    for name, count in run_pass(sys.argv[1], schema=sys.argv[2]).items():
        totals[name] = totals.get(name, 0) + count
print(totals["rescuer"], totals["expirer"], totals["pruner"])
"""


@pytest.mark.slow
def test_five_processes_rescue_expire_and_prune_each_row_once(
    db: Db, pg_dsn: str, schema: str
) -> None:
    lapsed = insert_jobs(db, schema, "q", 500, "pending")
    db.execute(sql.SQL(
        "UPDATE {} SET status = 'active', attempt = 1, max_attempts = 3, lease_token = 1, "
        "started_at = now(), lease_expires_at = now() - interval '1 s' "
        "WHERE id = ANY(%s::uuid[])").format(sql.Identifier(schema, "job")), [lapsed])
    late = insert_jobs(db, schema, "q", 500, "pending")
    db.execute(sql.SQL("UPDATE {} SET expire_at = now() - interval '1 s' "
                       "WHERE id = ANY(%s::uuid[])").format(sql.Identifier(schema, "job")),
               [late])
    doomed = insert_jobs(db, schema, "q", 3_000, "completed", ttl=0, spacing=0.001)

    procs = [subprocess.Popen([sys.executable, "-c", RUN_PASSES, pg_dsn, schema, "5"],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(5)]
    results = [proc.communicate(timeout=120) for proc in procs]
    assert all(proc.returncode == 0 for proc in procs), [err for _, err in results]
    assert not any("deadlock" in err for _, err in results)
    totals = [sum(int(out.split()[i]) for out, _ in results) for i in range(3)]
    assert totals == [500, 500, 3_000], "each row handled by exactly one process"
    # Each lapsed attempt rescued once: one LeaseExpired error each, attempt unchanged.
    assert count_rows(db, schema, "job", "id = ANY(%s::uuid[]) AND status = 'pending' "
                      "AND attempt = 1 AND jsonb_array_length(errors) = 1", [lapsed]) == 500
    assert count_rows(db, schema, "job", "id = ANY(%s::uuid[]) AND status = 'expired'",
                      [late]) == 500
    assert remaining(db, schema, doomed) == set()
