"""A model as pure functions of one flat parameter vector.

Algorithms and executors see parameters as a flat tensor ``w`` of length d (a client's state is a few such
vectors), so a cohort is a (K, d) stack that ``torch.func.vmap`` can map over, and server-side rules (aggregation,
harmonisers, herding) work on plain matrices. The ``nn.Module`` is only a template for ``functional_call``: no
per-client module copies exist anywhere.
"""

from __future__ import annotations

import contextlib
import copy

import torch
from torch import nn
from torch._C._functorch import maybe_current_level
from torch.nn.modules.utils import _pair
from torch.func import functional_call, grad_and_value

from fedrun.model import plain_backward
from fedrun.model.cohort_network import cohort_layers, stacked_linear, stacked_loss_and_grad
from fedrun.model.native import indexed_rows as in_place
from fedrun.model.native.fused_conv import (applies as kernel_applies, conv_pool_relu, conv_pool_relu_images,
                                            enabled as kernel_enabled, fits_images, reads_images)
from fedrun.model.zoo import Objective


plain_backward.install()


def dense_chain(module: nn.Module, objective: Objective) -> list[nn.Module] | None:
    """The layers of a model whose gradient fedrun writes out by hand: a Sequential of a flattening layer, then
    Linear and ReLU layers ending in a Linear, under an objective with a written-out output gradient (cross-entropy,
    the smooth SVM); None for any other model."""
    from fedrun.model.zoo import Flatten

    layers = list(module.children()) if isinstance(module, nn.Sequential) else []
    allowed = (nn.Linear, nn.ReLU, nn.Flatten, Flatten)
    if (not layers or objective.loss_and_grad_out is None or not all(type(m) in allowed for m in layers)
            or type(layers[0]) not in (nn.Flatten, Flatten) or not isinstance(layers[-1], nn.Linear)
            or any(isinstance(m, nn.Flatten) and (m.start_dim, m.end_dim) != (1, -1) for m in layers)
            or list(module.buffers())):
        return None
    return layers


def channels_last(x: torch.Tensor) -> torch.Tensor:
    """Images (N, C, H, W) in channels-last strides, also for one channel, where ``x.contiguous(memory_format=...)``
    keeps the NCHW strides (the two layouts coincide) and oneDNN then runs every later layer in NCHW, whose max
    pooling and small convolutions are several times slower on a CPU."""
    return torch.empty_like(x, memory_format=torch.channels_last).copy_(x)


CPU_IMAGE_CHUNK = 256  # images per forward pass when a convolutional model evaluates on a CPU (bench: eval_speedup)
CHANNELS_LAST_MIN_BATCH = 32  # smaller batches gain little from channels-last, and GIFT's B = 10 cohort lost
                              # (results/bench/README.md): NCHW


ONEDNN_MIN_MACS = 1 << 21  # smaller products gain little or lose: oneDNN's call costs more than torch's


def dense_product(h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, onednn: bool,
                  relu: bool = False) -> torch.Tensor:
    """``h @ w.T + b`` for a (B, in) batch, then a ReLU if ``relu``: a Linear layer's product. With ``onednn``, a
    float32 product of at least ONEDNN_MIN_MACS multiply-adds on a CPU that needs no autograd graph goes through
    oneDNN's linear kernel (with the ReLU fused), which runs AVX-512 where torch's matmul (MKL) may run AVX2 only
    (AMD CPUs: results/bench/cpu.md, ``linear_speedup``).
    The same values to float rounding; else torch's."""
    if (onednn and h.dtype == torch.float32 and h.device.type == "cpu" and h.dim() == 2
            and h.shape[0] * w.shape[0] * w.shape[1] >= ONEDNN_MIN_MACS and _onednn_linear is not None
            and not (torch.is_grad_enabled() and (h.requires_grad or w.requires_grad
                                                   or (b is not None and b.requires_grad)))):
        return _onednn_linear(h, w, b, "relu" if relu else "none", [], "")
    h = h @ w.T if b is None else torch.addmm(b, h, w.T)
    return torch.relu(h) if relu else h  # autograd's backward as nn.ReLU's (clamp_min's passes a zero input's)


