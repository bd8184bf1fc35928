"""Aggregation of the round's client updates on the server."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from fedrun.algorithms.part_config import PartConfig, register
from fedrun.config.schema import DEFAULT, Rule
from fedrun.process.lazy import torch


class WeightedMean:
    """sum_i p_i * update_i (BHerd eq. 7). ``weighting=samples``: p_i = n_i / sum_j n_j over the round's clients
    (NOTES.md 'Common'); ``uniform``: p_i = 1/K (Per-FedAvg, FedDyn and DGT's Algorithm 1 as printed). The round's
    clients are those that reported: with dropouts the weights renormalise over them (K the number that arrived)."""

    name = "mean"

    def __init__(self, weighting: str):
        self.weighting = weighting

    def weights(self, sizes: torch.Tensor) -> torch.Tensor:
        """p_i of the round's clients from their sample counts n_i (float64; ``weighting``)."""
        sizes = sizes.to(torch.float64)
        if self.weighting == "uniform":
            sizes = torch.ones_like(sizes)
        return sizes / sizes.sum()

    def __call__(self, updates: torch.Tensor, weights: torch.Tensor, uploads: dict) -> torch.Tensor:
        return weights.to(updates.dtype) @ updates


class FedNova(WeightedMean):
    """FedNova's normalised averaging (Wang et al. 2020, eqs. 6-7; reference-rules.md §5):
    tau_eff = sum_i p_i a_i and update = tau_eff * sum_i p_i (w_i - w_t) / a_i, with a_i the normaliser each client
    reports (``a`` upload: tau_i for plain SGD, the momentum and proximal forms otherwise), p_i renormalised over the
    clients that reported, as the mean's. With plain SGD and equal tau_i this is FedAvg. (The reference code uses
    sum_i p_i tau_i for tau_eff when the proximal term is on, a [QUIRK] no paper's result depends on; fedrun follows
    the paper.)"""

    name = "fednova"

    def __call__(self, updates: torch.Tensor, weights: torch.Tensor, uploads: dict) -> torch.Tensor:
        a = uploads["a"].to(updates.dtype)
        w = weights.to(updates.dtype)
        return (w @ a) * ((w / a) @ updates)


def aggregate_buffers(buffers: list[dict[str, torch.Tensor]], weights: torch.Tensor) -> dict[str, torch.Tensor]:
    """Non-trainable state (BatchNorm running mean/var): weighted mean of floats; counters take the maximum."""
    if not buffers or not buffers[0]:
        return {}
    out = {}
    for name in buffers[0]:
        stacked = torch.stack([b[name] for b in buffers])
        if stacked.is_floating_point():
            out[name] = torch.tensordot(weights.to(stacked.dtype), stacked, dims=1)
        else:
            out[name] = stacked.max(dim=0).values
    return out


@register
@dataclass
class MeanConfig(PartConfig):
    """The weighted mean of the updates: ``samples``: p_i = n_i / n (NOTES.md 'Common'); ``uniform``: p_i = 1/K
    (Per-FedAvg, FedDyn and DGT's Algorithm 1 as printed)."""

    part, target, options = "aggregator", "fedrun.algorithms.aggregator.weighted.WeightedMean", ("mean",)
    name: str = "mean"
    weighting: str = "samples"

    def rules(self) -> Iterator[Rule]:
        yield self.weighting in ("samples", "uniform"), "weighting", "must be samples or uniform", DEFAULT


@register
@dataclass
class FedNovaConfig(MeanConfig):
    part, target, options = "aggregator", "fedrun.algorithms.aggregator.weighted.FedNova", ("fednova",)
    name: str = "fednova"
