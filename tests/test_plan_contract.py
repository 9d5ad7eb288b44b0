"""The C++ plan contract and the Python format module name the same things in the same order."""
from forestcc import _C
from forestcc.plan import ops


def test_names_match_between_cpp_and_python():
    assert _C.plan.FORMAT_VERSION == ops.FORMAT_VERSION
    assert _C.plan.OPS == ops.OPS
    assert _C.plan.COLLECTIVES == ops.COLLECTIVES
    assert _C.plan.BUFFERS == ops.BUFFERS


def test_limits_match_between_cpp_and_python():
    """The C++ loader's default limits (plan::Limits) are ops.MAX_*; Python passes its own per
    call, so the two must not drift apart."""
    assert set(_C.plan.LIMITS) == {name for name in dir(ops) if name.startswith("MAX_")}
    for name, value in _C.plan.LIMITS.items():
        assert getattr(ops, name) == value, name
