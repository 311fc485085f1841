"""The systems under test, each behind the same small surface.

Every system has: a database of its own; ``setup`` (its own schema install);
a producer (``add_one`` / ``add_many``); a worker (``work``) that calls
``on_job(payload)`` as the first thing its handler does and returns once
``stop`` is set; ``remaining_sql``, counting the drain jobs not yet finished;
and ``load_background``, which writes finished and future-delayed jobs in the
system's own table layout with ``INSERT … SELECT generate_series``.

Payloads are small JSON objects ``{"seq": n}`` (latency adds ``"t"``).
``settings`` are the tunables (concurrency, batch size, client flavour);
``DEFAULTS`` holds the best setting found for each system (see README).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

QUEUE = "bench"
OnJob = Callable[[dict[str, Any]], None]

# The best setting found for each system on this machine (README: "Settings").
DEFAULTS: dict[str, dict[str, Any]] = {
    "portqueue": {"concurrency": 100, "client": "sync"},
    "procrastinate": {"concurrency": 20, "pool_max_size": 24},
    "pgqueuer": {"batch_size": 100, "driver": "asyncpg"},
    "rawsql": {"batch_size": 100},
    "listen_notify": {},
    # The Node peers (bench/node): graphile-worker prefetches localQueue.size jobs per
    # fetch and batches completions; pg-boss polls, batch_size jobs per fetch loop.
    "graphile-worker": {"concurrency": 100, "local_queue_size": 500, "poll_interval_ms": 2000,
                        "complete_batch_delay_ms": 0},
    "pg-boss": {"batch_size": 500, "workers": 4, "polling_interval_s": 0.5, "pool_max": 10},
}

SYSTEMS = ["portqueue", "graphile-worker", "pg-boss", "procrastinate", "pgqueuer", "rawsql"]
NODE_SYSTEMS = ["graphile-worker", "pg-boss"]


def worker_dsn(dsn: str, settings: dict[str, Any]) -> str:
    """The worker's DSN: with ``worker_synchronous_commit`` set (portqueue and raw SQL
    only, e.g. ``--set portqueue.worker_synchronous_commit=off``), every session the
    worker opens commits that way. Producers stay durable. Not a default: the
    benchmark compares durable systems (README: "Durability opt-in")."""
    mode = settings.get("worker_synchronous_commit")
    if not mode:
        return dsn
    return make_conninfo(dsn, options=f"-c synchronous_commit={mode}")


# BENCH_DB_PREFIX: another prefix lets two benches share a server without dropping each
# other's databases (every scenario drops and creates its own).
DB_PREFIX = os.environ.get("BENCH_DB_PREFIX", "bench")


def database(system: str) -> str:
    if system == "listen_notify":
        return f"{DB_PREFIX}_rawsql"
    return f"{DB_PREFIX}_{system.replace('@', '_').replace('-', '_')}"


def is_variant(system: str) -> bool:
    """``portqueue@REV``: portqueue's code on a schema migrated only to revision REV,
    to A/B a migration in one run (README: "A/B of a migration")."""
    return system.startswith("portqueue@") and len(system) > len("portqueue@")


class Producer:
    async def add_one(self, payload: dict[str, Any]) -> None:
        raise NotImplementedError

    async def add_many(self, payloads: list[dict[str, Any]]) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        pass


# --------------------------------------------------------------------------- portqueue


# ids are UUIDv7 like portqueue's own (48-bit millisecond prefix) for a timestamp {ts}
# dated before the drain jobs, so they sit to the left of them in the pkey (and below the
# drain's first id, which remaining_sql counts from).
PORTQUEUE_UUID7 = ("(lpad(to_hex((extract(epoch FROM {ts}) * 1000)::bigint), 12, '0')"
                   " || '7' || substr(md5(g::text), 1, 3) || '8'"
                   " || substr(md5(random()::text), 1, 15))::uuid")


class PortQueueSystem:
    name = "portqueue"
    revision = "head"
    remaining_sql = ("SELECT count(*) FROM portqueue.job "
                     "WHERE id >= %s AND status IN ('pending', 'active')")
    first_id_sql = ("SELECT min(id::text) FROM portqueue.job "
                    "WHERE status = 'pending' AND start_after <= now()")

    def setup(self, dsn: str) -> None:
        from portqueue.migrate import migrate

        migrate(dsn, revision=self.revision)

    async def producer(self, dsn: str, settings: dict[str, Any]) -> Producer:
        if settings.get("client") == "sync":
            from portqueue import PortQueue

            sync_client = PortQueue(dsn)

            class SyncProducer(Producer):
                async def add_one(self, payload: dict[str, Any]) -> None:
                    sync_client.add_job(queue=QUEUE, data=payload)

                async def add_many(self, payloads: list[dict[str, Any]]) -> None:
                    sync_client.add_jobs(queue=QUEUE, jobs=[{"data": p} for p in payloads])

                async def close(self) -> None:
                    sync_client.close()

            return SyncProducer()

        from portqueue import AsyncPortQueue

        client = AsyncPortQueue(dsn)

        class AsyncProducer(Producer):
            async def add_one(self, payload: dict[str, Any]) -> None:
                await client.add_job(queue=QUEUE, data=payload)

            async def add_many(self, payloads: list[dict[str, Any]]) -> None:
                await client.add_jobs(queue=QUEUE, jobs=[{"data": p} for p in payloads])

            async def close(self) -> None:
                await client.aclose()

        return AsyncProducer()

    async def work(self, dsn: str, settings: dict[str, Any], on_job: OnJob,
                   stop: asyncio.Event) -> None:
        from portqueue import AsyncPortQueue

        client = AsyncPortQueue(worker_dsn(dsn, settings))

        io_seconds = settings.get("handler_io_ms", 0) / 1000

        @client.handler(QUEUE, concurrency=settings["concurrency"])
        async def handle(job: Any) -> None:
            on_job(job.data)
            if io_seconds:  # multi_queue: a handler waiting on I/O for a moment
                await asyncio.sleep(io_seconds)

        # multi_queue: the same worker also consumes this many empty queues.
        for extra in range(settings.get("extra_queues", 0)):
            client.create_queue(queue=f"{QUEUE}-idle-{extra}", handler=handle,
                                concurrency=settings["concurrency"])

        await client.start()
        await stop.wait()
        await client.stop()
        await client.aclose()

    def load_background(self, conn: psycopg.Connection[Any], finished: int,
                        delayed: int) -> None:
        uuid7 = PORTQUEUE_UUID7
        conn.execute("INSERT INTO portqueue.queue (name) VALUES (%s) ON CONFLICT DO NOTHING",
                     (QUEUE,))
        finished_ts = "now() - interval '3 hours' + g * interval '1 ms'"
        # Only the constant fragments above are formatted in; values are bound.
        conn.execute(f"""
            INSERT INTO portqueue.job (id, queue, status, data, attempt, created_at,
                                       start_after, started_at, finished_at, lease_token)
            SELECT {uuid7.format(ts=finished_ts)}, %s, 'completed', jsonb_build_object('seq', g),
                   1, {finished_ts}, {finished_ts}, {finished_ts}, {finished_ts}, 1
            FROM generate_series(1, %s) AS g""", (QUEUE, finished))  # noqa: S608
        delayed_ts = "now() - interval '2 hours' + g * interval '1 ms'"
        conn.execute(f"""
            INSERT INTO portqueue.job (id, queue, data, created_at, start_after)
            SELECT {uuid7.format(ts=delayed_ts)}, %s, jsonb_build_object('seq', g),
                   {delayed_ts}, now() + interval '1 day'
            FROM generate_series(1, %s) AS g""", (QUEUE, delayed))  # noqa: S608


# --------------------------------------------------------------------------- procrastinate


def _procrastinate_app(dsn: str, settings: dict[str, Any], on_job: OnJob | None = None) -> Any:
    import procrastinate

    pool_max = settings.get("pool_max_size", 4)
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(
        conninfo=dsn, min_size=min(4, pool_max), max_size=pool_max))

    @app.task(name="noop", queue=QUEUE)
    async def noop(**payload: Any) -> None:
        if on_job is not None:
            on_job(payload)

    app.bench_task = noop  # type: ignore[attr-defined]
    return app


class ProcrastinateSystem:
    name = "procrastinate"
    remaining_sql = ("SELECT count(*) FROM procrastinate_jobs "
                     "WHERE id >= %s AND status IN ('todo', 'doing')")
    first_id_sql = ("SELECT min(id) FROM procrastinate_jobs "
                    "WHERE status = 'todo' AND scheduled_at IS NULL")

    def setup(self, dsn: str) -> None:
        async def apply() -> None:
            app = _procrastinate_app(dsn, {})
            async with app.open_async():
                await app.schema_manager.apply_schema_async()

        asyncio.run(apply())

    async def producer(self, dsn: str, settings: dict[str, Any]) -> Producer:
        app = _procrastinate_app(dsn, {**settings, "pool_max_size": 4})
        await app.open_async()
        task = app.bench_task

        class P(Producer):
            async def add_one(self, payload: dict[str, Any]) -> None:
                await task.defer_async(**payload)

            async def add_many(self, payloads: list[dict[str, Any]]) -> None:
                await task.batch_defer_async(*payloads)

            async def close(self) -> None:
                await app.close_async()

        return P()

    async def work(self, dsn: str, settings: dict[str, Any], on_job: OnJob,
                   stop: asyncio.Event) -> None:
        app = _procrastinate_app(dsn, settings, on_job)
        async with app.open_async():
            worker = asyncio.create_task(app.run_worker_async(
                queues=[QUEUE], concurrency=settings["concurrency"],
                install_signal_handlers=False, delete_jobs="never", listen_notify=True))
            await stop.wait()
            worker.cancel()  # procrastinate turns this into a graceful stop
            with contextlib.suppress(asyncio.CancelledError):
                await worker

    def load_background(self, conn: psycopg.Connection[Any], finished: int,
                        delayed: int) -> None:
        # A finished procrastinate job stays in procrastinate_jobs (delete_jobs
        # = "never", the default) and leaves three events: deferred, started,
        # succeeded. A delayed job has scheduled_at and two events: deferred,
        # scheduled. Triggers are off during the load (replica role), so the
        # events are written here, as the triggers would have.
        conn.execute("""
            INSERT INTO procrastinate_jobs (queue_name, task_name, args, status, attempts)
            SELECT %s, 'noop', jsonb_build_object('seq', g), 'succeeded', 1
            FROM generate_series(1, %s) AS g""", (QUEUE, finished))
        conn.execute("""
            INSERT INTO procrastinate_events (job_id, type, at)
            SELECT j.id, e.type::procrastinate_job_event_type,
                   now() - interval '3 hours' + j.id * interval '1 ms'
            FROM procrastinate_jobs AS j
            CROSS JOIN unnest(ARRAY['deferred', 'started', 'succeeded']) AS e (type)
            WHERE j.status = 'succeeded'""")
        conn.execute("""
            INSERT INTO procrastinate_jobs (queue_name, task_name, args, status, scheduled_at)
            SELECT %s, 'noop', jsonb_build_object('seq', g), 'todo', now() + interval '1 day'
            FROM generate_series(1, %s) AS g""", (QUEUE, delayed))
        conn.execute("""
            INSERT INTO procrastinate_events (job_id, type, at)
            SELECT j.id, e.type::procrastinate_job_event_type, now() - interval '1 hour'
            FROM procrastinate_jobs AS j
            CROSS JOIN unnest(ARRAY['deferred', 'scheduled']) AS e (type)
            WHERE j.status = 'todo'""")


# --------------------------------------------------------------------------- pgqueuer


async def _pgqueuer_queries(dsn: str, settings: dict[str, Any]) -> tuple[Any, Any]:
    from pgqueuer.queries import Queries

    if settings.get("driver", "asyncpg") == "asyncpg":
        import asyncpg
        from pgqueuer.db import AsyncpgDriver

        conn = await asyncpg.connect(dsn)
        return Queries(AsyncpgDriver(conn)), conn
    from pgqueuer.db import PsycopgDriver

    pconn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    return Queries(PsycopgDriver(pconn)), pconn


class PgQueuerSystem:
    name = "pgqueuer"
    # A finished job is deleted from the queue table (its history goes to pgqueuer_log).
    remaining_sql = "SELECT count(*) FROM pgqueuer WHERE id >= %s"
    first_id_sql = "SELECT min(id) FROM pgqueuer WHERE execute_after <= now()"

    def setup(self, dsn: str) -> None:
        async def install() -> None:
            queries, conn = await _pgqueuer_queries(dsn, {})
            await queries.install()
            await conn.close()

        asyncio.run(install())

    async def producer(self, dsn: str, settings: dict[str, Any]) -> Producer:
        queries, conn = await _pgqueuer_queries(dsn, settings)

        class P(Producer):
            async def add_one(self, payload: dict[str, Any]) -> None:
                await queries.enqueue(QUEUE, json.dumps(payload).encode())

            async def add_many(self, payloads: list[dict[str, Any]]) -> None:
                await queries.enqueue([QUEUE] * len(payloads),
                                      [json.dumps(p).encode() for p in payloads],
                                      [0] * len(payloads))

            async def close(self) -> None:
                await conn.close()

        return P()

    async def work(self, dsn: str, settings: dict[str, Any], on_job: OnJob,
                   stop: asyncio.Event) -> None:
        from pgqueuer.qm import QueueManager

        queries, conn = await _pgqueuer_queries(dsn, settings)
        manager = QueueManager(queries)

        @manager.entrypoint(QUEUE)
        async def handle(job: Any) -> None:
            on_job(json.loads(job.payload))

        run = asyncio.create_task(manager.run(batch_size=settings["batch_size"]))
        await stop.wait()
        manager.shutdown.set()
        await run
        await conn.close()

    def load_background(self, conn: psycopg.Connection[Any], finished: int,
                        delayed: int) -> None:
        # PgQueuer deletes a finished job from its queue table; what stays is
        # its history in pgqueuer_log: a 'queued' row and a 'successful' row,
        # already folded into statistics (aggregated). A delayed job is a
        # 'queued' row with a future execute_after, plus its 'queued' log row.
        conn.execute("""
            INSERT INTO pgqueuer_log (created, job_id, status, priority, entrypoint, aggregated)
            SELECT now() - interval '3 hours' + g * interval '1 ms', g, s.status::pgqueuer_status,
                   0, %s, true
            FROM generate_series(1, %s) AS g
            CROSS JOIN unnest(ARRAY['queued', 'successful']) AS s (status)""",
                     (QUEUE, finished))
        conn.execute("SELECT setval(pg_get_serial_sequence('pgqueuer', 'id'), %s)", (finished,))
        conn.execute("""
            INSERT INTO pgqueuer (priority, created, updated, heartbeat, execute_after, status,
                                  entrypoint, payload)
            SELECT 0, now() - interval '1 hour', now() - interval '1 hour',
                   now() - interval '1 hour', now() + interval '1 day', 'queued', %s,
                   convert_to(jsonb_build_object('seq', g)::text, 'UTF8')
            FROM generate_series(1, %s) AS g""", (QUEUE, delayed))
        conn.execute("""
            INSERT INTO pgqueuer_log (created, job_id, status, priority, entrypoint, aggregated)
            SELECT now() - interval '1 hour', id, 'queued', 0, entrypoint, true
            FROM pgqueuer""")


# --------------------------------------------------------------------------- raw SQL

RAW_SCHEMA = """
CREATE TABLE job (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue       text NOT NULL,
    payload     jsonb NOT NULL,
    status      text NOT NULL DEFAULT 'pending',
    run_at      timestamptz NOT NULL DEFAULT now(),
    attempts    integer NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL DEFAULT now(),
    started_at  timestamptz,
    finished_at timestamptz
);
CREATE INDEX job_claim_idx ON job (queue, run_at, id) WHERE status = 'pending';
CREATE FUNCTION job_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('raw_job', 'bench');
    RETURN NULL;
