"""A sweep job copies a finished run of its own config made at the same clean commit (``reuse=<folder>``), and no
other: not one of another seed, setting, data folder or commit, not one from a tree with uncommitted changes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml
from omegaconf import OmegaConf

from fedrun.config.compose import compose_config
from fedrun.rundir import reuse
from fedrun.rundir.reuse import adopt, twin

SMALL = ["data=digits", "model=logreg", "fl.rounds=2", "fl.num_clients=4", "fl.clients_per_round=2", "progress=false"]


def made(folder: Path, cfg, commit="abc1234", status="finished") -> Path:
    """A run directory as fedrun leaves it: its resolved config, its summary, its metrics and Hydra's record."""
    (folder / ".hydra").mkdir(parents=True)
    (folder / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    (folder / "summary.json").write_text(json.dumps({"status": status, "git_commit": commit, "seed": int(cfg.seed),
                                                     "final_test_acc": 0.75}))
    (folder / "metrics.csv").write_text("round,test_acc\n1,0.5\n2,0.75\n")
    (folder / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["seed=0"]))
    (folder / "fedrun.log").write_text("the process that made it\n")
    return folder


def test_a_twin_is_a_complete_run_of_the_same_config_seed_data_and_clean_commit(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(reuse, "git_commit", lambda: "abc1234")
    cfg = compose_config([*SMALL, "seed=0"])
    job = tmp_path / "b" / "job"
    assert twin(tmp_path, job, cfg) is None  # nothing to copy yet
    made(tmp_path / "a" / "other_seed", compose_config([*SMALL, "seed=1"]))
    made(tmp_path / "a" / "other_lr", compose_config([*SMALL, "seed=0", "fl.lr=0.5"]))
    made(tmp_path / "a" / "other_commit", cfg, commit="def5678")
    made(tmp_path / "a" / "failed", cfg, status="failed")
    made(tmp_path / "a" / "fixture", compose_config([*SMALL, "seed=0", f"data.root={tmp_path / 'fixture'}"]))
    made(job, cfg)  # the job's own folder is not a twin of itself
    assert twin(tmp_path, job, cfg) is None
    other_threads = made(tmp_path / "a" / "twin", compose_config([*SMALL, "seed=0", "hardware.num_threads=1"]))
    assert twin(tmp_path, job, cfg) == other_threads  # how a run executed does not change what it computed
    monkeypatch.setattr(reuse, "git_commit", lambda: "abc1234-dirty")
    with caplog.at_level("INFO", logger="fedrun"):
        assert twin(tmp_path, job, cfg) is None  # a copy could not be told from a run of the changed code
    assert "no run is copied: this code's commit is abc1234-dirty (uncommitted changes)" in caplog.text


def test_an_adopted_run_keeps_its_files_and_says_where_it_came_from(tmp_path):
    source = made(tmp_path / "a", compose_config([*SMALL, "seed=0"]))
    (source / "checkpoint_0000002.pt").write_bytes(b"state")
    summary = adopt(source, tmp_path / "b")
    assert summary["reused_from"] == str(source) and summary["status"] == "finished"
    assert json.loads((tmp_path / "b" / "summary.json").read_text()) == summary
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["checkpoint_0000002.pt", "config.yaml",
                                                                  "metrics.csv", "summary.json"]
    assert (tmp_path / "b" / "metrics.csv").read_text() == (source / "metrics.csv").read_text()


def test_a_sweep_copies_the_runs_another_sweep_made_of_its_configs_at_its_commit(tmp_path, monkeypatch):
    """Sweep a: seeds 0 and 1 at lr 0.1. Sweep b, told to reuse what is under the runs' folder: the same two jobs
    are copied (the same metrics, their source named), the two at lr 0.05 run. Sweep c at another commit runs all.
    Each sweep's code is at the clean commit it names (how a tree without git learns its commit from $FEDRUN_COMMIT:
    tests/test_cli.py)."""
    from cli_runner import run_cli

    import fedrun.rundir.files

    def sweep(name, commit, *args):
        monkeypatch.setattr(fedrun.rundir.files, "git_commit", lambda: commit)  # what the summaries record
        monkeypatch.setattr(reuse, "git_commit", lambda: commit)  # what a job may copy
        run_cli("-m", *SMALL, "seed=0,1", *args, f"hydra.sweep.dir={tmp_path / 'runs' / name}", cwd=tmp_path)
        jobs = [d for d in (tmp_path / "runs" / name).iterdir() if d.name.isdigit()]
        return {(c["seed"], c["fl"]["lr"]): d for d in jobs for c in [yaml.safe_load((d / "config.yaml").read_text())]}

    first = sweep("a", "abc1234", "fl.lr=0.1")
    second = sweep("b", "abc1234", "fl.lr=0.1,0.05", f"reuse={tmp_path / 'runs'}")
    assert sorted(second) == [(0, 0.05), (0, 0.1), (1, 0.05), (1, 0.1)]
    for (seed, lr), d in second.items():
        summary = json.loads((d / "summary.json").read_text())
        if lr == 0.1:
            assert summary["reused_from"] == str(first[seed, lr]), seed
            assert (d / "metrics.csv").read_text() == (first[seed, lr] / "metrics.csv").read_text()
        else:
            assert "reused_from" not in summary and summary["status"] == "finished", seed
    third = sweep("c", "def5678", "fl.lr=0.1", f"reuse={tmp_path / 'runs'}")
    assert not any("reused_from" in json.loads((d / "summary.json").read_text()) for d in third.values())


def test_fedrun_table_counts_the_jobs_a_sweep_copied_apart_from_those_it_ran(tmp_path):
    """What a table's sweep wrote, read from its jobs' summaries: an untouched run counts for nothing, a summary
    written or rewritten (a resumed run) counts as a job that ran, one that names its source as copied, and one left
    unreadable by a killed job as ran."""
    from fedrun.papers.table import _made, _stamps

    def summary(name: str, **fields) -> None:
        (tmp_path / name).mkdir(exist_ok=True)
        (tmp_path / name / "summary.json").write_text(json.dumps({"status": "finished", **fields}))

    summary("untouched")
    summary("resumed", status="interrupted")
    before = _stamps(tmp_path)
    os.utime(tmp_path / "resumed" / "summary.json", ns=(0, 0))  # rewritten since: another time stamp
    summary("new")
    summary("copied", reused_from="/runs/other/0")
    (tmp_path / "cut").mkdir()
    (tmp_path / "cut" / "summary.json").write_text('{"status": "fin')
    assert _made(before, _stamps(tmp_path)) == (3, 1)
    assert _made(before, before) == (0, 0)
