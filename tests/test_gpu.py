"""The GPU path: its float32 and repeatability settings (on any machine), and where a CUDA GPU is visible (skipped
elsewhere) a GPU's rounds are the CPU's, to float64 rounding, under both executors, and a run repeats itself there."""

import os

import pytest
import torch

from fedrun.engine.simulation import Simulation
from test_executor import BATCHNORM_ON_A_GPU, FAMILIES, tiny, two_rounds

NEEDS_GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_the_gpu_settings_follow_the_config_and_a_cpu_run_leaves_them(cfg_factory, monkeypatch):
    from fedrun.engine.cuda_math import configure_cuda

    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    try:
        configure_cuda(tf32=True, deterministic=True)
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
        assert torch.backends.cudnn.deterministic and torch.are_deterministic_algorithms_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled()
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
        configure_cuda(tf32=False, deterministic=False)
        assert not (torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32)
        assert not (torch.backends.cudnn.deterministic or torch.are_deterministic_algorithms_enabled())
        Simulation(cfg_factory("data=digits", "model=logreg", "hardware.device=cpu", "hardware.deterministic=true"))
        assert not torch.are_deterministic_algorithms_enabled(), "a CPU run sets nothing (its kernels are)"
    finally:
        configure_cuda(tf32=False, deterministic=False)


@NEEDS_GPU
@pytest.mark.parametrize("family", ["linear", "cnn", pytest.param("batchnorm_cnn", marks=BATCHNORM_ON_A_GPU), "gru",
                                    "lstm"])
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


@NEEDS_GPU
@pytest.mark.parametrize("executor", ["loop", "vmap"])
def test_the_same_config_and_seed_give_the_same_model_on_a_gpu(cfg_factory, executor):
    """hardware.deterministic=true: cuDNN's convolutions would otherwise pick kernels that add in a varying order;
    hardware.tf32=false (the default): float32 products and convolutions in float32."""
    def final():
        sim = Simulation(cfg_factory("data=digits", "model=cnn3", "fl.clients_per_round=4", "hardware.device=cuda",
                                     f"hardware.executor={executor}", "hardware.deterministic=true"))
        for r in (1, 2):
            sim.run_round(r)
        return sim.state.params

    assert torch.equal(final(), final())
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32, "hardware.tf32=false"
