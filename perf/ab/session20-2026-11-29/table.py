"""Table of ab.sh's runs: per test and size, out-of-place / in-place time (us) of each run.
Usage: python table.py DIR [LABEL...]  (default labels: before after after2 before2)."""
import json
import pathlib
import sys

out = pathlib.Path(sys.argv[1])
labels = sys.argv[2:] or ["before", "after", "after2", "before2"]
print("| test | size (B) | " + " | ".join(labels) + " |")
print("|---|---|" + "---|" * len(labels))
for test in ("all_reduce", "all_gather", "all_to_all", "eager", "latency"):
    runs = [json.loads((out / f"{test}_{label}.json").read_text()) for label in labels]
    for i, row in enumerate(runs[0]["rows"]):
        cells = []
        for run in runs:
            r = run["rows"][i]
            cells.append(f"{r['out_of_place']['time_us']:.2f}/{r['in_place']['time_us']:.2f}")
        print(f"| {test} | {row['size']} | " + " | ".join(cells) + " |")
