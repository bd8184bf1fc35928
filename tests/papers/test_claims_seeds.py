"""The claims' confirmatory seeds: a block (1000 and up) that the registrations reserve, run by
``fedrun-table --confirm`` and refused to every exploration (fedrun-table's --seeds and seed=, fedrun with a paper's
preset)."""

from __future__ import annotations


import pytest

from conftest import REPO, run_cli
from fedrun.papers.artefacts import (CONFIRMATORY_FROM, CONFIRMING, artefacts, confirmatory_seeds, seeds_given,
                                     tuning_seeds)
from fedrun.papers.table import main, seeds_refused


def test_an_artefacts_confirmatory_seeds_are_the_first_its_claims_need_of_the_block():
    _, controls = artefacts()["bherd_svm_controls"]  # pre-registered, 5 seed pairs
    assert confirmatory_seeds(controls) == list(range(CONFIRMATORY_FROM, CONFIRMATORY_FROM + 5))
    _, fig5a = artefacts()["bherd_fig5a"]  # claims on the means: confirmed on fresh seeds too
    assert confirmatory_seeds(fig5a) == list(range(CONFIRMATORY_FROM, CONFIRMATORY_FROM + 5))
    _, round_times = artefacts()["fsvrg_round_times"]  # a measurement without claims: nothing to confirm
    assert confirmatory_seeds(round_times) == []
    _, tuned = artefacts()["fedgh_synthetic_controls"]  # tuned over the server lr: its values picked on 0-4 first
    assert tuning_seeds(tuned) == [0, 1, 2, 3, 4] and tuning_seeds(controls) == []
    assert seeds_given(["seed=3", "fl.lr=0.1"]) == [3]
    assert seeds_given(["seed=range(998,1002)"]) == [998, 999, 1000, 1001]
    assert seeds_given(["seed=1000,1001"]) == [1000, 1001] and seeds_given(["fl.lr=1"]) == []


def test_fedrun_table_explores_below_the_block_and_confirms_only_the_registered_seeds():
    _, controls = artefacts()["bherd_svm_controls"]
    _, round_times = artefacts()["fsvrg_round_times"]
    assert seeds_refused(controls, [], 5, False) is None and seeds_refused(controls, ["seed=0,1"], None, False) is None
    assert "seeds 1000..1001 are in the confirmatory block" in seeds_refused(controls, [], 1002, False)
    assert "seeds 1003..1003 are in the confirmatory block" in seeds_refused(controls, ["seed=1003"], None, False)
    assert seeds_refused(controls, [], None, True) is None
    assert "give no --seeds and no seed=" in seeds_refused(controls, ["seed=1"], None, True)
    assert "makes no claim" in seeds_refused(round_times, [], None, True)
    with pytest.raises(SystemExit):  # said by argparse, before any work
        main(["bherd_svm_controls", "seed=1000", "--collect-only"])


def test_fedrun_refuses_a_papers_preset_on_the_block_outside_fedrun_table_confirm(tmp_path, monkeypatch):
    refused = run_cli("experiment=bherd_svm_mnist", "seed=1002", "--cfg", "job", cwd=tmp_path, check=False)
    assert refused.returncode == 2 and "seed=1002: seeds 1000 and up are the confirmatory block" in refused.stderr
    assert "fedrun-table <artefact> --confirm" in refused.stderr and "Traceback" not in refused.stderr
    assert run_cli("seed=1002", "--cfg", "job", cwd=tmp_path).returncode == 0  # no paper's preset: the user's seed
    assert run_cli("experiment=bherd_svm_mnist", "seed=7", "--cfg", "job", cwd=tmp_path).returncode == 0
    monkeypatch.setenv(CONFIRMING, "1")  # what fedrun-table --confirm gives its sweeps
    assert run_cli("experiment=bherd_svm_mnist", "seed=1002", "--cfg", "job", cwd=tmp_path).returncode == 0


def test_a_claims_page_says_whether_its_seeds_were_the_registered_fresh_ones():
    from conftest import load_script

    index = load_script("claims_index")
    _, controls = artefacts()["bherd_svm_controls"]
    explored = index.seeds_said("Mean ± std over seeds [0, 1, 2, 3, 4] of the final test accuracy", controls)
    assert explored.startswith("Seeds: [0, 1, 2, 3, 4], below the confirmatory block (1000 and up)")
    assert "may have been seen before the claims were registered" in explored and "1000-1004" in explored
    fresh = index.seeds_said("Mean ± std over seeds [1000, 1001, 1002, 1003, 1004] of x", controls)
    assert fresh.startswith("Seeds: [1000, 1001, 1002, 1003, 1004], the registered confirmatory ones")


