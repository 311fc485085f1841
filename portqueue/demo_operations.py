"""The statements ``portqueue demo`` runs, without I/O: its throwaway
schema's lock and mark, and the two figures of its summary, read from the
job rows (the database clock) rather than from timers."""

from __future__ import annotations

from collections.abc import Sequence

from portqueue.queries import Queries, Query


def lock(q: Queries, *, key: int) -> Query:
    """The demo's session-level advisory lock on its schema, without waiting."""
    return q("demo_lock", key=key)


def schema_comment(q: Queries, *, schema: str) -> Query:
    """The schema's comment; no row when there is no such schema."""
    return q("demo_schema_comment", schema=schema)


def drop_schema(q: Queries) -> Query:
    return q("demo_drop_schema")


def mark_schema(q: Queries) -> Query:
    return q("demo_mark_schema")


def throughput(q: Queries, *, job_ids: Sequence[str]) -> Query:
    """Jobs completed, and seconds from the first add to the last finish."""
    return q("demo_throughput", job_ids=list(job_ids))


def latency(q: Queries, *, job_ids: Sequence[str]) -> Query:
    """Commit-to-start p50 and p99 of the jobs' first attempts."""
    return q("demo_latency", job_ids=list(job_ids))
