"""The claim statement of base and branch, alternating, one job (or n), prepared as the
worker's is; plans/calls and mean plan/exec ms from pg_stat_statements, and wall medians."""
import json, statistics, sys, time
import psycopg
dsn = "postgresql://postgres@127.0.0.1:5512/perf_gp"
sides = {s: json.load(open(f"/tmp/perf-gp/{s}.json")) for s in ("base", "branch")}
wall = {s: [] for s in sides}
with psycopg.connect(dsn) as conn:
    conn.execute("SET pg_stat_statements.track_planning = on"); conn.commit()
    conn.execute("SELECT pg_stat_statements_reset()"); conn.commit()
    for _ in range(int(sys.argv[1])):
        for s, d in sides.items():
            start = time.perf_counter()
            conn.execute(d["sql"] + f" -- side {s}", d["params"], prepare=True).fetchall()
            wall[s].append(1000 * (time.perf_counter() - start))
            conn.rollback()
    for s in sides:
        row = conn.execute("SELECT plans, calls, mean_plan_time, mean_exec_time FROM pg_stat_statements "
                           "WHERE query LIKE %s", [f"%-- side {s}"]).fetchone()
        print(f"{s}: wall {statistics.median(wall[s]):.3f} ms, plans {row[0]}/{row[1]}, plan {row[2]:.3f}, exec {row[3]:.3f}")
    conn.rollback()
