"""The C++ sources keep their layers: no file includes a higher layer's (README.md "Layout",
docs/architecture.md).

Every folder of cpp/src is one layer; each public header (cpp/include/forestcc/) belongs to the
layer that owns what it declares. A file includes only its own layer and the layers LAYERS lets
it use, all below it. Beside that order: public headers and the C++ examples include only public
headers; a transport's folder never includes another's, and the transport layer's shared files
include none (each transport is a folder of its own); only cpp/src/python/ includes pybind11 and
only cpp/src/cuda/ and the cuda_ipc transport's folder the CUDA headers. What today's code still breaks is listed, with the move that
fixes it, in ALLOWED_VIOLATIONS: a new violation fails, and so does an entry whose include is
gone (delete it: the list shows what is left to fix).
"""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "cpp" / "src"
INCLUDE = ROOT / "cpp" / "include"
PUBLIC = INCLUDE / "forestcc"
EXAMPLES = ROOT / "examples"
SOURCE_SUFFIXES = {".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".in"}

# Layers from the bottom up, each with the layers below it that it may include.
LAYERS = {
    # The vocabulary every layer speaks: errors, the config table, dtypes and ops, the plan
    # contract (op records, the table of collectives), device-side semaphores. Public headers only;
    # their implementations (config.cpp, error.cpp, data_types.cpp, plan_names.cpp,
    # cuda_absent.cpp) live in core/ today.
    "base": (),
    # Rendezvous of ranks and small control messages over TCP.
    "bootstrap": ("base",),
    # The Connection interface (transport/connection.hpp), shared segments, registered memory,
    # and one folder per transport (shm/, cma/).
    "transport": ("base", "bootstrap"),
    # The communicator: ranks and nodes, the node control block, each peer's connections in
    # transport order, waits with deadlines, poisoning (Communicator::State).
    "core": ("base", "bootstrap", "transport"),
    # MemoryChannel, the Channel of Communicator::connect() (DESIGN.md's channels), over the
    # communicator's connections.
    "channels": ("base", "bootstrap", "transport", "core"),
    # Plan files: the JSON reader/writer, the loader and validator (beside the lower layers: it
    # needs none of them).
    "plan": ("base",),
    # Max-flow and tree packing for ForestColl (the _graph module; control plane only).
    "graph": ("base",),
    # The plan simulator's event loop (built into _C; control plane only: it predicts plans).
    "sim": (),
    # Runs compiled plans: compile, the per-call protocol, the interpreter and its CPU runner.
    "executor": ("base", "bootstrap", "transport", "core", "plan"),
    # The CUDA runner of the same interpreter, and the device probe.
    "cuda": ("base", "bootstrap", "transport", "core", "plan", "executor"),
    # The C++ collective API: checks, algorithm choice, tuning table, plan cache, generators,
    # send/recv.
    "collectives": ("base", "bootstrap", "transport", "core", "channels", "plan", "graph",
                    "executor"),
    # The NCCL shim (libnccl.so.2): the NCCL C ABI on the C++ collective API; beside the Python
    # bindings, above the collectives. Its own nccl.h lives in nccl/include/.
    "nccl": ("base", "bootstrap", "transport", "core", "channels", "plan", "graph", "executor",
             "cuda", "collectives"),
    # forestcc._C: Python objects to the C++ API.
    "python": ("base", "bootstrap", "transport", "core", "channels", "plan", "graph", "sim",
               "executor", "cuda", "collectives"),
}

# Each public header in the layer that owns it.
PUBLIC_LAYER = {
    "error.hpp": "base",
    "config.hpp": "base",
    "collectives.hpp": "base",       # DataType, ReduceOp, CallBuffers
    "plan.hpp": "base",              # the plan contract
    "cuda.hpp": "base",
    "semaphore_device.hpp": "base",
    "bootstrap.hpp": "bootstrap",
    "memory.hpp": "transport",       # MemoryHandle: what a transport registers and attaches
    "channel.hpp": "core",           # the Channel connect() returns; channels/ implements it
    "communicator.hpp": "core",
    "plan_file.hpp": "plan",
    "collective_api.hpp": "collectives",
}

# Includes of a library's own headers, by the only folder that may use them.
SYSTEM_INCLUDE_OWNERS = {
    "pybind11/": "python",
    "cuda": "cuda",  # cuda_runtime.h, cuda_fp16.h, cuda_bf16.h, ...
}

# Violations in today's code: (file, include, why; the fix). Each entry must still occur.
ALLOWED_VIOLATIONS = {
    # cma builds on NodeConnection, the base of every same-node connection (it reads the peer's
    # mapped control block), which sits in shm's folder. Fix: move transport/shm/node_connection.*
    # to transport/ (or transport/node/), shared by shm, cma and later cuda_ipc.
    ("cpp/src/transport/cma/cma_connection.hpp", "transport/shm/node_connection.hpp"),
    # The _graph module's bindings sit in the graph folder. Fix: move graph/bind_graph.cpp to
    # python/bind_graph.cpp (CMake: build it into _graph with graph/*.cpp, not into _C).
    ("cpp/src/graph/bind_graph.cpp", "pybind11/pybind11.h"),
    ("cpp/src/graph/bind_graph.cpp", "pybind11/stl.h"),
}

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]', re.MULTILINE)


