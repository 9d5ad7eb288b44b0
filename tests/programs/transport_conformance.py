"""One conformance body for every transport (tests/test_transport_conformance.py).
usage: transport_conformance.py TRANSPORT CASE

The transport is chosen by the memory registered: shm reaches forestcc shared allocations, cma
any host memory of a same-node process; tcp (forced with FORESTCC_TRANSPORT=tcp, since the ranks
share a node here) any host memory, through sockets. Every channel must report the transport under test, so
the body cannot silently run over another one."""
import os
import signal
import sys

import numpy as np

import forestcc

transport, case = sys.argv[1], sys.argv[2]
ALLOCATE = {"shm": forestcc.zeros, "cma": lambda n, dt: np.zeros(n, dt), "tcp": lambda n, dt: np.zeros(n, dt)}[transport]
if transport == "tcp":
    os.environ["FORESTCC_TRANSPORT"] = "tcp"
comm = forestcc.init()
r, n = comm.rank, comm.size
nxt, prv = (r + 1) % n, (r - 1) % n
peers = [nxt, prv] if nxt != prv else [nxt]

if case == "data":
    MAX = 4 << 20
    buf = ALLOCATE(2 * MAX, np.uint8)  # source half [0, MAX), destination half [MAX, 2 MAX)
    ch = dict(zip(peers, comm.connect(peers, buf, tag=1)))
    for c in ch.values():
        assert c.transport == transport, (c, transport)
    rng = np.random.default_rng(7)
    for size in [0, 1, 3, 4099, MAX - 5]:  # put at an odd offset, then check after the wait
        off = 5
        data = rng.integers(0, 256, MAX, dtype=np.uint8)  # the same on every rank
        buf[:size] = np.roll(data[:size], r)
        buf[MAX:] = 0
        comm.barrier()
        ch[nxt].put_with_signal(MAX + off, 0, size)
        ch[nxt].flush()
        ch[prv].wait()
        got = buf[MAX + off:MAX + off + size]
        assert np.array_equal(got, np.roll(data[:size], prv)), f"put of {size} B from rank {prv}"
        assert not buf[MAX:MAX + off].any() and not buf[MAX + off + size:].any(), f"put of {size} B spilled"
        comm.barrier()
    for size in [0, 1, 4097]:  # get from the previous rank's source half at an odd offset
        buf[:8192] = (np.arange(8192) + r) % 251
        comm.barrier()
        ch[prv].get(MAX + 3, 1, size)
        want = (np.arange(1, 1 + size) + prv) % 251
        assert np.array_equal(buf[MAX + 3:MAX + 3 + size], want), f"get of {size} B from rank {prv}"
        comm.barrier()
    # Many signals in a row: each wait consumes exactly one, and data is visible after it.
    for k in range(200):
        buf[:8] = (k + r) % 256
        ch[nxt].put(MAX + 8 * (k % 16), 0, 8)
        ch[nxt].signal()
    for k in range(200):
        ch[prv].wait()
    assert not ch[prv].test(), "more signals arrived than were sent"
    comm.barrier()
    print(f"OK rank={r}", flush=True)

elif case == "errors":
    buf = ALLOCATE(1024, np.uint8)
    ch = comm.connect(1 - r, buf, tag=2)
    assert ch.transport == transport, (ch, transport)
    if r == 0:
        for args in [(1020, 0, 8), (0, 1020, 8)]:
            try:
                ch.put(*args)
                print("NO ERROR", args, flush=True)
            except ValueError as e:
                print("RANGE", e, flush=True)
        try:
            ch.wait(timeout=1)
            print("NO ERROR wait", flush=True)
        except forestcc.TimeoutError as e:
            assert (e.rank, e.peer) == (0, 1), (e.rank, e.peer)
            print("TIMEOUT", e, flush=True)
        ch.signal()  # the caller's timeout left the channel usable: rank 1's wait ends here
    else:
        ch.wait(timeout=120)
    comm.barrier()

elif case == "dead":
    buf = ALLOCATE(1024, np.uint8)
    ch = comm.connect(1 - r, buf, tag=3)
    assert ch.transport == transport, (ch, transport)
    if r == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        ch.wait()
    except forestcc.RemoteError as e:
        print("DEAD", e, flush=True)
