"""Bad values are refused before any work, with the key, the allowed range and a fix."""

import pytest

from fedrun.config.checks import validate
from fedrun.engine.run.simulation import Simulation
from fedrun.errors import ConfigError


@pytest.mark.parametrize("overrides,expected", [
    (["partition.alpha=0"], ["partition.alpha=0", "must be > 0", "Fix: partition.alpha=0.5"]),
    (["partition=dirichlet_resample", "partition.alpha=-2"], ["partition.alpha=-2", "must be > 0"]),
    (["fl.clients_per_round=11"], ["fl.clients_per_round=11", "[1, fl.num_clients=10]"]),
    (["fl.local_epochs=0"], ["fl.local_epochs=0", "must be > 0"]),
    (["fl.local_epochs=-0.5"], ["fl.local_epochs=-0.5"]),
    (["model=vgg16", "data=mnist"], ["model=vgg16 needs images of at least 32x32", "data=mnist", "models that fit"]),
    (["model=gru", "data=digits"], ["model=gru takes tokens/sequence inputs", "image"]),
    (["model=lstm", "data=leaf_shakespeare", "partition=natural"], ["model.vocab_size=None", "model.vocab_size=80"]),
    (["fl.batch_size=0"], ["fl.batch_size=0", "integer >= 1"]),
    (["data.normalize=zscore"], ["data.normalize='zscore'", "standardize", "Fix: data.normalize=standardize"]),
    (["model=svm", "model.init=xavier"], ["model.init='xavier'", "default or zeros"]),
    (["fl.lr=0"], ["fl.lr=0", "must be > 0"]),
    (["eval.target_acc=95"], ["eval.target_acc=95", "(0, 1]"]),
    (["partition=classes", "partition.classes_per_client=11"], ["partition.classes_per_client=11", "[1, 10]"]),
    (["partition=natural"], ["partition=natural", "has no users"]),
    (["hardware.executor=threads"], ["hardware.executor='threads'"]),
    (["eval.test_subset=0"], ["eval.test_subset=0", "null (the whole test set) or an integer >= 1"]),
    (["eval.holdout=1.5"], ["eval.holdout=1.5", "[0, 1)"]),
    (["partition=case2", "partition.split=halves"], ["partition.split='halves'", "samples", "labels"]),
    (["algo=bherd", "algo.step_selector.alpha=-1"], ["algo.step_selector.alpha=-1", "(0, 1]"]),
    (["algo/harmonizer=dgt", "algo.harmonizer.mode=rotate"], ["algo.harmonizer.mode='rotate'", "norm_only"]),
    (["algo.schedule.switch_round=1", "algo.schedule.switch_tau=1"], ["algo.schedule.switch_round=1", ">= 2"]),
    (["diagnostics.track_params=-2"], ["diagnostics.track_params=-2", ">= 0"]),
])
def test_bad_value_is_refused_with_key_range_and_fix(cfg_factory, overrides, expected):
    with pytest.raises(ConfigError) as err:
        validate(cfg_factory(*overrides))
    for part in expected:
        assert part in str(err.value)


def test_every_problem_is_reported_at_once(cfg_factory):
    with pytest.raises(ConfigError) as err:
        validate(cfg_factory("partition.alpha=-1", "fl.clients_per_round=20", "fl.local_epochs=0"))
    assert len(err.value.problems) == 3


