"""Send/recv of GPU memory (issues 15 and 16): the rank program of tests/test_gpu_p2p.py.

usage: gpu_p2p_check.py MODE [--lib torch|cupy|numpy]
  check     one line per feature, "OK <feature>" or "FAIL <feature>: ...":
              dtypes     send/recv of every dtype around a ring (an async send, a blocking recv)
              ring       a batch (send_recv) around the ring, 4 MiB per message
              many       one batch with several messages of different sizes (zero too) to every
                         rank, itself included, half of them slices of one allocation, and (GPU
                         runs) a host-memory message to every rank in the same batch
              alltoallv  all_to_all with uneven splits (zero blocks too) as one batch
              reuse      rank 0 overwrites its send buffer on its stream right after send returns
                         while rank 1's stream is held back (a long kernel) before its recv: rank 1
                         must get the old data; then rank 0 holds its stream back before it writes
                         and sends, and rank 1 reads what it received at once on its stream
              async      async send and recv handles, waited and polled, then synchronize()
              stream     the stream given as an argument (not the current one)
  mismatch  ranks 0 and 1 exchange a message of different sizes, then (GPU only) GPU memory to
            host memory; each prints "MISMATCH <what> <type> <message>" for the error it raised,
            then "OK after" for a good exchange; then rank 0's batch of two messages is received
            in two recvs and two sends in one batch of recvs ("OK split": messages match in
            order whatever the batches; on the GPU also a batch of a GPU and a host message
            received in two).
            First every rank checks that stream= on host memory is refused ("OK stream refused").
  killed    after a warm-up exchange rank 1 exits, at once or --when later (2 s); every other rank
            receives from it and prints "RAISED <type> <message>" (run without forestcc-run,
            which would stop them at once).
  nocuda    (a build without CUDA) a fake __cuda_array_interface__ array sent from rank 0 to 1:
            each prints "REFUSED <type> <message>".

--lib numpy runs the same checks on host memory (the CPU stand-in, so CI runs the program).
Results are read on the caller's stream, never after an extra synchronize: a copy the stream
does not order shows up as wrong data.
"""
import argparse
import os
import sys
import time
import traceback

import ml_dtypes
import numpy as np

import forestcc

