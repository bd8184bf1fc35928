"""The GPU path: its float32 and repeatability settings (on any machine), and where a CUDA GPU is visible (skipped
elsewhere) a GPU's rounds are the CPU's, to float64 rounding, under both executors, and a run repeats itself there."""

import os

import pytest
import torch

from fedrun.engine.run.simulation import Simulation
from executor_cases import BATCHNORM_ON_A_GPU, FAMILIES, tiny, two_rounds

NEEDS_GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_the_gpu_settings_follow_the_config_and_a_cpu_run_leaves_them(cfg_factory, monkeypatch, caplog):
    """A GPU run computes float32 in float32 outside its local steps, and TF32 (hardware.precision=tf32) inside them
    alone; deterministic sets cuDNN's, torch's and cuBLAS's settings, and says when cuBLAS may have read its own
    before the run (CUDA in use already: a mocked state here); hardware.cudnn_benchmark turns cuDNN's timing of its
    algorithms on."""
    from fedrun.engine.execution.cuda_math import configure_cuda
    from fedrun.engine.execution.precision import local_steps

    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    tf32 = lambda: (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)  # noqa: E731
    try:
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
        configure_cuda(deterministic=True)
        assert tf32() == (False, False)
        with local_steps("tf32", torch.device("cuda")):
            assert tf32() == (True, True)
        assert tf32() == (False, False), "the server's products and the evaluation stay float32"
        with local_steps("float32", torch.device("cuda")):
            assert tf32() == (False, False)
        assert torch.backends.cudnn.deterministic and torch.are_deterministic_algorithms_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled()
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8" and "cuBLAS" not in caplog.text
        monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG")
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
        configure_cuda(deterministic=True)
        assert "CUDA was in use in this process before the run" in caplog.text
        configure_cuda(deterministic=False)
        assert not (torch.backends.cudnn.deterministic or torch.are_deterministic_algorithms_enabled())
        assert not torch.backends.cudnn.benchmark, "cuDNN's heuristic unless hardware.cudnn_benchmark=true"
        configure_cuda(deterministic=False, benchmark=True)
        assert torch.backends.cudnn.benchmark
        configure_cuda(deterministic=False)
        Simulation.from_config(cfg_factory("data=digits", "model=logreg", "hardware.device=cpu",
                                           "hardware.deterministic=true", "hardware.cudnn_benchmark=true"))
        assert not torch.are_deterministic_algorithms_enabled(), "a CPU run sets nothing (its kernels are)"
        assert not torch.backends.cudnn.benchmark
    finally:
        configure_cuda(deterministic=False)


@pytest.mark.parametrize("timing,waits", [(["timing=simulated"], True),
                                          (["timing=simulated", "timing.step_time_s=0.5"], False), ([], False)])
def test_the_simulated_clock_times_the_steps_after_the_device_finished_them(cfg_factory, monkeypatch, timing, waits):
    """A measured step time (timing=simulated, step_time_s null) waits for the device before the clock stops, since a
    GPU's steps are queued (otherwise it measures their launches); no other run waits."""
    from fedrun.engine.run import simulation

    order = []
    sim = Simulation.from_config(cfg_factory("data=digits", "model=logreg", "hardware=cpu", *timing))
    trained = sim.train
    monkeypatch.setattr(sim, "train", lambda *a, **k: order.append("train") or trained(*a, **k))
    monkeypatch.setattr(simulation, "synchronize", lambda device: order.append(device))
    sim.run_round(1)
    assert order == (["train", sim.device] if waits else ["train"])


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
    # on a GPU too, a Sequential CNN's cohort may step as one network (hardware.cohort_network=true)
    runs = [("loop", {}), ("vmap", {}), ("graph", {}), ("vmap", {"cohort_network": "true"}),
            ("graph", {"cohort_network": "true"})]
    for executor, hw in runs:
        gpu, _ = two_rounds(cfg_factory, overrides, executor, data_name, device="cuda", **hw)
        assert gpu.state.params.is_cuda
        torch.testing.assert_close(gpu.state.params.cpu(), cpu.state.params, rtol=1e-9, atol=1e-11)
        for name in cpu.state.buffers:
            torch.testing.assert_close(gpu.state.buffers[name].cpu(), cpu.state.buffers[name], rtol=1e-9, atol=1e-11)


