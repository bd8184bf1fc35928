"""Hydra launcher presets: they compose with the plugins' schemas, and (slow) a 12-job sweep goes through submitit's
local mode and through a local Ray instance, leaving 12 run directories; resubmitted, it runs nothing."""

from __future__ import annotations

import importlib.util
import json

import pytest
import yaml
from conftest import run_cli

PRESETS = {  # preset: (plugin module, the launcher class it must select, a setting the preset pins)
    "parallel": ("hydra_plugins.hydra_joblib_launcher", "JoblibLauncher", ("n_jobs", 2)),
    "gpu_shared": ("hydra_plugins.hydra_joblib_launcher", "JoblibLauncher", ("n_jobs", 4)),
    "slurm": ("hydra_plugins.hydra_submitit_launcher", "SlurmLauncher", ("gpus_per_node", 1)),
    "slurm_local": ("hydra_plugins.hydra_submitit_launcher", "LocalLauncher", ("cpus_per_task", 2)),
    "ray_cluster": ("hydra_plugins.hydra_ray_launcher", "RayLauncher", ("ray", None)),
}
SWEEP = ["data=digits", "model=logreg", "fl.rounds=2", "fl.num_clients=4", "fl.clients_per_round=2",
         "seed=range(12)", "progress=false"]


def plugin_present(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_launcher_presets_compose(tmp_path, preset):
    module, target, (key, value) = PRESETS[preset]
    if not plugin_present(module):
        pytest.skip(f"{module} is not installed (make setup-ray)")
    hydra_cfg = yaml.safe_load(run_cli(f"hydra/launcher={preset}", "--cfg", "hydra", cwd=tmp_path).stdout)
    launcher = hydra_cfg["hydra"]["launcher"]
    assert launcher["_target_"].endswith(target)
    if value is not None:
        assert launcher[key] == value
    else:
        assert launcher["ray"]["init"]["address"] is None and launcher["ray"]["remote"]["num_cpus"] == 2


def sweep_and_check(tmp_path, launcher: list[str]) -> None:
    sweep_dir = tmp_path / "sweep"
    run_cli("--multirun", *launcher, *SWEEP, f"hydra.sweep.dir={sweep_dir}", cwd=tmp_path)
    summaries = sorted(sweep_dir.glob("*/summary.json"))
    assert len(summaries) == 12
    assert {json.loads(p.read_text())["status"] for p in summaries} == {"finished"}
    stamps = {p: p.stat().st_mtime_ns for p in summaries}
    run_cli("--multirun", *launcher, *SWEEP, f"hydra.sweep.dir={sweep_dir}", cwd=tmp_path)
    assert {p: p.stat().st_mtime_ns for p in summaries} == stamps  # resubmitted: every job skipped


@pytest.mark.slow
def test_a_sweep_through_submitit_local(tmp_path):
    sweep_and_check(tmp_path, ["hydra/launcher=slurm_local"])


@pytest.mark.slow
def test_a_sweep_through_a_local_ray_instance(tmp_path):
    pytest.importorskip("ray")
    if not plugin_present("hydra_plugins.hydra_ray_launcher"):
        pytest.skip("hydra-ray-launcher is not installed (make setup-ray)")
    sweep_and_check(tmp_path, ["hydra/launcher=ray_cluster", "+hydra.launcher.ray.init.num_cpus=2",
                               "+hydra.launcher.ray.init.include_dashboard=false"])
