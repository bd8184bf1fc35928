"""A cohort of a Sequential CNN's clients as one network, for the vmap executor on a CPU.

``torch.func.vmap`` runs a stack of K clients' convolutions as grouped convolutions in NCHW, and wraps every other
operation. Here the stack is one network instead: the images of the K clients' minibatches are laid side by side
along the channels, (B, K * C, H, W) in channels-last memory (B, H, W, K, C), so that each convolution is one
grouped convolution (groups = K, each client's own weights) in the layout where oneDNN's small-channel kernels are
fastest, each ReLU and max pooling one call over all K * C channels, a convolution whose window covers its whole
input (LeNet-5's third) and each Linear layer one batched matrix product over the clients; then one backward pass
gives every client's gradient (the clients' losses are summed, and no client's output depends on another's
parameters). A ReLU directly before a max pooling runs after it: max commutes with the non-decreasing ReLU, the
gradient reaches the same input element, and the pooling and the ReLU's backward then see a quarter of the
elements. So does the bias of a convolution directly before one (max commutes with adding a constant, also in
rounded arithmetic): added after the pooling, its gradient is a sum over a quarter of the elements, where oneDNN's
convolution backward would sum the whole output in a slow scalar loop. The same losses and gradients as each
client's own step, to float rounding (tests/model/test_cohort_network.py).

``python -m fedrun.bench.workloads`` times it against torch.func's vmap and the loop in threads (results/bench/).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from fedrun.model.native import fused_conv
from fedrun.model.native import indexed_rows
from fedrun.model.zoo import Flatten, Objective, WindowConv2d, covers_input


def cohort_layers(module: nn.Module, objective: Objective) -> list[nn.Module] | None:
    """The layers of a model whose cohort can step as one network: a Sequential of 2-d convolutions (zero padding,
    no groups), ReLUs and max poolings, one flattening layer, then Linear and ReLU layers ending in a Linear, without
    buffers (BatchNorm) or random layers, under an objective with a written-out output gradient; None otherwise. A
    ReLU directly before a max pooling is moved after it (see the module's docstring)."""
    layers = list(module.children()) if isinstance(module, nn.Sequential) else []
    flat = [i for i, m in enumerate(layers) if type(m) in (nn.Flatten, Flatten)]
    if (objective.loss_and_grad_out is None or len(flat) != 1 or list(module.buffers())
            or not any(isinstance(m, nn.Conv2d) for m in layers) or not isinstance(layers[-1], nn.Linear)):
        return None
    head, tail = layers[: flat[0]], layers[flat[0] + 1 :]
    flatten = layers[flat[0]]
    if isinstance(flatten, nn.Flatten) and (flatten.start_dim, flatten.end_dim) != (1, -1):
        return None
    for m in head:
        if not (type(m) is nn.ReLU or _supported_conv(m) or _supported_pool(m)):
            return None
    if not all(type(m) in (nn.ReLU, nn.Linear) for m in tail):
        return None
    head = list(head)
    for i in range(len(head) - 1):
        if type(head[i]) is nn.ReLU and isinstance(head[i + 1], nn.MaxPool2d):
            head[i], head[i + 1] = head[i + 1], head[i]
    return [*head, flatten, *tail]


def _supported_conv(m: nn.Module) -> bool:
    return type(m) in (nn.Conv2d, WindowConv2d) and m.groups == 1 and m.padding_mode == "zeros"


def _supported_pool(m: nn.Module) -> bool:
    return type(m) is nn.MaxPool2d and not m.return_indices


def stacked_loss_and_grad(layers: list[nn.Module], objective: Objective, shapes: list[tuple[int, ...]],
                          flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor, fused: bool = False
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """Each client's minibatch loss and gradient: ``flat`` (K, d) the clients' parameters (in ``shapes``' order),
    ``x`` (K, B, C, H, W) (or read in place: ``indexed_rows.IndexedRows``) and ``y`` (K, B) their minibatches;
    returns (K,) losses and the (K, d) gradient. ``fused``: a convolution, max pooling and ReLU that a compiled kernel
    fits run as one (fedrun/model/native/fused_conv.py): the first layer's on the minibatches, read in place, a later
    one's on the images before it."""
    k, sizes = x.shape[0], [math.prod(s) for s in shapes]
    first_kernel = fused and fused_conv.applies(layers, x)
    if isinstance(x, indexed_rows.IndexedRows) and not first_kernel:
        x = x.gathered()
    grad = torch.empty_like(flat)  # the gradient: the kernels' and Linear layers' weights' parts written in place
    parts = [part.view(k, *s) for part, s in zip(grad.split_with_sizes(sizes, -1), shapes)]
    with torch.enable_grad():
        leaves = [p.reshape(k, *s).requires_grad_(True)
                  for p, s in zip(flat.detach().split_with_sizes(sizes, -1), shapes)]
        # the weights' gradients written into their parts by the compiled kernels and row sums, where the compiled
        # convolutions are built (so is a compiler)
        into = {id(leaf): part for leaf, part in zip(leaves, parts)} if fused and fused_conv.enabled() else {}
        params = iter(leaves)
        first, rows, size = 0, False, None  # rows: h is (K, B, F), the rows of images of spatial ``size``
        if first_kernel:
            weight = next(params)
            bias = next(params) if layers[0].bias is not None else None
            layout = fused_conv.layout_for(layers, 3, size := fused_conv.pooled_size(layers[0], x))
            h = fused_conv.images(fused_conv.conv_pool_relu(x, weight, bias, layers[0].padding[0], layout,
                                                            into.get(id(weight))), layout)
            first, rows = 3, layout == "rows"
        else:
            h = side_by_side(x)
        later = None  # a convolution's bias, added after the max pooling that follows it
        skip = 0  # layers that a later convolution's kernel computed with it
        for i in range(first, len(layers)):
            layer, after, then = (layers[i : i + 3] + [None, None])[:3]
            if skip:
                skip -= 1
                continue
            if isinstance(layer, nn.Conv2d):
                weight = next(params)
                bias = next(params) if layer.bias is not None else None
                if fused and not rows:
                    images = h if h.dim() == 5 else h.unflatten(1, (k, -1)).transpose(0, 1)  # (K, B, C, H, W)
                    if fused_conv.fits_images(layer, after, then, images) and fused_conv.enabled():
                        layout = fused_conv.layout_for(layers, i + 3, size := fused_conv.pooled_size(layer, images))
                        out = fused_conv.conv_pool_relu_images(images, weight, bias, layer.padding[0], layout,
                                                               into.get(id(weight)))
                        h, rows, skip = fused_conv.images(out, layout), layout == "rows", 2
                        continue
                if h.dim() == 5:  # a kernel's output in the layout of a next kernel that does not fit after all
                    h = side_by_side(h)
                if rows and not covers_input(layer, size):
                    h, rows = _as_images(h), False
                if rows or covers_input(layer, h.shape[-2:]):
                    if not rows:
                        h, rows = _as_rows(h, k), True
                    part = into.get(id(weight))
                    h = _StackedLinear.apply(h, weight.flatten(2), bias, None if part is None else part.flatten(2))
                    size = (1, 1)
                else:
                    bias = None if bias is None else bias.flatten()
                    if isinstance(after, nn.MaxPool2d):
                        later, bias = bias, None
                    h = F.conv2d(h, weight.flatten(0, 1), bias, layer.stride, layer.padding, layer.dilation, groups=k)
            elif isinstance(layer, nn.MaxPool2d):
                if rows:
                    h, rows = _as_images(h), False
                h = F.max_pool2d(h, layer.kernel_size, layer.stride, layer.padding, layer.dilation, layer.ceil_mode)
                if later is not None:
                    h, later = h + later.view(-1, 1, 1), None
            elif isinstance(layer, nn.ReLU):
                h = F.relu(h)
            elif isinstance(layer, nn.Linear):
                weight = next(params)
                h = _StackedLinear.apply(h, weight, next(params) if layer.bias is not None else None,
                                         into.get(id(weight)))
            elif not rows:  # the flattening layer
                h, rows = _as_rows(h, k), True
        loss, grad_out = objective.loss_and_grad_out(h.detach(), y)  # written out: no graph for the loss
        # backward from the scalar <h, grad_out> (its gradient w.r.t. h is grad_out exactly): autograd checks a given
        # grad_outputs' shape with torch.fx's symbolic shapes, a slow first import in a run's first round
        got = torch.autograd.grad((h * grad_out).sum(), leaves, allow_unused=True)
    for part, g in zip(parts, got):  # the parts not written in place
        if g is None:
            part.zero_()
        elif g.data_ptr() != part.data_ptr():
            part.copy_(g)
    return loss.detach(), grad


class _StackedLinear(torch.autograd.Function):
    """A stacked step's Linear layer with its backward written out: (K, B, in) rows through each client's (K, out, in)
    weight and (K, out) bias as ``h @ weight^T + bias``. The weight's gradient ``g^T h`` goes straight into
    ``into``, its part of the cohort's flat gradient (rows contiguous, the clients d apart), by fedrun's compiled row
    sums (``fedrun/model/native/kernels/indexed_linear.cpp``: float32 on a CPU), where torch's batched product writes
    contiguous memory only and the flat gradient's assembly copied it again; without ``into`` or the kernel, that
    product. The rows' gradient is ``g @ weight``, the form of the product that torch's batched kernel runs fastest on a
    CPU for a minibatch of a few rows (GIFT's CIFAR cohort: ``python -m fedrun.bench.workloads --only
    lenet5_cifar_100``). Under autocast (``hardware.precision=bfloat16``) the forward's products run in the reduced
    type and the backward, which autocast does not reach, runs its products in the type the output gradient comes in
    and returns each gradient in its input's type, as autograd through the forward's casts would."""

    @staticmethod
    def forward(ctx, h, weight, bias, into):
        ctx.save_for_backward(h, weight)
        ctx.has_bias, ctx.into = bias is not None, into
        ctx.types = h.dtype, weight.dtype, None if bias is None else bias.dtype
        return stacked_linear(h, weight, bias)

    @staticmethod
    def backward(ctx, g):
        h, weight = ctx.saved_tensors
        h_type, weight_type, bias_type = ctx.types
        dh = torch.bmm(g, weight.to(g.dtype)).to(h_type) if ctx.needs_input_grad[0] else None
        dw = None
        if ctx.needs_input_grad[1]:
            dw = _weight_grad_into(g, h, ctx.into) if ctx.into is not None else None
            dw = torch.bmm(g.transpose(1, 2), h.to(g.dtype)).to(weight_type) if dw is None else dw
        db = g.sum(1).to(bias_type) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return dh, dw, db, None


def _weight_grad_into(g: torch.Tensor, h: torch.Tensor, into: torch.Tensor) -> torch.Tensor | None:
    """``g^T h`` written into ``into`` (K, out, in) by the compiled row sums, or None where they do not apply."""
    kernel = indexed_rows.kernel() if g.dtype == h.dtype == into.dtype == torch.float32 and g.device.type == "cpu" \
        else None
    if kernel is None or into.stride(2) != 1 or into.stride(1) != into.shape[2]:
        return None
    k, b, width = h.shape
    index = torch.arange(k * b, device=h.device).view(k, b)
    kernel.row_sums_into(h.reshape(k * b, width), index, g.contiguous(), into, False)
    return into


def side_by_side(x: torch.Tensor) -> torch.Tensor:
    """(K, B, C, H, W) minibatches as (B, K * C, H, W) images in channels-last memory (B, H, W, K, C), client k's
    channels at k * C ...: one copy. Also for C = 1, where a reshape alone would keep a strided view that oneDNN
    runs in NCHW (several times slower)."""
    k, b, c, height, width = x.shape
    return x.permute(1, 3, 4, 0, 2).contiguous().view(b, height, width, k * c).permute(0, 3, 1, 2)


def _as_rows(h: torch.Tensor, k: int) -> torch.Tensor:
    """(B, K * C, H, W) -> (K, B, C * H * W), each image flattened in (C, H, W) order as ``x.flatten(1)``."""
    return h.unflatten(1, (k, -1)).transpose(0, 1).flatten(2)


def _as_images(h: torch.Tensor) -> torch.Tensor:
    """(K, B, C) rows of 1x1 images (past a whole-window convolution) -> (B, K * C, 1, 1) images again."""
    return h.transpose(0, 1).reshape(h.shape[1], -1, 1, 1)


def stacked_linear(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """(K, B, in) rows through each client's (K, out, in) weight and (K, out) bias: a stacked step's Linear layer. A
    layer of one output (the smooth SVM's) is computed as ``weight @ h^T``: torch's batched product runs the form
    ``h @ weight^T``, (B x in)(in x 1) per client, several times slower on a CPU (BHerd's SVM cohort, 5 clients,
    B = 100: ``python -m fedrun.bench.workloads --only svm_mnist_5``). The same sums in another order."""
    if weight.shape[-2] == 1:
        rows_t = h.transpose(1, 2)
        out = weight @ rows_t if bias is None else torch.baddbmm(bias.unsqueeze(2), weight, rows_t)
        return out.transpose(1, 2)
    if bias is None:
        return h @ weight.transpose(1, 2)
    return torch.baddbmm(bias.unsqueeze(1), h, weight.transpose(1, 2))