def test_config_errors_come_before_any_data_is_loaded(cfg_factory, monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("data was loaded before the config was checked")

    monkeypatch.setattr("fedrun.engine.run.simulation.load_dataset", fail)
    with pytest.raises(ConfigError, match="partition.alpha"):
        Simulation.from_config(cfg_factory("data=cifar10", "model=cnn_fedgh", "partition.alpha=0"))


def test_defaults_are_valid_and_presets_compose(cfg_factory):
    validate(cfg_factory())
    cfg = cfg_factory("experiment=bherd_svm_mnist", "partition=case2")
    assert (cfg.fl.num_clients, cfg.fl.batch_size, cfg.fl.rounds, cfg.fl.lr) == (5, 100, 100, 2e-4)
    assert cfg.model.name == "svm" and cfg.partition.name == "case2"
    validate(cfg)
    assert cfg_factory("algo=centralized").algo.pooled is True


@pytest.mark.parametrize("overrides,expected", [
    (["algo=afl"], ["algo=afl: algo has no option 'afl'", "afl is a schedule: algo/schedule=afl, on any base"]),
    (["data=svhn"], ["data=svhn", "its options are", "mnist"]),
    (["logger=foo"], ["logger=foo", "csv, none, wandb"]),
    (["algo=fedavgg"], ["Did you mean fedavg?"]),
    (["fl.round=3"], ["fl.round: no such setting. Did you mean fl.rounds?"]),
    (["+fl.round=3"], ["+fl.round: nothing in fedrun reads this key", "did you mean fl.rounds?"]),
    (["+fl.lr=3"], ["+fl.lr: the key exists", "Fix: fl.lr=3"]),
    (["algo.harmonizer.mode=norm_only"], ["algo/harmonizer=none has no such setting", "algo/harmonizer=dgt"]),
    (["-m", "algo=fedavg,fedgs"], ["algo=fedgs", "Did you mean fedgh?"]),
    # the run's own sections are typed (fedrun/config/schema.py): a value of the wrong type is refused while composing
    (["fl.lr=fast"], ["fl.lr=fast: Value 'fast' of type 'str' could not be converted to Float", "Fix: fl.lr=0.1"]),
    (["fl.rounds=1.5"], ["fl.rounds=1.5", "Fix: fl.rounds=10"]),
    (["overwrite=maybe"], ["overwrite=maybe", "Fix: overwrite=false"]),
    (["eval.every_s=soon"], ["eval.every_s=soon", "Fix: eval.every_s=null"]),
])
def test_overrides_hydra_cannot_compose_are_refused_with_the_valid_choices(overrides, expected):
    from fedrun.cli import CONF_DIR
    from fedrun.config.overrides import check_overrides

    problems = check_overrides(overrides, CONF_DIR)
    assert len(problems) == 1
    for part in expected:
        assert part in problems[0]


def test_problems_of_every_kind_are_said_at_once():
    """Each error Hydra's composition raises is said in fedrun's words and its override left out of the next
    composition: an unknown key, a wrong type, a key added that exists, one added that nothing reads, a listed
    sweep's and an Optuna interval's unknown keys, and then the ranges of the values that compose."""
    from fedrun.cli import CONF_DIR
    from fedrun.config.overrides import check_overrides

    problems = check_overrides(["-m", "fl.round=3", "fl.lr=fast", "+fl.batch_size=8", "+fl.batchsize=8",
                                "eval.evry=1,2", "fl.momentm=interval(0,1)", "partition.alpha=0", "seed=1"], CONF_DIR)
    said = ["fl.round: no such setting. Did you mean fl.rounds?", "fl.lr=fast: Value 'fast'",
            "+fl.batch_size: the key exists", "+fl.batchsize: nothing in fedrun reads this key",
            "eval.evry: no such setting. Did you mean eval.every?", "fl.momentm: no such setting. Did you mean "
            "fl.momentum?", "partition.alpha=0.0: must be > 0"]
    assert len(problems) == len(said), problems
    for start in said:
        assert any(p.startswith(start) for p in problems), (start, problems)


@pytest.mark.parametrize("args, said", [
    (["fl.roundz=3", "partition.alpha=-1"], ["fl.roundz: no such setting", "partition.alpha=-1.0: must be > 0"]),
    (["algo=fedavgg", "fl.roundz=3"], ["algo=fedavgg: algo has no option 'fedavgg'", "fl.roundz: no such setting"]),
    (["algo=fedavgg", "fl.roundz=3", "algo.step_selector.alpha=2", "algo/step_selector=herd"],
     ["algo=fedavgg: algo has no option", "fl.roundz: no such setting", "algo.step_selector.alpha=2"]),
], ids=["unknown-key-and-range", "unknown-option-and-key", "option-key-and-a-part's-range"])
def test_an_unknown_key_or_option_hides_no_other_problem(args, said):
    from fedrun.cli import CONF_DIR
    from fedrun.config.overrides import check_overrides

    problems = check_overrides(args, CONF_DIR)
    assert len(problems) == len(said), problems
    for start in said:
        assert any(p.startswith(start) for p in problems), (start, problems)


def test_overrides_that_compose_pass_the_check():
    from fedrun.cli import CONF_DIR
    from fedrun.config.overrides import check_overrides

    for ok in (["algo=fedgh", "fl.lr=0.2"], ["-m", "algo=fedavg,bherd", "fl.lr=0.1,0.2"], ["hydra.run.dir=x"],
               ["experiment=bherd_svm_mnist", "partition=case2_wang"], ["algo/harmonizer=dgt",
                                                                        "algo.harmonizer.mode=norm_only"],
               ["partition=classes", "partition.min_size=2"], ["--cfg", "job"]):
        assert check_overrides(ok, CONF_DIR) == [], ok


def test_group_options_alone_are_checked_without_composing(monkeypatch):
    """Options of groups (and Hydra's own keys) are checked against conf/'s files; composing them here as well would
    add a composition to every such command's start (Hydra composes twice more to run it)."""
    from fedrun.config import overrides
    from fedrun.cli import CONF_DIR

    def composes(*args):
        raise AssertionError("composed")

    monkeypatch.setattr(overrides, "_compose", composes)
    assert overrides.check_overrides(["algo=bherd", "data=mnist", "hydra.run.dir=x"], CONF_DIR) == []
    assert "Did you mean bherd?" in overrides.check_overrides(["algo=bhred"], CONF_DIR)[0]
    with pytest.raises(AssertionError, match="composed"):  # a value's key and type: Hydra's composition says
        overrides.check_overrides(["algo=bherd", "fl.lr=0.2"], CONF_DIR)


def test_presets_named_after_a_method_run_it_and_every_paper_has_an_algo(cfg_factory):
    from fedrun.algorithms import method_name

    for preset, part, name in (("fedgh_synthetic", "harmonizer", "fedgh"), ("fedgh_cifar10", "harmonizer", "fedgh"),
                               ("dgt_mnist", "harmonizer", "dgt"), ("dgt_fashion_mnist", "harmonizer", "dgt"),
                               ("gift_lenet5_mnist", "schedule", "gift")):
        cfg = cfg_factory(f"experiment={preset}")
        assert cfg.algo[part].name == name, preset
        assert method_name(cfg.algo) == f"fedavg+{name}"
        assert method_name(cfg_factory(f"experiment={preset}", "algo=fedprox").algo) == f"fedprox+{name}"
    for algo, method in (("fedgh", "fedavg+fedgh"), ("dgt", "fedavg+dgt"), ("gift", "fedavg+gift"),
                         ("bherd_scaffold", "bherd_scaffold"), ("mafsvrg", "mafsvrg")):
        assert method_name(cfg_factory(f"algo={algo}").algo) == method
    assert method_name(cfg_factory("algo=bherd", "algo/step_selector=random").algo) == "bherd+random"
    # a local rule other than the preset's own is named (prox is SGD with a proximal term: named sgd, as FedAvg's)
    assert method_name(cfg_factory("algo=fedavg", "algo/local=scaffold").algo) == "fedavg+scaffold"
    assert method_name(cfg_factory("algo=scaffold", "algo/local=sgd").algo) == "scaffold+sgd"
    assert method_name(cfg_factory("algo=fedavg", "algo/local=prox").algo) == "fedavg"


def _section_fields():
    """(overrides choosing the option, key, a value out of range) for every key of fedrun/config/schema.py with a
    rule."""
    import dataclasses

    from conftest import REPO, make_cfg
    from omegaconf import OmegaConf

    from fedrun.config.schema import GROUPS, SECTIONS

    chosen = [((), prefix, cls) for prefix, cls in SECTIONS.items()]
    chosen += [((f"{group}={path.stem}",), group, cls) for group, cls in GROUPS.items()
               for path in sorted((REPO / "conf" / group).glob("*.yaml"))]
    seen = set()
    for choice, prefix, cls in chosen:
        section = cls(**OmegaConf.to_container(make_cfg(*choice)[prefix], resolve=True))
        types = {f.name: str(f.type) for f in dataclasses.fields(cls)}
        for key in dict.fromkeys(key for _, key, _, _ in section.rules()):
            if (prefix, key) not in seen:
                seen.add((prefix, key))
                bad = "[-1]" if "List" in types[key] else "bogus" if "str" in types[key] else "-1"
                yield choice, f"{prefix}.{key}", bad


SECTION_FIELDS = list(_section_fields())


@pytest.mark.parametrize("choice,key,bad", SECTION_FIELDS, ids=[k for _, k, _ in SECTION_FIELDS])
def test_every_ranged_key_of_the_runs_sections_refuses_a_value_out_of_range(cfg_factory, choice, key, bad,
                                                                            monkeypatch):
    """fl, eval, diagnostics, checkpoint, hardware, participation, timing, logger (fedrun/config/schema.py): a value out
    of range is named with its key before any data is loaded."""
    from conftest import with_values

    monkeypatch.setattr("fedrun.engine.run.simulation.load_dataset", lambda *a, **k: pytest.fail("data loaded"))
    with pytest.raises(ConfigError) as refused:
        Simulation.from_config(with_values(cfg_factory(*choice), f"{key}={bad}"))
    assert any(p.startswith(f"{key}=") and "Fix: " in p for p in refused.value.problems), refused.value.problems


def test_the_range_checks_cover_every_numeric_field_of_the_parts_and_sections(capsys):
    import dataclasses

    from fedrun.algorithms.schema import SCHEMAS

    parts = {(c, f.name) for options in SCHEMAS.values() for c in options.values() for f in dataclasses.fields(c)
             if f.name != "name" and "bool" not in str(f.type)}
    with capsys.disabled():
        print(f"\nrange checks: {len(parts)} settings of {len({c for c, _ in parts})} part schemas "
              f"(tests/algorithms/test_schema.py) and {len(SECTION_FIELDS)} keys of the run's sections and groups "
              "(here)")
    assert len(SECTION_FIELDS) >= 30 and len(parts) >= 40


def test_a_run_checks_its_config_once(cfg_factory, tmp_path, monkeypatch):
    """run_experiment validates before the run directory gets files; the Simulation it builds does not again (a
    Simulation built on its own still does)."""
    import fedrun.engine.run.experiment as experiment
    import fedrun.engine.run.simulation as simulation
    from fedrun.config import checks

    calls = []

    def counted(cfg):
        calls.append(1)
        return checks.validate(cfg)

    monkeypatch.setattr(experiment, "validate", counted)
    monkeypatch.setattr(simulation, "validate", counted)
    cfg = cfg_factory("data=digits", "model=mlp", "fl.rounds=1", "fl.num_clients=4", "fl.clients_per_round=2")
    experiment.run_experiment(cfg, tmp_path / "run")
    assert len(calls) == 1
    simulation.Simulation.from_config(cfg)
    assert len(calls) == 2


REQUIREMENT_BROKEN_BY = {  # a config that breaks each cross-group requirement (fedrun/config/checks.py)
    "evaluation_grid_needs_simulated_time": ["eval.every_s=5"],
    "augmentation_needs_pixel_images": ["data=two_gaussians", "model=logreg", "data.augment=autoaugment"],
    "classes_per_client_within_the_datasets": ["partition=classes", "partition.classes_per_client=50"],
    "natural_partition_needs_users": ["data=digits", "partition=natural"],
    "model_output_matches_the_targets": ["data=leaf_reddit", "model=lstm", "partition=natural"],
    "next_word_targets_are_not_partitioned_by_class": ["data=leaf_reddit", "model=lstm_lm",
                                                       "partition=dirichlet"],
    "fsvrg_feature_scaling_needs_a_feature_model": ["data=digits", "algo=fsvrg", "model=mlp"],
    "model_fits_the_inputs": ["data=digits", "model=lenet5"],
    "afl_needs_the_time_model_and_a_budget": ["algo/schedule=afl"],
    "adacomm_interval_needs_simulated_time": ["algo/schedule=adacomm", "algo.schedule.interval_s=10"],
    "devices_run_on_the_simulated_clock": ["devices=lognormal"],
    "participation_options_fit_its_sampling": ["participation=poisson", "participation.over_selection=0.5"],
    "the_time_model_of_a_schedule_has_one_device": ["algo/schedule=afl", "devices=lognormal", "timing=simulated"],
    "a_bank_needs_every_sampled_client": ["algo=mafsvrg", "participation.dropout=0.1"],
    "an_asynchronous_server_samples_uniformly": ["algo/asynchrony=fedbuff", "participation=poisson"],
    "privacy_is_accounted_for_the_sampling": ["algo=dp_fedavg", "participation=earliest"],
    "a_cuda_device_is_visible": ["hardware.device=cuda"],
    "reuse_names_a_folder": ["reuse=/nonexistent/runs"],
}


def test_every_cross_group_requirement_is_declared_once_and_each_can_fail(cfg_factory):
    """The requirements between groups are one table (checks.REQUIREMENTS), each checked once by validate: each has
    a config that breaks it here (a new requirement needs one), the default config breaks none, and validate reports
    the problems of several at once."""
    import torch

    from fedrun.config import checks
    from fedrun.data import DATASETS

    names = [r.check.__name__ for r in checks.REQUIREMENTS]
    assert sorted(names) == sorted(REQUIREMENT_BROKEN_BY) and len(set(names)) == len(names)
    default = cfg_factory()
    for requirement in checks.REQUIREMENTS:
        assert requirement.check(default, DATASETS[default.data.name]) is None, requirement.check.__name__
        if requirement.check is checks.a_cuda_device_is_visible and torch.cuda.is_available():
            continue
        cfg = cfg_factory(*REQUIREMENT_BROKEN_BY[requirement.check.__name__])
        assert requirement.check(cfg, DATASETS[cfg.data.name]), requirement.check.__name__
    with pytest.raises(ConfigError) as e:
        checks.validate(cfg_factory("eval.every_s=5", "algo/schedule=afl", "data=digits", "model=lenet5"))
    assert len(e.value.problems) == 3


@pytest.mark.parametrize("name", ["fedgh", "dgt"])
def test_each_harmonisers_step_length_control_is_an_option_of_the_group(cfg_factory, name):
    """``algo/harmonizer=<name>_norm_only`` (a sweep's value beside none and <name>) is the harmoniser in its control
    mode, every other setting the harmoniser's default."""
    control, method = cfg_factory(f"algo/harmonizer={name}_norm_only"), cfg_factory(f"algo/harmonizer={name}")
    assert control.algo.harmonizer.name == name and control.algo.harmonizer.mode == "norm_only"
    assert method.algo.harmonizer.mode != "norm_only"
    assert {k: v for k, v in control.algo.harmonizer.items() if k != "mode"} == \
        {k: v for k, v in method.algo.harmonizer.items() if k != "mode"}
