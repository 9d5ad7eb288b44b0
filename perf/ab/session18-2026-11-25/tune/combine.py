"""Rules from the elementwise minimum of several --tune logs' cost matrices (node-layout
algorithms dropped), through forestcc_perf.tune's own choose/placement_rules."""
import json, re, sys
from forestcc_perf import tune
ranks = tuple(int(x) for x in sys.argv[1].split(":"))
logs = sys.argv[2:]
costs = {}   # (coll, in_place) -> size -> algo -> min time
for path in logs:
    coll = None
    for ln in open(path):
        m = re.match(r"# (\w+)(?: \((out of place|in place)\))?$", ln.strip())
        if m and m.group(1) in tune.TUNED:
            coll, ip = m.group(1), m.group(2) == "in place"
            continue
        if ln.startswith("#        bytes"):
            algos = ln.split()[2:]
            continue
        m = re.match(r"#\s+(\d+)\s+(.*)$", ln)
        if coll and m and coll != "barrier":
            size = int(m.group(1))
            cells = m.group(2).replace("*", "").split()
            row = costs.setdefault((coll, ip), {}).setdefault(size, {})
            for a, c in zip(algos, cells):
                if c in ("-", "wrong") or a in ("hierarchical", "2dh"):
                    continue
                row[a] = min(float(c), row.get(a, float("inf")))
rules = []
for coll in tune.TUNED:
    if coll == "barrier":
        continue
    times = {ip: by for (c, ip), by in costs.items() if c == coll}
    if coll in tune.ONE_PLACEMENT:
        times = tune.one_placement(times)
    rules += tune.placement_rules(coll, times, ranks, "private")
json.dump(rules, sys.stdout, indent=0)
