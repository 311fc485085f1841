"""One-job and N-job claims (rolled back), alternating plan_cache_mode auto / force_generic_plan
on one prepared statement per mode; wall ms per claim, and pg_stat_statements plan/exec."""
import statistics, sys, time, uuid
import psycopg
from portqueue import PortQueue
from portqueue.migrate import migrate
from portqueue.queries import queries_for

admin = "postgresql://postgres@127.0.0.1:5512/postgres"
with psycopg.connect(admin, autocommit=True) as c:
    c.execute("DROP DATABASE IF EXISTS perf_gp"); c.execute("CREATE DATABASE perf_gp")
dsn = "postgresql://postgres@127.0.0.1:5512/perf_gp"
migrate(dsn)
with PortQueue(dsn) as pq:
    for _ in range(4):
        pq.add_jobs(queue="gp", jobs=[{"data": {"i": i}} for i in range(5000)])
with psycopg.connect(dsn, autocommit=True) as c:
    c.execute("VACUUM ANALYZE portqueue.job")
q = queries_for("portqueue")
sizes = [int(s) for s in sys.argv[1].split(",")]
repeats = int(sys.argv[2])
out = {}
with psycopg.connect(dsn) as conn:
    for n in sizes:
        query = q("claim", queues=["gp"], slots=[n], lease_seconds=[60], matching_patterns=[],
                  refused_patterns=[], worker_id=str(uuid.uuid4()), holding=[])
        t = {"auto": [], "generic": []}
        for r in range(repeats):
            for mode in ("auto", "generic"):
                conn.execute("SELECT set_config('plan_cache_mode', %s, false)",
                             ["auto" if mode == "auto" else "force_generic_plan"])
                conn.commit()
                # a distinct text per mode: each its own prepared statement
                sql = query.sql + f" -- {mode}"
                start = time.perf_counter()
                got = len(conn.execute(sql, query.params, prepare=True).fetchall())
                t[mode].append(1000 * (time.perf_counter() - start))
                conn.rollback()
        a, g = statistics.median(t["auto"][5:]), statistics.median(t["generic"][5:])
        print(f"claim of {n} ({got} rows): auto {a:.3f} ms, generic {g:.3f} ms, generic/auto {g/a:.2f}")
