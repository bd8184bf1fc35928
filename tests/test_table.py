"""fedrun-table: the papers' artefacts as data, run as sweeps through any launcher, summarised beside the paper."""

import json
import math
import re
import subprocess
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import yaml

import fedrun.papers.table
from fedrun.papers.artefacts import PRESET, artefacts, normalise
from fedrun.papers.artefacts import grid, preset_config
from fedrun.papers.table import main
from fedrun.papers.table_summary import collect, markdown, summarise


@pytest.fixture(autouse=True)
def _sweeps_in_this_process(monkeypatch):
    """fedrun-table's sweeps (``python -m fedrun.cli -m ...``) run in the test process: tests/cli_runner.py."""
    from cli_runner import fedrun_in_this_process

    fedrun_in_this_process(monkeypatch, fedrun.papers.table)

# each artefact's grid as the paper describes it: (presets, jobs per seed)
EXPECTED = {
    "bherd_table2": (3, 3 * 10 * 2),  # three models x ten algorithms x two cases
    "bherd_fig5a": (1, 5 * 2),  # five alphas x two cases
    "bherd_svm_controls": (1, 3 * 2),  # FedAvg, BHerd, its random-subset control x two cases
    "bherd_fig8a": (1, 5 * 2),  # five E
    "bherd_fig8b": (1, 5 * 2),  # five B
    "bherd_fig8c": (1, 4 * 2),  # four N
    # 3 settings of 3 image columns, 6 LEAF columns and 2 substitutes for LEAF's x 4 bases x FedGH or not
    "fedgh_table2": (17, 17 * 4 * 2),
    "fedgh_table3": (9, 9 * 4 * 2),  # each column's first setting
    "fedgh_table4": (2, 2 * 4 * 2),  # CIFAR-10/100 x four K x FedGH or not
    "fedgh_table5": (2, 2 * 4 * 2),  # four E
    "fedgh_synthetic_controls": (1, 3 * 3 * 7),  # three bases x (alone, FedGH, its control) x seven server lrs
    "fedgh_cnn_controls": (2, 2 * 3 * 3 * 3),  # CIFAR-10 and its substitute x three bases x three x three lrs
    "gift_table1": (5, 5 * 2),  # five settings x (fixed tau = 100, GIFT)
    "dgt_fig5": (3, 3 * 3 * 2),  # three datasets x three bases x DGT or not
    "dgt_reduced": (1, 2),  # FedAvg without and with DGT
    "gift_fig5": (5, 5 * 2),  # Table 1's runs
    "gift_fig6": (3, 3 * 3),  # three settings x (GIFT, AFL, AdaComm)
    "gift_fig7": (3, 3 * 2),  # with and without relaxation
    "gift_controls": (2, 2 * 6),  # CIFAR-10 and its substitute x (GIFT, four fixed tau, AdaComm)
    "gift_controls_time": (2, 2 * 7),  # the same and AFL, which needs the time budget
    "fsvrg_figs_mnist": (3, (2 + 1 + 5) * 4),  # (MA, GA; FSVRG; five baselines) x four participation levels
    "fsvrg_figs_cifar10": (3, (2 + 1 + 5) * 4),
    "fsvrg_open_mnist": (1, 2 * 9),  # MA, GA x nine readings of the open points
    **{f"fsvrg_fig{n}_mnist": (1, 2 * 4) for n in (8, 9, 10)},  # MA, GA x four thresholds, models or beta1
}


def test_every_artefact_composes_and_its_grid_holds_the_papers_cells():
    known = artefacts()
    assert set(EXPECTED) <= set(known)
    for name, (paper, a) in known.items():
        assert paper.title and a.values and bool(a.presets) != bool(a.measure), name
        if a.measure:  # measured, not swept: its function exists and its paper numbers are keyed by what it returns
            from fedrun.papers.measures import function

            assert callable(function(a)), name
            continue
        axes = {p: grid(p) for p in a.presets}
        for p in a.presets:
            preset_config(p)  # composes, with its data and model
        if name in EXPECTED:
            assert (len(a.presets), sum(math.prod(map(len, g.values())) for g in axes.values())) == EXPECTED[name]
        keys = [k for k in a.paper_numbers.columns if k not in {v.name for v in a.values}]
        for _, row in a.paper_numbers.iterrows():  # every number the paper prints is at a point of the grid
            presets = [row[PRESET]] if PRESET in keys else list(a.presets)
            assert any(all(row[k] in map(normalise, axes[p][k]) for k in keys if k != PRESET) for p in presets), \
                (name, dict(row))


