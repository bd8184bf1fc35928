"""The generated blocks of README.md and docs/ (scripts/repo/readme_blocks.py) are what conf/ and the committed
measurement say, and the smoke command the README gives runs."""

from __future__ import annotations

import json

from conftest import REPO, load_script

from fedrun.engine.run.experiment import run_experiment


def test_the_generated_blocks_are_up_to_date():
    blocks = load_script("readme_blocks")
    for file, _ in blocks.BLOCKS.values():
        text = (REPO / file).read_text()
        assert blocks.render(file, text) == text, f"{file} is stale: run python scripts/repo/readme_blocks.py"


def test_the_config_groups_block_lists_every_option_of_every_group():
    from fedrun.config.compose import CONF_DIR
    from fedrun.config.overrides import group_options

    block = load_script("readme_blocks").groups_block()
    for group, options in group_options(CONF_DIR).items():
        row = next(line for line in block.splitlines() if line.startswith(f"| `{group}` |"))
        assert all(f"`{o}`" in row for o in options), group
    assert "| `data` | `mnist` |" in block and "| `experiment` | none |" in block
    assert "| `algo/step_selector` | the algorithm's |" in block


def test_the_timings_block_is_the_committed_measurement(tmp_path, monkeypatch):
    blocks = load_script("readme_blocks")
    measured = tmp_path / "results" / "newcomer" / "first-commands-cpu.json"
    measured.parent.mkdir(parents=True)
    measured.write_text(json.dumps({
        "commands": {"default": {"seconds": 12.4, "final_test_acc": 0.9819, "args": []},
                     "smoke": {"seconds": 4.6, "final_test_acc": 0.80, "args": ["experiment=smoke"]}},
        "repeats": 3, "machine": "a CPU (2 threads)", "commit": "0123456789abcdef", "date": "2026-11-27",
        "command": "python scripts/repo/readme_blocks.py --measure --repeats 3", "kernel_build_s": 97.0}))
    monkeypatch.setattr(blocks, "REPO", tmp_path)
    monkeypatch.setattr(blocks, "MEASURED", measured)
    text = blocks.timings_block()
    assert "`make run` (the default experiment): 12 s, test accuracy 98.2%" in text
    assert "`fedrun experiment=smoke`: 5 s" in text and "commit 0123456" in text and "about 97 s" in text
    assert "on a CPU (2 threads): " in text, "a record made before the kernels were noted says nothing of them"
    for avx512, said in ((True, "which has AVX-512 (fedrun's fused convolution kernels on)"),
                         (False, "which has no AVX-512 (fedrun's fused convolution kernels off)")):
        measured.write_text(json.dumps(json.loads(measured.read_text()) | {"avx512": avx512}))
        assert f"on a CPU (2 threads), {said}: " in blocks.timings_block()
    assert "As an AVX2 CPU" not in blocks.timings_block() and ".venv" not in blocks.timings_block()
    measured.write_text(json.dumps(json.loads(measured.read_text()) | {
        "as_avx2": {"default": {"seconds": 21.4, "final_test_acc": 0.98, "args": []},
                    "smoke": {"seconds": 3.2, "final_test_acc": 0.8, "args": ["experiment=smoke"]}},
        "venv_gb": 6.65, "venv_cuda_gb": 4.33}))
    text = blocks.timings_block()
    assert "As an AVX2 CPU runs it (the same machine with torch and oneDNN capped at AVX2" in text
    assert "`make run`: 21 s; `fedrun experiment=smoke`: 3 s." in text
    assert "`.venv` takes 6.7 GB, 4.3 GB of it the CUDA libraries" in text


def test_the_smoke_command_runs_the_whole_path_in_seconds(cfg_factory, tmp_path):
    summary = run_experiment(cfg_factory("experiment=smoke"), tmp_path)
    assert summary["status"] == "finished" and summary["rounds_completed"] == 5
    assert summary["final_test_acc"] > 0.5  # digits, an MLP: well past chance (0.1) in 5 rounds


def test_the_claims_block_lists_every_paired_point_of_the_committed_verdict_files(tmp_path, monkeypatch):
    """Only pre-registered points with paired runs, each with its interval and its runs' commit; a point not checked
    is not listed (CLAIMS.md counts those), unless its paired difference is reported (the paper states no effect)."""
    blocks = load_script("readme_blocks")
    folder = tmp_path / "results" / "p"
    folder.mkdir(parents=True)
    (folder / "t1.md").write_text("# t\n\nMade by `x` at commit 1234 on 2026-01-01 from 10 runs made at commit "
                                  "abcdef0123456789; their compute time 600 s on AMD EPYC (2 threads). Mean ...\n")
    (folder / "t1_claims.csv").write_text(
        "says,where,value,method,versus,verdict,pairs,difference,interval,needs,tuned\n"
        "gh helps,{'algo': 'fedavg'},acc,{},{},holds,5.0,3.74,\"(3.24, 4.43)\",2.035,lr: fedgh 2.0\n"
        "gh helps,{'preset': 'cifar'},acc,{},{},not checked: cannot be fetched,,,,,\n"
        "gh helps,{'preset': 'mnist'},acc,{},{},not checked: the paper states no effect,5.0,0.05,\"(0.01, 0.09)\",,\n")
    monkeypatch.setattr(blocks, "REPO", tmp_path)
    rows = blocks.claims_block().splitlines()[2:]  # a file from before the t-rule: its rows say so
    assert rows == ["| gh helps | algo=fedavg; each at its best lr: fedgh 2.0 | +3.74 (+3.24 to +4.43), 5 seeds "
                    "(bootstrap, superseded) | >= 2.04 | holds | `results/p/t1.md` (abcdef0) |",
                    "| gh helps | preset=mnist | +0.05 (+0.01 to +0.09), 5 seeds (bootstrap, superseded) | reported, "
                    "not decided | not checked: the paper states no effect | `results/p/t1.md` (abcdef0) |"]
