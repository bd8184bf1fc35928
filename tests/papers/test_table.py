"""fedrun-table: the papers' artefacts run as sweeps through any launcher, collected and summarised beside the
paper, and committed tables kept apart from runs made otherwise."""

import json
import re
import subprocess
from dataclasses import replace

import pandas as pd
import pytest
import yaml

import fedrun.papers.table
from fedrun.papers.artefacts import PRESET, artefacts
from fedrun.papers.table import main
from fedrun.papers.table_summary import collect, markdown, summarise
from table_cases import _made_at, _ran, _sweeps_in_this_process, _write_paper, TINY  # noqa: F401  (an autouse fixture)

@pytest.mark.parametrize("launcher", [[], pytest.param(["hydra/launcher=parallel", "hydra.launcher.n_jobs=2"],
                                                        marks=pytest.mark.slow)],
                         ids=["basic", "parallel"])  # joblib's processes: also test_cli's sweep with a failed job
def test_a_table_runs_through_a_launcher_and_a_second_invocation_runs_nothing(tmp_path, monkeypatch, capsys,
                                                                            launcher):
    _write_paper(tmp_path / "papers")
    monkeypatch.setenv("FEDRUN_PAPERS", str(tmp_path / "papers"))
    monkeypatch.setattr(fedrun.papers.table, "WATCH_S", 0.5)  # the sweep says where it is while it runs
    monkeypatch.setattr(fedrun.papers.table, "subprocess", subprocess)  # so it runs in a process of its own
    args = ["tiny_fig", *TINY, *launcher, "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out")]
    assert main(args) == 0
    said = capsys.readouterr().out
    assert re.search(r"fedrun-table: \w+: \d of 2 runs complete", said) and int(re.search(
        r"fedrun-table: (\d+) job\(s\) ran", said).group(1)) == 2
    table = pd.read_csv(tmp_path / "out" / "tiny_fig.csv")
    assert table["fl.num_clients"].tolist() == [2, 3, 4] and table["runs"].tolist()[:2] == [1, 1]
    summaries = {json.loads(p.read_text())["final_test_acc"] for p in (tmp_path / "runs").rglob("summary.json")}
    assert {round(v / 100, 10) for v in table["value"][:2]} == {round(v, 10) for v in summaries}
    text = (tmp_path / "out" / "tiny_fig.md").read_text()
    assert "shortened: 2 of 100 rounds" in text and "| 4 | – | 90.00 | – | no finished run |" in text
    # what every run had beyond the preset (its grid values and the seed aside) is in the header
    assert "Beyond their presets, the runs had `data=digits fl.rounds=2`." in text
    # ...but where each job looked for a copy of its run made by another artefact's sweep (tests/rundir/test_reuse.py)
    recorded = {o for p in (tmp_path / "runs").rglob("overrides.yaml") for o in yaml.safe_load(p.read_text())}
    assert f"reuse={(tmp_path / 'runs').resolve()}" in recorded
    verdict = "holds" if table["value"][1] > table["value"][0] else "does not hold"  # the claim, on these runs
    assert f"- more clients end more accurate: 3: {table['value'][1]:.4g}; 2: {table['value'][0]:.4g} (value) -> " \
        f"**{verdict}**" in text
    checked = pd.read_csv(tmp_path / "out" / "tiny_fig_claims.csv")  # what results/CLAIMS.md counts
    assert checked[["says", "verdict"]].values.tolist() == [["more clients end more accurate", verdict]]
    # ...and the runs it was computed from, from which scripts/claims/recompute_claims.py computes it again
    kept = pd.read_csv(tmp_path / "out" / "tiny_fig_runs.csv")
    assert len(kept) == 2 and {"seed", "status", "value", "commit"} <= set(kept.columns) and "run_dir" not in kept
    from conftest import load_script

    assert load_script("recompute_claims").recompute(tmp_path) == ({"out/tiny_fig_claims.csv": []}, [])
    assert (tmp_path / "out" / "tiny_fig.png").exists()
    assert main(args) == 0 and _ran(capsys) == 0  # every job finished: skipped by fedrun itself
    # what that launcher made, summarised without running: the same table
    assert main(["tiny_fig", "--collect-only", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "again")]) == 0
    again = pd.read_csv(tmp_path / "again" / "tiny_fig.csv")
    pd.testing.assert_frame_equal(again, table)


