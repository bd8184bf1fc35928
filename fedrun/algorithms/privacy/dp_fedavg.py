"""Client-level differential privacy of the round's aggregate: DP-FedAvg with a fixed or an adaptive clip norm."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterator, Optional

from omegaconf import II

from fedrun.algorithms.base import State, StatefulPart
from fedrun.algorithms.part_config import PartConfig, is_int, is_number, register
from fedrun.algorithms.privacy.accounting import Sampling, epsilon, rounds_within
from fedrun.config.schema import DEFAULT, PARTICIPATIONS, Rule
from fedrun.errors import ConfigError
from fedrun.process.lazy import numpy as np
from fedrun.process.lazy import torch

ACCOUNTANTS = ("rdp", "pld")  # dp-accounting's Renyi-DP and privacy-loss-distribution accountants

_NOISE = 0xD9A1


class DPFedAvg(StatefulPart):
    """DP-FedAvg (McMahan et al., ICLR 2018, Algorithm 1 with the fixed-denominator estimator f~_f and w_k = 1): each
    update Delta_i is clipped to norm C, Delta_i min(1, C / ||Delta_i||) (one batched operation on the cohort's
    stacked updates); the clipped updates are summed, N(0, sigma^2 C^2 I) is added once and the sum is divided by the
    expected cohort size m (q N under Poisson sampling, K for K clients drawn without replacement), whatever the
    number of clients that reported; the server optimiser then takes it as it takes FedAvg's mean.

    Adaptive clipping (Andrew et al., NeurIPS 2021, Algorithm 1 and Theorem 1), with ``target_quantile`` gamma: the
    server also releases the noised share of updates within C, b~ = (sum_i 1[||Delta_i|| <= C] + N(0, sigma_b^2)) / m,
    and sets C <- C exp(-eta_C (b~ - gamma)). The two releases together are one Gaussian mechanism of noise multiplier
    z (``noise_multiplier``, what is accounted) when the update's is sigma = (z^-2 - (2 sigma_b)^-2)^(-1/2).

    State: ``clip`` (C now), ``released`` (rounds released so far), ``population`` (N)."""

    name = "dp_fedavg"
    releases_without_clients = True  # the noise is released (and accounted) every round, whoever joined

    def __init__(self, noise_multiplier: float, clip: float, target_quantile: float | None, clip_lr: float,
                 count_noise: float | None, delta: float, accountant: str, target_epsilon: float | None, seed: int,
                 rounds: int, sampling: Sampling):
        self.z, self.clip, self.quantile, self.clip_lr = float(noise_multiplier), float(clip), target_quantile, clip_lr
        self.count_noise, self.delta, self.accountant = count_noise, float(delta), accountant
        self.target_epsilon, self.seed, self.rounds, self.sampling = target_epsilon, int(seed), int(rounds), sampling

    def init(self, params: torch.Tensor | None = None, num_clients: int = 0) -> State:
        """The state before round 1; refuses a run whose ``rounds`` would spend more than ``target_epsilon``, with the
        rounds that fit, and a count noise too small for the noise multiplier."""
        if self.quantile is not None and self.z > 0 and self.z >= 2 * self._count_sigma(num_clients):
            raise ConfigError([f"algo.privacy.noise_multiplier={self.z}: must be < 2 count_noise "
                               f"({2 * self._count_sigma(num_clients):g} here) under adaptive clipping, which spends "
                               "part of the noise on the count (Andrew et al., Theorem 1). Fix: a larger "
                               "algo.privacy.count_noise, or algo.privacy.target_quantile=null"])
        if self.target_epsilon is not None:
            spent = self.epsilon_after(self.rounds, num_clients)
            if spent > self.target_epsilon:
                fit = rounds_within(self.target_epsilon, self.accountant, self.sampling, num_clients, self.z,
                                    self.delta, self.rounds)
                raise ConfigError([f"fl.rounds={self.rounds}: would spend epsilon {spent:.3g} at delta {self.delta:g}, "
                                   f"over algo.privacy.target_epsilon={self.target_epsilon}. Fix: fl.rounds={fit} "
                                   "(the most that fit), or more noise (algo.privacy.noise_multiplier)"])
        return {"clip": self.clip, "released": 0, "population": int(num_clients)}

    def _count_sigma(self, population: int) -> float:
        return self.count_noise if self.count_noise is not None else self.sampling.expected(population) / 20

    def update_noise(self, population: int) -> float:
        """The update's noise multiplier: z, less what the adaptive clip's count takes."""
        if self.quantile is None or self.z == 0:
            return self.z
        return (self.z ** -2 - (2 * self._count_sigma(population)) ** -2) ** -0.5

    def epsilon_after(self, rounds: int, population: int) -> float:
        return epsilon(self.accountant, self.sampling, population, self.z, rounds, self.delta)

    def release(self, state: State, updates: torch.Tensor, weights: torch.Tensor, uploads: dict, aggregate, rnd: int
                ) -> tuple[State, torch.Tensor, dict[str, float]]:
        """(new state, the noised mean of the clipped updates (d,), the round's C and share of updates within it)."""
        population, c = state["population"], float(state["clip"])
        m = self.sampling.expected(population)
        norms = torch.linalg.vector_norm(updates, dim=1)
        clipped = updates * (c / norms).clamp(max=1.0)[:, None]  # an update within C: times 1, as it was
        total = aggregate(clipped, updates.new_full((len(updates),), 1 / m), uploads)
        noise = torch.Generator(device=updates.device).manual_seed(
            int(np.random.SeedSequence([self.seed, _NOISE, rnd]).generate_state(1)[0]))
        sigma = self.update_noise(population)
        if sigma > 0:
            total = total + torch.randn(total.shape, generator=noise, device=total.device, dtype=total.dtype) * (
                sigma * c / m)
        within = int((norms <= c).sum())
        new = {**state, "released": state["released"] + 1}
        if self.quantile is not None:
            count = within + self._count_sigma(population) * float(torch.randn(
                (), generator=noise, device=updates.device, dtype=torch.float64))
            new["clip"] = c * math.exp(-self.clip_lr * (count / m - self.quantile))
        return new, total, {"dp_clip": c, "dp_within_clip": within / max(1, len(updates))}

    def spent(self, state: State) -> dict[str, float]:
        """Epsilon at ``delta`` after the rounds released so far (the accountant's)."""
        return {"epsilon": self.epsilon_after(state["released"], state["population"])}


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
