"""One benchmark process: a worker or a producer for one system.

Started by run.py with the bench venv's python; talks back through stdout,
one JSON object per line prefixed with "@". Events:

  {"ev": "first", "ts": …}             the worker's handler ran for the first time
  {"ev": "progress", "n": …, "ts": …, "rss": …}   every --report-every jobs
  {"ev": "job", "seq": …, "ts": …}     latency mode: every handler start
  {"ev": "result", …}                  a producer's timings
  {"ev": "exit"}                       the worker stopped cleanly (after SIGTERM)

Usage:
  child.py worker SYSTEM DSN --settings JSON [--report-every N] [--per-job]
  child.py produce SYSTEM DSN --settings JSON --mode single|bulk|paced --n N
           [--batch B] [--rate R]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import threading
import time
from typing import Any

import psutil
import systems


def emit(**event: Any) -> None:
    sys.stdout.write("@" + json.dumps(event) + "\n")
    sys.stdout.flush()


def rss() -> int:
    return psutil.Process(os.getpid()).memory_info().rss


class Recorder:
    """What every handler does first: count, time, report. Cheap on purpose."""

    def __init__(self, report_every: int, per_job: bool) -> None:
        self.count = 0
        self.report_every = report_every
        self.per_job = per_job
        self.lock = threading.Lock()

    def __call__(self, payload: dict[str, Any]) -> None:
        now = time.time()
        with self.lock:
            self.count += 1
            count = self.count
        if count == 1:
            emit(ev="first", ts=now, rss=rss())
        if self.per_job:
            emit(ev="job", seq=payload.get("seq"), ts=now)
        if count % self.report_every == 0:
            emit(ev="progress", n=count, ts=now, rss=rss())


def worker(args: argparse.Namespace) -> None:
    system = systems.get(args.system)
    settings = json.loads(args.settings)
    recorder = Recorder(args.report_every, args.per_job)
    if getattr(system, "sync_worker", False):
        stop_flag = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop_flag.set())
        emit(ev="ready", rss=rss())
        system.work_sync(args.dsn, settings, recorder, stop_flag)
    else:
        async def main() -> None:
            stop = asyncio.Event()
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
            emit(ev="ready", rss=rss())
            await system.work(args.dsn, settings, recorder, stop)

        asyncio.run(main())
    emit(ev="exit", n=recorder.count, rss=rss())


def produce(args: argparse.Namespace) -> None:
    system = systems.get(args.system)
    settings = json.loads(args.settings)

    async def main() -> None:
        producer = await system.producer(args.dsn, settings)
        try:
            if args.mode == "single":
                # warm-up: connections opened, statements prepared; not timed
                for i in range(20):
                    await producer.add_one({"seq": -1 - i})
                start = time.perf_counter()
                for i in range(args.n):
                    await producer.add_one({"seq": i})
                emit(ev="result", seconds=time.perf_counter() - start, n=args.n)
            elif args.mode == "bulk":
                await producer.add_many([{"seq": -1 - i} for i in range(args.batch)])
                batches = [[{"seq": i} for i in range(start, min(start + args.batch, args.n))]
                           for start in range(0, args.n, args.batch)]
                start = time.perf_counter()
                for batch in batches:
                    await producer.add_many(batch)
                emit(ev="result", seconds=time.perf_counter() - start, n=args.n)
            elif args.mode == "paced":
                # ~rate jobs/s on a fixed schedule; each job's payload carries the
                # producer's clock before the add, and the commit time is kept too.
                sent: list[tuple[float, float]] = []
                t0 = time.time() + 0.2
                for i in range(args.n):
                    delay = t0 + i / args.rate - time.time()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    before = time.time()
                    await producer.add_one({"seq": i, "t": before})
                    sent.append((before, time.time()))
                emit(ev="result", sent=sent)
        finally:
            await producer.close()

    asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["worker", "produce"])
    parser.add_argument("system")
    parser.add_argument("dsn")
    parser.add_argument("--settings", default="{}")
    parser.add_argument("--report-every", type=int, default=200)
    parser.add_argument("--per-job", action="store_true")
    parser.add_argument("--mode", choices=["single", "bulk", "paced"])
    parser.add_argument("--n", type=int, default=0)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=100.0)
    args = parser.parse_args()
    if args.role == "worker":
        worker(args)
    else:
        produce(args)


if __name__ == "__main__":
    main()
