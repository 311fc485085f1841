"""The CLI and retention per outcome (issue 18, item 13): ``portqueue prune``
takes the client defaults, so a cron job's pass prunes as the workers' would;
``portqueue add`` takes a job's ttls per outcome."""

from __future__ import annotations

import json
from typing import Any

import psycopg

from portqueue import PortQueue
from tests.support.cli import Cli
from tests.support.rows import count_rows, update_job

Db = psycopg.Connection[Any]


def test_prune_applies_the_default_per_outcome_ttls_and_caps(
    pq: PortQueue, pg_dsn: str, db: Db, schema: str
) -> None:
    jobs = {}
    for name, status in [("completed", "completed"), ("failed", "failed"),
                         ("capped1", "completed"), ("capped2", "completed")]:
        queue = "capped" if name.startswith("capped") else "emails"
        job_id = pq.add_job(queue=queue, data={}).job_id
        assert job_id
        jobs[name] = job_id
        # the capped ones a second apart, so "newest" is well defined
        age = 120 if name in ("completed", "failed") else int(name[-1])
        update_job(db, schema, job_id, f"status = '{status}', "
                   f"finished_at = now() - make_interval(secs => {age})")
    cli = Cli(pg_dsn, schema)
    result = cli("prune", "--json", "--default-completed-retention-seconds", "60",
                 "--default-failed-retention-seconds", "3600", "--default-keep-completed", "1")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["pruner"] == 2
    left = {name for name, job_id in jobs.items()
            if count_rows(db, schema, "job", "id = %s", [job_id])}
    assert left == {"failed", "capped1"}

    bad = cli("prune", "--default-keep-failed", "-1")
    assert bad.exit_code == 2


def test_add_takes_the_outcome_ttls_and_names_a_bad_one(
    pq: PortQueue, pg_dsn: str, db: Db, schema: str
) -> None:
    cli = Cli(pg_dsn, schema)
    added = cli("add", "emails", "{}", "--create-queue", "--json",
                "--retention-completed-ttl", "60", "--retention-failed-ttl", "2147483647")
    assert added.exit_code == 0, added.output
    job = pq.get_job(job_id=json.loads(added.stdout)["job_id"])
    assert job is not None
    assert (job.retention_ttl_seconds, job.retention_completed_ttl_seconds,
            job.retention_failed_ttl_seconds) == (None, 60, 2147483647)

    bad = cli("add", "emails", "{}", "--retention-failed-ttl", "-1")
    assert bad.exit_code == 2 and "--retention-failed-ttl" in bad.output
    assert count_rows(db, schema, "job") == 1
