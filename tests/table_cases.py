"""What the fedrun-table tests share: sweeps run in the test process, a tiny paper's file, the count of jobs a
table ran, runs marked as made at given commits, and paired runs of a method and its rival."""

import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

import fedrun.papers.table


@pytest.fixture(autouse=True)
def _sweeps_in_this_process(monkeypatch):
    """fedrun-table's sweeps (``python -m fedrun.cli -m ...``) run in the test process: tests/cli_runner.py."""
    from cli_runner import fedrun_in_this_process

    fedrun_in_this_process(monkeypatch, fedrun.papers.table)

# each artefact's grid as the paper describes it: (presets, jobs per seed)


TINY = ["data=digits", "fl.rounds=2", "fl.num_clients=2,3", "partition=case1"]  # 2 jobs of fig. 8c's preset


def _write_paper(folder: Path) -> None:
    folder.mkdir()
    (folder / "tiny.yaml").write_text(yaml.safe_dump({
        "cite": "Tiny et al.", "title": "A tiny paper", "venue": "nowhere", "artefacts": {"tiny_fig": {
            "source": "Fig. 1", "what": "accuracy against N", "presets": ["bherd_fig8c"], "value": "final_test_acc",
            "scale": 100, "rows": ["fl.num_clients"], "tolerance": 50,
            "claims": [{"says": "more clients end more accurate", "method": {"fl.num_clients": 3},
                        "versus": {"fl.num_clients": 2}}],
            "paper": "fl.num_clients, value\n2, 80.0\n3, 81.5\n4, 90.0\n"}}}))


def _ran(capsys) -> int:
    return int(re.search(r"fedrun-table: (\d+) job\(s\) ran", capsys.readouterr().out).group(1))


def _made_at(runs: Path, *commits: str) -> None:
    """Record the runs under ``runs`` as made at ``commits`` (in turn), as their summary.json says."""
    for i, summary in enumerate(sorted(runs.rglob("summary.json"))):
        data = json.loads(summary.read_text())
        data["git_commit"], data["git_commits"] = commits[i % len(commits)], [commits[i % len(commits)]]
        summary.write_text(json.dumps(data))


def _paired_runs(diffs: dict[int, float], base: float = 80.0, status: dict | None = None) -> pd.DataFrame:
    """Runs of a method and its rival at seeds 0..: the rival at ``base`` + a seed's shift, the method ``diffs[seed]``
    above it; ``status`` marks a (side, seed) run failed or absent (None)."""
    rows = []
    for seed, d in diffs.items():
        for side, value in (("dgt", base + seed + d), ("none", base + seed)):
            state = (status or {}).get((side, seed), "finished")
            if state is None:
                continue
            rows.append({"dgt": side, "seed": seed, "status": state,
                         "acc": value if state in ("finished", "diverged") else float("nan")})
    return pd.DataFrame(rows)
