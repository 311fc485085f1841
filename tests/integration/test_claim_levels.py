"""Issue 23: the claims read each range one priority level at a time (fragment
``ready_levels``), so that delayed jobs of a higher priority cost a claim
nothing (test_claim_plan.py counts the pages). The order they claim in is still
SPEC §4's: priority, then start_after, then insertion; a job not yet due is
never claimed; a per-key limit takes each key's first jobs in that order.

The levels are read lazily by a nested loop over a recursive CTE, in the order
the CTE yields them: an executor behaviour, so this runs on every server
major CI tests. Checked over random mixes of priorities, due and delayed jobs,
partition keys and patterns (one the worker matches, one it refuses), against
the order computed here from the rows, with each claim rolled back."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import psycopg
import pytest
from psycopg import sql

from portqueue import PortQueue
from portqueue.queries import Query
from tests.support.plans import claim_statement

Db = psycopg.Connection[Any]

QUEUE = "levels"
JOBS = 400
PRIORITIES = (-3, 0, 0, 0, 2, 7)
KEYS = ("a", "b", "c", "d", None)
SLOTS = (1, 5, 60, JOBS)  # the last takes every due job: every level is read
PER_KEY = 2
GLOBAL = 40
STATEMENTS = {"plain": "claim_plain", "keyed": "claim", "global": "claim_limited",
              "per_key": "claim_limited", "patterned": "claim",
              "patterned_global": "claim_limited", "patterned_per_key": "claim_limited"}
# The worker judged MATCHED to match its key and REFUSED not to.
MATCHED, REFUSED = "^here-", "^elsewhere-"
PATTERNS = (None, None, MATCHED, REFUSED)


def load(db: Db, schema: str, rng: random.Random, *, keyed: bool, patterned: bool) -> None:
    """JOBS pending jobs: random priorities, 60 % due (up to 1,000 s ago), the
    rest a day or more ahead; a random key each (or none) when ``keyed``, a
    random pattern (or none) when ``patterned``."""
    rows = [(rng.choice(PRIORITIES),
             -rng.uniform(1, 1_000) if rng.random() < 0.6 else 86_400 + rng.uniform(0, 1_000),
             rng.choice(KEYS) if keyed else None,
             rng.choice(PATTERNS) if patterned else None)
            for _ in range(JOBS)]
    with db.transaction():
        db.execute("SET LOCAL session_replication_role = replica")  # no NOTIFY per row
        with db.cursor() as cursor:
            cursor.executemany(sql.SQL(
                "INSERT INTO {} (id, queue, data, priority, start_after, partition_key, "
                "preferred_instance_key_pattern) VALUES (gen_random_uuid(), %s, '{{}}', %s, "
                "now() + make_interval(secs => %s), %s, %s)"
            ).format(sql.Identifier(schema, "job")),
                [(QUEUE, *row) for row in rows])


def due_in_claim_order(db: Db, schema: str) -> list[tuple[str, str | None]]:
    """(id, partition_key) of the due pending jobs this worker may run (none
    of a refused pattern), in SPEC §4's order."""
    return [(str(job_id), key) for job_id, key in db.execute(sql.SQL(
        "SELECT id, partition_key FROM {} WHERE queue = %s AND status = 'pending' "
        "AND start_after <= now() AND preferred_instance_key_pattern IS DISTINCT FROM %s "
        "ORDER BY priority DESC, start_after, seq").format(
            sql.Identifier(schema, "job")), [QUEUE, REFUSED]).fetchall()]


def expected(due: list[tuple[str, str | None]], slots: int, per_key: int | None) -> set[str]:
    """The first ``slots`` due jobs, each key's after its first ``per_key`` passed over."""
    taken: list[str] = []
    by_key: Counter[str] = Counter()
    for job_id, key in due:
        if len(taken) == slots:
            break
        if per_key is not None and key is not None:
            if by_key[key] == per_key:
                continue
            by_key[key] += 1
        taken.append(job_id)
    return set(taken)


def claimed(db: Db, query: Query) -> set[str]:
    with db.transaction(force_rollback=True):
        rows = db.execute(query.sql, dict(query.params)).fetchall()
    return {row[0] for row in rows if row[2] == "active"}


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("variant", list(STATEMENTS))
def test_a_claim_takes_the_first_due_jobs_in_claim_order(
    pq: PortQueue, db: Db, schema: str, variant: str, seed: int,
) -> None:
    rng = random.Random(f"{variant}-{seed}")
    patterned = variant.startswith("patterned")
    load(db, schema, rng, keyed=variant not in ("plain", "patterned"), patterned=patterned)
    limit = variant.removeprefix("patterned_")
    if limit == "global":
        pq.set_queue_limits(queue=QUEUE, global_concurrency=GLOBAL)
    if limit == "per_key":
        pq.set_queue_limits(queue=QUEUE, partition_concurrency=PER_KEY)
    due = due_in_claim_order(db, schema)
    assert 0 < len(due) < JOBS, "the mix has due and delayed jobs"
    for slots in SLOTS:
        budget = min(slots, GLOBAL) if limit == "global" else slots
        want = expected(due, budget, PER_KEY if limit == "per_key" else None)
        query = claim_statement(schema, STATEMENTS[variant], QUEUE, slots,
                                matching=[MATCHED] if patterned else [],
                                refused=[REFUSED] if patterned else [])
        assert claimed(db, query) == want, (variant, seed, slots)


@pytest.mark.parametrize("limit", ["global", "per_key"])
def test_a_limited_claim_reports_a_pattern_it_has_not_judged_and_claims_it_once_matched(
    pq: PortQueue, db: Db, schema: str, limit: str,
) -> None:
    """A pattern the worker has not judged takes no slot: the limited claim
    reports it ('unjudged', the pattern in data_json) and claims the other
    jobs; once judged to match, its jobs are claimed in claim order, and once
    refused they are neither claimed nor reported."""
    key = "k" if limit == "per_key" else None
    with db.transaction():
        db.execute("SET LOCAL session_replication_role = replica")
        db.execute(sql.SQL(
            "INSERT INTO {} (id, queue, data, priority, partition_key, "
            "preferred_instance_key_pattern) VALUES "
            "(gen_random_uuid(), %(q)s, '1', 5, %(key)s, %(pattern)s), "
            "(gen_random_uuid(), %(q)s, '2', 0, %(other)s, NULL)").format(
                sql.Identifier(schema, "job")),
            {"q": QUEUE, "key": key, "other": "other" if key else None, "pattern": MATCHED})
    if limit == "global":
        pq.set_queue_limits(queue=QUEUE, global_concurrency=GLOBAL)
    else:
        pq.set_queue_limits(queue=QUEUE, partition_concurrency=PER_KEY)

    def rows(**patterns: list[str]) -> list[tuple[str, str]]:
        query = claim_statement(schema, "claim_limited", QUEUE, 5, **patterns)
        with db.transaction(force_rollback=True):
            return sorted((row[2], row[3]) for row in db.execute(query.sql, dict(query.params)))

    assert rows() == [("active", "2"), ("unjudged", MATCHED)]
    assert rows(matching=[MATCHED]) == [("active", "1"), ("active", "2")]
    assert rows(refused=[MATCHED]) == [("active", "2")]