def _presets_refused(presets) -> dict:
    from fedrun.config.compose import CONF_DIR
    from fedrun.config.overrides import check_sweep_jobs

    return {p: problems for p in presets if (problems := check_sweep_jobs(["-m", f"experiment={p}"], CONF_DIR))}


def test_every_job_of_a_preset_that_sweeps_readings_passes_fedruns_checks():
    """A reading may set any key (conf/reading/): each job of such a grid is checked as fedrun checks it before a
    sweep starts (fsvrg_no_acceleration's alpha_g = 0 was refused once, so fsvrg_open_mnist could not run)."""
    presets = {p for _, a in artefacts().values() for p in a.presets if "reading" in grid(p)}
    assert presets and _presets_refused(sorted(presets)) == {}


def test_fedghs_cnn_controls_are_table_2s_cifar10_cell_and_its_substitute_only_its_data():
    """At server lr 1 each job of fedgh_cnn_controls_cifar10 is Table II's own (fedgh_table2_cifar10_a01_c20), and the
    Fashion-MNIST substitute differs from it only in the data (AutoAugment's policy kept)."""
    from omegaconf import OmegaConf

    def plain(preset, *overrides):
        cfg = OmegaConf.to_container(preset_config(preset, list(overrides)), resolve=True)
        cfg.pop("hydra", None)
        return cfg

    for algo in ("fedavg", "fedprox", "fednova"):
        for harmonizer in ("none", "fedgh"):
            at = (f"algo={algo}", f"algo/harmonizer={harmonizer}")
            assert plain("fedgh_cnn_controls_cifar10", *at, "algo.server_opt.lr=1") == \
                plain("fedgh_table2_cifar10_a01_c20", *at)
        at = (f"algo={algo}", "algo/harmonizer=fedgh_norm_only", "algo.server_opt.lr=2")
        cifar, fashion = plain("fedgh_cnn_controls_cifar10", *at), plain("fedgh_cnn_controls_fashion_mnist", *at)
        assert {k for k in cifar if cifar[k] != fashion[k]} == {"data"}
        assert (fashion["data"]["name"], fashion["data"]["augment"], fashion["data"]["augment_policy"]) == \
            ("fashion_mnist", cifar["data"]["augment"], cifar["data"]["augment_policy"])
    assert _presets_refused(["fedgh_cnn_controls_fashion_mnist"]) == {}


def test_gifts_controls_are_table_1s_setting_with_only_tau_or_the_stopping_rule_changed():
    """The fixed-tau controls run Table 1's own setting (gift_table1's preset at its tau = 100, tau aside), and the
    equal-time grid differs from the equal-synchronisations one only in how a run ends and how often it is
    evaluated; every job of both grids passes fedrun's checks (AFL needs the time budget the second has)."""
    from omegaconf import OmegaConf

    def plain(preset, schedule):
        cfg = OmegaConf.to_container(preset_config(preset, [f"algo/schedule={schedule}"]), resolve=True)
        cfg.pop("hydra", None)
        return cfg

    for data in ("cifar10", "mnist"):
        table1 = plain(f"gift_table1_lenet5_{data}", "fixed_tau100")
        for tau in (100, 50, 25, 10):
            control = plain(f"gift_controls_lenet5_{data}", f"fixed_tau{tau}")
            timed = plain(f"gift_controls_time_lenet5_{data}", f"fixed_tau{tau}")
            changed = {k for k in control if control[k] != timed[k]}
            assert control["algo"]["schedule"] == {**table1["algo"]["schedule"], "tau": tau}
            assert control == {**table1, "algo": {**table1["algo"], "schedule": control["algo"]["schedule"]}}
            assert changed == {"fl", "timing", "eval"}
            assert (timed["fl"] | {"rounds": 1000}, timed["timing"]["budget_s"]) == (control["fl"], 5616)
    assert _presets_refused(["gift_controls_lenet5_mnist", "gift_controls_time_lenet5_mnist"]) == {}


