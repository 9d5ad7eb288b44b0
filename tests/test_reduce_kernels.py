"""The CPU reductions at every instruction-set level this CPU runs (x86-64-v2, AVX2, AVX-512;
cpp/src/executor/reduce_kernels_body.hpp), every dtype x op, against numpy and against the v2
level bit for bit: vector width and the hand-written vector conversions of float16, bfloat16 and
the fp8 formats must never change a result. Inputs are random bit patterns (NaNs, infinities and
subnormals included) over counts that end in a ragged tile and ragged vectors; the fp8 formats
also get every pair of codes."""
from __future__ import annotations

import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from forestcc import _C

LEVELS = _C.reduce_kernels.supported()
DTYPES = ["int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "bfloat16", "float32",
          "float64", "float8_e4m3fn", "float8_e5m2"]
OPS = ["sum", "prod", "min", "max", "avg"]
COUNT = 2 * 2048 + 37   # two and a bit of the kernels' 2048-element tiles; not a multiple of 16
WIDENED = {"float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"}  # reduced in float32


def dtype_of(name: str) -> np.dtype:
    return np.dtype(getattr(ml_dtypes, name)) if name in ("bfloat16", "float8_e4m3fn", "float8_e5m2") else np.dtype(name)


def bits_of(a: np.ndarray) -> np.ndarray:
    return a.view(f"u{a.dtype.itemsize}")


def random_sources(name: str, n: int, seed: int) -> list[np.ndarray]:
    dt = dtype_of(name)
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=(n, COUNT * dt.itemsize), dtype=np.uint8)
    srcs = [raw[j].view(dt).copy() for j in range(n)]
    if name in WIDENED or dt.kind == "f":
        # Half the elements from a narrow range of exponents, so that sums round rather than
        # keep the larger operand (random bits mostly differ by huge factors).
        near = rng.standard_normal((n, COUNT)).astype(np.float32) * np.float32(3)
        for j in range(n):
            srcs[j][::2] = near[j, ::2].astype(dt)
    return srcs


def every_fp8_pair(name: str) -> list[np.ndarray]:
    codes = np.arange(256, dtype=np.uint8)
    a, b = np.meshgrid(codes, codes, indexing="ij")
    dt = dtype_of(name)
    return [a.ravel().copy().view(dt), b.ravel().copy().view(dt)]


def fold(op: str, acc: np.ndarray, x: np.ndarray) -> np.ndarray:
    """One step of the scalar definition: a op b as C++ writes it (min/max: b < a ? b : a)."""
    with np.errstate(all="ignore"):
        if op in ("sum", "avg"):
            return acc + x
        if op == "prod":
            return acc * x
        if op == "min":
            return np.where(x < acc, x, acc)
        return np.where(acc < x, x, acc)


def reference(name: str, op: str, srcs: list[np.ndarray]) -> np.ndarray:
    dt = dtype_of(name)
    wide = np.float32 if name in WIDENED else dt
    if dt.kind == "i" and op in ("sum", "prod", "avg"):
        wide = np.dtype(f"u{dt.itemsize}")   # wraps, as the kernels do
    acc = srcs[0].astype(wide) if name in WIDENED else srcs[0].view(wide).copy()
    for x in srcs[1:]:
        acc = fold(op, acc, x.astype(wide) if name in WIDENED else x.view(wide))
    with np.errstate(all="ignore"):
        result = acc.astype(dt) if name in WIDENED else acc.view(dt)
        if op == "avg":   # the sum is stored, then divided: a 16- or 8-bit one is rounded twice
            result = divided(result.astype(np.float32), len(srcs)).astype(dt) if name in WIDENED \
                else divided(result, len(srcs))
    return result