def test_collect_only_joins_the_paper_with_an_extra_seed_a_failed_job_and_a_missing_cell(tmp_path, monkeypatch,
                                                                                         capsys):
    _write_paper(tmp_path / "papers")
    monkeypatch.setenv("FEDRUN_PAPERS", str(tmp_path / "papers"))
    runs = tmp_path / "runs"
    assert main(["tiny_fig", *TINY, "--runs", str(runs), "--out", str(tmp_path / "a")]) == 0
    folder = runs / "tiny_fig" / "bherd_fig8c"
    two, three = sorted(p for p in folder.iterdir() if (p / "summary.json").exists())
    assert main(["tiny_fig", "--runs", str(runs), *TINY, "seed=1", "fl.num_clients=2", "--out",
                 str(tmp_path / "b")]) == 0  # one more seed of N = 2, into its own folder (options and overrides mixed)
    summary = json.loads((three / "summary.json").read_text())  # N = 3 failed
    (three / "summary.json").write_text(json.dumps(summary | {"status": "failed", "error": "RuntimeError: boom"}))
    capsys.readouterr()
    drawn = []  # the figure's curves: over the runs the table's means are over, the failed one left out
    monkeypatch.setattr("fedrun.papers.table_summary.plot_curves",
                        lambda group, *_, **__: drawn.extend(group["run_dir"]))
    assert main(["tiny_fig", "--collect-only", "--runs", str(runs), "--out", str(tmp_path / "c")]) == 0
    assert "job(s) ran" not in capsys.readouterr().out
    assert len(drawn) == 2 and str(three) not in drawn and str(two) in drawn
    table = pd.read_csv(tmp_path / "c" / "tiny_fig.csv")
    assert table["fl.num_clients"].tolist() == [2, 3, 4]
    assert table["runs"].tolist()[0] == 2 and table["seeds"].tolist()[0] == 2  # the extra seed
    finals = [json.loads(p.read_text())["final_test_acc"] for p in folder.rglob("summary.json")
              if json.loads(p.read_text())["status"] == "finished"]
    assert table["value"][0] == pytest.approx(100 * sum(finals) / 2)
    assert table["value_diff"][0] == pytest.approx(table["value"][0] - 80.0)
    text = (tmp_path / "c" / "tiny_fig.md").read_text()
    assert "| 3 | – | 81.50 | – | no finished run |" in text and "| 4 | – | 90.00 | – | no finished run |" in text
    assert "1 of 3 runs did not finish" in text and "RuntimeError: boom" in text and str(three) in text


def test_rows_and_columns_pivot_with_the_paper_beside_fedrun_and_a_tolerance_note():
    """The runs' cells beside the paper's; a paper cell without runs, and each point of the preset's grid with
    neither (what is still to run), marked."""
    from fedrun.papers.artefacts import Artefact, Value

    numbers = pd.DataFrame({"algo": ["fedavg", "fedavg", "bherd"], "partition": ["case1", "case2", "case1"],
                            "value": [84.0, 83.0, 85.0]})
    a = Artefact(name="t", paper="p", source="Table", what="", presets=("bherd_table2_svm",),
                 values=(Value("value", "v", 1.0),), rows=("algo",), columns=("partition",), tolerance=1.0,
                 paper_numbers=numbers)
    runs = pd.DataFrame([{"run_dir": f"r{i}", PRESET: "bherd_table2_svm", "algo": algo, "partition": case, "seed": seed,
                          "status": "finished", "error": None, "diverged_round": None, "rounds_completed": 3,
                          "value": v, "rounds": 3, "planned_rounds": 3, "fixture": "", "summary": {}}
                         for i, (algo, case, seed, v) in enumerate([("fedavg", "case1", 0, 84.5),
                                                                    ("fedavg", "case1", 1, 85.5),
                                                                    ("fedavg", "case2", 0, 80.0)])])
    text = markdown(a, summarise(a, runs))
    assert "| algo | fedrun case1 | paper case1 | fedrun case2 | paper case2 | note |" in text
    assert ("| fedavg | 85.00 ± 0.71 | 84.00 | 80.00 | 83.00 | case1: within 1 of the paper; case2: NOT within 1 "
            in text)
    assert "| bherd | – | 85.00 | – | – | no finished run |" in text  # case1 the paper's cell, case2 the grid's
    rows = [line.split(" | ")[0].strip("| ") for line in text.splitlines()[2:]]
    assert rows == ["fedavg", "bherd", "centralized", "grab_fedavg", "fednova", "bherd_fednova", "scaffold",
                    "bherd_scaffold", "feddyn", "bherd_feddyn"]  # the runs', the paper's, then the grid's order
    assert "| scaffold | – | – | – | – | no finished run |" in text
    why = replace(a, not_run={"bherd_table2_svm": "too long here: 5 hours a run"})
    assert "| scaffold | – | – | – | – | no finished run: too long here |" in markdown(why, summarise(why, runs))
    # runs of one's own values of a grid key (algo=fedprox): the table is that sweep's, with no grid points to run
    own = runs.assign(algo="fedprox")
    table = summarise(a, own)
    assert len(table) == 5 and set(table["algo"]) == {"fedprox", "fedavg", "bherd"}  # its 2 cells, the paper's 3


