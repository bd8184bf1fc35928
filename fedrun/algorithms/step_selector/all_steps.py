"""The default selector: every local step counts (FedAvg and every base that herds nothing)."""

from __future__ import annotations

import torch

from fedrun.algorithms.base import State, StatefulPart


class AllSteps(StatefulPart):
    """Every local step counts: the client sends its whole update w_i - w_t."""

    name = "all"
    records_steps = False

    def finish(self, state: State, updates: torch.Tensor, selection, plans, uploads: dict, weights: torch.Tensor):
        """(new state, updates to send, uploads, the round's metrics.csv columns of the selector). A selector that
        ``records_steps`` makes ``selection`` on the clients' side first (``select``); this one records none."""
        return state, updates, uploads, {}