@pytest.mark.slow
def test_every_job_of_every_artefact_passes_fedruns_checks():
    assert _presets_refused(sorted({p for _, a in artefacts().values() for p in a.presets})) == {}


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
    # ...but where each job looked for a copy of its run made by another artefact's sweep (tests/test_reuse.py)
    recorded = {o for p in (tmp_path / "runs").rglob("overrides.yaml") for o in yaml.safe_load(p.read_text())}
    assert f"reuse={(tmp_path / 'runs').resolve()}" in recorded
    verdict = "holds" if table["value"][1] > table["value"][0] else "does not hold"  # the claim, on these runs
    assert f"- more clients end more accurate: 3: {table['value'][1]:.4g}; 2: {table['value'][0]:.4g} (value) -> " \
        f"**{verdict}**" in text
    checked = pd.read_csv(tmp_path / "out" / "tiny_fig_claims.csv")  # what results/CLAIMS.md counts
    assert checked[["says", "verdict"]].values.tolist() == [["more clients end more accurate", verdict]]
    # ...and the runs it was computed from, from which scripts/recompute_claims.py computes it again
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


def test_a_claim_compares_grid_points_on_the_mean_over_seeds_at_each_point_of_the_other_keys():
    from fedrun.papers.claims import check
    from fedrun.papers.artefacts import Claim

    table = pd.DataFrame({PRESET: ["m", "m", "m", "f", "f"],
                          "algo": ["fedavg", "fedavg", "scaffold", "fedavg", "fedavg"],
                          "dgt": ["none", "dgt", "none", "none", "dgt"], "runs": [2, 2, 1, 1, 1],
                          "rounds": [10.0, 7.0, 8.0, 5.0, 4.0], "acc": [80.0, 80.4, 85.0, 70.0, 71.0],
                          "fixture": ["", "", "", "a fixture", "a fixture"]})
    keys = [PRESET, "algo", "dgt"]
    faster = Claim("faster", "rounds", "dgt", ("dgt",), ("none",), better="lower")
    out = check((faster,), table, keys)
    assert out["where"].tolist() == [{PRESET: "m", "algo": "fedavg"}, {PRESET: "m", "algo": "scaffold"},
                                     {PRESET: "f", "algo": "fedavg"}]
    assert out["verdict"].tolist() == ["holds", "not checked: no finished run of ['dgt']", "not checked: fixture data"]
    assert out["method"][0] == {"dgt": 7.0} and out["versus"][0] == {"none": 10.0}
    higher = Claim("higher", "acc", "dgt", ("dgt",), ("none",))
    assert check((higher,), table, keys)["verdict"][0] == "holds"
    assert check((replace(higher, margin=0.5),), table, keys)["verdict"][0] == "does not hold"  # 0.4 < the margin
    # several rivals: better than the best of them; a value never reached (NaN) is the worst
    rivals = pd.DataFrame({"s": ["gift", "afl", "adacomm"], "runs": [1, 1, 1], "t": [40.0, float("nan"), 45.0],
                           "fixture": ["", "", ""]})
    first = Claim("first", "t", "s", ("gift",), ("afl", "adacomm"), better="lower")
    assert check((first,), rivals, ["s"], reaching=frozenset({"t"}))["verdict"].tolist() == ["holds"]
    assert check((replace(first, method=("adacomm",), versus=("gift", "afl")),), rivals, ["s"],
                 reaching=frozenset({"t"}))["verdict"][0] == "does not hold"
    # a value that is not a time to a level: missing is not the worst, the claim is not checked
    assert check((first,), rivals, ["s"])["verdict"][0] == "not checked: no value for ['afl']"
    assert check((replace(first, key="nothing"),), rivals, ["s"])["verdict"][0] == "not checked: no runs sweep nothing"
    # sides in different presets of one grid: pooled across them
    split = pd.DataFrame({PRESET: ["proposed", "baselines"], "algo": ["ga", "fedprox"], "runs": [1, 1],
                          "acc": [90.0, 85.0], "fixture": ["", ""]})
    above = Claim("above", "acc", "algo", ("ga",), ("fedprox",))
    assert check((above,), split, [PRESET, "algo"])["verdict"].tolist() == [
        "not checked: no finished run of ['fedprox']", "not checked: no finished run of ['ga']"]
    assert check((replace(above, across=(PRESET,)),), split, [PRESET, "algo"])["verdict"].tolist() == ["holds"]
    # a preset without any run is one point not checked, with why where the artefact's not_run says it
    idle = pd.concat([table, pd.DataFrame({PRESET: ["g", "g", "r"], "algo": ["fedavg"] * 3,
                                           "dgt": ["none", "dgt", "none"], "runs": [0, 0, 0]})])
    out = check((faster,), idle, keys, not_run={"g": "too long here"})
    assert out["verdict"].tolist()[:2] == ["not checked: too long here", "not checked: no finished run"]
    assert out["where"].tolist()[:2] == [{PRESET: "g"}, {PRESET: "r"}] and len(out) == 5


