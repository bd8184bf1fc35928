"""AdaComm (Wang and Joshi): tau from the training loss at the new global model against the first round's."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Optional

from fedrun.algorithms.base import State, StatefulPart
from fedrun.algorithms.schedule.feedback import Probing, RoundFeedback
from fedrun.algorithms.part_config import PartConfig, is_int, is_number, register
from fedrun.config.schema import DEFAULT, Rule


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


@register
@dataclass
class AdaCommConfig(PartConfig):
    part, target, options = "schedule", "fedrun.algorithms.schedule.adacomm.AdaComm", ("adacomm",)
    name: str = "adacomm"
    tau0: int = 100  # initial local iterations (the paper picks it by grid search)
    interval_s: Optional[float] = None  # null: a new tau every round (Paddle); seconds: every interval (timing)
    form: str = "paper"  # paper: sqrt(ratio) * tau0 | paddle: sqrt(ratio * tau0)
    halve_on_plateau: bool = True  # when F did not decrease over an interval, halve tau instead (GIFT Sec. 6.3)
    tau_max: Optional[int] = None  # cap on tau (Paddle uses 16); null: none

    def rules(self) -> Iterator[Rule]:
        yield is_int(self.tau0) and self.tau0 >= 1, "tau0", "must be an integer >= 1", DEFAULT
        yield (self.interval_s is None or (is_number(self.interval_s) and self.interval_s > 0), "interval_s",
               "must be null (every round) or > 0 seconds of simulated time (with timing=simulated)", DEFAULT)
        yield self.form in ("paper", "paddle"), "form", "must be paper or paddle", DEFAULT
        yield (self.tau_max is None or (is_int(self.tau_max) and self.tau_max >= 1), "tau_max",
               "must be null or an integer >= 1", DEFAULT)
