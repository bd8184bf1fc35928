"""Model registry. Each model adapts to the dataset's input shape and class count and declares which inputs it takes,
so ``model=X data=Y`` can be refused before any work when they do not fit."""

from __future__ import annotations

import functools

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch._C._functorch import maybe_current_level

from fedrun.data.base import IGNORE
from fedrun.errors import ConfigError


@dataclass(frozen=True)
class Objective:
    """The training loss and, per sample, how many predictions are correct (``hits``) out of how many that count
    (``units``: 1 for a class label; a sequence target's counted tokens). Accuracy = sum(hits) / sum(units)."""

    name: str
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    hits: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    units: Callable[[torch.Tensor], torch.Tensor] = lambda y: torch.ones(len(y), device=y.device)
    # a target the loss does not score (its mean leaves it out), so clients' data of different lengths can be padded
    # to one length and batched; None when the loss scores every target
    pad_target: int | None = None
    # the class the model predicts for a dataset label, when it is not the label itself (even/odd for the SVM), so a
    # partition can deal the task's classes (partition=case2 label_deal=task); None: the label itself
    task_class: Callable[[np.ndarray], np.ndarray] | None = None
    # the loss and its gradient w.r.t. the model's output, written out (a dense model's gradient by hand,
    # FunctionalModel.loss_and_grad); None: autograd's
    loss_and_grad_out: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None

    def correct(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.hits(out, y).sum()


def log_softmax_classes(out: torch.Tensor) -> torch.Tensor:
    """``out.log_softmax(-1)``. With fewer than 16 classes and at least 64 rows, outside autograd's graph, over a
    transposed copy: torch's CPU kernel along the last axis runs row by row there (about 0.1 us a row for 10
    classes: 200 us for an evaluation batch of 2048), several times slower than along an earlier axis, which gives
    the same values bit for bit on CPUs whose kernels vectorise both alike (AVX-512) but not on every CPU (AVX2 rounds
    a few ulps apart): :func:`_transposed_is_exact` checks this CPU once per class count. A graph keeps the last axis
    (its backward kernel along another axis rounds differently), so autograd's training steps compute as they always
    have."""
    if (out.shape[-1] < 16 and out.dim() >= 2 and out.numel() >= 64 * out.shape[-1] and out.device.type == "cpu"
            and not (out.requires_grad and torch.is_grad_enabled()) and _transposed_is_exact(out.shape[-1], out.dtype)):
        return out.transpose(-1, -2).contiguous().log_softmax(-2).transpose(-1, -2)
    return out.log_softmax(-1)


@functools.cache
def _transposed_is_exact(classes: int, dtype: torch.dtype) -> bool:
    """Whether this CPU's log_softmax along an earlier axis gives the last axis's values bit for bit, for this many
    classes: checked once on a probe of 300 rows of varied logits (no random draw: it may first be asked under
    torch.func's vmap, where one is refused)."""
    probe = 10 * torch.sin(0.618 * torch.arange(300 * classes, dtype=dtype)).reshape(300, classes)
    return torch.equal(probe.t().contiguous().log_softmax(0).t(), probe.log_softmax(-1))


def _cross_entropy(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The mean cross-entropy over the scored targets of (N, C) logits (``F.cross_entropy``)."""
    return F.nll_loss(log_softmax_classes(out), y, ignore_index=IGNORE)


def _cross_entropy_and_grad(out: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean cross-entropy over the scored targets of (..., N, C) logits (a leading axis: one loss per client), and its
    gradient (softmax - one-hot) / n. A minibatch whose every target is scored (no padding: a training step's) takes
    ``_every_target_scored``: the same values bit for bit in half the operations (a small model's step is mostly the
    cost of its operations' calls). The check reads the targets' values on the host, so only on a CPU (on a GPU it
    would wait for the device every step), not under torch.func's transforms (the vmap executor's wrapped steps) and not
    for logits in an autograd graph: those take the general case."""
    if (host_reads_targets(y) and maybe_current_level() is None and not out.requires_grad and y.numel()
            and bool((y >= 0).all())):
        return _every_target_scored(out, y)
    return _some_targets_unscored(out, y)


def host_reads_targets(y: torch.Tensor) -> bool:
    """Whether a step may read its targets' values on the host: on a CPU, where that costs nothing; never on a GPU,
    where it would wait for the device, and a CUDA graph could not replay it."""
    return y.device.type == "cpu"


def _every_target_scored(out: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``_some_targets_unscored`` where no target is IGNORE: n = N, no masks; exp and the one-hot subtracted in the
    log-probabilities' memory, the gradient row-major as the general case's (so later products round the same).
    ``out`` outside any autograd graph."""
    logp = log_softmax_classes(out)
    index = y.unsqueeze(-1)
    n = y.shape[-1]
    loss = -logp.gather(-1, index).squeeze(-1).sum(-1) / n
    grad = logp.exp_().scatter_add_(-1, index, torch.full(index.shape, -1.0, dtype=out.dtype, device=out.device))
    return loss, grad.contiguous().mul_(torch.ones((), dtype=out.dtype, device=out.device) / n)  # 1/n as the masks' 1/n


def _some_targets_unscored(out: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The general case: targets equal to IGNORE (padding) count neither in the mean nor in the gradient."""
    scored = y != IGNORE
    n = scored.sum(-1, keepdim=True)
    logp = log_softmax_classes(out)
    target = torch.where(scored, y, 0)
    loss = -(logp.gather(-1, target.unsqueeze(-1)).squeeze(-1) * scored).sum(-1) / n.squeeze(-1)
    index = target.unsqueeze(-1)
    grad = logp.exp().scatter_add(-1, index, torch.full(index.shape, -1.0, dtype=out.dtype, device=out.device))
    return loss, grad * (scored.to(out.dtype) / n).unsqueeze(-1)


CROSS_ENTROPY = Objective("cross_entropy", _cross_entropy,
                          lambda out, y: out.argmax(dim=-1) == y, pad_target=IGNORE,
                          loss_and_grad_out=_cross_entropy_and_grad)


def _sequence_hits(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """LEAF's Reddit accuracy (models/reddit/stacked_lstm.py): a scored token is correct when the argmax equals it,
    except that predicting padding (id 0) or the unknown word (id 1) always counts as wrong."""
    pred = out.argmax(dim=1)
    return ((pred == y) & (pred > 1) & (y != IGNORE)).sum(dim=1).to(out.dtype)


# next-token prediction over a sequence: out (N, V, T), y (N, T); the mean cross-entropy over scored tokens
SEQUENCE_CROSS_ENTROPY = Objective("sequence_cross_entropy",
                                   lambda out, y: F.cross_entropy(out, y, ignore_index=IGNORE), _sequence_hits,
                                   lambda y: (y != IGNORE).sum(dim=1).to(torch.float32), pad_target=IGNORE)


def _parity_target(y: torch.Tensor) -> torch.Tensor:
    return 1.0 - 2.0 * (y % 2).to(torch.float32)  # +1 for even digits, -1 for odd


# BHerd's "squared-SVM" (footnote 1), written as Wang et al.'s (JSAC 2019) smooth SVM on even/odd MNIST:
# f(w) = 1/2 mean_j max(0, 1 - y_j w.x_j)^2, y = +1 for even digits; its lambda/2 ||w||^2 is fl.weight_decay.
def _squared_hinge_parity_and_grad(out: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The smooth SVM's loss on (..., N, 1) scores and its gradient: -t max(0, 1 - t o) / N."""
    t = _parity_target(y).to(out.dtype)
    margin = F.relu(1.0 - t * out.squeeze(-1))
    return 0.5 * margin.pow(2).mean(-1), (-t * margin / y.shape[-1]).unsqueeze(-1)


SQUARED_HINGE_PARITY = Objective(
    "squared_hinge_parity",
    lambda out, y: 0.5 * F.relu(1.0 - _parity_target(y) * out.squeeze(-1)).pow(2).mean(),
    lambda out, y: (out.squeeze(-1) >= 0) == (y % 2 == 0),
    task_class=lambda y: y % 2,  # 0: even, 1: odd
    loss_and_grad_out=_squared_hinge_parity_and_grad,
)


class Flatten(nn.Module):
    def forward(self, x):
        return x.flatten(1)


def covers_input(conv: nn.Conv2d, size) -> bool:
    """The convolution's window covers its whole unpadded input of spatial ``size``: one output position, a matrix
    product of the flattened input and the flattened kernels."""
    return (tuple(size) == tuple(conv.kernel_size) and conv.padding in ((0, 0), "valid") and conv.dilation == (1, 1)
            and conv.groups == 1)


class WindowConv2d(nn.Conv2d):
    """A convolution whose window may cover its whole input (LeNet-5's third: 5x5 kernels on 5x5 maps), computed
    then as the matrix product it is: one output position, ``x.flatten(-3) @ W.flatten(1)^T + b``. The same
    parameters and result as ``nn.Conv2d`` (to float rounding), faster than a CPU's oneDNN convolution of this shape
    (results/bench/window-conv-cpu.md). Other inputs go to ``nn.Conv2d``."""

    def _conv_forward(self, x, weight, bias):  # nn.Conv2d's forward calls it with the layer's own parameters
        if not covers_input(self, x.shape[-2:]):
            return super()._conv_forward(x, weight, bias)
        return F.linear(x.flatten(-3), weight.flatten(1), bias)[..., None, None]


def _linear(shape, classes, mcfg):
    return nn.Sequential(Flatten(), nn.Linear(math.prod(shape), classes))


def _svm(shape, classes, mcfg):
    """BHerd footnote 1: one linear unit scoring even vs odd. ``bias`` and ``init=zeros`` select the prototype
    system's w.x with w_0 = 0 (Wang et al.); the defaults are PyTorch's Linear."""
    layer = nn.Linear(math.prod(shape), 1, bias=bool(mcfg.bias))
    if mcfg.init == "zeros":
        nn.init.zeros_(layer.weight)
        if layer.bias is not None:
            nn.init.zeros_(layer.bias)
    return nn.Sequential(Flatten(), layer)


def _mlp(shape, classes, mcfg):
    hidden = list(mcfg.hidden)
    layers, width = [Flatten()], math.prod(shape)
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    return nn.Sequential(*layers, nn.Linear(width, classes))


def _conv_out(h: int, k: int, pad: int = 0, pool: int = 1) -> int:
    return (h + 2 * pad - k + 1) // pool


def _cnn_bherd(shape, classes, mcfg):
    """BHerd footnote 2: two 5x5x32 convolutions (same padding) with 2x2 max-pool, FC 1568x256 (28x28), FC 256xC."""
    c, h, w = shape
    flat = 32 * (h // 4) * (w // 4)
    return nn.Sequential(nn.Conv2d(c, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         Flatten(), nn.Linear(flat, 256), nn.ReLU(), nn.Linear(256, classes))


def _cnn_fedgh(shape, classes, mcfg):
    """McMahan et al.'s CIFAR CNN (NOTES.md: FedGH's "CNN with two convolution layers"): conv 5x5 32, pool,
    conv 5x5 64, pool, FC 512, FC C; no padding (flatten 1600 on 32x32)."""
    c, h, w = shape
    oh, ow = _conv_out(_conv_out(h, 5, pool=2), 5, pool=2), _conv_out(_conv_out(w, 5, pool=2), 5, pool=2)
    return nn.Sequential(nn.Conv2d(c, 32, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 5), nn.ReLU(),
                         nn.MaxPool2d(2), Flatten(), nn.Linear(64 * oh * ow, 512), nn.ReLU(), nn.Linear(512, classes))


def _cnn_leaf_femnist(shape, classes, mcfg):
    """LEAF's FEMNIST CNN (models/femnist/cnn.py): conv 5x5 32 (same) + ReLU, max-pool 2, conv 5x5 64 (same) + ReLU,
    max-pool 2, FC 2048 + ReLU, FC C."""
    c, h, w = shape
    return nn.Sequential(nn.Conv2d(c, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 5, padding=2),
                         nn.ReLU(), nn.MaxPool2d(2), Flatten(), nn.Linear(64 * (h // 4) * (w // 4), 2048), nn.ReLU(),
                         nn.Linear(2048, classes))


def _cnn_leaf_celeba(shape, classes, mcfg):
    """LEAF's CelebA CNN (models/celeba/cnn.py): four blocks of conv 3x3 32 (same), BatchNorm, max-pool 2 (TF's
    'same' padding: ceil), ReLU; FC C. LEAF's BatchNorm always normalises with the batch's statistics (training=True
    in TF); fedrun's uses running statistics at evaluation, as PyTorch does."""
    c, h, w = shape
    layers, channels = [], c
    for _ in range(4):
        layers += [nn.Conv2d(channels, 32, 3, padding=1), nn.BatchNorm2d(32), nn.MaxPool2d(2, ceil_mode=True),
                   nn.ReLU()]
        channels, h, w = 32, math.ceil(h / 2), math.ceil(w / 2)
    return nn.Sequential(*layers, Flatten(), nn.Linear(32 * h * w, classes))


def _cnn_reddi(shape, classes, mcfg):
    """Reddi et al.'s EMNIST CNN: conv 3x3 32, conv 3x3 64, max-pool 2, dropout .25, FC 128, dropout .5, FC C."""
    c, h, w = shape
    oh, ow = (h - 4) // 2, (w - 4) // 2
    return nn.Sequential(nn.Conv2d(c, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Dropout(0.25), Flatten(), nn.Linear(64 * oh * ow, 128), nn.ReLU(), nn.Dropout(0.5),
                         nn.Linear(128, classes))


def _cnn3(shape, classes, mcfg):
    """DGT's "three-layer CNN" (the paper gives no sizes): conv 3x3 32 + pool, conv 3x3 64 + pool, FC C."""
    c, h, w = shape
    return nn.Sequential(nn.Conv2d(c, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         Flatten(), nn.Linear(64 * (h // 4) * (w // 4), classes))


def _lenet5(shape, classes, mcfg):
    """LeNet-5 as in GraB's code: conv 5x5 6, pool, conv 5x5 16, pool, conv 5x5 120, FC 84, FC C. Inputs smaller
    than 32x32 (MNIST) are zero-padded to 32x32 by the first convolution, as LeCun did. The third convolution's
    window is its whole 5x5 input at 32x32: a matrix product (:class:`WindowConv2d`)."""
    c, h, w = shape
    pad = max(0, (32 - min(h, w) + 1) // 2)
    s = _conv_out(_conv_out(min(h, w) + 2 * pad, 5, pool=2), 5, pool=2)
    return nn.Sequential(nn.Conv2d(c, 6, 5, padding=pad), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(),
                         nn.MaxPool2d(2), WindowConv2d(16, 120, 5), nn.ReLU(), Flatten(),
                         nn.Linear(120 * (s - 4) ** 2, 84), nn.ReLU(), nn.Linear(84, classes))


def _vgg16(shape, classes, mcfg):
    """torchvision's VGG-16 feature stack (with BatchNorm if ``model.batch_norm``) and the CIFAR-style classifier
    (global pooling, FC 512 -> C) that CIFAR papers use instead of the 4096-wide ImageNet head."""
    from torchvision.models import vgg16, vgg16_bn

    net = (vgg16_bn if mcfg.batch_norm else vgg16)(weights=None)
    features = net.features
    if shape[0] != 3:
        features[0] = nn.Conv2d(shape[0], 64, 3, padding=1)
    return nn.Sequential(features, nn.AdaptiveAvgPool2d(1), Flatten(), nn.Linear(512, classes))


def _mobilenetv2(shape, classes, mcfg):
    """torchvision's MobileNetV2 (BatchNorm); the stem takes the dataset's channel count."""
    from torchvision.models import mobilenet_v2

    net = mobilenet_v2(weights=None, num_classes=classes, width_mult=float(mcfg.width_mult),
                       dropout=float(mcfg.dropout))
    if shape[0] != 3:
        net.features[0][0] = nn.Conv2d(shape[0], net.features[0][0].out_channels, 3, 2, 1, bias=False)
    return net


class RecurrentClassifier(nn.Module):
    """Embedding (for token inputs) -> stacked GRU/LSTM -> the final hidden state of every layer, concatenated ->
    MLP head. BHerd's RNN (footnote 3): vocab 1000, embedding 100, 2 GRU layers of 100, FC 200x50 + ReLU, FC 50x2."""

    def __init__(self, cell: str, shape, classes, vocab_size, embed_dim, hidden, layers, head_hidden, tokens):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim) if tokens else None
        in_dim = embed_dim if tokens else shape[-1]
        self.rnn = (nn.GRU if cell == "gru" else nn.LSTM)(in_dim, hidden, num_layers=layers, batch_first=True)
        width = hidden * layers
        self.head = nn.Sequential(*([nn.Linear(width, head_hidden), nn.ReLU(), nn.Linear(head_hidden, classes)]
                                    if head_hidden else [nn.Linear(width, classes)]))

    def forward(self, x):
        if self.embedding is not None:
            x = self.embedding(x)
        _, state = self.rnn(x)
        h = state[0] if isinstance(state, tuple) else state  # (layers, B, hidden)
        return self.head(h.transpose(0, 1).flatten(1))


class RecurrentLanguageModel(nn.Module):
    """LEAF's Reddit model (models/reddit/stacked_lstm.py): a word embedding of width ``hidden``, ``layers`` stacked
    LSTMs of ``hidden`` units and a softmax over the vocabulary at every step. Output (N, vocab, T)."""

    def __init__(self, shape, classes, vocab_size, hidden, layers):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, hidden)
        self.rnn = nn.LSTM(hidden, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        out, _ = self.rnn(self.embedding(x))
        return self.head(out).transpose(1, 2)


def _lstm_lm(shape, classes, mcfg):
    return RecurrentLanguageModel(shape, classes, int(mcfg.vocab_size), int(mcfg.hidden), int(mcfg.layers))


def _recurrent(cell):
    def build(shape, classes, mcfg, kind):
        return RecurrentClassifier(cell, shape, classes, mcfg.vocab_size, mcfg.embed_dim, mcfg.hidden, mcfg.layers,
                                   mcfg.head_hidden, tokens=(kind == "tokens"))

    return build


def affine_parameter_features(shape: tuple[int, ...], classes: int) -> torch.Tensor:
    """The input feature each parameter of one affine layer on the flattened input multiplies (its weight
    (classes, q) row-major, then the bias, whose constant feature is index q): what FSVRG's per-feature scalings
    (``algo.local.scaling=features``) need to act on parameters."""
    q = math.prod(shape)
    return torch.cat([torch.arange(q).repeat(classes), torch.full((classes,), q)])


@dataclass(frozen=True)
class ModelSpec:
    build: Callable
    kinds: tuple[str, ...]
    min_hw: int = 1
    objective: Objective = CROSS_ENTROPY
    needs_kind: bool = False
    parameter_features: Callable[[tuple[int, ...], int], torch.Tensor] | None = None  # see affine_parameter_features

    @property
    def sequence_output(self) -> bool:
        return self.objective is SEQUENCE_CROSS_ENTROPY


MODELS: dict[str, ModelSpec] = {
    "svm": ModelSpec(_svm, ("image", "vector"), objective=SQUARED_HINGE_PARITY),
    "logreg": ModelSpec(_linear, ("image", "vector"), parameter_features=affine_parameter_features),
    "mlp": ModelSpec(_mlp, ("image", "vector")),
    "cnn_bherd": ModelSpec(_cnn_bherd, ("image",), min_hw=4),
    "cnn_fedgh": ModelSpec(_cnn_fedgh, ("image",), min_hw=16),
    "cnn_reddi": ModelSpec(_cnn_reddi, ("image",), min_hw=6),
    "cnn3": ModelSpec(_cnn3, ("image",), min_hw=4),
    "cnn_leaf_femnist": ModelSpec(_cnn_leaf_femnist, ("image",), min_hw=4),
    "cnn_leaf_celeba": ModelSpec(_cnn_leaf_celeba, ("image",), min_hw=16),
    "lenet5": ModelSpec(_lenet5, ("image",), min_hw=28),
    "vgg16": ModelSpec(_vgg16, ("image",), min_hw=32),
    "mobilenetv2": ModelSpec(_mobilenetv2, ("image",), min_hw=32),
    "gru": ModelSpec(_recurrent("gru"), ("tokens", "sequence"), needs_kind=True),
    "lstm": ModelSpec(_recurrent("lstm"), ("tokens", "sequence"), needs_kind=True),
    "lstm_lm": ModelSpec(_lstm_lm, ("tokens",), objective=SEQUENCE_CROSS_ENTROPY),
}


def check_fit(model_name: str, kind: str, shape: tuple[int, ...], data_name: str) -> str | None:
    """Why ``model_name`` cannot take this dataset's inputs, or None if it can."""
    if model_name not in MODELS:
        return f"model={model_name!r} is unknown; choose one of {sorted(MODELS)}"
    spec = MODELS[model_name]
    fits = sorted(n for n, s in MODELS.items() if kind in s.kinds and (kind != "image" or min(shape[1:]) >= s.min_hw))
    if kind not in spec.kinds:
        return (f"model={model_name} takes {'/'.join(spec.kinds)} inputs but data={data_name} has {kind} inputs of "
                f"shape {tuple(shape)}; models that fit: {fits}")
    if kind == "image" and min(shape[1:]) < spec.min_hw:
        return (f"model={model_name} needs images of at least {spec.min_hw}x{spec.min_hw} but data={data_name} has "
                f"{tuple(shape)}; models that fit: {fits}")
    return None


def build_model(model_cfg, kind: str, shape: tuple[int, ...], num_classes: int, data_name: str = "?"):
    """Return ``(module, objective)`` for the dataset's input kind/shape and class count."""
    problem = check_fit(model_cfg.name, kind, shape, data_name)
    if problem:
        raise ConfigError([problem])
    spec = MODELS[model_cfg.name]
    args = (tuple(shape), num_classes, model_cfg) + ((kind,) if spec.needs_kind else ())
    return spec.build(*args), spec.objective
