"""A CNN's convolutions with their 2x2 max pooling and ReLU as compiled CPU kernels, for a cohort's step.

LeNet-5's first layer (one input channel on MNIST, 6 outputs, 5x5) is where a CPU step loses most: oneDNN computes it
far below the peak, and the pooling's backward zero-fills and scatters the convolution's whole output
(results/bench/cohort-step-cpu-xeon.md). ``fedrun/model/native/kernels/conv_pool_relu.cpp`` computes the three layers
together, image by image in the L1 cache, and gives the weights' gradients straight from the pooled ones. A later
convolution followed by the same pooling and ReLU (LeNet-5's second: 6 input and 16 output channels a client) is one
kernel too (``conv_pool_relu_images``): its backward visits only the pooling's winners, a quarter of the convolution's
outputs, for the weights' and the images' gradients. Each kernel writes its output in the memory that the layer after it
reads (``layout_for``), so nothing is copied between them and the Linear layers. The same values as the layers one by
one, to float rounding (tests/model/native/test_fused_conv.py).
"""

from __future__ import annotations

import torch
from torch import nn

from fedrun.model.native import build as native
from fedrun.model.native.indexed_rows import IndexedRows
from fedrun.model.zoo import Flatten, covers_input

SOURCE = "conv_pool_relu.cpp"
LANES = 16  # the kernel computes one row of up to 16 pooled columns at once
KERNEL_SIZES = (3, 5)


def fits(conv: nn.Module, pool: nn.Module, after: nn.Module | None, x: torch.Tensor | IndexedRows) -> bool:
    """Whether the kernel computes ``after(pool(conv(x)))`` for a cohort's images ``x`` (K, B, C, H, W), gathered or
    read in place (``IndexedRows``, of contiguous training images): a plain square 3x3 or 5x5 convolution (stride 1,
    symmetric zero padding), a 2x2 max pooling of stride 2, then a ReLU; float32 on a CPU; at most 16 pooled
    columns."""
    return (_layers_fit(conv, pool, after) and x.dim() == 5 and x.shape[2] == conv.in_channels
            and pooled_size(conv, x)[1] <= LANES and _input_fits(conv, x)
            and (not isinstance(x, IndexedRows) or x.source.is_contiguous()))


def reads_images(layers: list[nn.Module], x: torch.Tensor) -> bool:
    """Whether a cohort's minibatches of the training images ``x`` (N, C, H, W) reach the first kernel as their
    index into ``x`` (``IndexedRows``: each image read where it lies, no minibatch gathered): ``x`` one plain
    contiguous tensor (not augmented on the fly) that the kernel ``applies`` to."""
    return type(x) is torch.Tensor and x.dim() == 4 and x.is_contiguous() and applies(layers, x[:1][None])


def fits_images(conv: nn.Module, pool: nn.Module, after: nn.Module | None, h: torch.Tensor) -> bool:
    """Whether the kernel computes ``after(pool(conv(h)))`` for K clients' images ``h`` (K, B, C, H, W), of any
    strides, as a later convolution sees them (LeNet-5's second): the layers that ``fits`` takes, with each row of the
    R x R window at most four vectors (R * C <= 64 input values)."""
    return _later_fits(conv, pool, after) and h.dim() == 5 and h.shape[2] == conv.in_channels and _input_fits(conv, h)


def _later_fits(conv: nn.Module, pool: nn.Module, after: nn.Module | None) -> bool:
    return _layers_fit(conv, pool, after) and conv.in_channels * conv.kernel_size[0] <= 4 * LANES


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


def _input_fits(conv: nn.Module, x: torch.Tensor) -> bool:
    """float32 on a CPU, at least one pooling window."""
    return x.dtype == torch.float32 and x.device.type == "cpu" and min(pooled_size(conv, x)) >= 1


# The memory a kernel writes its (K, B, O, P, Q) output in, chosen for the layer after it (``layout_for``):
# "cohort": (B, P, Q, K, O), the channels-last images side by side that oneDNN's grouped convolution takes (``images``
# gives them as (B, K * O, P, Q)); "clients": (K, B, P, Q, O), each client's channels-last images, as a later kernel
# reads them a row at a time; "rows": (K, B, O, P, Q), each image flattened in (O, P, Q) order, the rows that a
# flattening layer passes to a Linear layer (``images`` gives them as (K, B, O * P * Q), no copy).
LAYOUTS = ("cohort", "clients", "rows")


def layout_for(layers: list[nn.Module], i: int, size: tuple[int, int]) -> str:
    """The layout of a kernel's output of spatial ``size`` that ``layers[i]`` (None past the end) takes without a
    copy: rows for a flattening layer or a convolution whose window covers its input (a Linear layer on the rows)."""
    nxt = layers[i] if i < len(layers) else None
    if (type(nxt) is Flatten or isinstance(nxt, nn.Flatten) and (nxt.start_dim, nxt.end_dim) == (1, -1)
            or isinstance(nxt, nn.Conv2d) and covers_input(nxt, size)):
        return "rows"
    if isinstance(nxt, nn.Conv2d) and len(layers) > i + 2 and _later_fits(*layers[i : i + 3]):
        return "clients"
    return "cohort"


def images(out: torch.Tensor, layout: str) -> torch.Tensor:
    """A kernel's (K, B, O, P, Q) output as the layer after it takes it: (B, K * O, P, Q) images side by side
    ("cohort"), itself ("clients"), (K, B, O * P * Q) rows ("rows"); views, no copy."""
    if layout == "cohort":
        return out.transpose(0, 1).flatten(1, 2)
    return out.flatten(2) if layout == "rows" else out


