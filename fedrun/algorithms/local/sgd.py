"""Local SGD and the rules built on it: FedAvg, FedProx, FedNova's local part, FedDecorr, SCAFFOLD, FedDyn."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from fedrun.algorithms.base import ClientContext, LocalRule, State
from fedrun.algorithms.part_config import PartConfig, is_number, register
from fedrun.config.schema import DEFAULT, Rule
from fedrun.process.lazy import torch


class LocalSGD(LocalRule):
    """Local SGD with optional momentum, weight decay and FedProx's proximal term.

    d = grad F_i(w; batch) + wd * w; with momentum, buf <- rho * buf + d (buf starts at zero each round, so the first
    step is plain SGD) and d = buf; FedProx (Li et al., eq. 2: h = F_i + mu/2 ||w - w_t||^2) adds mu (w - w_t);
    then w <- w - eta * d (BHerd eq. 1; McMahan et al. Alg. 1). The order of the terms follows FedNova's reference
    code (reference-rules.md §5). mu = 0 is FedAvg.

    Each client also reports FedNova's normaliser a_i (Wang et al., eq. 6 and reference code): per step
    a <- a (1 - eta mu) + 1 with the proximal term, c <- rho c + 1, a += c with momentum, a += 1 for plain SGD,
    so plain SGD gives a_i = tau_i.
    """

    name = "sgd"
    reports_step_counts = True
    batchable = True  # weight decay, momentum, the proximal term and a_i: elementwise (its subclasses: not declared)
    affine_step = True  # w, the momentum and the direction are affine in (w, momentum, w_t, the gradient)

    def __init__(self, mu: float):
        self.mu = float(mu)

    def client_init(self, ctx: ClientContext, client_state: State | None) -> State:
        state = super().client_init(ctx, client_state)
        state["a"] = torch.zeros((), dtype=ctx.params.dtype, device=ctx.params.device)
        if ctx.momentum:
            state["momentum"] = torch.zeros_like(ctx.params)
            state["counter"] = torch.zeros_like(state["a"])
        return state

    def direction(self, ctx: ClientContext, state: State, grad: torch.Tensor) -> torch.Tensor:
        """The local descent direction of this step (and FedNova's normaliser bookkeeping)."""
        d = grad + ctx.weight_decay * state["w"] if ctx.weight_decay else grad
        if ctx.momentum:
            state["momentum"] = ctx.momentum * state["momentum"] + d
            d = state["momentum"]
            state["counter"] = ctx.momentum * state["counter"] + 1
            state["a"] = state["a"] + state["counter"]
        if self.mu:
            d = d + self.mu * (state["w"] - ctx.params)
            state["a"] = state["a"] * (1 - ctx.lr * self.mu) + 1
        if not ctx.momentum and not self.mu:
            state["a"] = state["a"] + 1
        return d

    feature_penalty = None  # a term on the penultimate features added to the loss (FedDecorr)

    def gradient(self, model, state: State, x, y):
        return model.loss_and_grad(state["w"], state["buffers"], x, y, self.feature_penalty)

    def client_step(self, model, ctx: ClientContext, state: State, x, y):
        loss, grad = self.gradient(model, state, x, y)
        self.descend(ctx, state, self.direction(ctx, state, grad))
        return state, loss

    def client_final(self, ctx: ClientContext, state: State, client_state: State | None):
        return state["w"] - ctx.params, client_state, {"a": state["a"]}


def decorrelation_loss(z: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """FedDecorr's regulariser (Shi et al. 2023; reference code ``loss.py``, reference-rules.md §4): standardise the
    features z (N x d) per dimension with the unbiased variance, C = z^T z, L = mean over i != j of C_ij^2, / N.
    Zero for a batch of one."""
    n, d = z.shape
    if n == 1:
        return z.sum() * 0.0
    z = (z - z.mean(dim=0)) / torch.sqrt(eps + z.var(dim=0, unbiased=True))
    c = z.T @ z
    off_diagonal = c.pow(2).sum() - torch.diagonal(c).pow(2).sum()
    return off_diagonal / (d * (d - 1)) / n


class FedDecorr(LocalSGD):
    """FedDecorr (Shi et al. 2023): local SGD on CE + beta * decorrelation_loss(penultimate features)."""

    name = "feddecorr"

    def __init__(self, beta: float, mu: float):
        super().__init__(mu)
        self.beta = float(beta)

    def feature_penalty(self, z: torch.Tensor) -> torch.Tensor:
        return self.beta * decorrelation_loss(z)


class Scaffold(LocalSGD):
    """SCAFFOLD, option II (Karimireddy et al., Alg. 1; reference-rules.md §5).

    Local step: y <- y - eta (d(y) - c_i + c), d the local SGD direction above.
    After K steps: c_i+ = c_i - c + (x - y) / (K eta); the client uploads y - x and dc_i = c_i+ - c_i and keeps c_i+
    (clients that sit out keep theirs). Server: c <- c + (1/N) sum_{i in S} dc_i. The model update is the aggregated
    y - x, moved by the server optimiser (global lr eta_g).
    """

    name = "scaffold"
    releases_more = "each client's control-variate change dc_i goes to the server in the clear"
    pooling_removes_its_correction = True

    def server_init(self, params, num_clients):
        return {"c": torch.zeros_like(params)}

    def broadcast(self, server_state):
        return {"c": server_state["c"]}

    def client_init(self, ctx, client_state):
        state = super().client_init(ctx, client_state)
        state["c_i"] = client_state["c_i"] if client_state is not None else torch.zeros_like(ctx.params)
        state["steps"] = torch.zeros_like(state["a"])
        return state

    def client_step(self, model, ctx, state, x, y):
        loss, grad = self.gradient(model, state, x, y)
        self.descend(ctx, state, self.direction(ctx, state, grad) - state["c_i"] + ctx.extras["c"])
        state["steps"] = state["steps"] + 1
        return state, loss

    def client_final(self, ctx, state, client_state):
        update = state["w"] - ctx.params
        c_new = state["c_i"] - ctx.extras["c"] - update / (state["steps"] * ctx.lr)
        return update, {"c_i": c_new}, {"a": state["a"], "dc": c_new - state["c_i"]}

    def server_update(self, server_state, aggregated, updates, uploads, weights, num_clients):
        return aggregated, {"c": server_state["c"] + uploads["dc"].sum(dim=0) / num_clients}


class FedDyn(LocalSGD):
    """FedDyn (Acar et al., Alg. 1; reference-rules.md §5).

    Client i minimises L_i(w) - <g_i, w> + (alpha/2) ||w - w_t||^2, with g_i = grad L_i at its previous local model
    (zero at first): d = grad - g_i + alpha (w - w_t). After training g_i <- g_i - alpha (w_i - w_t).
    Server: h <- h - (alpha/N) sum_{i in P_t} (w_i - w_t); w_{t+1} = mean_i w_i - h / alpha, i.e. the aggregated
    update becomes mean_i (w_i - w_t) - h / alpha.
    """

    name = "feddyn"
    releases_more = "the server's h sums the clients' unclipped updates"
    pooling_removes_its_correction = True

    def __init__(self, alpha: float, mu: float):
        super().__init__(mu)
        self.alpha = float(alpha)

    def server_init(self, params, num_clients):
        return {"h": torch.zeros_like(params)}

    def client_init(self, ctx, client_state):
        state = super().client_init(ctx, client_state)
        state["g_i"] = client_state["g_i"] if client_state is not None else torch.zeros_like(ctx.params)
        return state

    def client_step(self, model, ctx, state, x, y):
        loss, grad = self.gradient(model, state, x, y)
        pull = self.alpha * (state["w"] - ctx.params)
        self.descend(ctx, state, self.direction(ctx, state, grad) - state["g_i"] + pull)
        return state, loss

    def client_final(self, ctx, state, client_state):
        update = state["w"] - ctx.params
        return update, {"g_i": state["g_i"] - self.alpha * update}, {"a": state["a"]}

    def server_update(self, server_state, aggregated, updates, uploads, weights, num_clients):
        h = server_state["h"] - self.alpha * updates.sum(dim=0) / num_clients
        return aggregated - h / self.alpha, {"h": h}


@register
@dataclass
class SGDConfig(PartConfig):
    """Local SGD (BHerd eq. 1); mu > 0 adds FedProx's proximal term (mu = 0 is FedAvg)."""

    part, target, options = "local", "fedrun.algorithms.local.sgd.LocalSGD", ("sgd",)
    name: str = "sgd"
    mu: float = 0.0

    def rules(self) -> Iterator[Rule]:
        yield is_number(self.mu) and self.mu >= 0, "mu", "must be >= 0 (FedProx's proximal weight; 0: none)", "0.01"


@register
@dataclass
class ScaffoldConfig(SGDConfig):
    part, target, options = "local", "fedrun.algorithms.local.sgd.Scaffold", ("scaffold",)
    name: str = "scaffold"


@register
@dataclass
class FedDynConfig(SGDConfig):
    part, target, options = "local", "fedrun.algorithms.local.sgd.FedDyn", ("feddyn",)
    name: str = "feddyn"
    alpha: float = 0.01  # FedDyn's regulariser weight

    def rules(self) -> Iterator[Rule]:
        yield from super().rules()
        yield is_number(self.alpha) and self.alpha > 0, "alpha", "must be > 0 (the server divides by it)", DEFAULT


@register
@dataclass
class FedDecorrConfig(SGDConfig):
    part, target, options = "local", "fedrun.algorithms.local.sgd.FedDecorr", ("feddecorr",)
    name: str = "feddecorr"
    beta: float = 0.1  # weight of the decorrelation loss

    def rules(self) -> Iterator[Rule]:
        yield from super().rules()
        yield is_number(self.beta) and self.beta >= 0, "beta", "must be >= 0 (0: plain local SGD)", DEFAULT