def source_files(top):
    return sorted(p for p in top.rglob("*") if p.is_file() and p.suffix in SOURCE_SUFFIXES)


def includes_of(path):
    """[(quoted, target)] of every #include in the file, in order."""
    text = path.read_text(errors="replace")
    return [(kind == '"', target) for kind, target in INCLUDE_RE.findall(text)]


def rel(path):
    return path.relative_to(ROOT).as_posix()


def layer_of(relpath):
    """The layer of a repository path (cpp/src/<layer>/..., cpp/include/forestcc/<header>)."""
    parts = relpath.split("/")
    if parts[:3] == ["cpp", "include", "forestcc"]:
        return PUBLIC_LAYER.get(parts[3])
    if parts[:2] == ["cpp", "src"] and len(parts) > 3:
        return parts[2] if parts[2] in LAYERS else None
    return None


def transport_folder(relpath):
    """shm for cpp/src/transport/shm/...; None for the transport layer's shared files."""
    parts = relpath.split("/")
    return parts[3] if parts[:3] == ["cpp", "src", "transport"] and len(parts) > 4 else None


def resolve(target):
    """The repository path a quoted include names (cpp/include first, as the compiler searches),
    a generated header by its template (.in), or None."""
    for base in (INCLUDE, SRC):
        for candidate in (base / target, base / (target + ".in")):
            if candidate.is_file():
                return rel(candidate)
    return None


def violations(files):
    """{(file, include): why} for files = {repository path: [(quoted, include target)]}."""
    found = {}
    for path, incs in files.items():
        layer = layer_of(path)
        public = path.startswith("cpp/include/")
        example = path.startswith("examples/")
        for quoted, target in incs:
            if not quoted:
                for prefix, owner in SYSTEM_INCLUDE_OWNERS.items():
                    # The cuda_ipc transport exports and opens CUDA IPC handles: the runtime's.
                    cuda_ipc = prefix == "cuda" and transport_folder(path) == "cuda_ipc"
                    if target.startswith(prefix) and layer != owner and not cuda_ipc:
                        found[(path, target)] = f"only cpp/src/{owner}/ includes <{prefix}...>"
                continue
            to = resolve(target)
            if to is None:
                found[(path, target)] = "names no file under cpp/include or cpp/src"
                continue
            if (public or example) and not to.startswith("cpp/include/"):
                found[(path, target)] = "a public header or example includes a private header"
                continue
            target_layer = layer_of(to)
            if layer is None or target_layer is None:
                continue  # unplaced files fail test_every_file_has_a_layer
            if target_layer != layer and target_layer not in LAYERS[layer]:
                found[(path, target)] = f"{layer} includes {target_layer}, not a layer below it"
                continue
            mine, theirs = transport_folder(path), transport_folder(to)
            if layer == "transport" and theirs is not None and theirs != mine:
                found[(path, target)] = (
                    f"transport {mine} includes transport {theirs}'s folder" if mine
                    else f"the transport layer's shared files include transport {theirs}'s folder")
    return found


def repository_files():
    files = source_files(ROOT / "cpp") + source_files(EXAMPLES)
    return {rel(p): includes_of(p) for p in files}


