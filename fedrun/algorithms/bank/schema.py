"""The typed config of each option of algo/bank: its settings, their defaults and ranges, registered as the schema its
YAML (conf/algo/bank/) extends. No torch: checking a config needs none."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterator, Optional


from fedrun.algorithms.schema import PartConfig, is_int, is_number, is_unit, register
from fedrun.config.schema import DEFAULT, Rule

FORMS = ("paper", "adam")  # the bank's central acceleration, eq. 64 as printed or Adam's
GROUPINGS = ("kmeans", "preference")


@register
@dataclass
class NoBankConfig(PartConfig):
    """One global model."""

    part, target, options = "bank", "fedrun.algorithms.bank.bank.ModelBank", ("none",)
    name: str = "none"

    def arguments(self) -> dict[str, Any]:  # a bank of one model: the bank's settings are never read
        return {"kind": "none", "ga_step": None} | {f.name: f.default for f in dataclasses.fields(BankConfig)
                                                     if f.name != "name"}


@register
@dataclass
class BankConfig(PartConfig):
    """MA-/GA-FSVRG's C diversified global models (Zhao et al.)."""

    part, target, options = "bank", "fedrun.algorithms.bank.bank.ModelBank", ("ma",)
    name: str = "ma"
    models: int = 4  # C, the number of diversified global models
    threshold: int = 4  # T: rounds 1..T train one model (plain FSVRG), the bank starts at round T + 1
    alpha_g: float = 0.02  # alpha_g^0 of eq. 64
    beta1: float = 0.0  # first-moment decay (eq. 62); the MNIST figures use 0.0, CIFAR-10 0.9
    beta2: float = 0.999  # second-moment decay (eq. 63)
    eps: float = 1.0e-8  # epsilon of eq. 64
    form: str = "adam"  # adam: Adam's bias-corrected step on eqs. 62-63's moments | paper: eq. 64 as printed
    kmeans_eps: float = 1.0e-4  # the eq. 42 stopping sum
    kmeans_max_iter: int = 100
    center_seeds: bool = False  # eqs. 39/53 as printed (anchors projected uncentred); true: centred like the clients
    grouping: str = "kmeans"  # kmeans (Zhao et al.) | preference: each client grouped with the model it preferred

    def arguments(self) -> dict[str, Any]:
        return {"kind": self.name, "ga_step": None, **super().arguments()}  # MA has no GA step

    def rules(self) -> Iterator[Rule]:
        yield (is_int(self.models) and self.models >= 1, "models",
               "must be an integer >= 1 (C; 4 in Zhao et al.'s MNIST runs)", DEFAULT)
        yield is_int(self.threshold) and self.threshold >= 0, "threshold", "must be an integer >= 0", DEFAULT
        yield (is_number(self.alpha_g) and self.alpha_g >= 0, "alpha_g", "must be >= 0 (0: no central acceleration)",
               DEFAULT)
        yield is_unit(self.beta1), "beta1", "must be in [0, 1)", DEFAULT
        yield is_unit(self.beta2), "beta2", "must be in [0, 1)", DEFAULT
        yield is_number(self.eps) and self.eps > 0, "eps", "must be > 0", "1e-8"
        yield self.form in FORMS, "form", f"must be one of {FORMS}", DEFAULT
        yield is_number(self.kmeans_eps) and self.kmeans_eps > 0, "kmeans_eps", "must be > 0", "1e-4"
        yield (is_int(self.kmeans_max_iter) and self.kmeans_max_iter >= 1, "kmeans_max_iter",
               "must be an integer >= 1", DEFAULT)
        yield self.grouping in GROUPINGS, "grouping", f"must be one of {GROUPINGS}", DEFAULT


@register
@dataclass
class GABankConfig(BankConfig):
    part, target, options = "bank", "fedrun.algorithms.bank.bank.ModelBank", ("ga",)
    name: str = "ga"
    ga_step: Optional[float] = None  # eq. 58's step; null: the clients' mean alpha_l / n_i x mean local steps

    def rules(self) -> Iterator[Rule]:
        yield from super().rules()
        yield (self.ga_step is None or (is_number(self.ga_step) and self.ga_step > 0), "ga_step",
               "must be null (from the clients' steps) or > 0", DEFAULT)
