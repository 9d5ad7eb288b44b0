"""Arrays of the frameworks as they are, not numpy stand-ins: JAX CPU arrays (immutable, and
bfloat16/float8 only through DLPack) through the collectives, and framework arrays of any
element type registered for memory channels."""
import pytest

from conftest import run_job


def ranks_ok(result, n):
    return sorted(ln.split()[1] for ln in result.lines("OK")) == [str(r) for r in range(n)]


@pytest.mark.parametrize("n", [1, 3])
def test_jax_arrays_through_the_collectives(n):
    # every dtype (bfloat16 and float8 failed before: JAX's buffer protocol refuses them, and the
    # array view now goes through DLPack then), results into numpy out=, and what would write
    # into a JAX array refused by name
    result = run_job(n, "jax_arrays.py")
    assert result.returncode == 0 and ranks_ok(result, n), result.stdout[-3000:] + result.stderr[-3000:]


@pytest.mark.parametrize("n", [1, 2, 3])
def test_framework_arrays_of_any_type_register(n):
    # registration views arrays as collectives do (one place: the C++ array view), so a PyTorch
    # bfloat16 tensor registers (numpy's DLPack import refused it before) and puts land in it
    result = run_job(n, "register_arrays.py")
    assert result.returncode == 0 and ranks_ok(result, n), result.stdout[-3000:] + result.stderr[-3000:]
