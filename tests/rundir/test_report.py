import json
import os
from pathlib import Path

import pandas as pd
import pytest
import yaml

from fedrun.engine.run.experiment import run_experiment
from fedrun.rundir.report import main as report_main, zoom


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


def test_curves_that_end_on_a_plateau_get_their_second_half_magnified():
    """Accuracy that rises from 0.1 to about 0.98 and stays there: the inset spans the second half of the rounds and
    the curves' values there, a tenth to spare; curves still far apart at the end (or a falling loss still falling)
    get none."""
    rounds = pd.Index(range(0, 101), name="round")
    rising = pd.Series([0.1 + 0.88 * (1 - 0.9 ** r) for r in rounds], index=rounds)
    close = rising - 0.004
    x0, x1, y0, y1 = zoom([rising, close])
    tail = pd.concat([rising[50:], close[50:]])
    pad = (tail.max() - tail.min()) / 10
    assert (x0, x1) == (50.0, 100.0)
    assert y0 == pytest.approx(tail.min() - pad) and y1 == pytest.approx(tail.max() + pad)
    assert zoom([rising, 0.6 * rising]) is None  # 0.59 against 0.98: the full scale shows the gap
    assert zoom([pd.Series([2.0 - r / 50 for r in rounds], index=rounds)]) is None  # a straight line: no plateau
    flat = pd.Series(0.5, index=rounds)
    assert zoom([flat]) is None  # nothing varies: nothing to magnify


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
    ran = [r for r in rows if r[1] == "digits"]
    assert all(r[header.index("runs")] == "1" for r in rows), "integer counts"
    assert all(r[header.index("finished")] == r[header.index("seeds")] == ("1" if r in ran else "0") for r in rows)
    assert all(r[header.index("final_test_acc_std")] == "–" for r in rows), "one seed: no std, a dash"
    failed = [line for line in failures.splitlines() if "| failed |" in line]
    assert len(failed) == 3 and all("cifar10" in line and line.count("|") == 4 for line in failed)


def test_report_says_how_each_unfinished_run_ended(tmp_path):
    """Each run that did not finish, with how it ended and what to do: an interrupted or killed run with the whole
    command that continues it (its own overrides, its folder, resume=true); which of them the means leave out."""
    import json

    import pandas as pd

    from fedrun.rundir.report import unfinished

    for name in "abcdef":
        (tmp_path / name).mkdir()
    for name in "bf":
        (tmp_path / name / ".hydra").mkdir()
        (tmp_path / name / ".hydra" / "overrides.yaml").write_text("- algo=fedprox\n- resume=true\n- fl.rounds=20\n")
        (tmp_path / name / "checkpoint_0000007.pt").write_bytes(b"")
    df = pd.DataFrame([
        {"run_dir": "a", "status": "finished", "error": None, "diverged_round": None, "rounds_completed": 10},
        {"run_dir": "b", "status": "interrupted", "error": None, "diverged_round": None, "rounds_completed": 7},
        {"run_dir": "c", "status": "diverged", "error": None, "diverged_round": 3, "rounds_completed": 3},
        {"run_dir": "d", "status": "missing", "error": None, "diverged_round": None, "rounds_completed": None},
        {"run_dir": "e", "status": "failed", "error": "ValueError: bad", "diverged_round": None,
         "rounds_completed": None},
        {"run_dir": "f", "status": "running", "error": None, "diverged_round": None, "rounds_completed": None},
    ]).assign(run_dir=lambda d: [str(tmp_path / n) for n in d["run_dir"]])
    text = unfinished(df)
    assert "5 of 6 runs did not finish (4 left out of the means)" in text
    lines = {Path(line.split("|")[1].strip()).name: line for line in text.splitlines()
             if line.startswith("| ") and "run |" not in line}
    for name in "bf":
        assert f"`fedrun algo=fedprox fl.rounds=20 hydra.run.dir={tmp_path / name} resume=true`" in lines[name]
    assert "after round 7" in lines["b"] and "killed" in lines["f"]
    assert "diverged at round 3 (counted in the means)" in lines["c"] and "killed before" in lines["d"]
    assert lines["e"].split("|")[3].strip() == "ValueError: bad"
    assert json.dumps(sorted(lines)) == json.dumps(["b", "c", "d", "e", "f"])


