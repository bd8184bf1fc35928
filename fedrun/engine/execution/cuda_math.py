"""How a GPU computes float32 and whether a run repeats itself there (``hardware.precision=tf32``,
``hardware.deterministic``).

PyTorch's own defaults differ between operations (TF32 on for cuDNN's convolutions, off for matrix products) and let
cuDNN pick kernels that add in a varying order, so that the same config and seed give different models on a GPU. A
CPU needs neither setting: its float32 is float32 and its kernels add in a fixed order."""

from __future__ import annotations

import logging
import os

import torch

log = logging.getLogger("fedrun")


def configure_cuda(deterministic: bool, benchmark: bool = False) -> None:
    """float32 products and convolutions in float32, as on a CPU (torch's own default runs cuDNN's convolutions on
    TF32 units; ``hardware.precision=tf32`` turns them on for the local steps alone: ``precision.tf32_units``).
    ``deterministic``: the same config and seed give the same model bit for bit: cuDNN's deterministic kernels,
    torch's deterministic algorithms (a warning names an operation that has none) and cuBLAS's fixed workspace
    (``CUBLAS_WORKSPACE_CONFIG``, unless already set). cuBLAS reads that variable when the process first uses it, so
    where CUDA was already in use (a second run in one process) a warning says the products may not repeat.
    ``benchmark`` (``hardware.cudnn_benchmark``): cuDNN times its convolution algorithms for each new input shape and
    keeps the fastest (under ``deterministic``, the fastest deterministic one). Process-wide settings: a run sets them
    before its first GPU computation."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if deterministic and "CUBLAS_WORKSPACE_CONFIG" not in os.environ:
        if torch.cuda.is_initialized():
            log.warning("hardware.deterministic=true: CUDA was in use in this process before the run, so cuBLAS may "
                        "have read its workspace setting already and its products may not repeat bit for bit. Fix: "
                        "start each run in its own process, or export CUBLAS_WORKSPACE_CONFIG=:4096:8 before it")
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    torch.backends.cudnn.deterministic = deterministic
    torch.backends.cudnn.benchmark = benchmark
    torch.use_deterministic_algorithms(deterministic, warn_only=True)


def synchronize(device: torch.device) -> None:
    """Wait for the work queued on ``device`` (a GPU runs it asynchronously; a CPU has none queued)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


_shares: dict[int, float] = {}  # device index -> the share of its memory this process may allocate


def share_memory(share: float | None, device: torch.device) -> None:
    """``hardware.memory_share``: this process allocates at most ``share`` of the GPU's memory (torch's allocator
    refuses more), so that several jobs of a sweep can share one GPU (``hydra/launcher=gpu_shared``); the vmap and
    graph executors size their chunks within it (:func:`free_bytes`). None: the whole GPU."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if share is None:
        _shares.pop(index, None)
        torch.cuda.set_per_process_memory_fraction(1.0, index)
        return
    _shares[index] = share
    torch.cuda.set_per_process_memory_fraction(share, index)


def free_bytes(device: torch.device) -> int:
    """The GPU memory this process may still take: what the device has free, within its share
    (:func:`share_memory`) less what its allocator holds."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    free, total = torch.cuda.mem_get_info(index)
    if index in _shares:
        free = min(free, int(_shares[index] * total) - torch.cuda.memory_reserved(index))
    return max(0, free)
