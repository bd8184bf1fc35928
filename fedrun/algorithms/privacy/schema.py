"""The typed config of each option of algo/privacy: its settings, their defaults and ranges, registered as the schema
its YAML (conf/algo/privacy/) extends. No torch: checking a config needs none."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterator, Optional

from omegaconf import II

from fedrun.algorithms.schema import PartConfig, is_int, is_number, register
from fedrun.config.schema import DEFAULT, PARTICIPATIONS, Rule

ACCOUNTANTS = ("rdp", "pld")  # dp-accounting's Renyi-DP and privacy-loss-distribution accountants


@register
@dataclass
class NoPrivacyConfig(PartConfig):
    """The server sees every update as its client sent it."""

    part, target, options = "privacy", "fedrun.algorithms.privacy.none.NoPrivacy", ("none",)
    name: str = "none"


@register
@dataclass
class DPFedAvgConfig(PartConfig):
    """Client-level DP (McMahan et al. 2018; adaptive clipping: Andrew et al. 2021). The sampling it is accounted for
    is the run's (``participation``: poisson at ``participation.rate``, or uniform: fl.clients_per_round without
    replacement)."""

    part, target, options = "privacy", "fedrun.algorithms.privacy.dp_fedavg.DPFedAvg", ("dp_fedavg",)
    name: str = "dp_fedavg"
    noise_multiplier: float = 1.0  # z: the noise's standard deviation over the clip norm C (of the whole release)
    clip: float = 1.0  # C; with target_quantile, C before round 1 (Andrew et al. start at 0.1)
    target_quantile: Optional[float] = None  # gamma: adaptive clipping to this quantile of the norms; null: fixed C
    clip_lr: float = 0.2  # eta_C: C <- C exp(-eta_C (noised share of norms <= C - gamma))
    count_noise: Optional[float] = None  # sigma_b of the noised count; null: the expected cohort / 20 (their default)
    delta: float = 1e-5
    accountant: str = "rdp"  # rdp | pld (pld: Poisson sampling only)
    target_epsilon: Optional[float] = None  # refuse a run whose fl.rounds would spend more than this
    seed: int = II("seed")  # the noise's
    rounds: int = II("fl.rounds")
    sampling: str = II("participation.name")
    rate: Optional[float] = II("participation.rate")
    clients_per_round: int = II("fl.clients_per_round")

    def rules(self) -> Iterator[Rule]:
        yield is_number(self.noise_multiplier) and self.noise_multiplier >= 0, "noise_multiplier", "must be >= 0", \
            DEFAULT
        yield is_number(self.clip) and self.clip > 0, "clip", "must be > 0 (inf: no clipping)", DEFAULT
        yield (self.target_quantile is None or is_number(self.target_quantile) and 0 < self.target_quantile < 1,
               "target_quantile", "must be null (fixed clip) or in (0, 1)", "0.5")
        yield (self.noise_multiplier == 0 or math.isfinite(self.clip), "clip",
               "must be finite when noise is added (the noise's standard deviation is noise_multiplier C)", DEFAULT)
        yield is_number(self.clip_lr) and self.clip_lr > 0, "clip_lr", "must be > 0", DEFAULT
        yield (self.count_noise is None or is_number(self.count_noise) and self.count_noise > 0, "count_noise",
               "must be null (expected cohort / 20) or > 0", "null")
        yield (self.target_quantile is None or math.isfinite(self.clip), "clip",
               "must be finite when adapted (target_quantile set)", "0.1")
        yield is_number(self.delta) and 0 < self.delta < 1, "delta", "must be in (0, 1)", DEFAULT
        yield self.accountant in ACCOUNTANTS, "accountant", f"must be one of {ACCOUNTANTS}", DEFAULT
        yield (self.target_epsilon is None or is_number(self.target_epsilon) and self.target_epsilon > 0,
               "target_epsilon", "must be null or > 0", "null")
        yield is_int(self.seed), "seed", "must be an integer", DEFAULT
        # the run's settings the accounting reads (checked in their own sections too)
        yield is_int(self.rounds) and self.rounds >= 1, "rounds", "must be an integer >= 1 (fl.rounds)", "100"
        yield self.sampling in PARTICIPATIONS, "sampling", f"must be one of {PARTICIPATIONS} (participation)", \
            "uniform"
        yield (self.rate is None or is_number(self.rate) and 0 < self.rate <= 1, "rate",
               "must be null or in (0, 1] (participation.rate)", "0.1")
        yield (is_int(self.clients_per_round) and self.clients_per_round >= 1, "clients_per_round",
               "must be an integer >= 1 (fl.clients_per_round)", "10")

    def arguments(self) -> dict[str, Any]:
        return {k: v for k, v in super().arguments().items() if k not in ("rate", "sampling", "clients_per_round")} | {
            "sampling": Sampling(self.sampling, self.rate, self.clients_per_round)}


@dataclass(frozen=True)
class Sampling:
    """How the run picks a round's clients, as the accountant needs it: ``poisson`` (each client independently at
    ``rate``) or ``uniform`` (``per_round`` of the population without replacement)."""

    name: str
    rate: float | None
    per_round: int

    def expected(self, population: int) -> float:
        """The expected cohort size: q N, or min(K, N)."""
        return self.rate * population if self.name == "poisson" else float(min(self.per_round, population))
