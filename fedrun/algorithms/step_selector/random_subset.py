"""The control for BHerd's selection: as many steps, drawn at random."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from omegaconf import II

from fedrun.algorithms.part_config import is_int, register
from fedrun.algorithms.step_selector.herd import Herd, HerdConfig
from fedrun.config.schema import DEFAULT, Rule
from fedrun.process.lazy import numpy as np

_RANDOM_SUBSET = 0x5E1EC7  # the stream of its draws, apart from every other seeded draw


class RandomSubset(Herd):
    """The control for BHerd's selection: the same eqs. 5-6 (alpha*tau_i steps summed, server step eta E / alpha)
    with the steps drawn uniformly at random, without replacement, from (seed, round, client). What BHerd gains over
    it is what herding's choice adds; what both lose to FedAvg is the cost of sending a subset of the steps."""

    name = "random"

    def __init__(self, alpha: float, local_epochs: float, seed: int):
        super().__init__(alpha, local_epochs)
        self.seed = int(seed)

    def order(self, state, z, client, rnd, k, device, block=None):
        return np.random.default_rng([self.seed, _RANDOM_SUBSET, rnd, client]).permutation(len(z)).tolist()


@register
@dataclass
class RandomSubsetConfig(HerdConfig):
    """The control of herding: as many steps, taken at random."""

    part, target, options = "step_selector", "fedrun.algorithms.step_selector.random_subset.RandomSubset", ("random",)
    name: str = "random"
    seed: int = II("seed")

    def rules(self) -> Iterator[Rule]:
        yield from super().rules()
        yield is_int(self.seed), "seed", "must be an integer", DEFAULT
