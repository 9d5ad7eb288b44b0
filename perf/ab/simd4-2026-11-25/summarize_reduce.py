import json, statistics, sys, glob, os
HERE = os.path.dirname(os.path.abspath(__file__))
rows = {}
for f in sorted(glob.glob(HERE + '/reduce/after*.json')) + sorted(glob.glob(HERE + '/reduce/before*.json')):
    tag = 'before' if 'before' in f else None
    for r in json.load(open(f))['results']:
        lvl = tag or r['level']
        rows.setdefault((r['dtype'], r['bytes']), {}).setdefault(lvl, []).append(r['best_gbs'])
print("| dtype | bytes/source | before | v2 | avx2 | avx512 | avx512/before |")
print("|---|---|---|---|---|---|---|")
for (dt, b), d in rows.items():
    med = {k: statistics.median(v) for k, v in d.items()}
    size = f"{b>>20} MiB" if b >= 1<<20 else f"{b>>10} KiB"
    n = {k: len(v) for k, v in d.items()}
    print(f"| {dt} | {size} | {med.get('before',0):.2f} | {med['v2']:.2f} | {med['avx2']:.2f} | {med['avx512']:.2f} | {med['avx512']/med.get('before',1):.2f}x |")
print(n, file=sys.stderr)