def divided(a: np.ndarray, d: int) -> np.ndarray:
    if a.dtype.kind in "iu":   # C++ division truncates toward zero
        return np.array([(abs(x) // d) * (1 if x >= 0 else -1) for x in a.tolist()], dtype=a.dtype)
    with np.errstate(all="ignore"):
        return a / a.dtype.type(d)


def run_level(level: str, name: str, op: str, srcs: list[np.ndarray]) -> np.ndarray:
    out = np.empty_like(srcs[0])
    _C.reduce_kernels.reduce(level, out, srcs, op)
    if op == "avg":
        _C.reduce_kernels.divide(level, out, len(srcs))
    return out


def assert_same(got: np.ndarray, expect: np.ndarray, what: str, nan_bits: bool) -> None:
    g, e = bits_of(got), bits_of(expect)
    if got.dtype.kind == "f" or got.dtype.name in WIDENED:
        with np.errstate(all="ignore"):
            gnan = np.isnan(got.astype(np.float64))
            enan = np.isnan(expect.astype(np.float64))
        if not nan_bits:   # numpy's NaN payloads are its own; a NaN must stay a NaN
            bad = np.nonzero((gnan != enan) | (~enan & (g != e)))[0]
        else:
            bad = np.nonzero(g != e)[0]
    else:
        bad = np.nonzero(g != e)[0]
    assert bad.size == 0, (what, bad.size, [(int(i), hex(int(g[i])), hex(int(e[i]))) for i in bad[:8]])


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("name", DTYPES)
def test_every_level_equals_numpy_and_v2(name, op):
    cases = [random_sources(name, 2, 1), random_sources(name, 3, 2), random_sources(name, 4, 3)]
    if name.startswith("float8"):
        cases.append(every_fp8_pair(name))
    for srcs in cases:
        expect = reference(name, op, srcs)
        v2 = run_level("v2", name, op, srcs)
        assert_same(v2, expect, f"v2 vs numpy, {len(srcs)} sources", nan_bits=False)
        for level in LEVELS[1:]:
            got = run_level(level, name, op, srcs)
            assert_same(got, v2, f"{level} vs v2, {len(srcs)} sources", nan_bits=True)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", ["float32", "bfloat16", "float8_e4m3fn", "int64"])
def test_destination_may_be_any_source(level, name):
    srcs = random_sources(name, 3, 4)
    expect = reference(name, "sum", srcs)
    for k in range(3):
        inputs = [s.copy() for s in srcs]
        _C.reduce_kernels.reduce(level, inputs[k], inputs, "sum")
        assert_same(inputs[k], expect, f"dst is source {k}", nan_bits=False)


def test_levels_on_this_cpu():
    assert LEVELS[0] == "v2"
    with pytest.raises(ValueError, match="unknown level"):
        _C.reduce_kernels.reduce("sse9", np.zeros(4, np.float32), [np.zeros(4, np.float32)] * 2, "sum")
    with pytest.raises(ValueError, match="at least one source"):
        _C.reduce_kernels.reduce("v2", np.zeros(4, np.float32), [], "sum")
    with pytest.raises(ValueError, match="divisor: must be at least 1"):   # not SIGFPE
        _C.reduce_kernels.divide("v2", np.ones(4, np.int32), 0)


def _in_use(value: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, FORESTCC_CPU_ISA=value)
    return subprocess.run([sys.executable, "-c", "from forestcc import _C; print(_C.reduce_kernels.in_use())"],
                          env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("level", LEVELS)
def test_environment_forces_a_level(level):
    p = _in_use(level)
    assert p.returncode == 0 and p.stdout.split() == [level], p.stderr


@pytest.mark.parametrize("level", [level for level in ("v2", "avx2", "avx512") if level not in LEVELS])
def test_a_level_this_cpu_lacks_is_refused(level):
    # Only CPUs below AVX-512 run this (elsewhere: an empty parameter set, reported as skipped).
    with pytest.raises(ValueError, match="need instructions this CPU lacks"):
        _C.reduce_kernels.reduce(level, np.zeros(4, np.float32), [np.zeros(4, np.float32)] * 2, "sum")
    p = _in_use(level)
    assert p.returncode != 0 and f"FORESTCC_CPU_ISA={level} but this CPU runs at most {LEVELS[-1]}" in p.stderr, \
        p.stderr


def test_environment_refuses_an_unknown_level():
    p = _in_use("avx1024")
    assert p.returncode != 0 and "FORESTCC_CPU_ISA='avx1024' is not auto, v2, avx2 or avx512" in p.stderr, p.stderr
