"""The default selector: every local step counts (FedAvg and every base that herds nothing)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedrun.algorithms.base import State, StatefulPart
from fedrun.algorithms.part_config import PartConfig, register
from fedrun.process.lazy import torch


class AllSteps(StatefulPart):
    """Every local step counts: the client sends its whole update w_i - w_t."""

    name = "all"
    records_steps = False

    def finish(self, state: State, updates: torch.Tensor, selection, plans, uploads: dict, weights: torch.Tensor):
        """(new state, updates to send, uploads, the round's metrics.csv columns of the selector). A selector that
        ``records_steps`` makes ``selection`` on the clients' side first (``select``); this one records none."""
        return state, updates, uploads, {}


@register
@dataclass
class AllStepsConfig(PartConfig):
    part, target, options = "step_selector", "fedrun.algorithms.step_selector.all_steps.AllSteps", ("all",)
    name: str = "all"
    reshuffle: bool = True  # default of fl.reshuffle: random reshuffling, as the BHerd paper's baselines

    def arguments(self) -> dict[str, Any]:
        return {}
