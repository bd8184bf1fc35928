"""Modules imported on first use: a command that never touches a tensor (``fedrun-data list``) starts without
paying for torch's import (over a second), while the modules that use it still name it at the top
(``from ..lazy import torch``: the dataset modules)."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def lazy_import(name: str) -> ModuleType:
    """``name``'s module, executed on its first attribute access (the standard library's ``LazyLoader``); the
    module itself when it is already imported. A missing module fails here, not at first use."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


torch = lazy_import("torch")
