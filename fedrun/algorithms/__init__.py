"""Algorithms are compositions of plug-in parts chosen by config, each its own group under ``algo/``:
``local`` (what a client computes, with its server-side bookkeeping), ``step_selector`` (which local steps a client's
update is made of), ``harmonizer`` (acts on the round's stacked updates before aggregation), ``aggregator``,
``server_opt`` and ``schedule`` (local steps per round).
``algo=<name>`` selects a preset of parts; ``algo/<part>=<option>`` swaps one."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from hydra.utils import get_class

from typing import TYPE_CHECKING

from fedrun.errors import ConfigError
from fedrun.algorithms.schema import SCHEMAS, AlgoSettings, parse_algo
from fedrun.algorithms.stateful import STATEFUL_PARTS

if TYPE_CHECKING:  # the parts themselves import torch; checking a config (fedrun --help, a typo) needs none of them
    from fedrun.algorithms.asynchrony.none import NoAsynchrony
    from fedrun.algorithms.asynchrony.server import AsyncServer
    from fedrun.algorithms.bank.bank import ModelBank
    from fedrun.algorithms.privacy.dp_fedavg import DPFedAvg
    from fedrun.algorithms.privacy.none import NoPrivacy
    from fedrun.algorithms.base import Aggregator, Harmonizer, LocalRule, ServerOptimizer
    from fedrun.algorithms.step_selector.all_steps import AllSteps
    from fedrun.algorithms.schedule.adacomm import AdaComm
    from fedrun.algorithms.schedule.afl import AFL
    from fedrun.algorithms.schedule.fixed import FixedSchedule
    from fedrun.algorithms.schedule.gift import GIFT
    from fedrun.algorithms.step_selector.grab import GraB
    from fedrun.algorithms.step_selector.herd import Herd
    from fedrun.algorithms.step_selector.random_subset import RandomSubset

PARTS = tuple(SCHEMAS)  # the plug points, in the order a round meets them


@dataclass
class Algorithm:
    name: str
    local: LocalRule
    step_selector: AllSteps | Herd | GraB | RandomSubset
    harmonizer: Harmonizer  # none, FedGH or DGT
    aggregator: Aggregator
    privacy: NoPrivacy | DPFedAvg  # what the server may learn of the updates: all, or their clipped noised sum
    server_opt: ServerOptimizer
    schedule: FixedSchedule | GIFT | AdaComm | AFL
    bank: ModelBank
    asynchrony: NoAsynchrony | AsyncServer  # synchronous rounds, or FedBuff / FedAsync on the simulated clock
    pooled: bool  # one client holding all training data (centralized SGD)

    def apply(self, state, tools, rnd: int):
        """Round ``rnd`` from the server ``state`` with the engine's ``tools`` (:mod:`fedrun.algorithms.round`):
        (new state, round output). A bank's algorithm runs the bank's rounds (``ModelBank.apply``); every other
        algorithm, the composed round of its parts; an asynchronous one, its server's steps (``AsyncServer.apply``)."""
        from fedrun.algorithms.round import composed_round

        if self.asynchrony.name != "none":
            return self.asynchrony.apply(self, state, tools, rnd)
        run = composed_round if self.bank.name == "none" else self.bank.apply
        return run(self, state, tools, rnd)

    def report(self, state) -> dict[str, float]:
        """What an evaluated round's metrics.csv row says of the run so far beyond the round itself: the privacy
        spent (``epsilon`` under DP-FedAvg, ``sample_epsilon`` under DP-SGD)."""
        return self.privacy.spent(state.privacy) | self.local.spent(state.clients)


def rule_class(local_name: str) -> type[LocalRule]:
    """The class ``algo/local=<local_name>`` builds, for what it declares (no instance needed)."""
    return get_class(SCHEMAS["local"][local_name].target)


