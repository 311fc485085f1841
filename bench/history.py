"""Issue 24's history scenario: what a large finished history costs, in two layouts.

    python bench/history.py [--dsn DSN] [--rows 2000000] [--rounds 3]
                            [--layouts single,partitioned,partitioned-pruned]
                            [--scenarios drain,prune]

Layouts:
- ``single``: the job table as the migrations leave it;
- ``partitioned``: a PROTOTYPE, built by this script on the freshly migrated
  (empty) schema, of the layout docs/retention.md ("Partitioned history: the
  design") describes: ``job`` partitioned by LIST (status) into ``job_live``
  (pending, active, waiting) and ``job_finished`` (the four finished
  statuses), itself partitioned by RANGE (finished_at) into one partition per
  day plus a default. The indexes are the migrations', made per partition;
  the unique ones that cannot be declared on a partitioned table are unique
  on ``job_live`` only (the prototype does not solve idempotency across
  partitions: no keyed add runs here). The triggers are the migrations' on
  the root; the row triggers do not fire as they should on row movement (the
  design note says why), which no job in these scenarios depends on. The
  portqueue code and SQL are unchanged: this measures today's statements on
  the partitioned layout;
- ``partitioned-pruned`` (drain only): the partitioned databases, with a
  worker whose claim and completion statements are rewritten in memory to
  name the live partition's status (``prune_statements``), as the design's
  statements must, so the planner keeps their UPDATEs on ``job_live``.

Scenarios, each in databases of its own on the server ``--dsn`` names (use a
private cluster: databases ``bench_history_*`` are dropped and created):
- ``drain``: per layout, one database with no history and one with ``--rows``
  completed jobs (finished over the last ``--days`` days, loaded with triggers
  off, then ``VACUUM (ANALYZE)`` and a ``CHECKPOINT``). ``--rounds`` rounds
  interleave the databases (the order rotates). A round adds ``--jobs`` jobs
  in batches, ANALYZEs, resets pg_stat_statements, starts one worker process
  (concurrency ``--concurrency``) and waits for the database to show them all
  finished: rate = jobs / (last finished_at - first started_at); claim and
  complete statement times are pg_stat_statements' mean per call (the server
  must load pg_stat_statements); then ``--adds`` single ``add_job`` calls are
  timed (p50/p99). The round's jobs are deleted after it, so the empty
  database stays empty.
- ``prune``: per layout, ``--prune-rows`` completed jobs finished 8 to 9 days
  ago (past the default 7-day retention) plus ``--rows`` // 5 finished in the
  last day (kept); a worker drains and this process adds ``--rate`` jobs/s for
  10 s, then during the prune, then 10 s after, as bench/prune_under_load.py
  does. ``single`` prunes with ``run_pass`` (batched DELETEs); ``partitioned``
  drops the day partitions wholly past retention (``DROP TABLE``; what the
  design's maintenance would do once it knows nothing in them is retained).
  Sizes of the job table and its indexes (all partitions) and dead tuples are
  read before, right after, and ``--settle`` seconds after the prune, with
  autovacuum as the server has it.

Writes bench/results/history-<time>.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg

# The producer's pacing and the percentiles are prune_under_load's (this
# directory is first on sys.path when a bench script runs).
from prune_under_load import add_for, percentiles
from psycopg import sql

from portqueue import PortQueue
from portqueue.maintenance import run_pass
from portqueue.queries import load_blocks

RESULTS = Path(__file__).resolve().parent / "results"
DRAIN = "drain"
ADDS = "adds"
LIVE = "live"
HISTORY = "history"
QUIET_PHASE_SECONDS = 10.0
STATUSES_LIVE = ("pending", "active", "waiting")
STATUSES_FINISHED = ("completed", "failed", "cancelled", "expired")

# Triggers off (session_replication_role): the history is loaded, not added.
# %(newest)s and %(spread)s place finished_at in [newest - spread, newest],
# oldest first, and the ids are UUIDv7-like (their time first), as the
# client's are: random ids would make the primary key a random-insert index,
# which a real history's is not. The indexes are built after the load.
LOAD_HISTORY = """
INSERT INTO portqueue.job (id, queue, status, data, attempt, max_attempts,
                           created_at, start_after, started_at, finished_at)