def test_layer_order_is_consistent():
    order = list(LAYERS)
    for layer, uses in LAYERS.items():
        for lower in uses:
            assert order.index(lower) < order.index(layer), f"{layer} uses {lower}, not below it"
    assert set(PUBLIC_LAYER.values()) <= set(LAYERS)
    assert set(SYSTEM_INCLUDE_OWNERS.values()) <= set(LAYERS)


def test_every_file_has_a_layer():
    folders = sorted(p.name for p in SRC.iterdir() if p.is_dir())
    unplaced = [f for f in folders if f not in LAYERS]
    assert not unplaced, f"cpp/src folders without a layer (add them to LAYERS): {unplaced}"
    headers = sorted(p.name for p in PUBLIC.iterdir() if p.is_file())
    unplaced = [h for h in headers if h not in PUBLIC_LAYER]
    assert not unplaced, f"public headers without a layer (add them to PUBLIC_LAYER): {unplaced}"
    loose = [rel(p) for p in SRC.iterdir() if p.is_file()]
    loose += [rel(p) for p in INCLUDE.rglob("*") if p.is_file() and p.parent != PUBLIC]
    assert not loose, f"files outside any layer's folder: {loose}"


def test_no_file_includes_a_higher_layer():
    files = repository_files()
    # The scan sees the tree.
    assert len(files) > 100 and any(p.startswith("cpp/src/executor/") for p in files)
    found = violations(files)
    new = {k: why for k, why in found.items() if k not in ALLOWED_VIOLATIONS}
    lines = [f"  {p}: #include {inc}: {why}" for (p, inc), why in sorted(new.items())]
    assert not new, "includes that break the layers (README.md, Layout; move the file, or what " \
        "it needs):\n" + "\n".join(lines)
    fixed = sorted(ALLOWED_VIOLATIONS - set(found))
    assert not fixed, "fixed, so delete them from ALLOWED_VIOLATIONS in tests/test_layers.py:\n" + \
        "\n".join(f"  {path}: #include {inc}" for path, inc in fixed)


def test_checker_catches_each_kind_of_violation():
    """The checker itself, on made-up files: each rule fires, and legal includes pass."""
    files = {
        "cpp/src/bootstrap/x.cpp": [(True, "executor/executor.hpp"), (True, "forestcc/error.hpp")],
        "cpp/src/plan/x.cpp": [(True, "transport/connection.hpp"), (True, "plan/json.hpp")],
        "cpp/src/executor/x.cpp": [(True, "collectives/engine.hpp"), (True, "core/state.hpp")],
        "cpp/src/transport/shm/x.cpp": [(True, "transport/cma/cma_connection.hpp"),
                                        (True, "transport/connection.hpp")],
        "cpp/src/transport/x.cpp": [(True, "forestcc/collective_api.hpp"),
                                    (True, "transport/shm/shm_connection.hpp")],
        "cpp/include/forestcc/x.hpp": [(True, "core/state.hpp"), (True, "forestcc/plan.hpp")],
        "examples/cpp/x.cpp": [(True, "executor/executor.hpp"),
                               (True, "forestcc/collective_api.hpp")],
        "cpp/src/core/x.cpp": [(False, "pybind11/pybind11.h"), (False, "vector"),
                               (True, "core/no_such_file.hpp")],
        "cpp/src/collectives/x.cpp": [(False, "cuda_runtime.h"),
                                      (True, "collectives/default_tuning.hpp")],
        "cpp/src/python/x.cpp": [(False, "pybind11/stl.h"), (True, "collectives/engine.hpp")],
    }
    assert set(violations(files)) == {
        ("cpp/src/bootstrap/x.cpp", "executor/executor.hpp"),
        ("cpp/src/plan/x.cpp", "transport/connection.hpp"),
        ("cpp/src/executor/x.cpp", "collectives/engine.hpp"),
        ("cpp/src/transport/shm/x.cpp", "transport/cma/cma_connection.hpp"),
        ("cpp/src/transport/x.cpp", "forestcc/collective_api.hpp"),
        ("cpp/src/transport/x.cpp", "transport/shm/shm_connection.hpp"),
        ("cpp/include/forestcc/x.hpp", "core/state.hpp"),
        ("examples/cpp/x.cpp", "executor/executor.hpp"),
        ("cpp/src/core/x.cpp", "pybind11/pybind11.h"),
        ("cpp/src/core/x.cpp", "core/no_such_file.hpp"),
        ("cpp/src/collectives/x.cpp", "cuda_runtime.h"),
    }
