"""docs/sql-cookbook.md: every query on the page runs against a populated schema
and returns what the page says it returns, so the page cannot rot."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

Db = psycopg.Connection[Any]
PAGE = Path(__file__).resolve().parents[2] / "docs" / "sql-cookbook.md"
_BLOCK_RE = re.compile(r"^## (.+?)\n(?:(?!^## ).)*?^```sql\n(.*?)^```", re.M | re.S)


def recipes() -> dict[str, str]:
    """Section title -> its SQL block (one block per section)."""
    text = PAGE.read_text(encoding="utf-8")
    found = dict(_BLOCK_RE.findall(text))
    blocks = re.findall(r"^```sql\n", text, re.M)
    assert len(found) == len(blocks), "every SQL block sits in its own ## section"
    return found


def run(db: Db, schema: str, query: str, **params: Any) -> list[dict[str, Any]]:
    """Run a recipe as printed, in the test schema, binding its psql :'variables'."""
    text = re.sub(r"\bportqueue\.", sql.Identifier(schema).as_string() + ".", query)
    text = text.replace("%", "%%")
    text = re.sub(r":'(\w+)'", r"%(\1)s", text)
    with db.cursor(row_factory=dict_row) as cursor:
        cursor.execute(text.encode(), params)
        return cursor.fetchall()


POPULATE = """
INSERT INTO {schema}.queue (name, retention_ttl_seconds) VALUES
    ('emails', NULL), ('reports', NULL), ('emails-dead', NULL), ('idle', 60);

-- emails: 8 completed in the last hour, run times 1..8 s, waits 0.5 s; 2 failed
-- with two attempts' errors each; 4 completed three hours ago.
INSERT INTO {schema}.job (id, queue, data, status, attempt, max_attempts,
                          start_after, started_at, finished_at, errors, group_id)
SELECT gen_random_uuid(), 'emails', '{{}}', 'completed', 1, 1,
       now() - interval '30 minutes' - make_interval(secs => g + 0.5),
       now() - interval '30 minutes' - make_interval(secs => g),
       now() - interval '30 minutes', '[]', CASE WHEN g <= 3 THEN 'newsletter' END
FROM generate_series(1, 8) AS g;
INSERT INTO {schema}.job (id, queue, data, status, attempt, max_attempts,
                          start_after, started_at, finished_at)
SELECT gen_random_uuid(), 'emails', '{{}}', 'completed', 1, 1,
       now() - interval '3 hours 1 minute', now() - interval '3 hours 1 minute',
       now() - interval '3 hours'
FROM generate_series(1, 4);
INSERT INTO {schema}.job (id, queue, data, status, attempt, max_attempts,
                          start_after, started_at, finished_at, errors, group_id)
VALUES
    ('01900000-0000-7000-8000-00000000000f', 'emails', '{{}}', 'failed', 2, 2,
     now() - interval '20 minutes', now() - interval '11 minutes', now() - interval '10 minutes',
     jsonb_build_array(
        jsonb_build_object('attempt', 1, 'type', 'smtplib.SMTPException', 'message', 'timed out',
                           'traceback', 'Traceback…', 'at', now() - interval '15 minutes'),
        jsonb_build_object('attempt', 2, 'type', 'smtplib.SMTPException', 'message', 'timed out',
                           'traceback', 'Traceback…', 'at', now() - interval '10 minutes')),
     'newsletter'),
    (gen_random_uuid(), 'emails', '{{}}', 'failed', 1, 1,
     now() - interval '20 minutes', now() - interval '11 minutes', now() - interval '10 minutes',
     jsonb_build_array(jsonb_build_object(
        'attempt', 1, 'type', 'KeyError', 'message', '''to''', 'traceback', 'Traceback…',
        'at', now() - interval '10 minutes')),
     NULL);
-- error: written with each entry of errors by portqueue's statements; these
-- rows are written by hand, so they set it as those do
UPDATE {schema}.job SET error = errors -> -1 ->> 'message' WHERE errors <> '[]';