def test_unknown_artefact_is_refused_with_the_nearest_name(capsys):
    with pytest.raises(SystemExit) as err:
        main(["bherd_fig5"])
    assert err.value.code == 2 and "Did you mean bherd_fig5a?" in capsys.readouterr().err


def test_collect_reads_a_runs_grid_values_from_its_config_when_hydra_recorded_none(tmp_path):
    from fedrun.papers.artefacts import Artefact, Value

    run = tmp_path / "t" / "bherd_fig8c" / "old"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"seed": 0, "fl": {"num_clients": 5, "rounds": 100},
                                                     "partition": {"name": "case2"}}))
    (run / "summary.json").write_text(json.dumps({"status": "finished", "final_test_acc": 0.5}))
    a = Artefact(name="t", paper="p", source="", what="", presets=("bherd_fig8c",),
                 values=(Value("value", "final_test_acc", 100.0),))
    found = collect(a, tmp_path)
    assert found[["fl.num_clients", "partition", "value"]].values.tolist() == [["5", "case2", 50.0]]


def test_how_runs_executed_never_splits_a_grid_point_but_an_override_that_changes_results_does(tmp_path):
    """Three runs of one grid point: two continued with resume=true, one on other threads, all with progress=false,
    two given fl.lr=0.1. fl.lr, which changes results, is a key of the table, the preset's value where a run was not
    given one; how the runs executed goes to the header, with how many runs had it where not all did."""
    from fedrun.papers.artefacts import Artefact, Value

    for seed, extra in enumerate([["resume=true", "fl.lr=0.1"], ["resume=true", "hardware.num_threads=2"],
                                  ["fl.lr=0.1"]]):
        run = tmp_path / "t" / "bherd_fig8c" / f"fl.num_clients=5,partition=case2,seed={seed}"
        (run / ".hydra").mkdir(parents=True)
        (run / "config.yaml").write_text(yaml.safe_dump({"seed": seed, "partition": {"name": "case2"}, "fl": {
            "num_clients": 5, "rounds": 100, "lr": 0.1 if "fl.lr=0.1" in extra else 0.05}}))
        (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(
            ["fl.num_clients=5", "partition=case2", f"seed={seed}", "progress=false", *extra]))
        (run / "summary.json").write_text(json.dumps({"status": "finished", "final_test_acc": 0.5}))
    a = Artefact(name="t", paper="p", source="", what="", presets=("bherd_fig8c",),
                 values=(Value("value", "final_test_acc", 100.0),))
    found = collect(a, tmp_path)
    assert "resume" not in found and "hardware.num_threads" not in found and "progress" not in found
    assert found["fl.lr"].tolist() == ["0.1", "0.05", "0.1"]  # the preset's, where the run was not given one
    assert found["overrides"].iloc[0] == "hardware.num_threads=2 (1 of 3 runs) progress=False resume=True (2 of 3 runs)"


def test_curves_against_simulated_time_are_averaged_on_the_range_every_run_covers():
    from fedrun.rundir.report import on_common_grid

    a = pd.Series([0.0, 1.0, 2.0], index=[0.0, 10.0, 20.0])  # acc = t / 10, logged at t = 0, 10, 20
    b = pd.Series([1.0, 1.0], index=[5.0, 25.0])  # constant 1, logged at other times
    first, second = on_common_grid([a, b], points=5)
    assert first.index.tolist() == second.index.tolist() == [5.0, 8.75, 12.5, 16.25, 20.0]
    assert first.tolist() == pytest.approx([0.5, 0.875, 1.25, 1.625, 2.0]) and second.tolist() == [1.0] * 5