def test_report_groups_only_on_settings_that_change_results_and_averages_complete_runs(tmp_path, capsys):
    """Runs that differ in how they ran (resume, hardware.num_threads, the logger) form one group; a setting that
    changes results (hardware.dtype) splits them. Interrupted and failed runs stay out of the means (listed under
    the table), and each row says how many runs it has and how many finished."""
    def fake(name, status, acc, **settings):
        run = tmp_path / "runs" / name
        run.mkdir(parents=True)
        config = {"seed": int(name[-1]), "algo": {"name": "fedavg"}, "fl": {"rounds": 10},
                  "resume": False, "logger": {"name": "csv"}, "hardware": {"num_threads": None, "dtype": "float32"}}
        for key, value in settings.items():
            section, leaf = key.split("__")
            config[section][leaf] = value
        (run / "config.yaml").write_text(yaml.safe_dump(config))
        (run / "summary.json").write_text(json.dumps({"status": status, "method": "fedavg", "final_test_acc": acc,
                                                      "best_test_acc": acc, "wall_time_s": 1.0}))

    fake("a0", "finished", 0.90)
    fake("a1", "finished", 0.80, hardware__num_threads=2, logger__name="wandb")
    (tmp_path / "runs" / "a1" / "config.yaml").write_text((tmp_path / "runs" / "a1" / "config.yaml").read_text()
                                                          .replace("resume: false", "resume: true"))
    fake("a2", "interrupted", 0.10)
    fake("a3", "failed", None)
    fake("b4", "finished", 0.70, hardware__dtype="float64")
    assert report_main([str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert "grouped by ['hardware.dtype']" in out
    header, *rows = [[c.strip() for c in line.split("|")[1:-1]] for line in out.splitlines()
                     if line.startswith("| ") and "float" in line or line.startswith("| hardware.dtype")]
    float32 = dict(zip(header, next(r for r in rows if r[0] == "float32")))
    assert (float32["runs"], float32["finished"], float32["seeds"]) == ("4", "2", "2")
    assert float(float32["final_test_acc_mean"]) == pytest.approx(0.85)
    assert "2 of 5 runs did not finish (2 left out of the means)" in out


def test_more_rounds_extend_a_finished_run_only_when_resuming(tmp_path):
    """A sweep job whose folder holds a finished run with fewer rounds and nothing else different: with resume=true
    the run is extended from its last round; without it the refusal says so; a diverged run is complete at any
    length (fedrun.rundir.files.finished_summary, what a sweep asks before each job)."""
    from fedrun.config.compose import compose_config
    from fedrun.errors import StaleRunError
    from fedrun.rundir.files import finished_summary

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


def test_curves_average_the_complete_runs_and_draw_each_unfinished_run_on_its_own(tmp_path):
    """A group of two finished runs, a diverged one and one stopped at round 3 of 6: the mean and std at each round
    are those of the three complete runs (the diverged one held at its last value, as the table counts it), the
    stopped run comes back on its own; a group with no complete run has no mean (curve_groups, what plot_curves
    draws)."""
    from fedrun.rundir.report import curve_groups, plot_curves

    rounds = list(range(1, 7))
    runs = {"a0": ("finished", [0.1 * r for r in rounds]), "a1": ("finished", [0.1 * r + 0.04 for r in rounds]),
            "a2": ("diverged", [0.2, 0.1]), "a3": ("interrupted", [0.5, 0.6, 0.7]),
            "b0": ("running", [0.3, 0.35])}
    logs, rows = {}, []
    for name, (status, acc) in runs.items():
        run = tmp_path / name
        run.mkdir()
        pd.DataFrame({"round": rounds[:len(acc)], "test_acc": acc}).to_csv(run / "metrics.csv", index=False)
        logs[str(run)] = pd.read_csv(run / "metrics.csv")
        rows.append({"run_dir": str(run), "status": status, "group": name[0]})
    df = pd.DataFrame(rows)
    a, b = curve_groups(df, ["group"], "test_acc", logs)
    held = [0.2, 0.1, 0.1, 0.1, 0.1, 0.1]
    for i, r in enumerate(rounds):
        values = [0.1 * r, 0.1 * r + 0.04, held[i]]
        assert a.mean[r] == pytest.approx(sum(values) / 3)
        assert a.std[r] == pytest.approx(pd.Series(values).std())
    assert (a.label, a.complete) == ("group=a", 3)
    assert len(a.unfinished) == 1 and list(a.unfinished[0].values) == [0.5, 0.6, 0.7]
    assert (b.label, b.complete, b.mean) == ("group=b", 0, None) and list(b.unfinished[0].index) == [1, 2]
    plot_curves(df, ["group"], tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 1000


def test_a_groups_colour_is_the_same_in_every_panel(tmp_path, monkeypatch):
    """Only GIFT logs its consistency: its panel draws GIFT alone, in GIFT's colour of the accuracy panel, not in the
    first colour of the cycle."""
    import matplotlib.figure

    from fedrun.rundir.report import plot_curves

    figures = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda self, *a, **k: figures.append(self))
    rows = []
    for name, columns in (("fixed", {}), ("gift", {"gift_C": [0.6, 0.4]})):
        run = tmp_path / name
        run.mkdir()
        pd.DataFrame({"round": [1, 2], "test_acc": [0.5, 0.6], **columns}).to_csv(run / "metrics.csv", index=False)
        rows.append({"run_dir": str(run), "status": "finished", "schedule": name})
    plot_curves(pd.DataFrame(rows), ["schedule"], tmp_path / "curves.png", metrics=("test_acc", "gift_C"))
    accuracy, consistency = figures[0].axes[:2]
    colour = {line.get_label().split(" ")[0]: line.get_color() for line in accuracy.lines}
    assert colour["schedule=fixed"] != colour["schedule=gift"]
    assert [line.get_color() for line in consistency.lines] == [colour["schedule=gift"]]


def test_a_running_run_says_how_far_it_is_and_how_long_it_has_left(tmp_path):
    """A running run's row under a report: its last round of those planned and the time left at the pace of its
    latest rounds (a resumption's clock restart ignored); silent for far longer than a round takes, probably killed."""
    from fedrun.rundir.progress import progress

    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"fl": {"rounds": 100}}))
    elapsed = [5.0 + 2.0 * i for i in range(6)] + [3.0 + 2.0 * i for i in range(6)]  # resumed after round 6
    pd.DataFrame({"round": range(1, 13), "test_acc": 0.5, "elapsed_s": elapsed}).to_csv(tmp_path / "metrics.csv",
                                                                                       index=False)
    written = (tmp_path / "metrics.csv").stat().st_mtime
    assert progress(tmp_path, now=written + 1) == "running: round 12 of 100, about 3 min left at 2 s a round"
    assert progress(tmp_path, now=written + 3600) == "round 12 of 100, then nothing logged for 60 min: probably killed"
    os.remove(tmp_path / "metrics.csv")
    assert progress(tmp_path) == "still running, or killed"


