"""Bad input to every producing, managing and reading method is refused by its
operation before any statement is sent: a ValueError naming the argument, and
the recording executor (tests/support/recording.py) saw no statement.

The database side, once per public method (nothing written, the caller's
transaction still usable, a streamed batch rolled back), is
tests/integration/test_bad_input.py.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from portqueue import InvalidArgument, JobStatus, PayloadTooLarge
from portqueue.operations import STREAM_CHUNK
from portqueue.queries import Batch, Query
from tests.support.inputs import exact_string, nested_lists
from tests.support.recording import METHODS, Recording, operation, settings

D = {"to": "a@b.com"}
NEW_QUEUE = "never-created"
JOB_ID = "01a226b6-cc51-7106-b5bf-fe4b887db116"


def refused(method: str, argument: str, error: type[InvalidArgument] = InvalidArgument,
            statements: int = 0, **kwargs: Any) -> None:
    """``method(**kwargs)`` raises ``error`` naming ``argument`` after ``statements`` statements."""
    recording = Recording()
    with pytest.raises(error) as info:
        recording.run(operation(method, kwargs.pop("client_settings", None), **kwargs))
    assert isinstance(info.value, ValueError)
    assert info.value.argument == argument
    assert str(info.value).startswith(f"{argument}: ")
    assert len(recording.statements) == statements, recording.statements


@pytest.mark.parametrize("method", METHODS)
def test_the_recording_executor_sees_a_valid_call_send_its_statements(method: str) -> None:
    # Proves "no statement" below can fail: every method, given valid input, sends one.
    valid: dict[str, dict[str, Any]] = {
        "add_job": {"queue": "q", "data": 1}, "add_jobs": {"queue": "q", "jobs": [{"data": 1}]},
        "remove_jobs": {"job_ids": [JOB_ID]}, "remove_schedule": {"schedule_id": JOB_ID},
        "get_jobs": {"queue": "q"}, "get_queues": {}, "get_schedules": {},
        "pause_queue": {"queue": "q"}, "resume_queue": {"queue": "q"},
        "get_queue_stats": {"queue": "q"},
    }
    first = next(operation(method, **valid.get(method, {"job_id": JOB_ID})))
    assert isinstance(first, (Query, Batch)), f"{method} sent nothing"


ADD_JOB = [
    ({"retry": {"max_attempts": 3, "foo": 1}}, "retry.foo"),
    ({"retry": {"backoff": {"strategy": "bogus"}}}, "retry.backoff.strategy"),
    ({"retention": {"ttl_seconds": 1, "bar": 2}}, "retention.bar"),
    ({"schedule": {"start_after_seconds": 5, "start_every_seconds": 5}}, "schedule"),
    ({"schedule": {}}, "schedule"),
    ({"schedule": {"start_after_seconds": -1}}, "schedule.start_after_seconds"),
    ({"schedule": {"start_every_seconds": 0}}, "schedule.start_every_seconds"),
    ({"schedule": {"cron": "0 8 * * 1-5", "start_every_seconds": 5}}, "schedule"),
    ({"schedule": {"cron": "no cron"}}, "schedule.cron.pattern"),
    ({"schedule": {"cron": "0 0 30 2 *"}}, "schedule.cron.pattern"),
    ({"schedule": {"cron": {"pattern": "0 8 * * *", "tz": "Mars/Base"}}}, "schedule.cron.tz"),
    ({"schedule": {"cron": {"tz": "UTC"}}}, "schedule.cron.pattern"),
    ({"expire_in_seconds": -5}, "expire_in_seconds"),
    ({"priority": 2**31}, "priority"),
    ({"priority": True}, "priority"),
    ({"retry": {"max_attempts": 0}}, "retry.max_attempts"),
    ({"retry": {"backoff": {"factor": 0.5}}}, "retry.backoff.factor"),
    ({"data": {1, 2}}, "data"),
    ({"data": {"a": [1, {"b": math.nan}]}}, "data"),
    ({"data": [-math.inf]}, "data"),
    ({"data": {"k": "a\x00b"}}, "data"),
    ({"data": {"a\x00": 1}}, "data"),
    ({"data": ["\ud800"]}, "data"),
    ({"data": {1: "a", "1": "b"}}, "data"),
    ({"data": nested_lists(100_000)}, "data"),
    ({"preferred_instance_key_pattern": "ram-("}, "preferred_instance_key_pattern"),
    ({"preferred_instance_key_pattern": "(?P<gb>8)gb"}, "preferred_instance_key_pattern"),
    ({"idempotency_key": ""}, "idempotency_key"),
    ({"group_id": "g\x00"}, "group_id"),
    # recurring adds write the schedule table: refused just the same
    ({"schedule": {"start_every_seconds": 60}, "data": math.nan}, "data"),
    ({"schedule": {"cron": "* * * * *"}, "retry": {"nope": 1}}, "retry.nope"),
]


@pytest.mark.parametrize(("options", "argument"), ADD_JOB,
                         ids=[f"{a}-{i}" for i, (_, a) in enumerate(ADD_JOB)])
def test_add_job_bad_input_sends_nothing(options: dict[str, Any], argument: str) -> None:
    refused("add_job", argument, **{"queue": NEW_QUEUE, "data": D, **options})


@pytest.mark.parametrize("queue", ["", "q" * 129, "a\x00b", "\udc00", 5])
def test_add_job_bad_queue_name_sends_nothing(queue: Any) -> None:
    refused("add_job", "queue", queue=queue, data=D)


def test_payload_over_the_limit_sends_nothing() -> None:
    refused("add_job", "data", PayloadTooLarge, queue=NEW_QUEUE,
            data=exact_string(1024 * 1024 + 1))


def test_payload_over_a_custom_limit_sends_nothing() -> None:
    small = settings(max_payload_bytes=100)
    assert isinstance(next(operation("add_job", small, queue="q", data=exact_string(100))), Query)
    refused("add_job", "data", PayloadTooLarge, client_settings=small, queue=NEW_QUEUE,
            data=exact_string(101))


LAST_ENTRY_BAD = [
    ({"data": math.nan}, "jobs[2].data"),
    ({"data": 1, "foo": True}, "jobs[2].foo"),
    ({"data": 1, "retry": {"max_attempts": 2, "bogus": 1}}, "jobs[2].retry.bogus"),
    ({"data": 1, "schedule": {"start_every_seconds": 30}}, "jobs[2].schedule"),
    ({"data": 1, "schedule": {"start_after_seconds": -1}}, "jobs[2].schedule.start_after_seconds"),
    ({"data": 1, "priority": 2**31}, "jobs[2].priority"),
    ({"data": {7: "seven"}}, "jobs[2].data"),
    ({"data": exact_string(1024 * 1024 + 1)}, "jobs[2].data"),
    ({"data": 1, "preferred_instance_key_pattern": "a++"},
     "jobs[2].preferred_instance_key_pattern"),
    ({"priority": 1}, "jobs[2].data"),
]


@pytest.mark.parametrize("good", [2, 2 * STREAM_CHUNK], ids=["one statement", "streamed"])
@pytest.mark.parametrize(("last", "argument"), LAST_ENTRY_BAD,
                         ids=[a for _, a in LAST_ENTRY_BAD])
def test_add_jobs_with_only_the_last_entry_bad(
    last: dict[str, Any], argument: str, good: int
) -> None:
    """One statement: refused before it is sent. Streamed (past STREAM_CHUNK
    entries): the chunks before the bad entry's are sent, in the batch's one
    transaction, which the refusal rolls back (tests/integration/test_bad_input.py)."""
    jobs = [{"data": {"n": n}, "priority": n % 5} for n in range(good)] + [last]
    error = PayloadTooLarge if "x" * 100 in str(last.get("data", ""))[:200] else InvalidArgument
    # A batch naming a pattern is never streamed (PostgreSQL checks its
    # patterns before anything is inserted): refused before any statement.
    streamed = "preferred_instance_key_pattern" not in last
    refused("add_jobs", argument.replace("jobs[2]", f"jobs[{good}]"), error,
            statements=good // STREAM_CHUNK if streamed else 0, queue=NEW_QUEUE, jobs=jobs)


MANAGE = [
    ("retry_job", {"job_id": "not-a-uuid"}, "job_id"),
    ("cancel_job", {"job_id": 12}, "job_id"),
    ("remove_job", {"job_id": ""}, "job_id"),
    ("remove_jobs", {"job_ids": ["nope"]}, "job_ids"),
    ("remove_jobs", {"queue": "existing", "statuses": [JobStatus.PENDING, JobStatus.ACTIVE]},
     "statuses"),
    ("remove_jobs", {"queue": "existing", "statuses": ["pending", "running"]}, "statuses"),
    ("remove_jobs", {"queue": "existing"}, "statuses"),
    ("remove_jobs", {}, "job_ids"),
    ("remove_jobs", {"job_ids": [JOB_ID], "queue": "existing"}, "job_ids"),
    ("remove_schedule", {"schedule_id": "x"}, "schedule_id"),
    ("pause_queue", {"queue": "existing", "mode": "everything"}, "mode"),
    ("pause_queue", {"queue": NEW_QUEUE, "mode": "sometimes"}, "mode"),
    ("pause_queue", {"queue": "q" * 129}, "queue"),
    ("resume_queue", {"queue": ""}, "queue"),
    ("get_job", {"job_id": "nope"}, "job_id"),
    ("get_jobs", {"queue": "existing", "limit": 501}, "limit"),
    ("get_jobs", {"queue": "existing", "limit": 0}, "limit"),
    ("get_jobs", {"queue": "existing", "offset": -1}, "offset"),
    ("get_jobs", {"queue": "existing", "statuses": ["running"]}, "statuses"),
    ("get_queue_stats", {"queue": ""}, "queue"),
    ("get_queues", {"limit": 501}, "limit"),
    ("get_schedules", {"enabled": "yes"}, "enabled"),
]


@pytest.mark.parametrize(("method", "kwargs", "argument"), MANAGE,
                         ids=[f"{m}-{a}-{i}" for i, (m, _, a) in enumerate(MANAGE)])
def test_managing_and_reading_bad_input_sends_nothing(
    method: str, kwargs: dict[str, Any], argument: str
) -> None:
    refused(method, argument, **kwargs)
