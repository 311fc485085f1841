"""A ``JobSnapshot`` built in memory, for unit tests of code that reads one
(metrics' start latency): every field a plain default, the times given as
seconds after a fixed base."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from portqueue import JobSnapshot, JobStatus


def snapshot(**fields: Any) -> JobSnapshot:
    base = datetime(2026, 1, 1, tzinfo=timezone.utc)
    values: dict[str, Any] = {
        "job_id": "0", "queue": "q", "status": JobStatus.ACTIVE, "data": None, "priority": 0,
        "attempt": 1, "max_attempts": 3, "group_id": None, "idempotency_key": None,
        "singleton_key": None, "preferred_instance_key_pattern": None, "schedule_id": None,
        "created_at": base, "start_after": base, "started_at": None, "finished_at": None,
        "expire_at": None, "retention_ttl_seconds": None, "output": None, "errors": [],
        "progress": None, "attrs": {}, "cancel_requested": False, "source_job_id": None,
    }
    values.update({k: base + timedelta(seconds=v) if isinstance(v, float) else v
                   for k, v in fields.items()})
    names = JobSnapshot.__dataclass_fields__
    return JobSnapshot(**{k: v for k, v in values.items() if k in names},
                       **{k: None for k in names if k not in values})
