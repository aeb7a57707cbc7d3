import json, glob, statistics, sys
tag, folder = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else ".")
for t in ("new", "old"):
    rows = []
    for f in sorted(glob.glob(f"{folder}/{tag}-{t}-*.json")):
        rows += json.load(open(f))["rounds"]
    r = [x["bare"]/x["braeburn"] for x in rows]; a = [x["braeburn"]-x["bare"] for x in rows]
    q = statistics.quantiles(r, n=4)
    print(f"{t}: {len(rows)} rounds; ratio median {statistics.median(r):.3f} (quartiles {q[0]:.3f}-{q[2]:.3f}, range {min(r):.3f}-{max(r):.3f}); "
          f"adds median {statistics.median(a):.1f} us (quartiles {statistics.quantiles(a, n=4)[0]:.1f}-{statistics.quantiles(a, n=4)[2]:.1f}); "
          f"bare median {statistics.median([x['bare'] for x in rows]):.1f}, braeburn {statistics.median([x['braeburn'] for x in rows]):.1f}; "
          f"fastest rounds {min(x['bare'] for x in rows):.1f} / {min(x['braeburn'] for x in rows):.1f} = {min(x['bare'] for x in rows)/min(x['braeburn'] for x in rows):.3f}; "
          f"rounds >= 0.9: {sum(x >= 0.9 for x in r)}/{len(r)}")
