"""GIFT: tau cut (by ``factor``) once the gradient consistency of the updates the clients sent stops falling."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from fedrun.algorithms.base import State, StatefulPart
from fedrun.algorithms.schedule.feedback import Probing, RoundFeedback
from fedrun.algorithms.part_config import PartConfig, is_int, is_unit, register
from fedrun.config.schema import DEFAULT, Rule
from fedrun.process.lazy import torch


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


@register
@dataclass
class GIFTConfig(PartConfig):
    part, target, options = "schedule", "fedrun.algorithms.schedule.gift.GIFT", ("gift",)
    name: str = "gift"
    tau0: int = 100  # initial local iterations per round
    beta: float = 0.9  # EMA coefficient of the pooled positive/negative update parts
    patience: int = 2  # halve after this many consecutive rounds without a decrease of C_r
    factor: int = 2  # tau <- floor(tau / factor)
    relax: bool = False  # Sec. 6.4: tau += relax_step after relax_after decreasing rounds, until the first halving
    relax_after: int = 10
    relax_step: int = 5
    warmup: int = 0  # rounds before C_r is compared (0: the paper's rule; the EMAs fill from zero meanwhile)

    def rules(self) -> Iterator[Rule]:
        yield is_int(self.tau0) and self.tau0 >= 1, "tau0", "must be an integer >= 1", DEFAULT
        yield is_unit(self.beta), "beta", "must be in [0, 1)", DEFAULT
        for key, low, fix in (("patience", 1, "2"), ("factor", 2, "2"), ("relax_after", 1, "10"),
                              ("relax_step", 1, "5"), ("warmup", 0, "0")):
            value = getattr(self, key)
            yield is_int(value) and value >= low, key, f"must be an integer >= {low}", fix
