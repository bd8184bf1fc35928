"""How a GPU computes float32 and whether a run repeats itself there (``hardware.precision=tf32``,
``hardware.deterministic``).

PyTorch's own defaults differ between operations (TF32 on for cuDNN's convolutions, off for matrix products) and let
cuDNN pick kernels that add in a varying order, so that the same config and seed give different models on a GPU. A
CPU needs neither setting: its float32 is float32 and its kernels add in a fixed order."""

from __future__ import annotations

import os

import torch


def configure_cuda(tf32: bool, deterministic: bool) -> None:
    """``tf32``: float32 matrix products and convolutions run on TF32 matrix units (Ampere and later: a 10-bit
    mantissa in the products, about 3e-4 relative error, faster); false: float32 throughout, as on a CPU.
    ``deterministic``: the same config and seed give the same model bit for bit: cuDNN's deterministic kernels,
    torch's deterministic algorithms (a warning names an operation that has none) and cuBLAS's fixed workspace
    (``CUBLAS_WORKSPACE_CONFIG``, unless already set; it takes effect where no product ran before in the process).
    Process-wide settings: a run sets them before its first GPU computation."""
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cudnn.deterministic = deterministic
    torch.use_deterministic_algorithms(deterministic, warn_only=True)
