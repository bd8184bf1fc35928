"""A CNN's first convolution, its 2x2 max pooling and ReLU as one compiled CPU kernel, for a cohort's step (issue #27).

LeNet-5's first layer (one input channel on MNIST, 6 outputs, 5x5) is where a CPU step loses most: oneDNN computes it
far below the peak, and the pooling's backward zero-fills and scatters the convolution's whole output
(results/bench/cohort-step-cpu-xeon.md). ``fedrun/kernels/conv_pool_relu.cpp`` computes the three layers together,
image by image in the L1 cache, and gives the weights' gradients straight from the pooled ones. The same values as
the layers one by one, to float rounding (tests/test_fused_conv.py).

The kernel is built on first use with the C++ compiler that PyTorch's extensions use (``ninja`` and ``g++``; about
half a minute, once per CPU model and checkout: it is built for this CPU's instruction set) and cached by torch in
``$TORCH_EXTENSIONS_DIR`` (default ``~/.cache/torch_extensions``). Where it cannot be built, fedrun says why once
and computes the layers one by one as before. ``hardware.fused_conv=false`` turns it off.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import platform
import shutil
import warnings
from pathlib import Path

import torch
from torch import nn

log = logging.getLogger("fedrun")
SOURCE = Path(__file__).with_name("kernels") / "conv_pool_relu.cpp"
LANES = 16  # the kernel computes one row of up to 16 pooled columns at once
KERNEL_SIZES = (3, 5)


def fits(conv: nn.Module, pool: nn.Module, after: nn.Module | None, x: torch.Tensor) -> bool:
    """Whether the kernel computes ``after(pool(conv(x)))`` for a cohort's images ``x`` (K, B, C, H, W): a plain
    square 3x3 or 5x5 convolution (stride 1, symmetric zero padding), a 2x2 max pooling of stride 2, then a ReLU;
    float32 on a CPU; at most 16 pooled columns."""
    if not (type(conv) is nn.Conv2d and type(pool) is nn.MaxPool2d and type(after) is nn.ReLU):
        return False
    r = conv.kernel_size[0]
    pad = conv.padding
    if (conv.kernel_size != (r, r) or r not in KERNEL_SIZES or conv.stride != (1, 1) or conv.dilation != (1, 1)
            or conv.groups != 1 or conv.padding_mode != "zeros" or isinstance(pad, str) or pad[0] != pad[1]):
        return False
    size = lambda v: v if isinstance(v, int) else v[0] if len(set(v)) == 1 else None  # noqa: E731
    if (size(pool.kernel_size), size(pool.stride or pool.kernel_size), size(pool.padding),
            size(pool.dilation), pool.ceil_mode, pool.return_indices) != (2, 2, 0, 1, False, False):
        return False
    width = x.shape[-1] + 2 * pad[0] - r + 1
    return (x.dim() == 5 and x.dtype == torch.float32 and x.device.type == "cpu" and x.shape[2] == conv.in_channels
            and width // 2 <= LANES and x.shape[-2] + 2 * pad[0] - r + 1 >= 2 and width >= 2)


def conv_pool_relu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, padding: int) -> torch.Tensor:
    """relu(maxpool2x2(conv(x, weight, padding)) + bias) for K clients: ``x`` (K, B, C, H, W), ``weight``
    (K, O, C, R, R), ``bias`` (K, O) or None; returns (B, K * O, P, Q) images in channels-last memory, client k's
    channels at k * O ..., as the cohort network lays them out. Differentiable in the weights and the bias."""
    return _ConvPoolReLU.apply(x, weight, bias, padding)


class _ConvPoolReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, padding):
        ext = kernel()
        x = x.contiguous()
        b = bias.contiguous() if bias is not None else weight.new_zeros(weight.shape[:2])
        out, codes = ext.forward(x, weight.contiguous(), b, padding)
        ctx.save_for_backward(x, codes)
        ctx.padding, ctx.size, ctx.has_bias = padding, weight.shape[-1], bias is not None
        return out.permute(0, 3, 1, 2)  # (B, P, Q, K * O) memory as (B, K * O, P, Q) channels-last images

    @staticmethod
    def backward(ctx, grad):
        x, codes = ctx.saved_tensors
        dw, db = kernel().backward(grad.permute(0, 2, 3, 1).contiguous(), codes, x, ctx.size, ctx.padding)
        return None, dw, db if ctx.has_bias else None, None


def applies(layers: list[nn.Module], x: torch.Tensor) -> bool:
    """Whether the kernel runs a network's first three layers on the cohort's images ``x`` (K, B, C, H, W): they
    ``fits`` and the kernel is built (built now if it was not)."""
    return len(layers) > 2 and fits(*layers[:3], x) and enabled()


def enabled() -> bool:
    """Whether the kernel is there (built now if it was not): False where it cannot be built."""
    return kernel() is not None


@functools.cache
def kernel():
    """The compiled kernel, built on first use for this CPU (cached across runs by torch), or None (logged once)."""
    quiet = logging.getLogger("torch.utils.cpp_extension")  # its import warns that no CUDA runtime is found
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        from torch.utils import cpp_extension
    finally:
        quiet.setLevel(level)

    name = build_name()
    if shutil.which("ninja") is None:
        try:
            import ninja  # the pip package's binary (a dependency of fedrun), where no system ninja is on the PATH

            os.environ["PATH"] = os.pathsep.join([ninja.BIN_DIR, os.environ.get("PATH", "")])
        except ImportError:
            pass
    try:
        log.info("loading fedrun's fused first-convolution kernel from %s (built there for this CPU if it is not "
                 "yet: once, about half a minute; hardware.fused_conv=false skips it)",
                 cpp_extension._get_build_directory(name, verbose=False))
        quiet.setLevel(logging.ERROR)  # torch's own notes on the compiler: the failure below says what matters
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. about CUDA: the kernel is for the CPU
            return cpp_extension.load(name, [str(SOURCE)], extra_cflags=["-O3", "-march=native", "-fopenmp"],
                                      extra_ldflags=["-fopenmp"], verbose=False)
    except Exception as e:  # no compiler, no ninja, an unsupported platform: the layers one by one, as before
        log.warning("fedrun's fused first-convolution kernel could not be built (%s); the convolution, pooling and "
                    "ReLU run one by one instead (the same results to float rounding, slower). It needs ninja and a "
                    "C++ compiler (g++; $CXX if set); hardware.fused_conv=false silences this.", build_failure(e))
        return None
    finally:
        quiet.setLevel(level)


def build_name() -> str:
    """The build's name, keyed by the source's text and place (torch's build files name the source's path: two
    checkouts sharing one build would rebuild it in turn), the CPU and torch (``_cpu_signature``)."""
    key = SOURCE.read_bytes() + f"{SOURCE.resolve()} {_cpu_signature()}".encode()
    return "fedrun_conv_pool_relu_" + hashlib.sha256(key).hexdigest()[:12]


def build_failure(error: Exception) -> str:
    """The line of a failed build's output that says why (a compiler's error, a missing program), not ninja's
    command lines and status."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    said = [line for line in lines if not line.startswith(("[", "FAILED", "ninja:", "Error building"))
            and " -MMD " not in line and " -shared " not in line]
    errors = [line for line in said if "error" in line.lower() or "not found" in line]
    return (errors or said or lines or [type(error).__name__])[0][:300]


def _cpu_signature() -> str:
    """What the kernel's machine code depends on besides its source: the CPU's instruction sets (it is compiled with
    -march=native, so a cache shared by machines of different CPUs keeps one build per CPU) and torch's version."""
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        pass
    return f"{platform.machine()} {flags.strip()} torch {torch.__version__}"
