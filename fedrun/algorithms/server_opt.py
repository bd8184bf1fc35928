"""Server optimisers: how the aggregated update moves the global model."""

from __future__ import annotations

import torch

from .base import State


class ServerSGD:
    """w_{t+1} = w_t + lr * aggregated update. lr = 1 is FedAvg (BHerd eq. 7: w_t - eta * sum_i p_i sum_l grad)."""

    name = "sgd"

    def __init__(self, lr: float = 1.0):
        self.lr = float(lr)

    def init(self, params: torch.Tensor) -> State:
        return {}

    def apply(self, params: torch.Tensor, update: torch.Tensor, state: State):
        return params + self.lr * update, state
