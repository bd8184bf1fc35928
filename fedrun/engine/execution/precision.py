"""The precision of the clients' local steps (``hardware.precision``): float32, TF32 matrix units (a GPU), or
bfloat16 autocast.

Only local training runs in reduced precision: a cohort's steps are where a round's arithmetic is, and where a GPU's
reduced-precision units pay. Parameters, optimiser states and every update stay float32 (autocast computes the
eligible products and convolutions in bfloat16 and returns their results in it; the arithmetic that follows promotes
back to float32); the server's aggregation, harmonisation and herding and the evaluation of models stay float32, so
an accuracy measures the trained model, not its reduced-precision forward pass.
"""

from __future__ import annotations

import contextlib

import torch

from fedrun.errors import ConfigError


def check_device(precision: str, device: torch.device) -> None:
    """TF32 is a GPU's matrix unit: refused on a CPU, before any work, rather than silently run in float32."""
    if precision == "tf32" and device.type != "cuda":
        raise ConfigError([f"hardware.precision=tf32: TF32 matrix units are a GPU's, and this run's device is "
                           f"{device.type}. Fix: hardware.precision=float32 (or bfloat16), or hardware.device=cuda"])


class InPrecision:
    """An executor whose local steps (and the clients' step selection made where they trained) run in
    ``precision``: a run's cohort training, and each precision's row of the limits benchmark."""

    def __init__(self, executor, precision: str, device: torch.device):
        self.executor, self.precision, self.device = executor, precision, device
        self.name = executor.name

    def run(self, *args, **kwargs):
        with local_steps(self.precision, self.device):
            return self.executor.run(*args, **kwargs)

    def train(self, *args, **kwargs):
        with local_steps(self.precision, self.device):
            return self.executor.train(*args, **kwargs)

    def report(self) -> dict:
        return self.executor.report()


def local_steps(precision: str, device: torch.device):
    """The context a cohort's local steps run in: bfloat16 autocast for ``bfloat16`` (its cast cache off, as CUDA
    graph capture requires: a cached cast would be a tensor captured from an earlier step), TF32 matrix units for
    ``tf32`` (:func:`tf32_units`), nothing for ``float32``."""
    if precision == "bfloat16":
        return torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=False)
    if precision == "tf32":
        return tf32_units()
    return contextlib.nullcontext()


@contextlib.contextmanager
def tf32_units():
    """float32 products and convolutions on TF32 matrix units inside, as before outside. TF32 is a process-wide
    switch in torch: turned on for the local steps alone, the server's products and the evaluation stay float32."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def carried_to_threads(device_type: str):
    """A context that sets, in another thread, the autocast state that the calling thread has now (autocast is a
    thread's own: the loop executor's worker threads would otherwise step in float32)."""
    if not torch.is_autocast_enabled(device_type):
        return contextlib.nullcontext
    dtype = torch.get_autocast_dtype(device_type)
    return lambda: torch.autocast(device_type, dtype=dtype, cache_enabled=False)
