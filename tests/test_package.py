"""The package itself: public names documented, configuration table, CUDA build, arrays."""
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

import forestcc


def test_every_public_name_has_a_docstring():
    missing = [n for n in forestcc.__all__ if n != "__version__"
               and not (getattr(forestcc, n).__doc__ or "").strip()]
    assert not missing, f"public names without docstrings: {missing}"


def test_config_table_lists_every_knob():
    names = [row[0] for row in forestcc.config_table()]
    assert "FORESTCC_TIMEOUT" in names and "FORESTCC_NODE_ID" in names
    out = subprocess.run([sys.executable, "-m", "forestcc.cli", "config"], capture_output=True,
                         text=True, check=True).stdout
    for n in names:
        assert n in out
    readme = (pathlib.Path(__file__).parent.parent / "README.md").read_text()
    undocumented = [n for n in names if f"`{n}`" not in readme]
    assert not undocumented, f"knobs missing from the README's configuration table: {undocumented}"


def test_cuda_sources_compiled_when_nvcc_is_present():
    from forestcc import _C
    if os.environ.get("FORESTCC_CUDA", "AUTO").upper() == "OFF" or not shutil.which("nvcc"):
        pytest.skip("no nvcc or CUDA disabled")
    assert _C.built_with_cuda()
    if _C.cuda_device_count() > 0:  # only on a GPU machine
        assert _C.cuda_semaphore_self_test()


def test_plan_interpreter_compiled_for_the_gpu_when_nvcc_is_present():
    """cuda/device_kernel.cu instantiates executor/interpreter.hpp for a CUDA backend; its
    launch function is in libforestcc whenever the CUDA sources were built, so the interpreter
    cannot grow what a GPU cannot run without this failing."""
    from forestcc import _C
    if os.environ.get("FORESTCC_CUDA", "AUTO").upper() == "OFF" or not shutil.which("nvcc"):
        pytest.skip("no nvcc or CUDA disabled")
    lib = pathlib.Path(_C.__file__).with_name("libforestcc.so")
    symbols = subprocess.run(["nm", "-DC", str(lib)], capture_output=True, text=True, check=True).stdout
    assert "forestcc::executor::launchPlan" in symbols


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "float16", "float32", "float64"])
def test_empty_and_zeros(dtype):
    a = forestcc.zeros((3, 5), dtype)
    assert a.shape == (3, 5) and a.dtype == np.dtype(dtype) and not a.any()
    a[:] = 1
    assert a.sum() == 15
    assert forestcc.empty(0, dtype).size == 0
    with pytest.raises(ValueError, match="non-negative"):
        forestcc.empty((2, -1), dtype)


def test_no_knob_is_read_outside_the_config_table():
    """Configuration comes from one table (DESIGN.md): a FORESTCC_ variable read with getenv or
    os.environ must be a row of it, or one of the launch variables forestcc-run sets."""
    import re
    launch = {"FORESTCC_RANK", "FORESTCC_SIZE", "FORESTCC_LOCAL_RANK", "FORESTCC_LOCAL_SIZE",
              "FORESTCC_JOB_ID", "FORESTCC_ROOT_FD", "FORESTCC_CUDA"}
    knobs = {row[0] for row in forestcc.config_table()}
    root = pathlib.Path(__file__).parent.parent
    read = re.compile(r"""(?:getenv|environ\.get|environ\[)\(?\s*["'](FORESTCC_[A-Z0-9_]+)""")
    stray = set()
    for folder in ("python/forestcc", "perf/forestcc_perf", "cpp/src"):
        for path in (root / folder).rglob("*"):
            if path.suffix in (".py", ".cpp", ".hpp") and path.name != "config.cpp":
                stray |= {(m, str(path.relative_to(root))) for m in read.findall(path.read_text())
                          if m not in knobs and m not in launch}
    assert not stray, f"read outside the config table: {sorted(stray)}"
