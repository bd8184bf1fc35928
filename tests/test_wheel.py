"""fedrun built as a wheel and installed in a fresh virtual environment, outside the repository, runs: its config
root and kernel sources travel inside the package."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from conftest import REPO

def _source_tree(dest: Path) -> Path:
    """The checkout's files as git sees them (tracked, and new ones not ignored), without its build outputs."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        if (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)
    return dest


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv holding fedrun's wheel; its dependencies are this interpreter's (a .pth line to them: no
    download of torch), and its fedrun is the wheel's, not the checkout's editable install."""
    root = tmp_path_factory.mktemp("wheel")
    tree = _source_tree(root / "src")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(root / "dist"), str(tree)], check=True, capture_output=True, timeout=600)
    wheel = next((root / "dist").glob("fedrun-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert {"fedrun/conf/config.yaml", "fedrun/conf/experiment/smoke.yaml", "fedrun/paper/bherd.yaml"} <= set(names)
    assert {"fedrun/model/native/kernels/conv_pool_relu.cpp", "fedrun/model/native/kernels/indexed_linear.cpp"} <= \
        set(names)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    where = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = Path(subprocess.run([venv / "bin" / "python", "-c", where], capture_output=True, text=True,
                               check=True).stdout.strip())
    (site / "zz_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")  # after the wheel's own fedrun
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                    "--no-deps", "--no-index", str(wheel)], check=True, capture_output=True, timeout=300)
    return venv


def _run(venv: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(venv / "bin" / args[0]), *args[1:]], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def test_the_installed_package_is_the_wheel_not_the_checkout(installed, tmp_path):
    proc = _run(installed, tmp_path, "python", "-c", "import fedrun.config.compose as c; print(c.__file__, c.CONF_DIR)")
    module, conf = proc.stdout.split()
    assert Path(module).is_relative_to(installed) and Path(conf) == Path(module).parents[1] / "conf", proc.stderr


def test_the_wheel_runs_the_smoke_experiment_outside_the_repository(installed, tmp_path):
    proc = _run(installed, tmp_path, "fedrun", "experiment=smoke", "progress=false", "hydra.run.dir=run")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "run" / "metrics.csv").read_text().count("\n") >= 2
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["final_test_acc"] > 0.5


def test_the_wheel_lists_the_artefacts_and_the_datasets(installed, tmp_path):
    tables = _run(installed, tmp_path, "fedrun-table", "--list")
    assert tables.returncode == 0 and "bherd_fig5a" in tables.stdout, tables.stderr[-2000:]
    data = _run(installed, tmp_path, "fedrun-data", "list")
    assert data.returncode == 0 and "mnist" in data.stdout, data.stderr[-2000:]
