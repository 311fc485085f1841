"""SPEC §10, ``redrive``: each waiting dead-letter copy's data goes back to its
source queue as a new job, and the copy is completed with an output naming
that job, in one transaction. End to end: a real worker fails the job into the
dead letters, the redrive sends it back, and the worker runs it again."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from portqueue import JobStatus, PauseMode, PortQueue, QueuePausedError
from tests.support.refusals import assert_refused_writing_nothing
from tests.support.rows import CallerTx, count_jobs, fetch_one, job_row, set_dead_letter_queue
from tests.support.waiting import wait_until
from tests.support.workers import SyncHarness, finished_row

Db = psycopg.Connection[Any]


class Boom(Exception):
    pass


def _dead_letters(pq: PortQueue, db: Db, schema: str, count: int) -> list[str]:
    """Fail ``count`` jobs of "mail" into "mail-dead" through a pull consumer,
    as a worker would; their ids, in order."""
    set_dead_letter_queue(db, schema, "mail", "mail-dead")
    ids = [str(pq.add_job(queue="mail", data={"n": n}, priority=n).job_id)
           for n in range(count)]
    for job in pq.fetch_jobs(queue="mail", limit=count):
        assert pq.fail_job(job_id=job.job_id, lease_token=job.lease_token, error="down",
                           retry=False)
    assert count_jobs(db, schema, "queue = 'mail-dead' AND status = 'pending'") == count
    return ids


def test_redrive_end_to_end_through_a_worker(harness: SyncHarness, db: Db, schema: str) -> None:
    pq = harness.pq
    runs: list[Any] = []

    @pq.handler("fragile", dead_letter_queue="fragile-dead")
    def handler(job: Any) -> str:
        runs.append(job.data)
        if len(runs) == 1:
            raise Boom("the first run fails")
        return "delivered"

    harness.start()
    source = pq.add_job(queue="fragile", data={"to": "a@b"}, group_id="g1").job_id
    assert source is not None
    wait_until(lambda: finished_row(db, schema, source), what="the job to fail")
    copy = wait_until(lambda: fetch_one(db, schema, "job", "source_job_id = %s", [source]),
                      what="its dead-letter copy")

    assert pq.redrive(queue="fragile-dead") == 1

    done = job_row(db, schema, str(copy["id"]))
    assert done["status"] == "completed" and done["finished_at"] is not None
    new_id = done["output"]["redriven_job_id"]
    again = wait_until(lambda: finished_row(db, schema, new_id), what="the redriven job")
    assert (again["queue"], again["data"], again["group_id"]) == ("fragile", {"to": "a@b"}, "g1")
    assert again["status"] == "completed" and again["output"] == "delivered"
    assert runs == [{"to": "a@b"}, {"to": "a@b"}]
    assert job_row(db, schema, source)["status"] == "failed", "the source keeps its history"
    assert pq.redrive(queue="fragile-dead") == 0, "a completed copy is not redriven again"


def test_redrive_takes_the_oldest_copies_up_to_the_limit(
    client: PortQueue, db: Db, schema: str
) -> None:
    sources = _dead_letters(client, db, schema, 3)
    assert client.redrive(queue="mail-dead", limit=2) == 2
    redriven = client.get_jobs(queue="mail", statuses=[JobStatus.PENDING]).items
    # The oldest copies are those of the jobs failed first: fetched, and so
    # failed, in priority order (n = 2, then 1).
    assert sorted(job.data["n"] for job in redriven) == [1, 2]
    assert sorted(job.priority for job in redriven) == [1, 2], "priority travels with the data"
    assert count_jobs(db, schema, "queue = 'mail-dead' AND status = 'pending'") == 1
    assert client.redrive(queue="mail-dead") == 1
    assert count_jobs(db, schema, "queue = 'mail' AND status = 'pending'") == 3
    assert all(job_row(db, schema, job_id)["status"] == "failed" for job_id in sources)


def test_a_copy_whose_source_was_removed_stays(client: PortQueue, db: Db, schema: str) -> None:
    (source, kept) = _dead_letters(client, db, schema, 2)
    assert client.remove_job(job_id=source)
    assert client.redrive(queue="mail-dead") == 1
    orphan = fetch_one(db, schema, "job", "source_job_id = %s", [source])
    assert orphan is not None and orphan["status"] == "pending"
    assert fetch_one(db, schema, "job", "source_job_id = %s AND status = 'completed'", [kept])


@pytest.mark.parametrize("commit", [True, False])
def test_redrive_commits_with_the_callers_transaction(
    client: PortQueue, db: Db, schema: str, pg_dsn: str, commit: bool
) -> None:
    _dead_letters(client, db, schema, 2)
    with CallerTx(client, pg_dsn) as caller:
        assert client.redrive(queue="mail-dead", tx=caller.tx) == 2
        caller.commit() if commit else caller.rollback()
    redriven = count_jobs(db, schema, "queue = 'mail' AND status = 'pending'")
    waiting = count_jobs(db, schema, "queue = 'mail-dead' AND status = 'pending'")
    assert (redriven, waiting) == ((2, 0) if commit else (0, 2))


def test_redrive_adds_nothing_to_a_queue_paused_for_adds(
    client: PortQueue, db: Db, schema: str
) -> None:
    _dead_letters(client, db, schema, 1)
    client.pause_queue(queue="mail", mode=PauseMode.ALL)
    with pytest.raises(QueuePausedError):
        client.redrive(queue="mail-dead")
    assert count_jobs(db, schema, "queue = 'mail-dead' AND status = 'pending'") == 1


@pytest.mark.parametrize(("arguments", "argument"), [
    ({"queue": ""}, "queue"),
    ({"queue": 5}, "queue"),
    ({"queue": "mail-dead", "limit": 0}, "limit"),
    ({"queue": "mail-dead", "limit": "all"}, "limit"),
])
def test_bad_input_is_refused_before_anything_is_written(
    client: PortQueue, db: Db, schema: str, arguments: dict[str, Any], argument: str
) -> None:
    _dead_letters(client, db, schema, 1)
    assert_refused_writing_nothing(db, schema, lambda: client.redrive(**arguments), argument)
