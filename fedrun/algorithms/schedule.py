"""Synchronisation schedules: how many local steps each client takes in a round, decided from what the server saw.

A schedule answers ``local_steps(n_i, E, B)`` when a round is planned and ``observe(updates)`` after the round with
the stacked updates the clients sent (K, d), returning what it logs. ``fixed`` keeps tau_i = floor(E n_i / B);
GIFT tunes one tau for every client from the updates alone (no losses, no data statistics).
"""

from __future__ import annotations

import math

import torch


class FixedSchedule:
    """Each client takes tau_i = floor(E |D_i| / B) local steps every round, at least 1 (BHerd Sec. III-A)."""

    name = "fixed"

    def local_steps(self, num_samples: int, epochs: float, batch_size: int) -> int:
        return max(1, math.floor(epochs * num_samples / batch_size + 1e-9))

    def observe(self, updates: torch.Tensor) -> dict[str, float]:
        return {}


def gradient_consistency(positive: torch.Tensor, negative: torch.Tensor) -> float:
    """GIFT's C = ||P + N|| / (||P|| + ||N||) (Sec. 5.2): 1 when all updates agree in sign per coordinate, 0 when the
    positive and negative parts cancel."""
    denom = torch.linalg.vector_norm(positive) + torch.linalg.vector_norm(negative)
    return float(torch.linalg.vector_norm(positive + negative) / denom) if denom > 0 else 1.0


class GIFT:
    """GIFT (002_66c596d062c27b08.txt, Sec. 5; NOTES.md): every client takes tau local iterations (tau_0 = 100).
    After each round the server pools the updates u_i = w_i - w_t it received into two EMAs,
    P_r = beta P_{r-1} + (1 - beta) sum_i relu(u_i) and N_r = beta N_{r-1} + (1 - beta) sum_i -relu(-u_i) (both start
    at 0), and computes the Gradient Consistency C_r = ||P_r + N_r|| / (||P_r|| + ||N_r||). When C_r has not decreased
    for ``patience`` consecutive rounds, tau <- max(1, floor(tau / factor)) and the count restarts. With ``relax``
    (Sec. 6.4), tau <- tau + relax_step once C_r has decreased for ``relax_after`` consecutive rounds, only until the
    first halving."""

    name = "gift"

    def __init__(self, tau0: int = 100, beta: float = 0.9, patience: int = 2, factor: int = 2, relax: bool = False,
                 relax_after: int = 10, relax_step: int = 5):
        self.tau, self.beta, self.patience, self.factor = int(tau0), float(beta), int(patience), int(factor)
        self.relax, self.relax_after, self.relax_step = bool(relax), int(relax_after), int(relax_step)
        self.positive: torch.Tensor | None = None
        self.negative: torch.Tensor | None = None
        self.consistency: float | None = None
        self.not_decreasing = 0  # consecutive rounds with C_r >= C_{r-1}
        self.decreasing = 0  # consecutive rounds with C_r < C_{r-1}
        self.halvings = 0

    def local_steps(self, num_samples: int, epochs: float, batch_size: int) -> int:
        return self.tau

    def observe(self, updates: torch.Tensor) -> dict[str, float]:
        """Fold the round's updates into the EMAs, update C_r and tau for the next round; returns C_r and the tau
        the next round will use."""
        u = updates.double()
        pos, neg = u.clamp_min(0).sum(dim=0), u.clamp_max(0).sum(dim=0)
        if self.positive is None:
            self.positive, self.negative = torch.zeros_like(pos), torch.zeros_like(neg)
        self.positive = self.beta * self.positive + (1 - self.beta) * pos
        self.negative = self.beta * self.negative + (1 - self.beta) * neg
        c = gradient_consistency(self.positive, self.negative)
        self.advance(c)
        return {"gift_C": c, "next_tau": float(self.tau)}

    def advance(self, c: float) -> int:
        """The tau rule on this round's C_r (the halving and relaxation counters); returns the next round's tau."""
        if self.consistency is not None:
            if c < self.consistency:
                self.decreasing, self.not_decreasing = self.decreasing + 1, 0
            else:
                self.decreasing, self.not_decreasing = 0, self.not_decreasing + 1
        self.consistency = c
        if self.not_decreasing >= self.patience:
            self.tau, self.not_decreasing, self.halvings = max(1, self.tau // self.factor), 0, self.halvings + 1
        elif self.relax and self.halvings == 0 and self.decreasing >= self.relax_after:
            self.tau, self.decreasing = self.tau + self.relax_step, 0
        return self.tau
