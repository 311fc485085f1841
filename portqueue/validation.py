"""Argument checks. Everything here runs before any I/O and raises InvalidArgument.

Each rule says what it prevents: most stop a value that Postgres would reject
mid-transaction (aborting a caller's transaction), or one that would be stored
but could never behave as the caller meant.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from portqueue.errors import InvalidArgument, PayloadTooLarge
from portqueue.ids import uuid7
from portqueue.types import (
    Backoff,
    BackoffStrategy,
    CronSpec,
    JobStatus,
    PauseMode,
    Retention,
    RetryPolicy,
    Schedule,
)

INT32_MAX = 2**31 - 1
MAX_QUEUE_NAME = 128
MAX_KEY_LENGTH = 512
MAX_PAGE = 500
DEFAULT_PAGE = 50
DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024

# Quoted everywhere, but still restricted: the schema name also forms NOTIFY
# channel names, which Postgres truncates at 63 bytes.
_SCHEMA_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,47}")
# A NUL escape preceded by an even number of backslashes is a real U+0000,
# which jsonb cannot store ("unsupported Unicode escape sequence").
_JSON_NUL_RE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")

E = TypeVar("E")


def schema_name(value: object) -> str:
    if not isinstance(value, str) or not _SCHEMA_RE.fullmatch(value):
        raise InvalidArgument(
            "schema", f"must be a letter or _ then up to 47 letters, digits or _; got {value!r}"
        )
    return value


def text(argument: str, value: object, *, max_length: int = MAX_KEY_LENGTH) -> str:
    """A non-empty string Postgres can store as text (no NUL, no lone surrogate)."""
    if not isinstance(value, str):
        raise InvalidArgument(argument, f"must be a string, got {type(value).__name__}")
    if not 1 <= len(value) <= max_length:
        raise InvalidArgument(argument, f"must be 1 to {max_length} characters, got {len(value)}")
    if "\x00" in value:
        raise InvalidArgument(argument, "must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(argument, "must be valid Unicode (lone surrogate)") from exc
    return value


def queue_name(value: object, argument: str = "queue") -> str:
    return text(argument, value, max_length=MAX_QUEUE_NAME)


def optional_text(argument: str, value: object) -> str | None:
    return None if value is None else text(argument, value)


def integer(argument: str, value: object, *, minimum: int, maximum: int = INT32_MAX) -> int:
    # bool is an int subclass; True as a priority is always a mistake.
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(argument, f"must be an integer, got {type(value).__name__}")
    if not minimum <= value <= maximum:
        raise InvalidArgument(argument, f"must be between {minimum} and {maximum}, got {value}")
    return value


def optional_integer(
    argument: str, value: object, *, minimum: int, maximum: int = INT32_MAX
) -> int | None:
    return None if value is None else integer(argument, value, minimum=minimum, maximum=maximum)


def seconds(argument: str, value: object, *, minimum: int = 0) -> int | None:
    return optional_integer(argument, value, minimum=minimum)


def job_id(value: object, argument: str = "job_id") -> str:
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, str):
        try:
            return str(uuid.UUID(value))
        except ValueError:
            pass
    raise InvalidArgument(argument, f"must be a UUID string, got {value!r}")


def job_ids(value: object) -> list[str]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise InvalidArgument("job_ids", "must be a sequence of UUID strings")
    return [job_id(v, "job_ids") for v in value]


def statuses(value: object, *, allow_active: bool = True) -> list[JobStatus] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise InvalidArgument("statuses", "must be a sequence of JobStatus")
    result = []
    for item in value:
        try:
            status = JobStatus(item)
        except ValueError:
            raise InvalidArgument("statuses", f"unknown status {item!r}") from None
        if status is JobStatus.ACTIVE and not allow_active:
            # Deleting running jobs would let their workers write into nothing.
            raise InvalidArgument("statuses", "ACTIVE jobs cannot be removed; cancel them first")
        result.append(status)
    return result


def pause_mode(value: object) -> PauseMode:
    try:
        return PauseMode(value)
    except ValueError:
        raise InvalidArgument("mode", f"must be a PauseMode, got {value!r}") from None


def window(limit: object, offset: object) -> tuple[int, int]:
    return (
        integer("limit", limit, minimum=1, maximum=MAX_PAGE),
        integer("offset", offset, minimum=0),
    )


def payload(argument: str, value: object, max_bytes: int) -> str:
    """Encode ``value`` as JSON once; the text is what gets sent and stored."""
    try:
        encoded = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except ValueError as exc:  # NaN / Infinity: not JSON, and jsonb rejects them
        raise InvalidArgument(argument, f"is not JSON: {exc}") from None
    except TypeError as exc:
        raise InvalidArgument(argument, f"is not JSON-serialisable: {exc}") from None
    except RecursionError:
        raise InvalidArgument(argument, "is nested too deeply to encode") from None
    if "\\u0000" in encoded and _JSON_NUL_RE.search(encoded):
        raise InvalidArgument(argument, "contains a NUL character, which jsonb cannot store")
    try:
        size = len(encoded.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidArgument(argument, "contains a lone surrogate (invalid Unicode)") from None
    if size > max_bytes:
        raise PayloadTooLarge(argument, f"is {size} bytes encoded, over the {max_bytes} limit")
    return encoded


def regex(argument: str, value: object) -> str:
    pattern = text(argument, value)
    try:
        re.compile(pattern)
    except re.error as exc:
        raise InvalidArgument(argument, f"is not a valid regular expression: {exc}") from None
    return pattern


def _as_dataclass(argument: str, value: object, cls: type[E]) -> E:
    """Accept the dataclass itself or a dict with exactly its field names."""
    if isinstance(value, cls):
        return value
    if not isinstance(value, Mapping):
        raise InvalidArgument(argument, f"must be a {cls.__name__} or a dict")
    assert is_dataclass(cls)
    known = {f.name for f in fields(cls)}
    for key in value:
        if key not in known:
            raise InvalidArgument(
                f"{argument}.{key}", f"unknown option; expected one of {sorted(known)}"
            )
    return cls(**value)


def backoff(value: object, argument: str = "retry.backoff") -> Backoff:
    b = _as_dataclass(argument, value, Backoff)
    try:
        strategy = BackoffStrategy(b.strategy)
    except ValueError:
        raise InvalidArgument(f"{argument}.strategy", f"unknown strategy {b.strategy!r}") from None
    if isinstance(b.factor, bool) or not isinstance(b.factor, (int, float)):
        raise InvalidArgument(f"{argument}.factor", "must be a number")
    if not 1 <= b.factor <= 1000:
        raise InvalidArgument(f"{argument}.factor", f"must be between 1 and 1000, got {b.factor}")
    seconds(f"{argument}.max_delay_seconds", b.max_delay_seconds)
    if not isinstance(b.jitter, bool):
        raise InvalidArgument(f"{argument}.jitter", "must be a bool")
    return Backoff(strategy, float(b.factor), b.max_delay_seconds, b.jitter)


def retry_policy(value: object, argument: str = "retry") -> RetryPolicy | None:
    if value is None:
        return None
    r = _as_dataclass(argument, value, RetryPolicy)
    integer(f"{argument}.max_attempts", r.max_attempts, minimum=1, maximum=1_000_000)
    integer(f"{argument}.delay_seconds", r.delay_seconds, minimum=0)
    return RetryPolicy(r.max_attempts, r.delay_seconds, backoff(r.backoff, f"{argument}.backoff"))


def retention(value: object, argument: str = "retention") -> Retention | None:
    if value is None:
        return None
    r = _as_dataclass(argument, value, Retention)
    seconds(f"{argument}.ttl_seconds", r.ttl_seconds)
    optional_integer(f"{argument}.keep_completed", r.keep_completed, minimum=0)
    optional_integer(f"{argument}.keep_failed", r.keep_failed, minimum=0)
    return r


def cron_spec(value: object) -> CronSpec:
    spec = (
        CronSpec(value)
        if isinstance(value, str)
        else _as_dataclass("schedule.cron", value, CronSpec)
    )
    pattern = text("schedule.cron.pattern", spec.pattern, max_length=256)
    if not croniter.is_valid(pattern):
        raise InvalidArgument(
            "schedule.cron.pattern", f"is not a valid cron expression: {pattern!r}"
        )
    tz = text("schedule.cron.tz", spec.tz, max_length=64)
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidArgument("schedule.cron.tz", f"unknown IANA time zone {tz!r}") from None
    return CronSpec(pattern, tz)


def schedule(value: object) -> Schedule | None:
    if value is None:
        return None
    s = _as_dataclass("schedule", value, Schedule)
    modes = [
        m
        for m in ("start_after_seconds", "start_every_seconds", "cron")
        if getattr(s, m) is not None
    ]
    if len(modes) != 1:
        raise InvalidArgument(
            "schedule",
            f"pass exactly one of start_after_seconds, "
            f"start_every_seconds, cron; got {modes or 'none'}",
        )
    return Schedule(
        start_after_seconds=seconds("schedule.start_after_seconds", s.start_after_seconds),
        start_every_seconds=seconds(
            "schedule.start_every_seconds", s.start_every_seconds, minimum=1
        ),
        cron=None if s.cron is None else cron_spec(s.cron),
    )


@dataclass(frozen=True)
class JobSpec:
    """One validated job to add. ``None`` means "the queue's default, else the built-in one"."""

    id: str
    data_json: str
    priority: int
    start_after_seconds: int
    retry: RetryPolicy | None
    expire_in_seconds: int | None
    retention_ttl_seconds: int | None
    timeout_seconds: int | None
    preferred_instance_key_pattern: str | None
    idempotency_key: str | None
    singleton_key: str | None
    group_id: str | None

    def as_json(self) -> str:
        """This entry as a JSON object, embedding the already-encoded data verbatim."""
        options: dict[str, Any] = {
            "id": self.id,
            "priority": self.priority,
            "start_after_seconds": self.start_after_seconds,
            "expire_in_seconds": self.expire_in_seconds,
            "retention_ttl_seconds": self.retention_ttl_seconds,
            "timeout_seconds": self.timeout_seconds,
            "preferred_instance_key_pattern": self.preferred_instance_key_pattern,
            "idempotency_key": self.idempotency_key,
            "singleton_key": self.singleton_key,
            "group_id": self.group_id,
        }
        if self.retry is not None:
            options.update(retry_columns(self.retry))
        head = json.dumps(options, ensure_ascii=False, separators=(",", ":"))
        return f'{head[:-1]},"data":{self.data_json}}}'


def retry_columns(retry: RetryPolicy) -> dict[str, Any]:
    """A retry policy as the column names the job and queue tables use."""
    return {
        "max_attempts": retry.max_attempts,
        "retry_delay_seconds": retry.delay_seconds,
        "backoff_strategy": retry.backoff.strategy.value,
        "backoff_factor": retry.backoff.factor,
        "backoff_max_delay_seconds": retry.backoff.max_delay_seconds,
        "backoff_jitter": retry.backoff.jitter,
    }


JOB_OPTION_KEYS = frozenset(
    {
        "data",
        "schedule",
        "priority",
        "retry",
        "expire_in_seconds",
        "retention",
        "preferred_instance_key_pattern",
        "idempotency_key",
        "singleton_key",
        "group_id",
        "timeout_seconds",
    }
)


def job_spec(
    options: Mapping[str, Any],
    *,
    instance_key: str | None,
    max_payload_bytes: int,
    prefix: str = "",
) -> tuple[JobSpec, Schedule | None]:
    """Validate one add's options; returns the spec and its schedule (if any)."""
    for key in options:
        if key not in JOB_OPTION_KEYS:
            raise InvalidArgument(f"{prefix}{key}", "unknown option")
    if "data" not in options:
        raise InvalidArgument(f"{prefix}data", "is required")
    sched = schedule(options.get("schedule"))
    pattern = options.get("preferred_instance_key_pattern")
    if pattern is not None:
        pattern = regex(f"{prefix}preferred_instance_key_pattern", pattern)
        if instance_key is None:
            # The pattern is matched against claimers' keys; a producer without
            # one has no notion of instances, so the pattern is almost surely a bug.
            raise InvalidArgument(
                f"{prefix}preferred_instance_key_pattern",
                "requires the client to have an instance_key",
            )
    ret = retention(options.get("retention"), f"{prefix}retention")
    if ret is not None and (ret.keep_completed is not None or ret.keep_failed is not None):
        raise InvalidArgument(f"{prefix}retention", "keep_completed/keep_failed are queue options")
    spec = JobSpec(
        id=uuid7(),
        data_json=payload(f"{prefix}data", options["data"], max_payload_bytes),
        priority=integer(
            f"{prefix}priority", options.get("priority", 0), minimum=-INT32_MAX, maximum=INT32_MAX
        ),
        start_after_seconds=(sched.start_after_seconds or 0) if sched else 0,
        retry=retry_policy(options.get("retry"), f"{prefix}retry"),
        expire_in_seconds=seconds(
            f"{prefix}expire_in_seconds", options.get("expire_in_seconds"), minimum=1
        ),
        retention_ttl_seconds=None if ret is None else ret.ttl_seconds,
        timeout_seconds=seconds(
            f"{prefix}timeout_seconds", options.get("timeout_seconds"), minimum=1
        ),
        preferred_instance_key_pattern=pattern,
        idempotency_key=optional_text(f"{prefix}idempotency_key", options.get("idempotency_key")),
        singleton_key=optional_text(f"{prefix}singleton_key", options.get("singleton_key")),
        group_id=optional_text(f"{prefix}group_id", options.get("group_id")),
    )
    return spec, sched


def job_entries(jobs: object) -> list[Mapping[str, Any]]:
    if isinstance(jobs, (str, bytes, Mapping)) or not isinstance(jobs, Sequence):
        raise InvalidArgument("jobs", "must be a list of job option dicts")
    for index, entry in enumerate(jobs):
        if not isinstance(entry, Mapping):
            raise InvalidArgument(f"jobs[{index}]", "must be a dict of job options")
    return list(jobs)


def batch_tx(tx: object, jobs: object) -> object:
    """The one transaction a batch runs in: the call's, or the one all entries name.

    add_jobs is one INSERT, so entries cannot be split across transactions:
    either no entry names a tx, or every entry names the same one."""
    entry_txs = [entry.get("tx") for entry in job_entries(jobs)]
    named = [t for t in entry_txs if t is not None]
    if not named:
        return tx
    for index, entry_tx in enumerate(entry_txs):
        if entry_tx is not named[0] or (tx is not None and entry_tx is not tx):
            raise InvalidArgument(f"jobs[{index}].tx", "every entry must share the same tx")
    return named[0]
