"""A CNN's convolutions with their 2x2 max pooling and ReLU as compiled CPU kernels, for a cohort's step (issue #27).

LeNet-5's first layer (one input channel on MNIST, 6 outputs, 5x5) is where a CPU step loses most: oneDNN computes it
far below the peak, and the pooling's backward zero-fills and scatters the convolution's whole output
(results/bench/cohort-step-cpu-xeon.md). ``fedrun/kernels/conv_pool_relu.cpp`` computes the three layers together,
image by image in the L1 cache, and gives the weights' gradients straight from the pooled ones. A later convolution
followed by the same pooling and ReLU (LeNet-5's second: 6 input and 16 output channels a client) is one kernel too
(``conv_pool_relu_images``), on the cohort's channels-last images as the first gives them: its backward visits only
the pooling's winners, a quarter of the convolution's outputs, for the weights' and the images' gradients. The same
values as the layers one by one, to float rounding (tests/test_fused_conv.py).
"""

from __future__ import annotations

import torch
from torch import nn

from . import native

SOURCE = "conv_pool_relu.cpp"
LANES = 16  # the kernel computes one row of up to 16 pooled columns at once
KERNEL_SIZES = (3, 5)


def fits(conv: nn.Module, pool: nn.Module, after: nn.Module | None, x: torch.Tensor) -> bool:
    """Whether the kernel computes ``after(pool(conv(x)))`` for a cohort's images ``x`` (K, B, C, H, W): a plain
    square 3x3 or 5x5 convolution (stride 1, symmetric zero padding), a 2x2 max pooling of stride 2, then a ReLU;
    float32 on a CPU; at most 16 pooled columns."""
    return (_layers_fit(conv, pool, after) and x.dim() == 5 and x.shape[2] == conv.in_channels
            and _pooled_width(conv, x) <= LANES and _input_fits(conv, x))


def fits_images(conv: nn.Module, pool: nn.Module, after: nn.Module | None, h: torch.Tensor, clients: int) -> bool:
    """Whether the kernel computes ``after(pool(conv(h)))`` for a cohort's images ``h`` (B, K * C, H, W) in
    channels-last memory, as a later convolution sees them (LeNet-5's second): the layers that ``fits`` takes, with
    each row of the R x R window at most four vectors (R * C <= 64 input values)."""
    return (_layers_fit(conv, pool, after) and h.dim() == 4 and h.shape[1] == clients * conv.in_channels
            and conv.in_channels * conv.kernel_size[0] <= 4 * LANES
            and h.is_contiguous(memory_format=torch.channels_last) and _input_fits(conv, h))


def _layers_fit(conv: nn.Module, pool: nn.Module, after: nn.Module | None) -> bool:
    if not (type(conv) is nn.Conv2d and type(pool) is nn.MaxPool2d and type(after) is nn.ReLU):
        return False
    r = conv.kernel_size[0]
    pad = conv.padding
    if (conv.kernel_size != (r, r) or r not in KERNEL_SIZES or conv.stride != (1, 1) or conv.dilation != (1, 1)
            or conv.groups != 1 or conv.padding_mode != "zeros" or isinstance(pad, str) or pad[0] != pad[1]):
        return False
    size = lambda v: v if isinstance(v, int) else v[0] if len(set(v)) == 1 else None  # noqa: E731
    return (size(pool.kernel_size), size(pool.stride or pool.kernel_size), size(pool.padding),
            size(pool.dilation), pool.ceil_mode, pool.return_indices) == (2, 2, 0, 1, False, False)


def _pooled_width(conv: nn.Module, x: torch.Tensor) -> int:
    return (x.shape[-1] + 2 * conv.padding[0] - conv.kernel_size[0] + 1) // 2


def _input_fits(conv: nn.Module, x: torch.Tensor) -> bool:
    """float32 on a CPU, at least one pooling window."""
    height = x.shape[-2] + 2 * conv.padding[0] - conv.kernel_size[0] + 1
    return x.dtype == torch.float32 and x.device.type == "cpu" and height >= 2 and _pooled_width(conv, x) >= 1


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


def conv_pool_relu_images(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, padding: int
                          ) -> torch.Tensor:
    """relu(maxpool2x2(conv(h, weight, padding)) + bias) for K clients' channels-last images ``h`` (B, K * C, H, W),
    client k's channels at k * C ..., with ``weight`` (K, O, C, R, R) and ``bias`` (K, O) or None; returns (B, K * O,
    P, Q) channels-last images as ``conv_pool_relu``. Differentiable in the images, weights and bias."""
    return _ConvPoolReLUImages.apply(h, weight, bias, padding)


class _ConvPoolReLUImages(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, weight, bias, padding):
        x = h.permute(0, 2, 3, 1)  # (B, H, W, K * C) memory
        b = bias.contiguous() if bias is not None else weight.new_zeros(weight.shape[:2])
        weight = weight.contiguous()
        out, codes = kernel().forward_images(x, weight, b, padding)
        ctx.save_for_backward(x, weight, codes)
        ctx.padding, ctx.has_bias = padding, bias is not None
        return out.permute(0, 3, 1, 2)

    @staticmethod
    def backward(ctx, grad):
        x, weight, codes = ctx.saved_tensors
        dw, db, dx = kernel().backward_images(grad.permute(0, 2, 3, 1).contiguous(), codes, x, weight, ctx.padding,
                                              ctx.needs_input_grad[0])
        return dx.permute(0, 3, 1, 2) if ctx.needs_input_grad[0] else None, dw, db if ctx.has_bias else None, None


def applies(layers: list[nn.Module], x: torch.Tensor) -> bool:
    """Whether the kernel runs a network's first three layers on the cohort's images ``x`` (K, B, C, H, W): they
    ``fits`` and the kernel is built (built now if it was not)."""
    return len(layers) > 2 and fits(*layers[:3], x) and enabled()


def enabled() -> bool:
    """Whether the kernel is there (built now if it was not): False where it cannot be built."""
    return kernel() is not None


def kernel():
    """The compiled kernel (``fedrun/native.py``), or None where it cannot be built."""
    return native.kernel(SOURCE)
