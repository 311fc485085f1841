"""Flow control (SPEC §8) held by several worker PROCESSES racing for one queue.

Each test samples the job table while the workers drain (every few
milliseconds, from the test's own session): the limits are read off the rows,
never off the workers' own accounts. The workers run this worktree's code
(``python -m portqueue.cli`` from the repository root).
"""

from __future__ import annotations

import signal
from collections import Counter
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql

from portqueue import PortQueue
from tests.faults.harness import Fleet, Proc
from tests.support.waiting import wait_until

APP = "tests.faults.flow_control_app:pq"
QUEUE = "flow"  # tests/faults/flow_control_app.py
WORKERS = 3


class Sampler:
    """The queue's active jobs per partition key, read each time ``done`` is polled."""

    def __init__(self, db: psycopg.Connection[Any], schema: str) -> None:
        self.db = db
        self.job = sql.Identifier(schema, "job")
        self.samples: list[Counter[str | None]] = []

    def active(self) -> Counter[str | None]:
        rows = self.db.execute(sql.SQL(
            "SELECT partition_key, count(*) FROM {} WHERE queue = %s AND status = 'active' "
            "GROUP BY partition_key").format(self.job), [QUEUE]).fetchall()
        return Counter({key: int(n) for key, n in rows})

    def done(self) -> bool:
        """Take a sample; True once no job of the queue is pending or active."""
        self.samples.append(self.active())
        (left,) = self.db.execute(sql.SQL(
            "SELECT count(*) FROM {} WHERE queue = %s AND status IN ('pending', 'active')"
        ).format(self.job), [QUEUE]).fetchone() or (0,)
        return left == 0

    def peak(self) -> int:
        return max(sum(sample.values()) for sample in self.samples)

    def statuses(self) -> dict[str, int]:
        rows = self.db.execute(sql.SQL(
            "SELECT status::text, count(*) FROM {} WHERE queue = %s GROUP BY 1"
        ).format(self.job), [QUEUE]).fetchall()
        return {status: int(n) for status, n in rows}


def workers(fleet: Fleet, count: int = WORKERS, **env: Any) -> list[Proc]:
    return [fleet.worker(module="portqueue.cli", app=APP, **env) for _ in range(count)]


def stop(procs: list[Proc]) -> None:
    for proc in procs:
        if proc.alive():
            proc.send(signal.SIGTERM)
    for proc in procs:
        proc.wait(30)


def test_global_concurrency_holds_across_three_worker_processes_and_is_reached(
    pq: PortQueue, fleet: Fleet, db: psycopg.Connection[Any], schema: str,
) -> None:
    procs = workers(fleet, concurrency=8, FLOW_GLOBAL="5")
    pq.add_jobs(queue=QUEUE, jobs=[{"data": {"sleep": 0.15}} for _ in range(60)])
    sampler = Sampler(db, schema)
    wait_until(sampler.done, 60, "the queue to drain", interval=0.005)
    stop(procs)
    assert sampler.peak() == 5, f"peak {sampler.peak()} active with global_concurrency=5"
    assert sampler.statuses() == {"completed": 60}
    # No attempt was spent on a job held back by the limit.
    (attempts,) = db.execute(sql.SQL("SELECT max(attempt) FROM {} WHERE queue = %s").format(
        sql.Identifier(schema, "job")), [QUEUE]).fetchone() or (0,)
    assert attempts == 1


def test_partition_concurrency_holds_per_key_while_keys_run_in_parallel(
    pq: PortQueue, fleet: Fleet, db: psycopg.Connection[Any], schema: str,
) -> None:
    procs = workers(fleet, concurrency=6, FLOW_PARTITION="1")
    keys = ["a", "b", "c", "d"]
    # Key a's jobs come first in claim order: a key at its limit must not hold
    # the others up behind it.
    jobs = [{"data": {"sleep": 0.1}, "partition_key": key} for key in keys for _ in range(6)]
    jobs += [{"data": {"sleep": 0.1}} for _ in range(6)]  # no key: not limited by it
    pq.add_jobs(queue=QUEUE, jobs=jobs)
    sampler = Sampler(db, schema)
    wait_until(sampler.done, 60, "the queue to drain", interval=0.005)
    stop(procs)
    per_key = {key: max(sample[key] for sample in sampler.samples) for key in keys}
    assert per_key == dict.fromkeys(keys, 1)
    parallel = max(sum(1 for key in keys if sample[key]) for sample in sampler.samples)
    assert parallel >= 3, f"at most {parallel} keys ran at once"
    assert max(sample[None] for sample in sampler.samples) >= 2
    assert sampler.statuses() == {"completed": len(jobs)}


