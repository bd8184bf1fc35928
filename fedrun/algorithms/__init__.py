"""Algorithms are compositions of plug-in parts chosen by config (``algo/local``, ``algo/aggregator``,
``algo/server_opt``); ``algo=<name>`` selects a preset of parts."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError
from .aggregate import WeightedMean, aggregate_buffers
from .base import Aggregator, ClientContext, LocalRule, ServerOptimizer
from .local_sgd import LocalSGD
from .server_opt import ServerSGD

LOCAL_RULES = {"sgd": lambda cfg: LocalSGD()}
AGGREGATORS = {"mean": lambda cfg: WeightedMean()}
SERVER_OPTIMIZERS = {"sgd": lambda cfg: ServerSGD(cfg.get("lr", 1.0))}

PARTS = {"local": LOCAL_RULES, "aggregator": AGGREGATORS, "server_opt": SERVER_OPTIMIZERS}


@dataclass
class Algorithm:
    name: str
    local: LocalRule
    aggregator: Aggregator
    server_opt: ServerOptimizer
    pooled: bool  # one client holding all training data (centralized SGD)


def check_parts(algo_cfg) -> list[str]:
    problems = []
    for part, registry in PARTS.items():
        sub = algo_cfg.get(part)
        name = sub.get("name") if sub is not None else None
        if name not in registry:
            problems.append(f"algo/{part}={name!r} is unknown; choose one of {sorted(registry)}")
    return problems


def build_algorithm(algo_cfg) -> Algorithm:
    problems = check_parts(algo_cfg)
    if problems:
        raise ConfigError(problems)
    return Algorithm(
        name=algo_cfg.name,
        local=LOCAL_RULES[algo_cfg.local.name](algo_cfg.local),
        aggregator=AGGREGATORS[algo_cfg.aggregator.name](algo_cfg.aggregator),
        server_opt=SERVER_OPTIMIZERS[algo_cfg.server_opt.name](algo_cfg.server_opt),
        pooled=bool(algo_cfg.get("pooled", False)),
    )


__all__ = ["Algorithm", "ClientContext", "aggregate_buffers", "build_algorithm", "check_parts"]
