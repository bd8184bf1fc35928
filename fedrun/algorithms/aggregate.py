"""Aggregation of the round's client updates on the server."""

from __future__ import annotations

import torch


class WeightedMean:
    """sum_i p_i * update_i, p_i = n_i / sum_j n_j over the round's clients (BHerd eq. 7; NOTES.md 'Common')."""

    name = "mean"

    def __call__(self, updates: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        return weights.to(updates.dtype) @ updates


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
