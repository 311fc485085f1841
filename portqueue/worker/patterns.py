"""Which ``preferred_instance_key_pattern``s this worker's key matches, judged once each.

The claim never evaluates a pattern: a pattern PostgreSQL refuses would fail
every claim that met it, in every queue of the worker, and one slow to compile
(PostgreSQL caches 32 compiled patterns per session) would cost every claim
again. Instead the claim takes two lists from here: the patterns judged to
match this worker's key (claimable) and those judged not to. The claim reads
the jobs of the matching patterns only (job_claim_patterned_idx holds pending
patterned jobs by pattern), so the jobs of a refused pattern cost it nothing.
A pattern of pending jobs in neither list comes back as a row of status
``unjudged`` with its pattern in ``data_json``, taking no slot, and the
worker judges those patterns before its next claim.

A judgement is one statement per pattern, under a deadline of its own: a
pattern refused, or over the deadline, is judged "no match" and the jobs naming
it are left to other workers (or to their expiry). Producers refuse such
patterns at add (``operations.check_patterns``); this is the defence for rows
written any other way. Costs: docs/performance.md, "Patterned jobs".
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import psycopg

from portqueue import worker_operations as ops
from portqueue.driver import execute_async, sqlstate
from portqueue.operations import PATTERN_DEADLINE_MS, PATTERN_REFUSALS
from portqueue.queries import Queries

log = logging.getLogger("portqueue.worker")

UNJUDGED = "unjudged"
"""The status of a claim row that only reports a pattern not judged yet."""

# Twice the producers' deadline: a pattern they accepted still passes on a
# busy server, and judging one never stalls the fetcher for long.
JUDGE_DEADLINE_MS = 2 * PATTERN_DEADLINE_MS
# Patterns judged between two claims: bounds the fetcher's pause (each takes
# at most the deadline) when a backlog names many new ones at once.
MAX_JUDGED_PER_CLAIM = 4
# Verdicts kept: both lists go with every claim, so they are bounded twice, by
# count (the worker's memory, the claim's hash of them) and by the bytes of
# pattern text (what every claim sends). The least recently judged is
# forgotten first, and judged again if a claim meets it again. A forgotten
# pattern comes back as an unjudged row until it is judged again, and more
# distinct patterns than are kept would be judged in turn forever: the
# bounds are set far above any real mix of patterns, for what one worker's
# memory and one claim's parameters afford (the byte bound is the old worst
# case, 1,000 patterns of the 256 characters producers allow).
MAX_VERDICTS = 20_000
MAX_VERDICT_BYTES = 256 * 1_024
# A pattern over the deadline may only have met a busy server: judged again
# after this long, where an invalid one is never.
REJUDGE_TIMED_OUT_SECONDS = 300.0

_TIMED_OUT = "57014"


class PatternVerdicts:
    """One worker's verdicts, for its ``instance_key`` (None matches no pattern)."""

    def __init__(self, instance_key: str | None) -> None:
        self.instance_key = instance_key
        self._verdicts: OrderedDict[str, bool] = OrderedDict()
        self._bytes = 0  # the UTF-8 bytes of the patterns in _verdicts
        self._rejudge_at: dict[str, float] = {}
        self._params: dict[str, list[str]] = {"matching_patterns": [], "refused_patterns": []}
        # The lists are rebuilt once per claim that follows a change, not once
        # per verdict: with many verdicts a rebuild is the costly part.
        self._stale = False

    def claim_params(self) -> dict[str, list[str]]:
        """The claim's ``matching_patterns`` and ``refused_patterns``."""
        if self._rejudge_at:
            now = time.monotonic()
            for pattern in [p for p, at in self._rejudge_at.items() if at <= now]:
                self._forget(pattern)
        if self._stale:
            self._stale = False
            self._params = {
                "matching_patterns": [p for p, matches in self._verdicts.items() if matches],
                "refused_patterns": [p for p, matches in self._verdicts.items() if not matches],
            }
        return self._params

    async def judge_unjudged(
        self, conn: psycopg.AsyncConnection[Any], q: Queries, rows: Sequence[Any]
    ) -> None:
        """Judge the patterns of a claim's ``unjudged`` rows (a few per claim).

        Never raises: it runs between the claim's commit and the start of the
        jobs it claimed, which an error here would leave active with no runner
        until their leases lapse. A pattern it could not judge (the connection
        failed) stays unjudged; the next claim finds the connection broken."""
        if not any(row.status == UNJUDGED for row in rows):
            return  # the common claim: nothing to judge, nothing to rebuild
        new = list(dict.fromkeys(row.data_json for row in rows if row.status == UNJUDGED))
        for pattern in new[:MAX_JUDGED_PER_CLAIM]:
            if pattern in self._verdicts:
                continue
            verdict = await self._judge(conn, q, pattern)
            if verdict is None:
                break
            self._remember(pattern, verdict)
        self._rebuild()

    async def _judge(
        self, conn: psycopg.AsyncConnection[Any], q: Queries, pattern: str
    ) -> bool | None:
        """Whether this worker's key matches ``pattern``; None if it could not tell."""
        if self.instance_key is None:
            return False  # what `NULL ~ pattern` would say, without compiling it
        try:
            async with conn.transaction():
                await execute_async(conn, ops.pattern_check_deadline(
                    q, milliseconds=JUDGE_DEADLINE_MS))
                rows = await execute_async(conn, ops.check_pattern(
                    q, instance_key=self.instance_key, pattern=pattern))
        except psycopg.Error as error:
            state = sqlstate(error)
            if state not in PATTERN_REFUSALS or conn.broken:
                log.warning("could not judge preferred_instance_key_pattern %r (%s); "
                            "it is judged at a later claim", pattern, error)
                return None
            if state == _TIMED_OUT:
                self._rejudge_at[pattern] = time.monotonic() + REJUDGE_TIMED_OUT_SECONDS
            # Once per pattern per worker (verdicts are kept), not once per claim.
            log.warning("preferred_instance_key_pattern %r is never matched by this worker: "
                        "PostgreSQL %s", pattern,
                        f"took over {JUDGE_DEADLINE_MS} ms" if state == _TIMED_OUT else
                        f"refuses it ({error})")
            return False
        return ops.pattern_matches(rows)

    def to_judge(self, patterns: Sequence[str]) -> list[str]:
        """The distinct ``patterns`` not judged yet, as many as one claim judges
        (a pull consumer judges them through its client, ``portqueue.pull``)."""
        new = [p for p in dict.fromkeys(patterns) if p not in self._verdicts]
        return new[:MAX_JUDGED_PER_CLAIM]

    def remember(self, pattern: str, matches: bool, *, timed_out: bool = False) -> None:
        """Record a verdict judged outside ``judge_unjudged``; one reached by
        running out of time is judged again later, as there."""
        if timed_out:
            self._rejudge_at[pattern] = time.monotonic() + REJUDGE_TIMED_OUT_SECONDS
        self._remember(pattern, matches)
        self._rebuild()

    def _remember(self, pattern: str, matches: bool) -> None:
        if pattern not in self._verdicts:
            self._bytes += len(pattern.encode("utf-8", "surrogatepass"))
        self._verdicts[pattern] = matches
        # A single pattern over the byte bound (written by SQL) is still kept,
        # alone: it is judged once, not at every claim that meets it.
        while len(self._verdicts) > MAX_VERDICTS or (
                self._bytes > MAX_VERDICT_BYTES and len(self._verdicts) > 1):
            oldest = next(iter(self._verdicts))
            self._forget(oldest)
        self._stale = True

    def _forget(self, pattern: str) -> None:
        if self._verdicts.pop(pattern, None) is not None:
            self._bytes -= len(pattern.encode("utf-8", "surrogatepass"))
        self._rejudge_at.pop(pattern, None)
        self._stale = True

    def _rebuild(self) -> None:
        self._stale = True
