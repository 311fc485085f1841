#!/usr/bin/env bash
# A/B: sides rotated each round; each invocation takes the bench lock alone.
cd /work/wt/latency
OUT=$1; ROUNDS=$2; shift 2; SIDES=("$@")
n=${#SIDES[@]}
for r in $(seq 0 $((ROUNDS-1))); do
  for k in $(seq 0 $((n-1))); do
    side=${SIDES[$(( (r + k) % n ))]}
    mkdir -p $OUT/$side
    echo "round $r side $side load $(cut -d' ' -f1-3 /proc/loadavg) $(date +%T)"
    PYTHONPATH=/tmp/latency-$side flock /work/wt/bench.lock timeout 900 /root/.pyenv/versions/3.12.1/bin/python3 bench/run.py --runs 1 --scenarios drain,latency --systems portqueue --dsn postgresql://postgres@127.0.0.1:5473/postgres --out $OUT/$side > $OUT/$side/round$r.log 2>&1
    echo "  done $(cut -d' ' -f1-3 /proc/loadavg) $(date +%T) rc=$?"
  done
done