SELECT (lpad(to_hex((extract(epoch FROM t) * 1000)::bigint), 12, '0') || '7'
        || substr(md5(g::text), 1, 19))::uuid,
       %(queue)s, 'completed', '{}'::jsonb, 1, 1, t, t, t, t
FROM generate_series(1, %(rows)s) AS g,
     LATERAL (SELECT %(newest)s::timestamptz - %(spread)s::interval
                     + %(spread)s::interval * g / %(rows)s AS t) AS f
"""


def database_dsn(dsn: str, database: str) -> str:
    return psycopg.conninfo.make_conninfo(dsn, dbname=database)


def partition(conn: psycopg.Connection[Any], days: int) -> list[str]:
    """Rebuild the (empty) migrated job table as the partitioned prototype.

    Returns the statements that make its indexes, for after the load."""
    indexes = [row[0] for row in conn.execute(
        "SELECT pg_get_indexdef(indexrelid) FROM pg_index"
        " WHERE indrelid = 'portqueue.job'::regclass AND NOT indisprimary").fetchall()]
    triggers = [row[0] for row in conn.execute(
        "SELECT pg_get_triggerdef(oid) FROM pg_trigger"
        " WHERE tgrelid = 'portqueue.job'::regclass AND NOT tgisinternal").fetchall()]
    conn.execute("ALTER TABLE portqueue.job RENAME TO job_unpartitioned")
    conn.execute("ALTER SEQUENCE portqueue.job_seq_seq RENAME TO job_unpartitioned_seq_seq")
    conn.execute(
        "CREATE TABLE portqueue.job (LIKE portqueue.job_unpartitioned INCLUDING DEFAULTS"
        " INCLUDING CONSTRAINTS INCLUDING IDENTITY) PARTITION BY LIST (status)")
    conn.execute("DROP TABLE portqueue.job_unpartitioned")
    conn.execute("CREATE TABLE portqueue.job_live PARTITION OF portqueue.job"
                 f" FOR VALUES IN ({', '.join(repr(s) for s in STATUSES_LIVE)})")
    conn.execute("CREATE TABLE portqueue.job_finished PARTITION OF portqueue.job"
                 f" FOR VALUES IN ({', '.join(repr(s) for s in STATUSES_FINISHED)})"
                 " PARTITION BY RANGE (finished_at)")
    conn.execute("CREATE TABLE portqueue.job_finished_default"
                 " PARTITION OF portqueue.job_finished DEFAULT")
    today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    for back in range(-2, days + 1):
        start = today - timedelta(days=back)
        conn.execute(sql.SQL(
            "CREATE TABLE {} PARTITION OF portqueue.job_finished FOR VALUES FROM ({}) TO ({})"
        ).format(sql.Identifier("portqueue", f"job_finished_{start:%Y%m%d}"),
                 sql.Literal(start), sql.Literal(start + timedelta(days=1))))
    for definition in triggers:
        conn.execute(definition)
    return ["CREATE INDEX job_id_idx ON portqueue.job (id)"] + [
        definition.replace(" ON portqueue.job ", " ON portqueue.job_live ")
        if definition.startswith("CREATE UNIQUE INDEX") else definition
        for definition in indexes]


def drop_indexes(conn: psycopg.Connection[Any]) -> list[str]:
    """Drop the single job table's indexes; returns the statements that rebuild them."""
    rows = conn.execute(
        "SELECT c.relname, pg_get_indexdef(i.indexrelid), i.indisprimary FROM pg_index AS i"
        " JOIN pg_class AS c ON c.oid = i.indexrelid"
        " WHERE i.indrelid = 'portqueue.job'::regclass").fetchall()
    rebuild = []
    for name, definition, primary in rows:
        if primary:
            conn.execute(f"ALTER TABLE portqueue.job DROP CONSTRAINT {name}")
            rebuild.append(f"ALTER TABLE portqueue.job ADD CONSTRAINT {name} PRIMARY KEY (id)")
        else:
            conn.execute(f"DROP INDEX portqueue.{name}")
            rebuild.append(definition)
    return rebuild