def max_pool_views(h: torch.Tensor, pool: nn.MaxPool2d) -> torch.Tensor:
    """``pool(h)``. Without a graph, a non-overlapping pooling (kernel = stride, no padding or dilation, sizes
    rounded down) is the elementwise maximum of its window's strided views of the input: the same values (a maximum
    is exact, and NaN wins in both), faster on a CPU than torch's kernel, which works window by window over the
    channels: slow for few of them (LeNet-5's 6 and 16; the bench's evaluation table times a CNN's forward by hand).
    Any other pooling, and any under a graph, is torch's (autograd's maximum would share a tie's gradient; the
    pooling gives it to one element)."""
    kh, kw = _pair(pool.kernel_size)
    if ((kh, kw) != _pair(pool.stride) or _pair(pool.padding) != (0, 0) or _pair(pool.dilation) != (1, 1)
            or pool.ceil_mode or pool.return_indices or h.dim() != 4
            or (torch.is_grad_enabled() and h.requires_grad)):
        return pool(h)
    rows, cols = h.shape[-2] // kh * kh, h.shape[-1] // kw * kw
    out = None
    for i in range(kh):
        for j in range(kw):
            view = h[..., i:rows:kh, j:cols:kw]
            out = view if out is None else torch.maximum(out, view)
    return out


_onednn_linear = getattr(torch.ops.mkldnn, "_linear_pointwise", None) if torch.backends.mkldnn.is_available() else None


@contextlib.contextmanager
def without_cudnn():
    """cuDNN off for a recurrent layer's forward under torch.func (the vmap executor on a GPU): its RNN kernels
    read their weights' storage (``flatten_parameters``), which torch.func's tensors do not have; torch's own
    kernels compute the same layers, to float rounding."""
    enabled = torch.backends.cudnn.enabled
    torch.backends.cudnn.enabled = False
    try:
        yield
    finally:
        torch.backends.cudnn.enabled = enabled


def prefers_channels_last(module: nn.Module, device: torch.device) -> bool:
    """``hardware.layout=auto``: channels-last on a CPU for a model with 2-d convolutions (for batches of at least
    CHANNELS_LAST_MIN_BATCH images: results/bench/cpu.md); GPUs keep their layout."""
    return device.type == "cpu" and any(isinstance(m, nn.Conv2d) for m in module.modules())