END $$;
CREATE TRIGGER job_notify AFTER INSERT ON job FOR EACH STATEMENT EXECUTE FUNCTION job_notify();
"""

RAW_CLAIM = """
UPDATE job SET status = 'running', started_at = now(), attempts = attempts + 1
WHERE id IN (SELECT id FROM job
             WHERE queue = %s AND status = 'pending' AND run_at <= now()
             ORDER BY run_at, id LIMIT %s
             FOR UPDATE SKIP LOCKED)
RETURNING id, payload"""

RAW_COMPLETE = ("UPDATE job SET status = 'done', finished_at = now() "
                "WHERE id = ANY(%s) AND status = 'running'")


class RawSqlSystem:
    """The ceiling: the least a SKIP LOCKED queue has to do, with psycopg (sync)."""

    name = "rawsql"
    sync_worker = True
    remaining_sql = "SELECT count(*) FROM job WHERE id >= %s AND status IN ('pending', 'running')"
    first_id_sql = "SELECT min(id) FROM job WHERE status = 'pending' AND run_at <= now()"

    def setup(self, dsn: str) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(RAW_SCHEMA)

    async def producer(self, dsn: str, settings: dict[str, Any]) -> Producer:
        conn = psycopg.connect(dsn, autocommit=True)

        class P(Producer):
            async def add_one(self, payload: dict[str, Any]) -> None:
                conn.execute("INSERT INTO job (queue, payload) VALUES (%s, %s)",
                             (QUEUE, json.dumps(payload)))

            async def add_many(self, payloads: list[dict[str, Any]]) -> None:
                conn.execute("INSERT INTO job (queue, payload) "
                             "SELECT %s, p FROM unnest(%s::jsonb[]) AS p",
                             (QUEUE, [json.dumps(p) for p in payloads]))

            async def close(self) -> None:
                conn.close()

        return P()

    def work_sync(self, dsn: str, settings: dict[str, Any], on_job: OnJob,
                  stop: threading.Event) -> None:
        batch = settings["batch_size"]
        with psycopg.connect(worker_dsn(dsn, settings), autocommit=True) as conn, \
                psycopg.connect(dsn, autocommit=True) as listen:
            listen.execute("LISTEN raw_job")
            while not stop.is_set():
                rows = conn.execute(RAW_CLAIM, (QUEUE, batch)).fetchall()
                if not rows:
                    # NOTIFY is the wake-up; the poll interval is the fallback.
                    for _ in listen.notifies(timeout=0.5, stop_after=1):
                        pass
                    continue
                for _, payload in rows:
                    on_job(payload)
                conn.execute(RAW_COMPLETE, ([row[0] for row in rows],))

    def load_background(self, conn: psycopg.Connection[Any], finished: int,
                        delayed: int) -> None:
        conn.execute("""
            INSERT INTO job (queue, payload, status, attempts, created_at, started_at,
                             finished_at, run_at)
            SELECT %s, jsonb_build_object('seq', g), 'done', 1, t, t, t, t
            FROM generate_series(1, %s) AS g,
                 LATERAL (SELECT now() - interval '3 hours' + g * interval '1 ms' AS t) AS ts""",
                     (QUEUE, finished))
        conn.execute("""
            INSERT INTO job (queue, payload, run_at, created_at)
            SELECT %s, jsonb_build_object('seq', g), now() + interval '1 day',
                   now() - interval '1 hour'
            FROM generate_series(1, %s) AS g""", (QUEUE, delayed))


class ListenNotifySystem:
    """Latency only: a bare NOTIFY from the producer to a LISTENing process."""

    name = "listen_notify"
    sync_worker = True

    def setup(self, dsn: str) -> None:
        pass

    async def producer(self, dsn: str, settings: dict[str, Any]) -> Producer:
        conn = psycopg.connect(dsn, autocommit=True)

        class P(Producer):
            async def add_one(self, payload: dict[str, Any]) -> None:
                conn.execute("SELECT pg_notify('bench_baseline', %s)", (json.dumps(payload),))

            async def close(self) -> None:
                conn.close()

        return P()

    def work_sync(self, dsn: str, settings: dict[str, Any], on_job: OnJob,
                  stop: threading.Event) -> None:
        with psycopg.connect(dsn, autocommit=True) as listen:
            listen.execute("LISTEN bench_baseline")
            while not stop.is_set():
                for notify in listen.notifies(timeout=0.5):
                    on_job(json.loads(notify.payload))
                    if stop.is_set():
                        break


# --------------------------------------------------------------------------- Node peers

NODE_DIR = Path(__file__).resolve().parent / "node"
NODE_CHILD = NODE_DIR / "child.mjs"


def child_command(system: str, python: str, python_child: Path) -> list[str]:
    """How run.py starts one measured process of ``system``: bench/child.py on the
    bench venv's python, or bench/node/child.mjs on node for the Node peers."""
    if system in NODE_SYSTEMS:
        return ["node", str(NODE_CHILD)]
    return [python, str(python_child)]


