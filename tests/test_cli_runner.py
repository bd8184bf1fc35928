"""The tests' in-process ``fedrun`` (tests/cli_runner.py) writes the run files a fresh process writes, and leaves
the test process as it found it."""

import gc
import json
import logging

import pandas as pd
import torch
from cli_runner import run_cli

COMMAND = ["data=digits", "model=mlp", "fl.rounds=2", "fl.num_clients=4", "fl.clients_per_round=2",
           "algo/harmonizer=fedgh", "checkpoint.every=1", "progress=false"]
TIMES = {"wall_time_s", "elapsed_s", "train_s", "eval_s", "server_s", "setup_s", "started_at", "finished_at",
         "rounds_s", "time_s", "timings"}


def files(run_dir):
    return sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file())


def without_times(value):
    if isinstance(value, dict):
        return {k: without_times(v) for k, v in value.items() if k not in TIMES and not k.endswith("_s")}
    return value


def test_in_process_and_fresh_process_runs_write_the_same_files(tmp_path):
    here = run_cli(*COMMAND, f"hydra.run.dir={tmp_path / 'here'}", cwd=tmp_path)
    fresh = run_cli(*COMMAND, f"hydra.run.dir={tmp_path / 'fresh'}", cwd=tmp_path, fresh_process=True)
    assert here.returncode == fresh.returncode == 0
    a, b = tmp_path / "here", tmp_path / "fresh"
    assert files(a) == files(b) and "checkpoint_0000002.pt" in files(a)
    for name in ("config.yaml", "partition.json", ".hydra/overrides.yaml"):
        assert (a / name).read_text().replace("here", "fresh") == (b / name).read_text(), name
    pd.testing.assert_frame_equal(pd.read_csv(a / "metrics.csv").drop(columns="elapsed_s"),
                                  pd.read_csv(b / "metrics.csv").drop(columns="elapsed_s"))
    summaries = [without_times(json.loads((d / "summary.json").read_text())) for d in (a, b)]
    assert summaries[0].keys() == summaries[1].keys()
    assert {k: v for k, v in summaries[0].items() if "dir" not in k} == \
        {k: v for k, v in summaries[1].items() if "dir" not in k}
    said = [line.split(" - ", 1)[-1] for line in here.stdout.splitlines()]
    assert said[:3] == [line.split(" - ", 1)[-1] for line in fresh.stdout.splitlines()][:3]


def test_an_in_process_run_gives_back_the_process_state_it_changed(tmp_path):
    """Hydra's logging (a file handler on the run's log), the collector's start-up thresholds and a refusal's exit
    status: nothing of them stays with the next test."""
    handlers, thresholds, threads = logging.root.handlers[:], gc.get_threshold(), torch.get_num_threads()
    run_cli(*COMMAND, "hardware.num_threads=1", f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    refused = run_cli("fl.rounds=-1", cwd=tmp_path, check=False)
    assert refused.returncode == 2 and "fl.rounds=-1" in refused.stderr
    assert logging.root.handlers == handlers and gc.get_threshold() == thresholds
    assert torch.get_num_threads() == threads
    from fedrun.rundir.sweeps import FAILED_JOBS
    assert FAILED_JOBS == []
