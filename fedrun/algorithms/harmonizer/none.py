"""The default harmoniser: the round's updates as the clients sent them."""

from __future__ import annotations

from dataclasses import dataclass

from fedrun.algorithms.base import State, StatefulPart
from fedrun.algorithms.part_config import PartConfig, register
from fedrun.process.lazy import torch


class NoHarmonizer(StatefulPart):
    """Leaves the round's stacked client updates (K, d) as they are."""

    name = "none"

    def __call__(self, state: State, updates: torch.Tensor, weights: torch.Tensor, clients: list[int], rnd: int
                 ) -> tuple[State, torch.Tensor, dict[str, float]]:
        """(new state, harmonised updates, the round's metrics.csv columns of the harmoniser)."""
        return state, updates, {}


@register
@dataclass
class NoHarmonizerConfig(PartConfig):
    part, target, options = "harmonizer", "fedrun.algorithms.harmonizer.none.NoHarmonizer", ("none",)
    name: str = "none"