def check_parts(algo: AlgoSettings) -> list[str]:
    """Combinations of parsed parts that cannot work, with the reason (from what the local rule declares); each
    part's own ranges were checked as it was parsed (:func:`~fedrun.algorithms.schema.parse_algo`)."""
    problems = []
    local = algo.local.name
    rule = rule_class(local)
    rules = {name: rule_class(name) for name in SCHEMAS["local"]}
    if algo.aggregator.name == "fednova" and not rule.reports_step_counts:
        problems.append(f"algo/aggregator=fednova with algo/local={local}: FedNova normalises each update by the "
                        f"client's count of SGD steps a_i, which {local} does not report. Fix: use a local rule of "
                        f"{sorted(n for n, r in rules.items() if r.reports_step_counts)}")
    if algo.step_selector.name != "all" and not rule.one_gradient_per_step:
        problems.append(f"algo/step_selector={algo.step_selector.name} with algo/local={local}: a {local} step is "
                        f"not one minibatch gradient to herd. Fix: use an SGD-based local rule")
    if algo.bank.name != "none":
        if not rule.trains_a_bank:
            problems.append(f"algo/bank={algo.bank.name} with algo/local={local}: MA-/GA-FSVRG's clients run FSVRG "
                            "steps from their preferred model. Fix: use algo/local="
                            + next(n for n, r in rules.items() if r.trains_a_bank))
        defaults = {"step_selector": "all", "harmonizer": "none", "schedule": "fixed"}
        others = [f"algo/{part}={algo.parts[part].name}" for part, name in defaults.items()
                  if algo.parts[part].name != name]
        if others:
            problems.append(f"algo/bank={algo.bank.name} with {', '.join(others)}: a bank round (Zhao et al. "
                            "Procedures 1-4) has no plug point for them. Fix: use algo/step_selector=all, "
                            "algo/harmonizer=none and algo/schedule=fixed")
    if algo.privacy.name != "none":
        problems += privacy_problems(algo, rule)
    if algo.asynchrony.name != "none":
        problems += asynchrony_problems(algo, rule)
    if algo.pooled and rule.pooling_removes_its_correction:
        problems.append(f"algo=centralized with algo/local={local}: a single client holding all data makes the "
                        f"{local} correction vanish. Fix: use algo/local=sgd")
    return problems


def algo_settings(algo_cfg) -> AlgoSettings:
    """A composed ``algo`` node typed, every problem (each part's ranges, then how they combine) raised at once as a
    ConfigError: for code and tests that build an algorithm without a whole run's config."""
    algo, problems = parse_algo(algo_cfg)
    problems = problems or check_parts(algo)
    if problems:
        raise ConfigError(problems)
    return algo


def privacy_problems(algo: AlgoSettings, rule: type[LocalRule]) -> list[str]:
    """Parts whose combination with client-level DP would release more than the clipped, noised sum (each refused with
    the reason; the order is: the client's steps and their selection, its update clipped, the sum noised, then the
    server optimiser, which only post-processes the release)."""
    privacy, local = f"algo/privacy={algo.privacy.name}", algo.local.name
    problems = []
    if rule.releases_more is not None:
        problems.append(f"{privacy} with algo/local={local}: {rule.releases_more}, which the clipped, noised sum "
                        "does not cover. Fix: algo/local=sgd (FedAvg, FedProx with algo.local.mu)")
    aggregator = algo.aggregator
    weighting = getattr(aggregator, "weighting", None)
    if aggregator.name != "mean" or weighting != "uniform":
        problems.append(f"{privacy} with algo/aggregator={aggregator.name} (weighting {weighting}): DP-FedAvg's "
                        "fixed-denominator estimator weighs each clipped update alike, so one client moves the sum by "
                        "at most C. Fix: algo/aggregator=mean algo.aggregator.weighting=uniform (algo=dp_fedavg sets "
                        "both)")
    if algo.harmonizer.name != "none":
        problems.append(f"{privacy} with algo/harmonizer={algo.harmonizer.name}: a harmoniser changes each update "
                        "by the others', so one client's data moves every update and the sum's sensitivity is no "
                        "longer C; after the noise no single update is left to harmonise. Fix: algo/harmonizer=none")
    if algo.step_selector.name == "grab":
        problems.append(f"{privacy} with algo/step_selector=grab: GraB's server keeps each client's mean step, "
                        "unclipped and unnoised. Fix: algo/step_selector=herd (BHerd selects on the client)")
    if algo.schedule.name != "fixed":
        problems.append(f"{privacy} with algo/schedule={algo.schedule.name}: the schedule sets tau from each "
                        "client's update or loss, which the server does not see under DP. Fix: algo/schedule=fixed")
    if algo.pooled:
        problems.append(f"{privacy} with algo=centralized: client-level DP needs clients. Fix: a federated algo")
    return problems