def test_rate_limit_holds_over_every_window_by_started_at(
    pq: PortQueue, fleet: Fleet, db: psycopg.Connection[Any], schema: str,
) -> None:
    procs = workers(fleet, concurrency=4, FLOW_RATE="4/1")
    pq.add_jobs(queue=QUEUE, jobs=[{"data": {}} for _ in range(14)])
    sampler = Sampler(db, schema)
    wait_until(sampler.done, 30, "the queue to drain", interval=0.02)
    stop(procs)
    starts = [at for (at,) in db.execute(sql.SQL(
        "SELECT started_at FROM {} WHERE queue = %s ORDER BY started_at").format(
            sql.Identifier(schema, "job")), [QUEUE]).fetchall()]
    assert len(starts) == 14
    window = timedelta(seconds=1)
    for first in starts:
        inside = sum(1 for at in starts if first <= at < first + window)
        assert inside <= 4, f"{inside} starts within 1 s of {first}"
    # 14 starts at 4 a second span at least three full windows.
    assert starts[-1] - starts[0] >= 3 * window
    # The workers waited for the window rather than failing or spending attempts.
    assert sampler.statuses() == {"completed": 14}


def test_set_queue_limits_takes_effect_in_running_workers_within_seconds(
    pq: PortQueue, fleet: Fleet, db: psycopg.Connection[Any], schema: str,
) -> None:
    procs = workers(fleet, count=2, concurrency=6, FLOW_GLOBAL="2")
    pq.add_jobs(queue=QUEUE, jobs=[{"data": {"sleep": 0.2}} for _ in range(200)])
    sampler = Sampler(db, schema)
    wait_until(lambda: sum(sampler.active().values()) == 2, 20, "2 active jobs")
    pq.set_queue_limits(queue=QUEUE, global_concurrency=7)
    wait_until(lambda: sum(sampler.active().values()) == 7, 5, "7 active jobs once raised")
    pq.set_queue_limits(queue=QUEUE, global_concurrency=3)
    # The jobs running when it was lowered finish (0.2 s); none starts past it.
    wait_until(lambda: sum(sampler.active().values()) <= 3, 5, "at most 3 active once lowered")
    for _ in range(100):
        sampler.done()
    assert sampler.peak() <= 3
    info = pq.get_queue(queue=QUEUE)
    assert info is not None and info.global_concurrency == 3
    stop(procs)


def test_a_sigkilled_workers_slots_come_back_once_its_leases_are_rescued(
    pq: PortQueue, fleet: Fleet, db: psycopg.Connection[Any], schema: str,
) -> None:
    victim = fleet.worker(module="portqueue.cli", app=APP, concurrency=4, lease_seconds=1,
                          FLOW_GLOBAL="3")
    # Each job works 60 s the first time: the victim holds all three slots.
    pq.add_jobs(queue=QUEUE, jobs=[{"data": {"sleep_first": 60}} for _ in range(3)])
    sampler = Sampler(db, schema)
    wait_until(lambda: sum(sampler.active().values()) == 3, 20, "the victim to hold 3 slots")
    survivor = fleet.worker(module="portqueue.cli", app=APP, concurrency=4, lease_seconds=1,
                            FLOW_GLOBAL="3")
    pq.add_jobs(queue=QUEUE, jobs=[{"data": {"sleep": 0.05}} for _ in range(3)])
    for _ in range(50):
        sampler.done()
    assert sampler.peak() == 3, "the survivor claimed past the limit the victim held"
    assert sampler.statuses() == {"active": 3, "pending": 3}
    victim.send(signal.SIGKILL)
    assert victim.wait(10) == -signal.SIGKILL
    # The survivor's rescuer frees the slots (the leases lapse after 1 s); the
    # jobs run again, quickly, and the ones never started run too.
    try:
        wait_until(sampler.done, 30, "the queue to drain after the rescue", interval=0.005)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {sampler.statuses()}\n{survivor.log()}") from None
    stop([survivor])
    assert sampler.peak() == 3
    assert sampler.statuses() == {"completed": 6}
