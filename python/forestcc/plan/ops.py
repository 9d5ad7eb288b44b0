"""The names of plan format v1, in one place: collectives, buffers, transports, operations.

Everything that reads or writes plans (format validation, the JSON schema test, the builder,
the verifier) takes its names from here, so a new op is added once.
"""
from __future__ import annotations

FORMAT_VERSION = 1

# Collectives a plan can implement.
ALL_REDUCE = "all_reduce"
ALL_GATHER = "all_gather"
REDUCE_SCATTER = "reduce_scatter"
ALL_TO_ALL = "all_to_all"
BROADCAST = "broadcast"
REDUCE = "reduce"
GATHER = "gather"
SCATTER = "scatter"
SENDRECV = "sendrecv"
BARRIER = "barrier"

COLLECTIVES = (
    ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, BROADCAST,
    REDUCE, GATHER, SCATTER, SENDRECV, BARRIER,
)
# Collectives with a "root" field; the others must not have one.
ROOTED_COLLECTIVES = frozenset({BROADCAST, REDUCE, GATHER, SCATTER})

# Per-rank buffers. input and output belong to the user; scratch is the library's.
INPUT = "input"
OUTPUT = "output"
SCRATCH = "scratch"
BUFFERS = (INPUT, OUTPUT, SCRATCH)

# Channel transports. "auto" lets the runtime pick (CUDA IPC, then shm, then tcp).
TRANSPORTS = ("auto", "shm", "cuda_ipc", "tcp")

# Operations.
PUT = "put"
GET = "get"
SIGNAL = "signal"
WAIT = "wait"
FLUSH = "flush"
COPY = "copy"
REDUCE_OP = "reduce"  # the op; REDUCE above is the collective of the same name
REDUCE_PUT = "reduce_put"
PUT_SIGNAL = "put_signal"
GET_REDUCE = "get_reduce"

# op name -> its fields besides "op", in canonical order. A field listed in OPTIONAL_FIELDS
# may be left out; every other listed field is required, and unlisted fields are errors.
OP_FIELDS = {
    PUT: ("ch", "src", "dst", "n"),
    GET: ("ch", "src", "dst", "n"),
    SIGNAL: ("ch",),
    WAIT: ("ch",),
    FLUSH: ("ch",),
    COPY: ("src", "dst", "n"),
    REDUCE_OP: ("dst", "srcs", "n"),
    REDUCE_PUT: ("dst", "srcs", "ch", "remote", "n"),
    PUT_SIGNAL: ("ch", "src", "dst", "n"),
    GET_REDUCE: ("ch", "src", "dst", "srcs", "n"),
}
OPS = tuple(OP_FIELDS)
OPTIONAL_FIELDS = frozenset({"n"})
DEFAULT_N = 1

# Canonical key order of an op when saved.
OP_KEY_ORDER = ("op", "ch", "src", "dst", "srcs", "remote", "n")

# Fields holding one chunk reference [buffer, index], and the one holding a list of them.
REF_FIELDS = ("src", "dst", "remote")
REF_LIST_FIELD = "srcs"

# For each op, which refs name memory on the channel's peer rather than on the local rank.
REMOTE_REF_FIELDS = {
    PUT: frozenset({"dst"}),
    PUT_SIGNAL: frozenset({"dst"}),
    GET: frozenset({"src"}),
    REDUCE_PUT: frozenset({"remote"}),
    GET_REDUCE: frozenset({"src"}),
}

# Top-level keys in canonical order, and which of them may be left out.
TOP_LEVEL_KEYS = (
    "version", "name", "collective", "nranks", "root", "in_place", "chunks_per_block",
    "buffers", "size_range", "pipeline", "scratch_banks", "provenance", "ranks",
)
OPTIONAL_TOP_LEVEL_KEYS = frozenset({"root", "pipeline", "scratch_banks"})
# scratch_banks: 1 (scratch serves one call) or 2 (eager plans: two banks that alternate
# across calls; schedules/README.md, "Scratch banks").
SCRATCH_BANKS = (1, 2)
PROVENANCE_KEYS = ("generator", "params", "topology_fingerprint", "predicted_time_us")
SIZE_RANGE_KEYS = ("min_bytes", "max_bytes")
PIPELINE_KEYS = ("max_slices", "min_slice_bytes")
DEFAULT_PIPELINE = {"max_slices": 1, "min_slice_bytes": 0}


def op_count(op: dict) -> int:
    """Number of contiguous chunks an op moves ("n", default 1)."""
    return op.get("n", DEFAULT_N)


# Limits of format v1. Plans beyond them are refused when loaded or verified (one validator,
# format.validation_errors), with a message naming the field, before anything reaches the
# executor's fixed-size records. The C++ loader (cpp/src/python/plan_dict.cpp) refuses the same
# values; tests/test_plan_format.py checks that the two agree.
MAX_RANKS = 1 << 16            # nranks (the built-in generators' range)
MAX_CHUNKS = 1 << 22           # chunks_per_block, each buffer's size and an op's n, in chunks
MAX_SLICES = 1024              # pipeline.max_slices: every slice runs the whole op list
MAX_BYTES = 1 << 62            # size_range.*, pipeline.min_slice_bytes
MAX_WORKERS = 256              # workers per rank: CPU threads or GPU thread blocks
MAX_CHANNELS = 1 << 16         # channels per rank: an op names one in 16 bits
MAX_CHANNELS_PER_PEER = 64     # channels from one rank to one peer (or loopback): the executor's
                               # semaphore slots (kMaxPlanChannelsPerPeer, control_block.hpp)
MAX_OPS = 1 << 23              # ops in the whole plan
MAX_FILE_BYTES = 1 << 30       # a plan file's size