def test_a_papers_file_with_a_bad_claim_or_value_is_refused_naming_it(tmp_path, monkeypatch):
    from fedrun.errors import ConfigError
    from fedrun.papers.artefacts import read_paper

    base = {"source": "Fig. 1", "presets": ["bherd_fig8c"], "value": "final_test_acc"}
    bad = {"a": {**base, "value": "test_acc@best"},
           "b": {**base, "claims": [{"method": {"algo": "x"}, "versus": {"partition": "y"}}]},
           "c": {**base, "claims": [{"value": "accuracy", "method": {"algo": "x"}, "versus": {"algo": "y"}}]},
           "d": {**base, "claims": [{"better": "more", "method": {"algo": "x"}, "versus": {"algo": "y"}}]},
           "e": {**base, "values": {"rounds": {"of": "rounds_to_target"}}}}
    said = {"a": "after '@' comes a round number", "b": "method and versus each name the same one grid key",
            "c": "value 'accuracy' is not one of the artefact's values", "d": "better='more'; use higher or lower",
            "e": "a value may not be named ['rounds']"}
    for name, artefact in bad.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump({"cite": "c", "title": "t", "artefacts": {name: artefact}}))
        with pytest.raises(ConfigError, match=re.escape(said[name])):
            read_paper(path)


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


def test_the_listing_reads_each_presets_grid_and_data_as_hydra_composes_them():
    """``--list`` reads the presets' YAML (a second for every artefact, where composing each took most of a minute):
    what it reads is what Hydra composes, for every preset of every artefact."""
    from fedrun.papers.artefacts import outline

    presets = {p for _, a in artefacts().values() for p in a.presets}
    assert len(presets) > 20
    for preset in sorted(presets):
        assert outline(preset) == (grid(preset), preset_config(preset).data.name), preset


def _made_at(runs: Path, *commits: str) -> None:
    """Record the runs under ``runs`` as made at ``commits`` (in turn), as their summary.json says."""
    for i, summary in enumerate(sorted(runs.rglob("summary.json"))):
        data = json.loads(summary.read_text())
        data["git_commit"], data["git_commits"] = commits[i % len(commits)], [commits[i % len(commits)]]
        summary.write_text(json.dumps(data))


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


def test_list_names_every_artefact_with_its_jobs_per_seed(capsys):
    assert main(["--list"]) == 0
    out = capsys.readouterr().out
    for name, (presets, jobs) in EXPECTED.items():
        assert re.search(rf"\| {name} \| [^|]+ \| [^|]+ \| {jobs}( \(the runs of \w+\))? \|", out), name
    assert "| fedgh_table3 | Zhang et al. (FedGH) | Table III | 72 (the runs of fedgh_table2) |" in out


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


def test_every_reading_of_an_open_point_composes_over_its_preset_and_changes_what_it_names():
    from omegaconf import OmegaConf

    from fedrun.config.compose import compose_config

    readings = sorted(p.stem for p in (Path(__file__).parent.parent / "conf" / "reading").glob("*.yaml"))
    assert readings == sorted(grid("fsvrg_open_mnist")["reading"])  # the artefact sweeps every one
    plain = OmegaConf.to_container(compose_config(["experiment=fsvrg_open_mnist", "reading=fsvrg_as_printed"]))
    assert plain == OmegaConf.to_container(compose_config(["experiment=fsvrg_open_mnist"]))
    for name in readings:
        given = yaml.safe_load((Path(__file__).parent.parent / "conf" / "reading" / f"{name}.yaml").read_text()) or {}
        cfg = OmegaConf.to_container(compose_config(["experiment=fsvrg_open_mnist", f"reading={name}"]))

        def leaves(tree, prefix=""):
            return [(prefix + k, v) for k, v in tree.items() if not isinstance(v, dict)] + [
                x for k, v in tree.items() if isinstance(v, dict) for x in leaves(v, prefix + k + ".")]

        for key, value in leaves(given):  # each setting the reading names is what the run gets
            node = cfg
            for part in key.split("."):
                node = node[part]
            assert node == value, (name, key)



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


