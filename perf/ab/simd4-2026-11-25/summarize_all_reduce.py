import json, glob, os, statistics
HERE = os.path.dirname(os.path.abspath(__file__))
res = {}
for f in glob.glob(HERE + '/all_reduce/*.json'):
    tag, dt, r = f.split('/')[-1][:-5].split('-')
    for row in json.load(open(f))['rows']:
        for place in ('out_of_place', 'in_place'):
            res.setdefault((dt, row['size'], place), {}).setdefault(tag, []).append(row[place]['time_us'])
            assert row[place]['wrong'] == 0, f
print("| dtype | size | out of place: before / after us (median of rounds) | after/before busbw | in place: before / after us | after/before busbw | rounds |")
print("|---|---|---|---|---|---|---|")
keys = sorted({(dt, s) for dt, s, _ in res}, key=lambda k: (['float', 'bfloat16', 'half'].index(k[0]), k[1]))
for dt, s in keys:
    cells = []
    for place in ('out_of_place', 'in_place'):
        d = res[(dt, s, place)]
        b, a = statistics.median(d.get('before', [0])), statistics.median(d.get('after', [0]))
        cells += [f"{b:.1f} / {a:.1f}", f"{b / a:.2f}x" if a else "-"]
    size = f"{s >> 20} MiB" if s >= 1 << 20 else f"{s >> 10} KiB"
    n = min(len(v) for v in res[(dt, s, 'in_place')].values())
    print(f"| {dt} | {size} | {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} | {n} |")
