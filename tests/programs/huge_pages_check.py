"""Large private buffers that calls use again go onto 2 MiB pages (cpp/src/executor/huge_pages.hpp).
Each rank all-reduces a 16 MiB buffer of its own anonymous memory on 4 KiB pages three times and
reads /proc/self/smaps after each call: no huge page after the first use, huge pages from the
second on, unless FORESTCC_HUGE_PAGE_BYTES=0 (argv[1] == "off": never). The sums stay right
throughout. Rank 0 prints "HUGE PAGES <kB after each call>", or "UNSUPPORTED <why>" where the
kernel cannot move pages (MADV_COLLAPSE, Linux 6.1) or backs every mapping with huge pages anyway.
"""
import ctypes
import mmap
import sys

import numpy as np

import forestcc

MADV_COLLAPSE = 25
HUGE = 2 << 20
libc = ctypes.CDLL(None, use_errno=True)
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def huge_kb(address):
    """AnonHugePages of the mapping that holds `address`."""
    inside = False
    with open("/proc/self/smaps") as fh:
        for line in fh:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(v, 16) for v in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "AnonHugePages:":
                return int(line.split()[1])
    raise SystemExit(f"no mapping holds {address:#x}")


def unsupported():
    """Why this machine cannot show the move, or None."""
    with open("/sys/kernel/mm/transparent_hugepage/enabled") as fh:
        if "[always]" in fh.read():
            return "every anonymous mapping may get huge pages when touched"
    probe = mmap.mmap(-1, 2 * HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    view = np.frombuffer(probe, np.uint8)
    view[:] = 1
    base = (view.ctypes.data + HUGE - 1) // HUGE * HUGE
    ok = libc.madvise(base, HUGE, MADV_COLLAPSE) == 0
    errno = ctypes.get_errno()
    del view
    probe.close()
    return None if ok else f"madvise(MADV_COLLAPSE) fails here (errno {errno})"


comm = forestcc.init()
why = unsupported()
if why:
    if comm.rank == 0:
        print("UNSUPPORTED", why, flush=True)
    sys.exit(0)
count = (16 << 20) // 4
region = mmap.mmap(-1, count * 4, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # 4 KiB pages
x = np.frombuffer(region, np.float32)
seen = []
for call in range(3):
    x[:] = comm.rank + call
    comm.all_reduce(x, algo="direct")
    expect = sum(range(comm.size)) + comm.size * call
    assert (x == expect).all(), (call, x[:4], expect)
    seen.append(huge_kb(x.ctypes.data))
off = len(sys.argv) > 1 and sys.argv[1] == "off"
assert seen[0] == 0, seen
assert (seen[1] == 0 and seen[2] == 0) if off else (seen[1] >= 2048 and seen[2] >= 2048), seen
if comm.rank == 0:
    print("HUGE PAGES", *seen, flush=True)
del x
