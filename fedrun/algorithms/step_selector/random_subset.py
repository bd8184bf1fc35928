"""The control for BHerd's selection: as many steps, drawn at random."""

from __future__ import annotations

import numpy as np

from fedrun.algorithms.step_selector.herd import Herd

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
