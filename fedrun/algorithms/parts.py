"""The default parts of the plug points that later papers fill: client-side update selection (BHerd, GraB),
harmonisers (FedGH, DGT) and synchronisation schedules (GIFT, AFL, AdaComm)."""

from __future__ import annotations

import math

import torch


class AllSteps:
    """Every local step counts: the client sends its whole update w_i - w_t."""

    name = "all"
    records_steps = False

    def __call__(self, updates: torch.Tensor, steps, plans, uploads: dict, lr: float):
        return updates, uploads, {}


class NoHarmonizer:
    """Leaves the round's stacked client updates (K, d) as they are."""

    name = "none"

    def __call__(self, updates: torch.Tensor, weights: torch.Tensor, clients: list[int], rnd: int) -> torch.Tensor:
        return updates


class FixedSchedule:
    """Each client takes tau_i = floor(E |D_i| / B) local steps every round, at least 1 (BHerd Sec. III-A)."""

    name = "fixed"

    def local_steps(self, num_samples: int, epochs: float, batch_size: int) -> int:
        return max(1, math.floor(epochs * num_samples / batch_size + 1e-9))
