"""Failures of a job on the forestcc backend become torch errors on every rank, not hangs.

argv: CASE
  mismatch   rank 0 all-reduces 4 elements, the others 5: every rank raises (blocking call);
             then the same on a fresh group with async_op=True: Work.wait() raises, exception()
             holds the error; then, on a group made with timeout=3 s, rank 1 stays away from an
             all_reduce: rank 0 raises after 3 s naming rank 1 and rank 1, arriving later, finds
             the group poisoned; then rank 1 stays away from a monitored barrier with a 3 s
             timeout: rank 0 raises naming it. Prints "ERROR", "ASYNC_ERROR", "TIMEOUT",
             "POISONED" and "MONITORED" lines.
  dead_rank  the last rank is SIGKILLed after a first all_reduce; the others' next all_reduce
             raises DistBackendError naming it. Prints "ERROR ...".
  refused    rank 1's all_gather_into_tensor is refused by the backend's own checks (an output
             of the wrong size); it catches the error and goes on to the next all_gather. The
             refusal takes the call's place: the others' first all_gather raises naming rank 1,
             and every rank's second raises, rather than rank 1's second meeting their first
             (the same call: both would return, with data of two different calls).
             Prints "FIRST <rank> ..." and "SECOND <rank> ..." ("... returned" when no error).
  refusedp2p rank 1's send to rank 0, then its receive from rank 0, are refused by the backend's
             own checks (a tag other than 0); it catches each error and goes on. Each refused
             message still takes its place: rank 0's matching recv, then send, raise naming rank
             1, and the pair stays in step (an exchange after them delivers the right tensors, an
             all_reduce of every rank works). Prints "SEND <rank> ...", "RECV <rank> ...",
             "AFTER <rank> ok|wrong ..." (or the exception).
"""
import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import forestcc.torch  # noqa: F401 - registers the backend

case = sys.argv[1]
dist.init_process_group("forestcc", timeout=timedelta(seconds=60))
R, N = dist.get_rank(), dist.get_world_size()


def report(tag, exc):
    print(f"{tag} {type(exc).__name__} {exc}".replace("\n", " "), flush=True)


if case == "mismatch":
    try:
        dist.all_reduce(torch.ones(4 if R == 0 else 5))
        print("NO ERROR", flush=True)
    except RuntimeError as e:
        report("ERROR", e)
    fresh = dist.new_group(backend="forestcc")
    work = dist.all_gather_into_tensor(torch.empty(N * (3 if R == 0 else 6)),
                                       torch.ones(3 if R == 0 else 6), group=fresh, async_op=True)
    try:
        work.wait()
        print("NO ASYNC ERROR", flush=True)
    except RuntimeError as e:
        assert work.is_completed() and not work.is_success() and work.exception() is not None
        report("ASYNC_ERROR", e)
    short = dist.new_group(backend="forestcc", timeout=timedelta(seconds=3))
    store = dist.distributed_c10d._get_default_store()
    if R == 0:
        try:
            dist.all_reduce(torch.ones(8), group=short)
            print("NO ERROR", flush=True)
        except dist.DistBackendError as e:
            report("TIMEOUT", e)
        store.set("rank 0 timed out", "1")
    else:  # arrive only once rank 0 has given up
        store.wait(["rank 0 timed out"], timedelta(seconds=120))
        try:
            dist.all_reduce(torch.ones(8), group=short)
            print("NO ERROR", flush=True)
        except dist.DistBackendError as e:
            report("POISONED", e)
    if R != 1:
        try:
            dist.group.WORLD.monitored_barrier(timedelta(seconds=3), wait_all_ranks=True)
            print("NO ERROR", flush=True)
        except RuntimeError as e:
            if R == 0:
                report("MONITORED", e)
        store.set(f"monitored {R} done", "1")
    else:  # arrive only once every other rank has given up on it
        store.wait([f"monitored {r} done" for r in range(N) if r != 1], timedelta(seconds=120))
elif case == "dead_rank":
    dist.all_reduce(torch.ones(8))
    if R == N - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        for _ in range(100):
            dist.all_reduce(torch.ones(8))
            time.sleep(0.05)
        print("NO ERROR", flush=True)
    except dist.DistBackendError as e:
        report("ERROR", e)
    os._exit(0)  # the group's peers are gone: nothing to tear down with them
elif case == "refused":
    x = torch.full((4,), float(R))
    out = torch.empty(4 * N + (1 if R == 1 else 0))  # rank 1's is refused by the backend
    for tag, call in (("FIRST", lambda: dist.all_gather_into_tensor(out, x)),
                      ("SECOND", lambda: dist.all_gather_into_tensor(torch.empty(4 * N), x + 10))):
        try:
            call()
            print(tag, R, "returned", flush=True)
        except RuntimeError as e:
            print(tag, R, type(e).__name__, str(e).replace("\n", " ")[:500], flush=True)
    os._exit(0)  # the group is poisoned: nothing to tear down with the peers
elif case == "refusedp2p":
    def attempt(tag, call):
        try:
            call()
            print(tag, R, "returned", flush=True)
        except (RuntimeError, ValueError) as e:
            print(tag, R, type(e).__name__, str(e).replace("\n", " ")[:500], flush=True)

    if R == 1:
        attempt("SEND", lambda: dist.send(torch.ones(4), 0, tag=1))
        attempt("RECV", lambda: dist.recv(torch.empty(4), 0, tag=1))
    elif R == 0:
        attempt("SEND", lambda: dist.recv(torch.empty(4), 1))
        attempt("RECV", lambda: dist.send(torch.ones(4), 1))
    try:
        got = torch.zeros(4)
        if R <= 1:
            ops = [dist.P2POp(dist.isend, torch.arange(4.0) + 10 * R, 1 - R),
                   dist.P2POp(dist.irecv, got, 1 - R)]
            for w in dist.batch_isend_irecv(ops):
                w.wait()
        total = torch.ones(1)
        dist.all_reduce(total)
        good = (R > 1 or torch.equal(got, torch.arange(4.0) + 10 * (1 - R))) and total.item() == N
        print("AFTER", R, "ok" if good else f"wrong {got.tolist()} {total.item()}", flush=True)
    except RuntimeError as e:
        print("AFTER", R, type(e).__name__, str(e).replace("\n", " ")[:500], flush=True)
else:
    raise SystemExit(f"unknown case {case}")
dist.destroy_process_group()