def test_a_preregistered_claim_is_decided_by_the_paired_rule_written_before_its_runs():
    """The rule: seed-paired differences in the claimed direction, their Student-t 95% interval, at least ``seeds``
    pairs; it holds when the interval excludes 0 and the mean reaches ``share`` of the paper's effect."""
    from fedrun.papers.artefacts import Claim
    from fedrun.papers.claims import check

    claim = Claim("DGT ends more accurate", "acc", "dgt", ("dgt",), ("none",), effect=2.0)  # the paper: +2 points
    table = pd.DataFrame({"dgt": ["dgt", "none"], "runs": [5, 5], "acc": [81.5, 80.0], "fixture": ["", ""]})

    def verdict(runs, c=claim):
        return check((c,), table, ["dgt"], runs=runs).iloc[0]

    clear = verdict(_paired_runs({s: 1.5 + 0.1 * s for s in range(5)}))  # +1.5..+1.9: above the margin of 1.0
    assert clear["verdict"] == "holds" and clear["pairs"] == 5 and clear["interval"][0] > 0
    assert clear["difference"] == pytest.approx(1.7) and clear["needs"] == pytest.approx(1.0)
    small = verdict(_paired_runs({s: 0.5 + 0.05 * s for s in range(5)}))  # consistent, but under half the effect
    assert small["verdict"] == "does not hold" and small["interval"][0] > 0
    noisy = verdict(_paired_runs({0: 4.0, 1: -3.0, 2: 3.5, 3: -2.5, 4: 4.0}))  # a mean of 1.2 whose interval has 0
    assert noisy["verdict"] == "does not hold" and noisy["interval"][0] < 0 < noisy["interval"][1]
    lower = verdict(_paired_runs({s: -1.5 for s in range(5)}), replace(claim, better="lower"))  # lower is better
    assert lower["verdict"] == "holds" and lower["difference"] == pytest.approx(1.5)
    failed = verdict(_paired_runs({s: 1.5 for s in range(5)}, status={("dgt", 3): "failed"}))
    assert failed["verdict"] == "not decided: 4 of the 5 seed pairs it needs (seed 3: method failed)"
    missing = verdict(_paired_runs({s: 1.5 for s in range(5)}, status={("none", 4): None}))
    assert missing["verdict"] == "not decided: 4 of the 5 seed pairs it needs (seed 4: versus not run)"
    diverged = verdict(_paired_runs({s: 1.5 for s in range(5)}, status={("dgt", 2): "diverged"}))  # an outcome
    assert diverged["pairs"] == 5
    assert verdict(_paired_runs({s: 1.5 for s in range(3)}), replace(claim, seeds=3))["verdict"] == "holds"
    by_point = replace(claim, effect=None, effects=((((PRESET, "p"),), 2.0),))  # the paper's effect at a preset
    running = pd.DataFrame({PRESET: ["p"], "dgt": [float("nan")], "runs": [2], "acc": [float("nan")]})
    still = _paired_runs({0: 1.0}, status={("dgt", 0): "running", ("none", 0): "running"}).assign(**{PRESET: "p"})
    unfinished = check((by_point,), running, [PRESET, "dgt"], runs=still)  # no side has finished a run
    assert unfinished["verdict"].tolist() == ["not checked: no finished run of ['dgt', 'none']"]
    legacy = check((replace(claim, effect=None),), table, ["dgt"], runs=_paired_runs({0: 1.0})).iloc[0]
    assert legacy["verdict"] == "holds" and pd.isna(legacy["pairs"])  # without an effect: the means, as before
    from fedrun.papers.claims import markdown as claims_markdown

    text = claims_markdown(check((claim,), table, ["dgt"], runs=_paired_runs({s: 1.5 for s in range(5)})))
    assert ("paired difference 1.5 (95% t-interval 1.5 to 1.5, 5 seeds; needs > 0 and >= 1; one-sided p 0 (t-test, "
            "decides), 0.0312 (sign-flip); power at the paper's effect 100%) -> **holds**") in text


