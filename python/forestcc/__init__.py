"""forestcc: collective communication with one-sided primitives and schedules as files.

Importing the package is cheap: the native core (``forestcc._C``) loads on first use of an
attribute that needs it, so ``forestcc.plan`` and the command-line tools start fast.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> submodule that defines it
_LAZY = {
    "init": "forestcc.communicator",
    "Communicator": "forestcc.communicator",
    "UniqueId": "forestcc.communicator",
    "unique_id": "forestcc.communicator",
    "MemoryChannel": "forestcc.communicator",
    "RegisteredMemory": "forestcc.communicator",
    "empty": "forestcc.memory",
    "zeros": "forestcc.memory",
    "ForestccError": "forestcc.errors",
    "TimeoutError": "forestcc.errors",
    "RemoteError": "forestcc.errors",
    "AbortedError": "forestcc.errors",
    "MismatchError": "forestcc.errors",
    "config_table": "forestcc.errors",
}

__all__ = sorted(_LAZY) + ["__version__"]


# submodules that ``forestcc.<name>`` reaches without an import of their own
_SUBMODULES = {"cuda"}


def __getattr__(name: str):
    if name in _SUBMODULES:
        value = importlib.import_module(f"forestcc.{name}")
        globals()[name] = value
        return value
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'forestcc' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