def test_fixture_runs_never_pass_for_runs_on_the_real_data(tmp_path, monkeypatch, capsys):
    _write_paper(tmp_path / "papers")
    monkeypatch.setenv("FEDRUN_PAPERS", str(tmp_path / "papers"))
    folder = tmp_path / "runs" / "tiny_fig" / "bherd_fig8c"
    folder.mkdir(parents=True)
    (folder / "fixture.json").write_text(json.dumps({"dataset": "digits", "note": "a fixture"}))
    assert main(["tiny_fig", *TINY, "--runs", str(tmp_path / "runs")]) == 2
    assert f"{folder} holds runs on a fixture of digits, which is present now" in capsys.readouterr().err


def test_some_presets_of_an_artefact_show_their_paper_cells_only(capsys):
    from dataclasses import replace

    _, a = artefacts()["bherd_table2"]
    svm = replace(a, presets=("bherd_table2_svm",))
    table = summarise(svm, pd.DataFrame())
    assert set(table[PRESET]) == {"bherd_table2_svm"} and set(table["note"]) == {"no finished run"}
    assert len(table) == 20 and table["value_paper"].notna().sum() == 18  # its grid; the paper's 18 numbers
    with pytest.raises(SystemExit) as err:
        main(["bherd_table2", "--presets", "bherd_table2_lstm", "--collect-only"])
    assert err.value.code == 2 and "its presets: bherd_table2_svm,bherd_table2_rnn,bherd_table2_cnn" in \
        capsys.readouterr().err


def test_a_value_is_a_summary_key_or_a_metrics_column_reduced_over_its_logged_rounds(tmp_path):
    from fedrun.papers.table_summary import _metrics, _value

    (tmp_path / "metrics.csv").write_text("round,test_acc,sim_time_s\n1,0.5,10.0\n2,0.6,\n3,0.7,30.0\n4,0.8,\n")
    summary, config = {"final_test_acc": 0.8, "rounds_to_target": 3, "reached": True}, {"eval": {"target_acc": 0.65}}

    def value(of, cfg=config):
        return _value(_metrics(tmp_path), summary, of, cfg)

    assert value("test_acc@2") == 0.6 and value("test_acc@9") is None
    assert value("sim_time_s@last") == 30.0  # the last round that logged it
    assert value("tau@last") is None and value("reached") is None
    assert value("final_test_acc") == 0.8 and value("rounds_to_target") == 3.0
    assert value("test_acc@max") == 0.8 and value("sim_time_s@mean") == 20.0
    assert value("test_acc@mean_last_2") == pytest.approx(0.75) and value("test_acc@mean_last_9") == pytest.approx(0.65)
    assert value("test_acc@std_last_2") == pytest.approx(pd.Series([0.7, 0.8]).std())
    # at the first round reaching the run's target: round 3 (0.7 >= 0.65); its simulated time; no target, no value
    assert value("round@target") == 3.0 and value("sim_time_s@target") == 30.0
    assert value("round@target", {"eval": {"target_acc": 0.9}}) is None and value("round@target", {}) is None
    assert value("tau@last|test_acc@last") == 0.8 and value("sim_time_s@last|test_acc@last") == 30.0  # a, else b


def test_a_sweep_that_fedrun_refuses_stops_the_table_with_its_message(tmp_path, monkeypatch, capfd):
    _write_paper(tmp_path / "papers")
    monkeypatch.setenv("FEDRUN_PAPERS", str(tmp_path / "papers"))
    assert main(["tiny_fig", *TINY, "fl.lr=-1", "--runs", str(tmp_path / "runs")]) == 2
    err = capfd.readouterr().err
    assert "fl.lr=-1" in err and "fedrun refused the sweep of bherd_fig8c" in err