def asynchrony_problems(algo: AlgoSettings, rule: type[LocalRule]) -> list[str]:
    """Parts not defined under an asynchronous server (each refused with the reason)."""
    server, local = f"algo/asynchrony={algo.asynchrony.name}", algo.local.name
    problems = []
    if rule.releases_more is not None or rule.needs_full_gradients or local in ("scaffold", "feddyn"):
        problems.append(f"{server} with algo/local={local}: its server state (control variates, FedDyn's h, full "
                        "gradients) is defined over a synchronous cohort, not over updates of different model "
                        "versions. Fix: algo/local=sgd (FedAvg, FedProx)")
    if algo.aggregator.name != "mean":
        problems.append(f"{server} with algo/aggregator={algo.aggregator.name}: FedNova's normalisation of a "
                        "synchronous cohort is not defined over stale updates. Fix: algo/aggregator=mean")
    for part, default, why in (("harmonizer", "none", "harmonises a synchronous cohort's updates"),
                               ("step_selector", "all", "is not yet run by the asynchronous server"),
                               ("schedule", "fixed", "changes tau from a synchronous round's updates"),
                               ("privacy", "none", "is accounted for synchronous rounds"),
                               ("bank", "none", "groups a synchronous cohort's models")):
        if algo.parts[part].name != default:
            problems.append(f"{server} with algo/{part}={algo.parts[part].name}: it {why}. Fix: algo/{part}={default}")
    opt = algo.server_opt
    lr = getattr(opt, "lr", None)
    if algo.asynchrony.name == "fedasync" and (opt.name != "sgd" or lr != 1.0):
        problems.append(f"{server} with algo/server_opt={opt.name} (lr {lr}): FedAsync mixes each model "
                        "in (its alpha) instead of a server optimiser's step. Fix: algo/server_opt=sgd "
                        "algo.server_opt.lr=1")
    if algo.pooled:
        problems.append(f"{server} with algo=centralized: asynchrony needs clients. Fix: a federated algo")
    return problems


def method_name(algo_cfg) -> str:
    """The full method a run trains, for the console, summary.json, W&B and reports: the preset's name, plus each
    paper's part it does not already name (``fedavg+fedgh``, ``fedavg+gift``, ``bherd+random``, ``scaffold+dgt``),
    and a local rule other than its preset's own (``fedavg+scaffold``, or a rule of the user's: ``fedavg+clipped``)."""
    name = str(algo_cfg.name)
    own = preset_local_rule(name)
    parts = [algo_cfg.local.name] if own is not None and algo_cfg.local.name != own else []
    selector = algo_cfg.step_selector.name
    if selector != "all" and not (selector == "herd" and "bherd" in name or selector == "grab" and "grab" in name):
        parts.append(selector)
    harmonizer = algo_cfg.harmonizer
    if harmonizer.name != "none":
        parts.append(harmonizer.name + ("-norm" if getattr(harmonizer, "mode", None) == "norm_only" else ""))
    if algo_cfg.schedule.name != "fixed":
        parts.append(algo_cfg.schedule.name)
    if algo_cfg.privacy.name != "none" and algo_cfg.privacy.name not in name:
        parts.append(algo_cfg.privacy.name)
    if algo_cfg.asynchrony.name != "none" and algo_cfg.asynchrony.name not in name:
        parts.append(algo_cfg.asynchrony.name)
    if algo_cfg.bank.name != "none" and not name.startswith(algo_cfg.bank.name):
        parts.append(f"{algo_cfg.bank.name}-bank")
    return "+".join([name, *parts])


@functools.cache
def preset_local_rule(preset: str) -> str | None:
    """The name of the local rule the algo preset ``conf/algo/<preset>.yaml`` trains with (its ``local`` option's
    ``name``: ``prox`` is SGD with a proximal term, named ``sgd``); None for a preset fedrun does not ship."""
    import yaml

    from fedrun.config.compose import CONF_DIR

    path = Path(CONF_DIR) / "algo" / f"{preset}.yaml"
    if not path.exists():
        return None
    defaults = (yaml.safe_load(path.read_text()) or {}).get("defaults") or []
    option = next((d["local"] for d in defaults if isinstance(d, dict) and "local" in d), None)
    chosen = Path(CONF_DIR) / "algo" / "local" / f"{option}.yaml"
    return (yaml.safe_load(chosen.read_text()) or {}).get("name") if option and chosen.exists() else None


def build_algorithm(algo: AlgoSettings) -> Algorithm:
    """The algorithm of checked settings (:func:`fedrun.config.checks.validate`'s ``.algo``, or :func:`algo_settings`):
    each part built from its parsed config, nothing checked again."""
    return Algorithm(name=method_name(algo), **{part: config.build() for part, config in algo.parts.items()},
                     pooled=algo.pooled)


__all__ = ["PARTS", "STATEFUL_PARTS", "Algorithm", "AlgoSettings", "algo_settings", "build_algorithm", "check_parts",
           "method_name"]