DTYPES = {"int8": np.int8, "uint8": np.uint8, "int32": np.int32, "uint32": np.uint32,
          "int64": np.int64, "uint64": np.uint64, "float16": np.float16,
          "bfloat16": ml_dtypes.bfloat16, "float32": np.float32, "float64": np.float64,
          "float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2}
NO_CUPY = ("bfloat16", "float8_e4m3fn", "float8_e5m2")

parser = argparse.ArgumentParser()
parser.add_argument("mode", choices=["check", "mismatch", "killed", "nocuda"])
parser.add_argument("--lib", default="torch", choices=["torch", "cupy", "numpy"])
parser.add_argument("--when", default="now", choices=["now", "later"])
args = parser.parse_args()

LIB = args.lib
if LIB == "torch":
    import torch
elif LIB == "cupy":
    import cupy

comm = forestcc.init()
N, R = comm.size, comm.rank
if LIB == "torch":
    torch.cuda.set_device(comm.local_rank % torch.cuda.device_count())
elif LIB == "cupy":
    cupy.cuda.Device(comm.local_rank % cupy.cuda.runtime.getDeviceCount()).use()


# -- arrays -------------------------------------------------------------------------------------

def alloc(count, name="float32"):
    """A 1-D array of `count` elements in this run's memory (the framework's allocator)."""
    if LIB == "numpy":
        return forestcc.empty(count, dtype=DTYPES[name])
    if LIB == "torch":
        return torch.empty(count, dtype=getattr(torch, name), device="cuda")
    return cupy.empty(count, dtype=DTYPES[name])


def to_device(dev, host):
    """Copy the numpy array `host` (same dtype and size) into `dev`, on the current stream."""
    raw = np.ascontiguousarray(host).reshape(-1).view(np.uint8)
    if raw.size == 0:
        return dev
    if LIB == "numpy":
        dev.reshape(-1).view(np.uint8)[...] = raw
    elif LIB == "torch":
        dev.view(torch.uint8).copy_(torch.from_numpy(raw.copy()))
    else:
        dev.view(cupy.uint8).set(raw)
    return dev


def to_host(dev):
    """`dev`'s bytes as a numpy uint8 array, read on the current stream."""
    if LIB == "numpy":
        return np.array(dev, copy=True).reshape(-1).view(np.uint8)
    if LIB == "torch":
        return dev.contiguous().view(torch.uint8).cpu().numpy()
    return dev.view(cupy.uint8).get()


def values(src, dst, k, count, name="float32"):
    """What rank `src` sends rank `dst` as its message `k`: small integers in `name`."""
    i = np.arange(count, dtype=np.int64)
    v = (i * 5 + src * 11 + dst * 3 + k * 7) % 13
    kind = np.dtype(DTYPES[name]).kind
    if kind in "iu":
        return v.astype(DTYPES[name])
    return v.astype(np.float64).astype(DTYPES[name])


def filled(src, dst, k, count, name="float32"):
    return to_device(alloc(count, name), values(src, dst, k, count, name))


def garbage(count, name="float32"):
    """A receive buffer whose old contents are not a right answer."""
    return to_device(alloc(count, name), np.full(count, 99, np.float64).astype(DTYPES[name]))


def expect(label, dev, want):
    got = np.array(dev).reshape(-1).view(np.uint8) if isinstance(dev, np.ndarray) else to_host(dev)
    want = np.ascontiguousarray(want).reshape(-1).view(np.uint8)
    if not np.array_equal(got, want):
        bad = np.flatnonzero(got != want) if got.shape == want.shape else np.array([-1])
        raise AssertionError(f"{label}: {len(bad)} of {want.size} bytes wrong, first at "
                             f"{bad[:3].tolist()}: got {got[bad[:3]].tolist() if bad[0] >= 0 else got.shape}")


def hold_stream():
    """Holds the current stream back (~0.2 s of a kernel that spins), so that work enqueued
    after it runs late; nothing on host memory."""
    if LIB == "torch":
        torch.cuda._sleep(400_000_000)
    elif LIB == "cupy":
        spin = cupy.RawKernel(r'''
extern "C" __global__ void spin(long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) {}
}''', "spin")
        spin((1,), (1,), (np.int64(400_000_000),))


def fill_async(dev, value):
    """Sets every element of `dev` with a kernel on the current stream (the host does not wait)."""
    if LIB == "numpy":
        dev[...] = value
    else:
        dev.fill_(value) if LIB == "torch" else dev.fill(value)


def new_stream():
    return torch.cuda.Stream() if LIB == "torch" else cupy.cuda.Stream(non_blocking=True)


def on_stream(s):
    return torch.cuda.stream(s) if LIB == "torch" else s


def sync():
    if LIB != "numpy":
        comm.synchronize()


NXT, PRV = (R + 1) % N, (R - 1) % N


# -- check --------------------------------------------------------------------------------------

def feature_dtypes():
    names = [n for n in DTYPES if not (LIB == "cupy" and n in NO_CUPY)]
    for name in names:
        for count in (1, 1001):
            x = filled(R, NXT, 0, count, name)
            out = garbage(count, name)
            work = comm.send(x, NXT, async_op=True)
            comm.recv(out, PRV)
            work.wait()
            expect(f"{name} x {count} from rank {PRV}", out, values(PRV, R, 0, count, name))


def feature_ring():
    count = 1 << 20
    x = filled(R, NXT, 0, count)
    out = garbage(count)
    assert comm.send_recv(sends=[(x, NXT)], recvs=[(out, PRV)]) is None
    expect(f"ring from rank {PRV}", out, values(PRV, R, 0, count))


def sizes_for(src, dst):
    base = [0, 1, 7, 4099, 0, 65539]
    shift = (src + dst) % len(base)
    return base[shift:] + base[:shift]


def feature_many():
    sends, recvs, checks = [], [], []
    for peer in range(N):
        out_sizes, in_sizes = sizes_for(R, peer), sizes_for(peer, R)
        # Half the messages are slices of one allocation (their offsets in it travel too).
        whole = alloc(sum(out_sizes[::2]) or 1)
        at = 0
        for k, count in enumerate(out_sizes):
            if k % 2 == 0:
                x = to_device(whole[at:at + count], values(R, peer, k, count))
                at += count
            else:
                x = filled(R, peer, k, count)
            sends.append((x, peer))
        for k, count in enumerate(in_sizes):
            out = garbage(count)
            recvs.append((out, peer))
            checks.append((f"message {k} ({count} elements) from rank {peer}", out,
                           values(peer, R, k, count)))
        if LIB != "numpy":  # host memory in the same batch, to host memory
            sends.append((values(R, peer, 9, 257), peer))
            host_out = np.zeros(257, np.float32)
            recvs.append((host_out, peer))
            checks.append((f"host message from rank {peer}", host_out, values(peer, R, 9, 257)))
    comm.send_recv(sends, recvs)
    for label, out, want in checks:
        expect(label, out, want)


def splits(src, dst):
    return ((src + 2 * dst) % 4) * 1000 + (17 if src == dst else 0)


def feature_alltoallv():
    send_counts = [splits(R, p) for p in range(N)]
    recv_counts = [splits(p, R) for p in range(N)]
    host_x = np.concatenate([values(R, p, 0, send_counts[p]) for p in range(N)])
    x = to_device(alloc(len(host_x)), host_x)
    out = garbage(sum(recv_counts))
    sends, recvs = [], []
    off = 0
    for p in range(N):
        sends.append((x[off:off + send_counts[p]], p))
        off += send_counts[p]
    off = 0
    for p in range(N):
        recvs.append((out[off:off + recv_counts[p]], p))
        off += recv_counts[p]
    comm.send_recv(sends, recvs)
    expect("all_to_all_v", out, np.concatenate([values(p, R, 0, recv_counts[p]) for p in range(N)]))


def feature_reuse():
    count = 1 << 22  # 16 MiB of float32
    old = np.full(count, 5, np.float32)
    if R == 0:
        x = to_device(alloc(count), old)
        sync()
        comm.send(x, 1)
        fill_async(x, 9)  # on the stream, right after send returned: after rank 1's copy read x
        comm.barrier()
        hold_stream()
        fill_async(x, 7)  # written late on the stream (the host does not wait), then sent
        comm.send(x, 1)
        sync()
    elif R == 1:
        out = garbage(count)
        hold_stream()  # the copy runs late on this stream
        comm.recv(out, 0)
        expect("the send buffer overwritten after send", out, old)
        comm.barrier()
        comm.recv(out, 0)
        expect("data written late before the send", out, np.full(count, 7, np.float32))
    else:
        comm.barrier()


def feature_async():
    count = 3001
    x = filled(R, NXT, 1, count)
    out = garbage(count)
    recv_work = comm.recv(out, PRV, async_op=True)
    send_work = comm.send(x, NXT, async_op=True)
    recv_work.wait()
    send_work.wait()
    if not (recv_work.is_completed() and send_work.is_completed()):
        raise AssertionError("a waited handle is not completed")
    expect("async recv", out, values(PRV, R, 1, count))
    work = comm.send_recv([(x, NXT)], [(out, PRV)], async_op=True)
    work.wait()
    comm.synchronize()
    expect("async batch", out, values(PRV, R, 1, count))


def feature_stream():
    if LIB == "numpy":
        return
    s = new_stream()
    count = 50001
    with on_stream(s):
        x = filled(R, NXT, 2, count)
        out = garbage(count)
    comm.send_recv([(x, NXT)], [(out, PRV)], stream=s)
    with on_stream(s):
        expect("on a stream given as an argument", out, values(PRV, R, 2, count))
    work = comm.send(x, NXT, async_op=True, stream=s)
    comm.recv(out, PRV, stream=s)
    work.wait()
    with on_stream(s):
        expect("send/recv on a given stream", out, values(PRV, R, 2, count))


FEATURES = [("dtypes", feature_dtypes), ("ring", feature_ring), ("many", feature_many),
            ("alltoallv", feature_alltoallv), ("reuse", feature_reuse), ("async", feature_async),
            ("stream", feature_stream)]


def run_check():
    failed = 0
    for name, fn in FEATURES:
        try:
            fn()
            sync()
            print(f"OK {name}", flush=True)
        except Exception as e:  # noqa: BLE001 - reported by name; a forestcc error ends the run
            failed += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
            traceback.print_exc()
            if isinstance(e, (ValueError, RuntimeError, TimeoutError)) and "rank" in str(e):
                break
    return 1 if failed else 0


# -- errors -------------------------------------------------------------------------------------

def raised(what, fn):
    try:
        fn()
        sync()
    except Exception as e:  # noqa: BLE001 - judged by the test from the printed type and message
        print(f"MISMATCH {what} {type(e).__name__} {str(e).splitlines()[0]}", flush=True)
        return
    print(f"FAIL {what}: nothing raised", flush=True)


def run_mismatch():
    host = np.zeros(4, np.float32)
    # a refused message still takes its place (its match on the peer fails): the refused send to
    # NXT meets NXT's refused recv from this rank, the batch the peers' batches
    for call in (lambda: comm.send(host, NXT, stream=0),
                 lambda: comm.recv(np.zeros(4, np.float32), PRV, stream=0),
                 lambda: comm.send_recv(sends=[(host, NXT)], recvs=[(np.zeros(4, np.float32), PRV)], stream=0)):
        try:
            call()
            print("FAIL stream= on host memory was accepted", flush=True)
            return 1
        except ValueError as e:
            if "stream" not in str(e):
                raise
    print("OK stream refused", flush=True)
    if R == 0:
        raised("size", lambda: comm.send(filled(0, 1, 0, 10), 1))
        if LIB != "numpy":
            raised("kind", lambda: comm.send(filled(0, 1, 0, 6), 1))
        comm.send(filled(0, 1, 3, 33), 1)
        print("OK after", flush=True)
        # one batch of two, received in two batches (on the GPU the second waits for the first's
        # copies); then two sends received in one batch
        comm.send_recv(sends=[(filled(0, 1, 4, 5), 1), (filled(0, 1, 5, 7), 1)])
        comm.send(filled(0, 1, 6, 3), 1)
        comm.send(filled(0, 1, 7, 9), 1)
        if LIB != "numpy":
            # GPU then host memory in one batch, received in two: the host-only second part
            # records the receive event the sender's stream waits for
            comm.send_recv(sends=[(filled(0, 1, 8, 6), 1), (values(0, 1, 9, 4), 1)])
        sync()
        print("OK split", flush=True)
    elif R == 1:
        raised("size", lambda: comm.recv(garbage(11), 0))
        if LIB != "numpy":
            raised("kind", lambda: comm.recv(np.zeros(6, np.float32), 0))
        out = garbage(33)
        comm.recv(out, 0)
        expect("after the mismatches", out, values(0, 1, 3, 33))
        print("OK after", flush=True)
        first, second = garbage(5), garbage(7)
        comm.recv(first, 0)
        comm.recv(second, 0)
        expect("the first of a batch of two received alone", first, values(0, 1, 4, 5))
        expect("the second of a batch of two received alone", second, values(0, 1, 5, 7))
        third, fourth = garbage(3), garbage(9)
        comm.send_recv(recvs=[(third, 0), (fourth, 0)])
        expect("two sends received in one batch", third, values(0, 1, 6, 3))
        expect("two sends received in one batch", fourth, values(0, 1, 7, 9))
        if LIB != "numpy":
            gpu_part, host_part = garbage(6), np.zeros(4, np.float32)
            comm.recv(gpu_part, 0)
            comm.recv(host_part, 0)
            expect("the GPU part of a mixed batch received alone", gpu_part, values(0, 1, 8, 6))
            expect("the host part of a mixed batch received alone", host_part, values(0, 1, 9, 4))
        print("OK split", flush=True)
    return 0


def run_killed():
    x, out = filled(R, NXT, 0, 1000), garbage(1000)
    comm.send_recv([(x, NXT)], [(out, PRV)])  # connections made and checked before anyone dies
    expect("warm-up", out, values(PRV, R, 0, 1000))
    sync()
    print("OK warm-up", flush=True)
    if R == 1:
        if args.when == "later":
            time.sleep(2)  # the others wait in their receive by now
        print("EXITING", flush=True)
        os._exit(1)
    try:
        comm.recv(out, 1)
        sync()
    except forestcc.ForestccError as e:
        print("RAISED", type(e).__name__, str(e).replace("\n", " | "), flush=True)
        return 0
    print("FAIL a recv from a dead rank returned without an error", flush=True)
    return 1


class FakeGpuArray:
    """Host memory that says it is GPU memory (__cuda_array_interface__)."""

    def __init__(self, host):
        self.host = host
        self.__cuda_array_interface__ = {"shape": host.shape, "typestr": host.dtype.str,
                                         "data": (host.ctypes.data, False), "version": 3,
                                         "strides": None}


def run_nocuda():
    fake = FakeGpuArray(np.zeros(16, np.float32))
    try:
        if R == 0:
            comm.send(fake, 1)
        elif R == 1:
            comm.recv(fake, 0)
    except Exception as e:  # noqa: BLE001 - judged by the test from the printed type and message
        print(f"REFUSED {type(e).__name__} {str(e).splitlines()[0]}", flush=True)
        return 0
    print("FAIL nothing raised", flush=True)
    return 1


MODES = {"check": run_check, "mismatch": run_mismatch, "killed": run_killed, "nocuda": run_nocuda}
sys.exit(MODES[args.mode]())