-- the dead-letter copy of the failed job
INSERT INTO {schema}.job (id, queue, data, source_job_id, group_id)
VALUES (gen_random_uuid(), 'emails-dead', '{{}}', '01900000-0000-7000-8000-00000000000f', NULL);

-- reports: backlog (two ready, the oldest 5 minutes; one delayed) and three
-- running jobs: lease nearly out, lease lapsed, healthy
INSERT INTO {schema}.job (id, queue, data, start_after, group_id) VALUES
    (gen_random_uuid(), 'reports', '{{}}', now() - interval '5 minutes', 'newsletter'),
    (gen_random_uuid(), 'reports', '{{}}', now() - interval '1 minute', 'newsletter'),
    (gen_random_uuid(), 'reports', '{{}}', now() + interval '1 hour', NULL);
INSERT INTO {schema}.worker (id, hostname, pid, queues, concurrency, last_seen_at)
VALUES ('01900000-0000-7000-8000-0000000000aa', 'host-a', 42, '{{reports}}', 4,
        now() - interval '50 seconds');
INSERT INTO {schema}.job (id, queue, data, status, attempt, lease_token, started_at,
                          lease_expires_at, worker_id) VALUES
    ('01900000-0000-7000-8000-000000000001', 'reports', '{{}}', 'active', 1, 1,
     now() - interval '1 minute', now() + interval '5 seconds',
     '01900000-0000-7000-8000-0000000000aa'),
    ('01900000-0000-7000-8000-000000000002', 'reports', '{{}}', 'active', 1, 1,
     now() - interval '2 minutes', now() - interval '1 second', gen_random_uuid()),
    (gen_random_uuid(), 'reports', '{{}}', 'active', 1, 1,
     now(), now() + interval '5 minutes', '01900000-0000-7000-8000-0000000000aa');

-- idle: a queue ttl of 60 s, two cancelled jobs finished 2 minutes ago
INSERT INTO {schema}.job (id, queue, data, status, finished_at)
SELECT gen_random_uuid(), 'idle', '{{}}', 'cancelled', now() - interval '2 minutes'
FROM generate_series(1, 2);

-- one schedule overdue, one not
INSERT INTO {schema}.schedule (id, queue, every_seconds, next_run_at, data) VALUES
    ('01900000-0000-7000-8000-0000000000cc', 'reports', 60, now() - interval '3 minutes', '{{}}'),
    (gen_random_uuid(), 'reports', 60, now() + interval '1 minute', '{{}}');
