"""The GPU path, where a CUDA GPU is visible (skipped elsewhere): a GPU's rounds are the CPU's, to float64 rounding,
under both executors, and a run repeats itself there bit for bit."""

import pytest
import torch

from fedrun.engine.simulation import Simulation
from test_executor import FAMILIES, tiny, two_rounds

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.parametrize("family", ["linear", "cnn", "batchnorm_cnn", "gru", "lstm"])
def test_a_gpus_rounds_equal_the_cpu_loops(monkeypatch, cfg_factory, family):
    """Float64 throughout (the CPU's and the GPU's kernels sum in different orders); recurrent layers under vmap run
    torch's own kernels (cuDNN's need their weights' storage), in the loop cuDNN's."""
    kind, overrides = FAMILIES[family]
    data_name = None
    if kind:
        tiny(monkeypatch, kind)
        data_name = "tiny"
    overrides = [*overrides, "hardware.dtype=float64", "hardware.layout=contiguous"]
    cpu, _ = two_rounds(cfg_factory, overrides, "loop", data_name, device="cpu")
    for executor in ("loop", "vmap"):
        gpu, _ = two_rounds(cfg_factory, overrides, executor, data_name, device="cuda")
        assert gpu.state.params.is_cuda
        torch.testing.assert_close(gpu.state.params.cpu(), cpu.state.params, rtol=1e-9, atol=1e-11)
        for name in cpu.state.buffers:
            torch.testing.assert_close(gpu.state.buffers[name].cpu(), cpu.state.buffers[name], rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("executor", ["loop", "vmap"])
def test_the_same_config_and_seed_give_the_same_model_on_a_gpu(cfg_factory, executor):
    """hardware.deterministic=true (the default): cuDNN's convolutions would otherwise pick kernels that add in a
    varying order."""
    def final():
        sim = Simulation(cfg_factory("data=digits", "model=cnn3", "fl.clients_per_round=4", "hardware.device=cuda",
                                     f"hardware.executor={executor}"))
        for r in (1, 2):
            sim.run_round(r)
        return sim.state.params

    assert torch.equal(final(), final())
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32, "hardware.tf32=false"
