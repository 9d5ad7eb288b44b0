"""Runs mutated plan files through the collectives API: each must be refused before it runs (a
PlanError naming the file, the buffers untouched) or compute exactly the right data, and a
built-in call right after must still be right.

argv: MANIFEST, a JSON list of {"path", "collective", "in_place", "root", "k"}.
Prints per entry i: "MUTANT i RIGHT", "MUTANT i REFUSED <sha256 of the message>" or
"MUTANT i WRONG/ERROR ...", then "BUILTIN i RIGHT" or "BUILTIN i WRONG ..."; stops at the first
error that is not a refusal (the communicator may be poisoned) and exits 1 then.
"""
import hashlib
import json
import sys

import numpy as np

import forestcc
from forestcc.plan import PlanError

comm = forestcc.init()
N, R = comm.size, comm.rank
SENTINEL = -7777


def data(rank, count, salt):
    """Distinct small integers per rank, position and entry (int64: sums are exact)."""
    i = np.arange(count, dtype=np.int64)
    return (i * 7 + rank * 1009 + salt * 31) % 100003


def run(entry, salt):
    """(the call, its result array, the right result, the buffers it may touch, their contents
    before) of one call of the entry's plan file."""
    coll, in_place, root = entry["collective"], entry["in_place"], entry["root"]
    path = entry["path"]
    c = 3 * entry["k"] + 2  # elements per block: chunks of unequal length
    if coll == "all_reduce":
        x = data(R, c, salt)
        out = x if in_place else np.full(c, SENTINEL, dtype=np.int64)
        want = sum(data(q, c, salt) for q in range(N))
        before = [x.copy(), out.copy()]
        return lambda: comm.all_reduce(x, out=None if in_place else out, algo=path), out, want, \
            [x, out], before
    if coll == "all_gather":
        out = np.full(N * c, SENTINEL, dtype=np.int64)
        if in_place:
            x = out[R * c:(R + 1) * c]
            x[...] = data(R, c, salt)
        else:
            x = data(R, c, salt)
        want = np.concatenate([data(q, c, salt) for q in range(N)])
        before = [x.copy(), out.copy()]
        return lambda: comm.all_gather(out, x, algo=path), out, want, [x, out], before
    if coll == "reduce_scatter":
        x = data(R, N * c, salt)
        out = x[R * c:(R + 1) * c] if in_place else np.full(c, SENTINEL, dtype=np.int64)
        want = sum(data(q, N * c, salt) for q in range(N))[R * c:(R + 1) * c]
        before = [x.copy(), out.copy()]
        return lambda: comm.reduce_scatter(out, x, algo=path), out, want, [x, out], before
    if coll == "all_to_all":
        x = data(R, N * c, salt)
        out = x if in_place else np.full(N * c, SENTINEL, dtype=np.int64)
        want = np.concatenate([data(q, N * c, salt)[R * c:(R + 1) * c] for q in range(N)])
        before = [x.copy(), out.copy()]
        return lambda: comm.all_to_all(out, x, algo=path), out, want, [x, out], before
    if coll == "broadcast":
        x = data(R, c, salt)
        want = data(root, c, salt)
        before = [x.copy()]
        return lambda: comm.broadcast(x, root, algo=path), x, want, [x], before
    raise ValueError(f"unknown collective {coll!r}")


def builtin_right(salt):
    y = data(R, 1000 + salt, salt)
    comm.all_reduce(y, algo="direct")
    return np.array_equal(y, sum(data(q, 1000 + salt, salt) for q in range(N)))


with open(sys.argv[1]) as f:
    manifest = json.load(f)
status = 0
for i, entry in enumerate(manifest):
    call, out, want, touched, before = run(entry, i)
    try:
        call()
    except PlanError as error:
        message = str(error)
        untouched = all(np.array_equal(a, b) for a, b in zip(touched, before, strict=True))
        if entry["path"] not in message.splitlines()[0] or not untouched:
            print(f"MUTANT {i} ERROR refusal without the file name or after touching the buffers: "
                  f"{message[:300]!r}", flush=True)
            status = 1
            break
        print(f"MUTANT {i} REFUSED {hashlib.sha256(message.encode()).hexdigest()[:16]}", flush=True)
    except Exception as error:  # noqa: BLE001 - reported; the communicator may be poisoned
        print(f"MUTANT {i} ERROR {type(error).__name__}: {str(error)[:300]!r}", flush=True)
        status = 1
        break
    else:
        if np.array_equal(out, want):
            print(f"MUTANT {i} RIGHT", flush=True)
        else:
            bad = np.flatnonzero(out != want)
            print(f"MUTANT {i} WRONG {bad.size} elements, first at {bad[0]}", flush=True)
            status = 1
    try:
        right = builtin_right(i)
    except Exception as error:  # noqa: BLE001
        print(f"BUILTIN {i} ERROR {type(error).__name__}: {str(error)[:300]!r}", flush=True)
        status = 1
        break
    print(f"BUILTIN {i} {'RIGHT' if right else 'WRONG'}", flush=True)
    if not right:
        status = 1
sys.exit(status)
