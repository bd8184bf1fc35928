"""Local SGD: the client rule of FedAvg and centralized SGD."""

from __future__ import annotations

import torch

from .base import ClientContext, State


class LocalSGD:
    """w <- w - eta * d with d = grad F_i(w; batch) + wd * w, through a momentum buffer when momentum > 0
    (BHerd eq. 1; McMahan et al. Alg. 1 ClientUpdate). The buffer starts at zero every round, so the first step
    is plain SGD (as FedNova's reference code). The update sent is w_i - w_t.
    """

    name = "sgd"

    def client_init(self, ctx: ClientContext, client_state: State | None) -> State:
        state = {"w": ctx.params.clone(), "buffers": {k: v.clone() for k, v in ctx.buffers.items()}}
        if ctx.momentum:
            state["momentum"] = torch.zeros_like(ctx.params)
        return state

    def direction(self, ctx: ClientContext, state: State, grad: torch.Tensor) -> torch.Tensor:
        d = grad + ctx.weight_decay * state["w"] if ctx.weight_decay else grad
        if ctx.momentum:
            state["momentum"] = ctx.momentum * state["momentum"] + d
            d = state["momentum"]
        return d

    def client_step(self, model, ctx: ClientContext, state: State, x, y):
        loss, grad = model.loss_and_grad(state["w"], state["buffers"], x, y)
        state["w"] = torch.add(state["w"], self.direction(ctx, state, grad), alpha=-ctx.lr)
        return state, loss

    def client_final(self, ctx: ClientContext, state: State, client_state: State | None):
        return state["w"] - ctx.params, client_state
