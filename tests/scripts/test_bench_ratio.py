"""scripts/bench/bench_ratio.py: two bench runs' records joined by workload, with the ratio of their auto times."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import load_script


def _records(path: Path, times: dict[str, float], commit: str) -> Path:
    path.write_text(json.dumps([{"workload": w, "auto_s": t, "gflops": 1 / t, "matmul_peak_gflops": 200.0,
                                 "command": "python -m fedrun.bench.workloads", "machine": {"git_commit": commit}}
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
    assert "python -m fedrun.bench.workloads --out" in capsys.readouterr().err


def test_add_on_times_are_joined_by_workload_and_add_on(tmp_path):
    """Runs of the add-on workloads alone (make bench-addons): each add-on's time in both runs, base over this, with
    both runs' training rounds beside them as a check of the machine's steadiness."""
    ratio = load_script("bench_ratio")

    def addons(path: Path, fedgh: float, commit: str) -> Path:
        path.write_text(json.dumps([{"workload": "harmonize_k1000", "addons": ["fedgh", "dgt"], "train_s": 0.012,
                                     "fedgh_s": fedgh, "dgt_s": 0.01, "command": "python -m fedrun.bench.workloads",
                                     "machine": {"git_commit": commit}}]))
        return path

    out = tmp_path / "ratio.md"
    ratio.main([str(addons(tmp_path / "b.json", 0.5, "1111111aaa")), str(addons(tmp_path / "t.json", 0.25,
                                                                                "2222222bbb")), "--out", str(out)])
    rows = [line for line in out.read_text().splitlines() if line.startswith("| harmonize_k1000")]
    assert rows == ["| harmonize_k1000 | fedgh | 0.5000 | 0.2500 | 2.00x | 0.012 | 0.012 |",
                    "| harmonize_k1000 | dgt | 0.0100 | 0.0100 | 1.00x | 0.012 | 0.012 |"]
    assert "auto s" not in out.read_text() and "commit 1111111" in out.read_text()