def prepare(dsn: str, database: str, layout: str, loads: list[dict[str, Any]],
            days: int, reuse: bool = False) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        if reuse and conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                  (database,)).fetchone():
            print(f"{database}: reused as it is", flush=True)
            return database_dsn(dsn, database)
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(database)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    bench = database_dsn(dsn, database)
    with PortQueue(bench) as pq:
        pq.migrate()
    started = time.monotonic()
    with psycopg.connect(bench, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        with conn.transaction():
            indexes = partition(conn, days) if layout == "partitioned" else drop_indexes(conn)
        for queue in (DRAIN, ADDS, LIVE, HISTORY):
            conn.execute("INSERT INTO portqueue.queue (name) VALUES (%s)", (queue,))
        for load in loads:
            with conn.transaction():
                conn.execute("SET LOCAL session_replication_role = replica")
                conn.execute(LOAD_HISTORY, {"queue": HISTORY, **load})
        conn.execute("SET maintenance_work_mem = '256MB'")
        for definition in indexes:
            conn.execute(definition)
        conn.execute("VACUUM (ANALYZE) portqueue.job")
        conn.execute("CHECKPOINT")
    rows = sum(load["rows"] for load in loads)
    print(f"{database}: {layout}, {rows:,} finished rows loaded in "
          f"{time.monotonic() - started:.1f} s", flush=True)
    return bench


def prune_statements() -> None:
    """Check the claim and the completion name the live partition's statuses.

    They do since issue 24's statement changes (on the partitioned table an
    UPDATE naming no status is planned over every partition); the variant
    that rewrote them for this bench is gone, and "pruned" now measures the
    statements as shipped."""
    blocks = load_blocks()["name"]
    for name, named in (("claim", "AND j.status = 'pending'"),
                        ("complete_jobs", "AND j.status IN ('pending', 'active', 'waiting')")):
        if named not in blocks[name]:
            raise RuntimeError(f"{name} no longer reads {named!r}: update bench/history.py")


def run_worker(dsn: str, queue: str, concurrency: int, pruned: bool) -> None:
    if pruned:
        prune_statements()
    stop = threading.Event()
    import signal
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with PortQueue(dsn) as pq:
        pq.create_queue(queue=queue, handler=lambda job: None, concurrency=concurrency)
        pq.start(maintenance=False, scheduler=False, poll_interval=0.05)
        print("ready", flush=True)
        stop.wait()
        pq.stop()


def statement_means(conn: psycopg.Connection[Any]) -> dict[str, float]:
    """Mean ms per call and rows per call of the claim and complete statements."""
    out: dict[str, float] = {}
    for name, marker in (("claim", "%FOR UPDATE OF j SKIP LOCKED%"),
                         ("complete", "%completed AS (%")):
        calls, total, rows = conn.execute(
            "SELECT sum(calls), sum(total_exec_time), sum(rows) FROM pg_stat_statements"
            " WHERE query LIKE %s AND dbid = (SELECT oid FROM pg_database"
            " WHERE datname = current_database())", (marker,)).fetchone() or (0, 0, 0)
        out[f"{name}_ms"] = float(total or 0) / float(calls or 1)
        out[f"{name}_calls"] = float(calls or 0)
        out[f"{name}_rows"] = float(rows or 0) / float(calls or 1)
    return out


def drain_round(bench: str, jobs: int, concurrency: int, adds: int,
                pruned: bool) -> dict[str, Any]:
    with PortQueue(bench) as pq:
        for start in range(0, jobs, 1000):
            pq.add_jobs(queue=DRAIN, jobs=[{"data": {"n": n}}
                                           for n in range(start, min(jobs, start + 1000))])
    with psycopg.connect(bench, autocommit=True) as conn:
        conn.execute("ANALYZE portqueue.job")
        conn.execute("SELECT pg_stat_statements_reset()")
        worker = subprocess.Popen(
            [sys.executable, __file__, "--dsn", bench, "--role", "worker",
             "--concurrency", str(concurrency), *(["--pruned"] if pruned else [])],
            stdout=subprocess.PIPE, text=True)
        try:
            assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
            deadline = time.monotonic() + 600
            while conn.execute(
                    "SELECT count(*) FROM portqueue.job WHERE queue = %s"
                    " AND finished_at IS NULL", (DRAIN,)).fetchone() != (0,):
                if time.monotonic() > deadline:
                    raise TimeoutError("drain did not finish in 600 s")
                time.sleep(0.05)
            seconds = conn.execute(
                "SELECT extract(epoch FROM max(finished_at) - min(started_at))"
                " FROM portqueue.job WHERE queue = %s", (DRAIN,)).fetchone()
            means = statement_means(conn)
        finally:
            worker.terminate()
            worker.wait(30)
        add_ms: list[float] = []
        with PortQueue(bench) as pq:
            for n in range(adds + 20):
                started = time.perf_counter()
                pq.add_job(queue=ADDS, data={"n": n})
                if n >= 20:  # warm-up: pool, prepared statements
                    add_ms.append((time.perf_counter() - started) * 1000)
        conn.execute("DELETE FROM portqueue.job WHERE queue IN (%s, %s)", (DRAIN, ADDS))
        conn.execute("VACUUM portqueue.job")
    assert seconds is not None
    return {"rate": jobs / float(seconds[0]), **means, "add_ms": percentiles(add_ms)}


def sizes(conn: psycopg.Connection[Any]) -> dict[str, float]:
    """MB of the job table's heap and indexes (every partition), and its dead tuples."""
    heap, indexes, dead, live = conn.execute("""
        SELECT sum(pg_relation_size(c.oid)) / 1e6, sum(pg_indexes_size(c.oid)) / 1e6,
               sum(s.n_dead_tup), sum(s.n_live_tup)
        FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
        LEFT JOIN pg_stat_user_tables AS s ON s.relid = c.oid
        WHERE n.nspname = 'portqueue' AND c.relkind = 'r' AND c.relname LIKE 'job%'
    """).fetchone() or (0, 0, 0, 0)
    return {"heap_mb": float(heap or 0), "index_mb": float(indexes or 0),
            "dead_tuples": float(dead or 0), "live_tuples": float(live or 0)}


def run_prune(dsn: str, layout: str) -> None:
    started = time.monotonic()
    retries = 0
    if layout == "single":
        removed = run_pass(dsn)["pruner"]
    else:
        # The day partitions wholly past the default 7-day retention.
        cutoff = datetime.now(timezone.utc) - timedelta(days=7)
        removed = retries = 0
        with psycopg.connect(dsn, autocommit=True) as conn:
            names = [name for (name,) in conn.execute(
                "SELECT c.relname FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid"
                " WHERE i.inhparent = 'portqueue.job_finished'::regclass"
                " AND c.relname ~ '^job_finished_[0-9]{8}$'").fetchall()]
            for name in sorted(names):
                ends = datetime.strptime(name[-8:], "%Y%m%d").replace(
                    tzinfo=timezone.utc) + timedelta(days=1)
                if ends > cutoff:
                    continue
                table = sql.Identifier("portqueue", name)
                count = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(
                    table)).fetchone()
                removed += int(count[0]) if count else 0
                # DROP locks job_finished, which every statement not pruned to
                # job_live at plan time holds: waiting behind them in the lock
                # queue would stall everything queued after. A short lock_timeout
                # and a retry let them through.
                conn.execute("SET lock_timeout = '100ms'")
                while True:
                    try:
                        conn.execute(sql.SQL("DROP TABLE {}").format(table))
                        break
                    except psycopg.errors.LockNotAvailable:
                        retries += 1
                        time.sleep(0.05)
    print(json.dumps({"seconds": time.monotonic() - started, "pruner": removed,
                      "drop_retries": retries}), flush=True)