def test_a_sweep_in_progress_says_what_is_done_and_roughly_how_long_is_left(tmp_path):
    """Six jobs: two complete (100 s each), one failed, one running (round 10 of 100 at 2 s a round, 20 s so far), one
    silent for an hour (its process gone: to start again). The running one takes as long as the complete ones of its
    grid point (80 s left, not the 180 s its pace says: a run's pace can change as it goes, as GIFT's does), and the
    two to start 100 s each: 280 s, one at a time."""
    from fedrun.rundir.sweeps import sweep_progress

    def job(name, status, **summary):
        run = tmp_path / name
        run.mkdir()
        (run / "config.yaml").write_text(yaml.safe_dump({"fl": {"rounds": 100}}))
        (run / "summary.json").write_text(json.dumps({"status": status, **summary}))
        return run

    job("a", "finished", wall_time_s=100.0)
    job("b", "diverged", total_wall_time_s=100.0, wall_time_s=40.0)
    job("c", "failed")
    for name in "de":
        pd.DataFrame({"round": range(1, 11), "elapsed_s": [2.0 * r for r in range(1, 11)]}).to_csv(
            job(name, "running") / "metrics.csv", index=False)
    now = (tmp_path / "d" / "metrics.csv").stat().st_mtime + 1
    os.utime(tmp_path / "e" / "metrics.csv", (now - 3600, now - 3600))
    assert sweep_progress(tmp_path, {"seed": [str(s) for s in range(6)]}, now=now) == (
        "2 of 6 runs complete, 1 failed, 1 running (round 10/100), 2 to start; roughly 5 min left at 1 at a time")
    assert sweep_progress(tmp_path / "not yet", {"seed": ["0", "1", "2"]}) == "0 of 3 runs complete, 3 to start"


def test_a_sweeps_runs_to_start_take_as_long_as_the_other_seeds_of_their_grid_point(tmp_path):
    """Schedule a: two seeds complete in 60 s each, one to start (60 s). Schedule b: one running at round 10 of 100
    (20 s so far, 2 s a round: 200 s in all), two to start (200 s each). 180 + 60 + 400 = 640 s, one at a time, where
    the mean of every run so far would say 180 + 3 x 107 = 500 s."""
    from fedrun.rundir.sweeps import sweep_progress

    def job(schedule, seed, status, **summary):
        run = tmp_path / f"schedule={schedule},seed={seed}"
        (run / ".hydra").mkdir(parents=True)
        (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"algo/schedule={schedule}", "progress=False",
                                                                       f"seed={seed}"]))
        (run / "config.yaml").write_text(yaml.safe_dump({"fl": {"rounds": 100}}))
        (run / "summary.json").write_text(json.dumps({"status": status, **summary}))
        return run

    job("a", 0, "finished", wall_time_s=60.0)
    job("a", 1, "finished", wall_time_s=60.0)
    running = job("b", 0, "running") / "metrics.csv"
    pd.DataFrame({"round": range(1, 11), "elapsed_s": [2.0 * r for r in range(1, 11)]}).to_csv(running, index=False)
    grid = {"algo/schedule": ["a", "b"], "progress": ["false"], "seed": ["0", "1", "2"]}
    assert sweep_progress(tmp_path, grid, now=running.stat().st_mtime + 1) == (
        "2 of 6 runs complete, 1 running (round 10/100), 3 to start; roughly 11 min left at 1 at a time")


