"""The typed config of each option of algo/harmonizer: its settings, their defaults and ranges, registered as the schema
its YAML (conf/algo/harmonizer/) extends. No torch: checking a config needs none."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from omegaconf import II

from fedrun.algorithms.schema import PartConfig, is_int, is_unit, register
from fedrun.config.schema import DEFAULT, Rule

# the harmoniser's own rule | norm_only: the control, the clients' own updates scaled so that the aggregate is as
# long as the harmoniser's (a longer server step without its directions)
FEDGH_MODES = ("project", "norm_only")
DGT_MODES = ("calibrate", "norm_only")


@register
@dataclass
class NoHarmonizerConfig(PartConfig):
    part, target, options = "harmonizer", "fedrun.algorithms.harmonizer.none.NoHarmonizer", ("none",)
    name: str = "none"


@register
@dataclass
class FedGHConfig(PartConfig):
    part, target, options = "harmonizer", "fedrun.algorithms.harmonizer.fedgh.FedGH", ("fedgh", "fedgh_norm_only")
    name: str = "fedgh"
    seed: int = II("seed")  # the random order in which conflicting pairs are projected
    mode: str = "project"  # project (FedGH) | norm_only (FEDGH_MODES)

    def rules(self) -> Iterator[Rule]:
        yield is_int(self.seed), "seed", "must be an integer", DEFAULT
        yield self.mode in FEDGH_MODES, "mode", f"must be one of {FEDGH_MODES}", DEFAULT


@register
@dataclass
class DGTConfig(PartConfig):
    part, target, options = "harmonizer", "fedrun.algorithms.harmonizer.dgt.DGT", ("dgt", "dgt_norm_only")
    name: str = "dgt"
    momentum: float = 0.5  # of each client's baseline
    mode: str = "calibrate"  # calibrate (DGT) | norm_only (DGT_MODES)

    def rules(self) -> Iterator[Rule]:
        yield is_unit(self.momentum), "momentum", "must be in [0, 1)", DEFAULT
        yield self.mode in DGT_MODES, "mode", f"must be one of {DGT_MODES}", DEFAULT
