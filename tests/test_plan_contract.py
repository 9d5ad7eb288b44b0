"""The C++ plan contract and the Python format module name the same things in the same order."""
from forestcc import _C
from forestcc.plan import ops


def test_names_match_between_cpp_and_python():
    assert _C.plan.FORMAT_VERSION == ops.FORMAT_VERSION
    assert _C.plan.OPS == ops.OPS
    assert _C.plan.COLLECTIVES == ops.COLLECTIVES
    assert _C.plan.BUFFERS == ops.BUFFERS
