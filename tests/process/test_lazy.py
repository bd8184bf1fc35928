"""Lazy imports: a module runs on its first attribute access, and `fedrun-data list` never loads torch."""

import subprocess
import sys

import pytest

from fedrun.process.lazy import lazy_import
from conftest import REPO


def test_a_lazy_module_runs_on_first_use_and_once(tmp_path, monkeypatch):
    """Also a module that deletes one of its own attributes while it runs, as torch's ``__init__`` does (the
    standard library's LazyLoader recursed without end on it under Python 3.12)."""
    runs = tmp_path / "runs.txt"
    (tmp_path / "fedrun_lazy_probe.py").write_text(
        f"import sys\nopen({str(runs)!r}, 'a').write('ran\\n')\nVALUE = 7\nGONE = 1\n"
        "delattr(sys.modules[__name__], 'GONE')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "fedrun_lazy_probe", None)  # restored (removed) after the test
    del sys.modules["fedrun_lazy_probe"]
    module = lazy_import("fedrun_lazy_probe")
    assert not runs.exists(), "ran before first use"
    assert module.VALUE == 7 and runs.read_text() == "ran\n"
    import fedrun_lazy_probe

    assert lazy_import("fedrun_lazy_probe") is fedrun_lazy_probe and not hasattr(fedrun_lazy_probe, "GONE")
    assert module.VALUE == 7 and runs.read_text() == "ran\n"


def test_once_imported_a_lazy_modules_names_are_read_as_the_modules_own(tmp_path, monkeypatch):
    """After the first use the stand-in holds the module's names itself (no lookup through the import system per
    read, which a local step's many reads of torch would pay), and a name the module makes later is still found."""
    (tmp_path / "fedrun_lazy_names.py").write_text("A = 1\ndef f():\n    return 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "fedrun_lazy_names", None)
    del sys.modules["fedrun_lazy_names"]
    module = lazy_import("fedrun_lazy_names")
    assert module.A == 1 and "f" in vars(module) and module.f() == 2
    real = sys.modules["fedrun_lazy_names"]
    real.LATER = 3
    assert module.LATER == 3 and vars(module)["LATER"] == 3


def test_an_imported_module_is_returned_and_a_missing_one_fails_at_once():
    assert lazy_import("json") is sys.modules["json"]
    with pytest.raises(ModuleNotFoundError, match="fedrun_no_such_module"):
        lazy_import("fedrun_no_such_module")


def test_fedrun_data_list_does_not_load_torch(tmp_path):
    """Listing datasets reads files and prints text; torch's import (over a second) would be most of its time."""
    code = ("import sys; from fedrun.data.cli import main; assert main(['--root', sys.argv[1], 'list']) == 0; "
            "assert 'torch._C' not in sys.modules, 'torch loaded'")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, cwd=REPO, capture_output=True,
                         text=True).stdout
    assert "mnist" in out and "missing" in out