@NEEDS_GPU
@pytest.mark.parametrize("executor", ["loop", "vmap", "graph"])
def test_the_same_config_and_seed_give_the_same_model_on_a_gpu(cfg_factory, executor):
    """hardware.deterministic=true: cuDNN's convolutions would otherwise pick kernels that add in a varying order;
    hardware.precision=float32 (the default): float32 products and convolutions in float32."""
    def final():
        sim = Simulation.from_config(cfg_factory("data=digits", "model=cnn3", "fl.clients_per_round=4",
                                                 "hardware.device=cuda",
                                                 f"hardware.executor={executor}", "hardware.deterministic=true"))
        for r in (1, 2):
            sim.run_round(r)
        return sim.state.params

    assert torch.equal(final(), final())
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32, "precision=float32"


@NEEDS_GPU
@pytest.mark.parametrize("family", ["fedavg", "scaffold", "bherd", "fedprox", "fedgh", "gift", "fsvrg"])
@pytest.mark.parametrize("model", ["mlp", "cnn3"])
def test_captured_steps_equal_the_loops_and_replay_a_graph(monkeypatch, cfg_factory, family, model):
    """The graph executor on a GPU captures a local step as a CUDA graph and replays it for every later step of a
    ragged cohort: its rounds equal the loop's (float64), and each chunk replays its graph."""
    from executor_cases import EVERY_FAMILY, assert_close_tree

    replays = []
    original = torch.cuda.CUDAGraph.replay
    monkeypatch.setattr(torch.cuda.CUDAGraph, "replay", lambda self: (replays.append(1), original(self))[1])
    common = ["data=digits", f"model={model}", *EVERY_FAMILY.get(family, [f"algo={family}"]),
              "fl.clients_per_round=4", "fl.batch_size=16", "hardware.dtype=float64", "fl.momentum=0.5",
              "partition=dirichlet", "partition.alpha=0.3", "hardware.device=cuda", "hardware.layout=contiguous"]
    states = {}
    for executor in ("loop", "graph"):
        sim = Simulation.from_config(cfg_factory(*common, f"hardware.executor={executor}"))
        plans = [sim.run_round(rnd).plans for rnd in (1, 2)]
        states[executor] = vars(sim.state)
    assert sim.executor.capture is None, "no capture failed"
    assert len(replays) >= sum(max(p.tau for p in round_plans) - 1 for round_plans in plans)
    assert_close_tree(states["graph"], states["loop"])


@NEEDS_GPU
def test_bfloat16_steps_on_a_gpu_stay_near_float32(cfg_factory):
    """bfloat16 autocast in captured steps (its cast cache off, as capture requires) moves a round by its rounding."""
    params = {}
    for precision in ("float32", "bfloat16", "tf32"):
        sim = Simulation.from_config(cfg_factory("data=digits", "model=cnn3", "fl.clients_per_round=4",
                                                 "hardware.device=cuda",
                                                 "hardware.executor=graph", f"hardware.precision={precision}"))
        start = sim.state.params.clone()
        sim.run_round(1)
        params[precision] = sim.state.params
    step = (params["float32"] - start).norm()
    for reduced in ("bfloat16", "tf32"):
        assert (params[reduced] - params["float32"]).norm() < 0.05 * step, reduced


def test_a_memory_share_caps_what_a_job_takes_of_a_shared_gpu(monkeypatch):
    """hardware.memory_share (jobs sharing a GPU, hydra/launcher=gpu_shared): torch's allocator is capped at the
    share, and the executors size their chunks within the share less what this process holds, not within all that
    the device has free (tested with the CUDA calls stood in for)."""
    from fedrun.engine.execution import cuda_math

    fractions = []
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda f, i: fractions.append((f, i)))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i: (60 << 30, 80 << 30))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda i: 5 << 30)
    gpu = torch.device("cuda", 0)
    cuda_math.share_memory(0.25, gpu)
    assert fractions == [(0.25, 0)]
    assert cuda_math.free_bytes(gpu) == (20 << 30) - (5 << 30)
    cuda_math.share_memory(None, gpu)
    assert fractions[-1] == (1.0, 0) and cuda_math.free_bytes(gpu) == 60 << 30
