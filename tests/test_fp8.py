"""forestcc's fp8 conversions (cpp/src/core/fp8.hpp) against ml_dtypes, bit for bit: the float32
value of all 256 codes of float8_e4m3fn and float8_e5m2, and the code of float32 values that cover
every rounding case (every float16 value, the midpoints between neighbouring fp8 values and their
float32 neighbours, overflow, infinities, NaN of both signs). The reductions widen with the first and
narrow with the second, so this is what makes an fp8 sum round as numpy's float32 sum cast once."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
FORMATS = [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2]


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> Path:
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    assert cxx, "a C++ compiler is needed (it built forestcc)"
    exe = tmp_path_factory.mktemp("fp8") / "fp8_table"
    p = subprocess.run([cxx, "-std=c++17", "-O2", "-Wall", "-Werror", f"-I{ROOT / 'cpp' / 'src'}",
                        str(ROOT / "tests" / "cpp" / "fp8_table.cpp"), "-o", str(exe)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-5000:]
    return exe


def run_table(exe: Path, floats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values of the 256 codes as float32 bits, [n, 2]; codes of `floats`, [len(floats), 2])."""
    stdin = "\n".join(f"{b:08x}" for b in floats.astype(np.float32).view(np.uint32))
    p = subprocess.run([str(exe)], input=stdin, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    rows = np.array([[int(w, 16) for w in line.split()] for line in p.stdout.splitlines()], np.uint32)
    return rows[:256], rows[256:].astype(np.uint8)


def float_inputs() -> np.ndarray:
    xs = [np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)]
    for fmt in FORMATS:
        v = np.arange(256, dtype=np.uint8).view(fmt).astype(np.float32)
        v = np.unique(v[np.isfinite(v)])
        mid = (v[:-1].astype(np.float64) + v[1:]) / 2   # exact in float32: fp8 has 3 mantissa bits
        mid = mid.astype(np.float32)
        big = np.float32(v.max()) * np.float32(1.0625)  # past the largest finite value's midpoint
        xs += [mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(-np.inf)),
               v, np.array([big, -big], np.float32)]
    xs.append(np.array([np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0, 1e-30, -1e-30, 3e38,
                        np.finfo(np.float32).tiny, np.float32(1e-45)], np.float32))
    rng = np.random.default_rng(15)
    xs.append(rng.standard_normal(20000).astype(np.float32) * np.float32(64))
    return np.concatenate(xs)


@pytest.mark.parametrize("column, fmt", list(enumerate(FORMATS)), ids=["e4m3fn", "e5m2"])
def test_every_code_widens_as_ml_dtypes(table, column, fmt):
    values, _ = run_table(table, np.zeros(0, np.float32))
    expect = np.arange(256, dtype=np.uint8).view(fmt).astype(np.float32)
    got = values[:, column].view(np.float32)
    nan = np.isnan(expect)
    assert (np.isnan(got) == nan).all(), np.nonzero(np.isnan(got) != nan)
    same = got[~nan].view(np.uint32) == expect[~nan].view(np.uint32)   # -0.0 included
    assert same.all(), [(hex(c), got[~nan][k], expect[~nan][k])
                        for k, c in enumerate(np.nonzero(~nan)[0]) if not same[k]][:10]


@pytest.mark.parametrize("column, fmt", list(enumerate(FORMATS)), ids=["e4m3fn", "e5m2"])
def test_float32_narrows_as_ml_dtypes(table, column, fmt):
    xs = float_inputs()
    _, codes = run_table(table, xs)
    with np.errstate(invalid="ignore"):   # NaN and overflow are part of the check
        expect = xs.astype(fmt).view(np.uint8)
    got = codes[:, column]
    bad = np.nonzero(got != expect)[0]
    assert bad.size == 0, [(float(xs[k]), hex(got[k]), hex(expect[k])) for k in bad[:10]]


def test_every_code_round_trips(table):
    # fp8 -> float32 -> fp8 is the identity on all 256 codes (NaN codes come back as the canonical NaN)
    codes = np.arange(256, dtype=np.uint8)
    for column, fmt in enumerate(FORMATS):
        floats = codes.view(fmt).astype(np.float32)
        _, back = run_table(table, floats)
        nan = np.isnan(floats)
        assert (back[~nan, column] == codes[~nan]).all(), fmt
        assert np.isnan(back[nan, column].view(fmt).astype(np.float32)).all(), fmt
