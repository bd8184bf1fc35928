"""fedrun.bench.limits: each form and precision's round beside the round's FLOP and byte floors on this machine."""

from __future__ import annotations

import json

import pytest

from fedrun.bench import limits


def test_the_limits_table_puts_each_round_beside_its_floors(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "matmul_peak", lambda device, precision, repeats=3: 1e11)
    monkeypatch.setattr(limits, "copy_bandwidth", lambda device, repeats=3: 1e10)
    out = tmp_path / "limits.json"
    assert limits.main(["--device", "cpu", "--quick", "--only", "mlp_synthetic_100", "--forms", "vmap,graph",
                        "--precisions", "float32,bfloat16", "--repeats", "1", "--out", str(out)]) == 0
    records = json.loads(out.read_text())
    assert [(r["form"], r["precision"]) for r in records] == [("vmap", "float32"), ("vmap", "bfloat16"),
                                                              ("graph", "float32"), ("graph", "bfloat16")]
    base = records[0]["round_s"]
    for r in records:
        assert r["flops_floor_s"] == pytest.approx(r["flops"] / 1e11)
        assert r["bytes_floor_s"] == pytest.approx(r["bytes"] / 1e10)
        assert r["share_of_peak"] == pytest.approx(r["flops"] / r["round_s"] / 1e11)
        assert r["speedup"] == pytest.approx(base / r["round_s"])
        assert r["flops"] > 0 and r["bytes"] > 0 and r["machine"]["git_commit"]
        # a graph form says whether its timing replayed graphs: on a CPU none is captured, every step is eager
        assert ("graphs_captured" in r) is (r["form"] == "graph")
        if r["form"] == "graph":
            assert r["graphs_captured"] == r["graph_replays"] == 0 < r["eager_steps"] and not r["capture_fallback"]
    table = out.with_suffix(".md").read_text()
    assert table.count("| mlp_synthetic_100 |") == 4 and "python -m fedrun.bench.limits --device cpu" in table
    assert table.count(" | 0 / 0 / ") == 2


def test_each_lever_is_timed_as_an_ab_pair_beside_the_form_without_it(tmp_path, monkeypatch):
    """--levers: every form and precision timed again with the lever flipped, its gain the form's round without the
    lever over its round with it; the layout lever runs the other layout; cuDNN's setting is as it was after."""
    import torch

    monkeypatch.setattr(limits, "matmul_peak", lambda device, precision, repeats=3: 1e11)
    monkeypatch.setattr(limits, "copy_bandwidth", lambda device, repeats=3: 1e10)
    out = tmp_path / "limits.json"
    assert limits.main(["--device", "cpu", "--quick", "--only", "lenet5_mnist_10", "--forms", "vmap",
                        "--precisions", "float32", "--levers", "cudnn_benchmark,layout", "--repeats", "1",
                        "--out", str(out)]) == 0
    plain, benchmarked, other_layout = json.loads(out.read_text())
    assert [r["lever"] for r in (plain, benchmarked, other_layout)] == [None, "cudnn_benchmark", "layout"]
    assert plain["gain"] is None and plain["layout"] == benchmarked["layout"] != other_layout["layout"]
    for r in (benchmarked, other_layout):
        assert r["gain"] == pytest.approx(plain["round_s"] / r["round_s"])
    assert not torch.backends.cudnn.benchmark
    table = out.with_suffix(".md").read_text()
    assert f"| layout ({other_layout['layout']}) |" in table and f"{benchmarked['gain']:.2f}x" in table
    with pytest.raises(SystemExit):
        limits.main(["--device", "cpu", "--levers", "turbo"])


def test_a_bad_form_or_tf32_on_a_cpu_is_refused():
    with pytest.raises(SystemExit):
        limits.main(["--device", "cpu", "--forms", "jit"])
    with pytest.raises(SystemExit):
        limits.main(["--device", "cpu", "--precisions", "tf32"])


def test_runs_batched_into_one_cohort_are_set_against_the_same_runs_one_after_another(tmp_path, monkeypatch):
    """lenet5_mnist_160 holds 16 default experiments' cohorts: its round does 16 times the one run's work (8 times in
    --quick, 16 clients against 2), and the table gives what batching gains over the runs' rounds in turn."""
    monkeypatch.setattr(limits, "matmul_peak", lambda device, precision, repeats=3: 1e11)
    monkeypatch.setattr(limits, "copy_bandwidth", lambda device, repeats=3: 1e10)
    out = tmp_path / "limits.json"
    assert limits.main(["--device", "cpu", "--quick", "--only", "lenet5_mnist_10,lenet5_mnist_160", "--forms", "vmap",
                        "--precisions", "float32", "--repeats", "1", "--out", str(out)]) == 0
    one, batched = json.loads(out.read_text())
    assert (one["clients"], batched["clients"], batched["batches"]) == (2, 16, "lenet5_mnist_10")
    assert batched["flops"] == 8 * one["flops"] and batched["steps"] == 8 * one["steps"]
    assert f"{8 * one['round_s'] / batched['round_s']:.1f}x" in out.with_suffix(".md").read_text()

    single = {"workload": "w", "batches": None, "clients": 10, "form": "vmap", "precision": "float32", "round_s": 0.1}
    lines = limits.batched_gains([single, single | {"workload": "w16", "batches": "w", "clients": 160, "round_s": 0.4},
                                  single | {"workload": "v", "batches": "w", "form": "graph"}])  # no one-run graph
    assert lines == ["- w16 (16 runs of w), vmap float32: 4.0x (16 x 100.0 ms one after another, 400.0 ms batched)"]
