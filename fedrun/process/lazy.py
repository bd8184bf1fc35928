"""Modules imported on first use: a command that never touches a tensor (``fedrun-data list``, a config refused for a
bad value, ``fedrun --help``) starts without paying for torch's import (over a second) or numpy's, while the modules
that use them still name them at the top (``from fedrun.process.lazy import torch``: the dataset modules and the
algorithm parts, whose configs the checks of a command line read)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType


class _OnFirstUse(ModuleType):
    """Stands for a module not imported yet: an attribute it lacks imports the module (a plain import, so the real
    module is what ``sys.modules`` holds) and is read from it. Not the standard library's ``LazyLoader``, which runs
    the module's code inside a stand-in: on Python 3.12 a module that deletes one of its own attributes while it
    runs (torch's ``__init__`` does) recurses there without end. Once imported, the module's names are copied into
    the stand-in, so that reading them costs what reading them from the module costs (a step of a local rule reads
    torch's functions thousands of times a round); a name the module makes later is read from it, and kept."""

    def __getattr__(self, attr: str):
        module = importlib.import_module(self.__name__)
        if "__mirrored__" not in self.__dict__:
            self.__dict__.update({k: v for k, v in vars(module).items() if not k.startswith("__")}, __mirrored__=True)
        value = getattr(module, attr)
        if not attr.startswith("__"):
            self.__dict__[attr] = value
        return value


def lazy_import(name: str) -> ModuleType:
    """``name``'s module, imported on its first attribute access; the module itself when it is already imported.
    A missing module fails here, not at first use."""
    if name in sys.modules:
        return sys.modules[name]
    if importlib.util.find_spec(name) is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    return _OnFirstUse(name)


torch = lazy_import("torch")
numpy = lazy_import("numpy")
