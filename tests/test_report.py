import json

import pandas as pd
import pytest

from fedrun.engine.experiment import run_experiment
from fedrun.report import main as report_main


def test_report_groups_two_runs_and_draws_curves(tmp_path, cfg_factory, capsys):
    summaries = {}
    for algo in ("fedavg", "centralized"):
        for seed in (0, 1):
            run = tmp_path / "runs" / f"{algo}-{seed}"
            summaries[(algo, seed)] = run_experiment(
                cfg_factory("data=digits", "model=logreg", "fl.rounds=2", f"algo={algo}", f"seed={seed}"), run)
    out = tmp_path / "report"
    assert report_main([str(tmp_path / "runs"), "--out", str(out)]) == 0
    table = pd.read_csv(out / "report.csv")
    assert list(table["method"]) == ["centralized", "fedavg"]  # the varying key, found without --by
    assert list(table["seeds"]) == [2, 2] and "algo.name" not in table, "the method says what the part names say"
    for _, row in table.iterrows():
        accs = [summaries[(row["method"], s)]["final_test_acc"] for s in (0, 1)]
        assert abs(row["final_test_acc_mean"] - sum(accs) / 2) < 1e-12
        assert abs(row["final_test_acc_std"] - pd.Series(accs).std()) < 1e-12
    assert (out / "curves.png").stat().st_size > 1000
    assert "| method" in (out / "report.md").read_text()
    assert report_main([str(tmp_path / "runs"), "--by", "algo.name,seed"]) == 0
    assert "4 runs, grouped by ['algo.name', 'seed']" in capsys.readouterr().out
    assert report_main([str(tmp_path / "runs"), "--by", "nonsense.key"]) == 2
    assert json.loads((tmp_path / "runs" / "fedavg-0" / "summary.json").read_text())["status"] == "finished"


def test_report_on_a_sweep_with_a_failed_job_and_the_full_method_names(tmp_path, capsys):
    """A sweep over harmonisers where one job fails: its config.yaml is resolved (no interpolation passes for a
    value), its two-line error stays in one Markdown row, counts print as integers and a missing value as a dash."""
    from conftest import run_cli

    sweep = tmp_path / "sweep"
    proc = run_cli("-m", "data=digits,cifar10", f"data.root={tmp_path / 'empty'}", "model=logreg", "fl.rounds=2",
                   "algo/harmonizer=none,fedgh,dgt", "progress=false", f"hydra.sweep.dir={sweep}", cwd=tmp_path,
                   check=False)
    assert proc.returncode == 1  # CIFAR-10's files are missing: three jobs fail as they load it
    for config in sweep.glob("*/config.yaml"):
        assert "${" not in config.read_text(), config
    methods = {json.loads(p.read_text()).get("method") for p in sweep.glob("*/summary.json")}
    assert methods == {"fedavg", "fedavg+fedgh", "fedavg+dgt"}
    capsys.readouterr()
    assert report_main([str(sweep), "--out", str(tmp_path / "report")]) == 0
    text = (tmp_path / "report" / "report.md").read_text()
    table, _, failures = text.partition("did not finish")
    assert "nan" not in text and "algo.harmonizer.momentum" not in table, "a part's own setting is no difference"
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in table.splitlines() if line.startswith("| fedavg")]
    assert len(rows) == 6 and len({len(r) for r in rows}) == 1
    header = [c.strip() for c in table.splitlines()[2].split("|")[1:-1]]
    assert all(r[header.index("runs")] == "1" and r[header.index("seeds")] == "1" for r in rows), "integer counts"
    assert all(r[header.index("final_test_acc_std")] == "–" for r in rows), "one seed: no std, a dash"
    failed = [line for line in failures.splitlines() if "| failed |" in line]
    assert len(failed) == 3 and all("cifar10" in line and line.count("|") == 4 for line in failed)


def test_report_says_how_each_unfinished_run_ended(tmp_path):
    import json

    import pandas as pd

    from fedrun.report import unfinished

    df = pd.DataFrame([
        {"run_dir": "a", "status": "finished", "error": None, "diverged_round": None, "rounds_completed": 10},
        {"run_dir": "b", "status": "interrupted", "error": None, "diverged_round": None, "rounds_completed": 7},
        {"run_dir": "c", "status": "diverged", "error": None, "diverged_round": 3, "rounds_completed": 3},
        {"run_dir": "d", "status": "missing", "error": None, "diverged_round": None, "rounds_completed": None},
        {"run_dir": "e", "status": "failed", "error": "ValueError: bad", "diverged_round": None,
         "rounds_completed": None},
    ])
    text = unfinished(df)
    assert "4 of 5 runs did not finish" in text
    lines = {line.split("|")[1].strip(): line for line in text.splitlines()
             if line.startswith("| ") and "run |" not in line}
    assert "after round 7" in lines["b"] and "resume=true" in lines["b"]
    assert "diverged at round 3" in lines["c"] and "killed before" in lines["d"] and "ValueError: bad" in lines["e"]
    assert json.dumps(sorted(lines)) == json.dumps(["b", "c", "d", "e"])


def test_more_rounds_extend_a_finished_run_only_when_resuming(tmp_path):
    """A sweep job whose folder holds a finished run with fewer rounds and nothing else different: with resume=true
    the run is extended from its last round; without it the refusal says so; a diverged run is complete at any
    length (fedrun.results.finished_summary, what a sweep asks before each job)."""
    from fedrun.compose import compose_config
    from fedrun.errors import StaleRunError
    from fedrun.results import finished_summary

    base = ["data=digits", "model=logreg", "fl.num_clients=4", "fl.clients_per_round=2", "progress=false"]
    run = tmp_path / "a"
    run_experiment(compose_config([*base, "fl.rounds=1"]), run)
    with pytest.raises(StaleRunError, match=r"fl\.rounds: 1 there, 3 asked.*add resume=true"):
        finished_summary(run, compose_config([*base, "fl.rounds=3"]))
    with pytest.raises(StaleRunError, match=r"seed: 0 there, 1 asked\)"):  # not only rounds: no extension
        finished_summary(run, compose_config([*base, "fl.rounds=3", "seed=1", "resume=true"]))
    longer = compose_config([*base, "fl.rounds=3", "resume=true"])
    assert finished_summary(run, longer) is None
    extended = run_experiment(longer, run)
    assert extended["extended_from_rounds"] == 1 and extended["rounds_completed"] == 3
    assert list(pd.read_csv(run / "metrics.csv")["round"]) == [1, 2, 3]
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps(summary | {"status": "diverged"}))
    assert finished_summary(run, compose_config([*base, "fl.rounds=9"]))["status"] == "diverged"