def test_a_table_goes_beside_its_runs_and_never_replaces_a_committed_one_made_otherwise(tmp_path, monkeypatch,
                                                                                       capsys):
    """By default a table is written beside its runs (<runs>/<artefact>/), not into results/. Into a folder that
    holds a committed table, it goes only when made with the same settings (rounds, seeds, the runs' commits), or
    with --replace; a refusal names what differs and leaves the files as they were."""

    _write_paper(tmp_path / "papers")
    monkeypatch.setenv("FEDRUN_PAPERS", str(tmp_path / "papers"))
    runs = tmp_path / "runs"
    assert main(["tiny_fig", *TINY, "--runs", str(runs)]) == 0
    made = runs / "tiny_fig" / "tiny_fig.md"
    assert made.exists() and (runs / "tiny_fig" / "tiny_fig.csv").exists()
    _made_at(runs, "0123abc")  # one clean commit, whatever this checkout's state (a committed table's rule)
    assert main(["tiny_fig", "--collect-only", "--runs", str(runs)]) == 0
    repo = tmp_path / "repo"
    committed = repo / "results" / "tiny"
    committed.mkdir(parents=True)
    for suffix in (".md", ".csv"):
        (committed / f"tiny_fig{suffix}").write_bytes(made.with_suffix(suffix).read_bytes())
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "tables"], check=True)
    collect = ["tiny_fig", "--collect-only", "--runs", str(runs), "--out", str(committed)]
    assert main(collect) == 0  # the same runs: the same settings, rendered again
    paper_run = (committed / "tiny_fig.md").read_text().replace("over seeds [0]", "over seeds [0, 1, 2, 3, 4]")
    (committed / "tiny_fig.md").write_text(paper_run)
    csv = pd.read_csv(committed / "tiny_fig.csv").assign(rounds=100)
    csv.to_csv(committed / "tiny_fig.csv", index=False)
    subprocess.run([*git, "commit", "-qam", "the paper's run"], check=True)
    capsys.readouterr()
    assert main(collect) == 2
    err = capsys.readouterr().err
    assert "is a committed table made with other settings (rounds: [100] there, [2] here; seeds: [0, 1, 2, 3, 4] " \
        "there, [0] here)" in err and "--replace" in err
    assert (committed / "tiny_fig.md").read_text() == paper_run
    assert main([*collect, "--replace"]) == 0
    assert "over seeds [0]" in (committed / "tiny_fig.md").read_text()


