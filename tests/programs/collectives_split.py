"""Two communicators at once: the world and a split into even/odd ranks, with asynchronous
collectives on both in flight together."""
import numpy as np

import forestcc

world = forestcc.init()
R, N = world.rank, world.size
sub = world.split(R % 2, key=-R)  # reversed order inside each half
members = [r for r in range(N) if r % 2 == R % 2]
assert sub.size == len(members)
assert sub.rank == sorted(members, reverse=True).index(R)
assert world.split(None) is None  # color None takes no part (a collective call all the same)

a = np.full(1 << 16, R, dtype=np.int64)
b = np.full(1 << 16, R, dtype=np.int64)
wa = world.all_reduce(a, async_op=True)
wb = sub.all_reduce(b, async_op=True)
wb.wait()
wa.wait()
assert (a == sum(range(N))).all()
assert (b == sum(members)).all()
out = np.empty(sub.size, dtype=np.int64)
sub.all_gather(out, np.array([R], dtype=np.int64))
assert out.tolist() == sorted(members, reverse=True), out

# One rank refuses its arguments of a split (a key that is no integer): every rank raises at once,
# naming it (it took part in the exchange as a refusal; the others waited out their timeout for it
# before), and the world goes on working.
try:
    world.split(0, key=1.5 if R == N - 1 else R)
    raise AssertionError(f"rank {R}: a split that rank {N - 1} refused returned")
except ValueError as e:
    assert ("key: must be an integer" in str(e)) if R == N - 1 else (f"rank {N - 1} refused" in str(e)), str(e)
a[:] = R
world.all_reduce(a)
assert (a == sum(range(N))).all()
print("OK")
