"""Algorithms are compositions of plug-in parts chosen by config, each its own group under ``algo/``:
``local`` (what a client computes, with its server-side bookkeeping), ``selector`` (which local steps a client's
update is made of), ``harmonizer`` (acts on the round's stacked updates before aggregation), ``aggregator``,
``server_opt`` and ``schedule`` (local steps per round).
``algo=<name>`` selects a preset of parts; ``algo/<part>=<option>`` swaps one."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError
from .aggregate import FedNova, WeightedMean, aggregate_buffers
from .bank import ModelBank
from .base import Aggregator, ClientContext, LocalRule, ServerOptimizer
from .fsvrg import FSVRG
from .local_sgd import FedDecorr, FedDyn, LocalSGD, Scaffold
from .perfedavg import PerFedAvg
from .selection import GraB, Herd, RandomSubset
from .variance_reduced import LoSAC, MimeSVRG
from .server_opt import ServerAdaptive, ServerMomentum, ServerSGD
from .harmonize import DGT, FedGH
from .parts import AllSteps, NoHarmonizer
from .schedule import AFL, GIFT, AdaComm, FixedSchedule

LOCAL_RULES = {
    "sgd": lambda c: LocalSGD(c.get("mu", 0.0)),
    "scaffold": lambda c: Scaffold(c.get("mu", 0.0)),
    "feddyn": lambda c: FedDyn(c.get("alpha", 0.01), c.get("mu", 0.0)),
    "feddecorr": lambda c: FedDecorr(c.get("beta", 0.1), c.get("mu", 0.0)),
    "perfedavg": lambda c: PerFedAvg(c.get("beta", 1e-3), c.get("variant", "fo"), c.get("delta", 1e-3)),
    "mime": lambda c: MimeSVRG(c.get("momentum", 0.9), c.get("weighting", "uniform")),
    "losac": lambda c: LoSAC(),
    "fsvrg": lambda c: FSVRG(c.get("scaling", "features"), c.get("omega", "all")),
}
SELECTORS = {
    "all": lambda c: AllSteps(),
    "herd": lambda c: Herd(c.get("alpha", 0.5), c.get("local_epochs", 1.0)),
    "grab": lambda c: GraB(c.get("alpha", 0.5), c.get("local_epochs", 1.0)),
    "random": lambda c: RandomSubset(c.get("alpha", 0.5), c.get("local_epochs", 1.0), c.get("seed", 0)),
}
HARMONIZERS = {
    "none": lambda c: NoHarmonizer(),
    "fedgh": lambda c: FedGH(c.get("seed", 0)),
    "dgt": lambda c: DGT(c.get("momentum", 0.5), c.get("mode", "calibrate")),
}
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
SCHEDULES = {
    "fixed": lambda c: FixedSchedule(c.get("tau"), c.get("switch_round"), c.get("switch_tau")),
    "gift": lambda c: GIFT(c.get("tau0", 100), c.get("beta", 0.9), c.get("patience", 2), c.get("factor", 2),
                           c.get("relax", False), c.get("relax_after", 10), c.get("relax_step", 5),
                           c.get("warmup", 0)),
    "adacomm": lambda c: AdaComm(c.get("tau0", 100), c.get("interval_s"), c.get("form", "paper"),
                                 c.get("halve_on_plateau", True), c.get("tau_max")),
    "afl": lambda c: AFL(c.get("phi", 5e-5), c.get("tau_init", 1), c.get("tau_max", 100), c.get("search_factor", 10),
                         c.get("moving_average", 0.0), c.get("beta_floor", 1e-5)),
}

BANKS = {kind: (lambda k: lambda c: ModelBank(k, c.get("models", 4), c.get("threshold", 4), c.get("alpha_g", 0.02),
                                               c.get("beta1", 0.0), c.get("beta2", 0.999), c.get("eps", 1e-8),
                                               c.get("kmeans_eps", 1e-4), c.get("kmeans_max_iter", 100),
                                               c.get("center_seeds", False), c.get("ga_step"),
                                               c.get("form", "adam"), c.get("grouping", "kmeans")))(kind)
         for kind in ("none", "ma", "ga")}

PARTS = {"local": LOCAL_RULES, "selector": SELECTORS, "harmonizer": HARMONIZERS, "aggregator": AGGREGATORS,
         "server_opt": SERVER_OPTIMIZERS, "schedule": SCHEDULES, "bank": BANKS}


@dataclass
class Algorithm:
    name: str
    local: LocalRule
    selector: AllSteps | Herd | GraB | RandomSubset
    harmonizer: NoHarmonizer | FedGH | DGT
    aggregator: Aggregator
    server_opt: ServerOptimizer
    schedule: FixedSchedule | GIFT | AdaComm | AFL
    bank: ModelBank
    pooled: bool  # one client holding all training data (centralized SGD)


# What a part needs from the local rule: FedNova normalises by the a_i that SGD-based rules report.
SGD_FAMILY = ("sgd", "scaffold", "feddyn", "feddecorr")


def check_parts(algo_cfg) -> list[str]:
    """Unknown parts, and combinations that cannot work, with the reason."""
    problems = []
    for part, registry in PARTS.items():
        sub = algo_cfg.get(part)
        name = sub.get("name") if sub is not None else None
        if name not in registry:
            problems.append(f"algo/{part}={name!r} is unknown; choose one of {sorted(registry)}")
    if problems:
        return problems
    local = algo_cfg.local.name
    if algo_cfg.aggregator.name == "fednova" and local not in SGD_FAMILY:
        problems.append(f"algo/aggregator=fednova with algo/local={local}: FedNova normalises each update by the "
                        f"client's count of SGD steps a_i, which {local} does not report; use a local rule of "
                        f"{list(SGD_FAMILY)}")
    if algo_cfg.selector.name != "all" and local in ("perfedavg",):
        problems.append(f"algo/selector={algo_cfg.selector.name} with algo/local={local}: a Per-FedAvg step is a "
                        f"meta-gradient over two batches, not one gradient to herd; use an SGD-based local rule")
    if algo_cfg.bank.name != "none":
        if local != "fsvrg":
            problems.append(f"algo/bank={algo_cfg.bank.name} with algo/local={local}: MA-/GA-FSVRG's clients run FSVRG "
                            "steps from their preferred model; use algo/local=fsvrg")
        defaults = {"selector": "all", "harmonizer": "none", "schedule": "fixed"}
        others = [f"algo/{part}={algo_cfg[part].name}" for part, name in defaults.items()
                  if algo_cfg[part].name != name]
        if others:
            problems.append(f"algo/bank={algo_cfg.bank.name} with {', '.join(others)}: a bank round (004 Procedures "
                            "1-4) has no plug point for them; use algo/selector=all, algo/harmonizer=none and "
                            "algo/schedule=fixed")
        models = algo_cfg.bank.get("models", 4)
        if not (isinstance(models, int) and models >= 1):
            problems.append(f"algo.bank.models={models!r}: must be an integer >= 1 (C of 004; 4 in its MNIST runs)")
    if algo_cfg.get("pooled") and local in ("scaffold", "feddyn", "mime", "losac", "fsvrg"):
        problems.append(f"algo=centralized with algo/local={local}: a single client holding all data makes the "
                        f"{local} correction vanish; use algo/local=sgd")
    return problems


def method_name(algo_cfg) -> str:
    """The full method a run trains, for the console, summary.json, W&B and reports: the preset's name, plus each
    paper's part it does not already name (``fedavg+fedgh``, ``fedavg+gift``, ``bherd+random``, ``scaffold+dgt``)."""
    name = str(algo_cfg.name)
    parts = []
    selector = algo_cfg.selector.name
    if selector != "all" and not (selector == "herd" and "bherd" in name or selector == "grab" and "grab" in name):
        parts.append(selector)
    harmonizer = algo_cfg.harmonizer
    if harmonizer.name != "none":
        parts.append(harmonizer.name + ("-norm" if harmonizer.get("mode") == "norm_only" else ""))
    if algo_cfg.schedule.name != "fixed":
        parts.append(algo_cfg.schedule.name)
    if algo_cfg.bank.name != "none" and not name.startswith(algo_cfg.bank.name):
        parts.append(f"{algo_cfg.bank.name}-bank")
    return "+".join([name, *parts])


def build_algorithm(algo_cfg) -> Algorithm:
    problems = check_parts(algo_cfg)
    if problems:
        raise ConfigError(problems)
    return Algorithm(
        name=method_name(algo_cfg),
        **{part: PARTS[part][algo_cfg[part].name](algo_cfg[part]) for part in PARTS},
        pooled=bool(algo_cfg.get("pooled", False)),
    )


__all__ = ["PARTS", "Algorithm", "ClientContext", "LocalRule", "aggregate_buffers", "build_algorithm", "check_parts",
           "method_name"]
