"""The typed config of each option of algo/step_selector: its settings, their defaults and ranges, registered as the
schema its YAML (conf/algo/step_selector/) extends. No torch: checking a config needs none."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

from omegaconf import II

from fedrun.algorithms.schema import PartConfig, is_int, is_number, register
from fedrun.config.schema import DEFAULT, Rule


@register
@dataclass
class AllStepsConfig(PartConfig):
    part, target, options = "step_selector", "fedrun.algorithms.step_selector.all_steps.AllSteps", ("all",)
    name: str = "all"
    reshuffle: bool = True  # default of fl.reshuffle: random reshuffling, as the BHerd paper's baselines

    def arguments(self) -> dict[str, Any]:
        return {}


@register
@dataclass
class HerdConfig(PartConfig):
    part, target, options = "step_selector", "fedrun.algorithms.step_selector.herd.Herd", ("herd",)
    name: str = "herd"
    alpha: float = 0.5  # BHerd's alpha, the fraction of steps sent (the Dirichlet alpha is partition.alpha)
    local_epochs: float = II("fl.local_epochs")  # E of eq. 6
    reshuffle: bool = False  # default of fl.reshuffle: BHerd Sec. III-A, a fixed order (Fig. 7: fl.reshuffle=true)

    def rules(self) -> Iterator[Rule]:
        yield (is_number(self.alpha) and 0 < self.alpha <= 1, "alpha",
               "must be in (0, 1] (the fraction of each client's steps that is sent; 1: every step, FedAvg)", DEFAULT)
        yield (is_number(self.local_epochs) and self.local_epochs > 0, "local_epochs", "must be > 0",
               DEFAULT)


@register
@dataclass
class GraBConfig(HerdConfig):
    part, target, options = "step_selector", "fedrun.algorithms.step_selector.grab.GraB", ("grab",)
    name: str = "grab"


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
