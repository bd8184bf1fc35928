"""Bad values are refused before any work, with the key, the allowed range and a fix."""

import pytest

from fedrun.config import validate
from fedrun.engine.simulation import Simulation
from fedrun.errors import ConfigError


@pytest.mark.parametrize("overrides,expected", [
    (["partition.alpha=0"], ["partition.alpha=0", "must be > 0", "Fix: partition.alpha=0.5"]),
    (["partition=dirichlet_resample", "partition.alpha=-2"], ["partition.alpha=-2", "must be > 0"]),
    (["fl.clients_per_round=11"], ["fl.clients_per_round=11", "[1, fl.num_clients=10]"]),
    (["fl.local_epochs=0"], ["fl.local_epochs=0", "must be > 0"]),
    (["fl.local_epochs=-0.5"], ["fl.local_epochs=-0.5"]),
    (["model=vgg16", "data=mnist"], ["model=vgg16 needs images of at least 32x32", "data=mnist", "models that fit"]),
    (["model=gru", "data=digits"], ["model=gru takes tokens/sequence inputs", "image"]),
    (["fl.batch_size=0"], ["fl.batch_size=0", "integer >= 1"]),
    (["data.normalize=zscore"], ["data.normalize='zscore'", "standardize", "Fix: data.normalize=standardize"]),
    (["model=svm", "model.init=xavier"], ["model.init='xavier'", "default or zeros"]),
    (["fl.lr=0"], ["fl.lr=0", "must be > 0"]),
    (["eval.target_acc=95"], ["eval.target_acc=95", "(0, 1]"]),
    (["partition=classes", "partition.classes_per_client=11"], ["partition.classes_per_client=11", "[1, 10]"]),
    (["partition=natural"], ["partition=natural", "has no users"]),
    (["hardware.executor=threads"], ["hardware.executor='threads'"]),
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

    monkeypatch.setattr("fedrun.engine.simulation.load_dataset", fail)
    with pytest.raises(ConfigError, match="partition.alpha"):
        Simulation(cfg_factory("data=cifar10", "model=cnn_fedgh", "partition.alpha=0"))


def test_defaults_are_valid_and_presets_compose(cfg_factory):
    validate(cfg_factory())
    cfg = cfg_factory("experiment=bherd_svm_mnist", "partition=case2")
    assert (cfg.fl.num_clients, cfg.fl.batch_size, cfg.fl.rounds, cfg.fl.lr) == (5, 100, 100, 2e-4)
    assert cfg.model.name == "svm" and cfg.partition.name == "case2"
    validate(cfg)
    assert cfg_factory("algo=centralized").algo.pooled is True