class FunctionalModel:
    def __init__(self, module: nn.Module, objective: Objective, by_hand: bool = True, channels_last: bool = False,
                 cohort_network: bool = False, onednn: bool = False, fused_conv: bool = False,
                 indexed_rows: bool = False):
        """``by_hand``: a dense chain (``dense_chain``) computes its gradient by hand, as backprop written out in a
        dozen tensor operations: the same gradient as autograd to float rounding, at a fraction of the
        per-step overhead of autograd's graph (and of vmap's over it), which dominates the small models of
        FSVRG's, BHerd's and FedGH's settings; and a Sequential CNN's forward for one model outside
        torch.func runs by hand (``_image_forward``: the module's outputs and gradients). ``channels_last``:
        image batches of at least CHANNELS_LAST_MIN_BATCH images enter the model in channels-last strides
        (one client at a time and in evaluation; a vmapped cohort keeps its layout), the same arithmetic to
        float rounding. ``cohort_network``: a (K, d) stack of a Sequential CNN's clients steps as one network
        (``fedrun/model/cohort_network.py``: grouped convolutions). ``onednn``: a dense
        chain's forward without a graph (evaluation) runs by hand, and the large products of a forward by
        hand without a graph (a dense chain's, a CNN's Linear layers) go through oneDNN (``dense_product``);
        training steps keep torch's products, the same in every executor. ``fused_conv`` (with ``cohort_network``):
        a training step's first convolution, max pooling and ReLU run as one compiled kernel where it fits
        (``fedrun/model/native/fused_conv.py``), a lone client's step too (as a cohort of one). ``indexed_rows``: a
        dense chain of one Linear layer takes a training step on its minibatch in place, the rows of the training inputs
        that its index picks, in one compiled kernel where it fits (``reads_rows``,
        ``fedrun/model/native/indexed_rows.py``); so does the first kernel of ``fused_conv`` (a cohort's images read
        where they lie)."""
        self.module = module
        self.objective = objective
        self.by_hand = by_hand
        self.chain = dense_chain(module, objective) if by_hand else None
        image_layers = cohort_layers(module, objective) if self.chain is None else None
        self.image_layers = image_layers if by_hand else None  # a Sequential CNN's forward by hand
        self.cohort = image_layers if cohort_network else None
        self.channels_last = channels_last
        self.onednn = onednn
        self.fused_conv = fused_conv and self.cohort is not None
        self.indexed_rows = indexed_rows and (self.chain is not None or self.fused_conv)
        named = list(module.named_parameters())
        self.names = [n for n, _ in named]
        self.shapes = [tuple(p.shape) for _, p in named]  # tuples: torch's view parses them faster than a Size
        self.numels = [p.numel() for _, p in named]
        self.dim = sum(self.numels)
        self.buffer_names = [n for n, _ in module.named_buffers()]
        self._training = module.training
        self._features: list[torch.Tensor] | None = None  # a list only while a feature penalty needs them
        heads = [m for m in module.modules() if isinstance(m, nn.Linear)]
        self._head = heads[-1] if heads else None  # its input: the penultimate features (FedDecorr)
        self._hook = self._head.register_forward_pre_hook(self._keep_features) if self._head is not None else None
        self.recurrent = any(isinstance(m, nn.RNNBase) for m in module.modules())
        self.grad_and_loss = grad_and_value(self._loss)

    def replica(self) -> FunctionalModel:
        """The same model on a copy of the module template (for another thread: ``functional_call`` swaps the
        template's parameters while it runs)."""
        if self._hook is not None:
            self._hook.remove()  # not copied along (it is bound to this model): the copy registers its own
        try:
            module = copy.deepcopy(self.module)
        finally:
            if self._hook is not None:
                self._hook = self._head.register_forward_pre_hook(self._keep_features)
        return FunctionalModel(module, self.objective, self.by_hand, self.channels_last,
                               self.cohort is not None, self.onednn, self.fused_conv, self.indexed_rows)

    @property
    def stacks(self) -> bool:
        """A (K, d) stack of clients' parameters with (K, B, ...) minibatches gives K losses and a (K, d) gradient
        without vmap: a dense chain's gradient by hand, or a Sequential CNN's cohort as one network."""
        return self.chain is not None or self.cohort is not None

    def reads_rows(self, x: torch.Tensor) -> bool:
        """Whether a training step's minibatch of the inputs ``x`` comes as ``indexed_rows.IndexedRows`` (a kernel
        reads it in place; the kernel is built now if it was not) rather than gathered: ``indexed_rows`` is on and its
        kernel fits the model (a one-layer one) and ``x``, or the first convolution's kernel (``fused_conv``) reads
        the images of ``x`` (``fused_conv.reads_images``)."""
        if not self.indexed_rows:
            return False
        if self.chain is not None:
            return in_place.fits(self.chain, self.objective, x) and in_place.enabled()
        return reads_images(self.cohort, x)

    # -- parameters as one vector -------------------------------------------------------------------------------
    def init_params(self) -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1) for p in self.module.parameters()]).clone()

    def init_buffers(self) -> dict[str, torch.Tensor]:
        return {n: b.detach().clone() for n, b in self.module.named_buffers()}

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        return {n: t.view(s) for n, t, s in zip(self.names, flat.split_with_sizes(self.numels), self.shapes)}

    @property
    def param_bytes(self) -> int:
        return self.dim * 4

    def buffer_bytes(self, buffers: dict[str, torch.Tensor]) -> int:
        return sum(b.numel() * b.element_size() for b in buffers.values())

    # -- forward, loss, gradient --------------------------------------------------------------------------------
    def set_training(self, training: bool) -> None:
        if training != self._training:
            self.module.train(training)
            self._training = training

    def forward(self, flat: torch.Tensor, buffers: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        if (self.onednn and self.chain is not None and flat.dim() == 1 and maybe_current_level() is None
                and not (torch.is_grad_enabled() and flat.requires_grad)):
            return self._chain_forward(flat, x, onednn=True)[0]
        if (self.channels_last and x.dim() == 4 and len(x) >= CHANNELS_LAST_MIN_BATCH
                and maybe_current_level() is None):  # not under vmap or grad
            x = channels_last(x)
        if (self.image_layers is not None and flat.dim() == 1 and self._features is None
                and maybe_current_level() is None):
            return self._image_forward(flat, x)
        under_func = self.recurrent and flat.is_cuda and maybe_current_level() is not None
        with without_cudnn() if under_func else contextlib.nullcontext():
            return functional_call(self.module, {**self.unflatten(flat), **buffers}, (x,))

    def _image_forward(self, flat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """A Sequential CNN's forward for one model, outside torch.func, in its cohort network's order of layers: a
        ReLU directly before a max pooling runs after it, on a quarter of the values, with the same outputs and,
        under autograd, the same gradients bit for bit (the pooling picks the same element either way, and the
        ReLU's backward sees its value), which saves a single client's step (the loop executor's, a cohort's last
        client) the ReLU and its backward over the convolution's whole output. Without a graph (evaluation) the
        poolings are ``max_pool_views``, the Linear layers ``dense_product`` (oneDNN for large products with
        ``onednn``, a following ReLU fused) and, with ``fused_conv``, each convolution, pooling and ReLU that a
        compiled kernel fits one call of it (``fedrun/model/native/fused_conv.py``). Conv2d's own ``_conv_forward``
        computes the other convolutions."""
        params = iter(self.unflatten(flat).values())
        layers, h, fused = self.image_layers, x, False
        graph = torch.is_grad_enabled() and flat.requires_grad
        if self.fused_conv and not graph and kernel_applies(layers, x[None]):  # evaluation: the first layers as one
            w = next(params)
            b = next(params) if layers[0].bias is not None else None
            h = conv_pool_relu(x[None], w[None], None if b is None else b[None], layers[0].padding[0])[0]
            layers = layers[3:]
        skip = 0  # layers that a later convolution's kernel computed with it
        for i, layer in enumerate(layers):
            after, then = (layers[i + 1 : i + 3] + [None, None])[:2]
            if skip:
                skip -= 1
                continue
            if isinstance(layer, (nn.Conv2d, nn.Linear)):
                w = next(params)
                b = next(params) if layer.bias is not None else None
                if (isinstance(layer, nn.Conv2d) and self.fused_conv and not graph
                        and fits_images(layer, after, then, h[None]) and kernel_enabled()):
                    bias = None if b is None else b[None]
                    h, skip = conv_pool_relu_images(h[None], w[None], bias, layer.padding[0])[0], 2
                elif isinstance(layer, nn.Conv2d):
                    h = layer._conv_forward(h, w, b)
                else:
                    fused = isinstance(after, nn.ReLU)
                    h = dense_product(h, w, b, self.onednn, relu=fused)
            elif isinstance(layer, nn.ReLU):
                h, fused = h if fused else torch.relu(h), False
            elif isinstance(layer, nn.MaxPool2d):
                h = max_pool_views(h, layer)
            else:  # the flattening layer
                h = layer(h)
        return h

    def _keep_features(self, module, args):
        if self._features is not None:
            self._features.append(args[0])

    def _loss(self, flat, buffers, x, y, feature_penalty=None):
        if feature_penalty is None:
            return self.objective.loss(self.forward(flat, buffers, x), y)
        self._features = []
        try:
            out = self.forward(flat, buffers, x)
            return self.objective.loss(out, y) + feature_penalty(self._features[-1].flatten(1))
        finally:
            self._features = None

    def loss_and_grad(self, flat, buffers, x, y, feature_penalty=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Minibatch loss and its gradient w.r.t. ``flat``. BatchNorm running statistics in ``buffers`` are
        updated in place (pass a client's own copy). ``feature_penalty(z)`` adds a term on the penultimate
        features z (the input of the last linear layer)."""
        self.set_training(True)
        if self.chain is not None and feature_penalty is None:
            return self._loss_and_grad_by_hand(flat, x, y)
        if self.cohort is not None and flat.dim() == 2 and feature_penalty is None:
            return stacked_loss_and_grad(self.cohort, self.objective, self.shapes, flat, x, y, self.fused_conv)
        if self.fused_conv and flat.dim() == 1 and feature_penalty is None and maybe_current_level() is None:
            one = x.stacked() if isinstance(x, in_place.IndexedRows) else x[None]  # a cohort of one
            if kernel_applies(self.cohort, one):
                loss, g = stacked_loss_and_grad(self.cohort, self.objective, self.shapes, flat[None], one, y[None],
                                                fused=True)
                return loss[0], g[0]
        if isinstance(x, in_place.IndexedRows):
            x = x.gathered()
        if maybe_current_level() is not None:  # inside a torch.func transform (the vmap executor)
            g, loss = self.grad_and_loss(flat, buffers, x, y, feature_penalty)
            return loss, g
        with torch.enable_grad():  # one client at a time: plain autograd, without torch.func's per-call wrapping
            w = flat.detach().requires_grad_(True)
            loss = self._loss(w, buffers, x, y, feature_penalty)
            (g,) = torch.autograd.grad(loss, w)
        return loss.detach(), g

    def _loss_and_grad_by_hand(self, flat, x, y) -> tuple[torch.Tensor, torch.Tensor]:
        """The chain's forward (``_chain_forward``), then backward: dW = d^T h, db = sum(d), d <- (d W) * mask. The
        gradient comes back flat, in the parameters' order. ``flat`` may be a (K, d) stack of clients' parameters
        with (K, B, ...) minibatches: K losses and a (K, d) gradient, in batched matrix products (the vmap
        executor's native step). A minibatch of ``indexed_rows.IndexedRows`` (``reads_rows``) takes the compiled
        kernel's step instead: the same values to float rounding."""
        if isinstance(x, in_place.IndexedRows):
            return in_place.loss_and_grad(x, flat, y, self.chain[-1], self.objective)
        lead = flat.shape[:-1]
        h, saved = self._chain_forward(flat, x, onednn=False)  # a step's products: the same in every executor
        loss, d = self.objective.loss_and_grad_out(h, y)
        grads = []
        for i, entry in enumerate(reversed(saved)):
            if isinstance(entry[0], nn.ReLU):  # d * (output > 0) in one kernel, as autograd's ReLU backward
                d = torch.ops.aten.threshold_backward(d, entry[1], 0)
                continue
            _, inputs, w, b = entry
            if b is not None:
                grads.append(d.sum(-2))
            grads.append(d.transpose(-1, -2) @ inputs)
            if i < len(saved) - 1:
                d = d @ w
        return loss.detach(), torch.cat([g.reshape(*lead, -1) for g in reversed(grads)], dim=-1)

    def _chain_forward(self, flat, x, onednn: bool) -> tuple[torch.Tensor, list[tuple]]:
        """The dense chain's output, keeping each Linear's input and each ReLU's output for the backward pass."""
        lead = flat.shape[:-1]
        if lead:
            chunks = flat.split_with_sizes(self.numels, dim=-1)
            params = iter(t.reshape(*lead, *s) for t, s in zip(chunks, self.shapes))
        else:
            params = iter(self.unflatten(flat).values())
        h, saved, fused = x, [], False
        for layer, after in zip(self.chain, [*self.chain[1:], None]):
            if isinstance(layer, nn.Linear):
                w = next(params)
                b = next(params) if layer.bias is not None else None
                saved.append((layer, h, w, b))
                if not lead:
                    fused = isinstance(after, nn.ReLU)
                    h = dense_product(h, w, b, onednn, relu=fused)
                else:
                    h = stacked_linear(h, w, b)
            elif isinstance(layer, nn.ReLU):
                h, fused = h if fused else h.clamp_min(0), False  # a ReLU fused into the product: done
                saved.append((layer, h))
            else:
                h = h.flatten(len(lead) + 1)
        return h, saved

    @torch.no_grad()
    def evaluate(self, flat, buffers, x, y, batch_size: int = 2048) -> tuple[float, float]:
        """(accuracy, mean loss) on (x, y), in eval mode."""
        hits, units, loss = self.evaluate_hits(flat, buffers, x, y, batch_size)
        return float(hits.sum()) / max(1.0, float(units.sum())), loss

    def evaluate_hits(self, flat, buffers, x, y, batch_size: int = 2048
                      ) -> tuple[torch.Tensor, torch.Tensor, float]:
        """Per sample: correct predictions and predictions that count (1 and 1 for a class label), and the mean
        loss per counted prediction, on (x, y) in eval mode. The loss is summed on the device in float64, batch by
        batch as the host would sum it, and read once: a GPU is not waited for after every batch."""
        self.set_training(False)
        if self.channels_last:  # convolutions on a CPU: cache-sized chunks run about twice as fast as 2048 images
            batch_size = min(batch_size, CPU_IMAGE_CHUNK)
        hits, units, loss_sum = [], [], 0.0
        for s in range(0, len(y), batch_size):
            out = self.forward(flat, buffers, x[s : s + batch_size])
            yb = y[s : s + batch_size]
            units.append(self.objective.units(yb).to(out.dtype))
            loss_sum = loss_sum + self.objective.loss(out, yb).double() * units[-1].sum().double()
            hits.append(self.objective.hits(out, yb).to(out.dtype))
        if not hits:
            return torch.zeros(0), torch.zeros(0), 0.0
        hits, units = torch.cat(hits), torch.cat(units)
        return hits, units, float(loss_sum) / max(1.0, float(units.sum()))
