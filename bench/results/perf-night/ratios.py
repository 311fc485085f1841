import json, statistics, sys
for side, files in (("base", sys.argv[1].split(",")), ("branch", sys.argv[2].split(","))):
    dr, p5, p9, rates = [], [], [], []
    for f in files:
        d = json.load(open(f))["results"]
        for a, b in zip(d["drain"]["portqueue"], d["drain"]["graphile-worker"]):
            dr.append(a["rate"] / b["rate"]); rates.append(a["rate"])
        for a, b in zip(d["latency"]["portqueue"], d["latency"]["graphile-worker"]):
            p5.append(a["p50_ms"] / b["p50_ms"]); p9.append(a["p99_ms"] / b["p99_ms"])
    m = statistics.median
    print(f"{side}: {len(dr)} runs; drain pq/gw {m(dr):.2f} ({min(dr):.2f}-{max(dr):.2f}), pq drain {m(rates):,.0f}/s; "
          f"p50 pq/gw {m(p5):.2f} ({min(p5):.2f}-{max(p5):.2f}); p99 {m(p9):.2f} ({min(p9):.2f}-{max(p9):.2f})")
    print("   drain", " ".join(f"{x:.2f}" for x in dr)); print("   p50", " ".join(f"{x:.2f}" for x in p5))
