"""Issue 22: one of two workers has its claim (``fetcher``, which the
heartbeat shares) or outcome (``worker``, the pool) connection black-holed (no FIN, no
RST: the server simply stops answering). It must log the failure with the
role's name (once per connection), replace the connection and go on; SIGTERM
must end it within its grace period while black-holed; and it must never run
a job twice. Both workers run ``outcome_app``, whose handler returns its
outcome for the worker to write, so every job's outcome goes through the
connections under test.

The victim runs ``tests.faults.short_deadlines``: every role's deadline is
STATEMENT_SECONDS instead of the production defaults. Leases are long, so a
lease lapsing is not what makes a job run twice (the heartbeat is replaced
long before)."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from portqueue import PortQueue
from tests.faults.harness import QUEUE, Fleet, Proc, count_where, ledger, link_in_use
from tests.faults.proxy import Proxy
from tests.support.waiting import wait_until

STATEMENT_SECONDS = 2.0
GRACE_SECONDS = 3.0
LEASE_SECONDS = 30
# stop()'s own margin (runtime.STOP_MARGIN_SECONDS), process start-up and exit
# on a loaded host.
EXIT_BOUND = GRACE_SECONDS + 2.0 + 4.0
APP = "tests.faults.outcome_app:pq"


def _forwarding(proxy: Proxy, role: str) -> int:
    return len([link for link in proxy.open_links(role) if link.forwarding])


def _deadline_lines(proc: Proc, role: str) -> int:
    return proc.log().count(f"the {role} connection did not answer")


def _runs_by(db: psycopg.Connection[Any], pid: int) -> dict[str, int]:
    runs: dict[str, int] = {}
    for row in ledger(db):
        if row["pid"] == pid:
            runs[row["job_id"]] = runs.get(row["job_id"], 0) + 1
    return runs


@pytest.mark.parametrize("role", ["fetcher", "worker"])
def test_a_black_holed_connection_of_one_worker_among_two(
    role: str, proxy: Proxy, pg_dsn: str, ledger_db: psycopg.Connection[Any], schema: str,
    pq: PortQueue, fleet: Fleet, tmp_path: Path,
) -> None:
    if proxy.upstream.host.startswith("/"):
        # The victim's sessions are found by the proxy's client ports in
        # pg_stat_activity, which a Unix-socket upstream (the embedded server)
        # does not have.
        pytest.skip("needs a TCP upstream: PORTQUEUE_TEST_DSN with a host")
    db = ledger_db
    (tmp_path / "victim").mkdir()
    victims = Fleet(proxy.dsn(pg_dsn), schema, tmp_path / "victim", db)
    job_ids: list[str] = []

    def add(count: int, sleep: float = 0.05) -> list[str]:
        added = [r.job_id for r in pq.add_jobs(
            queue=QUEUE, jobs=[{"data": {"sleep": sleep}}] * count) if r.job_id is not None]
        job_ids.extend(added)
        return added

    def all_completed() -> bool:
        return count_where(db, schema, job_ids, "completed") == len(job_ids)

    try:
        fleet.worker(lease_seconds=LEASE_SECONDS, grace_seconds=GRACE_SECONDS, app=APP)
        victim = victims.worker(
            lease_seconds=LEASE_SECONDS, grace_seconds=GRACE_SECONDS, maintenance=False, app=APP,
            module="tests.faults.short_deadlines", FAULT_STATEMENT_SECONDS=str(STATEMENT_SECONDS))
        add(8)
        wait_until(all_completed, 20, "the jobs before the fault")
        wait_until(lambda: link_in_use(proxy, db, role), 20, f"the victim's {role} connection")

        holed = proxy.blackhole(role)
        assert holed >= 1
        # Jobs long enough that the healthy worker (the queue's first
        # listener) cannot run them all before the victim's claim, a quarter
        # second after the wake-up (listener.PASS_SAFETY_SECONDS): with 50 ms
        # jobs it sometimes ran every one, and the victim wrote no outcome
        # on its black-holed pool.
        add(24, sleep=0.5)
        wait_until(lambda: _deadline_lines(victim, role), 40,
                   f"the victim to log its {role} connection's deadline")
        wait_until(all_completed, 60, "every job to complete after the black hole")
        # Replaced, and working again: a new link of the role forwards.
        wait_until(lambda: _forwarding(proxy, role), 30, f"a new {role} connection")
        assert _deadline_lines(victim, role) <= holed, "logged more than once per connection"

        # SIGTERM while black-holed again, with a claim and jobs in flight.
        proxy.blackhole(role)
        add(8, sleep=0.5)
        stopped_at = time.monotonic()
        victim.send(signal.SIGTERM)
        code = victim.wait(EXIT_BOUND + 30)
        took = time.monotonic() - stopped_at
        assert code == 0, victim.log()
        assert took < EXIT_BOUND, f"exited {took:.1f}s after SIGTERM\n{victim.log()}"
        wait_until(all_completed, 90, "the healthy worker to finish every job")
    finally:
        victims.close()

    twice = {job: runs for job, runs in _runs_by(db, victim.pid).items() if runs > 1}
    assert not twice, f"the victim ran jobs more than once: {twice}"
    assert count_where(db, schema, job_ids, "completed") == len(job_ids), "a job ended otherwise"
    print(f"[faults] {role} black hole: jobs={len(job_ids)} holed={holed} "
          f"victim_runs={sum(_runs_by(db, victim.pid).values())} exit_s={took:.1f}")
