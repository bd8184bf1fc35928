"""The typed config of each option of algo/server_opt: its settings, their defaults and ranges, registered as the schema
its YAML (conf/algo/server_opt/) extends. No torch: checking a config needs none."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator


from fedrun.algorithms.schema import PartConfig, is_number, is_unit, register
from fedrun.config.schema import DEFAULT, Rule


def _server_lr(lr) -> Rule:
    return is_number(lr) and lr > 0, "lr", "must be > 0 (1 with sgd: the plain average)", "1.0"


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
