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
    table = out.with_suffix(".md").read_text()
    assert table.count("| mlp_synthetic_100 |") == 4 and "python -m fedrun.bench.limits --device cpu" in table


def test_a_bad_form_or_tf32_on_a_cpu_is_refused():
    with pytest.raises(SystemExit):
        limits.main(["--device", "cpu", "--forms", "jit"])
    with pytest.raises(SystemExit):
        limits.main(["--device", "cpu", "--precisions", "tf32"])
