"""plans / calls, mean plan and exec ms of a claim of n under each plan_cache_mode
(pg_stat_statements, track_planning on), on perf_gp made by gp.py."""
import sys, uuid
import psycopg
from portqueue.queries import queries_for
dsn = "postgresql://postgres@127.0.0.1:5512/perf_gp"
q = queries_for("portqueue")
with psycopg.connect(dsn) as conn:
    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); conn.commit()
    conn.execute("SET pg_stat_statements.track_planning = on"); conn.commit()
    for n in [int(s) for s in sys.argv[1].split(",")]:
        query = q("claim", queues=["gp"], slots=[n], lease_seconds=[60], matching_patterns=[],
                  refused_patterns=[], worker_id=str(uuid.uuid4()), holding=[])
        for mode in ("auto", "force_generic_plan"):
            conn.execute("SELECT pg_stat_statements_reset()"); conn.commit()
            conn.execute("SELECT set_config('plan_cache_mode', %s, false)", [mode]); conn.commit()
            sql = query.sql + f" -- {mode} {n}"
            for _ in range(int(sys.argv[2])):
                conn.execute(sql, query.params, prepare=True).fetchall()
                conn.rollback()
            row = conn.execute("SELECT plans, calls, mean_plan_time, mean_exec_time FROM pg_stat_statements "
                               "WHERE query LIKE %s", [f"%-- {mode} {n}"]).fetchone()
            conn.rollback()
            print(f"claim of {n}, {mode}: plans {row[0]} / calls {row[1]}, plan {row[2]:.3f} ms, exec {row[3]:.3f} ms")
