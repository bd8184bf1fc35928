"""The fixed schedule: tau_i = floor(E n_i / B), or a given tau (FedAvg's, BHerd's, GIFT Table 1's baseline)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Optional

from fedrun.algorithms.base import State, StatefulPart
from fedrun.algorithms.schedule.feedback import Probing, RoundFeedback
from fedrun.algorithms.part_config import PartConfig, is_int, register
from fedrun.config.schema import DEFAULT, Rule


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


@register
@dataclass
class FixedScheduleConfig(PartConfig):
    part, target, options = "schedule", "fedrun.algorithms.schedule.fixed.FixedSchedule", ("fixed",)
    name: str = "fixed"
    tau: Optional[int] = None  # null: tau_i = floor(E n_i / B)
    switch_round: Optional[int] = None  # from this round on every client takes switch_tau steps (GIFT Fig. 3)
    switch_tau: Optional[int] = None

    def rules(self) -> Iterator[Rule]:
        yield (self.tau is None or (is_int(self.tau) and self.tau >= 1), "tau",
               "must be null (tau_i = floor(E n_i / B)) or an integer >= 1", DEFAULT)
        yield (self.switch_round is None or (is_int(self.switch_round) and self.switch_round >= 2), "switch_round",
               "must be null (no switch) or the round (>= 2) from which every client takes switch_tau steps", DEFAULT)
        yield (self.switch_round is None or (is_int(self.switch_tau) and self.switch_tau >= 1), "switch_tau",
               "must be an integer >= 1 when switch_round is set (GIFT Fig. 3: 1)", "1")
