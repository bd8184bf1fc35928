"""Lazy imports: a module runs on its first attribute access, and `fedrun-data list` never loads torch."""

import subprocess
import sys
from pathlib import Path

import pytest

from fedrun.lazy import lazy_import

REPO = Path(__file__).resolve().parents[1]


def test_a_lazy_module_runs_on_first_use_and_once(tmp_path, monkeypatch):
    runs = tmp_path / "runs.txt"
    (tmp_path / "fedrun_lazy_probe.py").write_text(f"open({str(runs)!r}, 'a').write('ran\\n')\nVALUE = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "fedrun_lazy_probe", None)  # restored (removed) after the test
    del sys.modules["fedrun_lazy_probe"]
    module = lazy_import("fedrun_lazy_probe")
    assert not runs.exists(), "ran before first use"
    assert module.VALUE == 7 and runs.read_text() == "ran\n"
    import fedrun_lazy_probe

    assert lazy_import("fedrun_lazy_probe") is module is fedrun_lazy_probe
    assert module.VALUE == 7 and runs.read_text() == "ran\n"


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
