"""A script's runs as ``fedrun -m`` sweeps (fedrun/papers/job_lists.py): the grids cover the jobs exactly once, each job
lands in the folder the script reads it from, finished runs are reused and never passed off for another config."""

from __future__ import annotations

import itertools
import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from fedrun.papers import job_lists as batch
from fedrun.errors import FedrunError, StaleRunError



@pytest.fixture(autouse=True)
def _sweeps_in_this_process(monkeypatch):
    """The job lists' sweeps (``python -m fedrun.cli -m ...``) run in the test process: tests/cli_runner.py."""
    from cli_runner import fedrun_in_this_process

    fedrun_in_this_process(monkeypatch, batch)


BASE = ["data=digits", "model=logreg", "fl.num_clients=4", "fl.clients_per_round=2"]
QUIET = {"log": lambda *_: None}


def _points(grid: dict[str, list[str]]) -> set[frozenset]:
    return {frozenset(f"{k}={v}" for k, v in zip(grid, values)) for values in itertools.product(*grid.values())}


def test_grids_cover_every_job_once_and_nothing_else():
    """Jobs of several shapes (keys that only some set, a value missing from one corner of a grid) become grids
    whose combinations are exactly the jobs: none run twice, none invented."""
    jobs = [[f"algo={a}", f"seed={s}"] for a in ("fedavg", "bherd") for s in (0, 1, 2)]
    jobs += [["algo=bherd", "algo.step_selector.alpha=0.9", f"seed={s}"] for s in (0, 1)]
    jobs += [["algo=fedprox", f"fl.lr={lr}", "seed=0"] for lr in ("0.1", "0.01")] + [["algo=fedprox", "fl.lr=0.1",
                                                                                        "seed=1"]]
    grids = batch.grids(jobs)
    covered = [p for g in grids for p in _points(g)]
    assert sorted(map(sorted, covered)) == sorted(map(sorted, map(frozenset, jobs)))
    assert {"algo": ["fedavg", "bherd"], "seed": ["0", "1", "2"]} in grids  # one sweep, not six
    assert len(grids) == 4  # the fedprox corner (lr 0.01, seed 1) is missing: split by one key into two grids


def test_a_batch_runs_each_job_once_in_the_folder_named_by_its_overrides(tmp_path):
    """Each job's folder is Hydra's override_dirname of its overrides (floats as the sweeper writes them), across
    sweeps of different shapes; the overrides for every job (threads) are not in the name; a second call runs
    nothing and returns the same summaries."""
    jobs = [[*BASE, "fl.rounds=1", f"seed={s}", "fl.lr=2e-1"] for s in (0, 1)] + [[*BASE, "fl.rounds=1", "seed=0",
                                                                                    "algo=fedprox"]]
    first = batch.run(jobs, tmp_path, ["hardware.num_threads=1"], **QUIET)
    dirs = [Path(batch.job_dir(job, tmp_path)) for job in jobs]
    assert "fl.lr=0.2" in dirs[0].name and "num_threads" not in dirs[0].name
    assert sorted(p.parent for p in tmp_path.rglob("summary.json")) == sorted(dirs)
    assert [json.loads((d / "config.yaml").exists() and (d / "summary.json").read_text())["seed"]
            for d in dirs] == [0, 1, 0]
    stamps = [(d / "summary.json").stat().st_mtime_ns for d in dirs]
    said = []
    assert batch.run(jobs, tmp_path, ["hardware.num_threads=1"], log=said.append) == first
    assert said == ["3 runs: 3 already finished, 0 to run in 0 sweep(s)"]
    assert [(d / "summary.json").stat().st_mtime_ns for d in dirs] == stamps