def test_a_tuned_claim_picks_its_values_on_the_tuning_seeds_and_is_tested_on_the_confirmatory_ones():
    """FedGH against its base, each at its best server lr: on the tuning seeds (0-4) FedGH is best at lr 1 and the
    base at lr 2; on the confirmatory seeds (1000-1004) FedGH at lr 2 would look best, but the values were picked
    before them. The pairs are the five confirmatory seeds, at lr 1 against lr 2; without confirmatory seeds the
    values are picked on the means over all seeds, as before."""
    import pandas as pd

    from fedrun.papers.artefacts import Claim
    from fedrun.papers.claims import check

    claim = Claim("gh helps", "acc", "algo/harmonizer", ("fedgh",), ("none",), effect=1.0, tuned="lr")
    acc = {("fedgh", "1", "tune"): 82.0, ("fedgh", "2", "tune"): 80.0, ("none", "1", "tune"): 79.0,
           ("none", "2", "tune"): 80.0, ("fedgh", "1", "test"): 82.0, ("fedgh", "2", "test"): 86.0,
           ("none", "1", "test"): 79.0, ("none", "2", "test"): 80.0}
    runs = pd.DataFrame([{"algo/harmonizer": side, "lr": lr, "seed": seed, "status": "finished",
                          "acc": acc[(side, lr, "test" if seed >= CONFIRMATORY_FROM else "tune")] + 0.01 * (seed % 7)}
                         for side in ("fedgh", "none") for lr in ("1", "2")
                         for seed in [*range(5), *range(CONFIRMATORY_FROM, CONFIRMATORY_FROM + 5)]])
    table = runs.groupby(["algo/harmonizer", "lr"])["acc"].mean().reset_index().assign(runs=10, fixture="")
    row = check((claim,), table, ["algo/harmonizer", "lr"], runs=runs).iloc[0]
    assert row["tuned"].startswith("lr: fedgh 1 (the grid's end), none 2") and row["pairs"] == 5
    assert row["difference"] == pytest.approx(2.0)  # 82 against 80 on the confirmatory seeds
    explored = runs[runs["seed"] < CONFIRMATORY_FROM]
    plain = check((claim,), explored.groupby(["algo/harmonizer", "lr"])["acc"].mean().reset_index().assign(
        runs=5, fixture=""), ["algo/harmonizer", "lr"], runs=explored).iloc[0]
    assert plain["tuned"].startswith("lr: fedgh 1 (the grid's end), none 2") and plain["pairs"] == 5
    mixed = check((claim,), table, ["algo/harmonizer", "lr"], runs=runs.assign(seed=runs["seed"] % 1000 + 10 *
                                                                               (runs["seed"] >= 1000))).iloc[0]
    assert mixed["tuned"].startswith("lr: fedgh 2")  # no confirmatory block: picked on the means over all seeds


def test_a_claims_page_says_when_each_claim_was_registered():
    """From git: the first commit whose paper file holds the claim's words, with its date."""
    import re

    from conftest import load_script

    index = load_script("claims_index")
    _, controls = artefacts()["bherd_svm_controls"]
    said = index.registered("bherd", controls.claims[0].says)
    assert re.fullmatch(r"Registered at commit [0-9a-f]{7,} on \d{4}-\d\d-\d\d\.", said) or \
        said == "Registered: not known here.", said  # a copy without git's history
    assert index.registered("bherd", "a claim no commit ever held") == "Registered: not known here."


def test_fedrun_table_confirm_runs_the_tuning_and_confirmatory_seeds_and_lets_its_sweeps_run_them(monkeypatch):
    """--confirm (here with --estimate, which runs nothing but the probes, replaced) gives the sweeps the registered
    seeds, the tuning ones first for a tuned artefact, and marks its process so that fedrun lets them run."""
    import fedrun.papers.table as table

    monkeypatch.setenv(CONFIRMING, "0")  # put back after the test: main marks its own process
    asked = {}
    monkeypatch.setattr(table, "print_estimate", lambda artefact, overrides, command: asked.update(
        {artefact.name: [o for o in overrides if o.startswith("seed=")]}) or 0)
    assert main(["bherd_svm_controls", "--confirm", "--estimate"]) == 0
    assert asked["bherd_svm_controls"] == ["seed=1000,1001,1002,1003,1004"]
    import os

    assert os.environ[CONFIRMING] == "1"
    assert main(["fedgh_synthetic_controls", "--confirm", "--estimate"]) == 0
    assert asked["fedgh_synthetic_controls"] == ["seed=0,1,2,3,4,1000,1001,1002,1003,1004"]


def test_the_command_lines_check_reads_no_paper_unless_a_seed_of_the_block_is_named(monkeypatch):
    """fedrun's start-up stays free of the papers (and pandas) for every command that names no seed of 1000 and up:
    with the papers' module made unimportable, those commands pass the check, and one naming the block fails it."""
    import sys

    from fedrun.cli import confirmatory_block

    monkeypatch.setitem(sys.modules, "fedrun.papers.artefacts", None)  # importing it now raises
    for args in (["seed=3"], ["-m", "seed=range(5)", "experiment=bherd_svm_mnist"], ["fl.rounds=1000"], []):
        assert confirmatory_block(args) is None, args
    with pytest.raises(ImportError):
        confirmatory_block(["seed=range(998,1003)", "experiment=bherd_svm_mnist"])


def test_a_claims_page_names_the_seeds_exploration_used_on_its_artefact():
    """BHerd Table II's presets were in a 10-seed table before the claims were registered (issue #79): the page says
    so from the table's history, and the paper's exploration.md's search beside it."""
    from conftest import load_script

    index = load_script("claims_index")
    assert index.seed_ranges([4, 0, 1, 2, 9, 1]) == "0-2, 4, 9"
    results = REPO / "results"
    said = index.explored("bherd", "bherd_table2", results / "bherd")
    assert said.startswith("Exploration: its committed tables (git's history of `results/bherd/bherd_table2.md`) used "
                           "seeds 0-9;") and "bherd_claims.py --seeds 10" in said
    never = index.explored("dgt", "an_artefact_never_tabled", results / "dgt")
    assert never.startswith("Exploration: no committed table of it was made before")
