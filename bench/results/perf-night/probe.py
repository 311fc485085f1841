import sys, psycopg, json, statistics, time
dsn = "postgresql://postgres@127.0.0.1:5512/perf_gp"
sides = {s: json.load(open(f"/tmp/perf-gp/{s}.json")) for s in ("base", "branch")}
n = int(sys.argv[1])
with psycopg.connect(dsn, autocommit=True) as conn:
    conn.execute("SET pg_stat_statements.track_planning = on")
    conn.execute("UPDATE portqueue.job SET status='pending', started_at=NULL, attempt=0, lease_token=NULL, lease_expires_at=NULL, worker_id=NULL WHERE status <> 'pending'")
    wall = {}
    for mode in ("auto", "force_generic_plan"):
        conn.execute("SELECT set_config('plan_cache_mode', %s, false)", [mode])
        for s, d in sides.items():
            wall[(s, mode)] = []
        for i in range(n):
            for s, d in sides.items():
                t = time.perf_counter()
                conn.execute(d["sql"] + f" -- probe {s} {mode}", d["params"], prepare=True).fetchall()
                wall[(s, mode)].append(1000 * (time.perf_counter() - t))
    print(conn.execute("SELECT name, generic_plans, custom_plans, left(statement, 0) FROM pg_prepared_statements").fetchall())
    for (s, mode), w in wall.items():
        r = conn.execute("SELECT plans, calls, mean_plan_time, mean_exec_time FROM pg_stat_statements WHERE query LIKE %s", [f"%-- probe {s} {mode}"]).fetchone()
        print(s, mode, f"wall {statistics.median(w[5:]):.3f} ms", r and f"plans {r[0]}/{r[1]} plan {r[2]:.3f} exec {r[3]:.3f}")