def test_a_preregistered_claim_names_its_rule_in_the_papers_file(tmp_path, monkeypatch):
    """effect > 0, seeds >= 2, share in [0, 1], and one value a side: else the paper's file is refused naming it."""
    from fedrun.errors import ConfigError
    from fedrun.papers import artefacts

    base = {"says": "x", "value": "accuracy", "method": {"algo": "dgt"}, "versus": {"algo": "fedavg"}}
    for bad, says in (({"effect": -1}, "effect=-1"), ({"effect": 1, "seeds": 1}, "seeds=1"),
                      ({"effect": 1, "share": 2}, "share=2"),
                      ({"effect": 1, "method": {"algo": ["dgt", "gift"]}}, "pairs one method value")):
        with pytest.raises(ConfigError, match=re.escape(says)):
            artefacts._claims([base | bad], (artefacts.Value("accuracy", "final_test_acc"),), "paper/x.yaml")
    accuracy = (artefacts.Value("accuracy", "final_test_acc"),)
    (claim,) = artefacts._claims([base | {"effect": 0.9, "seeds": 10}], accuracy, "p")
    assert (claim.effect, claim.seeds, claim.share) == (0.9, 10, 0.5)
    rivals = base | {"effect": 1, "versus": {"algo": ["fedavg", "fedprox"]}}
    with pytest.raises(ConfigError, match=re.escape("write {versus} in its says")):  # both would read the same
        artefacts._claims([rivals], accuracy, "p")
    each = artefacts._claims([rivals | {"says": "dgt beats {versus}"}], accuracy, "p")
    assert [(c.says, c.versus, c.effect) for c in each] == [("dgt beats fedavg", ("fedavg",), 1.0),
                                                          ("dgt beats fedprox", ("fedprox",), 1.0)]
    (means,) = artefacts._claims([base | {"versus": {"algo": ["fedavg", "fedprox"]}}], accuracy, "p")
    assert means.versus == ("fedavg", "fedprox")  # without an effect: one claim on the means, beating each


def test_gift_controls_registers_one_paired_claim_per_smaller_fixed_tau():
    """The fixed-tau rule is stated once in paper/gift.yaml and composes into one paired claim per tau: equal
    synchronisations leave tau = 100 to Table 1 (the paper's own gain), equal time takes every tau."""
    from fedrun.papers.artefacts import artefacts

    for name, taus in (("gift_controls", (50, 25, 10)), ("gift_controls_time", (100, 50, 25, 10))):
        paired = [c for c in artefacts()[name][1].claims if c.effect is not None]
        assert [(c.method, c.versus, c.effect, c.seeds, c.share) for c in paired] == \
            [(("gift",), (f"fixed_tau{t}",), 1.0, 5, 0.5) for t in taus]
        assert all(f"fixed_tau{t}" in c.says and "{" not in c.says for c, t in zip(paired, taus))


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


def test_a_preregistered_effect_may_differ_by_a_grid_keys_value():
    """DGT states its gain per dataset: effect {preset: {...}} gives each point its own margin; a point the paper
    states nothing of is not checked."""
    from fedrun.papers import artefacts
    from fedrun.papers.claims import check

    (claim,) = artefacts._claims([{"says": "x", "value": "acc", "method": {"dgt": "dgt"}, "versus": {"dgt": "none"},
                                   "effect": {PRESET: {"mnist": 2, "fmnist": 10}}}],
                                 (artefacts.Value("acc", "final_test_acc"),), "p")
    runs = pd.concat([_paired_runs({s: 1.5 for s in range(5)}).assign(**{PRESET: p}) for p in ("mnist", "fmnist",
                                                                                                  "cifar")])
    table = pd.DataFrame({PRESET: ["mnist", "mnist", "fmnist", "fmnist", "cifar", "cifar"],
                          "dgt": ["dgt", "none"] * 3, "runs": [5] * 6, "acc": [81.5, 80.0] * 3,
                          "fixture": [""] * 6})
    out = check((claim,), table, [PRESET, "dgt"], runs=runs)
    assert out["verdict"].tolist() == ["holds", "does not hold", f"not checked: the paper states no effect at "
                                                                 f"{PRESET}=cifar"]
    assert out["needs"].tolist()[:2] == [1.0, 5.0]
    # where the paper states no effect, the paired difference is reported, not decided
    assert (out["pairs"].iloc[2], out["difference"].iloc[2]) == (5, pytest.approx(1.5))
    assert math.isnan(out["needs"].iloc[2]) and out["interval"].iloc[2] == (pytest.approx(1.5), pytest.approx(1.5))
    from fedrun.papers.claims import markdown

    assert f"x ({PRESET}=cifar): dgt: 81.5; none: 80 (acc); paired difference 1.5 (95% t-interval 1.5 to 1.5, 5 " \
        "seeds; reported, not decided; one-sided p 0 (t-test, decides), 0.0312 (sign-flip)) -> **not checked: the " \
        f"paper states no effect at {PRESET}=cifar**" in markdown(out)


