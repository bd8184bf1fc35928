"""AFL: tau chosen each round by its control rule, from the clients' gradients and losses at their last local
iterate and at the new global model, and the time model's step and synchronisation times."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from fedrun.algorithms.base import State, StatefulPart
from fedrun.algorithms.part_config import PartConfig, is_int, is_number, is_unit, register
from fedrun.algorithms.schedule.feedback import Probing, RoundFeedback
from fedrun.config.schema import DEFAULT, Rule
from fedrun.process.lazy import numpy as np
from fedrun.process.lazy import torch


def afl_objective(tau: np.ndarray, beta: float, rho: float, delta: float, eta: float, phi: float, c: float,
                  b: float, budget: float) -> np.ndarray:
    """AFL's G(tau) (Wang et al. 2019, the authors' ``adaptive_tau.py``; reference-rules.md §9):
    h(tau) = max(0, (delta / beta)((eta beta + 1)^tau - 1) - eta delta tau), T' = (R - c - b) tau / (c tau + b),
    G = [1 + sqrt(1 + 4 T'^2 phi rho eta h / tau)] / (2 T' eta phi) + rho h."""
    tau = np.asarray(tau, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        h = np.maximum(0.0, (delta / beta) * (np.power(eta * beta + 1.0, tau) - 1.0) - eta * delta * tau)
        t_adj = (budget - c - b) * tau / (c * tau + b)
        inner = np.maximum(0.0, 1.0 + 4.0 * t_adj**2 * phi * rho * eta * h / tau)
        g = (1.0 + np.sqrt(inner)) / (2.0 * t_adj * eta * phi) + rho * h
    return np.where(np.isfinite(g), g, np.inf)


class AFL(Probing, StatefulPart):
    """AFL's control rule (Wang et al., "Adaptive Federated Learning in Resource Constrained Edge Computing
    Systems", 2019; the authors' code, reference-rules.md §9). After each round, per client i with w_i its last local
    iterate and w the new global model, on its last minibatch:
    beta_i = ||grad F_i(w_i) - grad F_i(w)|| / ||w_i - w|| (floored at beta_floor), rho_i = |F_i(w_i) - F_i(w)| /
    ||w_i - w||; beta, rho and delta = sum_i D_i ||grad F_i(w) - grad F(w)|| / D are D_i-weighted means over the
    round's clients (moving averages with ``moving_average`` holding weight). The next tau minimises
    :func:`afl_objective` over 1..search_factor * tau, capped at tau_max, with c (seconds per local step) and b
    (seconds per synchronisation) from the time model and R = timing.budget_s; when the budget cannot pay for another
    round of that tau, tau shrinks to what remains. The authors' clients send these estimates one round later (they
    only see w at the next round's start); fedrun computes the same quantities at aggregation time."""

    name = "afl"
    reads_each_update = True  # each client's last local iterate, w_t + its update, is probed

    def __init__(self, phi: float, tau_init: int, tau_max: int, search_factor: int,
                 moving_average: float, beta_floor: float):
        self.phi, self.tau_init = float(phi), int(tau_init)
        self.tau_max, self.search_factor = int(tau_max), int(search_factor)
        self.moving_average, self.beta_floor = float(moving_average), float(beta_floor)

    def init(self, params=None, num_clients: int = 0) -> State:
        """The tau in force and the moving averages of beta, rho and delta (None before the first round)."""
        return {"tau": self.tau_init, "estimates": None}

    def local_steps(self, state: State, num_samples: int, epochs: float, batch_size: int) -> int:
        return state["tau"]

    def probes(self, state: State) -> tuple[str, ...]:
        """The clients' objectives at their last local iterates and at the new model (beta, rho, delta)."""
        return ("local", "new")

    def estimate(self, feedback: RoundFeedback) -> dict[str, float]:
        """beta, rho and delta of this round (before the moving average)."""
        w_local = feedback.local_params
        f_loc, g_loc = feedback.probed["local"]
        f_glob, g_glob = feedback.probed["new"]
        p = (feedback.sizes / feedback.sizes.sum()).to(torch.float64)
        dist = torch.linalg.vector_norm((w_local - feedback.new_params).double(), dim=1)
        moved = dist > 1e-10
        safe = torch.where(moved, dist, torch.ones_like(dist))
        beta_i = torch.where(moved, torch.linalg.vector_norm((g_loc - g_glob).double(), dim=1) / safe, 0.0)
        beta_i = torch.nan_to_num(beta_i, nan=0.0).clamp_min(self.beta_floor)
        rho_i = torch.nan_to_num(torch.where(moved, (f_loc - f_glob).double().abs() / safe, 0.0), nan=0.0)
        g_mean = p @ g_glob.double()
        delta = float(p @ torch.linalg.vector_norm(g_glob.double() - g_mean, dim=1))
        return {"beta": float(p @ beta_i), "rho": float(p @ rho_i), "delta": delta}

    def choose_tau(self, tau: int, beta: float, rho: float, delta: float, eta: float, c: float, b: float,
                   budget: float) -> int:
        """argmin of G over 1..search_factor * tau (the first minimum; ``tau`` the one in force), capped at
        tau_max."""
        taus = np.arange(1, self.search_factor * tau + 1)
        g = afl_objective(taus, beta, rho, delta, eta, self.phi, c, b, budget)
        return min(int(taus[int(np.argmin(g))]), self.tau_max) if np.isfinite(g).any() else tau

    def observe(self, state: State, feedback: RoundFeedback) -> tuple[State, dict[str, float]]:
        now, e = self.estimate(feedback), state["estimates"]
        m = self.moving_average
        e = now if e is None else {k: m * e[k] + (1 - m) * now[k] for k in now}
        c, b, budget = feedback.step_time_s, feedback.sync_time_s, feedback.budget_s
        tau = self.choose_tau(state["tau"], e["beta"], e["rho"], e["delta"], feedback.lr, c, b, budget)
        spent = feedback.elapsed_s or 0.0
        if spent + c * (tau + 1) + 2 * b >= budget:  # the budget cannot pay for another round of this tau
            tau = min(tau, max(1, int((budget - spent - 2 * b - c) / c)))
        return {"tau": tau, "estimates": e}, {f"afl_{k}": v for k, v in e.items()} | {"next_tau": float(tau)}


@register
@dataclass
class AFLConfig(PartConfig):
    part, target, options = "schedule", "fedrun.algorithms.schedule.afl.AFL", ("afl",)
    name: str = "afl"
    phi: float = 5.0e-5  # control parameter: 5e-5 for CNNs, 0.025 for the smooth SVM (authors' config.py)
    tau_init: int = 1
    tau_max: int = 100
    search_factor: int = 10  # search tau in 1..search_factor * previous tau
    moving_average: float = 0.0  # holding weight of the estimates' moving average (authors' default 0)
    beta_floor: float = 1.0e-5

    def rules(self) -> Iterator[Rule]:
        for key, fix in (("phi", "5e-5"), ("beta_floor", "1e-5")):
            value = getattr(self, key)
            yield is_number(value) and value > 0, key, "must be > 0", fix
        for key, fix in (("tau_init", "1"), ("tau_max", "100"), ("search_factor", "10")):
            value = getattr(self, key)
            yield is_int(value) and value >= 1, key, "must be an integer >= 1", fix
        yield is_unit(self.moving_average), "moving_average", "must be in [0, 1)", DEFAULT
