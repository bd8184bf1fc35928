"""Algorithms are compositions of plug-in parts chosen by config, each its own group under ``algo/``:
``local`` (what a client computes, with its server-side bookkeeping), ``harmonizer`` (acts on the round's stacked
updates before aggregation), ``aggregator``, ``server_opt`` and ``schedule`` (local steps per round).
``algo=<name>`` selects a preset of parts; ``algo/<part>=<option>`` swaps one."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError
from .aggregate import FedNova, WeightedMean, aggregate_buffers
from .base import Aggregator, ClientContext, LocalRule, ServerOptimizer
from .local_sgd import FedDyn, LocalSGD, Scaffold
from .server_opt import ServerAdaptive, ServerMomentum, ServerSGD
from .parts import FixedSchedule, NoHarmonizer

LOCAL_RULES = {
    "sgd": lambda c: LocalSGD(c.get("mu", 0.0)),
    "scaffold": lambda c: Scaffold(c.get("mu", 0.0)),
    "feddyn": lambda c: FedDyn(c.get("alpha", 0.01), c.get("mu", 0.0)),
}
HARMONIZERS = {"none": lambda c: NoHarmonizer()}
AGGREGATORS = {
    "mean": lambda c: WeightedMean(c.get("weighting", "samples")),
    "fednova": lambda c: FedNova(c.get("weighting", "samples")),
}
SERVER_OPTIMIZERS = {
    "sgd": lambda c: ServerSGD(c.get("lr", 1.0)),
    "avgm": lambda c: ServerMomentum(c.get("lr", 1.0), c.get("momentum", 0.9)),
    **{kind: (lambda k: lambda c: ServerAdaptive(k, c.get("lr", 0.01), c.get("beta1", 0.9), c.get("beta2", 0.99),
                                                  c.get("tau", 1e-3), c.get("bias_correction", False),
                                                  c.get("adagrad_momentum", True)))(kind)
       for kind in ("adagrad", "adam", "yogi")},
}
SCHEDULES = {"fixed": lambda c: FixedSchedule()}

PARTS = {"local": LOCAL_RULES, "harmonizer": HARMONIZERS, "aggregator": AGGREGATORS,
         "server_opt": SERVER_OPTIMIZERS, "schedule": SCHEDULES}


@dataclass
class Algorithm:
    name: str
    local: LocalRule
    harmonizer: NoHarmonizer
    aggregator: Aggregator
    server_opt: ServerOptimizer
    schedule: FixedSchedule
    pooled: bool  # one client holding all training data (centralized SGD)


def check_parts(algo_cfg) -> list[str]:
    """Unknown parts, and combinations that cannot work, with the reason."""
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
        **{part: PARTS[part][algo_cfg[part].name](algo_cfg[part]) for part in PARTS},
        pooled=bool(algo_cfg.get("pooled", False)),
    )


__all__ = ["Algorithm", "ClientContext", "LocalRule", "aggregate_buffers", "build_algorithm", "check_parts"]