def test_a_sweeps_jobs_are_counted_from_what_hydra_recorded_and_the_report_says_where_it_is(tmp_path, capsys):
    """A basic sweeper's jobs: its preset's params times the command line's sweeps (range() included, a command-line
    value of a params key replacing its sweep); none known for another sweeper. fedrun-report on the sweep's folder
    says where it is."""
    from fedrun.rundir.sweeps import planned_grid

    def recorded(folder, params, task, sweeper="hydra._internal.core_plugins.basic_sweeper.BasicSweeper"):
        folder.mkdir(parents=True)
        (folder / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {
            "sweeper": {"_target_": sweeper, "params": params}, "overrides": {"hydra": [], "task": task}}}))
        return folder

    sweep = recorded(tmp_path / "s", {"algo/schedule": "fixed_tau100,gift"},
                     ["experiment=e", "seed=range(5)", "fl.lr=0.1,0.01,0.001", "progress=false"])
    assert planned_grid(sweep) == {"algo/schedule": ["fixed_tau100", "gift"], "experiment": ["e"],
                                   "seed": ["0", "1", "2", "3", "4"], "fl.lr": ["0.1", "0.01", "0.001"],
                                   "progress": ["false"]}
    assert planned_grid(recorded(tmp_path / "t", {"algo/schedule": "a,b"}, ["algo/schedule=a", "seed=0,1"])) == {
        "algo/schedule": ["a"], "seed": ["0", "1"]}
    assert planned_grid(recorded(tmp_path / "o", {}, ["seed=0,1"], sweeper="hydra_plugins.optuna.OptunaSweeper")) \
        is None
    assert planned_grid(tmp_path) is None
    run = sweep / "algo" / "schedule=gift,seed=0"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"seed": 0, "fl": {"rounds": 2}}))
    (run / "summary.json").write_text(json.dumps({"status": "finished", "final_test_acc": 0.5, "wall_time_s": 60}))
    assert report_main([str(sweep)]) == 0
    assert f"{sweep}: 1 of 30 runs complete, 29 to start" in capsys.readouterr().out


def test_a_derived_key_is_no_second_group_a_resumed_run_is_timed_whole_and_an_interrupted_one_is_not_to_start(
        tmp_path, capsys):
    """Two runs that differ in algo.step_selector.reshuffle, whose fl.reshuffle follows it (an interpolation): one
    grouping key, the one their command lines set where they set one. A resumed run's time is all its processes'
    (total_wall_time_s 100 s, its last process 40 s). A checkpointed, interrupted job of a sweep is said as such, not
    counted as still to start."""
    from fedrun.rundir.report import load_runs, varying_keys
    from fedrun.rundir.sweeps import sweep_progress

    def run(name, reshuffle, status="finished", set_by=None, **summary):
        folder = tmp_path / name
        (folder / ".hydra").mkdir(parents=True)
        (folder / "config.yaml").write_text(yaml.safe_dump({"seed": 0, "fl": {"rounds": 2, "reshuffle": reshuffle},
                                                            "algo": {"step_selector": {"reshuffle": reshuffle}}}))
        (folder / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"{set_by}={reshuffle}"] if set_by else []))
        (folder / "summary.json").write_text(json.dumps({"status": status, "final_test_acc": 0.5, **summary}))
        return folder

    plain = [run("a", True, wall_time_s=30.0), run("b", False, total_wall_time_s=100.0, wall_time_s=40.0)]
    df = load_runs(plain)
    assert varying_keys(df) == ["algo.step_selector.reshuffle"]  # the first of the two (config order), not both
    assert list(df["wall_time_s"]) == [30.0, 100.0]
    named = [run("c", True, set_by="fl.reshuffle"), run("d", False, set_by="fl.reshuffle")]
    assert varying_keys(load_runs(named)) == ["fl.reshuffle"]  # the one the command lines set

    run("e", True, status="interrupted", rounds_completed=1)
    assert sweep_progress(tmp_path, {"seed": [str(s) for s in range(7)]}) == (
        "4 of 7 runs complete, 1 interrupted (checkpointed: resume=true continues it), 2 to start")
