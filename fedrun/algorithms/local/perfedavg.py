"""Per-FedAvg (Fallah et al. 2020), the "PFedAvg" baseline of Zhao et al.."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from fedrun.algorithms.base import ClientContext, LocalRule, State
from fedrun.algorithms.part_config import PartConfig, is_number, register
from fedrun.config.schema import DEFAULT, Rule
from fedrun.process.lazy import torch


class PerFedAvg(LocalRule):
    """Per-FedAvg, Fallah et al. Alg. 1 (reference-rules.md Part 2 §1). Each local step takes independent batches
    D, D' (and D'' for the Hessian-free variant), drawn as one minibatch of 2B (3B) samples split in parts:

        w~ = w - alpha grad f_i(w; D)
        FO: w <- w - beta grad f_i(w~; D')
        HF: u = grad f_i(w~; D'); h = [grad f_i(w + delta u; D'') - grad f_i(w - delta u; D'')] / (2 delta);
            w <- w - beta (u - alpha h)

    alpha = ``fl.lr``, beta = ``algo.local.beta``. The server averages the models uniformly (the preset's aggregator
    has ``weighting: uniform``). Personalised evaluation: one SGD step of size alpha from the global model on one
    batch of the client's own data, then test (the paper's protocol).
    """

    name = "perfedavg"
    one_gradient_per_step = False  # a meta-gradient over two or three batches
    personalizes = True

    def __init__(self, beta: float, variant: str, delta: float):
        self.beta, self.variant, self.delta = float(beta), variant, float(delta)
        self.batches_per_step = 2 if variant == "fo" else 3

    def client_step(self, model, ctx: ClientContext, state: State, x, y):
        xs, ys = torch.tensor_split(x, self.batches_per_step), torch.tensor_split(y, self.batches_per_step)
        w, buffers, alpha = state["w"], state["buffers"], ctx.lr
        _, g = model.loss_and_grad(w, buffers, xs[0], ys[0])
        loss, u = model.loss_and_grad(w - alpha * g, buffers, xs[1], ys[1])
        if self.variant == "hf":
            _, g_plus = model.loss_and_grad(w + self.delta * u, buffers, xs[2], ys[2])
            _, g_minus = model.loss_and_grad(w - self.delta * u, buffers, xs[2], ys[2])
            u = u - alpha * (g_plus - g_minus) / (2 * self.delta)
        state["direction"] = u
        state["w"] = w - self.beta * u
        return state, loss

    def personalize(self, model, ctx: ClientContext, x, y) -> torch.Tensor:
        """The personalised model of a client: one SGD step of size alpha on its batch (x, y)."""
        _, g = model.loss_and_grad(ctx.params, {k: v.clone() for k, v in ctx.buffers.items()}, x, y)
        return ctx.params - ctx.lr * g


@register
@dataclass
class PerFedAvgConfig(PartConfig):
    part, target, options = "local", "fedrun.algorithms.local.perfedavg.PerFedAvg", ("perfedavg",)
    name: str = "perfedavg"
    beta: float = 1.0e-3  # the meta step
    variant: str = "fo"  # fo (first-order) | hf (Hessian-free)
    delta: float = 1.0e-3  # the Hessian-free finite difference

    def rules(self) -> Iterator[Rule]:
        yield is_number(self.beta) and self.beta > 0, "beta", "must be > 0", DEFAULT
        yield self.variant in ("fo", "hf"), "variant", "must be fo (first-order) or hf (Hessian-free)", DEFAULT
        yield is_number(self.delta) and self.delta > 0, "delta", "must be > 0", DEFAULT
