"""A one-layer model's training step on the rows of the training inputs that its minibatch's index picks, read in
place.

A one-layer model's step on a CPU (the smooth SVM's: 5 clients of B = 100 MNIST rows, BHerd's cohort) spent most of
its time gathering the minibatch, 1.5 MB copied out of the training set and read again by the forward and backward
products, and in the dozens of small tensor operations around them. Here one compiled kernel
(``fedrun/model/native/kernels/indexed_linear.cpp``, built by ``fedrun/model/native/build.py``) reads each row where it
lies and gives the clients' minibatch losses and flat gradients: the forward, the objective's loss and output gradient
(the smooth SVM's and cross-entropy's, as ``fedrun/model/zoo.py`` has them) and the backward. The same values as the
gathered minibatch's steps by hand, to float rounding (tests/model/native/test_indexed_rows.py).
``hardware.native=false`` turns it off.

It applies to a local rule that reads its minibatch only through the model's loss and gradient (``LocalRule.batchable``:
local SGD, in the executors' native and plain steps), a dense chain of one Linear layer of at most ``MAX_OUTPUTS``
outputs (``logreg``, ``svm``) under one of ``LOSSES``, and float32 inputs on a CPU that are one plain contiguous
tensor (not augmented on the fly).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from fedrun.model.native import build as native
from fedrun.model.zoo import Objective

SOURCE = "indexed_linear.cpp"
MAX_OUTPUTS = 16
LOSSES = {"squared_hinge_parity": 0, "cross_entropy": 1}  # the objectives the kernel computes: its loss codes


@dataclass(frozen=True)
class IndexedRows:
    """The minibatch ``source[index]``, not gathered: ``source`` (N, ...) the training inputs, ``index`` (K, B) (a
    cohort's minibatches) or (B,) (one client's). Read in place by this kernel (a one-layer model's step) and by the
    first convolution's kernel of a CNN's cohort (``fedrun/model/native/fused_conv.py``); the minibatch's shape, dtype
    and device are the gathered one's."""

    source: torch.Tensor
    index: torch.Tensor

    @property
    def shape(self) -> torch.Size:
        return torch.Size((*self.index.shape, *self.source.shape[1:]))

    @property
    def dtype(self) -> torch.dtype:
        return self.source.dtype

    @property
    def device(self) -> torch.device:
        return self.source.device

    def dim(self) -> int:
        return len(self.shape)

    @property
    def source_rows(self) -> torch.Tensor:
        """The training inputs as (N, d) rows."""
        return self.source.view(len(self.source), -1)

    def gathered(self) -> torch.Tensor:
        """The minibatch itself, ``source[index]``."""
        return self.source.index_select(0, self.index.reshape(-1)).view(self.shape)

    def stacked(self) -> IndexedRows:
        """One client's minibatch as a cohort of one (index (1, B))."""
        return IndexedRows(self.source, self.index[None])


def fits(chain: list[nn.Module], objective: Objective, x: torch.Tensor) -> bool:
    """Whether the kernel computes a step of the dense chain ``chain`` (``functional.dense_chain``) under
    ``objective`` on rows of ``x``, the training inputs: one Linear layer of at most MAX_OUTPUTS outputs (one for the
    smooth SVM) and an objective of LOSSES; float32, contiguous, on a CPU, one plain tensor of the layer's inputs."""
    layers = [m for m in chain if isinstance(m, nn.Linear)]
    if len(layers) != 1 or len(chain) != 2 or objective.name not in LOSSES:
        return False
    outputs = layers[0].out_features
    return (outputs <= (1 if LOSSES[objective.name] == 0 else MAX_OUTPUTS) and type(x) is torch.Tensor
            and x.dtype == torch.float32 and x.device.type == "cpu" and x.dim() >= 2 and x.is_contiguous()
            and x[0].numel() == layers[0].in_features)


def of(x: torch.Tensor, index: torch.Tensor) -> IndexedRows:
    """The minibatch ``x[index]`` (an index of any shape whose last axis is the minibatch's), in place."""
    return IndexedRows(x, index.contiguous())


def loss_and_grad(rows: IndexedRows, flat: torch.Tensor, y: torch.Tensor, layer: nn.Linear, objective: Objective
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean minibatch loss and its gradient w.r.t. ``flat``, the parameters of the one-layer model ``layer``
    (weight, then bias, flattened), on the minibatch ``rows`` with targets ``y``: one client's (flat (P,), y (B,)) or
    a cohort's ((K, P), (K, B)): a loss (K,) and a gradient (K, P)."""
    lead = flat.shape[:-1]
    k = lead.numel()
    loss, grad = kernel().loss_and_grad(rows.source_rows, rows.index.view(k, -1), y.reshape(k, -1).contiguous(),
                                        flat.reshape(k, -1).contiguous(), layer.out_features, layer.bias is not None,
                                        LOSSES[objective.name])
    return loss.view(lead), grad.view(*lead, -1)


def enabled() -> bool:
    """Whether the kernel is there (built now if it was not): False where it cannot be built."""
    return kernel() is not None


def kernel():
    """The compiled kernel (``fedrun/model/native/build.py``), or None where it cannot be built."""
    return native.kernel(SOURCE)
