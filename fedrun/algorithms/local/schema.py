"""The typed config of each option of algo/local: its settings, their defaults and ranges, registered as the schema its
YAML (conf/algo/local/) extends. No torch: checking a config needs none."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from omegaconf import II


from fedrun.algorithms.schema import PartConfig, is_number, is_unit, register
from fedrun.config.schema import DEFAULT, Rule

SCALINGS = ("features", "none")  # fsvrg: S_i from the features' frequencies, or none
OMEGAS = ("all", "round")  # fsvrg: A from all clients' data, or this round's


@register
@dataclass
class SGDConfig(PartConfig):
    """Local SGD (BHerd eq. 1); mu > 0 adds FedProx's proximal term (mu = 0 is FedAvg)."""

    part, target, options = "local", "fedrun.algorithms.local.sgd.LocalSGD", ("sgd",)
    name: str = "sgd"
    mu: float = 0.0

    def rules(self) -> Iterator[Rule]:
        yield is_number(self.mu) and self.mu >= 0, "mu", "must be >= 0 (FedProx's proximal weight; 0: none)", "0.01"


@register
@dataclass
class ScaffoldConfig(SGDConfig):
    part, target, options = "local", "fedrun.algorithms.local.sgd.Scaffold", ("scaffold",)
    name: str = "scaffold"


@register
@dataclass
class FedDynConfig(SGDConfig):
    part, target, options = "local", "fedrun.algorithms.local.sgd.FedDyn", ("feddyn",)
    name: str = "feddyn"
    alpha: float = 0.01  # FedDyn's regulariser weight

    def rules(self) -> Iterator[Rule]:
        yield from super().rules()
        yield is_number(self.alpha) and self.alpha > 0, "alpha", "must be > 0 (the server divides by it)", DEFAULT


@register
@dataclass
class DPSGDConfig(SGDConfig):
    """DP-SGD inside each client (Abadi et al. 2016): per-sample gradients clipped to ``clip``, noised with
    ``noise_multiplier`` x clip, averaged over the minibatch."""

    part, target, options = "local", "fedrun.algorithms.local.dpsgd.DPSGD", ("dpsgd",)
    name: str = "dpsgd"
    clip: float = 1.0
    noise_multiplier: float = 1.0
    delta: float = 1e-5
    batch_size: int = II("fl.batch_size")

    def rules(self) -> Iterator[Rule]:
        yield from super().rules()
        yield is_number(self.clip) and self.clip > 0, "clip", "must be > 0", DEFAULT
        yield is_number(self.noise_multiplier) and self.noise_multiplier >= 0, "noise_multiplier", "must be >= 0", \
            DEFAULT
        yield is_number(self.delta) and 0 < self.delta < 1, "delta", "must be in (0, 1)", DEFAULT
        yield isinstance(self.batch_size, int) and self.batch_size >= 1, "batch_size", \
            "must be an integer >= 1 (fl.batch_size)", "64"


@register
@dataclass
class FedDecorrConfig(SGDConfig):
    part, target, options = "local", "fedrun.algorithms.local.sgd.FedDecorr", ("feddecorr",)
    name: str = "feddecorr"
    beta: float = 0.1  # weight of the decorrelation loss

    def rules(self) -> Iterator[Rule]:
        yield from super().rules()
        yield is_number(self.beta) and self.beta >= 0, "beta", "must be >= 0 (0: plain local SGD)", DEFAULT


@register
@dataclass
class PerFedAvgConfig(PartConfig):
    part, target, options = "local", "fedrun.algorithms.local.perfedavg.PerFedAvg", ("perfedavg",)
    name: str = "perfedavg"
    beta: float = 1.0e-3  # the meta step
    variant: str = "fo"  # fo (first-order) | hf (Hessian-free)
    delta: float = 1.0e-3  # the Hessian-free finite difference

    def rules(self) -> Iterator[Rule]:
        yield is_number(self.beta) and self.beta > 0, "beta", "must be > 0", DEFAULT
        yield self.variant in ("fo", "hf"), "variant", "must be fo (first-order) or hf (Hessian-free)", DEFAULT
        yield is_number(self.delta) and self.delta > 0, "delta", "must be > 0", DEFAULT


@register
@dataclass
class MimeConfig(PartConfig):
    part, target, options = "local", "fedrun.algorithms.local.variance_reduced.MimeSVRG", ("mime",)
    name: str = "mime"
    momentum: float = 0.9
    weighting: str = "uniform"  # how the full gradients are averaged into c: uniform (paper) | samples (fedjax)

    def rules(self) -> Iterator[Rule]:
        yield is_unit(self.momentum), "momentum", "must be in [0, 1)", DEFAULT
        yield self.weighting in ("uniform", "samples"), "weighting", "must be uniform or samples", DEFAULT


@register
@dataclass
class LoSACConfig(PartConfig):
    part, target, options = "local", "fedrun.algorithms.local.variance_reduced.LoSAC", ("losac",)
    name: str = "losac"


@register
@dataclass
class FSVRGConfig(PartConfig):
    part, target, options = "local", "fedrun.algorithms.local.fsvrg.FSVRG", ("fsvrg",)
    name: str = "fsvrg"
    # features: Lambda_i and A_r from the clients' non-zero feature counts (model=logreg) | none: identity
    scaling: str = "features"
    omega: str = "all"  # A_r of eq. 59 counts omega^j over all machines (as printed) | round: the round's clients

    def rules(self) -> Iterator[Rule]:
        yield self.scaling in SCALINGS, "scaling", f"must be one of {SCALINGS}", DEFAULT
        yield self.omega in OMEGAS, "omega", f"must be one of {OMEGAS}", DEFAULT
