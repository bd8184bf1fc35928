"""hardware.precision: the local steps in float32, TF32 (a GPU) or bfloat16 autocast; float32 everywhere else."""

from __future__ import annotations

import pytest
import torch

from fedrun.config.compose import CONF_DIR
from fedrun.engine.run.simulation import Simulation
from fedrun.errors import ConfigError
from fedrun.rundir.files import config_differences, saved_config

ROUND = ["data=digits", "algo=scaffold", "fl.clients_per_round=4", "fl.num_clients=8", "hardware=cpu"]


@pytest.mark.parametrize("model", ["mlp", "cnn3"])
@pytest.mark.parametrize("executor", ["loop", "vmap", "graph"])
def test_bfloat16_steps_move_the_model_by_its_rounding_and_only_the_steps_run_in_it(cfg_factory, model, executor):
    """One round in bfloat16 autocast leaves the float32 round's model by about bfloat16's rounding (its 8-bit
    mantissa: well above float32's 1e-7, well below the update itself), under every executor (the loop's worker
    threads included: autocast is a thread's own); the server's state keeps float32."""
    params = {}
    for precision in ("float32", "bfloat16"):
        sim = Simulation.from_config(cfg_factory(*ROUND, f"model={model}", f"hardware.executor={executor}",
                                                 f"hardware.precision={precision}"))
        start = sim.state.params.clone()
        sim.run_round(1)
        assert sim.state.params.dtype == torch.float32
        params[precision] = sim.state.params
    step = (params["float32"] - start).norm()
    gap = (params["bfloat16"] - params["float32"]).norm()
    assert 1e-5 * step < gap < 0.05 * step, (float(gap), float(step))


def test_float32_is_the_default_and_changes_nothing(cfg_factory):
    default = Simulation.from_config(cfg_factory(*ROUND, "model=mlp"))
    explicit = Simulation.from_config(cfg_factory(*ROUND, "model=mlp", "hardware.precision=float32"))
    assert default.settings.hardware.precision == "float32"
    default.run_round(1)
    explicit.run_round(1)
    assert torch.equal(default.state.params, explicit.state.params)


def test_tf32_on_a_cpu_and_reduced_precision_in_float64_are_refused_before_any_work(cfg_factory):
    with pytest.raises(ConfigError, match=r"hardware\.precision=tf32: TF32 matrix units are a GPU's.*Fix: "
                                          r"hardware\.precision=float32"):
        Simulation.from_config(cfg_factory(*ROUND, "model=mlp", "hardware.precision=tf32"))
    with pytest.raises(ConfigError, match=r"hardware\.precision='bfloat16': reduced precision applies to float32 "
                                          r"runs, and dtype=float64\. Fix: hardware\.precision=float32"):
        Simulation.from_config(cfg_factory(*ROUND, "model=mlp", "hardware.precision=bfloat16",
                                           "hardware.dtype=float64"))
    with pytest.raises(ConfigError, match=r"hardware\.precision='fp16': must be one of"):
        Simulation.from_config(cfg_factory(*ROUND, "model=mlp", "hardware.precision=fp16"))


def test_the_old_tf32_switch_names_its_replacement():
    from fedrun.config.overrides import check_overrides

    problems = check_overrides(["hardware.tf32=true"], CONF_DIR)
    assert any("hardware.tf32: this setting is now part of hardware.precision (tf32 for true" in p for p in problems)


def test_a_run_saved_with_the_old_tf32_switch_compares_as_its_precision(tmp_path):
    """A run directory from before the rename holds ``hardware.tf32``: read as every reader of a run's settings reads
    it (the staleness check, resuming and checkpoints alike), it is the run of precision tf32 (true) or float32
    (false)."""
    (tmp_path / "config.yaml").write_text("hardware: {tf32: true, dtype: float32}\nseed: 0\n")
    old = saved_config(tmp_path)
    assert config_differences(old, {"hardware": {"precision": "tf32", "dtype": "float32"}, "seed": 0}) == []
    assert config_differences(old, {"hardware": {"precision": "float32", "dtype": "float32"}, "seed": 0}) == [
        "hardware.precision: 'tf32' there, 'float32' asked"]
    (tmp_path / "config.yaml").write_text("hardware: {tf32: false}\n")
    assert config_differences(saved_config(tmp_path), {"hardware": {"precision": "float32"}}) == []


def test_reduced_precision_turns_the_float32_kernels_off(cfg_factory):
    """fedrun's compiled CPU kernels compute in float32 whatever autocast says: with bfloat16 a one-layer model's step
    (their main user) runs torch's products, in bfloat16, so the round moves by bfloat16's rounding."""
    from fedrun.model.native.build import wanted

    params = {}
    for precision in ("float32", "bfloat16"):
        cfg = cfg_factory(*ROUND, "model=logreg", "fl.batch_size=5", "hardware.native=true",
                          f"hardware.precision={precision}")
        sim = Simulation.from_config(cfg)
        assert sim.model.indexed_rows is (precision == "float32")
        assert bool(wanted(cfg.hardware)) is (precision == "float32")
        start = sim.state.params.clone()
        sim.run_round(1)
        params[precision] = sim.state.params
    step = (params["float32"] - start).norm()
    assert 1e-5 * step < (params["bfloat16"] - params["float32"]).norm() < 0.05 * step
