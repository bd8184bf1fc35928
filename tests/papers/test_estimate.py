"""fedrun-table --estimate: how long an artefact's sweep would take here, from 3 rounds of each preset's first job,
before its hours are spent."""

from __future__ import annotations

import math
import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from fedrun.data import DATASETS
from fedrun.errors import FedrunError
from fedrun.papers.artefacts import artefacts
from fedrun.papers.estimate import estimate, markdown, timed
from fedrun.papers.table import main
from conftest import REPO


def present(monkeypatch, **here):
    for name, is_here in here.items():
        monkeypatch.setitem(DATASETS, name, replace(DATASETS[name], is_present=lambda root, h=is_here: h))


def test_a_sweep_is_its_jobs_each_a_fixed_cost_and_its_rounds_probed_on_the_first_grid_point(monkeypatch):
    """A probe whose rounds end at 5, 8 and 11 s of its run, in a process of 14 s: a round costs 3 s, and a job 5 s
    besides (3 s outside the rounds, 2 s of the first round's warm-up), so a 300-round job is 905 s and DGT's FedAvg
    pair over 5 seeds (10 jobs) 9050 s; a preset whose data is absent is not probed. Under a simulated-time budget a
    run has as many rounds as the budget holds: 2 hours at 300 simulated seconds a round are 24 rounds."""
    present(monkeypatch, mnist=True, cifar10=False)
    ran = []

    def fake(command):
        ran.append(command)
        folder = Path(next(a for a in command if a.startswith("hydra.run.dir=")).split("=", 1)[1])
        folder.mkdir(parents=True)
        (folder / "metrics.csv").write_text("round,test_acc,elapsed_s,sim_time_s\n1,0.1,5.0,290\n2,0.2,8.0,590\n"
                                            "3,0.3,11.0,890\n")
        return 14.0

    _, dgt = artefacts()["dgt_fig5"]
    dgt = replace(dgt, presets=("dgt_fig5_mnist", "dgt_fig5_cifar10"))
    mnist, cifar = estimate(dgt, ["algo=fedavg", "seed=0,1,2,3,4"], fake)
    assert (mnist.jobs, mnist.rounds, mnist.round_s, mnist.fixed_s, mnist.budget) == (10, 300, 3.0, 5.0, False)
    assert (mnist.job_s, mnist.total_s) == (905.0, 9050.0)
    assert cifar.absent == "cifar10" and len(ran) == 1, "the absent dataset's preset is not probed"
    (command,) = ran
    assert command[3] == "experiment=dgt_fig5_mnist" and not any("seed=0,1" in a for a in command)
    assert {"algo=fedavg", "algo/harmonizer=dgt", "seed=0", "fl.rounds=3", "eval.every=1"} <= set(command)
    table = markdown(dgt, [mnist, cifar], "a CPU", "fedrun-table dgt_fig5 --estimate")
    assert "| dgt_fig5_mnist | 10 | 300 | 3.00 | 5.0 | 15 min | 2.5 h | " in table
    assert set(mnist.probed.split(", ")) == {"algo=fedavg", "algo/harmonizer=dgt", "seed=0"}
    assert "| dgt_fig5_cifar10 | 10 | 300 | – | – | – | – (cifar10 is not here) | | |" in table
    assert "In all: 2.5 h" in table

    _, fig6 = artefacts()["gift_fig6"]  # a 2-hour simulated budget ends its runs, not its fl.rounds (100,000)
    (gift,) = estimate(replace(fig6, presets=("gift_fig6_lenet5_mnist",)), ["seed=0"], fake)
    assert (gift.budget, gift.jobs, gift.rounds, gift.job_s) == (True, 3, 24, 5.0 + 24 * 3.0)
    assert "| gift_fig6_lenet5_mnist | 3 | 24 (its budget's) | 3.00 | 5.0 | 77 s | 4 min |" in markdown(
        fig6, [gift], "a CPU", "x")


def test_a_failing_probe_stops_the_estimate_with_its_last_words():
    with pytest.raises(FedrunError, match="the probe .* failed:\nno such preset"):
        timed([sys.executable, "-c", "import sys; sys.exit('no such preset')", "experiment=x"])


