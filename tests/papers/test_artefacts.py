"""The papers as data (paper/*.yaml): every artefact composes, its grid holds the paper's cells, its presets pass
fedrun's checks, and a bad file is refused naming what is wrong."""

import math
import re

import pytest
import yaml

from fedrun.papers.artefacts import PRESET, artefacts, normalise
from fedrun.papers.artefacts import grid, preset_config
from fedrun.papers.table import main
from table_cases import _sweeps_in_this_process  # noqa: F401  (an autouse fixture)
from conftest import REPO


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


def test_the_listing_reads_each_presets_grid_and_data_as_hydra_composes_them():
    """``--list`` reads the presets' YAML (a second for every artefact, where composing each took most of a minute):
    what it reads is what Hydra composes, for every preset of every artefact."""
    from fedrun.papers.artefacts import outline

    presets = {p for _, a in artefacts().values() for p in a.presets}
    assert len(presets) > 20
    for preset in sorted(presets):
        assert outline(preset) == (grid(preset), preset_config(preset).data.name), preset


def test_list_names_every_artefact_with_its_jobs_per_seed(capsys):
    assert main(["--list"]) == 0
    out = capsys.readouterr().out
    for name, (presets, jobs) in EXPECTED.items():
        assert re.search(rf"\| {name} \| [^|]+ \| [^|]+ \| {jobs}( \(the runs of \w+\))? \|", out), name
    assert "| fedgh_table3 | Zhang et al. (FedGH) | Table III | 72 (the runs of fedgh_table2) |" in out


def test_every_reading_of_an_open_point_composes_over_its_preset_and_changes_what_it_names():
    from omegaconf import OmegaConf

    from fedrun.config.compose import compose_config

    readings = sorted(p.stem for p in (REPO / "conf" / "reading").glob("*.yaml"))
    assert readings == sorted(grid("fsvrg_open_mnist")["reading"])  # the artefact sweeps every one
    plain = OmegaConf.to_container(compose_config(["experiment=fsvrg_open_mnist", "reading=fsvrg_as_printed"]))
    assert plain == OmegaConf.to_container(compose_config(["experiment=fsvrg_open_mnist"]))
    for name in readings:
        given = yaml.safe_load((REPO / "conf" / "reading" / f"{name}.yaml").read_text()) or {}
        cfg = OmegaConf.to_container(compose_config(["experiment=fsvrg_open_mnist", f"reading={name}"]))

        def leaves(tree, prefix=""):
            return [(prefix + k, v) for k, v in tree.items() if not isinstance(v, dict)] + [
                x for k, v in tree.items() if isinstance(v, dict) for x in leaves(v, prefix + k + ".")]

        for key, value in leaves(given):  # each setting the reading names is what the run gets
            node = cfg
            for part in key.split("."):
                node = node[part]
            assert node == value, (name, key)