def test_workers_mean_the_parallel_launcher_with_the_threads_shared_out():
    """``--workers 2`` is Hydra's parallel launcher (tests/papers/test_table.py runs a sweep on it) with the machine's
    threads shared out; a launcher named among the overrides wins."""
    import argparse

    import torch

    parser = argparse.ArgumentParser()
    batch.add_arguments(parser)
    threads = max(1, torch.get_num_threads() // 2)
    assert batch.every_job(parser.parse_args(["--workers", "2", "fl.rounds=3"])) == [
        "hydra/launcher=parallel", "hydra.launcher.n_jobs=2", f"hardware.num_threads={threads}", "fl.rounds=3"]
    assert batch.every_job(parser.parse_args(["--workers", "2", "hydra/launcher=slurm"])) == ["hydra/launcher=slurm"]
    assert batch.every_job(parser.parse_args([])) == []


def test_a_finished_run_of_another_config_stops_the_batch_before_any_work(tmp_path):
    """A folder's finished run is reused only when made with the job's config; another learning rate (given for
    every job, so not in the folder's name) stops everything before a job starts, naming the difference."""
    job = [*BASE, "fl.rounds=1", "seed=0"]
    batch.run([job], tmp_path, **QUIET)
    other = [*BASE, "fl.rounds=1", "seed=1"]
    with pytest.raises(StaleRunError, match=r"fl\.lr: [0-9.]+ there, 0\.5 asked"):
        batch.run([other, job], tmp_path, ["fl.lr=0.5"], **QUIET)
    assert not Path(batch.job_dir(other, tmp_path)).exists()


def test_an_override_for_every_job_cannot_change_what_a_job_sets(tmp_path):
    """A job's folder is named by its own values: an extra override of the same key would run another value under
    that name, so it is refused before any work, naming the key."""
    with pytest.raises(FedrunError, match=r"fl\.rounds: the script sets it"):
        batch.run([[*BASE, "fl.rounds=5"]], tmp_path, ["fl.rounds=1"], **QUIET)
    assert not any(tmp_path.iterdir())


def test_more_rounds_extend_a_finished_run(tmp_path):
    """More rounds for every job and nothing else extend the finished runs from their last round (the batch
    resumes), in the same folders."""
    job = [*BASE, "seed=0"]
    batch.run([job], tmp_path, ["fl.rounds=1"], **QUIET)
    extended = batch.run([job], tmp_path, ["fl.rounds=3"], **QUIET)[0]
    assert extended["extended_from_rounds"] == 1 and extended["rounds_completed"] == 3
    run = Path(batch.job_dir(job, tmp_path))
    assert list(pd.read_csv(run / "metrics.csv")["round"]) == [1, 2, 3]


def test_a_failed_job_stops_the_script_after_the_others_ran(tmp_path):
    """A job that fails (at run time: its data files are missing) is recorded in its folder by fedrun; the batch
    runs the others, then refuses to return part of its runs, naming the failed folder."""
    good = [*BASE, "fl.rounds=1", "seed=0"]
    bad = ["data=cifar10", f"data.root={tmp_path / 'empty'}", *BASE[1:], "fl.rounds=1", "seed=0"]
    with pytest.raises(FedrunError, match=r"1 of 2 runs did not finish.*cifar10"):
        batch.run([good, bad], tmp_path, **QUIET)
    assert json.loads((Path(batch.job_dir(good, tmp_path)) / "summary.json").read_text())["status"] == "finished"


def test_an_interrupted_sweep_starts_no_other(tmp_path, monkeypatch):
    """SIGTERM or Ctrl-C stops fedrun's sweep with 128 + the signal; the batch must not go on to its next sweep."""
    started = []

    def fake(cmd, check):
        started.append(cmd)
        return subprocess.CompletedProcess(cmd, 143)

    monkeypatch.setattr(batch.subprocess, "run", fake)
    jobs = [[*BASE, "fl.rounds=1", "seed=0"], [*BASE, "fl.rounds=1", "algo=fedprox"]]  # two shapes: two sweeps
    with pytest.raises(SystemExit, match="interrupted in the sweep"):
        batch.run(jobs, tmp_path, **QUIET)
    assert len(started) == 1