"""


@pytest.fixture
def populated(db: Db, schema: str) -> str:
    db.execute(sql.SQL(POPULATE).format(schema=sql.Identifier(schema)))
    return schema


EXPECTED = {
    "Throughput per queue per hour", "Failure rate per queue", "Run time p50 and p95 per queue",
    "Backlog and oldest pending age", "Jobs stuck near or past their lease",
    "Failed jobs and their last error",
    "The errors of a job's attempts", "A group's progress", "The most common errors",
    "Dead-letter jobs and where they came from", "Overdue schedules",
    "What retention will prune next",
}


def test_every_recipe_is_checked_here() -> None:
    assert set(recipes()) == EXPECTED


def test_throughput_per_queue_per_hour(db: Db, populated: str) -> None:
    rows = run(db, populated, recipes()["Throughput per queue per hour"])
    emails = [r for r in rows if r["queue"] == "emails"]
    assert sum(r["completed"] for r in emails) == 12 and sum(r["failed"] for r in emails) == 2
    assert len(emails) >= 2, "two different hours"
    assert [r["hour"] for r in emails] == sorted(r["hour"] for r in emails)


def test_failure_rate_per_queue(db: Db, populated: str) -> None:
    rows = {r["queue"]: r for r in run(db, populated, recipes()["Failure rate per queue"])}
    assert (rows["emails"]["failed"], rows["emails"]["completed"]) == (2, 12)
    assert float(rows["emails"]["failure_percent"]) == pytest.approx(100 * 2 / 14, abs=0.01)
    assert rows["idle"]["failure_percent"] is None, "no completed or failed: no rate"


def test_run_time_percentiles(db: Db, populated: str) -> None:
    (row,) = run(db, populated, recipes()["Run time p50 and p95 per queue"])
    assert row["queue"] == "emails" and row["completed"] == 12
    # run times 1..8 s and four of 60 s
    assert row["p50_run_seconds"] == pytest.approx(6.5)  # between the 6th and 7th of 12
    assert row["p95_run_seconds"] == pytest.approx(60.0)
    assert row["p95_wait_seconds"] == pytest.approx(0.5)


def test_backlog_and_oldest_pending_age(db: Db, populated: str) -> None:
    rows = {r["queue"]: r for r in run(db, populated, recipes()["Backlog and oldest pending age"])}
    reports = rows["reports"]
    assert (reports["ready"], reports["delayed"]) == (2, 1)
    assert 299 <= reports["oldest_ready_age"].total_seconds() <= 330
    assert rows["emails-dead"]["ready"] == 1


def test_jobs_stuck_near_their_lease(db: Db, populated: str) -> None:
    rows = run(db, populated, recipes()["Jobs stuck near or past their lease"])
    assert [str(r["id"]) for r in rows] == [
        "01900000-0000-7000-8000-000000000002", "01900000-0000-7000-8000-000000000001"]
    lapsed, near = rows
    assert lapsed["hostname"] is None and lapsed["lease_left"].total_seconds() < 0
    assert near["hostname"] == "host-a" and 0 < near["lease_left"].total_seconds() <= 5


def test_failed_jobs_and_their_last_error(db: Db, populated: str) -> None:
    rows = run(db, populated, recipes()["Failed jobs and their last error"])
    assert sorted(r["error"] for r in rows) == ["'to'", "timed out"]
    assert {r["queue"] for r in rows} == {"emails"}


def test_errors_of_a_jobs_attempts(db: Db, populated: str) -> None:
    rows = run(db, populated, recipes()["The errors of a job's attempts"],
               job_id="01900000-0000-7000-8000-00000000000f")
    assert [(r["entry"], r["attempt"], r["type"], r["message"]) for r in rows] == [
        (1, 1, "smtplib.SMTPException", "timed out"), (2, 2, "smtplib.SMTPException", "timed out")]
    assert rows[0]["at"] < rows[1]["at"] and rows[0]["traceback"]


def test_a_groups_progress(db: Db, populated: str) -> None:
    (row,) = run(db, populated, recipes()["A group's progress"], group_id="newsletter")
    assert (row["jobs"], row["pending"], row["completed"], row["failed"]) == (6, 2, 3, 1)
    assert float(row["percent_finished"]) == pytest.approx(66.7)


def test_most_common_errors(db: Db, populated: str) -> None:
    rows = run(db, populated, recipes()["The most common errors"])
    assert (rows[0]["type"], rows[0]["attempts"], rows[0]["jobs"]) == (
        "smtplib.SMTPException", 2, 1)
    assert {r["type"] for r in rows} == {"smtplib.SMTPException", "KeyError"}


def test_dead_letter_jobs(db: Db, populated: str) -> None:
    (row,) = run(db, populated, recipes()["Dead-letter jobs and where they came from"])
    assert row["dead_letter_queue"] == "emails-dead" and row["source_queue"] == "emails"
    assert str(row["source_job"]) == "01900000-0000-7000-8000-00000000000f"
    assert row["last_error"] == "timed out"


def test_overdue_schedules(db: Db, populated: str) -> None:
    (row,) = run(db, populated, recipes()["Overdue schedules"])
    assert str(row["id"]) == "01900000-0000-7000-8000-0000000000cc"
    assert row["rule"] == "60 s" and row["overdue_by"].total_seconds() >= 180


def test_what_retention_will_prune_next(db: Db, populated: str) -> None:
    rows = run(db, populated, recipes()["What retention will prune next"])
    # only the idle queue's two cancelled jobs are past a ttl (its 60 s)
    assert [(r["queue"], r["status"], r["prunable"]) for r in rows] == [
        ("idle", "cancelled", 2)]