class NodeProducer(Producer):
    """run.py's own adds (pre-adds, warm-ups) through a `child.mjs serve` process, so the
    jobs are written by the peer's own client library."""

    def __init__(self, system: str, dsn: str, settings: dict[str, Any]) -> None:
        self.proc = subprocess.Popen(
            ["node", str(NODE_CHILD), "serve", system, dsn, "--settings", json.dumps(settings)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=str(NODE_DIR))
        self._reply("ready")

    def _reply(self, kind: str) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("@") and json.loads(line[1:]).get("ev") == kind:
                return
        raise RuntimeError(f"node producer exited with {self.proc.wait()}")

    def _send(self, op: str, payloads: list[dict[str, Any]]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, "payloads": payloads}) + "\n")
        self.proc.stdin.flush()
        self._reply("ok")

    async def add_one(self, payload: dict[str, Any]) -> None:
        self._send("one", [payload])

    async def add_many(self, payloads: list[dict[str, Any]]) -> None:
        self._send("many", payloads)

    async def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(30)


class NodeSystem:
    name = ""

    def setup(self, dsn: str) -> None:
        subprocess.run(["node", str(NODE_CHILD), "setup", self.name, dsn], check=True,
                       cwd=str(NODE_DIR))

    async def producer(self, dsn: str, settings: dict[str, Any]) -> Producer:
        return NodeProducer(self.name, dsn, settings)


