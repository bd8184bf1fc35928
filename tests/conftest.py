from __future__ import annotations

import fedrun  # noqa: F401  (first: its OpenMP wait policy is read when torch loads)
import contextlib
import copy
import functools
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from fedrun.config.compose import compose_config
from fedrun.data import DATASETS, DatasetSpec, FedDataset

from cli_runner import run_cli  # noqa: F401  (the tests' `fedrun <args>`: from conftest, as before)

REPO = Path(__file__).resolve().parent.parent
pytest_plugins = ["time_budget", "pytester"]  # a test over its time budget fails unless marked slow


@pytest.fixture(autouse=True)
def _torch_threads_restored():
    """A run in the test process sets torch's thread count from hardware.num_threads and keeps it (a process makes
    one run): put back after each test, so no test computes with threads an earlier one chose (float sums differ)."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def without_a_compiler():
    """A context in which fedrun's compiled kernels are built as on a machine without a C++ compiler and without
    earlier builds (each build fails as a missing g++ makes it fail), forgotten on entry and exit so that the kernels
    load again after it."""
    from torch.utils import cpp_extension

    from fedrun.model.native import build as native

    def no_compiler(*args, **kwargs):
        raise RuntimeError("Error building extension: g++: command not found")

    @contextlib.contextmanager
    def context():
        with pytest.MonkeyPatch.context() as patch, tempfile.TemporaryDirectory() as empty:
            patch.setattr(cpp_extension, "load", no_compiler)
            patch.setenv("TORCH_EXTENSIONS_DIR", empty)  # no build of an earlier run to import
            patch.setenv("CXX", "/nonexistent/g++")  # a build in another process fails too
            native.forget()
            try:
                yield
            finally:
                native.forget()

    return context


@functools.lru_cache(maxsize=None)
def _composed(overrides: tuple[str, ...]):
    """One composition per distinct override list in a test session (a composition through Hydra costs far more
    than a copy, and tests compose the same bases again and again), with the warnings it gave."""
    with warnings.catch_warnings(record=True) as given:
        warnings.simplefilter("always")
        cfg = compose_config(list(overrides))
    return cfg, [(w.message, w.category) for w in given]


def make_cfg(*overrides: str):
    """The config `fedrun <overrides>` would run, composed in-process: a copy of the session's one composition of
    these overrides (a test may change its copy), with its warnings (a renamed key's) given again on each call."""
    cfg, given = _composed(overrides)
    for message, category in given:
        warnings.warn(message, category, stacklevel=2)
    return copy.deepcopy(cfg)


def with_values(cfg, *assignments: str):
    """``cfg`` with each ``key=value`` set as the command line sets a key that chooses no group option (the value read
    by Hydra's override grammar, checked by the key's type): one composition serves the variants a test runs side by
    side."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    for override in OverridesParser.create().parse_overrides(list(assignments)):
        OmegaConf.update(cfg, override.key_or_group, override.value(), merge=False)
    return cfg


@pytest.fixture
def cfg_factory():
    return make_cfg


def load_script(name: str):
    """A script under scripts/<group>/ as a module (they are not a package), for tests of its functions; its folder is
    on the import path, as it is when the script runs, so scripts that import each other load."""
    import importlib.util
    import sys

    (path,) = (REPO / "scripts").glob(f"*/{name}.py")
    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def register_tiny(monkeypatch, name: str, x: np.ndarray, y: np.ndarray, x_test=None, y_test=None, classes=None,
                  users=None, kind="vector", test_users=None):
    """Register an in-memory dataset so the engine can run on a hand-made problem."""
    classes = classes or int(y.max()) + 1
    x_test = x if x_test is None else x_test
    y_test = y if y_test is None else y_test

    dtype = torch.long if kind == "tokens" else torch.float32

    def load(root, cfg):
        return FedDataset(name, torch.tensor(x, dtype=dtype), torch.tensor(y), torch.tensor(x_test, dtype=dtype),
                          torch.tensor(y_test), num_classes=classes, input_kind=kind, train_users=users,
                          test_users=test_users)

    spec = DatasetSpec(name=name, description="test data", meta=lambda cfg: (kind, tuple(x.shape[1:]), classes),
                       load=load, is_present=lambda root: True, how_to_get="test",
                       has_users=users is not None)
    monkeypatch.setitem(DATASETS, name, spec)
    return spec
