"""Every bad input of SPEC §3 is a ValueError naming its argument, raised before any I/O.

No database: clients point at a closed port, and the pool and psycopg's connect
are replaced by a guard that records any attempt and raises ``NetworkAttempted``
(not a ValueError, so it can never satisfy ``pytest.raises(ValueError)``). Every
test ends by asserting that nothing tried to connect; the tests where valid input
must get as far as the network say so and expect ``NetworkAttempted``.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import math
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from portqueue import (
    AsyncPortQueue,
    Backoff,
    CronSpec,
    InvalidArgument,
    JobStatus,
    PayloadTooLarge,
    PortQueue,
    RetryPolicy,
    Schedule,
    validation,
)
from portqueue.migrate import migrate, migration_sql
from tests.support.inputs import (
    DIFFERENT_MEANING_PATTERNS,
    PYTHON_ONLY_PATTERNS,
    exact_string,
    nested_lists,
)

CLOSED_DSN = "postgresql://x@127.0.0.1:1/x"
INSTANCE_KEY = "test-host-ram-8gb"
JOB_ID = "01a226b6-cc51-7106-b5bf-fe4b887db116"
MIB = 1024 * 1024


class NetworkAttempted(Exception):
    """Something tried to open a connection."""


@pytest.fixture(autouse=True)
def network_attempts(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    attempts: list[str] = []

    def refuse(what: str) -> Callable[..., Any]:
        def refused(*args: Any, **kwargs: Any) -> Any:
            attempts.append(what)
            raise NetworkAttempted(what)

        return refused

    monkeypatch.setattr(psycopg, "connect", refuse("psycopg.connect"))
    monkeypatch.setattr(psycopg.Connection, "connect", refuse("Connection.connect"))
    monkeypatch.setattr(psycopg.AsyncConnection, "connect", refuse("AsyncConnection.connect"))
    monkeypatch.setattr(ConnectionPool, "open", refuse("ConnectionPool.open"))
    monkeypatch.setattr(AsyncConnectionPool, "open", refuse("AsyncConnectionPool.open"))
    yield attempts
    assert attempts == [], f"validation let a connection attempt through: {attempts}"


Invoke = Callable[..., Any]


@pytest.fixture(params=["sync", "async"])
def invoke(request: pytest.FixtureRequest) -> Invoke:
    """invoke(method, settings=None, **kwargs): call a method on a fresh client of each kind."""

    def sync(method: str, settings: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        settings = {"instance_key": INSTANCE_KEY, **(settings or {})}
        with PortQueue(CLOSED_DSN, **settings) as client:
            return getattr(client, method)(**kwargs)

    def run_async(method: str, settings: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        settings = {"instance_key": INSTANCE_KEY, **(settings or {})}

        async def main() -> Any:
            async with AsyncPortQueue(CLOSED_DSN, **settings) as client:
                return await getattr(client, method)(**kwargs)

        return asyncio.run(main())

    return sync if request.param == "sync" else run_async


def assert_names(error: BaseException, argument: str) -> None:
    assert isinstance(error, ValueError)
    assert isinstance(error, InvalidArgument)
    assert error.argument == argument
    assert str(error).startswith(f"{argument}: ")


def circular() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


D = {"to": "a@b.com"}


def job(**options: Any) -> dict[str, Any]:
    return {"queue": "emails", "data": D, **options}


def cron(pattern: str, tz: str = "UTC") -> dict[str, Any]:
    return {"cron": {"pattern": pattern, "tz": tz}}


# (method, keyword arguments, the argument the error must name)
BAD_CALLS = [
    # --- add_job: unknown keys at every level ---
    ("add_job", job(retry={"max_attempts": 2, "foo": 1}), "retry.foo"),
    ("add_job", job(retry={"backoff": {"strategy": "fixed", "foo": 1}}), "retry.backoff.foo"),
    ("add_job", job(retention={"ttl_seconds": 5, "foo": 1}), "retention.foo"),
    ("add_job", job(schedule={"start_after_seconds": 5, "foo": 1}), "schedule.foo"),
    ("add_job", job(schedule={"cron": {"pattern": "* * * * *", "foo": 1}}), "schedule.cron.foo"),
    ("add_job", job(schedule={"cron": {"tz": "UTC"}}), "schedule.cron.pattern"),
    # --- add_job: schedule modes ---
    ("add_job", job(schedule={"start_after_seconds": 5, "cron": "* * * * *"}), "schedule"),
    ("add_job", job(schedule={"start_every_seconds": 5, "cron": "* * * * *"}), "schedule"),
    ("add_job", job(schedule={"start_after_seconds": 5, "start_every_seconds": 5}), "schedule"),
    ("add_job", job(schedule={}), "schedule"),
    ("add_job", job(schedule=Schedule()), "schedule"),
    ("add_job", job(schedule=5), "schedule"),
    ("add_job", job(schedule=[("start_after_seconds", 5)]), "schedule"),
    # --- add_job: seconds ---
    ("add_job", job(schedule={"start_after_seconds": -1}), "schedule.start_after_seconds"),
    ("add_job", job(schedule={"start_every_seconds": 0}), "schedule.start_every_seconds"),
    ("add_job", job(schedule={"start_every_seconds": -5}), "schedule.start_every_seconds"),
    ("add_job", job(expire_in_seconds=-1), "expire_in_seconds"),
    ("add_job", job(expire_in_seconds=0), "expire_in_seconds"),
    ("add_job", job(timeout_seconds=0), "timeout_seconds"),
    ("add_job", job(retention={"ttl_seconds": -1}), "retention.ttl_seconds"),
    ("add_job", job(retention={"keep_completed": 10}), "retention"),
    ("add_job", job(retry={"delay_seconds": -1}), "retry.delay_seconds"),
    ("add_job", job(retry={"backoff": {"max_delay_seconds": -1}}),
     "retry.backoff.max_delay_seconds"),
    ("add_job", job(expire_in_seconds=2**31), "expire_in_seconds"),
    # --- add_job: bool where an int is expected, floats for seconds ---
    ("add_job", job(priority=True), "priority"),
    ("add_job", job(expire_in_seconds=True), "expire_in_seconds"),
    ("add_job", job(retry={"max_attempts": True}), "retry.max_attempts"),
    ("add_job", job(schedule={"start_after_seconds": False}), "schedule.start_after_seconds"),
    ("add_job", job(expire_in_seconds=1.5), "expire_in_seconds"),
    ("add_job", job(schedule={"start_after_seconds": 1.0}), "schedule.start_after_seconds"),
    ("add_job", job(schedule={"start_every_seconds": 30.0}), "schedule.start_every_seconds"),
    ("add_job", job(retry={"delay_seconds": 0.5}), "retry.delay_seconds"),
    ("add_job", job(timeout_seconds="30"), "timeout_seconds"),
    # --- add_job: priority, retry policy ---
    ("add_job", job(priority=2**31), "priority"),
    ("add_job", job(priority=-(2**31) - 1), "priority"),
    ("add_job", job(priority="1"), "priority"),
    ("add_job", job(priority=1.0), "priority"),
    ("add_job", job(retry={"max_attempts": 0}), "retry.max_attempts"),
    ("add_job", job(retry=RetryPolicy(max_attempts=0)), "retry.max_attempts"),
    ("add_job", job(retry={"backoff": {"factor": 0.5}}), "retry.backoff.factor"),
    ("add_job", job(retry={"backoff": Backoff(factor=0.99)}), "retry.backoff.factor"),
    ("add_job", job(retry={"backoff": {"factor": math.nan}}), "retry.backoff.factor"),
    ("add_job", job(retry={"backoff": {"factor": math.inf}}), "retry.backoff.factor"),
    ("add_job", job(retry={"backoff": {"factor": "2"}}), "retry.backoff.factor"),
    ("add_job", job(retry={"backoff": {"factor": True}}), "retry.backoff.factor"),
    ("add_job", job(retry={"backoff": {"strategy": "quadratic"}}), "retry.backoff.strategy"),
    ("add_job", job(retry={"backoff": {"strategy": None}}), "retry.backoff.strategy"),
    ("add_job", job(retry={"backoff": {"jitter": "yes"}}), "retry.backoff.jitter"),
    ("add_job", job(retry={"backoff": None}), "retry.backoff"),
    ("add_job", job(retry=5), "retry"),
    ("add_job", job(retention="forever"), "retention"),
    # --- add_job: payloads that are not JSON ---
    ("add_job", job(data={1, 2}), "data"),
    ("add_job", job(data=object()), "data"),
    ("add_job", job(data=b"bytes"), "data"),
    ("add_job", job(data=Decimal("1.5")), "data"),
    ("add_job", job(data=datetime.datetime(2026, 1, 1)), "data"),
    ("add_job", job(data={"when": datetime.date(2026, 1, 1)}), "data"),
    ("add_job", job(data=math.nan), "data"),
    ("add_job", job(data=math.inf), "data"),
    ("add_job", job(data=-math.inf), "data"),
    ("add_job", job(data={"a": [1, {"b": math.nan}]}), "data"),
    ("add_job", job(data=[[[-math.inf]]]), "data"),
    ("add_job", job(data={"x": {"y": math.inf}}), "data"),
    ("add_job", job(data={1: "a"}), "data"),
    ("add_job", job(data={1: "a", "1": "b"}), "data"),
    ("add_job", job(data={"a": {None: 1}}), "data"),
    ("add_job", job(data={(1, 2): "a"}), "data"),
    ("add_job", job(data=circular()), "data"),
    ("add_job", job(data=10**5000), "data"),
    # --- add_job: text jsonb cannot store ---
    ("add_job", job(data="a\x00b"), "data"),
    ("add_job", job(data={"k": ["ok", "\x00"]}), "data"),
    ("add_job", job(data={"a\x00": 1}), "data"),
    ("add_job", job(data={"nested": {"k\x00ey": 1}}), "data"),
    ("add_job", job(data="\\\x00"), "data"),
    ("add_job", job(data="\ud800"), "data"),
    ("add_job", job(data={"\udfff": 1}), "data"),
    ("add_job", job(data=["ok", {"k": "x\udc80y"}]), "data"),
    # --- add_job: nesting ---
    ("add_job", job(data=nested_lists(100_000)), "data"),
    ("add_job", job(data=nested_lists(validation.MAX_PAYLOAD_DEPTH + 1)), "data"),
    # --- add_job: queue names ---
    ("add_job", job(queue=""), "queue"),
    ("add_job", job(queue="q" * 129), "queue"),
    ("add_job", job(queue="\U0001f600" * 129), "queue"),
    ("add_job", job(queue=5), "queue"),
    ("add_job", job(queue=None), "queue"),
    ("add_job", job(queue=b"emails"), "queue"),
    ("add_job", job(queue="em\x00ails"), "queue"),
    ("add_job", job(queue="em\ud800ails"), "queue"),
    # --- add_job: regex, cron, time zones, keys, tx ---
    ("add_job", job(preferred_instance_key_pattern="ram-("), "preferred_instance_key_pattern"),
    ("add_job", job(preferred_instance_key_pattern="[a-"), "preferred_instance_key_pattern"),
    ("add_job", job(preferred_instance_key_pattern="*"), "preferred_instance_key_pattern"),
    ("add_job", job(preferred_instance_key_pattern=""), "preferred_instance_key_pattern"),
    ("add_job", job(preferred_instance_key_pattern=5), "preferred_instance_key_pattern"),
    ("add_job", job(schedule={"cron": "not a cron"}), "schedule.cron.pattern"),
    ("add_job", job(schedule={"cron": "61 * * * *"}), "schedule.cron.pattern"),
    ("add_job", job(schedule={"cron": "* * * *"}), "schedule.cron.pattern"),
    ("add_job", job(schedule={"cron": ""}), "schedule.cron.pattern"),
    ("add_job", job(schedule={"cron": "0 0 30 2 *"}), "schedule.cron.pattern"),
    ("add_job", job(schedule={"cron": 5}), "schedule.cron"),
    ("add_job", job(schedule=cron("0 8 * * 1-5", "Mars/Olympus_Mons")), "schedule.cron.tz"),
    ("add_job", job(schedule=cron("0 8 * * 1-5", "America")), "schedule.cron.tz"),
    ("add_job", job(schedule=cron("0 8 * * 1-5", "../../etc/passwd")), "schedule.cron.tz"),
    ("add_job", job(schedule=cron("0 8 * * 1-5", "")), "schedule.cron.tz"),
    ("add_job", job(schedule={"cron": CronSpec("0 8 * * *", tz="Nowhere")}), "schedule.cron.tz"),
    ("add_job", job(idempotency_key=""), "idempotency_key"),
    ("add_job", job(idempotency_key="k" * 513), "idempotency_key"),
    ("add_job", job(idempotency_key=42), "idempotency_key"),
    ("add_job", job(singleton_key="a\x00"), "singleton_key"),
    ("add_job", job(group_id=""), "group_id"),
    ("add_job", job(group_id=["g"]), "group_id"),
    ("add_job", job(tx=object()), "tx"),
    # --- add_jobs ---
    ("add_jobs", {"queue": "emails", "jobs": {"data": 1}}, "jobs"),
    ("add_jobs", {"queue": "emails", "jobs": "data"}, "jobs"),
    ("add_jobs", {"queue": "emails", "jobs": ({"data": i} for i in range(2))}, "jobs"),
    ("add_jobs", {"queue": "emails", "jobs": [{"data": 1}, 2]}, "jobs[1]"),
    ("add_jobs", {"queue": "emails", "jobs": [{"data": 1}, {"data": 2, "foo": 1}]}, "jobs[1].foo"),
    ("add_jobs", {"queue": "emails", "jobs": [{"data": 1, "queue": "other"}]}, "jobs[0].queue"),
    ("add_jobs", {"queue": "emails", "jobs": [{"priority": 1}]}, "jobs[0].data"),
    ("add_jobs", {"queue": "emails", "jobs": [{"data": 1}, {"data": 2, "retry": {"x": 1}}]},
     "jobs[1].retry.x"),
    ("add_jobs", {"queue": "emails", "jobs": [{"data": 1}, {"data": 2}, {"data": math.nan}]},
     "jobs[2].data"),
    ("add_jobs", {"queue": "emails", "jobs": [{"data": 1}, {"data": 2, "priority": 2**31}]},
     "jobs[1].priority"),
    ("add_jobs", {"queue": "emails",
                  "jobs": [{"data": 1}, {"data": 2, "schedule": {"start_every_seconds": 5}}]},
     "jobs[1].schedule"),
    ("add_jobs", {"queue": "emails", "jobs": [{"data": 1, "schedule": {"cron": "* * * * *"}}]},
     "jobs[0].schedule"),
    ("add_jobs", {"queue": "emails",
                  "jobs": [{"data": 1}, {"data": 2, "schedule": {"start_after_seconds": -1}}]},
     "jobs[1].schedule.start_after_seconds"),
    ("add_jobs", {"queue": "emails", "jobs": [{"data": 1, "schedule": cron("0 0 30 2 *")}]},
     "jobs[0].schedule.cron.pattern"),
    ("add_jobs", {"queue": "emails", "jobs": [{"data": 1, "tx": "a"}, {"data": 2, "tx": "b"}]},
     "jobs[1].tx"),
    ("add_jobs", {"queue": "emails", "jobs": [{"data": 1, "tx": "a"}], "tx": "b"}, "jobs[0].tx"),
    ("add_jobs", {"queue": "", "jobs": [{"data": 1}]}, "queue"),
    ("add_jobs", {"queue": "q" * 129, "jobs": []}, "queue"),
    # --- managing ---
    ("retry_job", {"job_id": "not-a-uuid"}, "job_id"),
    ("retry_job", {"job_id": 5}, "job_id"),
    ("retry_job", {"job_id": None}, "job_id"),
    ("cancel_job", {"job_id": ""}, "job_id"),
    ("cancel_job", {"job_id": JOB_ID + "0"}, "job_id"),
    ("remove_job", {"job_id": "01a226b6-cc51-7106-b5bf-fe4b887db11g"}, "job_id"),
    ("remove_job", {"job_id": b"01a226b6cc517106b5bffe4b887db116"}, "job_id"),
    ("remove_jobs", {"job_ids": [JOB_ID], "queue": "emails"}, "job_ids"),
    ("remove_jobs", {}, "job_ids"),
    ("remove_jobs", {"statuses": [JobStatus.COMPLETED]}, "job_ids"),
    ("remove_jobs", {"job_ids": JOB_ID}, "job_ids"),
    ("remove_jobs", {"job_ids": [JOB_ID, "nope"]}, "job_ids"),
    ("remove_jobs", {"job_ids": [JOB_ID], "statuses": [JobStatus.FAILED]}, "statuses"),
    ("remove_jobs", {"queue": "emails"}, "statuses"),
    ("remove_jobs", {"queue": "emails", "statuses": [JobStatus.ACTIVE]}, "statuses"),
    ("remove_jobs", {"queue": "emails", "statuses": [JobStatus.FAILED, "active"]}, "statuses"),
    ("remove_jobs", {"queue": "emails", "statuses": ["running"]}, "statuses"),
    ("remove_jobs", {"queue": "emails", "statuses": "completed"}, "statuses"),
    ("remove_jobs", {"queue": "", "statuses": [JobStatus.FAILED]}, "queue"),
    ("remove_schedule", {"schedule_id": "nope"}, "schedule_id"),
    ("pause_queue", {"queue": "emails", "mode": "sometimes"}, "mode"),
    ("pause_queue", {"queue": "emails", "mode": None}, "mode"),
    ("pause_queue", {"queue": ""}, "queue"),
    ("resume_queue", {"queue": "q" * 129}, "queue"),
    # --- reading ---
    ("get_job", {"job_id": "nope"}, "job_id"),
    ("get_jobs", {"queue": "emails", "limit": 0}, "limit"),
    ("get_jobs", {"queue": "emails", "limit": 501}, "limit"),
    ("get_jobs", {"queue": "emails", "limit": -1}, "limit"),
    ("get_jobs", {"queue": "emails", "limit": True}, "limit"),
    ("get_jobs", {"queue": "emails", "limit": 1.5}, "limit"),
    ("get_jobs", {"queue": "emails", "limit": None}, "limit"),
    ("get_jobs", {"queue": "emails", "offset": -1}, "offset"),
    ("get_jobs", {"queue": "emails", "offset": "0"}, "offset"),
    ("get_jobs", {"queue": "emails", "statuses": ["running"]}, "statuses"),
    ("get_jobs", {"queue": "emails", "statuses": JobStatus.FAILED}, "statuses"),
    ("get_jobs", {"queue": "emails", "group_id": ""}, "group_id"),
    ("get_jobs", {"queue": ""}, "queue"),
    ("get_queue_stats", {"queue": "q" * 129}, "queue"),
    ("get_queue_stats", {"queue": None}, "queue"),
    ("get_queues", {"limit": 0}, "limit"),
    ("get_queues", {"limit": 501}, "limit"),
    ("get_queues", {"offset": -1}, "offset"),
    ("get_schedules", {"enabled": "yes"}, "enabled"),
    ("get_schedules", {"queue": ""}, "queue"),
    ("get_schedules", {"limit": 501}, "limit"),
    ("get_schedules", {"offset": -5}, "offset"),
]


def _case_id(case: tuple[str, dict[str, Any], str]) -> str:
    method, _, argument = case
    return f"{method}-{argument}"


@pytest.mark.parametrize(("method", "kwargs", "argument"), BAD_CALLS,
                         ids=[_case_id(c) for c in BAD_CALLS])
def test_bad_input_is_a_value_error_naming_the_argument(
    invoke: Invoke, method: str, kwargs: dict[str, Any], argument: str
) -> None:
    with pytest.raises(InvalidArgument) as info:
        invoke(method, **kwargs)
    assert_names(info.value, argument)


def test_the_guard_sees_a_valid_call_reach_for_the_network(
    invoke: Invoke, network_attempts: list[str]
) -> None:
    # Proves the guard works: without it, "no attempt" above would be vacuous.
    with pytest.raises(NetworkAttempted):
        invoke("add_job", queue="emails", data=D)
    assert network_attempts
    network_attempts.clear()


@pytest.mark.parametrize(
    "kwargs",
    [
        job(priority=2**31 - 1),
        job(priority=-(2**31 - 1)),
        job(expire_in_seconds=2**31 - 1, schedule={"start_after_seconds": 2**31 - 1}),
        job(retry={"max_attempts": 1_000_000, "backoff": {"factor": 1, "strategy": "linear"}}),
        job(retention={"ttl_seconds": 0}),
        job(schedule={"start_after_seconds": 0}),
        job(schedule={"start_every_seconds": 1}),
        job(schedule=cron("0 0 29 2 *", "America/New_York")),
        job(data=nested_lists(validation.MAX_PAYLOAD_DEPTH)),
        job(data="\\u0000"),
        job(data={"\\u0000": "\\\\u0000"}),
        job(data=None),
        job(queue="q" * 128),
        job(queue="\U0001f600" * 128),
        job(preferred_instance_key_pattern="ram-8gb.*cpu-4cor"),
        {"queue": "emails", "jobs": [{"data": 1, "tx": None}, {"data": 2}]},
    ],
    ids=lambda kwargs: ",".join(k for k in kwargs if k not in ("queue", "data")) or "data",
)
def test_valid_edge_input_passes_validation(
    invoke: Invoke, network_attempts: list[str], kwargs: dict[str, Any]
) -> None:
    method = "add_jobs" if "jobs" in kwargs else "add_job"
    with pytest.raises(NetworkAttempted):
        invoke(method, **kwargs)
    network_attempts.clear()


# --- preferred_instance_key_pattern ---


def test_pattern_needs_a_client_with_an_instance_key(invoke: Invoke) -> None:
    with pytest.raises(InvalidArgument) as info:
        invoke("add_job", settings={"instance_key": None},
               **job(preferred_instance_key_pattern="ram-8gb"))
    assert_names(info.value, "preferred_instance_key_pattern")
    assert "instance_key" in str(info.value)


def test_pattern_in_a_batch_entry_needs_an_instance_key(invoke: Invoke) -> None:
    with pytest.raises(InvalidArgument) as info:
        invoke("add_jobs", settings={"instance_key": None}, queue="emails",
               jobs=[{"data": 1}, {"data": 2, "preferred_instance_key_pattern": "gpu"}])
    assert_names(info.value, "jobs[1].preferred_instance_key_pattern")


PORTABLE_PATTERNS = [
    "ram-8gb.*cpu-4cor",
    "^host-[0-9]+$",
    "gpu|tpu",
    r"(?i)ram-\d{1,3}gb",
    r"[a-z0-9_-]+",
    r"\w+\.example\.com\Z",
    r"\Ahost-\d+",
    "(?:eu|us)-(?=west)",
    "(?<=ram-)16gb",
    "[]a]",
    "[^]a]",
    "x{2,}?",
    "(a{255}){39}",
    "é|\U0001f600",
    "{}",
]


@pytest.mark.parametrize("pattern", PYTHON_ONLY_PATTERNS + DIFFERENT_MEANING_PATTERNS)
def test_pattern_outside_the_portable_subset_is_refused(invoke: Invoke, pattern: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        invoke("add_job", **job(preferred_instance_key_pattern=pattern))
    assert_names(info.value, "preferred_instance_key_pattern")


@pytest.mark.parametrize("pattern", PORTABLE_PATTERNS)
def test_portable_pattern_is_accepted(pattern: str) -> None:
    assert validation.regex("preferred_instance_key_pattern", pattern) == pattern


# --- payload size ---


@pytest.mark.parametrize("unit", ["x", "é", "\U0001f600", "\n", '"'])
def test_exact_string_helper_is_exact(unit: str) -> None:
    for size in (1000, 1001, 1002, 1003):
        encoded = validation.payload("data", exact_string(size, unit), 10 * size)
        assert len(encoded.encode()) == size


def test_payload_of_exactly_the_default_limit_passes(
    invoke: Invoke, network_attempts: list[str]
) -> None:
    data = exact_string(validation.DEFAULT_MAX_PAYLOAD_BYTES)
    assert validation.DEFAULT_MAX_PAYLOAD_BYTES == MIB
    with pytest.raises(NetworkAttempted):
        invoke("add_job", queue="emails", data=data)
    network_attempts.clear()


def test_payload_one_byte_over_the_default_limit_is_too_large(invoke: Invoke) -> None:
    with pytest.raises(PayloadTooLarge) as info:
        invoke("add_job", queue="emails", data=exact_string(MIB + 1))
    assert_names(info.value, "data")
    assert str(MIB + 1) in str(info.value)


@pytest.mark.parametrize("unit", ["x", "é", "\U0001f600", "\n"])
def test_custom_limit_counts_encoded_utf8_bytes(
    invoke: Invoke, network_attempts: list[str], unit: str
) -> None:
    # 1000 bytes of JSON, whatever the characters take: 1, 2 or 4 bytes, or an escape.
    settings = {"max_payload_bytes": 1000}
    with pytest.raises(NetworkAttempted):
        invoke("add_job", settings=settings, queue="emails", data=exact_string(1000, unit))
    network_attempts.clear()
    with pytest.raises(PayloadTooLarge) as info:
        invoke("add_job", settings=settings, queue="emails", data=exact_string(1001, unit))
    assert_names(info.value, "data")


def test_custom_limit_applies_to_a_structured_payload(
    invoke: Invoke, network_attempts: list[str]
) -> None:
    settings = {"max_payload_bytes": 64}
    envelope = len(json.dumps({"k": [1, ""]}, separators=(",", ":")))
    fits = {"k": [1, "y" * (64 - envelope)]}
    with pytest.raises(NetworkAttempted):
        invoke("add_job", settings=settings, queue="emails", data=fits)
    network_attempts.clear()
    with pytest.raises(PayloadTooLarge):
        invoke("add_job", settings=settings, queue="emails",
               data={"k": [1, "y" * (65 - envelope)]})


def test_batch_entry_over_the_limit_is_named(invoke: Invoke) -> None:
    with pytest.raises(PayloadTooLarge) as info:
        invoke("add_jobs", settings={"max_payload_bytes": 100}, queue="emails",
               jobs=[{"data": exact_string(100)}, {"data": exact_string(101)}])
    assert_names(info.value, "jobs[1].data")


def test_recurring_schedule_payload_is_limited_too(invoke: Invoke) -> None:
    with pytest.raises(PayloadTooLarge):
        invoke("add_job", settings={"max_payload_bytes": 100}, queue="emails",
               data=exact_string(101), schedule={"start_every_seconds": 60})


# --- payload encoding ---


def test_literal_backslash_u0000_text_is_not_a_nul() -> None:
    for text in ("\\u0000", "a\\u0000b", "\\\\u0000", "\\\\\\\\u0000"):
        encoded = validation.payload("data", {text: text}, MIB)
        assert json.loads(encoded) == {text: text}


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (1e16, "10000000000000000.0"),
        (-1.5e17, "-150000000000000000.0"),
        ([1e15, 1e16], "[1000000000000000.0,10000000000000000.0]"),
        ({"k": 2.5e20}, '{"k":250000000000000000000.0}'),
        (1e-7, "1e-07"),
        (0.1, "0.1"),
        (10**16, "10000000000000000"),
    ],
)
def test_big_floats_are_written_positionally(value: Any, encoded: str) -> None:
    # jsonb would read "1e+16" back as the int 10000000000000000.
    text = validation.payload("data", value, MIB)
    assert text == encoded
    assert json.loads(text) == value
    assert type(json.loads(text)) is type(value)


def test_big_float_expansion_counts_towards_the_limit() -> None:
    # 1e300 is 6 bytes as repr but 303 written positionally: the stored size counts.
    assert len(validation.payload("data", 1e300, MIB)) == 303
    with pytest.raises(PayloadTooLarge):
        validation.payload("data", 1e300, 100)


def test_max_float_round_trips_through_its_encoding() -> None:
    for value in (1.7976931348623157e308, -1.7976931348623157e308, 5e-324, 2.0**53):
        decoded = json.loads(validation.payload("data", [value], MIB))[0]
        assert decoded == value and type(decoded) is float


# --- constructors and migrate: the schema name and the other settings ---

HOSTILE_SCHEMAS = [
    'a"b',
    "a;drop",
    "a; DROP SCHEMA public CASCADE; --",
    "1abc",
    "x" * 49,
    "",
    "sch\u00e9ma",
    "\u0441chema",  # Cyrillic es
    "a b",
    "a-b",
    "a.b",
    "a\x00",
    "pg_catalog",
    "pg_toast",
    "pg_portqueue",
    "information_schema",
    None,
    5,
    b"portqueue",
]


@pytest.mark.parametrize("client_class", [PortQueue, AsyncPortQueue])
@pytest.mark.parametrize("schema", HOSTILE_SCHEMAS)
def test_hostile_schema_is_refused_by_the_constructors(client_class: type, schema: Any) -> None:
    async def construct() -> None:
        client_class(CLOSED_DSN, schema=schema)

    with pytest.raises(InvalidArgument) as info:
        asyncio.run(construct())
    assert_names(info.value, "schema")


@pytest.mark.parametrize("schema", HOSTILE_SCHEMAS)
def test_hostile_schema_is_refused_by_migrate(schema: Any) -> None:
    with pytest.raises(InvalidArgument) as info:
        migrate(CLOSED_DSN, schema=schema)
    assert_names(info.value, "schema")
    with pytest.raises(InvalidArgument) as info:
        migration_sql(schema=schema)
    assert_names(info.value, "schema")


@pytest.mark.parametrize("schema", ["portqueue", "_", "x" * 48, "Jobs_2", "PG_upper", "public"])
def test_ordinary_schema_names_are_accepted(schema: str, network_attempts: list[str]) -> None:
    assert PortQueue(CLOSED_DSN, schema=schema).schema == schema
    with pytest.raises(NetworkAttempted):
        migrate(CLOSED_DSN, schema=schema)
    network_attempts.clear()


BAD_SETTINGS = [
    ({"dsn": ""}, "dsn"),
    ({"dsn": None}, "dsn"),
    ({"instance_key": ""}, "instance_key"),
    ({"instance_key": "a\x00"}, "instance_key"),
    ({"instance_key": 8}, "instance_key"),
    ({"max_payload_bytes": 0}, "max_payload_bytes"),
    ({"max_payload_bytes": validation.MAX_PAYLOAD_BYTES_LIMIT + 1}, "max_payload_bytes"),
    ({"max_payload_bytes": True}, "max_payload_bytes"),
    ({"max_payload_bytes": 1024.0}, "max_payload_bytes"),
    ({"pool_min_size": 5, "pool_max_size": 2}, "pool_min_size"),
    ({"pool_min_size": -1}, "pool_min_size"),
    ({"pool_max_size": 0}, "pool_max_size"),
    ({"poll_only": "yes"}, "poll_only"),
    ({"application_name": ""}, "application_name"),
    ({"application_name": "a" * 41}, "application_name"),
    ({"default_retention_seconds": -1}, "default_retention_seconds"),
    ({"default_retention_seconds": 1.5}, "default_retention_seconds"),
]


@pytest.mark.parametrize("client_class", [PortQueue, AsyncPortQueue])
@pytest.mark.parametrize(("settings", "argument"), BAD_SETTINGS,
                         ids=[f"{a}-{i}" for i, (_, a) in enumerate(BAD_SETTINGS)])
def test_bad_setting_is_refused_by_the_constructors(
    client_class: type, settings: dict[str, Any], argument: str
) -> None:
    settings = {"dsn": CLOSED_DSN, **settings}

    async def construct() -> None:
        client_class(settings.pop("dsn"), **settings)

    with pytest.raises(InvalidArgument) as info:
        asyncio.run(construct())
    assert_names(info.value, argument)


def test_largest_payload_limit_is_accepted() -> None:
    limit = validation.MAX_PAYLOAD_BYTES_LIMIT
    assert PortQueue(CLOSED_DSN, max_payload_bytes=limit) is not None
