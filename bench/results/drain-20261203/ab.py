"""A/B rounds, sides alternating.

    python ab.py OUT ROUNDS SCENARIOS NAME=PATH[,ENV=V...] NAME=PATH...

Each round runs bench/run.py --runs 1 once per side (order alternating), each under the
bench lock, and prints per-round ratios of every side to the first.
"""
import glob
import json
import os
import statistics
import subprocess
import sys
import time

out, rounds, scenarios = sys.argv[1], int(sys.argv[2]), sys.argv[3]
sides = []
for arg in sys.argv[4:]:
    name, _, rest = arg.partition("=")
    path, *envs = rest.split(",")
    sides.append((name, path, dict(e.split("=", 1) for e in envs)))
RUN = "/work/wt/drain/bench/run.py"
results = {name: [] for name, _, _ in sides}
for r in range(rounds):
    order = sides if r % 2 == 0 else sides[::-1]
    for name, path, env in order:
        d = f"{out}/{name}-r{r}"
        os.makedirs(d, exist_ok=True)
        load = os.getloadavg()[0]
        cmd = ["flock", "/work/wt/bench.lock", "timeout", "900",
               "/root/.pyenv/versions/3.12.1/bin/python3", RUN, "--runs", "1",
               "--scenarios", scenarios, "--systems", "portqueue",
               "--dsn", "postgresql://postgres@127.0.0.1:5474/postgres", "--out", d]
        subprocess.run(cmd, env={**os.environ, "PYTHONPATH": path, **env},
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        with open(sorted(glob.glob(f"{d}/*.json"))[-1]) as f:
            data = json.load(f)["results"]
        row = {}
        for sc, by in data.items():
            run = by["portqueue"][0]
            row[sc] = run["p50_ms"] if sc == "latency" else run["rate"]
        row["load"] = round(load, 2)
        results[name].append(row)
        print(r, name, row, flush=True)
        time.sleep(1)
base = sides[0][0]
for name, _, _ in sides[1:]:
    for sc in results[base][0]:
        if sc == "load":
            continue
        ratios = [b[sc] / a[sc] for a, b in zip(results[base], results[name], strict=True)]
        print(f"{name}/{base} {sc}: median {statistics.median(ratios):.3f} "
              f"({', '.join(f'{x:.3f}' for x in ratios)})")
with open(f"{out}/summary.json", "w") as f:
    json.dump(results, f, indent=1)
