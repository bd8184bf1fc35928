"""scripts/bench_ratio.py: two bench runs' records joined by workload, with the ratio of their auto times."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import load_script


def _records(path: Path, times: dict[str, float], commit: str) -> Path:
    path.write_text(json.dumps([{"workload": w, "auto_s": t, "gflops": 1 / t, "matmul_peak_gflops": 200.0,
                                 "command": "python -m fedrun.bench", "machine": {"git_commit": commit}}
                                for w, t in times.items()] + [{"workload": "addon", "train_s": 1.0}]))
    return path


def test_the_workloads_both_ran_are_joined_with_base_over_this(tmp_path):
    ratio = load_script("bench_ratio")
    base = _records(tmp_path / "base.json", {"a": 0.5, "b": 0.3, "only_base": 1.0}, "1111111aaa")
    this = _records(tmp_path / "this.json", {"b": 0.1, "a": 0.2, "only_this": 1.0}, "2222222bbb")
    out = tmp_path / "ratio.md"
    ratio.main([str(base), str(this), "--base-label", "start", "--out", str(out)])
    text = out.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and "workload" not in line]
    assert [r.split(" | ")[0] for r in rows] == ["| b", "| a"]  # this run's order, shared workloads only
    assert "| 3.00x |" in rows[0] and "| 2.50x |" in rows[1]
    assert "commit 1111111" in text and "commit 2222222" in text


def test_a_missing_run_is_refused_with_how_to_make_it(tmp_path, capsys):
    ratio = load_script("bench_ratio")
    with pytest.raises(SystemExit):
        ratio.main([str(tmp_path / "nope.json"), str(tmp_path / "nope2.json")])
    assert "python -m fedrun.bench --out" in capsys.readouterr().err
