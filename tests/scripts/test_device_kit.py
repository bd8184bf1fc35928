"""The device kit (scripts/device/check.sh), run without a GPU: every step runs and finishes within its limit (scaled
for a CPU), and all it wrote comes back as one tar file under the device's 16 MiB beside a summary naming each step."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile

import pytest

from fedrun.data.base import default_root
from conftest import REPO


@pytest.mark.slow  # the whole kit: about five minutes on a 2-core CPU
def test_the_kit_runs_every_step_on_a_cpu_and_returns_one_tar_file(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    env = {**os.environ, "OUT": str(out), "WORK": str(work), "HW": "cpu", "PYTHON": sys.executable,
           "EXTRA": "fl.rounds=1", "LIMITS": "--device cpu --quick --precisions float32", "LIMIT_SCALE": "6",
           "FEDRUN_DATA": str(default_root())}
    done = subprocess.run(["bash", "scripts/device/check.sh"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=1500)
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["kit.tar.gz", "summary.md"]
    assert (out / "kit.tar.gz").stat().st_size < 16 * 2**20
    steps = [line.split("\t") for line in (work / "steps.tsv").read_text().splitlines()]
    names = [s[0] for s in steps]
    assert names[:2] == ["tests-capture", "tests-gpu"] and len(names) == 2 + 5 + 4 + 2  # limits: 4 forms, the levers
    assert {s[0]: s[1] for s in steps} == {name: "0" for name in names}, "every step within its limit, exit 0"
    summary = (out / "summary.md").read_text()
    assert all(f"| {name} | 0 |" in summary for name in names)
    assert "| serial | 16 | 16 |" in summary and "| shared | 16 | 16 |" in summary  # every sweep job finished
    assert "| lenet5_cifar_1000 | graph | float32 |" in summary
    assert "| lenet5_cifar_100 | vmap | float32 | cudnn_benchmark |" in summary  # a lever's A/B row
    with tarfile.open(out / "kit.tar.gz") as packed:
        inside = packed.getnames()
    assert "./summary.md" in inside and "./limits-graph.json" in inside and not any(n.endswith(".pt") for n in inside)
