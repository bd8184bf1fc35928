"""Adding an algorithm part needs one module and one YAML, and no change to fedrun: a toy local rule (clipped local
SGD) is written here, registered when imported, chosen with ``algo/local=clipped`` from a ``hydra.searchpath`` folder,
validated like fedrun's own parts, and trained through the engine."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import textwrap

from conftest import REPO, run_cli
from omegaconf import OmegaConf

TOY_MODULE = '''
"""Local SGD whose every step's gradient is clipped to norm at most ``clip``."""

from dataclasses import dataclass

import torch

from fedrun.algorithms.base import LocalRule
from fedrun.algorithms.schema import PartConfig, register
from fedrun.config.schema import DEFAULT


class ClippedSGD(LocalRule):
    name = "clipped"

    def __init__(self, clip: float):
        self.clip = float(clip)

    def client_step(self, model, ctx, state, x, y):
        loss, grad = model.loss_and_grad(state["w"], state["buffers"], x, y)
        self.descend(ctx, state, grad * torch.clamp(self.clip / grad.norm(), max=1.0))
        return state, loss


@register
@dataclass
class ClippedConfig(PartConfig):
    part, target, options = "local", "toy_clip.ClippedSGD", ("clipped",)
    name: str = "clipped"
    clip: float = 1.0

    def rules(self):
        yield self.clip > 0, "clip", "must be > 0", DEFAULT
'''

TOY_YAML = "defaults:\n  - ClippedConfig\n  - _self_\n\nname: clipped\n"

RUNNER = "import toy_clip  # noqa: F401  registers algo/local=clipped\nfrom fedrun.cli import main\n\nmain()\n"

SMALL = ("data=digits", "model=mlp", "fl.num_clients=4", "fl.clients_per_round=3", "fl.rounds=3", "fl.momentum=0",
         "fl.weight_decay=0", "progress=false", "hardware.num_threads=1")


def _run(tmp_path, script: list[str], *args: str) -> subprocess.CompletedProcess:
    path = [str(tmp_path), str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "HYDRA_FULL_ERROR": "0"}
    return subprocess.run([sys.executable, *script, *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)


def _metrics(run_dir) -> list[dict]:
    with open(run_dir / "metrics.csv") as f:
        return [{k: v for k, v in row.items() if k in ("test_acc", "test_loss", "train_loss")} for row in
                csv.DictReader(f)]


def test_a_toy_local_rule_in_one_module_and_one_yaml_runs_and_is_validated(tmp_path):
    (tmp_path / "toy_clip.py").write_text(textwrap.dedent(TOY_MODULE))
    (tmp_path / "conf" / "algo" / "local").mkdir(parents=True)
    (tmp_path / "conf" / "algo" / "local" / "clipped.yaml").write_text(TOY_YAML)
    (tmp_path / "run_toy.py").write_text(RUNNER)
    toy = [str(tmp_path / "run_toy.py"), "algo=fedavg", "algo/local=clipped",
           f"hydra.searchpath=[file://{tmp_path}/conf]"]

    # a clip no gradient reaches leaves every step as FedAvg's: the same numbers through the same engine; a tight
    # clip changes the training, so the rule is what ran (both runs one sweep: one process start)
    sweep = tmp_path / "toy"
    clipped = _run(tmp_path, [toy[0], "-m", *toy[1:]], *SMALL, "algo.local.clip=1e30,0.01", f"hydra.sweep.dir={sweep}")
    assert clipped.returncode == 0, clipped.stderr[-3000:]
    never, tight = (sweep / job for job in ("0", "1"))
    assert [OmegaConf.load(job / "config.yaml").algo.local.clip for job in (never, tight)] == [1e30, 0.01]
    run_cli("algo=fedavg", *SMALL, f"hydra.run.dir={tmp_path / 'fedavg'}", cwd=tmp_path)
    assert _metrics(never) == _metrics(tmp_path / "fedavg")
    assert _metrics(tight) != _metrics(tmp_path / "fedavg")
    assert {json.loads((job / "summary.json").read_text())["method"] for job in (never, tight)} == {"fedavg+clipped"}

    # its range and its keys are checked as fedrun's own parts' are: exit 2, before any work, both problems in one
    # message
    bad = _run(tmp_path, toy, *SMALL, "algo.local.clip=-1", "algo.local.clp=1", f"hydra.run.dir={tmp_path / 'bad'}")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and not (tmp_path / "bad").exists(), bad.stderr
    assert "algo.local.clip=-1" in bad.stderr and "Fix: algo.local.clip=1.0" in bad.stderr, bad.stderr
    assert "algo.local.clp" in bad.stderr, bad.stderr