def test_a_preregistered_effect_may_be_the_papers_own_difference_at_each_point():
    """effect: paper takes each point's effect from the paper's printed numbers (method minus versus there); a point
    where the paper's own numbers show no gain is not checked, and a point it prints nothing of neither."""
    from fedrun.papers import artefacts
    from fedrun.papers.claims import check

    values = (artefacts.Value("acc", "final_test_acc"),)
    numbers = artefacts._numbers("preset, algo, h, acc\nmnist, fedavg, none, 80.0\nmnist, fedavg, gh, 82.0\n"
                                 "mnist, prox, none, 70.0\nmnist, prox, gh, 69.5\n", values, "p")
    (claim,) = artefacts._claims([{"says": "x", "value": "acc", "method": {"h": "gh"}, "versus": {"h": "none"},
                                   "effect": "paper"}], values, "p", numbers)
    assert claim.paper_effect({"preset": "mnist", "algo": "fedavg"}) == pytest.approx(2.0)
    assert claim.paper_effect({"preset": "mnist", "algo": "prox"}) == pytest.approx(-0.5)
    runs = pd.concat([_paired_runs({s: 1.5 for s in range(5)}).rename(columns={"dgt": "h"}).replace(
        {"h": {"dgt": "gh"}}).assign(preset="mnist", algo=a) for a in ("fedavg", "prox", "nova")])
    table = pd.DataFrame({"preset": ["mnist"] * 6, "algo": ["fedavg", "fedavg", "prox", "prox", "nova", "nova"],
                          "h": ["gh", "none"] * 3, "runs": [5] * 6, "acc": [81.5, 80.0] * 3, "fixture": [""] * 6})
    out = check((claim,), table, ["preset", "algo", "h"], runs=runs)
    assert out["verdict"].tolist() == [
        "holds", "not checked: the paper's own numbers show no gain at algo=prox, preset=mnist (-0.5)",
        "not checked: the paper states no effect at algo=nova, preset=mnist"]
    assert out["needs"].iloc[0] == pytest.approx(1.0)
    with pytest.raises(Exception, match="effect=paper, but the paper's numbers have no 'acc'"):
        artefacts._claims([{"says": "x", "value": "acc", "method": {"h": "gh"}, "versus": {"h": "other"},
                            "effect": "paper"}], values, "p", numbers)