def prune_scenario(dsn: str, layout: str, rows: int, kept: int, rate: float,
                   settle: float) -> dict[str, Any]:
    now = datetime.now(timezone.utc)
    bench = prepare(dsn, f"bench_history_prune_{layout}", layout, [
        {"rows": rows, "newest": now - timedelta(days=8), "spread": "1 day"},
        {"rows": kept, "newest": now, "spread": "23 hours"}], days=10)
    me = [sys.executable, __file__, "--dsn", bench]
    worker = subprocess.Popen([*me, "--role", "worker", "--queue", LIVE, "--concurrency", "10"],
                              stdout=subprocess.PIPE, text=True)
    assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
    adds: list[dict[str, Any]] = []
    figures: dict[str, Any] = {}
    try:
        with psycopg.connect(bench, autocommit=True) as conn, PortQueue(bench) as pq:
            figures["sizes_before"] = sizes(conn)
            add_for(pq, "before", QUIET_PHASE_SECONDS, rate, None, adds)
            pruner = subprocess.Popen([*me, "--role", "prune", "--layout", layout],
                                      stdout=subprocess.PIPE, text=True)
            add_for(pq, "during", None, rate, pruner, adds)
            assert pruner.stdout is not None
            figures["prune"] = json.loads(pruner.stdout.read())
            figures["sizes_right_after"] = sizes(conn)
            add_for(pq, "after", QUIET_PHASE_SECONDS, rate, None, adds)
            time.sleep(max(0.0, settle - QUIET_PHASE_SECONDS))
            figures["sizes_settled"] = sizes(conn)
            figures["autovacuum_count"] = conn.execute(
                "SELECT coalesce(sum(autovacuum_count), 0) FROM pg_stat_user_tables"
                " WHERE schemaname = 'portqueue' AND relname LIKE 'job%'").fetchone()
            ids = [a["id"] for a in adds]
            deadline = time.monotonic() + 60
            while True:
                done = conn.execute(
                    "SELECT id::text, extract(epoch FROM started_at - created_at) * 1000"
                    " FROM portqueue.job WHERE id = ANY(%s::uuid[]) AND finished_at IS NOT NULL",
                    (ids,)).fetchall()
                if len(done) == len(ids) or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            claims = {job_id: float(ms) for job_id, ms in done}
    finally:
        worker.terminate()
        worker.wait(30)
    figures["phases"] = {}
    for phase in ("before", "during", "after"):
        mine = [a for a in adds if a["phase"] == phase]
        figures["phases"][phase] = {
            "add_ms": percentiles([a["add_ms"] for a in mine]),
            "claim_ms": percentiles([claims[a["id"]] for a in mine if a["id"] in claims]),
            "unclaimed": sum(1 for a in mine if a["id"] not in claims),
        }
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--adds", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prune-rows", type=int, default=1_000_000)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--settle", type=float, default=60.0)
    parser.add_argument("--layouts", default="single,partitioned,partitioned-pruned",
                        help="prune runs single and partitioned only")
    parser.add_argument("--scenarios", default="drain,prune")
    parser.add_argument("--role", choices=["measure", "worker", "prune"], default="measure")
    parser.add_argument("--layout", default="single")
    parser.add_argument("--queue", default=DRAIN)
    parser.add_argument("--pruned", action="store_true")
    parser.add_argument("--reuse", action="store_true",
                        help="drain: keep a database of a previous run (same --rows)")
    args = parser.parse_args()
    if args.role == "worker":
        return run_worker(args.dsn, args.queue, args.concurrency, args.pruned)
    if args.role == "prune":
        return run_prune(args.dsn, args.layout)
    layouts = args.layouts.split(",")
    scenarios = args.scenarios.split(",")
    result: dict[str, Any] = {"args": vars(args), "drain": [], "prune": {}}
    if "drain" in scenarios:
        now = datetime.now(timezone.utc)
        spread = f"{args.days} days"
        # partitioned-pruned runs on the partitioned databases (see prune_statements).
        built = sorted({layout.removesuffix("-pruned") for layout in layouts})
        benches = {(layout, size): prepare(
            args.dsn, f"bench_history_{layout}_{'full' if size else 'empty'}", layout,
            [{"rows": size, "newest": now, "spread": spread}] if size else [], args.days,
            args.reuse)
            for layout in built for size in (0, args.rows)}
        keys = [(layout, size) for layout in layouts for size in (0, args.rows)]
        for round_ in range(args.rounds):
            for key in keys[round_ % len(keys):] + keys[:round_ % len(keys)]:
                figures = drain_round(benches[key[0].removesuffix("-pruned"), key[1]],
                                      args.jobs, args.concurrency, args.adds,
                                      key[0].endswith("-pruned"))
                result["drain"].append({"layout": key[0], "rows": key[1], "round": round_,
                                        **figures})
                print(f"round {round_} {key[0]:<18} {key[1]:>10,} rows: "
                      f"{figures['rate']:>8,.0f} jobs/s, claim {figures['claim_ms']:.2f} ms"
                      f" ({figures['claim_calls']:.0f} calls,"
                      f" {figures['claim_rows']:.0f} rows each),"
                      f" complete "
                      f"{figures['complete_ms']:.2f} ms, add p50 "
                      f"{figures['add_ms']['p50']:.2f} ms", flush=True)
        for layout in layouts:
            for size in (0, args.rows):
                mine = [r for r in result["drain"] if r["layout"] == layout and r["rows"] == size]
                print(f"median {layout:<18} {size:>10,} rows: "
                      f"{statistics.median(r['rate'] for r in mine):>8,.0f} jobs/s, claim "
                      f"{statistics.median(r['claim_ms'] for r in mine):.2f} ms, complete "
                      f"{statistics.median(r['complete_ms'] for r in mine):.2f} ms, add p50 "
                      f"{statistics.median(r['add_ms']['p50'] for r in mine):.2f} ms")
    if "prune" in scenarios:
        for layout in [layout for layout in layouts if not layout.endswith("-pruned")]:
            figures = prune_scenario(args.dsn, layout, args.prune_rows, args.rows // 5,
                                     args.rate, args.settle)
            result["prune"][layout] = figures
            print(f"prune {layout}: {figures['prune']['pruner']:,} rows in "
                  f"{figures['prune']['seconds']:.1f} s")
            for when in ("sizes_before", "sizes_right_after", "sizes_settled"):
                s = figures[when]
                print(f"  {when:<18} heap {s['heap_mb']:>7.0f} MB, indexes "
                      f"{s['index_mb']:>7.0f} MB, dead {s['dead_tuples']:>10,.0f}, "
                      f"live {s['live_tuples']:>10,.0f}")
            for phase, f in figures["phases"].items():
                print(f"  {phase:<7} adds {f['add_ms']['n']:>5} p50/p99/max "
                      f"{f['add_ms']['p50']:.2f}/{f['add_ms']['p99']:.2f}/"
                      f"{f['add_ms']['max']:.2f} ms; claim p50/p99 "
                      f"{f['claim_ms']['p50']:.2f}/{f['claim_ms']['p99']:.2f} ms"
                      + (f" ({f['unclaimed']} unclaimed)" if f["unclaimed"] else ""))
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS / f"history-{stamp}.json"
    path.write_text(json.dumps(result, indent=2, default=str))
    print(f"raw figures: {path}")


if __name__ == "__main__":
    main()
