"""Modules imported on first use: a command that never touches a tensor (``fedrun-data list``) starts without
paying for torch's import (over a second), while the modules that use it still name it at the top
(``from ..lazy import torch``: the dataset modules)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType


class _OnFirstUse(ModuleType):
    """Stands for a module not imported yet: an attribute it lacks imports the module (a plain import, so the real
    module is what ``sys.modules`` holds) and is read from it. Not the standard library's ``LazyLoader``, which runs
    the module's code inside a stand-in: on Python 3.12 a module that deletes one of its own attributes while it
    runs (torch's ``__init__`` does) recurses there without end."""

    def __getattr__(self, attr: str):
        return getattr(importlib.import_module(self.__name__), attr)


def lazy_import(name: str) -> ModuleType:
    """``name``'s module, imported on its first attribute access; the module itself when it is already imported.
    A missing module fails here, not at first use."""
    if name in sys.modules:
        return sys.modules[name]
    if importlib.util.find_spec(name) is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    return _OnFirstUse(name)


torch = lazy_import("torch")
