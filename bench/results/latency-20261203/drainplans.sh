#!/usr/bin/env bash
# One bench drain with pg_stat_statements.track_planning on: the claims' calls, plans, plan and exec time.
cd /work/wt/latency
P="psql -h 127.0.0.1 -p 5473 -U postgres postgres -qAt"
$P -c "ALTER SYSTEM SET pg_stat_statements.track_planning = on" -c "SELECT pg_reload_conf()" >/dev/null
$P -c "SELECT pg_stat_statements_reset()" >/dev/null
PYTHONPATH=$1 /root/.pyenv/versions/3.12.1/bin/python3 bench/run.py --runs 1 --scenarios $2 --systems portqueue --dsn postgresql://postgres@127.0.0.1:5473/postgres --out /tmp/latency-ab/plans 2>&1 | grep -E "rate|p50" | head -3
$P -F ' | ' -c "SELECT calls, plans, round(mean_plan_time::numeric,3), round(mean_exec_time::numeric,3), left(regexp_replace(query, '\s+', ' ', 'g'), 40) FROM pg_stat_statements WHERE query LIKE 'WITH mixed AS%' OR query LIKE 'WITH RECURSIVE wanted%' OR query LIKE 'WITH wanted AS%' ORDER BY calls DESC"
$P -c "ALTER SYSTEM RESET pg_stat_statements.track_planning" -c "SELECT pg_reload_conf()" >/dev/null
