"""The default: no privacy mechanism."""

from __future__ import annotations

from dataclasses import dataclass

from fedrun.algorithms.base import State, StatefulPart
from fedrun.algorithms.part_config import PartConfig, register
from fedrun.process.lazy import torch


class NoPrivacy(StatefulPart):
    """The aggregator's output from the updates as the clients sent them."""

    name = "none"
    releases_without_clients = False  # a round no client joined releases nothing: the model stays

    def release(self, state: State, updates: torch.Tensor, weights: torch.Tensor, uploads: dict, aggregate, rnd: int
                ) -> tuple[State, torch.Tensor, dict[str, float]]:
        """(new state, what the server optimiser gets, the round's metrics.csv columns)."""
        return state, aggregate(updates, weights, uploads), {}

    def spent(self, state: State) -> dict[str, float]:
        """What an evaluated round's row says of the privacy spent so far (nothing here)."""
        return {}


@register
@dataclass
class NoPrivacyConfig(PartConfig):
    """The server sees every update as its client sent it."""

    part, target, options = "privacy", "fedrun.algorithms.privacy.none.NoPrivacy", ("none",)
    name: str = "none"