def test_a_tuned_claim_compares_each_side_at_its_own_best_value_of_the_tuned_key():
    """tuned: each side takes the value of the key (a server lr) with its best mean over seeds; the paired rule then
    pairs the runs at those two values. Untuned, the same runs compare at each lr."""
    from fedrun.papers import artefacts
    from fedrun.papers.claims import check, markdown as claims_markdown

    values = (artefacts.Value("acc", "final_test_acc"),)
    (claim,) = artefacts._claims([{"says": "gh beats its base", "value": "acc", "method": {"h": "gh"},
                                   "versus": {"h": "none"}, "effect": 2, "tuned": "lr"}], values, "p")
    assert claim.tuned == "lr"
    # the base is best at lr 2 (84), gh at lr 1 (83): gh beats the base at lr 1 but not at the base's best
    means = {("none", "1"): 80.0, ("none", "2"): 84.0, ("gh", "1"): 83.0, ("gh", "2"): 82.0}
    runs = pd.DataFrame([{"h": h, "lr": lr, "seed": s, "status": "finished", "acc": m + 0.1 * s}
                         for (h, lr), m in means.items() for s in range(5)])
    table = pd.DataFrame([{"h": h, "lr": lr, "runs": 5, "acc": m + 0.2, "fixture": ""} for (h, lr), m in means.items()])
    row = check((claim,), table, ["h", "lr"], runs=runs).iloc[0]
    assert row["tuned"] == "lr: gh 1 (the grid's end), none 2 (the grid's end)"  # the best may lie beyond the grid
    wider = pd.concat([table, pd.DataFrame([{"h": h, "lr": "4", "runs": 5, "acc": 70.0, "fixture": ""}
                                            for h in ("gh", "none")]),
                       pd.DataFrame([{"h": h, "lr": "0.5", "runs": 5, "acc": 70.0, "fixture": ""}
                                     for h in ("gh", "none")])], ignore_index=True)
    row = check((claim,), wider, ["h", "lr"], runs=runs).iloc[0]
    assert row["tuned"] == "lr: gh 1, none 2"
    assert row["method"] == {"gh": pytest.approx(83.2)} and row["versus"] == {"none": pytest.approx(84.2)}
    assert row["difference"] == pytest.approx(-1.0) and row["verdict"] == "does not hold"
    assert "each at its best lr: gh 1, none 2" in claims_markdown(check((claim,), wider, ["h", "lr"], runs=runs))
    untuned = check((replace(claim, tuned=None),), table, ["h", "lr"], runs=runs)
    assert untuned["verdict"].tolist() == ["holds", "does not hold"]  # +3 at lr 1, -2 at lr 2
    assert untuned["where"].tolist() == [{"lr": "1"}, {"lr": "2"}]
    # the base better at lr 1 too: then gh's gain at its best counts
    better = table.assign(acc=[85.2, 84.2, 83.2, 82.2])
    shifted = runs.assign(acc=runs["acc"] + ((runs["h"] == "none") & (runs["lr"] == "1")) * 5.0)
    row = check((claim,), better, ["h", "lr"], runs=shifted).iloc[0]
    assert row["tuned"].startswith("lr: gh 1 (") and row["difference"] == pytest.approx(-2.0)
    lower = check((replace(claim, better="lower", effect=1.0),), table, ["h", "lr"], runs=runs).iloc[0]
    assert lower["tuned"].replace(" (the grid's end)", "") == "lr: gh 2, none 1"  # lower: the lowest mean
    assert check((replace(claim, tuned="momentum"),), table, ["h", "lr"], runs=runs)["verdict"].tolist() == [
        "not checked: no runs sweep momentum, the key it is tuned over"]
    # the paper's numbers at its own lr: the effect holds wherever each side's best lr is
    numbers = artefacts._numbers("h, lr, acc\nnone, 1, 78.0\ngh, 1, 82.0\n", values, "p")
    (paper,) = artefacts._claims([{"says": "x", "value": "acc", "method": {"h": "gh"}, "versus": {"h": "none"},
                                   "effect": "paper", "tuned": "lr"}], values, "p", numbers)
    assert paper.paper_effect({}) == pytest.approx(4.0)
    with pytest.raises(Exception, match="tuned=3"):
        artefacts._claims([{"says": "x", "value": "acc", "method": {"h": "gh"}, "versus": {"h": "none"},
                            "tuned": 3}], values, "p")


def test_a_point_the_artefact_names_not_checked_is_not_counted_with_why(tmp_path):
    """A base that is another base on this model (FedDecorr on a perceptron is FedAvg) is named in the artefact's
    not_checked and left out of the verdicts with why, so one result is not counted twice."""
    from fedrun.errors import ConfigError
    from fedrun.papers import artefacts
    from fedrun.papers.claims import check

    paper = tmp_path / "p.yaml"
    entry = {"presets": ["syn", "img"], "source": "Table 1", "claims": [
        {"says": "gh helps", "method": {"h": "gh"}, "versus": {"h": "none"}}]}
    bad = {"cite": "c", "title": "t", "artefacts": {"t1": entry | {"not_checked": [{"algo": "decorr"}]}}}
    paper.write_text(yaml.safe_dump(bad))
    with pytest.raises(ConfigError, match=r"not_checked\[0\]"):
        artefacts.read_paper(paper)
    good = {"cite": "c", "title": "t", "artefacts": {"t1": entry | {"not_checked": [
        {"at": {PRESET: "syn", "algo": "decorr"}, "why": "FedDecorr is FedAvg on a perceptron"}]}}}
    paper.write_text(yaml.safe_dump(good))
    art = artefacts.read_paper(paper).artefacts["t1"]
    table = pd.DataFrame([{PRESET: p, "algo": a, "h": h, "runs": 1, "value": 80.0 + (h == "gh"), "fixture": ""}
                          for p in ("syn", "img") for a in ("avg", "decorr") for h in ("gh", "none")])
    out = check(art.claims, table, [PRESET, "algo", "h"], not_checked=art.not_checked)
    assert out["verdict"].tolist() == ["holds", "not checked: FedDecorr is FedAvg on a perceptron", "holds", "holds"]
    assert out["where"][1] == {PRESET: "syn", "algo": "decorr"}


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

