"""Synchronisation schedules: how many local steps each client takes in a round, decided from what the server saw.

A schedule's settings are its attributes and what rounds change is its state (``init`` -> state, a dict of plain
values that a checkpoint saves). It answers ``local_steps(state, n_i, E, B)`` when a round is planned and
``observe(state, feedback) -> (new state, what it logs)`` after the round's aggregation; neither changes the state it
is given. What each reads from :class:`RoundFeedback` is what its paper needs:
``fixed`` nothing (tau_i = floor(E n_i / B)); GIFT only the updates the clients sent (no losses, no data
statistics); AdaComm the training loss at the new global model; AFL the clients' gradients and losses at their last
local iterate and at the new global model, and the time model's per-step and per-synchronisation times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from fedrun.algorithms.base import State, StatefulPart


@dataclass
class RoundFeedback:
    """What the server can learn after a round. ``probed`` holds, for each point a schedule asked for (its
    ``probes``: ``old`` w_t, ``new`` w_{t+1}, ``local`` each client's last local iterate), the training objective
    (loss plus (weight_decay / 2) ||w||^2) and its gradient there on each of the round's clients' last minibatch:
    losses (K,) and gradients (K, d). A point costs two passes per client, so only the schedules that read them (AFL,
    AdaComm) ask."""

    updates: torch.Tensor  # (K, d) the updates the server received (after client-side selection), w_i - w_t
    old_params: torch.Tensor  # w_t, the model the round started from
    new_params: torch.Tensor  # w_{t+1}, the aggregated model
    sizes: torch.Tensor  # (K,) n_i of the round's clients
    lr: float  # the next round's learning rate
    lr0: float  # the first round's learning rate
    step_time_s: float | None = None  # time model: seconds per local step (None without timing=simulated)
    sync_time_s: float | None = None  # time model: the round's time outside local steps (reports, transfers)
    elapsed_s: float | None = None  # simulated time so far, this round included
    budget_s: float | None = None  # timing.budget_s
    local_params: torch.Tensor | None = None  # (K, d) each client's last local iterate, when ``local`` is probed
    probed: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)


PROBE_POINTS = ("old", "new", "local")


class Probing:
    """A schedule reads no client objective by default (``probes``: none)."""

    def probes(self, state: State) -> tuple[str, ...]:
        """The points (of PROBE_POINTS) whose objectives on the clients' last minibatches this round's ``observe``
        reads."""
        return ()


class FixedSchedule(Probing, StatefulPart):
    """Each client takes tau_i = floor(E |D_i| / B) local steps every round, at least 1 (BHerd Sec. III-A), or
    ``tau`` steps when it is given (FedAvg with a fixed number of local iterations, GIFT Table 1's baseline). With
    ``switch_round``, every client takes ``switch_tau`` steps from that round on (GIFT Fig. 3: tau 500, then 1 once
    the run has stagnated)."""

    name = "fixed"

    def __init__(self, tau: int | None, switch_round: int | None, switch_tau: int | None):
        self.tau, self.switch_round, self.switch_tau = tau, switch_round, switch_tau

    def init(self, params=None, num_clients: int = 0) -> State:
        return {"rounds": 0, "tau": self.tau}  # rounds observed so far; the tau in force (None: from E, n_i, B)

    def local_steps(self, state: State, num_samples: int, epochs: float, batch_size: int) -> int:
        if state["tau"] is not None:
            return int(state["tau"])
        return max(1, math.floor(epochs * num_samples / batch_size + 1e-9))

    def observe(self, state: State, feedback: RoundFeedback) -> tuple[State, dict[str, float]]:
        if self.switch_round is None:
            return state, {}
        rounds = state["rounds"] + 1
        tau = int(self.switch_tau) if rounds + 1 >= self.switch_round else state["tau"]
        return {"rounds": rounds, "tau": tau}, ({} if tau is None else {"next_tau": float(tau)})


def gradient_consistency(positive: torch.Tensor, negative: torch.Tensor) -> float:
    """GIFT's C = ||P + N|| / (||P|| + ||N||) (Sec. 5.2): 1 when all updates agree in sign per coordinate, 0 when the
    positive and negative parts cancel."""
    denom = torch.linalg.vector_norm(positive) + torch.linalg.vector_norm(negative)
    return float(torch.linalg.vector_norm(positive + negative) / denom) if denom > 0 else 1.0


class GIFT(Probing, StatefulPart):
    """GIFT (anonymous submission, Sec. 5; NOTES.md): every client takes tau local iterations (tau_0 = 100).
    After each round the server pools the updates u_i = w_i - w_t it received into two EMAs,
    P_r = beta P_{r-1} + (1 - beta) sum_i relu(u_i) and N_r = beta N_{r-1} + (1 - beta) sum_i -relu(-u_i) (both start
    at 0), and computes the Gradient Consistency C_r = ||P_r + N_r|| / (||P_r|| + ||N_r||). When C_r has not decreased
    for ``patience`` consecutive rounds, tau <- max(1, floor(tau / factor)) and the count restarts. With ``relax``
    (Sec. 6.4), tau <- tau + relax_step once C_r has decreased for ``relax_after`` consecutive rounds, only until the
    first halving. ``warmup`` rounds pass before C_r is compared at all (0, the paper's rule). The EMAs' zero start
    does not bias C_r (P_r and N_r carry the same (1 - beta) factors, which cancel in the ratio); what can make C_r
    rise over the first rounds, and so halve tau early, is the updates themselves growing more consistent while the
    model leaves its initialisation (``gift_C_round``, the ratio of each round's updates alone, shows it)."""

    name = "gift"
    reads_each_update = True  # each update's positive and negative parts, pooled

    def __init__(self, tau0: int, beta: float, patience: int, factor: int, relax: bool,
                 relax_after: int, relax_step: int, warmup: int):
        self.tau0, self.beta, self.patience, self.factor = int(tau0), float(beta), int(patience), int(factor)
        self.relax, self.relax_after, self.relax_step = bool(relax), int(relax_after), int(relax_step)
        self.warmup = int(warmup)

    def init(self, params=None, num_clients: int = 0) -> State:
        """tau_0, the EMAs P and N (None until the first round), the last C_r, the rounds observed and the counters:
        consecutive rounds with C_r >= C_{r-1} (``not_decreasing``) and with C_r < C_{r-1} (``decreasing``), and the
        halvings so far."""
        return {"tau": self.tau0, "positive": None, "negative": None, "rounds": 0, "consistency": None,
                "decreasing": 0, "not_decreasing": 0, "halvings": 0}

    def local_steps(self, state: State, num_samples: int, epochs: float, batch_size: int) -> int:
        return state["tau"]

    def observe(self, state: State, feedback: RoundFeedback) -> tuple[State, dict[str, float]]:
        """Fold the round's updates into the EMAs, update C_r and tau for the next round; logs C_r and the tau the
        next round will use."""
        u = feedback.updates.double()
        pos, neg = u.clamp_min(0).sum(dim=0), u.clamp_max(0).sum(dim=0)
        positive = torch.zeros_like(pos) if state["positive"] is None else state["positive"]
        negative = torch.zeros_like(neg) if state["negative"] is None else state["negative"]
        positive = self.beta * positive + (1 - self.beta) * pos
        negative = self.beta * negative + (1 - self.beta) * neg
        c = gradient_consistency(positive, negative)
        state = self.advance({**state, "positive": positive, "negative": negative}, c)
        # gift_C_round: this round's updates alone, without the EMA (what the smoothing smooths)
        return state, {"gift_C": c, "gift_C_round": gradient_consistency(pos, neg), "next_tau": float(state["tau"])}

    def advance(self, state: State, c: float) -> State:
        """The tau rule on this round's C_r (the halving and relaxation counters): the state for the next round."""
        state = {**state, "rounds": state["rounds"] + 1}
        if state["rounds"] <= self.warmup:
            return {**state, "consistency": c}
        if state["consistency"] is not None:
            if c < state["consistency"]:
                state["decreasing"], state["not_decreasing"] = state["decreasing"] + 1, 0
            else:
                state["decreasing"], state["not_decreasing"] = 0, state["not_decreasing"] + 1
        state["consistency"] = c
        if state["not_decreasing"] >= self.patience:
            state |= {"tau": max(1, state["tau"] // self.factor), "not_decreasing": 0,
                      "halvings": state["halvings"] + 1}
        elif self.relax and state["halvings"] == 0 and state["decreasing"] >= self.relax_after:
            state |= {"tau": state["tau"] + self.relax_step, "decreasing": 0}
        return state


class AdaComm(Probing, StatefulPart):
    """AdaComm (Wang & Joshi 2019; reference-rules.md §9): tau_l = ceil(sqrt(eta_0 F_l / (eta_l F_0)) tau_0), F the
    training loss at the global model at the start of interval l, F_0 at the initial model. fedrun estimates F as the
    n_i-weighted loss of the global model on the round's clients' last minibatches (the server learns losses: the
    paper needs them). ``interval_s``: null recomputes tau every round (Paddle's AdaptiveLocalSGD), a number every
    that many simulated seconds (the paper's wall-clock intervals T_0). ``form=paddle`` puts tau_0 inside the square
    root as Paddle does. ``halve_on_plateau``: when F did not decrease over an interval, tau is halved instead (the
    fallback GIFT's Sec. 6.3 describes). ``tau_max`` caps tau (Paddle: 16; null: no cap)."""

    name = "adacomm"

    def __init__(self, tau0: int, interval_s: float | None, form: str,
                 halve_on_plateau: bool, tau_max: int | None):
        self.tau0, self.interval_s, self.form = int(tau0), interval_s, form
        self.halve_on_plateau, self.tau_max = bool(halve_on_plateau), tau_max

    def init(self, params=None, num_clients: int = 0) -> State:
        """tau_0; F_0 and the loss at the last update of tau (None before the first round); the simulated time of
        the next update."""
        return {"tau": self.tau0, "loss0": None, "last_loss": None,
                "next_update_s": float(self.interval_s) if self.interval_s else 0.0}

    def local_steps(self, state: State, num_samples: int, epochs: float, batch_size: int) -> int:
        return state["tau"]

    def tau_for(self, loss: float, loss0: float, lr: float, lr0: float) -> int:
        """The rule's tau for the loss ratio F / F_0 at learning rate lr (lr0 at the start)."""
        ratio = lr0 * loss / (lr * loss0)
        raw = math.sqrt(ratio * self.tau0) if self.form == "paddle" else math.sqrt(ratio) * self.tau0
        tau = max(1, math.ceil(raw - 1e-12))
        return min(tau, int(self.tau_max)) if self.tau_max else tau

    def probes(self, state: State) -> tuple[str, ...]:
        """F at the new model, and at the first round's start (F_0) once."""
        return ("old", "new") if state["loss0"] is None else ("new",)

    def observe(self, state: State, feedback: RoundFeedback) -> tuple[State, dict[str, float]]:
        state = dict(state)
        p = (feedback.sizes / feedback.sizes.sum()).double()
        if state["loss0"] is None:
            state["loss0"] = state["last_loss"] = float(p @ feedback.probed["old"][0].double())
        loss = float(p @ feedback.probed["new"][0].double())
        elapsed = feedback.elapsed_s or 0.0
        if self.interval_s is None or elapsed >= state["next_update_s"]:
            if self.interval_s:
                state["next_update_s"] += float(self.interval_s) * max(1, math.ceil(
                    (elapsed - state["next_update_s"]) / float(self.interval_s) + 1e-12))
            if self.halve_on_plateau and loss >= state["last_loss"]:
                state["tau"] = max(1, state["tau"] // 2)
            else:
                state["tau"] = self.tau_for(loss, state["loss0"], feedback.lr, feedback.lr0)
            state["last_loss"] = loss
        return state, {"adacomm_loss": loss, "next_tau": float(state["tau"])}


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