def test_the_port_check_compares_an_old_scripts_cells_with_fedrun_tables(tmp_path):
    from conftest import load_script

    port = load_script("port_check")
    (tmp_path / "sweeps.md").write_text("## fig8c: sweep over N\n\n| case | N | acc@10 | acc@50 | acc@100 | std |\n"
                                        "|:--|--:|--:|--:|--:|--:|\n| case1 | 5 | 82.39 | 84.77 | 86.05 | 0.1 |\n")
    for fig in ("fig5a", "fig8a", "fig8b"):
        pd.DataFrame(columns=["partition", "round 10", "round 50", "final", "x"]).to_csv(tmp_path / f"bherd_{fig}.csv")
    pd.DataFrame({"fl.num_clients": [5], "partition": ["case1"], "round 10": [82.391], "round 50": [84.7],
                  "final": [86.05]}).to_csv(tmp_path / "bherd_fig8c.csv", index=False)
    cells = port.bherd_sweeps(tmp_path / "sweeps.md", tmp_path)
    assert cells[["cell", "equal"]].values.tolist() == [["round 10", True], ["round 50", False], ["final", True]]
    (tmp_path / "fig5.md").write_text(
        "## mnist (real data)\n\n| method | final acc % | mean acc % (last 10) | rounds to 80% | mean cos (updates) |\n"
        "|:--|--:|--:|--:|--:|\n| FedAvg | 83.370 | 80.561 | 10 | 0.012 |\n"
        "| FedAvg + DGT | 84.920 | 81.822 | 7 | 0.032 |\n")
    pd.DataFrame({"preset": ["dgt_fig5_mnist"] * 2, "algo": ["fedavg"] * 2, "algo/harmonizer": ["none", "dgt"],
                  "accuracy": [83.37, 84.92], "last10": [80.5614, 81.8234], "rounds to target": [10.0, 7.0],
                  "cosine": [0.0121, 0.0317]}).to_csv(tmp_path / "dgt_fig5.csv", index=False)
    cells = port.dgt(tmp_path / "fig5.md", tmp_path)
    differing = cells[~cells["equal"]][["method", "cell"]].values.tolist()
    assert len(cells) == 8 and differing == [["FedAvg + DGT", "last10"]]
    (tmp_path / "figs_mnist.md").write_text(
        "## Fig. 1: test_acc\n\n| panel | method | final test_acc | best test_acc | paper |\n|:--|:--|--:|--:|--:|\n"
        "| 10% of machines | MA-FSVRG | 0.9507 | 0.9553 | 0.978 |\n\n## Fig. 8: test_acc\n\n"
        "| panel | method | final test_acc | best test_acc | paper |\n|:--|:--|--:|--:|--:|\n"
        "| threshold T = 2 | GA-FSVRG | 0.58 | 0.95 | |\n\n## The points 004 leaves open (MA/GA at 10%): test_acc\n\n"
        "| panel | method | final test_acc |\n|:--|:--|--:|\n| Adam's step (eq. 64) | MA-FSVRG | 0.9633 |\n"
        "| Adam's step (eq. 64) | FSVRG (one model) | 0.9622 |\n| both | MA-FSVRG | 0.9658 |\n")
    pd.DataFrame({"algo": ["mafsvrg"], "fl.clients_per_round": [40], "accuracy": [95.07]}).to_csv(
        tmp_path / "fsvrg_figs_mnist.csv", index=False)
    pd.DataFrame({"algo": ["gafsvrg"], "algo.bank.threshold": [2], "value": [58.0]}).to_csv(
        tmp_path / "fsvrg_fig8_mnist.csv", index=False)
    pd.DataFrame({"algo": ["mafsvrg"] * 2, "reading": ["fsvrg_adam", "fsvrg_centred_adam"],
                  "accuracy": [96.33, 96.0]}).to_csv(tmp_path / "fsvrg_open_mnist.csv", index=False)
    cells = port.fsvrg(tmp_path / "figs_mnist.md", tmp_path)
    assert cells[["figure", "method", "equal"]].values.tolist() == [
        ["Fig. 1", "MA-FSVRG", True], ["Fig. 8", "GA-FSVRG", True], ["open", "MA-FSVRG", True],
        ["open", "MA-FSVRG", False]]  # the one-model reference of the open points is Fig. 1's, left out
    (tmp_path / "fig6.md").write_text(
        "## lenet5_mnist - SUBSTITUTE\n\n| method | rounds | sim time (s) | best acc % | time to 90% (s) |\n"
        "|:--|--:|--:|--:|:--|\n| GIFT | 111 | 302.534 | 97.690 | 44.712 |\n| AFL | 848 | 300.206 | 97.090 | |\n")
    pd.DataFrame({"preset": ["gift_fig6_lenet5_mnist"] * 2, "algo/schedule": ["gift", "afl"],
                  "rounds run": [111, 848], "best": [97.69, 97.0], "seconds_to_target": [44.7121, None]}).to_csv(
        tmp_path / "gift_fig6.csv", index=False)
    cells = port.gift_fig6(tmp_path / "fig6.md", tmp_path)
    assert cells[["method", "cell", "equal"]].values.tolist() == [
        ["GIFT", "rounds run", True], ["GIFT", "best", True], ["GIFT", "seconds_to_target", True],
        ["AFL", "rounds run", True], ["AFL", "best", False], ["AFL", "seconds_to_target", True]]
    (tmp_path / "table2.md").write_text(
        "| Model | Algorithm | paper C1 | fedrun C1 | diff C1 | paper C2 | fedrun C2 | diff C2 | status |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
        "| SVM-MNIST | Centralized SGD | - | 87.52 ± 0.01 | - | - | 87.52 | - | x |\n")
    pd.DataFrame({"preset": ["bherd_table2_svm"] * 2, "algo": ["centralized"] * 2, "partition": ["case1", "case2"],
                  "value": [87.521, 87.6], "value_std": [0.0104, None]}).to_csv(tmp_path / "bherd_table2.csv",
                                                                               index=False)
    cells = port.bherd_table2(tmp_path / "table2.md", tmp_path)
    assert cells[["case", "cell", "equal"]].values.tolist() == [
        ["case1", "mean", True], ["case1", "std", True], ["case2", "mean", False]]
    was = pd.DataFrame({"preset": ["p"] * 2, "algo": ["fedavg", "bherd"], "alpha": [1.0, 0.5],  # a numeric key
                        "runs": [5, 5], "value": [86.031, 86.04], "value_std": [0.0, 0.04],
                        "value_paper": [84.48, 85.4], "value_diff": [1.55, 0.64]})
    now = was.assign(value=[86.034, 86.06], value_diff=[9.0, 9.0], runs=[4, 5])  # bookkeeping and paper's: left out
    was.to_csv(tmp_path / "old.csv", index=False)
    now.to_csv(tmp_path / "new.csv", index=False)
    cells = port.rerun(tmp_path / "old.csv", tmp_path / "new.csv")
    assert sorted(cells[["algo", "cell", "equal"]].values.tolist()) == [
        ["bherd", "value", False], ["bherd", "value_std", True], ["fedavg", "value", True],
        ["fedavg", "value_std", True]]
    now.iloc[:1].to_csv(tmp_path / "fewer.csv", index=False)  # a point the new rendering lacks is not equal
    fewer = port.rerun(tmp_path / "old.csv", tmp_path / "fewer.csv")
    assert fewer[fewer["algo"] == "bherd"]["equal"].tolist() == [False, False]
    now.rename(columns={"algo": "algo/step_selector"}).to_csv(tmp_path / "other.csv", index=False)
    with pytest.raises(SystemExit, match="not one artefact"):
        port.rerun(tmp_path / "old.csv", tmp_path / "other.csv")