class GraphileWorkerSystem(NodeSystem):
    name = "graphile-worker"
    # graphile-worker deletes a job when it completes: what is left is unfinished.
    remaining_sql = "SELECT count(*) FROM graphile_worker._private_jobs WHERE id >= %s"
    first_id_sql = "SELECT min(id) FROM graphile_worker._private_jobs WHERE run_at <= now()"


class PgBossSystem(NodeSystem):
    name = "pg-boss"
    # ids are random UUIDs: the drain's jobs are told apart by their creation time.
    remaining_sql = ("SELECT count(*) FROM pgboss.job WHERE name = 'bench' AND created_on >= %s"
                     " AND state IN ('created', 'retry', 'active')")
    first_id_sql = ("SELECT min(created_on) FROM pgboss.job "
                    "WHERE name = 'bench' AND state = 'created' AND start_after <= now()")


# --------------------------------------------------------------------------- delayed jobs

# delayed_priority: n jobs due in a day at a priority above the ready ones, written in each
# system's own layout (triggers off: run.py loads under session_replication_role = replica),
# so a claim that walks its index in priority order meets every one of them first.
# raw SQL has no priority: its claim index is ordered by run_at, which puts them last.


def _delayed_portqueue(conn: psycopg.Connection[Any], n: int) -> None:
    conn.execute("INSERT INTO portqueue.queue (name) VALUES (%s) ON CONFLICT DO NOTHING",
                 (QUEUE,))
    ids = PORTQUEUE_UUID7.format(ts="now() - interval '2 hours' + g * interval '1 ms'")
    conn.execute(f"""
        INSERT INTO portqueue.job (id, queue, data, priority, start_after)
        SELECT {ids}, %s, jsonb_build_object('seq', -g), 10, now() + interval '1 day'
        FROM generate_series(1, %s) AS g""", (QUEUE, n))  # noqa: S608


