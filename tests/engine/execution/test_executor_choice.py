"""Which executor a run gets: ``hardware.executor=auto`` resolved and said, and settings that cannot apply refused
or warned about."""

import logging

import pytest
import torch

from fedrun.engine.run.simulation import Simulation


THREADS = torch.get_num_threads() > 1


@pytest.mark.parametrize("data,model,batch,more,expected", [
    ("digits", "logreg", 64, [], "vmap"), ("digits", "mlp", 64, [], "vmap"),
    # Sequential CNNs under local SGD: their cohort steps as one network, faster than the loop on the bench's
    # workloads up to 1 GFLOP per client step (cnn3 on digits: about 30 and 120 MFLOP, LeNet-5 on MNIST 145) ...
    ("digits", "cnn3", 16, [], "vmap"), ("digits", "cnn3", 64, [], "vmap"), ("mnist", "lenet5", 64, [], "vmap"),
    ("mnist", "cnn_fedgh", 64, [], "loop"),  # about 1.6 GFLOP: the loop
    # ... and otherwise about 30 MFLOP per client step is small, so vmap, unless the loop trains clients in threads
    # (more than one torch thread), which beats vmap on every convolutional workload of the bench
    ("digits", "cnn3", 16, ["hardware.cohort_network=false"], "loop" if THREADS else "vmap"),
    ("digits", "cnn3", 16, ["algo=scaffold"], "loop" if THREADS else "vmap"),  # its own step: not stacked
    ("digits", "cnn3", 64, ["hardware.cohort_network=false"], "loop"),  # about 120 MFLOP
    ("digits", "centralized", 64, [], "loop"),  # one client per round: nothing to batch
])
def test_auto_resolves_to_a_concrete_executor_and_logs_it(cfg_factory, caplog, data, model, batch, more, expected):
    with caplog.at_level(logging.INFO, logger="fedrun"):
        algo = ["algo=centralized", "model=logreg"] if model == "centralized" else [f"model={model}"]
        sim = Simulation.from_config(cfg_factory(f"data={data}", *algo, f"fl.batch_size={batch}",
                                                 "hardware.executor=auto",
                                                 "hardware.device=cpu", *more))  # auto's CPU rules (a GPU: vmap)
    assert sim.executor.name == expected
    assert any(f"hardware.executor=auto resolved to {expected}" in r.getMessage() for r in caplog.records)


def test_compile_without_a_cpp_compiler_is_refused_before_any_work(cfg_factory, monkeypatch):
    from fedrun.engine.execution import executor_choice
    from fedrun.errors import ConfigError

    monkeypatch.setattr(executor_choice.shutil, "which", lambda name: None)
    with pytest.raises(ConfigError, match="hardware.compile=true: torch.compile needs a C\\+\\+ compiler"):
        Simulation.from_config(cfg_factory("data=digits", "model=logreg", "hardware.executor=vmap",
                                           "hardware.compile=true",
                                           "hardware.device=cpu"))


def test_compile_with_the_loop_executor_warns_that_it_does_nothing(cfg_factory, caplog):
    with caplog.at_level(logging.WARNING, logger="fedrun"):
        sim = Simulation.from_config(cfg_factory("data=digits", "model=logreg", "hardware.executor=loop",
                                                 "hardware.compile=true"))
    assert sim.executor.name == "loop"
    assert any("hardware.compile=true has no effect" in r.getMessage() for r in caplog.records)


def test_a_large_cohort_creates_no_module_copies(cfg_factory, monkeypatch):
    from torch import nn

    sim = Simulation.from_config(cfg_factory("data=digits", "model=logreg", "fl.num_clients=400",
                                             "fl.clients_per_round=400",
                                             "partition=iid", "fl.batch_size=1", "hardware.executor=vmap"))
    created = []
    original = nn.Module.__init__

    def counting_init(self, *args, **kwargs):
        created.append(type(self))
        original(self, *args, **kwargs)

    monkeypatch.setattr(nn.Module, "__init__", counting_init)
    out = sim.run_round(1)
    assert len(out.plans) == 400 and created == []
