"""The typed config of each option of algo/aggregator: its settings, their defaults and ranges, registered as the schema
its YAML (conf/algo/aggregator/) extends. No torch: checking a config needs none."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator


from fedrun.algorithms.schema import PartConfig, register
from fedrun.config.schema import DEFAULT, Rule


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