def _delayed_graphile(conn: psycopg.Connection[Any], n: int) -> None:
    # graphile-worker runs the lowest priority number first; add_jobs keeps its task table
    # and counters right, which a bare INSERT into _private_jobs would not.
    conn.execute("""
        SELECT count(*) FROM graphile_worker.add_jobs(ARRAY(
            SELECT ROW(%s, json_build_object('seq', -g), NULL, now() + interval '1 day',
                       NULL, NULL, -10, NULL)::graphile_worker.job_spec
            FROM generate_series(1, %s) AS g))""", (QUEUE, n))


def _delayed_pgboss(conn: psycopg.Connection[Any], n: int) -> None:
    conn.execute("""
        INSERT INTO pgboss.job (name, data, priority, start_after)
        SELECT %s, jsonb_build_object('seq', -g), 10, now() + interval '1 day'
        FROM generate_series(1, %s) AS g""", (QUEUE, n))


def _delayed_procrastinate(conn: psycopg.Connection[Any], n: int) -> None:
    conn.execute("""
        INSERT INTO procrastinate_jobs (queue_name, task_name, args, status, priority,
                                        scheduled_at)
        SELECT %s, 'noop', jsonb_build_object('seq', -g), 'todo', 10, now() + interval '1 day'
        FROM generate_series(1, %s) AS g""", (QUEUE, n))