def _empty_output(like: torch.Tensor, k: int, b: int, o: int, p: int, q: int, layout: str) -> torch.Tensor:
    """A (K, B, O, P, Q) view of new memory in ``layout``."""
    if layout == "cohort":
        return like.new_empty(b, p, q, k, o).permute(3, 0, 4, 1, 2)
    if layout == "clients":
        return like.new_empty(k, b, p, q, o).permute(0, 1, 4, 2, 3)
    return like.new_empty(k, b, o, p, q)


def pooled_size(conv: nn.Module, x: torch.Tensor) -> tuple[int, int]:
    """The spatial size of the kernel's output for images ``x`` (..., H, W)."""
    return _pooled(x, conv.kernel_size[0], conv.padding[0])


def _pooled(x: torch.Tensor, r: int, padding: int) -> tuple[int, int]:
    return (x.shape[-2] + 2 * padding - r + 1) // 2, (x.shape[-1] + 2 * padding - r + 1) // 2


def conv_pool_relu(x: torch.Tensor | IndexedRows, weight: torch.Tensor, bias: torch.Tensor | None, padding: int,
                   layout: str = "cohort", into: torch.Tensor | None = None) -> torch.Tensor:
    """relu(maxpool2x2(conv(x, weight, padding)) + bias) for K clients: ``x`` (K, B, C, H, W), or read in place
    (``IndexedRows``: an index (K, B) into the training images (N, C, H, W)), ``weight`` (K, O, C, R, R), ``bias``
    (K, O) or None; returns (K, B, O, P, Q) in memory of ``layout`` (``LAYOUTS``). Differentiable in the weights and
    the bias; the weights' gradient is written into ``into`` where given (a view of the cohort's flat gradient of
    their shape: ``_client_blocks``) and is then that view."""
    if isinstance(x, IndexedRows):
        images, index = x.source, x.index
    else:
        k, b = x.shape[:2]
        images, index = x.reshape(k * b, *x.shape[2:]).contiguous(), torch.arange(k * b, device=x.device).view(k, b)
    return _ConvPoolReLU.apply(images, index, weight, bias, padding, layout, into)


def _client_blocks(weight: torch.Tensor) -> torch.Tensor:
    """A (K, O, C, R, R) weight stack as the kernels read it, each client's block contiguous (any distance apart): a
    view of the cohort's flat parameters as it is, else a copy."""
    block = weight[0]
    return weight if block.is_contiguous() and (len(weight) == 1 or weight.stride(0) >= block.numel()) \
        else weight.contiguous()


class _ConvPoolReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, images, index, weight, bias, padding, layout, into):
        b = bias.contiguous() if bias is not None else weight.new_zeros(weight.shape[:2])
        out = _empty_output(images, *index.shape, weight.shape[1], *_pooled(images, weight.shape[-1], padding), layout)
        codes = kernel().forward(images, index, _client_blocks(weight), b, padding, out)
        ctx.save_for_backward(images, index, codes)
        ctx.padding, ctx.size, ctx.has_bias, ctx.into = padding, weight.shape[-1], bias is not None, into
        return out

    @staticmethod
    def backward(ctx, grad):
        images, index, codes = ctx.saved_tensors
        dw, db = kernel().backward(grad, codes, images, index, ctx.size, ctx.padding, ctx.into)
        return None, None, dw, db if ctx.has_bias else None, None, None, None


def conv_pool_relu_images(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, padding: int,
                          layout: str = "cohort", into: torch.Tensor | None = None) -> torch.Tensor:
    """relu(maxpool2x2(conv(h, weight, padding)) + bias) for K clients' images ``h`` (K, B, C, H, W) of any strides
    (a view of the cohort's images side by side, or a kernel's "clients" output), with ``weight`` (K, O, C, R, R) and
    ``bias`` (K, O) or None; returns (K, B, O, P, Q) in memory of ``layout``, as ``conv_pool_relu``. Differentiable in
    the images, weights and bias (the images' gradient in the images' strides; the weights' into ``into`` where
    given, as ``conv_pool_relu``)."""
    return _ConvPoolReLUImages.apply(h, weight, bias, padding, layout, into)


class _ConvPoolReLUImages(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, weight, bias, padding, layout, into):
        b = bias.contiguous() if bias is not None else weight.new_zeros(weight.shape[:2])
        weight = _client_blocks(weight)
        out = _empty_output(h, *h.shape[:2], weight.shape[1], *_pooled(h, weight.shape[-1], padding), layout)
        codes = kernel().forward_images(h, weight, b, padding, out)
        ctx.save_for_backward(h, weight, codes)
        ctx.padding, ctx.has_bias, ctx.into = padding, bias is not None, into
        return out

    @staticmethod
    def backward(ctx, grad):
        h, weight, codes = ctx.saved_tensors
        dh = torch.empty_like(h) if ctx.needs_input_grad[0] else None  # the images' strides, where they are dense
        dw, db = kernel().backward_images(grad, codes, h, weight, ctx.padding, dh, ctx.into)
        return dh, dw, db if ctx.has_bias else None, None, None, None


def applies(layers: list[nn.Module], x: torch.Tensor | IndexedRows) -> bool:
    """Whether the kernel runs a network's first three layers on the cohort's images ``x`` (K, B, C, H, W, gathered
    or read in place): they ``fits`` and the kernel is built (built now if it was not)."""
    return len(layers) > 2 and fits(*layers[:3], x) and enabled()


def enabled() -> bool:
    """Whether the kernel is there (built now if it was not): False where it cannot be built."""
    return kernel() is not None


def kernel():
    """The compiled kernel (``fedrun/model/native/build.py``), or None where it cannot be built."""
    return native.kernel(SOURCE)
