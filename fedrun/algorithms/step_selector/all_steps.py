"""The default selector: every local step counts (FedAvg and every base that herds nothing)."""

from __future__ import annotations

import torch

from fedrun.algorithms.base import State, StatefulPart


class AllSteps(StatefulPart):
    """Every local step counts: the client sends its whole update w_i - w_t."""

    name = "all"
    records_steps = False

    def __call__(self, state: State, updates: torch.Tensor, steps, plans, uploads: dict, ctx, weights: torch.Tensor,
                 block: int | None = None):
        """(new state, updates to send, uploads, the round's metrics.csv columns of the selector). ``block``: with
        steps kept in host memory, the Gram matrix's column blocks (``hardware.gram_block``)."""
        return state, updates, uploads, {}