def test_fedrun_table_estimate_probes_each_preset_and_runs_nothing_else(tmp_path, monkeypatch, capsys):
    """A real probe of BHerd's Fig. 5a (SVM on MNIST): a round's cost above zero, 10 jobs of 100 rounds, nothing left
    in the working folder; a measured artefact has no rounds to estimate."""
    monkeypatch.chdir(tmp_path)
    assert main(["bherd_fig5a", "--estimate"]) == 0
    said = capsys.readouterr()
    row = next(line for line in said.out.splitlines() if line.startswith("| bherd_fig5a |"))
    jobs, rounds, round_s, fixed_s = row.split(" | ")[1:5]
    assert (jobs, rounds) == ("10", "100") and float(round_s) > 0 and float(fixed_s) > 0
    assert 0 <= float(row.split(" | ")[-1].rstrip(" |")) <= os.cpu_count()  # others' busy cores, measured
    progress = [line for line in said.err.splitlines() if line.startswith("fedrun-table: prob")]
    assert progress[0].startswith("fedrun-table: probing bherd_fig5a (1 of 1): 3 rounds of ")
    assert progress[1].startswith("fedrun-table: probed bherd_fig5a in ")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(SystemExit):
        main(["fsvrg_table1", "--estimate"])


def test_the_too_long_presets_of_every_paper_are_estimated_into_the_file_their_reasons_cite(tmp_path, monkeypatch):
    """scripts/claims/too_long_estimates.py: an artefact's presets whose not_run starts "too long here:" (not the ones
    whose data is missing), with the seeds its claims need, estimated into results/<paper>/<artefact>-estimate.md."""
    import subprocess

    from conftest import load_script

    script = load_script("too_long_estimates")
    _, dgt = artefacts()["dgt_fig5"]
    fake = replace(dgt, not_run={"dgt_fig5_mnist": "too long here: hours", "dgt_fig5_cifar10": "no CIFAR-10"},
                   claims=tuple(replace(c, seeds=7) for c in dgt.claims))
    paper = type("Paper", (), {"artefacts": {"dgt_fig5": fake}})
    monkeypatch.setattr(script, "papers", lambda: {"dgt": paper})
    assert script.too_long() == [("dgt", "dgt_fig5", ["dgt_fig5_mnist"], 7)]
    ran = []
    monkeypatch.setattr(script.subprocess, "run", lambda command, **kw: ran.append(command) or
                        subprocess.CompletedProcess(command, 0, "# dgt_fig5: how long\n", ""))
    assert script.main(["--results", str(tmp_path)]) == 0
    assert ran[0][3:] == ["dgt_fig5", "--presets", "dgt_fig5_mnist", "--seeds", "7", "--estimate"]
    assert (tmp_path / "dgt" / "dgt_fig5-estimate.md").read_text() == "# dgt_fig5: how long\n"


def test_every_too_long_reason_cites_its_artefacts_committed_estimate():
    """A "too long here:" reason in paper/*.yaml gives hours that results/<paper>/<artefact>-estimate.md (made by
    scripts/claims/too_long_estimates.py) shows, and names that file, so the figure can be checked and made again."""
    from fedrun.papers.artefacts import papers

    root = REPO
    for key, paper in papers().items():
        for artefact in paper.artefacts.values():
            for preset, why in artefact.not_run.items():
                if why.startswith("too long here:"):
                    cited = f"results/{key}/{artefact.name}-estimate.md"
                    assert cited in why, f"{preset}: {why}"
                    assert f"| {preset} |" in (root / cited).read_text(), f"{cited} has no row for {preset}"


def test_a_probe_beside_a_busy_process_is_warned_about_and_its_load_recorded(monkeypatch):
    """Other processes' busy cores while a probe runs: the machine's busy CPU time less the probe's own, over the
    probe's wall time; above BUSY_CORES the estimate says it is a busy machine's."""
    from fedrun.papers import estimate as module

    assert module.others_busy_cores((0.0, 100.0, 5.0), (10.0, 125.0, 20.0)) == 1.0  # 25 s busy, 15 s the probe's
    assert module.others_busy_cores((0.0, 100.0, 5.0), (10.0, 110.0, 15.0)) == 0.0
    assert math.isnan(module.others_busy_cores(None, (10.0, 110.0, 15.0)))
    present(monkeypatch, mnist=True)
    readings = iter([(0.0, 100.0, 0.0), (10.0, 125.0, 10.0)])  # 1.5 other cores busy
    monkeypatch.setattr(module, "cpu_seconds", lambda: next(readings))

    def fake(command):
        folder = Path(next(a for a in command if a.startswith("hydra.run.dir=")).split("=", 1)[1])
        folder.mkdir(parents=True)
        (folder / "metrics.csv").write_text("round,test_acc,elapsed_s\n1,0.1,5.0\n2,0.2,8.0\n3,0.3,11.0\n")
        return 14.0

    _, dgt = artefacts()["dgt_fig5"]
    said = []
    (found,) = estimate(replace(dgt, presets=("dgt_fig5_mnist",)), ["algo=fedavg"], fake, say=said.append)
    assert found.busy == 1.5 and any(line.startswith("warning: other processes kept 1.5 of") for line in said)
    assert markdown(dgt, [found], "a CPU", "x").count(" | 1.5 |") == 1
