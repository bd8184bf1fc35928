"""Resuming as a new user does it: the interrupt message's command resumes the run; ``resume=true`` without a
directory finds the run; nothing to resume is said, and unreadable checkpoints are refused (fedrun/rundir/resume.py,
fedrun/engine/run/experiment.py, fedrun/cli.py)."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import run_cli
from test_checkpoint import BASE, metrics, wait_for_rows

from fedrun.rundir.checkpoint import checkpoints
from fedrun.engine.run.experiment import run_experiment
from fedrun.errors import ConfigError
from fedrun.rundir.resume import resume_command, resumable_runs, run_dir_root

SLOW_RUN = [*BASE, "fl.rounds=40", "checkpoint.every=1", "progress=false"]


def start(cwd: Path, *overrides: str) -> subprocess.Popen:
    """``fedrun <overrides>`` in ``cwd`` with Hydra's own run directory (outputs/<date>/<time>), as a user types it."""
    return subprocess.Popen([sys.executable, "-m", "fedrun.cli", *overrides], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def interrupted_run(cwd: Path, *overrides: str) -> tuple[Path, str]:
    """A run started in ``cwd`` without hydra.run.dir and stopped by Ctrl-C after a few rounds: its folder and what
    it printed (Hydra logs to stdout)."""
    proc = start(cwd, *overrides)
    folder = None
    while folder is None and proc.poll() is None:
        found = list((cwd / "outputs").glob("*/*/metrics.csv")) if (cwd / "outputs").exists() else []
        folder = found[0].parent if found else None
        time.sleep(0.002)
    wait_for_rows(proc, folder, rows=3)
    proc.send_signal(signal.SIGINT)
    said, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGINT, said[-2000:]
    assert "the run stops after this round and writes a checkpoint (Ctrl-C again: stop now)" in said
    return folder, said


def as_cli(command: str) -> list[str]:
    """A printed ``fedrun ...`` command as this interpreter runs it."""
    words = shlex.split(command)
    assert words[0] == "fedrun"
    return [sys.executable, "-m", "fedrun.cli", *words[1:]]


def test_the_interrupt_message_is_a_command_that_resumes_the_run(tmp_path, cfg_factory):
    """Ctrl-C prints the whole command (the run's overrides, its folder, resume=true); typed as printed, it ends with
    the metrics of the uninterrupted run."""
    folder, err = interrupted_run(tmp_path, *SLOW_RUN)
    command = next(line.strip() for line in err.splitlines() if line.strip().startswith("fedrun "))
    assert command == resume_command(folder)
    assert shlex.split(command)[1:len(SLOW_RUN) + 1] == SLOW_RUN and command.endswith("resume=true")
    done = subprocess.run(as_cli(command), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["resumed_from_round"] >= 3
    run_experiment(cfg_factory(*SLOW_RUN), tmp_path / "reference")
    pd.testing.assert_frame_equal(metrics(folder), metrics(tmp_path / "reference"))


def test_resume_without_a_directory_continues_the_last_interrupted_run_of_the_same_config(tmp_path):
    """``fedrun <same overrides> resume=true`` finds the interrupted run under outputs/ and continues it there (no
    new folder); with another config it names the runs it could resume, what differs, and runs nothing."""
    folder, _ = interrupted_run(tmp_path, *SLOW_RUN)
    other = run_cli(*SLOW_RUN, "seed=7", "resume=true", cwd=tmp_path, check=False)
    assert other.returncode == 2 and "seed: 0 there, 7 asked" in other.stderr and str(folder.name) in other.stderr
    assert "resume=true" in other.stderr and "Traceback" not in other.stderr
    done = run_cli(*SLOW_RUN, "resume=true", cwd=tmp_path)
    assert f"continuing the most recent run of this config that can go on, {folder.relative_to(tmp_path)}" in \
        done.stderr
    assert [p.parent for p in (tmp_path / "outputs").glob("*/*/summary.json")] == [folder]
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["resumed_from_round"] >= 3


def test_resume_with_nothing_to_resume_says_so_and_starts_at_round_one(tmp_path):
    """No run under outputs/, a fresh hydra.run.dir, a run killed before its first checkpoint (its files moved aside,
    not overwritten): each is said, and the run starts at round 1."""
    quick = [*BASE, "fl.rounds=2", "progress=false"]
    fresh = run_cli(*quick, "resume=true", cwd=tmp_path)
    assert "nothing to resume under outputs/" in fresh.stderr and "starting a new run at round 1" in fresh.stderr
    named = run_cli(*quick, "resume=true", f"hydra.run.dir={tmp_path / 'new'}", cwd=tmp_path)
    assert "holds no checkpoint to continue from; the run starts at round 1" in named.stdout
    killed = tmp_path / "killed"
    killed.mkdir()
    (killed / "summary.json").write_text(json.dumps({"status": "running"}))
    (killed / "metrics.csv").write_text("round,test_acc\n1,0.5\n")
    again = run_cli(*quick, "resume=true", f"hydra.run.dir={killed}", cwd=tmp_path)
    assert "wrote no checkpoint" in again.stdout and "starts over at round 1" in again.stdout
    (aside,) = tmp_path.glob("killed.previous-*")
    assert (aside / "metrics.csv").read_text() == "round,test_acc\n1,0.5\n"
    assert json.loads((killed / "summary.json").read_text())["status"] == "finished"


def test_unreadable_checkpoints_are_refused_unless_told_to_start_over(tmp_path, cfg_factory):
    """Every checkpoint unreadable: resume=true refuses (naming the fix) and touches nothing; with overwrite=true the
    run's files move aside and it starts over."""
    run_dir = tmp_path / "run"
    run_experiment(cfg_factory(*BASE, "fl.rounds=4"), run_dir)
    for path in checkpoints(run_dir):
        path.write_bytes(path.read_bytes()[:100])
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    with pytest.raises(ConfigError, match=r"none of the 2 checkpoint\(s\) in .* can be read .* add overwrite=true"):
        run_experiment(cfg_factory(*BASE, "fl.rounds=4", "resume=true"), run_dir)
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == before
    summary = run_experiment(cfg_factory(*BASE, "fl.rounds=4", "resume=true", "overwrite=true"), run_dir)
    assert summary["status"] == "finished" and "resumed_from_round" not in summary
    (aside,) = tmp_path.glob("run.previous-*")
    assert {p.name: p.read_bytes() for p in aside.iterdir()} == before


def test_a_sweep_resumed_without_its_folder_is_refused_with_the_folder_to_name(tmp_path):
    """resume=true in a sweep needs the sweep's hydra.sweep.dir: without it, fedrun names the recent sweeps."""
    run_cli("-m", *BASE, "fl.rounds=1", "progress=false", "seed=0,1", cwd=tmp_path)
    again = run_cli("-m", *BASE, "fl.rounds=1", "progress=false", "seed=0,1", "resume=true", cwd=tmp_path, check=False)
    assert again.returncode == 2 and "hydra.sweep.dir=<the sweep's folder>" in again.stderr
    assert "multirun/" in again.stderr and len(list((tmp_path / "multirun").glob("*/*"))) == 1


def test_which_runs_can_go_on_and_where_run_directories_are_made(tmp_path, cfg_factory):
    """Interrupted, killed or failed runs with a checkpoint, and finished ones asked for more rounds, can go on,
    most recent first; finished (at their rounds) and diverged runs, runs without a checkpoint and folders moved
    aside cannot."""
    base = cfg_factory(*BASE, "fl.rounds=3")
    for name, status in [("a", "interrupted"), ("b", "finished"), ("c", "diverged"), ("d", "failed")]:
        run_experiment(base, tmp_path / name)
        summary = json.loads((tmp_path / name / "summary.json").read_text())
        (tmp_path / name / "summary.json").write_text(json.dumps(summary | {"status": status}))
    run_experiment(cfg_factory(*BASE, "fl.rounds=3", "checkpoint.every=0"), tmp_path / "e")  # none written
    (tmp_path / "e" / "summary.json").write_text(json.dumps({"status": "running"}))
    (tmp_path / "a").rename(tmp_path / "a.previous-20260101-000000")
    run_experiment(base, tmp_path / "a")
    (tmp_path / "a" / "summary.json").write_text(json.dumps({"status": "interrupted"}))
    found = resumable_runs(tmp_path, base)
    assert [r.path.name for r in found] == ["a", "d"] and not any(r.differences for r in found)
    longer = resumable_runs(tmp_path, cfg_factory(*BASE, "fl.rounds=5"))
    assert sorted(r.path.name for r in longer) == ["a", "b", "d"]
    other = resumable_runs(tmp_path, cfg_factory(*BASE, "fl.rounds=3", "fl.lr=0.2", "hardware.num_threads=1"))
    assert all(r.differences == ["fl.lr: 0.05 there, 0.2 asked"] for r in other)
    assert run_dir_root("outputs/${now:%Y-%m-%d}/${now:%H-%M-%S}") == Path("outputs")
    assert run_dir_root("/scratch/me/${now:%H}") == Path("/scratch/me") and run_dir_root("runs/fixed") is None
