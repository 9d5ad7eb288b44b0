"""Run another rank program with forestcc.torch's CUDA path taken by CPU tensors, for machines
without a GPU: the plumbing of that path (the call, then its finishing step, then an event on the
stream; ``wait()`` making the current stream wait for the event; the CUDA-aware futures; the
launcher threads of send/recv; barrier and shutdown) runs in the CI, not only on a GPU machine.

torch.cuda's device and stream contexts, ``current_stream``, ``Event`` and the futures' ``devices``
are replaced by host stand-ins that check how they are used (an event is recorded on the call's
stream before anything waits for it); every forestcc call is made synchronous, which is the order
a stream would give. What only a GPU shows (real streams, IPC, kernels) is
tests/test_gpu_torch_backend.py's GPU tests' job. At exit prints
"PATH enqueued=<n> waited=<n> futures=<n> launched=<n>".

argv: PROGRAM [ARGS...]  (a tests/programs/torch_gpu_*.py program, with --device cpu)
"""
import atexit
import contextlib
import runpy
import sys

import torch

import forestcc.torch  # noqa: F401 - registers the backend
from forestcc.torch import cuda_work, process_group, work

counts = {"enqueued": 0, "waited": 0, "futures": 0, "launched": 0}


class HostStream:
    """Stands in for torch's current stream: everything on it already ran."""

    def wait_event(self, event):
        assert isinstance(event, HostEvent) and event.recorded, f"waited for {event!r}"
        counts["waited"] += 1


STREAM = HostStream()


class HostEvent:
    def __init__(self):
        self.recorded = False

    def record(self, stream):
        assert stream is STREAM, f"event recorded on {stream!r}, not the call's stream"
        self.recorded = True

    def query(self):
        return self.recorded


def future(devices=None):
    """A CUDA-aware future (``devices`` given) becomes a host one."""
    if devices is not None:
        assert devices and all(isinstance(d, torch.device) for d in devices), devices
        counts["futures"] += 1
    return torch.futures.Future()


class TorchView:
    """torch as cuda_work sees it: the real module but for the CUDA pieces above."""
    futures = type("futures", (), {"Future": staticmethod(future)})
    cuda = type("cuda", (), {
        "device": staticmethod(lambda device: contextlib.nullcontext()),
        "stream": staticmethod(lambda stream: contextlib.nullcontext()),
        "current_stream": staticmethod(lambda device=None: STREAM),
        "Event": HostEvent,
        "Stream": HostStream,
    })

    def __getattr__(self, name):
        return getattr(torch, name)


cuda_work.torch = work.torch = TorchView()
process_group._CPU = torch.device("meta")  # the check for "not a CPU call" now takes them all

_enqueue = cuda_work.enqueue_on_stream


def enqueue(*args, **kwargs):
    counts["enqueued"] += 1
    return _enqueue(*args, **kwargs)


cuda_work.enqueue_on_stream = process_group.enqueue_on_stream = enqueue
_add = cuda_work.CudaLauncher.add


def add(self, *args, **kwargs):
    counts["launched"] += 1
    return _add(self, *args, **kwargs)


cuda_work.CudaLauncher.add = add
_CALLS = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "all_to_all_v",
          "broadcast", "reduce", "gather", "scatter", "send", "recv"}


class DoneHandle:
    """forestcc's handle of a call that already finished (what a GPU call's handle is once the
    stream ran it)."""

    def __init__(self, result):
        self._result = result

    def is_completed(self):
        return True

    def wait(self):
        return self._result


class InOrder:
    """A forestcc communicator whose calls finish before they return, as on a stream. A call
    returns what forestcc's would: a handle when asked for ``async_op``, else its result (None,
    or the output array: not a handle)."""

    def __init__(self, comm):
        self._comm = comm

    def __getattr__(self, name):
        attr = getattr(self._comm, name)
        if name not in _CALLS:
            return attr

        def call(*args, **kwargs):
            async_op = kwargs.get("async_op", False)
            kwargs["async_op"] = False
            result = attr(*args, **kwargs)
            return DoneHandle(result) if async_op else result

        return call


_init = process_group.ProcessGroupForestcc.__init__


def init(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    self._comm = InOrder(self._comm)


process_group.ProcessGroupForestcc.__init__ = init
atexit.register(lambda: print("PATH " + " ".join(f"{k}={v}" for k, v in counts.items()),
                              flush=True))
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
