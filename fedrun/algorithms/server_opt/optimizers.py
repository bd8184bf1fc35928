"""Server optimisers: how the aggregated update moves the global model.

Every optimiser receives ``update`` = the aggregated client update (sum_i p_i (w_i - w_t) for FedAvg), a direction
that *decreases* the loss, and treats ``-update`` as the server's pseudo-gradient (Reddi et al., "Adaptive
Federated Optimization", Alg. 2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

from fedrun.algorithms.base import State
from fedrun.algorithms.part_config import PartConfig, is_number, is_unit, register
from fedrun.config.schema import DEFAULT, Rule
from fedrun.process.lazy import torch


def _server_lr(lr) -> Rule:
    return is_number(lr) and lr > 0, "lr", "must be > 0 (1 with sgd: the plain average)", "1.0"


class ServerSGD:
    """w_{t+1} = w_t + lr * update. lr = 1 is FedAvg (BHerd eq. 7: w_t - eta * sum_i p_i sum_l grad)."""

    name = "sgd"

    def __init__(self, lr: float):
        self.lr = float(lr)

    def init(self, params: torch.Tensor) -> State:
        return {}

    def apply(self, params: torch.Tensor, update: torch.Tensor, state: State):
        return params + self.lr * update, state


class ServerMomentum:
    """FedAvgM (Hsu et al.; Reddi et al. Sec. 3): m <- beta * m + update; w <- w + lr * m. m starts at zero."""

    name = "avgm"

    def __init__(self, lr: float, momentum: float):
        self.lr, self.momentum = float(lr), float(momentum)

    def init(self, params: torch.Tensor) -> State:
        return {"m": torch.zeros_like(params)}

    def apply(self, params, update, state):
        m = self.momentum * state["m"] + update
        return params + self.lr * m, {"m": m}


class ServerAdaptive:
    """FedAdagrad / FedAdam / FedYogi, Reddi et al. Alg. 2 literally (reference-rules.md Part 2 §4):

        m_t = b1 m_{t-1} + (1 - b1) D                         (D = aggregated update)
        Adagrad: v_t = v_{t-1} + D^2
        Yogi:    v_t = v_{t-1} - (1 - b2) D^2 sign(v_{t-1} - D^2)
        Adam:    v_t = b2 v_{t-1} + (1 - b2) D^2
        w_{t+1} = w_t + lr * m_t / (sqrt(v_t) + tau),  m_0 = 0, v_{-1} = tau^2, no bias correction.

    Options reproduce what the authors' code ran: ``bias_correction`` (lr_t = lr sqrt(1 - b2^t) / (1 - b1^t), for
    Adam and Yogi) and ``adagrad_momentum=false`` (Keras Adagrad has b1 = 0).
    """

    def __init__(self, kind: str, lr: float, beta1: float, beta2: float, tau: float,
                 bias_correction: bool, adagrad_momentum: bool):
        if kind not in ("adagrad", "adam", "yogi"):
            raise ValueError(f"unknown adaptive server optimiser {kind!r}")
        self.name = kind
        self.lr, self.beta2, self.tau = float(lr), float(beta2), float(tau)
        self.beta1 = 0.0 if kind == "adagrad" and not adagrad_momentum else float(beta1)
        self.bias_correction = bool(bias_correction) and kind != "adagrad"

    def init(self, params: torch.Tensor) -> State:
        return {"m": torch.zeros_like(params), "v": torch.full_like(params, self.tau**2), "t": 0}

    def apply(self, params, update, state):
        t = state["t"] + 1
        m = self.beta1 * state["m"] + (1 - self.beta1) * update
        sq = update * update
        v = state["v"]
        if self.name == "adagrad":
            v = v + sq
        elif self.name == "yogi":
            v = v - (1 - self.beta2) * sq * torch.sign(v - sq)
        else:
            v = self.beta2 * v + (1 - self.beta2) * sq
        lr = self.lr
        if self.bias_correction:
            lr = lr * (1 - self.beta2**t) ** 0.5 / (1 - self.beta1**t)
        return params + lr * m / (v.sqrt() + self.tau), {"m": m, "v": v, "t": t}


@register
@dataclass
class ServerSGDConfig(PartConfig):
    part, target, options = "server_opt", "fedrun.algorithms.server_opt.optimizers.ServerSGD", ("sgd",)
    name: str = "sgd"
    lr: float = 1.0

    def rules(self) -> Iterator[Rule]:
        yield _server_lr(self.lr)


@register
@dataclass
class ServerMomentumConfig(ServerSGDConfig):
    part, target, options = "server_opt", "fedrun.algorithms.server_opt.optimizers.ServerMomentum", ("avgm",)
    name: str = "avgm"
    momentum: float = 0.9

    def rules(self) -> Iterator[Rule]:
        yield from super().rules()
        yield is_unit(self.momentum), "momentum", "must be in [0, 1)", DEFAULT


@register
@dataclass
class ServerAdaptiveConfig(PartConfig):
    """FedAdagrad, FedAdam, FedYogi (Reddi et al.)."""

    part, target = "server_opt", "fedrun.algorithms.server_opt.optimizers.ServerAdaptive"
    options = ("adagrad", "adam", "yogi")
    name: str = "adam"
    lr: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.99
    tau: float = 1.0e-3  # the adaptivity
    bias_correction: bool = False  # true: the authors' code (Keras) variant
    adagrad_momentum: bool = True  # false: Keras Adagrad (beta1 = 0)

    def arguments(self) -> dict[str, Any]:
        return {"kind": self.name, **super().arguments()}

    def rules(self) -> Iterator[Rule]:
        yield is_number(self.lr) and self.lr > 0, "lr", "must be > 0", DEFAULT
        yield is_unit(self.beta1), "beta1", "must be in [0, 1)", DEFAULT
        yield is_unit(self.beta2), "beta2", "must be in [0, 1)", DEFAULT
        yield is_number(self.tau) and self.tau > 0, "tau", "must be > 0", DEFAULT