def _delayed_pgqueuer(conn: psycopg.Connection[Any], n: int) -> None:
    conn.execute("""
        INSERT INTO pgqueuer (priority, created, updated, heartbeat, execute_after, status,
                              entrypoint, payload)
        SELECT 10, now(), now(), now(), now() + interval '1 day', 'queued', %s,
               convert_to(jsonb_build_object('seq', -g)::text, 'UTF8')
        FROM generate_series(1, %s) AS g""", (QUEUE, n))


def _delayed_rawsql(conn: psycopg.Connection[Any], n: int) -> None:
    conn.execute("""
        INSERT INTO job (queue, payload, run_at)
        SELECT %s, jsonb_build_object('seq', -g), now() + interval '1 day'
        FROM generate_series(1, %s) AS g""", (QUEUE, n))


DELAYED_LOADERS: dict[str, Callable[[psycopg.Connection[Any], int], None]] = {
    "portqueue": _delayed_portqueue,
    "graphile-worker": _delayed_graphile,
    "pg-boss": _delayed_pgboss,
    "procrastinate": _delayed_procrastinate,
    "pgqueuer": _delayed_pgqueuer,
    "rawsql": _delayed_rawsql,
}


def get(system: str) -> Any:
    if is_variant(system):
        variant = PortQueueSystem()
        variant.revision = system.partition("@")[2]
        return variant
    return {
        "portqueue": PortQueueSystem,
        "procrastinate": ProcrastinateSystem,
        "pgqueuer": PgQueuerSystem,
        "rawsql": RawSqlSystem,
        "listen_notify": ListenNotifySystem,
        "graphile-worker": GraphileWorkerSystem,
        "pg-boss": PgBossSystem,
    }[system]()
