import json, sys, os
def rows(d, name):
    p = os.path.join(d, name)
    if not os.path.exists(p): return None
    out = {}
    for r in json.load(open(p))["rows"]:
        out[(r["backend"], r["size"])] = r
    return out
dirs = sys.argv[1:]
print("| collective, memory | size | " + " | ".join(f"{os.path.basename(d)} forestcc oop/ip us (x MPI busbw)" for d in dirs) + " |")
print("|---|---|" + "---|" * len(dirs))
for coll in ["all_reduce", "all_gather", "all_to_all", "latency"]:
    for mem in ["numpy", "forestcc"]:
        name = f"{coll}_{mem}_2.json"
        data = [rows(d, name) for d in dirs]
        if any(x is None for x in data): continue
        sizes = sorted({s for (b, s) in data[0] if b == "forestcc"})
        for size in sizes:
            if coll != "latency" and size not in (16, 4096, 65536, 1 << 18, 1 << 20, 4 << 20, 16 << 20, 64 << 20): continue
            cells = []
            for d in data:
                f, m = d.get(("forestcc", size)), d.get(("mpi", size))
                if not f: cells.append("-"); continue
                ratio = f["out_of_place"]["busbw_gbps"] / m["out_of_place"]["busbw_gbps"] if m and m["out_of_place"]["busbw_gbps"] else float("nan")
                cells.append(f'{f["out_of_place"]["time_us"]:.1f}/{f["in_place"]["time_us"]:.1f} ({ratio:.2f})')
            print(f"| {coll}, {mem} | {size} | " + " | ".join(cells) + " |")
