"""Local rules that correct local gradients with a server-side estimate of the full gradient: MimeSVRG and LoSAC."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from fedrun.algorithms.base import ClientContext, LocalRule, State
from fedrun.algorithms.part_config import PartConfig, is_unit, register
from fedrun.config.schema import DEFAULT, Rule
from fedrun.process.lazy import torch


class MimeSVRG(LocalRule):
    """Mime with the SVRG correction and an SGD-with-momentum base optimiser (Karimireddy et al., "Mime: Mimicking
    Centralized Stochastic Algorithms in Federated Learning", Alg. 1; fedjax ``mime.py``; reference-rules.md
    Part 2 §2).

    Before local training every sampled client computes its full-batch gradient at the server model x; the server
    averages them into c (``weighting=uniform``: the paper's mean; ``samples``: fedjax's example weighting).
    Local step on minibatch z: g = grad f_i(y; z) - grad f_i(x; z) + c, y <- y - eta ((1 - beta) g + beta m) with
    the server momentum m frozen during local steps (the paper's form of SGDm; the optax/TFF code form g + beta m is
    the same with eta scaled by 1/(1 - beta)). After the round the server updates its state from c only:
    m <- (1 - beta) c + beta m. The model moves by the aggregated y - x (server lr ``algo.server_opt.lr``).
    """

    name = "mime"
    releases_more = "each client's full local gradient goes to the server"
    pooling_removes_its_correction = True
    needs_full_gradients = True

    def __init__(self, momentum: float, weighting: str):
        self.momentum = float(momentum)
        self.weighting = weighting

    def server_init(self, params, num_clients):
        return {"m": torch.zeros_like(params), "c": torch.zeros_like(params)}

    def round_extras(self, server_state: State, full_grads: torch.Tensor, sizes: torch.Tensor):
        w = torch.ones_like(sizes) if self.weighting == "uniform" else sizes
        c = (w / w.sum()).to(full_grads.dtype) @ full_grads
        return {"c": c, "m": server_state["m"]}, {**server_state, "c": c}

    def client_step(self, model, ctx: ClientContext, state: State, x, y):
        loss, g_y = model.loss_and_grad(state["w"], state["buffers"], x, y)
        _, g_x = model.loss_and_grad(ctx.params, {k: v.clone() for k, v in state["buffers"].items()}, x, y)
        g = g_y - g_x + ctx.extras["c"]
        if ctx.weight_decay:
            g = g + ctx.weight_decay * state["w"]
        self.descend(ctx, state, (1 - self.momentum) * g + self.momentum * ctx.extras["m"])
        return state, loss

    def server_update(self, server_state, aggregated, updates, uploads, weights, num_clients):
        m = (1 - self.momentum) * server_state["c"] + self.momentum * server_state["m"]
        return aggregated, {**server_state, "m": m}


class LoSAC(LocalRule):
    """LoSAC-style local stochastic average control. ONLY the mechanism that LoSAC's abstract (Chen et al.,
    arXiv 2112.07839) and Zhao et al. Sec. II describe is implemented: each client keeps a running estimate v of the
    global full gradient, refreshed after every local step, and the estimates are aggregated at the server. The concrete
    update below is the SAGA-style reading of reference-rules.md Part 2 §3 [HYPOTHESIS], not the paper's verified
    algorithm (its full text was not available):

        client i, minibatch gradient g = grad f_i(y; z), its delayed gradient h_i (zero at first):
        y <- y - eta (g - h_i + v);  v <- v + (g - h_i) / N;  h_i <- g
        server: v <- v + (1/N) sum_{i in S} (h_i_new - h_i_old)

    so that v tracks (1/N) sum_i h_i over all N clients. Results produced with it are labelled "LoSAC (mechanism)".
    """

    name = "losac"
    releases_more = "each client's full local gradient and its change go to the server"
    pooling_removes_its_correction = True

    def server_init(self, params, num_clients):
        return {"v": torch.zeros_like(params), "n": torch.tensor(float(num_clients), dtype=params.dtype,
                                                                 device=params.device)}

    def broadcast(self, server_state):
        return {"v": server_state["v"], "n": server_state["n"]}

    def client_init(self, ctx, client_state):
        state = super().client_init(ctx, client_state)
        state["h"] = client_state["h"] if client_state is not None else torch.zeros_like(ctx.params)
        state["h0"] = state["h"]
        state["v"] = ctx.extras["v"].clone()
        return state

    def client_step(self, model, ctx, state, x, y):
        loss, g = model.loss_and_grad(state["w"], state["buffers"], x, y)
        if ctx.weight_decay:
            g = g + ctx.weight_decay * state["w"]
        self.descend(ctx, state, g - state["h"] + state["v"])
        state["v"] = state["v"] + (g - state["h"]) / ctx.extras["n"]
        state["h"] = g
        return state, loss

    def client_final(self, ctx, state, client_state):
        return state["w"] - ctx.params, {"h": state["h"]}, {"dh": state["h"] - state["h0"]}

    def server_update(self, server_state, aggregated, updates, uploads, weights, num_clients):
        return aggregated, {**server_state, "v": server_state["v"] + uploads["dh"].sum(dim=0) / num_clients}


@register
@dataclass
class MimeConfig(PartConfig):
    part, target, options = "local", "fedrun.algorithms.local.variance_reduced.MimeSVRG", ("mime",)
    name: str = "mime"
    momentum: float = 0.9
    weighting: str = "uniform"  # how the full gradients are averaged into c: uniform (paper) | samples (fedjax)

    def rules(self) -> Iterator[Rule]:
        yield is_unit(self.momentum), "momentum", "must be in [0, 1)", DEFAULT
        yield self.weighting in ("uniform", "samples"), "weighting", "must be uniform or samples", DEFAULT


@register
@dataclass
class LoSACConfig(PartConfig):
    part, target, options = "local", "fedrun.algorithms.local.variance_reduced.LoSAC", ("losac",)
    name: str = "losac"