TINY_MEASURE = """
def measure(scale: float = 1.0, repeats: int = 2):
    return [{"algo": algo, "seed": r, "q": scale * (r + 1) * (1 if algo == "a" else 2)}
            for algo in ("a", "b") for r in range(repeats)]
"""


def test_a_measured_artefact_is_summarised_over_its_repeats_beside_the_paper_and_re_rendered_without_measuring(
        tmp_path, monkeypatch, capsys):
    (tmp_path / "tiny_measure.py").write_text(TINY_MEASURE)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "papers").mkdir()
    (tmp_path / "papers" / "tiny.yaml").write_text(yaml.safe_dump({
        "cite": "Tiny et al.", "title": "A tiny paper", "venue": "nowhere", "artefacts": {"tiny_time": {
            "source": "Table I", "what": "seconds", "measure": "tiny_measure:measure",
            "values": {"seconds": {"of": "q"}, "ms": {"of": "q", "scale": 1000}}, "rows": ["algo"],
            "paper": "algo, seconds\na, 4.0\n"}}}, sort_keys=False))
    monkeypatch.setenv("FEDRUN_PAPERS", str(tmp_path / "papers"))
    args = ["tiny_time", "scale=2", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out")]
    assert main(args) == 0 and _ran(capsys) == 1
    table = pd.read_csv(tmp_path / "out" / "tiny_time.csv")
    assert table["algo"].tolist() == ["a", "b"]
    assert table["seconds"].tolist() == [3.0, 6.0] and table["ms"].tolist() == [3000.0, 6000.0]  # mean of 2 repeats
    assert table["seconds_std"][0] == pytest.approx(pd.Series([2.0, 4.0]).std())
    assert table["seconds_paper"][0] == 4.0 and table["seconds_diff"][0] == -1.0
    text = (tmp_path / "out" / "tiny_time.md").read_text()
    assert "from 1 measurement made at commit" in text and "measured by `tiny_measure:measure` with `scale=2`" in text
    assert "| a | 3.00 ± 1.41 | 4.00 | 3000.00 ± 1414.21 |" in text
    assert main(args) == 0 and _ran(capsys) == 0  # the same settings: the measurement is kept
    assert main(["tiny_time", "--collect-only", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "b")]) == 0
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "b" / "tiny_time.csv"), table)
    assert main([*args, "repeats=3"]) == 0 and _ran(capsys) == 1  # other settings: measured again
    assert pd.read_csv(tmp_path / "out" / "tiny_time.csv")["runs"].tolist() == [3, 3]
    capsys.readouterr()
    assert main(["tiny_time", "scales=2", "--runs", str(tmp_path / "runs")]) == 2  # refused, naming the settings
    assert "'scales=2': tiny_time is measured by tiny_measure:measure, whose settings are scale=1.0, repeats=2" in \
        capsys.readouterr().err
    assert main(["tiny_time", "repeats", "--runs", str(tmp_path / "runs")]) == 2
    assert "'repeats': give a setting as key=value (scale=...)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as err:
        main(["tiny_time", "--seeds", "3", "--runs", str(tmp_path / "runs")])
    assert err.value.code == 2 and "not swept: it has no seeds or presets; give its settings as key=value" in \
        capsys.readouterr().err


def test_an_artefact_is_either_swept_or_measured_and_its_function_is_named_module_colon_function(tmp_path):
    from fedrun.errors import ConfigError
    from fedrun.papers.artefacts import read_paper

    for name, artefact, said in [
            ("both", {"presets": ["bherd_fig8c"], "measure": "m:f"}, "either presets (a sweep) or measure"),
            ("neither", {}, "either presets (a sweep) or measure"),
            ("dotted", {"measure": "fedrun.papers.measures.hog_ceiling.measure"}, "write it module:function")]:
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump({"cite": "c", "title": "t", "artefacts": {name: {"source": "T", **artefact}}}))
        with pytest.raises(ConfigError, match=re.escape(said)):
            read_paper(path)


def test_the_hog_ceiling_is_the_test_accuracy_of_a_softmax_regression_fitted_to_convergence():
    import torch

    from fedrun.papers.measures.hog_ceiling import ceiling

    g = torch.Generator().manual_seed(0)
    y = torch.tensor([0] * 30 + [1] * 20 + [2] * 10)
    x = torch.nn.functional.one_hot(y, 3).double() * 4 + 0.1 * torch.randn(60, 3, generator=g, dtype=torch.double)
    assert ceiling(x, y, x, y, l2=1e-4) == 1.0  # separable: every training sample right
    flipped = torch.tensor([1] * 30 + [0] * 20 + [2] * 10)  # the test set's labels of classes 0 and 1 swapped
    assert ceiling(x, y, x, flipped, l2=1e-4) == pytest.approx(10 / 60)


def test_a_committed_table_is_made_from_runs_of_one_clean_commit(tmp_path, monkeypatch, capsys):
    """Into a folder of committed tables, runs of several commits or with uncommitted changes are refused, naming
    them, unless --mixed-commits; beside the runs (not tracked) any runs make a table."""

    _write_paper(tmp_path / "papers")
    monkeypatch.setenv("FEDRUN_PAPERS", str(tmp_path / "papers"))
    runs = tmp_path / "runs"
    assert main(["tiny_fig", *TINY, "--runs", str(runs), "seed=0,1"]) == 0
    committed = tmp_path / "repo" / "results"
    committed.mkdir(parents=True)
    (committed / "README.md").write_text("tables\n")
    git = ["git", "-C", str(committed.parent), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "tables"], check=True)
    collect = ["tiny_fig", "--collect-only", "--runs", str(runs), "--out", str(committed)]
    for commits, says in ((("aaa1111", "bbb2222"), "made at 2 commits (aaa1111, bbb2222)"),
                          (("ccc3333-dirty",), "with uncommitted changes (ccc3333-dirty)")):
        _made_at(runs, *commits)
        capsys.readouterr()
        assert main(collect) == 2
        err = capsys.readouterr().err
        assert says in err and "--mixed-commits" in err and not (committed / "tiny_fig.md").exists()
        assert main(["tiny_fig", "--collect-only", "--runs", str(runs)]) == 0  # beside its runs: written
    assert main([*collect, "--mixed-commits"]) == 0 and "ccc3333-dirty" in (committed / "tiny_fig.md").read_text()
    _made_at(runs, "ddd4444")
    assert main([*collect, "--replace"]) == 0  # one clean commit (replacing the table written above)


def test_ctrl_c_waits_for_the_sweeps_checkpoints_and_says_how_to_go_on(tmp_path, monkeypatch, capsys):
    """The sweep (a stand-in process here) runs past one watch period (a progress line), then Ctrl-C: fedrun-table
    waits for the sweep to exit (its runs write their checkpoints) rather than killing it, and says how to go on."""

    class Sweep:
        def __init__(self, cmd):
            self.waits = 0

        def wait(self, timeout=None):
            self.waits += 1
            if self.waits == 1:
                raise subprocess.TimeoutExpired("fedrun", timeout)
            if self.waits == 2:
                raise KeyboardInterrupt
            return 130

    made = []
    monkeypatch.setattr(fedrun.papers.table.subprocess, "Popen", lambda cmd: made.append(Sweep(cmd)) or made[-1])
    _write_paper(tmp_path / "papers")
    monkeypatch.setenv("FEDRUN_PAPERS", str(tmp_path / "papers"))
    assert main(["tiny_fig", *TINY, "--runs", str(tmp_path / "runs")]) == 130
    assert made[0].waits == 3, "waited for the sweep after Ctrl-C"
    said = capsys.readouterr()
    assert "fedrun-table: bherd_fig8c: 0 of 2 runs complete, 2 to start" in said.out
    assert "the same command with resume=true continues each unfinished run" in said.err
